"""Fair sharing at admission: a job does not borrow past its quota's fair share while
another quota, whose share would stay lower, has work waiting.

Without it, borrowed capacity goes to whoever asks first: a stream of one quota's small
jobs takes each GPU as it frees, and another quota's gang, waiting for several at once,
never gets them.  With it, a job that would borrow (``fairSharing``) is compared with
the jobs waiting in the other quotas (one cohort: the quota tree) that ask for a
resource it borrows: if one of them, once admitted, would leave its quota's share
(:func:`quota.fairshare.share_after`) below what this job's quota's share would be,
this job waits, and the room it would have taken stays free for that job; the filter
turns it away, and the planner makes no plan for it.  Equal shares admit.

A waiting job counts only while it could be admitted by its own quota and for
``fairSharingWaitSeconds`` after its newest pod was created: work that cannot be placed
(a node selector matching no node) cannot keep capacity idle for ever.
"""

from __future__ import annotations

from extender.core.placement.demand import JobDemand, job_demand
from extender.core.state import ClusterState
from quota.admission import job_admission_failures
from quota.fairshare import share_after
from quota.tree import QuotaMembershipError


def fair_share_wait(state: ClusterState, demand: JobDemand, now: float) -> str | None:
    """Why ``demand``'s job waits for a quota below its fair share, or ``None``."""
    if not state.args.fair_sharing:
        return None
    quota = demand.quota
    ledger = state.ledger
    borrowed = borrowed_resources(state, demand)
    if not borrowed:
        return None
    capacity = state.capacity()
    mine = share_after(ledger, quota, capacity, demand.request)
    waiting = _waiting_quotas(state, quota, borrowed, mine, now)
    if waiting is None:
        return None
    other, job, theirs = waiting
    # Rounded: the same message from attempt to attempt while nothing changes.
    return (
        f"quota {quota} would borrow past its fair share (its share of borrowed capacity "
        f"{mine:.3f} once this job is admitted), while quota {other}'s job {job} waits "
        f"with a lower share ({theirs:.3f}); the room is left for it (fairSharing)"
    )


def borrowed_resources(state: ClusterState, demand: JobDemand) -> frozenset[str]:
    """The resources the job asks for in which admitting it takes its quota beyond its
    ``min``."""
    spec = state.tree[demand.quota]
    used = state.ledger[demand.quota].used
    return frozenset(
        name
        for name, amount in demand.request.items()
        if amount > 0
        and name in spec.governed
        and used.get(name, 0) + amount > spec.min.get(name, 0)
    )


def _waiting_quotas(
    state: ClusterState,
    quota: str,
    borrowed: frozenset[str],
    mine: float,
    now: float,
) -> tuple[str, str, float] | None:
    """The first waiting job, by name, of another quota that asks for one
    of ``borrowed``, its quota admits, and whose admission leaves its quota's share below
    ``mine``: ``(its quota, the job, that share)``; ``None`` if there is none."""
    tree, ledger = state.tree, state.ledger
    capacity = state.capacity()
    horizon = now - state.args.fair_sharing_wait_seconds
    lower: dict[str, bool] = {}  # quota → is its share now below mine (else it cannot be)
    for job in sorted(state.members.pending_jobs()):
        pods = [state.pods[key] for key in state.members.pending_jobs()[job]]
        if max(pod.created for pod in pods) < horizon:
            continue
        other = state.quota_name(pods[0])
        if other is None or other == quota:
            continue
        if other not in lower:
            lower[other] = share_after(ledger, other, capacity) < mine
        if not lower[other]:
            continue  # admitting more only raises its share
        if not any(pod.requests.get(name, 0) > 0 for pod in pods for name in borrowed):
            continue
        if not borrowed & tree[other].governed:
            continue
        try:
            demand = job_demand(state, job)
        except (QuotaMembershipError, IndexError):
            continue
        if not any(demand.request.get(name, 0) > 0 for name in borrowed):
            continue  # its pods are charged already (admitted, binding)
        if job_admission_failures(ledger, other, demand.np_request, demand.p_request):
            continue
        theirs = share_after(ledger, other, capacity, demand.request)
        if theirs < mine:
            return other, job, theirs
    return None
