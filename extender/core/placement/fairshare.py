"""Fair sharing at admission: a job does not borrow past its quota's fair share while
another quota, whose share would stay lower, has work waiting.

Without it, borrowed capacity goes to whoever asks first: a stream of one quota's small
jobs takes each GPU as it frees, and another quota's gang, waiting for several at once,
never gets them.  With it, a job that would borrow (``fairSharing``) is compared with
the jobs waiting in the other quotas (one cohort: the quota tree) that ask for a
resource it borrows: if one of them, once admitted, would leave its quota's share
(:func:`quota.fairshare.share_after`) below what this job's quota's share would be,
this job waits, and the room it would have taken stays free for that job; the filter
turns it away, and the planner makes no plan for it.  Equal shares admit.  A waiting job
that would borrow holds back only jobs of its priority or lower: fair sharing divides
what is borrowed among the jobs of a priority, and a borrower of lower priority, in
whatever quota, waits for it (so fair sharing's preemption takes no victim of higher
priority than its job: :func:`~extender.core.preemption.policy.fair_share_admission`).
One within its quota's ``min`` holds back every borrower, whatever the priorities: a
guarantee comes first (its reclaim would take the borrower back).

A waiting job counts only while it could run once room frees, and for
``fairSharingWaitSeconds`` after its newest pod was created.  Could run: its own quota
admits it, none of its pods is gated (``schedulingGates``), each fits some node of the
cluster when that node is empty (node selector, required node affinity, taints and
tolerations, requests within allocatable), and a gang's pods all exist and fit the nodes
together when every node is empty (:func:`could_run`).  At the filter, it holds back
only a pod one of whose candidate nodes (those kube-scheduler's own filters pass) one
of its pods could use: room taken elsewhere is no room it could have had.  A tenant's
pods that can never run (a node selector matching no node, a request larger than any
node, a gate never removed) hold no one back, however often they are re-created, and
pods pinned to nodes that stay full hold back no pod that could only go elsewhere;
work that cannot be placed for a reason Muster does not model (inter-pod affinity, a
volume) still holds others back for ``fairSharingWaitSeconds`` after its newest pod
was created.  An elastic job running its minimum, whose other pods wait for free room
and evict no one, holds back another job's admission into free room, not its plan to
evict: the room such a plan frees would not be its either.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from extender.core.gangsize import gang_size, live_pods
from extender.core.placement.demand import (
    AdmissionWait,
    JobDemand,
    borrowed_resources,
    job_demand,
    running_its_minimum,
)
from extender.core.placement.reborrow import in_reborrow_backoff, reborrow_wait
from extender.core.placement.reserve import reserve_wait
from extender.core.placement.shapes import eligible_nodes, fits_when_empty
from extender.core.state import ClusterState
from quota.accounting import QuotaLedger
from quota.admission import job_admission_failures
from quota.fairshare import share_after
from quota.tree import QuotaMembershipError


def borrowing_wait(
    state: ClusterState,
    demand: JobDemand,
    now: float,
    ledger: QuotaLedger | None = None,
    nodes: Collection[str] | None = None,
    *,
    evicting: bool = False,
) -> AdmissionWait | None:
    """Why ``demand``'s job, admitted by its quota, may not borrow now: its reborrow
    backoff (:mod:`~extender.core.placement.reborrow`), else the guarantee reserve
    (:mod:`~extender.core.placement.reserve`), else fair sharing (:func:`fair_share_wait`;
    ``evicting``: as there); ``None`` if none holds it back."""
    return (
        reborrow_wait(state, demand, now, ledger)
        or reserve_wait(state, demand, now, ledger)
        or fair_share_wait(state, demand, now, ledger, nodes, evicting=evicting)
    )


def fair_share_wait(
    state: ClusterState,
    demand: JobDemand,
    now: float,
    ledger: QuotaLedger | None = None,
    nodes: Collection[str] | None = None,
    *,
    evicting: bool = False,
) -> AdmissionWait | None:
    """Why ``demand``'s job waits for a quota below its fair share, or ``None``; judged on
    ``ledger`` (the live one by default; the planner gives its settled view).  ``nodes``:
    the nodes the job's pod could go to now (kube-scheduler's candidates); a waiting job
    none of whose pods could use any of them is not held back for (``None``: any node).
    ``evicting``: the job would take the room by evicting other pods (the planner asks),
    so an elastic job running its minimum, whose other pods wait for free room and evict
    no one (:func:`~extender.core.placement.demand.running_its_minimum`), holds it back
    not: the room such a plan frees would not be that job's either."""
    if not state.args.fair_sharing:
        return None
    ledger = ledger or state.ledger
    quota = demand.quota
    borrowed = borrowed_resources(ledger, demand)
    if not borrowed:
        return None
    capacity = state.capacity()
    mine = share_after(ledger, quota, capacity, demand.request)
    # Past a waiting job only if every pod it would run is of higher priority than that
    # job (the ceiling its fair-share preemption would have): else it could take them back.
    priority = min(pod.priority for pod in demand.unplaced)
    asking = (quota, mine, priority)
    waiting = _waiting_job(state, ledger, capacity, asking, borrowed, now, nodes, evicting)
    if waiting is None:
        return None
    other, job, theirs, until = waiting
    # Rounded: the same message from attempt to attempt while nothing changes.
    reason = (
        f"quota {quota} would borrow past its fair share (its share of borrowed capacity "
        f"{mine:.3f} once this job is admitted), while quota {other}'s job {job} waits "
        f"with a lower share ({theirs:.3f}); the room is left for it (fairSharing)"
    )
    return AdmissionWait(reason, until)


