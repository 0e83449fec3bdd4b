"""Reborrow backoff: a job another quota took back waits before it borrows again.

A borrower taken back by a reclaim is restarted at once (its Job controller, or
``restartEvictedJobs``), borrows the next room that frees, and is taken back again when the
guaranteed team's next job comes: admitted, reclaimed and admitted again in a loop, each
round losing the work since its last save.  With ``reborrowBackoffSeconds`` (or a quota's
``muster.dev/reborrow-backoff-seconds``), a job whose pods another quota's plan took
(reclaim, fair sharing, ``borrowWithinCohort``) does not borrow again for that long,
doubled for each time it was taken back, at most ``backoffMaxSeconds`` (KEP-1282's
requeue backoff, applied to borrowing only).  Within its quota's ``min`` it is admitted as
ever: the backoff never delays a guarantee.  Priority preemption inside the job's own
quota does not count: it takes nothing another quota is owed.

:func:`record_taken_back` reads each plan as its room is held (the planner's, a plan read
back from the pods' records), counting a plan once however often it is seen;
:func:`reborrow_wait` is the rule, asked by the filter's admission and by the planner
before it plans for a borrower.  A job in its backoff holds no other borrower back under
fair sharing (it could not take the room).  The count lives in the state, not on the
cluster: a restarted Muster forgets the plans whose victims are gone, and a job that
changes its name starts again from none, as Kueue's backoff does for a new workload.
"""

from __future__ import annotations

from base.times import format_time
from extender.core.placement.demand import AdmissionWait, JobDemand, borrowed_resources
from extender.core.state import ClusterState, Reservation, TakenBack
from quota.accounting import QuotaLedger

#: How many recent plans a record names to count each once (a plan is seen again while
#: its room is extended or read back; never after a later plan took the job).
_PLANS_KEPT = 8


def record_taken_back(state: ClusterState, reservation: Reservation) -> None:
    """Count, for each job of another quota among ``reservation``'s victims, the plan
    that took it back (once per plan), and forget the records whose longest backoff is
    over."""
    plan = (reservation.job, reservation.created)
    taken = {
        pod.job
        for key in reservation.victims
        if (pod := state.pods.get(key)) is not None
        and state.quota_name(pod) not in (None, reservation.quota)
    }
    book = state.book.taken_back
    for job in taken:
        known = book.get(job)
        if known is None:
            book[job] = TakenBack(1, reservation.created, (plan,))
        elif plan not in known.plans:
            recent = (*known.plans, plan)[-_PLANS_KEPT:]
            book[job] = TakenBack(known.times + 1, max(known.last, reservation.created), recent)
    horizon = reservation.created - state.args.backoff_max_seconds
    for job in [job for job, known in book.items() if known.last < horizon]:
        del book[job]


def reborrow_seconds(state: ClusterState, quota: str) -> float:
    """The quota's reborrow backoff base: its ``muster.dev/reborrow-backoff-seconds``,
    else the ``reborrowBackoffSeconds`` argument (0: none)."""
    spec = state.tree.specs.get(quota)
    own = spec.policy.reborrow_backoff_seconds if spec is not None else None
    return state.args.reborrow_backoff_seconds if own is None else own


def reborrow_until(state: ClusterState, job: str, quota: str) -> float | None:
    """Until when ``job`` (of ``quota``) may not borrow: its last taking back plus the
    base doubled for each time after the first, at most ``backoffMaxSeconds``; ``None``
    if it was never taken back or its quota has no backoff."""
    base = reborrow_seconds(state, quota)
    known = state.book.taken_back.get(job)
    if base <= 0 or known is None:
        return None
    doubled: float = base * 2 ** (known.times - 1)
    return known.last + min(state.args.backoff_max_seconds, doubled)


def reborrow_wait(
    state: ClusterState, demand: JobDemand, now: float, ledger: QuotaLedger | None = None
) -> AdmissionWait | None:
    """Why ``demand``'s job may not borrow yet, or ``None``: it would borrow (judged on
    ``ledger``, the live one by default) while its reborrow backoff runs."""
    until = reborrow_until(state, demand.job, demand.quota)
    if until is None or now >= until:
        return None
    borrowed = borrowed_resources(ledger or state.ledger, demand)
    if not borrowed:
        return None
    times = state.book.taken_back[demand.job].times
    reason = (
        f"quota {demand.quota}: job {demand.job} was taken back by another quota "
        f"{times} time{'s' if times > 1 else ''}; it borrows ({', '.join(sorted(borrowed))}) "
        f"again from {format_time(until)} (reborrowBackoffSeconds)"
    )
    return AdmissionWait(reason, until)


def in_reborrow_backoff(state: ClusterState, job: str, quota: str, now: float) -> bool:
    """Is ``job`` barred from borrowing at ``now``?  (Fair sharing: such a job holds no
    other borrower back.)"""
    until = reborrow_until(state, job, quota)
    return until is not None and now < until
