"""The OS processes of the control plane, their logs and their ports.

``Process`` starts one component (optionally from a directory, on some CPUs only) with its
output in a log file, and stops it (SIGTERM, then SIGKILL) or kills it; ``free_port``,
``free_ports`` and ``port_is_free`` pick and check loopback ports.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Collection, Sequence
from pathlib import Path

from .common import timestamp
from .waiting import wait_until


class ComponentError(RuntimeError):
    """A component failed to start, exited, or did not become ready in time."""


class Process:
    """One component: its command line, its log file, its OS process.

    ``cwd``: the directory it runs in (default: this process's); ``cpus``: the CPUs it may
    run on (default: this process's affinity, inherited).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        cwd: Path | None = None,
        cpus: Collection[int] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.cpus = None if cpus is None else frozenset(cpus)
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.running:
            raise ComponentError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = list(self.argv)
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            # Parent-death signal: the component gets SIGTERM if this process dies
            # without running its cleanup (e.g. SIGKILL). It is tied to the thread that
            # forks, hence main thread only.
            argv = [setpriv, "--pdeathsig", "TERM", "--", *argv]
        with self.log_path.open("ab") as log:
            log.write(f"\n===== {timestamp()} starting: {' '.join(self.argv)}\n".encode())
            log.flush()
            cpus = self.cpus
            self.popen = subprocess.Popen(
                argv,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
            )

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def check_alive(self) -> None:
        if self.popen is None:
            raise ComponentError(f"{self.name} was never started")
        code = self.popen.poll()
        if code is not None:
            raise ComponentError(
                f"{self.name} exited with status {code}; log tail:\n{tail(self.log_path, 40)}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL (``kill -9``): no chance to clean up."""
        self._end(signal.SIGKILL, 5.0)

    def _end(self, sig: signal.Signals, timeout: float) -> None:
        popen = self.popen
        if popen is None:
            return
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(sig)
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    popen.kill()
                popen.wait(5.0)
        with contextlib.suppress(OSError), self.log_path.open("ab") as log:
            log.write(f"===== {timestamp()} stopped (exit status {popen.returncode})\n".encode())
        self.popen = None


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a (possibly large) text file."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            block = min(size, max(4096, lines * 400))
            handle.seek(size - block)
            data = handle.read()
    except FileNotFoundError:
        return "(no log yet)"
    text = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports that are free on 127.0.0.1 right now, chosen
    below the kernel's ephemeral range: a port the kernel hands out for ``bind(0)`` comes
    from the range it also gives outgoing connections, which can take it before the
    component listens on it (seen: kube-apiserver failing with "address already in use"
    while the e2e tier's clients connected around it)."""
    low, high = listener_port_range()
    chosen: list[int] = []
    while len(chosen) < count:
        port = _random.randrange(low, high)
        if port not in chosen and port_is_free(port):
            chosen.append(port)
    return chosen


def listener_port_range() -> tuple[int, int]:
    """Ports for listeners: the 20,000 below the ephemeral range
    (``/proc/sys/net/ipv4/ip_local_port_range``, Linux's 32768 by default)."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    return max(1024, ephemeral_low - 20_000), ephemeral_low


#: Ports are drawn at random so that concurrent harnesses (pytest-xdist workers) rarely
#: draw the same one; each is checked free before it is handed out.
_random = random.SystemRandom()


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like Go's listeners: connections in TIME_WAIT do not keep the port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_port_released(port: int, timeout: float = 30.0) -> None:
    """Wait until nothing listens on ``port`` (a component stopped, to start again on it)."""
    wait_until(lambda: port_is_free(port), timeout=timeout, what=f"port {port} to be released")
