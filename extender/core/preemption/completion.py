"""Completing a plan in flight: the marks a Muster stopped before writing them, and the
marks someone else took off.

A Muster stopped between writing a plan's reservation and marking its victims leaves the
reservation (persisted on the preemptor's pods); the next one marks the victims still
unmarked (``PostFilterLoop.complete_in_flight`` in :mod:`extender.kube.postfilter`).
A victim's owner can take its mark off (a tenant may edit its own pods' labels and
annotations): it keeps Muster's ``DisruptionTarget`` (pod status, which tenants do not
write), but without a mark no evictor evicts it, and the plan would wait out its
reservation.  Such a victim is marked again, to the deadline its mark had (what the
owner declares meanwhile cannot lengthen it); one whose mark Muster never saw (as after
a restart) is marked as one never marked.  A victim never marked gets what the plan
gave it: the notice to the same deadline.  Either way its Job is restarted
(:mod:`extender.core.restart`) when the plan's victims, marked or not, are all of its
pods.  Pure: the state and the time are given.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from base import keys
from extender.core.objects import PodInfo
from extender.core.preemption.cost import victim_notice
from extender.core.preemption.policy import victim_refusal
from extender.core.restart import restarted_jobs
from extender.core.state import ClusterState


@dataclass(frozen=True)
class Unfinished:
    """What in-flight reservations still lack (a Muster that stopped half-way, a mark
    taken off)."""

    delete_now: bool
    #: Victims (with their job) not marked yet, that the rules still allow.
    unmarked: list[tuple[PodInfo, str]]
    #: Victims marked for their job without their ``DisruptionTarget`` yet.
    unrecorded: list[tuple[PodInfo, str]]
    #: Victims the rules refuse now, and why.
    refused: list[tuple[PodInfo, str, str]]
    #: Victims Muster marked whose mark is gone while a reservation still counts on them:
    #: to be marked again (the rules are not asked again: the plan was made).
    stripped: list[tuple[PodInfo, str]]
    #: The deadline (mark time plus notice) of each victim marked now, by UID: what a
    #: victim whose mark is taken off later is marked again to.
    deadlines: dict[str, float]
    #: The UIDs of every victim in-flight plans count on that still runs.
    counted: frozenset[str]


def unfinished_plans(
    state: ClusterState, written: AbstractSet[str], remembered: AbstractSet[str]
) -> Unfinished:
    """What the in-flight reservations of ``state`` still lack, leaving out the victims
    whose marks this process has written (``written``, by UID) and the informer may not
    show yet: each victim never marked is checked against the rules again, whatever record
    named it; one whose mark was taken off (its deadline ``remembered``, by UID) is marked
    again.  Muster's condition on a victim whose mark Muster did not see (one left from an
    earlier plan, or a restart since) makes it no stripped victim: it is marked as one
    never marked, the rules asked."""
    running = [
        (pod, reservation.job)
        for reservation in state.reservations.values()
        for key in reservation.victims
        if (pod := state.pods.get(key)) is not None
        and pod.node_name is not None
        and not pod.finished
        and not pod.terminating
    ]
    # Muster's DisruptionTarget without Muster's mark, on a victim whose mark Muster saw.
    # Muster writes the mark before the condition, and turns the condition False before
    # it takes a mark back, so only someone else took it off.
    stripped = [
        (pod, job)
        for pod, job in running
        if not pod.soft_evicted
        and pod.preempted_by == keys.MUSTER_COMPONENT
        and pod.uid in remembered
    ]
    stripped_keys = {pod.key for pod, _ in stripped}
    unmarked = [
        (pod, job)
        for pod, job in running
        if pod.uid not in written
        and not pod.departing  # marked, evicted, kube-scheduler's
        and pod.key not in stripped_keys
    ]
    unrecorded = [
        (pod, job)
        for pod, job in running
        if pod.uid not in written
        and pod.marked_for == job
        and pod.preempted_by is None  # no DisruptionTarget yet
    ]
    deadlines = {
        pod.uid: pod.marked_at + pod.marked_notice
        for pod, job in running
        if pod.marked_for is not None and pod.marked_at is not None  # its job's, or taken over
    }
    refused = [
        (pod, job, why)
        for pod, job in unmarked
        if (why := victim_refusal(state, job, pod)) is not None
    ]
    refused_keys = {pod.key for pod, _, _ in refused}
    allowed = [(pod, job) for pod, job in unmarked if pod.key not in refused_keys]
    delete_now = state.args.pod_should_be_deleted_when_preempted
    counted = frozenset(pod.uid for pod, _ in running)
    return Unfinished(delete_now, allowed, unrecorded, refused, stripped, deadlines, counted)


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


def notice_to_deadline(
    state: ClusterState, pod: PodInfo, job: str, deadline: float, now: float
) -> float:
    """The notice a victim whose mark was taken off is marked again with: what is left to
    ``deadline``, the one its mark had, and no more than its plan would give it now nor
    past its job's reservation."""
    latest = min(deadline, now + notice_left(state, pod, job, now))
    reservation = state.reservations.get(job)
    if reservation is not None:
        latest = min(latest, reservation.expires)
    return max(0.0, latest - now)
