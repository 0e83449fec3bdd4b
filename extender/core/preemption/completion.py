"""Completing a plan in flight: the marks a Muster stopped before writing them.

A Muster stopped between writing a plan's reservation and marking its victims leaves the
reservation (persisted on the preemptor's pods); the next one marks the victims still
unmarked (``PostFilterLoop.complete_in_flight`` in :mod:`extender.kube.postfilter`).
They must get what the plan gave them: the notice to the same deadline, and their Job
restarted (:mod:`extender.core.restart`) when the plan's victims, marked or not, are all
of its pods.  Pure: the state and the time are given.
"""

from __future__ import annotations

from collections.abc import Iterable

from extender.core.objects import PodInfo
from extender.core.preemption.cost import victim_notice
from extender.core.restart import restarted_jobs
from extender.core.state import ClusterState


def completion_notices(
    state: ClusterState, unmarked: Iterable[tuple[PodInfo, str]], now: float
) -> tuple[dict[str, float], frozenset[str]]:
    """For the victims of in-flight plans not marked yet (each with its plan's job: a
    Muster stopped between a reservation and its marks), the notice each gets, and which
    of them restart their Jobs.  A victim gets what is left of the notice its plan gave
    it, to the same deadline, which the plan's reservation covers (worked out afresh,
    past a save, it could be a whole interval longer); whether its Job is restarted is
    judged on every victim of the plan still running, marked or not, as the plan judged
    it (a Muster that marked some of them was as much that plan's)."""
    pending = list(unmarked)
    notices = {pod.key: notice_left(state, pod, job, now) for pod, job in pending}
    restarted: dict[str, float] = {}
    for job in {job for _pod, job in pending}:
        reservation = state.reservations.get(job)
        victims = (state.pods.get(key) for key in reservation.victims) if reservation else ()
        running = [
            (pod, notices[pod.key] if pod.key in notices else notice_left(state, pod, job, now))
            for pod in victims
            if pod is not None
            and pod.node_name is not None
            and not pod.finished
            and not pod.terminating
        ]
        restarted.update(restarted_jobs(state, running))
    restarting = frozenset(notices.keys() & restarted.keys())
    for key in restarting:
        notices[key] = restarted[key]
    return notices, restarting


def notice_left(state: ClusterState, pod: PodInfo, job: str, now: float) -> float:
    """What is left at ``now`` of the notice victim ``pod`` got when ``job``'s plan was
    made (its reservation's ``created``)."""
    reservation = state.reservations.get(job)
    planned = reservation.created if reservation is not None else now
    notice, _save = victim_notice(state, pod, planned)
    return max(0.0, planned + notice - now)
