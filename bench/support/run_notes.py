"""What a benchmark run says about itself: progress lines, the machine, the code measured.

``log`` writes a timestamped line to stderr (the results go to stdout); ``machine_notes``
describes the machine (CPUs, memory, Python, load) and ``muster_tree_state`` the Muster
code in the working tree (HEAD, and a fingerprint of uncommitted changes), both printed
with the results.  ``export_muster`` copies Muster's code at a commit out of the checkout,
so that a long run measures that code whatever happens to the working tree meanwhile
(:class:`bench.support.processes.MusterServer` runs from the copy).  ``ROOT`` is the
repository.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def muster_tree_state() -> str:
    """HEAD, and a fingerprint of uncommitted changes to Muster's code (base, extender,
    quota)."""
    diff = git("diff", "HEAD", "--", "base", "extender", "quota")
    head = git("rev-parse", "--short=12", "HEAD")
    if not diff:
        return f"{head} (clean)"
    return (
        f"{head} + uncommitted changes (diff sha1 {hashlib.sha1(diff.encode()).hexdigest()[:12]})"
    )


def export_muster(ref: str, workdir: Path) -> tuple[str, Path]:
    """``git archive`` Muster's code at ``ref`` into the workdir: Muster then runs from
    there, whatever happens to the working tree meanwhile (a shared checkout)."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    target = workdir / f"muster-src-{commit[:12]}"
    target.mkdir(parents=True, exist_ok=True)
    packages = [p for p in ("base", "extender", "quota") if git("ls-tree", commit, p)]
    archive = subprocess.run(
        ["git", "archive", commit, *packages], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return commit, target


def machine_notes() -> dict[str, Any]:
    load1, load5, load15 = os.getloadavg()
    meminfo = Path("/proc/meminfo").read_text().splitlines()[0].split()
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": round(int(meminfo[1]) / 1024 / 1024, 1),
        "python": platform.python_version(),
        "loadavg": [round(load1, 2), round(load5, 2), round(load15, 2)],
    }
