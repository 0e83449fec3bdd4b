"""Job-level quota admission, and the borrowing tests preemption policies use.

The formulas are the Koordinator proposal's, applied to a whole job (the
sums run over the job's pods not yet counted as used):

- non-preemptible: ``np_used + job ≤ min`` and ``used + job ≤ max``;
- preemptible: ``min(min, np_request) + p_used + job ≤ max`` (room up to
  ``min`` stays reserved for the quota's own non-preemptible pods);
- every ancestor: ``subtree_used + job ≤ max``.

Only the resources the job asks for are checked, and only against bounds the
quota names: a resource absent from ``max`` is not limited.  One absent from
``min`` is guaranteed nothing: a non-preemptible job may not ask for it when the
quota governs it through ``max``, and any job asking for it borrows when some quota
of the tree names it (:func:`would_borrow`), so it may take other quotas' pods only as
a borrower may.
Every failure is a sentence a person can act on.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable, Mapping

from base.resources import PODS, format_quantity
from quota.accounting import QuotaLedger
from quota.tree import StopPolicy


def job_admission_failures(
    ledger: QuotaLedger,
    quota: str,
    np_request: Mapping[str, int],
    p_request: Mapping[str, int],
) -> list[str]:
    """Why the job's unplaced pods (split into non-preemptible and preemptible
    requests) may not be admitted into ``quota``; empty when they may."""
    spec = ledger.tree[quota]
    failures = unevictable_failures(ledger, quota, np_request)
    if ledger.tree.stop_policy(quota)[0] is not StopPolicy.NONE:
        return failures
    usage = ledger[quota]
    for name in sorted(set(np_request) | set(p_request)):
        amount = np_request.get(name, 0) + p_request.get(name, 0)
        if amount <= 0 or name not in spec.max:
            continue
        after = usage.used.get(name, 0) + amount
        if after > spec.max[name]:
            failures.append(
                f"quota {quota}: {name} {_q(name, after)} would exceed "
                f"max {_q(name, spec.max[name])}"
            )
    for name in sorted(p_request):
        amount = p_request[name]
        if amount <= 0 or name not in spec.max:
            continue
        held = min(spec.min.get(name, 0), usage.np_request.get(name, 0))
        p_used = usage.used.get(name, 0) - usage.np_used.get(name, 0)
        after = held + p_used + amount
        if after > spec.max[name]:
            failures.append(
                f"quota {quota}: preemptible {name} {_q(name, after)} (room held for "
                f"non-preemptible pods {_q(name, held)} + preemptible used {_q(name, p_used)} "
                f"+ job {_q(name, amount)}) would exceed max {_q(name, spec.max[name])}"
            )
    for ancestor in ledger.tree.ancestors(quota):
        parent = ledger.tree[ancestor]
        for name in sorted(set(np_request) | set(p_request)):
            amount = np_request.get(name, 0) + p_request.get(name, 0)
            if amount <= 0 or name not in parent.max:
                continue
            after = ledger[ancestor].subtree_used.get(name, 0) + amount
            if after > parent.max[name]:
                failures.append(
                    f"parent quota {ancestor}: {name} {_q(name, after)} would exceed "
                    f"max {_q(name, parent.max[name])}"
                )
    return failures


def unevictable_failures(
    ledger: QuotaLedger, quota: str, np_request: Mapping[str, int]
) -> list[str]:
    """The admission failures no eviction can cure: a stopped quota, and non-preemptible
    pods beyond ``min`` (victims are preemptible, so evicting them frees none of it)."""
    spec = ledger.tree[quota]
    stop, source = ledger.tree.stop_policy(quota)
    if stop is not StopPolicy.NONE:
        where = f"quota {quota}" if source == quota else f"quota {quota}'s ancestor {source}"
        return [f"{where} is stopped (stop-policy {stop.value})"]
    usage = ledger[quota]
    failures = []
    for name in sorted(np_request):
        amount = np_request[name]
        if amount <= 0 or name not in spec.governed:
            continue
        after = usage.np_used.get(name, 0) + amount
        bound = spec.min.get(name, 0)
        if after > bound:
            failures.append(
                f"quota {quota}: non-preemptible {name} {_q(name, after)} would exceed "
                f"min {_q(name, bound)}"
            )
    return failures


def would_borrow(
    ledger: QuotaLedger, quota: str, request: Mapping[str, int], resources: Iterable[str]
) -> bool:
    """Whether ``quota`` is, or admitting ``request`` takes it, above its ``min`` in one of
    ``resources`` (the job's own resources; part of the job may be charged already by its
    admission hold) that some quota of the tree names.  A resource absent from ``min``
    is guaranteed nothing, whether or not this quota names it elsewhere: asking for any
    of it is borrowing (GPUs, for a quota naming only cpu and memory, when another quota
    names GPUs).  A resource no quota names is outside quota accounting: it makes no job
    a borrower."""
    return bool(borrowed_in(ledger, quota, request, resources))


def borrowed_in(
    ledger: QuotaLedger, quota: str, request: Mapping[str, int], resources: Iterable[str]
) -> frozenset[str]:
    """The resources of ``resources`` in which ``quota`` is, or admitting ``request``
    takes it, above its ``min`` (as :func:`would_borrow` judges them)."""
    spec = ledger.tree[quota]
    used = ledger[quota].used
    accounted = ledger.tree.governed
    return frozenset(
        name
        for name in resources
        if name in accounted
        and name != PODS
        and used.get(name, 0) + request.get(name, 0) > spec.min.get(name, 0)
    )


def is_borrowing(ledger: QuotaLedger, quota: str, resources: Iterable[str]) -> bool:
    """Whether ``quota`` uses more than its ``min`` of any of ``resources`` some quota of
    the tree names (as in :func:`would_borrow`)."""
    spec = ledger.tree[quota]
    usage = ledger[quota].subtree_used
    accounted = ledger.tree.governed
    return any(
        usage.get(name, 0) > spec.min.get(name, 0)
        for name in resources
        if name in accounted and name != PODS
    )


def over_max_on_path(
    ledger: QuotaLedger, quota: str, resources: Collection[str] | None = None
) -> str | None:
    """The first of ``quota`` (its own usage) and its ancestors (their subtrees' usage)
    that uses more than its ``max`` of a resource the ``max`` names (of ``resources``
    only, when given: those a job asks for), as the ledger stands; ``None`` when none
    does.  Room already charged (a reservation) is counted, so a job whose room is
    charged may bind only when this is ``None``: binding moves its charge, it does not
    add one, and would otherwise keep the quota over its ``max``.  A quota over its
    ``max`` in a resource the job does not ask for (its ``max`` lowered below what runs)
    does not hold the job: binding it changes nothing there."""
    for name in (quota, *ledger.tree.ancestors(quota)):
        usage = ledger[name]
        used = usage.used if name == quota else usage.subtree_used
        if any(
            used.get(r, 0) > limit
            for r, limit in ledger.tree[name].max.items()
            if resources is None or r in resources
        ):
            return name
    return None


def reclaimable(ledger: QuotaLedger, victim: str, preemptor: str, resources: Iterable[str]) -> bool:
    """May ``preemptor``'s job reclaim from pods of quota ``victim`` (the path rule)?

    Only if every quota on the path from ``victim`` up to, not including, the lowest
    ancestor it shares with ``preemptor`` uses more than its ``min`` of one of
    ``resources`` (those the job asks for): a quota within its ``min`` shields its
    whole subtree, so pods that borrow a sibling's unused ``min`` inside a parent
    within its own are not reclaimable from outside that parent."""
    wanted = [name for name in resources if name != PODS]
    path = ledger.tree.path_below_common_ancestor(victim, preemptor)
    return bool(path) and all(is_borrowing(ledger, quota, wanted) for quota in path)


def min_violations(
    ledger: QuotaLedger,
    quotas: Iterable[str],
    requests: Mapping[str, int],
    contested: Container[str],
) -> tuple[str | None, str | None]:
    """Why taking ``requests`` away would push one of ``quotas`` below its ``min`` in one
    of the ``contested`` resources (those the preemptor asks for), and why in any resource
    (``None``: it would not); the planner asks both of every victim group of another quota.

    ``quotas`` are the victim's quota and its ancestors below the level it
    shares with the preemptor.  Only a resource the quota uses at least its
    ``min`` of can be pushed below it: a quota already short of its ``min`` in
    a resource (a CPU guarantee it does not use, say, beside borrowed GPUs) is
    not protected from losing the pods it borrows with.
    """
    anywhere = None
    for quota in quotas:
        spec = ledger.tree[quota]
        usage = ledger[quota].subtree_used
        for name, bound in spec.min.items():
            amount = requests.get(name, 0)
            if bound <= 0 or amount <= 0:
                continue
            used = usage.get(name, 0)
            if used >= bound > used - amount:
                if name in contested:
                    why = _below_min(quota, name, bound, used)
                    return why, why
                if anywhere is None:
                    anywhere = _below_min(quota, name, bound, used)
    return None, anywhere


def _below_min(quota: str, name: str, bound: int, used: int) -> str:
    return (
        f"quota {quota} would fall below its min {name} {_q(name, bound)} (uses {_q(name, used)})"
    )


def _q(name: str, milli: int) -> str:
    return format_quantity(name, milli)
