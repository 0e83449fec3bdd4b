"""When a plan ends, or keeps its room longer: the reservations' lifecycle.

:func:`settle_reservations` extends a plan while its victims still terminate and ends it
when its time is up or its job has gone; :func:`refused_victims` finds the plans a
budget stalls past their deadline; :func:`spared_victims` the victims a job no longer
needs; :func:`ended_plan` and :func:`yielded_plan` say what the front door undoes.  The
records these read back are :mod:`extender.core.reservations`'.  Pure: the leader
(:mod:`extender.kube.postfilter`) and ``simulate`` act on what they return.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from extender.core.notice import longest_notice
from extender.core.objects import PodInfo
from extender.core.reservations import (
    TERMINATING_LIMIT_SECONDS,
    TERMINATING_MARGIN_SECONDS,
    persisted_pods,
    stale_persisted_pods,
)
from extender.core.state import ClusterState, Reservation


@dataclass(frozen=True, slots=True)
class EndedPlan:
    """A plan that ended without its job binding: what the front door undoes."""

    job: str
    why: str
    #: Victims still marked for the job and not leaving yet: their marks are taken back.
    unmark: tuple[PodInfo, ...]
    #: The job's pending pods carrying the reservation Muster wrote: it is cleared.
    release: tuple[PodInfo, ...]
    #: The job keeps its room (only victims it no longer needs are spared).
    room_kept: bool = False


def settle_reservations(
    state: ClusterState, now: float
) -> tuple[list[Reservation], list[EndedPlan]]:
    """Which reservations to extend and which plans to end, at ``now``.

    A reservation whose time is up is extended by :data:`TERMINATING_MARGIN_SECONDS`
    while a victim marked for its job is still terminating (the room is on its way: in
    flight survives the timer), up to :data:`TERMINATING_LIMIT_SECONDS` past it (and past
    the longest notice victims may get).
    Otherwise it ends, and so does one whose job has no pods left (nor room kept for
    pods its controller re-creates, which ends first: ``ClusterState.expire_vacancies``):
    the plan is undone,
    never left half (the marks of victims not yet leaving are taken back, the
    reservation on the job's pods cleared)."""
    extended: list[Reservation] = []
    ended: list[EndedPlan] = []
    timeout = state.args.reservation_timeout_seconds
    notice = longest_notice(state)
    for job, reservation in sorted(state.reservations.items()):
        pods = state.members.job_pods(job)
        # A job whose pods are all gone but whose room waits for their replacements (see
        # ClusterState.remove_pod) is still there.
        present = bool(pods) or bool(state.book.vacancies_of(job))
        if present and reservation.expires > now:
            continue
        marked = state.members.marked_pods(job)
        # (Its victims' notice, if any, came first: the room was held through it.)
        limit = reservation.created + timeout + notice + TERMINATING_LIMIT_SECONDS
        if pods and now < limit and any(pod.terminating for pod in marked):
            until = now + TERMINATING_MARGIN_SECONDS
            extended.append(dataclasses.replace(reservation, expires=until))
            continue
        why = "its reservation timed out" if present else "the job is gone"
        ended.append(ended_plan(state, job, why))
    ended_jobs = {plan.job for plan in ended}
    for job in sorted(state.members.jobs_with_marked_victims()):
        if job in ended_jobs:
            continue
        spared = spared_victims(state, job)
        if spared:
            ended.append(EndedPlan(job, SPARED, spared, (), room_kept=True))
            ended_jobs.add(job)
            continue
        if job in state.reservations:
            continue
        if not state.members.job_pods(job):
            # Deleted with its last pod: no reservation is left, but marks still name it.
            ended.append(ended_plan(state, job, "the job is gone"))
            ended_jobs.add(job)
            continue
        staying = [pod for pod in state.members.marked_pods(job) if not pod.terminating]
        if staying and all(
            pod.marked_at is not None and now - pod.marked_at > timeout for pod in staying
        ):
            # Marks older than any reservation, for a job holding none (a leader that
            # stopped between a plan's end and its undo): nothing holds their room.
            ended.append(ended_plan(state, job, "its reservation ended"))
            ended_jobs.add(job)
    # A released reservation's copy left on pods (its clearing lost, or read back after
    # the release) is cleared: it is not a job in flight.
    for job in sorted(state.book.released):
        if job in ended_jobs:
            continue
        stale = stale_persisted_pods(state, job)
        if stale:
            ended.append(EndedPlan(job, "its reservation was released", (), tuple(stale)))
    return extended, ended


#: Why victims a job no longer needs lose their marks.
SPARED = "the job has room without them"


def spared_victims(state: ClusterState, job: str) -> tuple[PodInfo, ...]:
    """The victims marked for ``job`` that it no longer needs: once it holds no
    reservation and none of its pods waits to bind (a lone pod bound on room freed
    elsewhere while they had notice: :func:`~extender.core.filter.admission.
    may_go_without_victims`), those not yet leaving and that no reservation counts on
    (one that took them over from it, say).  Their marks are taken back: they keep
    running."""
    if job in state.reservations or not state.members.job_pods(job):
        return ()
    if state.members.pending_jobs().get(job):
        return ()
    promised = state.book.promised_victims()
    return tuple(
        pod
        for pod in state.members.marked_pods(job)
        if not pod.terminating and not pod.finished and pod.key not in promised
    )


def ended_plan(state: ClusterState, job: str, why: str) -> EndedPlan:
    """The plan of ``job`` ended now, for ``why``: its victims not yet leaving (those
    marked for it, and those its reservation took over from a plan that yielded to it)
    that no other reservation counts on, and its pods carrying the reservation Muster
    wrote (see :class:`EndedPlan`)."""
    promised = {
        key
        for reservation in state.reservations.values()
        if reservation.job != job
        for key in reservation.victims
    }
    own = state.reservations.get(job)
    taken_over = [
        pod
        for key in (own.victims if own is not None else ())
        if (pod := state.pods.get(key)) is not None
        and pod.soft_evicted
        and pod.marked_for not in (None, job)
    ]
    return EndedPlan(
        job,
        why,
        tuple(
            pod
            for pod in [*state.members.marked_pods(job), *taken_over]
            if not pod.terminating and pod.key not in promised
        ),
        tuple(persisted_pods(state, job)),
    )


def yielded_plan(state: ClusterState, job: str, to: str) -> EndedPlan:
    """The plan of ``job`` whose room yields to ``to``'s (:mod:`.preemption.yielding`):
    its reservation on the job's pods is cleared; its victims keep their marks (the room
    they free is ``to``'s)."""
    return EndedPlan(
        job,
        f"its room yielded to job {to}, of higher priority",
        (),
        tuple(persisted_pods(state, job)),
    )


def refused_victims(state: ClusterState, now: float) -> dict[str, list[PodInfo]]:
    """Per preempting job, its victims still bound and not terminating
    ``victimEvictionDeadlineSeconds`` after their notice ran out (their mark, for a
    victim with none), that a budget allowing no more disruptions covers (the Eviction
    API refuses them): their plan is stuck."""
    deadline = state.args.victim_eviction_deadline_seconds
    blocked = [b for b in state.budgets.values() if b.disruptions_allowed <= 0]
    if not blocked:
        return {}
    refused: dict[str, list[PodInfo]] = {}
    for job in sorted(state.members.jobs_with_marked_victims()):
        for pod in state.members.marked_pods(job):
            if (
                pod.node_name is None
                or pod.terminating
                or pod.marked_at is None
                or now - pod.marked_at - pod.marked_notice < deadline
            ):
                continue
            if any(budget.covers(pod) for budget in blocked):
                refused.setdefault(job, []).append(pod)
    return refused
