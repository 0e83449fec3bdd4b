"""A gang over time: its backoff once given up (KEP-1282's requeue strategy), its status
for its PodGroup, and which parked or partly bound gangs need a nudge or a timeout.

Pure reads of the state; :mod:`extender.core.filter.gang` places gangs whole, and the front
doors write what these functions decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from base.times import format_time
from extender.core.gangsize import (
    bound_count,
    live_pods,
    still_arriving,
    waiting_for_pods,
)
from extender.core.state import ClusterState, GangBackoff


def backoff_seconds(state: ClusterState, attempts: int) -> float:
    """How long a gang given up for the ``attempts``-th time waits before it is retried."""
    args = state.args
    doublings = min(max(attempts - 1, 0), 63)  # past 2**63 the maximum has long won
    return float(min(args.backoff_max_seconds, args.backoff_base_seconds * 2**doublings))


def give_up(state: ClusterState, job: str, now: float) -> GangBackoff:
    """The backoff of ``job`` given up now (one attempt more than before)."""
    previous = state.book.backoffs.get(job)
    attempts = (previous.attempts if previous is not None else 0) + 1
    limit = state.args.backoff_limit_count
    exhausted = limit is not None and attempts > limit
    until = None if exhausted else now + backoff_seconds(state, attempts)
    return GangBackoff(attempts=attempts, given_up=now, until=until)


def backoff_reason(job: str, backoff: GangBackoff, now: float) -> str | None:
    """Why the filter turns the job away while it backs off; ``None`` once it may retry.
    Stable from call to call (kube-scheduler rewrites a pod's condition when the
    message changes): it names the time of the retry, not the seconds left."""
    if backoff.until is None:
        return (
            f"gang {job} was given up {backoff.attempts} times after its timeout and the "
            "backoff limit (backoffLimitCount) is reached: it is not retried"
        )
    if now < backoff.until:
        return (
            f"gang {job} was given up after its timeout (attempt {backoff.attempts}); "
            f"it is retried at {format_time(backoff.until)}"
        )
    return None


@dataclass(frozen=True, slots=True)
class GangStatus:
    """Where a gang stands, as its PodGroup's status and ``/debug/jobs`` show it."""

    job: str
    min_available: int
    created: int  # live pods
    scheduled: int  # bound
    running: int
    succeeded: int
    failed: int
    reserved: int  # pending pods holding reserved room
    phase: str
    backoff: GangBackoff | None


def gang_status(state: ClusterState, job: str) -> GangStatus:
    """The gang's phase, in scheduler-plugins' PodGroup terms: ``Pending`` (fewer pods
    than min-available), ``PreScheduling`` (enough pods, none bound), ``Scheduling``
    (some bound), ``Scheduled`` (min-available bound), ``Running`` (min-available
    running), ``Failed`` (given up past the backoff limit)."""
    pods = state.members.job_pods(job)
    live = [pod for pod in pods if not pod.finished and not pod.terminating]
    bound = [pod for pod in live if pod.node_name is not None]
    running = sum(1 for pod in bound if pod.phase == "Running")
    succeeded = sum(1 for pod in pods if pod.phase == "Succeeded")
    failed = sum(1 for pod in pods if pod.phase == "Failed")
    needed = state.declarations.min_available(job)
    backoff = state.book.backoffs.get(job)
    if backoff is not None and backoff.until is None:
        phase = "Failed"
    elif running + succeeded >= needed:
        phase = "Running"
    elif len(bound) + succeeded >= needed:
        phase = "Scheduled"
    elif len(live) < needed:
        phase = "Pending"
    elif bound:
        phase = "Scheduling"
    else:
        phase = "PreScheduling"
    reserved = sum(1 for pod in live if state.reservation_holder(pod.key) == job)
    return GangStatus(
        job, needed, len(live), len(bound), running, succeeded, failed, reserved, phase, backoff
    )


def gang_jobs(state: ClusterState) -> set[str]:
    """The jobs with a pod of a pod group."""
    return {pod.job for pod in state.pods.values() if pod.group is not None}


def parked_too_early(state: ClusterState, parked: Mapping[str, str], now: float) -> list[str]:
    """Of the pods kube-scheduler parked (pod key → its Unschedulable message), those
    turned away because their gang had too few pods, whose gang now has enough, or
    because their gang of undeclared size was still growing, which has settled: the
    front door nudges them (kube-scheduler does not retry a parked pod when another
    pending pod is created, nor when time passes).  Sorted, oldest pod first."""
    early = []
    for key, message in parked.items():
        pod = state.pods.get(key)
        if pod is None or pod.group is None or pod.node_name is not None:
            continue
        prefix = waiting_for_pods(pod.job)
        if prefix not in message:
            continue
        if " more pods (" in message:
            if len(live_pods(state, pod.job)) >= state.declarations.min_available(pod.job):
                early.append(pod)
        elif "to stop arriving" in message and not still_arriving(state, pod, now):
            early.append(pod)
    return [pod.key for pod in sorted(early, key=lambda pod: (pod.created, pod.key))]


def partially_bound(state: ClusterState, gangs: set[str]) -> list[str]:
    """Of ``gangs``, those with some, but fewer than min-available, pods bound and
    staying (:func:`bound_count`): the ones a timeout may give up."""
    partial = []
    for job in sorted(gangs):
        needed = state.declarations.min_available(job)
        if needed > 1 and 0 < bound_count(state, job) < needed:
            partial.append(job)
    return partial