def _waiting_job(
    state: ClusterState,
    ledger: QuotaLedger,
    capacity: Mapping[str, int],
    asking: tuple[str, float, int],
    borrowed: frozenset[str],
    now: float,
    nodes: Collection[str] | None,
    evicting: bool,
) -> tuple[str, str, float, float] | None:
    """The first waiting job, by name, of another quota that asks for one of
    ``borrowed``, its quota admits, of priority (its pods' highest, as its preemption
    would be) at least the asking job's (its pods' lowest) unless it fits within its
    quota's ``min``, that could run once room frees (:func:`could_run`) on one of
    ``nodes`` (if given), that would evict for its room if the asking job would
    (``evicting``), and whose admission leaves its quota's share below ``mine``
    (``asking``: the asking job's quota, that quota's share with it, and that priority):
    ``(its quota, the job, that share, until when it holds others back)``; ``None`` if
    there is none.  Only quotas whose share is below ``mine`` now can have one (admitting
    more only raises a share): with none, no waiting job is read."""
    quota, mine, priority = asking
    lower = {
        other
        for other in ledger.tree.specs
        if other != quota and share_after(ledger, other, capacity) < mine
    }
    if not lower:
        return None
    wait = state.args.fair_sharing_wait_seconds
    pending = state.members.pending_jobs()
    found: tuple[str, str, float, float] | None = None
    for job, keys in pending.items():
        if found is not None and job >= found[1]:
            continue  # the first by name wins: the same answer on every replica
        first = state.pods[next(iter(keys))]
        newest = max(state.pods[key].created for key in keys)
        if newest + wait <= now:
            continue
        other = state.quota_name(first)
        if other not in lower:
            continue
        if not any(state.pods[key].requests.get(name, 0) > 0 for key in keys for name in borrowed):
            continue
        try:
            demand = job_demand(state, job)
        except (QuotaMembershipError, IndexError):
            continue
        if not any(demand.request.get(name, 0) > 0 for name in borrowed):
            continue  # its pods are charged already (admitted, binding)
        if max(pod.priority for pod in demand.unplaced) < priority and borrowed_resources(
            ledger, demand
        ):
            # Borrowed capacity goes to higher priority first (as its preemption would
            # take); work within its quota's min holds everyone back (a guarantee).
            continue
        if job_admission_failures(ledger, other, demand.np_request, demand.p_request):
            continue
        if in_reborrow_backoff(state, job, other, now) and borrowed_resources(ledger, demand):
            continue  # it may not borrow yet: the room would not be its
        theirs = share_after(ledger, other, capacity, demand.request)
        if theirs >= mine:
            continue
        if evicting and running_its_minimum(state, demand, ledger) is not None:
            continue  # it grows into free room only: evicted room would not be its
        if reserve_wait(state, demand, now, ledger) is not None:
            continue  # the room is reserved for a guarantee, not for it
        if could_run(state, demand, nodes):
            found = (other, job, theirs, newest + wait)
    return found


def could_run(state: ClusterState, demand: JobDemand, nodes: Collection[str] | None = None) -> bool:
    """Could ``demand``'s pods run once room frees, as far as Muster can tell: none is
    gated (``schedulingGates``: kube-scheduler does not try it), each fits some node when
    that node is empty, and a gang's pods all exist (its min-available) and fit the nodes
    together when every node is empty.  With ``nodes``, one of its pods must also be able
    to use one of them (room taken elsewhere is no room it could have had)."""
    if any(pod.gated for pod in demand.unplaced):
        return False  # it waits for its gates to be removed, not for room
    if nodes is not None and not _could_use(state, demand, nodes):
        return False
    first = demand.unplaced[0]
    if first.group is None:
        return fits_when_empty(state, demand.unplaced, whole=False)
    size = gang_size(state, first)
    if len(live_pods(state, demand.job)) < size:
        return False  # its pods do not all exist: it waits for them, not for room
    return fits_when_empty(state, demand.unplaced, whole=size > 1)


def _could_use(state: ClusterState, demand: JobDemand, nodes: Collection[str]) -> bool:
    """Is one of ``nodes`` eligible for one of ``demand``'s pods (static constraints, and
    allocatable enough: :func:`~extender.core.placement.shapes.eligible_nodes`)?"""
    # (The pods of one shape share one memoised set: the distinct ones, not copied.)
    sets = {eligible_nodes(state, pod) for pod in demand.unplaced}
    return any(name in eligible for eligible in sets for name in nodes)
