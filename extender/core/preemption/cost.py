"""Lost work: what evicting a victim destroys, the victim's cost.

A victim loses the work it did since it last saved it: since its last checkpoint
(``muster.dev/last-checkpoint`` on its pods, written by the training code or its
operator; or, for a job declaring ``muster.dev/checkpoint-interval-seconds``, its last
save at that interval from its start), else since it started (a pod bound but not yet
seen started: since its binding, :attr:`~extender.core.objects.PodInfo.start_or_created`).
Measured in accelerator-seconds (its requests of scarce resources, GPUs say, times those seconds)
and, for pods asking for none, pod-seconds.  The victim order takes the victim whose
work began latest first among victims of one priority (:mod:`extender.core.state.victims`),
and plans of equal rank compare by it (:mod:`.ranking`).  A victim declaring a checkpoint
interval may be given notice until just after its next save (:func:`save_notice`), and
then loses only the margin after it (:func:`evicted_loss`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from base.resources import parse_quantity
from extender.core.notice import notice_cap, notice_seconds
from extender.core.objects import PodInfo
from extender.core.placement.score import COMMON_RESOURCES
from extender.core.state import ClusterState

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
    interval = pod.checkpoint_interval
    if interval is not None and now > pod.start_or_created:
        start = pod.start_or_created
        began = max(began, start + math.floor((now - start) / interval) * interval)
    return min(began, now)


def next_save(pod: PodInfo, now: float) -> float | None:
    """When ``pod`` next saves after ``now`` by the interval it declares
    (``muster.dev/checkpoint-interval-seconds``, counted from its start), or ``None``
    when it declares none."""
    interval = pod.checkpoint_interval
    if interval is None:
        return None
    start = pod.start_or_created
    if now < start:
        return start + interval
    return start + (math.floor((now - start) / interval) + 1) * interval


#: How long after a declared save its victim is evicted: the save is the job's to finish,
#: and the clocks of the node and of Muster may differ a little.
SAVE_MARGIN_SECONDS = 2.0


def save_notice(state: ClusterState, pod: PodInfo, now: float) -> tuple[float, float] | None:
    """Notice to its next save, for victim ``pod`` declaring a checkpoint interval
    (``muster.dev/checkpoint-interval-seconds``): ``(seconds from now, the save)``, the
    notice ending :data:`SAVE_MARGIN_SECONDS` after its next save, when that is within
    its cap (:func:`notice_cap`) and it has more than the margin's work to save (one that
    has just started or saved would lose no less by waiting); else ``None``.  Evicted
    then, it loses only the work of the margin (less when it answers as soon as it saved,
    with ``muster.dev/checkpointed``)."""
    following = next_save(pod, now)
    if following is None or now - last_save(pod, now) <= SAVE_MARGIN_SECONDS:
        return None
    wait = following + SAVE_MARGIN_SECONDS - now
    if wait > notice_cap(state, pod):
        return None
    return wait, following


def victim_notice(state: ClusterState, pod: PodInfo, now: float) -> tuple[float, float | None]:
    """The notice victim ``pod`` gets, marked at ``now``: the longer of what it declares
    (:func:`~extender.core.notice.notice_seconds`) and notice to its next save
    (:func:`save_notice`); ``(seconds, the save)``, the save ``None`` when the declared
    notice is the longer.  The planner and the completion of an in-flight plan ask here."""
    declared = notice_seconds(state, pod)
    saving = save_notice(state, pod, now)
    if saving is not None and saving[0] > declared:
        return saving
    return declared, None


def lost_work(pods: Iterable[PodInfo], now: float) -> LostWork:
    """The work ``pods`` lose if evicted at ``now``."""
    return _summed((pod, now - last_save(pod, now)) for pod in pods)


def evicted_loss(state: ClusterState, pods: Iterable[PodInfo], now: float) -> LostWork:
    """The work ``pods`` lose as victims marked at ``now``, each evicted when its notice
    ends (:func:`victim_notice`): one given notice to its next save loses only the
    margin after that save; any other, its work since its last save, as if evicted at
    ``now`` (:func:`lost_work`).  Plans compare by it (:mod:`.ranking`)."""
    return victims_cost(state, pods, now)[0]


def victims_cost(
    state: ClusterState, pods: Iterable[PodInfo], now: float
) -> tuple[LostWork, float]:
    """What victims ``pods``, marked at ``now``, cost: the work they lose
    (:func:`evicted_loss`) and the longest notice among them (0 for none), each
    victim's notice read once."""
    longest = 0.0
    losses = []
    for pod in pods:
        notice, save = victim_notice(state, pod, now)
        longest = max(longest, notice)
        unsaved = SAVE_MARGIN_SECONDS if save is not None else now - last_save(pod, now)
        losses.append((pod, unsaved))
    return _summed(losses), longest


def _summed(losses: Iterable[tuple[PodInfo, float]]) -> LostWork:
    """Each pod's unsaved seconds, summed as :class:`LostWork`."""
    accelerators = plain = 0.0
    for pod, seconds in losses:
        scarce = sum(
            amount for name, amount in pod.requests.items() if name not in COMMON_RESOURCES
        )
        if scarce > 0:
            accelerators += seconds * scarce / _ONE
        else:
            plain += seconds
    return LostWork(accelerators, plain)
