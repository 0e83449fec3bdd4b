"""Room held for a job that has not used it yet yields to a higher-priority job of its quota.

A reservation holds room for a job from its plan until its pods bind.  Until one of them
binds nothing runs there, so handing the room to a job of the same quota and higher
priority evicts nothing: the order in which two jobs arrived within seconds should not
decide what their priorities say.  The planner (:func:`~.planner.plan_job_preemption`)
asks for this only when no plan exists without it, and takes the fewest reservations,
those of the lowest priority (then the newest) first; the plan names them, and the front
door ends them as it holds the new room.  The job that yields goes back to the queue:
its victims still leave (the room they free is the new job's), and it is planned again
once they are gone.
"""

from __future__ import annotations

from collections.abc import Iterator

from extender.core.placement.demand import JobDemand
from extender.core.state import ClusterState, Reservation


def yieldable_reservations(state: ClusterState, demand: JobDemand) -> list[Reservation]:
    """The reservations that may yield to ``demand``'s job: held for another job of its
    quota, of lower priority, with none of its pods bound and no room kept for pods
    being re-created; lowest priority first, then the newest."""
    if not demand.unplaced or not state.reservations:
        return []
    priority = max(pod.priority for pod in demand.unplaced)
    found: list[tuple[int, float, str, Reservation]] = []
    for job, reservation in state.reservations.items():
        if job == demand.job or reservation.quota != demand.quota:
            continue
        pods = [pod for pod in state.members.job_pods(job) if not pod.finished]
        if not pods or any(pod.node_name is not None for pod in pods):
            continue
        held_for = max(pod.priority for pod in pods)
        if held_for >= priority or state.book.vacancies_of(job):
            continue
        found.append((held_for, -reservation.created, job, reservation))
    found.sort(key=lambda item: item[:3])
    return [reservation for *_key, reservation in found]


def yield_steps(reservations: list[Reservation]) -> Iterator[tuple[Reservation, ...]]:
    """The sets of reservations to try in turn: the first, the first two, and so on."""
    for end in range(1, len(reservations) + 1):
        yield tuple(reservations[:end])


def reserved_pods(state: ClusterState, reservations: tuple[Reservation, ...]) -> frozenset[str]:
    """The pending pods the reservations hold room for."""
    return frozenset(
        key
        for reservation in reservations
        for key in reservation.placements
        if (reserved := state.book.reserved(key)) is not None and reserved[0] == reservation.job
    )
