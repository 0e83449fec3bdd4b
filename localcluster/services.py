"""Services beside the control plane (an extender, an evictor) as child processes.

``ServiceProcess`` is a ``Process`` on a loopback port: ``argv(port)`` runs with its output
in a log file (optionally from a directory, on some CPUs only), ``start()`` waits until
its readiness URL answers 200 while checking that it is still alive, ``stop()`` sends
SIGTERM, then SIGKILL. The harness knows nothing of what the service is.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import urllib3

from .processes import ComponentError, Process, free_port, tail


class ServiceProcess(Process):
    """``argv(port)`` as a child process listening on ``port`` (default: a free one).

    ``ready_path`` (e.g. ``/readyz``) is polled on ``url`` by ``start()`` for up to
    ``ready_timeout`` seconds; ``None`` starts it without waiting (a service that serves
    nothing, or nothing to wait for). ``stop()`` gives it ``stop_timeout`` seconds after
    SIGTERM.
    """

    def __init__(
        self,
        name: str,
        argv: Callable[[int], Sequence[str]],
        log_path: Path,
        *,
        port: int | None = None,
        cwd: Path | None = None,
        cpus: Collection[int] | None = None,
        ready_path: str | None = "/readyz",
        ready_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.port = port if port is not None else free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(name, argv(self.port), log_path, cwd=cwd, cpus=cpus)
        self.ready_path = ready_path
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout

    def start(self) -> None:
        """Start it and wait until it is ready; stop it again if it is not."""
        super().start()
        if self.ready_path is None:
            return
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def wait_ready(self) -> None:
        """Poll ``url + ready_path`` until it answers 200; raise ``ComponentError`` if the
        process exits or ``ready_timeout`` passes first."""
        url = f"{self.url}{self.ready_path or '/'}"
        pool = urllib3.PoolManager(num_pools=1, maxsize=1)
        deadline = time.monotonic() + self.ready_timeout
        try:
            while time.monotonic() < deadline:
                self.check_alive()
                with contextlib.suppress(urllib3.exceptions.HTTPError, OSError):
                    response = pool.request("GET", url, timeout=1.0, retries=False)
                    if response.status == 200:
                        return
                time.sleep(0.1)
        finally:
            pool.clear()
        raise ComponentError(
            f"{self.name} was not ready in {self.ready_timeout:.0f}s ({url}); "
            f"log tail:\n{tail(self.log_path, 40)}"
        )

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` (default ``stop_timeout``) seconds."""
        super().stop(self.stop_timeout if timeout is None else timeout)
