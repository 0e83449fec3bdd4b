"""Background threads that do one round of work every few seconds until stopped: the
generic :class:`PeriodicWorker`, and :class:`LeaderWorker` for the leader's chores."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Self

import httpx

from extender.kube.client import ApiError
from extender.kube.health import Watched
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter

log = logging.getLogger(__name__)


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


class LeaderWorker(PeriodicWorker):
    """The leader's periodic chores over the live cluster: each round, while the source
    has synced and this replica leads, every chore runs with the time; an API error in
    one is logged and the others still run (a bug is the worker's health's business)."""

    def __init__(
        self,
        name: str,
        source: KubeSource,
        writer: ClusterWriter,
        *,
        interval_seconds: float,
        clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(name, interval_seconds)
        self.source = source
        self.writer = writer
        self.clock = clock
        self.is_leader = is_leader

    def tick(self) -> None:
        if not self.source.ready() or not self.is_leader():
            self.not_leading()
            return
        now = self.clock()
        for chore in self.chores():
            try:
                chore(now)
            except (ApiError, httpx.HTTPError) as error:
                log.warning("%s: %s", self.name, error)

    def chores(self) -> Sequence[Callable[[float], object]]:
        """The round's work, in order."""
        raise NotImplementedError

    def not_leading(self) -> None:
        """Called for each round skipped (not synced, or not the leader)."""
