"""A background thread that does one round of work every few seconds until stopped."""

from __future__ import annotations

import threading
from typing import Self


class PeriodicWorker:
    """Calls :meth:`tick` every ``interval_seconds`` in a daemon thread named ``name``."""

    def __init__(self, name: str, interval_seconds: float) -> None:
        self.interval_seconds = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.interval_seconds)

    def tick(self) -> None:
        """One round of work; exceptions it does not handle end the thread."""
        raise NotImplementedError
