"""Honest health: Muster's background threads report what is wrong with them.

Every informer, the PostFilter loop and each leader chore is a
:class:`Watched` thread: an exception in one round is logged with its traceback
and the thread goes on (the next round may succeed), but while rounds keep failing,
or if the thread is gone, it has a *problem*.  :class:`Health` gathers them:
``/readyz`` fails at once while there is one (kube-scheduler's extender calls go to
a ready replica), ``/healthz`` once one has lasted ``grace_seconds`` (the kubelet
restarts the pod), and a thread that died and stays dead that long makes the process
exit non-zero (:meth:`Health.watch`), so Kubernetes restarts it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from base.times import format_time

log = logging.getLogger(__name__)


class Watched:
    """A background thread's health: alive, and its last round's outcome."""

    name: str
    _thread: threading.Thread

    def _init_health(self) -> None:
        self._failing_since: float | None = None
        self._last_error = ""
        self._stopping = False

    def round_failed(self, error: BaseException, now: float) -> None:
        log.error("%s: a round failed", self.name, exc_info=error)
        if self._failing_since is None:
            self._failing_since = now
        self._last_error = f"{type(error).__name__}: {error}"

    def round_succeeded(self) -> None:
        self._failing_since = None

    def problem(self) -> tuple[str, float] | None:
        """What is wrong, and since when (``0.0``: for as long as can be said)."""
        if self.dead():
            return f"{self.name}: its thread died", 0.0
        if self._failing_since is not None:
            since = format_time(self._failing_since)
            return f"{self.name}: failing since {since}: {self._last_error}", self._failing_since
        return None

    def dead(self) -> bool:
        return self._thread.ident is not None and not self._thread.is_alive() and not self._stopping


class Health:
    """The problems of every registered :class:`Watched` thread."""

    def __init__(self, *, grace_seconds: float = 60.0, clock: Callable[[], float] = time.time):
        self.grace_seconds = grace_seconds
        self.clock = clock
        self._parts: list[Watched] = []
        self._dead_since: dict[str, float] = {}

    def add(self, part: Watched) -> None:
        self._parts.append(part)

    def problems(self) -> list[str]:
        """Everything wrong now (``/readyz``)."""
        return [found[0] for part in self._parts if (found := part.problem()) is not None]

    def lasting_problems(self) -> list[str]:
        """The problems that have lasted ``grace_seconds`` (``/healthz``)."""
        now = self.clock()
        lasting = []
        for part in self._parts:
            found = part.problem()
            if found is None:
                self._dead_since.pop(part.name, None)
                continue
            text, since = found
            if since == 0.0:  # dead: counted from when it was first seen dead
                since = self._dead_since.setdefault(part.name, now)
            if now - since >= self.grace_seconds:
                lasting.append(text)
        return lasting

    def watch(self, interval_seconds: float = 5.0) -> threading.Thread:
        """Exit the process (status 1) once a thread has stayed dead ``grace_seconds``:
        nothing inside can bring it back; a restart can."""

        def run() -> None:
            while True:
                time.sleep(interval_seconds)
                dead = [p.name for p in self._parts if p.dead()]
                lasting = [text for text in self.lasting_problems() if "thread died" in text]
                if dead and lasting:
                    log.critical("exiting: %s", "; ".join(lasting))
                    logging.shutdown()
                    os._exit(1)

        thread = threading.Thread(target=run, name="health watchdog", daemon=True)
        thread.start()
        return thread
