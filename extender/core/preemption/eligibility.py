"""May a job preempt now?  Step 1 of job-level preemption, and when to ask.

:func:`ineligibility` says why a job may not preempt yet (in flight, not allowed to
trigger, still arriving, short of its min-available pods, an elastic job already running
its minimum, constraints the core cannot simulate, a quota that could not admit it even
once victims are gone);
:func:`ready_to_plan` whether the PostFilter should plan for it at once, and
:func:`postfilter_trigger` whether it is the PostFilter's at all.
"""

from __future__ import annotations

from base.times import format_time
from extender.core.authority import governing_reason, nominated_elsewhere, scheduler_preemption
from extender.core.gangsize import arriving_reason, job_still_arriving
from extender.core.jobs import may_trigger_preemption
from extender.core.objects import PodInfo
from extender.core.placement.demand import JobDemand, running_its_minimum
from extender.core.reservations import persisted_on, persisted_pods
from extender.core.state import ClusterState
from quota.accounting import QuotaLedger
from quota.admission import unevictable_failures


def ineligibility(
    state: ClusterState, demand: JobDemand, now: float, ledger: QuotaLedger
) -> list[str]:
    """Why the job may not preempt now (empty: it may), step 1 of the planner; ``ledger``
    is the plan's settled view of the quotas."""
    job = demand.job
    in_flight = _reservation_in_flight(state, job, now)
    if in_flight is not None:
        return [in_flight]
    if not demand.unplaced:
        return ["every pod of the job is already placed"]
    forbidden = [pod.name for pod in demand.unplaced if not may_trigger_preemption(pod, state.args)]
    if forbidden:
        return [
            f"pods may not trigger preemption ({', '.join(forbidden)}): they need the label "
            "quota.scheduling.koordinator.sh/can-preempt=true (or disableDefaultTriggerPreemption"
            " false) and no preemptionPolicy Never"
        ]
    marked = state.members.marked_victims(job)
    if marked:
        return [
            f"a preemption for this job is in flight: {len(marked)} victims marked for it "
            f"are still leaving ({', '.join(sorted(marked)[:5])})"
        ]
    foreign = scheduler_preemption(state, job)
    if foreign is not None:
        return [
            "kube-scheduler's own preemption is in flight for this job (it is deleting "
            f"{', '.join(foreign.victims)}); Muster does not preempt for it a second time"
        ]
    if job_still_arriving(state, demand.unplaced, now):
        return [arriving_reason(state, job)]
    missing = pods_missing(state, job)
    if missing:
        needed = state.declarations.min_available(job)
        return [f"only {needed - missing} of the job's min-available {needed} pods exist yet"]
    growing = running_its_minimum(state, demand, ledger)
    if growing is not None:
        return [growing]
    unsupported = sorted({c for pod in demand.unplaced for c in pod.unsupported})
    if unsupported:
        return [
            "the job uses constraints Muster cannot simulate (" + ", ".join(unsupported) + "), "
            "so it will not evict for a placement it cannot check"
        ]
    if demand.quota in state.tree.parents:
        return [f"quota {demand.quota} is a parent quota; pods must use a leaf quota"]
    return unevictable_failures(ledger, demand.quota, demand.np_request)


def _reservation_in_flight(state: ClusterState, job: str, now: float) -> str | None:
    """Why the job is in flight by a reservation of its own, or ``None``.  In flight is a
    fact of the cluster: the job holds a reservation, or its pods carry the one Muster
    wrote, until it is released, whether or not its time is up.  (A copy left on pods
    after the release is cleared by the leader: reservations.settle_reservations.)"""
    reservation = state.reservations.get(job)
    written = persisted_pods(state, job)
    if reservation is None and not written:
        return None
    if reservation is not None and reservation.expires > now:
        # A time, not the seconds left: the same answer from attempt to attempt.
        until = f"its reservation holds until {format_time(reservation.expires)}"
    else:
        until = "its reservation's time is up and it is being released"
    if reservation is not None:
        victims = len(reservation.victims)
    else:  # only what was written on the pods tells
        victims = max(len(p.victims) for p in map(persisted_on, written) if p is not None)
    what = "placement" if victims == 0 else "preemption"  # a gang placed whole: none
    count = f"{victims} victims, " if victims else ""
    return (
        f"a {what} for this job is in flight ({count}room written on "
        f"{len(written)} of its pods); {until}"
    )


def pods_missing(state: ClusterState, job: str) -> int:
    """How many more of the job's pods must exist before it may preempt (0: enough)."""
    created = sum(1 for key in state.members.job_members(job) if not state.pods[key].finished)
    return max(0, state.declarations.min_available(job) - created)


def ready_to_plan(state: ClusterState, job: str, now: float) -> bool:
    """Should the PostFilter plan for ``job`` at once rather than after a short quiet
    period?  Yes when waiting could gather nothing: a pod of no gang, a gang whose
    declared size (PodGroup ``minMember`` or the min-available annotation) its pods
    reach, or a gang of undeclared size that stopped growing (``gangSettleSeconds``);
    and no pod of it carries a nomination Muster did not make (kube-scheduler's own
    preemption, whose victims may reach Muster a moment after the nomination)."""
    members = state.members.job_members(job)
    if not members:
        return False
    if job_still_arriving(state, (state.pods[key] for key in members), now):
        return False
    return pods_missing(state, job) == 0 and not nominated_elsewhere(state, job)


def postfilter_trigger(state: ClusterState, pod: PodInfo, now: float) -> bool | None:
    """For a pod that cannot be placed: ``None`` when its job is not Muster's to preempt
    for (kube-scheduler governs it), else whether the PostFilter should plan for the job
    at once (see :func:`ready_to_plan`)."""
    if governing_reason(state, pod) is None:
        return None
    return ready_to_plan(state, pod.job, now)
