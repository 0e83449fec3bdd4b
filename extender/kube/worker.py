"""A background thread that does one round of work every few seconds until stopped."""

from __future__ import annotations

import threading
import time
from typing import Self

from extender.kube.health import Watched


class PeriodicWorker(Watched):
    """Calls :meth:`tick` every ``interval_seconds`` in a daemon thread named ``name``.
    A round that raises is logged with its traceback and counts against the worker's
    health (:class:`~extender.kube.health.Watched`); the next round runs as usual."""

    def __init__(self, name: str, interval_seconds: float) -> None:
        self.name = name
        self.interval_seconds = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._init_health()

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as error:  # a bug in one round must not end the thread
                self.round_failed(error, time.time())
            else:
                self.round_succeeded()
            self._stop.wait(self.interval_seconds)

    def tick(self) -> None:
        """One round of work."""
        raise NotImplementedError
