"""The guarantee reserve: a quota's unused ``min`` is not lent to work that saves nothing
while the quota is likely to take it back.

Lending idle guaranteed room is what keeps GPUs busy, and taking it back is what keeps the
guarantee: a borrower is evicted when the owner's next job comes.  A borrower that saves
checkpoints loses little then (its notice runs to its next save); one that saves nothing
loses everything it did, and is restarted, borrows the next room that frees and is taken
back again.  On the head-to-head's trace that loop is most of the work Muster loses
(docs/benchmarks.md).  So, with ``guaranteeReserveSeconds`` (or an owner quota's
``muster.dev/guarantee-reserve-seconds``), the part of a quota's ``min`` it does not use
is held back from borrowers that declare no checkpoint interval
(``muster.dev/checkpoint-interval-seconds``) for that long after the quota's newest pod
was created, and while it has a pod waiting to be bound: a team that submitted lately is
likely to submit again, and one with work waiting is about to claim its ``min``.  A job
that saves, and any job within its own quota's ``min``, borrows as ever; a team quiet for
longer lends to anyone.

The rule, per resource the job would borrow: the cluster's free room (its capacity less
what every quota uses, reservations and holds included) less the job's request, plus what
borrowers of lower priority than the job hold (an owner's reclaim takes them back first:
the comparator's priority step), must stay at least what the *active* quotas (other
top-level quotas within their reserve) are owed, their ``min`` less their use.  So a job
is held back only where it would be the one taken back.  Read on the ledger given (the
planner's settled view: victims on their way out count as gone), so the planner makes no
plan for a job the reserve holds back.  Whom it trusts: a pod's creation time is the API
server's; a tenant creating pods only keeps its own ``min`` reserved, which it is
guaranteed anyway; a tenant that declares an interval it does not keep borrows, and
loses its own work when taken back (its notice is capped by its quota's).
"""

from __future__ import annotations

import math

from base.resources import format_resources
from base.times import format_time
from extender.core.placement.demand import AdmissionWait, JobDemand, borrowed_resources
from extender.core.state import ClusterState
from quota.accounting import QuotaLedger


def reserve_seconds(state: ClusterState, quota: str) -> float:
    """How long after its newest pod ``quota``'s unused ``min`` is reserved: its
    ``muster.dev/guarantee-reserve-seconds``, else the ``guaranteeReserveSeconds``
    argument (0: not reserved)."""
    spec = state.tree.specs.get(quota)
    own = spec.policy.guarantee_reserve_seconds if spec is not None else None
    return state.args.guarantee_reserve_seconds if own is None else own


def saves_its_work(demand: JobDemand) -> bool:
    """Does the job declare a checkpoint interval on its pods waiting to run?"""
    return any(pod.checkpoint_interval is not None for pod in demand.unplaced)


def reserve_wait(
    state: ClusterState, demand: JobDemand, now: float, ledger: QuotaLedger | None = None
) -> AdmissionWait | None:
    """Why ``demand``'s job may not borrow the free room now, or ``None``: it saves
    nothing, and what it would borrow would leave less free room, with what borrowers of
    lower priority hold (taken back before it), than the active quotas are owed (judged
    on ``ledger``, the live one by default)."""
    ledger = ledger or state.ledger
    borrowed = borrowed_resources(ledger, demand)
    if not borrowed or saves_its_work(demand):
        return None
    active, owed = _active_owners(state, ledger, demand.quota, now, borrowed)
    if not active:
        return None
    free = _free(state, ledger)
    priority = min(pod.priority for pod in demand.unplaced)
    first = _taken_back_first(state, ledger, {quota for quota, _ in active}, priority)
    short = {
        name: owed[name]
        for name in sorted(borrowed)
        if free.get(name, 0) - demand.request.get(name, 0) + first.get(name, 0) < owed[name]
    }
    if not short:
        return None
    until = min(last for _, last in active)
    names = f"quota{'s' if len(active) > 1 else ''} " + ", ".join(q for q, _ in active)
    amounts = ", ".join(f"{q} {name}" for name, q in format_resources(short).items())
    reason = (
        f"quota {demand.quota}: job {demand.job} saves no checkpoint, and the room it would "
        f"borrow is owed to {names} ({amounts} of min unused, with a pod created lately "
        f"or waiting); it is lent only to jobs that save until {format_time(until)} "
        f"(guaranteeReserveSeconds)"
    )
    return AdmissionWait(reason, until)


def _active_owners(
    state: ClusterState, ledger: QuotaLedger, asking: str, now: float, borrowed: frozenset[str]
) -> tuple[list[tuple[str, float]], dict[str, int]]:
    """The top-level quotas other than ``asking``'s whose reserve runs at ``now`` (its
    seconds after its newest pod's creation, or after now while it has a pod waiting to be
    bound) and that are owed some of ``borrowed``: ``(quota, when its reserve ends)``, by
    name; and what they are owed together, per resource of ``borrowed`` (their ``min``
    less their use)."""
    tree = ledger.tree
    mine = tree.root(asking)
    seconds = {
        quota: reserve
        for quota in tree.specs
        if tree.root(quota) == quota and quota != mine
        if (reserve := reserve_seconds(state, quota)) > 0
    }
    if not seconds:
        return [], {}  # no quota reserves its min: the common case costs one pass
    latest: dict[str, float] = {}  # an owner → when its reserve ends
    for quota in tree.specs:
        root = tree.root(quota)
        if root not in seconds:
            continue
        created = state.membership.newest_pod(quota)
        # Work waiting counts as an arrival now: the quota is about to claim its min.
        last = now if state.membership.has_pending(quota) else created
        if last is not None and last + seconds[root] > latest.get(root, -math.inf):
            latest[root] = last + seconds[root]
    active: list[tuple[str, float]] = []
    owed: dict[str, int] = {}
    for root, until in sorted(latest.items()):
        if now >= until:
            continue
        spec, use = tree[root], ledger[root].subtree_used
        unused = {name: spec.min.get(name, 0) - use.get(name, 0) for name in borrowed}
        if all(amount <= 0 for amount in unused.values()):
            continue
        active.append((root, until))
        for name, amount in unused.items():
            owed[name] = owed.get(name, 0) + max(0, amount)
    return active, owed


def _taken_back_first(
    state: ClusterState, ledger: QuotaLedger, owners: set[str], priority: int
) -> dict[str, int]:
    """What borrowers of lower priority than ``priority`` hold, which an owner's reclaim
    takes back first (the comparator's priority step): per quota outside ``owners``'
    trees, the lesser of what it uses beyond its ``min`` and what its running
    preemptible pods below that priority ask for."""
    tree = ledger.tree
    first: dict[str, int] = {}
    for quota in tree.specs:
        if tree.root(quota) in owners:
            continue
        lower = state.victims.asked_up_to(quota, priority - 1)
        if not lower:
            continue
        spec, used = tree[quota], ledger[quota].used
        for name, amount in lower.items():
            beyond = used.get(name, 0) - spec.min.get(name, 0)
            if beyond > 0:
                first[name] = first.get(name, 0) + min(beyond, amount)
    return first


def _free(state: ClusterState, ledger: QuotaLedger) -> dict[str, int]:
    """The cluster's capacity less what its quotas use (each pod counts in one quota, so
    the top-level quotas' subtree use is everything used)."""
    free = dict(state.capacity())
    tree = ledger.tree
    for quota in tree.specs:
        if tree.root(quota) != quota:
            continue
        for name, amount in ledger[quota].subtree_used.items():
            free[name] = free.get(name, 0) - amount
    return free
