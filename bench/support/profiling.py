"""``py-spy`` attached to a process for a block, and the hottest functions it saw.

:func:`py_spy` records collapsed stacks into ``PREFIX.txt`` and a flame graph into
``PREFIX.svg`` (of the samples in which a thread holds the GIL: the interpreter's CPU,
without the waits py-spy cannot tell from work) while the block runs (py-spy must be
installed); :func:`summarize_profile`
ranks the functions of such a file, by self and inclusive share of the samples in which the
process was busy (not waiting).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from bench.support.run_notes import log


@contextlib.contextmanager
def py_spy(pid: int, prefix: str) -> Iterator[None]:
    """``py-spy record`` on ``pid`` for the block: collapsed stacks in ``PREFIX.txt`` and a
    flame graph of the GIL holder's stacks in ``PREFIX.svg`` (two samplers side by side,
    each at 100 Hz: py-spy writes one format per recording; ``--nonblocking``, so neither
    pauses the process)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    processes = [
        subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(pid),
                "--rate",
                "100",
                "--nonblocking",
                "--format",
                form,
                "--output",
                f"{prefix}.{suffix}",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for form, suffix, extra in (("raw", "txt", []), ("flamegraph", "svg", ["--gil"]))
    ]
    time.sleep(1.0)  # let them attach
    try:
        yield
    finally:
        for process in processes:
            process.send_signal(signal.SIGINT)
        for process in processes:
            try:
                _, err = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                _, err = process.communicate()
            if process.returncode not in (0, -signal.SIGINT):
                log(f"py-spy exited {process.returncode}: {err.decode(errors='replace')[-500:]}")


def _frames(line: str) -> tuple[list[str], int]:
    """A collapsed-stack line: its frames, without line numbers, and its sample count."""
    stack, _, count = line.rpartition(" ")
    frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";") if frame]
    return frames, int(count) if count.isdigit() else 0


#: Innermost frames of a thread that is waiting (py-spy still counts some as active).
WAITING = (
    "EpollSelector.select (selectors.py)",
    "SSLSocket.read (ssl.py)",
    "Condition.wait (threading.py)",
    "Event.wait (threading.py)",
    "SyncStream.read (httpcore/_backends/sync.py)",
)


def summarize_profile(path: Path, top: int = 25) -> list[str]:
    """The hottest functions of a collapsed-stack file (``py-spy record --format raw``).

    Samples whose innermost frame is a wait (``WAITING``: the event loop's select, an
    informer's blocking read, an idle worker thread) are counted apart; the percentages
    are of the other ("busy") samples: the share in which a function is the innermost
    frame (self) or anywhere on the stack (inclusive)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = waiting = main = 0
    for line in path.read_text().splitlines():
        frames, count = _frames(line)
        if not frames or not count:
            continue
        total += count
        if frames[-1] in WAITING:
            waiting += count
            continue
        if "_run_module_as_main" in frames[0]:
            main += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    busy = total - waiting
    if not busy:
        return ["(no busy samples)"]
    lines = [
        f"{total} samples, {waiting} waiting ({100 * waiting / total:.1f}%); of the {busy} busy "
        f"ones, {100 * main / busy:.1f}% on the main thread (the event loop)"
    ]
    lines.append("self % of busy   function")
    lines += [f"{100 * n / busy:6.1f}   {f}" for f, n in own.most_common(top)]
    lines.append("incl % of busy   function")
    lines += [f"{100 * n / busy:6.1f}   {f}" for f, n in inclusive.most_common(3 * top)]
    return lines
