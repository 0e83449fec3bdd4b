"""Lost work: what evicting a victim destroys, the victim's cost.

A victim loses the work it did since it last saved it: since its last checkpoint
(``muster.dev/last-checkpoint`` on its pods, written by the training code or its
operator; or, for a job declaring ``muster.dev/checkpoint-interval-seconds``, its last
save at that interval from its start), else since it started.  Measured in
accelerator-seconds (its requests of scarce resources, GPUs say, times those seconds)
and, for pods asking for none, pod-seconds.  The victim order takes the victim whose
work began latest first among victims of one priority (:mod:`extender.core.state.victims`),
and plans of equal rank compare by it (:mod:`.ranking`).  That order reads a checkpoint
the pods wrote, not the saves their declared interval implies, nor how much each victim
frees: the planner walks a second time in :func:`least_lost_first`'s order, which does,
and keeps the plan that ranks better.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from base import keys
from base.resources import parse_quantity
from base.times import seconds
from extender.core.notice import notice_cap
from extender.core.objects import PodInfo
from extender.core.placement.score import COMMON_RESOURCES
from extender.core.preemption.groups import Offer
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
    interval = _interval(pod)
    if interval is not None and now > pod.start_or_created:
        start = pod.start_or_created
        began = max(began, start + math.floor((now - start) / interval) * interval)
    return min(began, now)


def next_save(pod: PodInfo, now: float) -> float | None:
    """When ``pod`` next saves after ``now`` by the interval it declares
    (``muster.dev/checkpoint-interval-seconds``, counted from its start), or ``None``
    when it declares none."""
    interval = _interval(pod)
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


def unsaved_seconds(pods: Iterable[PodInfo], now: float) -> float:
    """The seconds of work ``pods`` lose if evicted at ``now``, per accelerator they free:
    each pod's seconds since its last save (:func:`last_save`), weighted by its
    accelerators (by one each when none asks for any).  What a plan loses for the room
    it frees: of two victims of one size, the one that saved later; of a victim and two
    half its size, the one or the two as their saves say."""
    weighed = [(now - last_save(pod, now), _scarce(pod)) for pod in pods]
    if not weighed:
        return 0.0
    if not any(weight for _seconds, weight in weighed):
        weighed = [(seconds, 1.0) for seconds, _weight in weighed]
    total = sum(weight for _seconds, weight in weighed)
    return sum(seconds * weight for seconds, weight in weighed) / total


#: Numbers offers, in an order of the planner's choosing (``find_victim_groups``'s
#: ``reorder``).
Reorder = Callable[[Iterator[Offer]], Iterator[tuple[int, Offer]]]


def least_lost_first(state: ClusterState, quota: str, now: float) -> Reorder:
    """The walk's offers reordered so that, within each stretch of one phase, one priority
    and one side (other quotas' units, or ``quota``'s own), the victims losing the least
    work per accelerator they free (:func:`unsaved_seconds`) come first.  What the order
    keeps: priority, other quotas before the job's own, the pods an elastic job sheds
    before whole jobs (in their own order), and, with fair sharing, the quotas furthest
    above their share first (their units come together, in the order they first
    appear); ties keep the victim order."""
    unit_pods = state.victims.unit_pods()
    ranked = state.args.fair_sharing

    def cost(offer: Offer) -> float:
        entry, _admission, shed = offer
        if shed is not None:
            return unsaved_seconds((shed,), now)
        pods = unit_pods.get(entry[2], ())
        return unsaved_seconds([pod for pod in pods if not pod.departing] or pods, now)

    def reorder(offers: Iterator[Offer]) -> Iterator[tuple[int, Offer]]:
        stretch: list[Offer] = []
        at = 0

        def flush() -> Iterator[tuple[int, Offer]]:
            nonlocal at
            quotas: dict[str, int] = {}
            for entry, _admission, _shed in stretch:
                quotas.setdefault(entry[3], len(quotas))
            keyed = sorted(
                (
                    (
                        shed is None,
                        quotas[entry[3]] if ranked else 0,
                        0.0 if shed is not None else cost((entry, admission, shed)),
                        index,
                    ),
                    (entry, admission, shed),
                )
                for index, (entry, admission, shed) in enumerate(stretch)
            )
            for _key, offer in keyed:
                yield at, offer
                at += 1
            stretch.clear()

        for offer in offers:
            if stretch and not _same_stretch(stretch[-1], offer, quota):
                yield from flush()
            stretch.append(offer)
        yield from flush()

    return reorder


def _same_stretch(last: Offer, offer: Offer, quota: str) -> bool:
    """Do ``last`` and the ``offer`` after it belong to one stretch (see
    :func:`least_lost_first`): one phase's admission, one priority, one side?"""
    return (
        last[1] is offer[1]
        and last[0][0] == offer[0][0]
        and (last[0][3] == quota) == (offer[0][3] == quota)
    )


def _scarce(pod: PodInfo) -> float:
    """``pod``'s requests of scarce resources (accelerators), in units."""
    return (
        sum(amount for name, amount in pod.requests.items() if name not in COMMON_RESOURCES) / _ONE
    )


def _interval(pod: PodInfo) -> float | None:
    return seconds(pod.annotations.get(keys.CHECKPOINT_INTERVAL_ANNOTATION)) or None
