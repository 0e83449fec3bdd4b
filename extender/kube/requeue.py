"""The leader's nudges: make kube-scheduler retry parked pods that Muster would now admit.

Every second, when something changed that could matter (room only Muster sees:
:attr:`~extender.core.state.ClusterState.room_epoch`; a pod created; a pod parked or
its message changed), else every ``recheck_seconds``, the leader asks
:func:`extender.core.requeue.pods_to_requeue` which parked pods to retry, and patches
a ``muster.dev/requeue`` annotation on each, oldest first: any update makes
kube-scheduler move a parked pod back to its active queue.  A pod is nudged once
per rejection message, and again for the same message only after ``again_seconds``
(kube-scheduler may not have tried it yet).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

from base import keys
from base.times import format_time
from extender.core.gangsize import settled_gangs
from extender.core.requeue import pods_to_requeue
from extender.kube.source import KubeSource
from extender.kube.worker import LeaderWorker
from extender.kube.writer import ClusterWriter, best_effort

log = logging.getLogger(__name__)


class Requeuer(LeaderWorker):
    def __init__(
        self,
        source: KubeSource,
        writer: ClusterWriter,
        *,
        clock: Callable[[], float] = time.time,
        interval_seconds: float = 1.0,
        recheck_seconds: float = 10.0,
        again_seconds: float = 10.0,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(
            "requeue",
            source,
            writer,
            interval_seconds=interval_seconds,
            clock=clock,
            is_leader=is_leader,
        )
        self.recheck_seconds = recheck_seconds
        self.again_seconds = again_seconds
        self._nudged: dict[str, tuple[str, float]] = {}  # pod → (message, when)
        self._checked: tuple[tuple[int, int, int], frozenset[tuple[str, str]], float] | None = None
        self.nudges = 0

    def chores(self) -> Sequence[Callable[[float], object]]:
        return (self.nudge,)

    def nudge(self, now: float) -> list[str]:
        """Nudge the parked pods Muster would now admit; return them."""
        parked = self.source.parked()
        seen = frozenset(parked.items())
        with self.source.exclusive() as state:
            state.release_quota_holds(now)
            # Room only Muster sees, a pod more (a gang completing), or a gang of
            # undeclared size that stopped growing: worth a look now.
            epoch = (state.room_epoch, len(state.pods), settled_gangs(state, now))
            if self._checked is not None:
                last_epoch, last_seen, at = self._checked
                if epoch == last_epoch and seen == last_seen and now - at < self.recheck_seconds:
                    return []
            self._checked = (epoch, seen, now)
            pods = [state.pods[key] for key in pods_to_requeue(state, parked, now)]
        for key in list(self._nudged):
            if key not in parked:
                del self._nudged[key]
        stamp = format_time(now)
        nudged = []
        for pod in pods:
            message = parked[pod.key]
            last = self._nudged.get(pod.key)
            if last is not None and last[0] == message and now - last[1] < self.again_seconds:
                continue
            self._nudged[pod.key] = (message, now)
            patch = {"annotations": {keys.REQUEUE_ANNOTATION: stamp}}
            if best_effort(pod, partial(self.writer.patch_pod, metadata=patch)):
                nudged.append(pod.key)
        if nudged:
            self.nudges += len(nudged)
            log.info("requeued %d parked pods Muster now admits: %s", len(nudged), nudged[:5])
        return nudged
