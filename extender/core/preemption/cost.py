"""Lost work: what evicting a victim destroys, the victim's cost.

A victim loses the work it did since it last saved it: since its last checkpoint
(``muster.dev/last-checkpoint`` on its pods, written by the training code or its
operator; or, for a job declaring ``muster.dev/checkpoint-interval-seconds``, its last
save at that interval from its start), else since it started.  Measured in
accelerator-seconds (its requests of scarce resources, GPUs say, times those seconds)
and, for pods asking for none, pod-seconds.  The victim order takes the victim whose
work began latest first among victims of one priority (:mod:`extender.core.state.victims`),
and plans of equal rank compare by it (:mod:`.planner`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from base import keys
from base.resources import parse_quantity
from base.times import seconds
from extender.core.objects import PodInfo
from extender.core.placement.score import COMMON_RESOURCES

_ONE = parse_quantity("1")


class LostWork(NamedTuple):
    """Work lost to eviction: accelerator-seconds, then pod-seconds (pods asking for no
    accelerator); compared in that order."""

    accelerator_seconds: float
    pod_seconds: float


def last_save(pod: PodInfo, now: float) -> float:
    """When ``pod``'s unsaved work began: its last checkpoint or start
    (:attr:`PodInfo.work_started`), or its last save at its declared interval, whichever
    is later, and never after ``now``."""
    began = pod.work_started
    interval = _interval(pod)
    if interval is not None and now > pod.start_or_created:
        start = pod.start_or_created
        began = max(began, start + math.floor((now - start) / interval) * interval)
    return min(began, now)


def lost_work(pods: Iterable[PodInfo], now: float) -> LostWork:
    """The work ``pods`` lose if evicted at ``now``."""
    accelerators = plain = 0.0
    for pod in pods:
        seconds = now - last_save(pod, now)
        scarce = sum(
            amount for name, amount in pod.requests.items() if name not in COMMON_RESOURCES
        )
        if scarce > 0:
            accelerators += seconds * scarce / _ONE
        else:
            plain += seconds
    return LostWork(accelerators, plain)


def _interval(pod: PodInfo) -> float | None:
    return seconds(pod.annotations.get(keys.CHECKPOINT_INTERVAL_ANNOTATION)) or None
