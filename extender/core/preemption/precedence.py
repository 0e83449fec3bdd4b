"""Room in priority order within a quota: a borrower does not evict for room its quota's
higher-priority work would take.

A job that borrows may evict other quotas' work (fair sharing, ``borrowWithinCohort``)
to make room for itself.  While a job of its own quota with a higher priority waits,
one whose pods fit on the room free now, without evicting anything, and that the
quota's ``withinQuota`` policy lets evict the borrower's pods, the room the plan would
free goes the wrong way round: the higher-priority job is turned away only by an
admission wait (the guarantee reserve, fair sharing, a reborrow backoff), and once that
ends it takes the free room, or the borrower's pods, at once (its quota must admit it:
one its ``max`` keeps out holds no one back).  The other quotas' victims
would have lost their work for a room their preemptor does not keep.  So no such plan is
made (:func:`room_taker`); the borrower is planned again when kube-scheduler retries
it, and the higher-priority job needs no victim: the room it waits for is free.

On the head-to-head's seed 2, a low-priority saver evicted another team's 68-second-old
job this way, and a normal-priority job of its quota, held back by the reserve until a
second later, evicted the saver's pods 0.3 s after they bound: 545 GPU-seconds lost for
room that was free (docs/benchmarks.md).  Whom it trusts: only jobs of the borrower's own
quota hold it back, and only while an admission rule holds them, so a tenant keeps
waiting only jobs of a quota it is in (tenants sharing one quota, as namespaces without a
quota of their own share the default one, share that), and never past that rule's end.
"""

from __future__ import annotations

from base.times import format_time
from extender.core.jobs import may_trigger_preemption
from extender.core.placement.demand import AdmissionWait, JobDemand, job_demand
from extender.core.placement.fairshare import borrowing_wait, could_run
from extender.core.placement.fit import JobFit
from extender.core.placement.shapes import eligible_nodes
from extender.core.preemption.policy import Preemptor, allowed, preemptor_of, within_rule
from extender.core.preemption.search import Found, NotFound
from extender.core.state import ClusterState
from quota.accounting import QuotaLedger
from quota.admission import job_admission_failures
from quota.tree import QuotaMembershipError


def room_taker(
    state: ClusterState,
    demand: JobDemand,
    preemptor: Preemptor,
    found: Found | NotFound,
    ledger: QuotaLedger,
    now: float,
) -> AdmissionWait | None:
    """Why ``found``, a plan for ``demand``'s borrowing job that evicts other quotas'
    work, is not made (see the module docstring), and until when, or ``None``.  The
    first such higher-priority job by name is named; its quota must admit it (``max``,
    on ``ledger``, the planner's settled one), it must be held back only by an admission
    wait (:func:`~extender.core.placement.fairshare.borrowing_wait`, whose end is the
    refusal's), it must be allowed to preempt, and a node it could use must be one the
    plan places the borrower on."""
    if not isinstance(found, Found) or not preemptor.borrows:
        return None
    if not any(group.other_quota for group in found.kept):
        return None
    policy = state.tree[demand.quota].policy
    used = frozenset(found.placements.values())
    # A first look at every job with work waiting reads one pod's quota and the pods'
    # priorities; the few left are looked at whole, by name.
    waiting = state.members.pending_jobs()
    candidates = sorted(
        job
        for job, keys in waiting.items()
        if keys
        and job != demand.job
        and job not in state.reservations  # (one holding room of its own waits for none)
        and max(state.pods[key].priority for key in keys) > preemptor.priority
        and state.quota_name(state.pods[next(iter(keys))]) == demand.quota
    )
    for job in candidates:
        try:
            higher = job_demand(state, job)
        except (QuotaMembershipError, IndexError):
            continue
        if higher.quota != demand.quota or not higher.unplaced:
            continue
        if not all(may_trigger_preemption(pod, state.args) for pod in higher.unplaced):
            continue  # it could not take the borrower's pods
        if not any(used & eligible_nodes(state, pod) for pod in higher.unplaced):
            continue  # the plan takes no node it could use
        taker = preemptor_of(state, job, higher.quota, higher.unplaced, higher.asks)
        admission = within_rule(taker, policy)
        if admission is None:
            continue
        rule = allowed(state, tuple(demand.unplaced), admission, check_preemptible=True)
        if rule is None or not could_run(state, higher):
            continue
        if job_admission_failures(ledger, higher.quota, higher.np_request, higher.p_request):
            continue
        wait = borrowing_wait(state, higher, now, ledger)
        if wait is None:
            continue  # nothing holds it back: it is placed as any job, or waits for no rule
        if not JobFit(state, job, higher.unplaced, settled=True).fits():
            continue
        reason = (
            f"job {job} of quota {demand.quota} waits with a higher priority "
            f"({taker.priority}), fits on the room free now, and may evict this job's pods "
            f"({rule.value}): no other quota's work is evicted for room it would not keep "
            f"(it may borrow from {format_time(wait.until)})"
        )
        return AdmissionWait(reason, wait.until)
    return None
