"""Which running pods a preempting job may evict, and in which order: the candidate walk.

A candidate is a *victim group*: a running pod, or, for a pod of a gang, every running
pod of that gang (evicting part of a gang wastes the rest).  A pod is allowed when it is
preemptible, bound, not departing (terminating, marked for soft eviction, or preempted
by kube-scheduler), not promised to another in-flight job, and the preemptor quota's
policies allow it (:mod:`.policy`): its own quota's lower-priority work, and the work of
quotas borrowing in a resource the job asks for (and so every quota on their path up to
the level they share with the job's: :func:`quota.admission.reclaimable`; a parent
within its ``min`` shields its subtree).

Whether taking a group from another quota would push that quota below its ``min``
depends on what was taken before it, so the planner checks that as it goes
(:func:`quota.admission.min_violations`).  The order is: other quotas first, lower
priority first, least work lost first (the latest to start or save its work), then by
name.  The planner may walk again below a priority (``priority_cap``): plans compare
priority before which quota a victim is of.

The planner says which groups could still help it (``wanted``); only those are checked
against the policies.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet

from extender.core.objects import PodInfo
from extender.core.preemption.groups import GroupBuilder, Offer, VictimGroup, Wanted
from extender.core.preemption.policy import (
    Admission,
    Preemptor,
    Rule,
    above_share,
    cohort_rule,
    fair_share_admission,
    within_rule,
)
from extender.core.preemption.walk import (
    asking_for,
    by_priority,
    places_wanted,
    screened,
    settled_units,
    with_settled,
)
from extender.core.state import ClusterState, UnitEntry
from quota.accounting import QuotaLedger
from quota.admission import reclaimable
from quota.fairshare import share_after


def describe(
    group: VictimGroup, preemptor: Preemptor, governed: frozenset[str] = frozenset()
) -> str:
    """Why the policies let ``preemptor`` evict ``group``, in words; ``governed``: the
    resources the victim's quota names, to which the borrowed resources are narrowed."""
    contested = preemptor.contested & governed or preemptor.contested
    resources = ", ".join(sorted(contested))
    if group.rule is Rule.LOWER_PRIORITY:
        return (
            f"lower priority ({group.priority} < {preemptor.priority}) in the same quota "
            f"{preemptor.quota}"
        )
    if group.rule is Rule.NEWER_EQUAL_PRIORITY:
        return f"equal priority ({group.priority}) but newer, in the same quota {preemptor.quota}"
    if group.rule is Rule.FAIR_SHARE:
        return (
            f"quota {group.quota} borrows above its fair share: its share of borrowed "
            f"capacity is above quota {preemptor.quota}'s, and taking {resources} back "
            "narrows the gap (fairSharing)"
        )
    if group.rule is Rule.RECLAIM:
        return (
            f"quota {group.quota} is borrowing beyond its min; quota {preemptor.quota} reclaims "
            f"{resources} within its own min (reclaimWithinCohort)"
        )
    return (
        f"quota {group.quota} is borrowing beyond its min; quota {preemptor.quota} borrows "
        f"{resources} too and the victim has lower priority ({group.priority} < "
        f"{preemptor.priority}; borrowWithinCohort)"
    )


def find_victim_groups(
    state: ClusterState,
    preemptor: Preemptor,
    wanted: Wanted,
    ledger: QuotaLedger,
    priority_cap: int | None = None,
    reorder: Callable[[Iterator[Offer]], Iterator[tuple[int, Offer]]] | None = None,
) -> Iterator[VictimGroup]:
    """Every victim group the policies allow and ``wanted(pods, quota)`` accepts, in
    preemption order, built lazily; with ``priority_cap``, only groups of that priority
    or lower.

    The state keeps all victim units in one sorted list (and each quota's in
    its own), so this walks the other quotas' units, then the preemptor's, up to
    where a policy's priority ceiling cuts them: a planner that stops early
    never touches the rest.  ``wanted`` is asked before the policy checks.

    Most units cannot help (their pods run on nodes that could not gain the job
    anything, or ask for nothing such a node lacks), so three cheap tests come
    first: the other quotas' units are read only from the lists of those that ask for a
    resource ``wanted.lacking`` names, or that hold units spread over nodes (the index
    keeps them split by what they ask for, each list in the victim order, merged back in
    that order); units that
    are their whole job on one node (see :data:`~extender.core.state.UnitPlace`) are
    passed over, at C speed, unless ``wanted.lacking`` names their node and one of
    their resources; and a unit that is its whole job is asked about (a group holds
    some of its pods) before the group is built.

    Which quotas borrow is read from ``ledger``: the plan's settled view, in which
    earlier plans' victims still leaving are gone.  ``reorder``: numbers the offers by
    their place and may offer some later (:mod:`.deferral`); each group says where it
    was offered (``position``).
    """
    promised = state.book.promised_victims()
    builder = GroupBuilder(
        state, preemptor, wanted, promised, state.victims.unit_pods(), state.victims.entries()
    )
    offers = _offers(state, preemptor, wanted, ledger, priority_cap, builder)
    numbered = enumerate(offers) if reorder is None else reorder(offers)
    for position, (entry, admission, shed) in numbered:
        if shed is None:
            group = builder.group(entry, admission, position)
        else:
            group = builder.shed(entry[2], entry[3], shed, admission, position)
        if group is not None:
            yield group


def _offers(
    state: ClusterState,
    preemptor: Preemptor,
    wanted: Wanted,
    ledger: QuotaLedger,
    priority_cap: int | None,
    builder: GroupBuilder,
) -> Iterator[Offer]:
    """What :func:`find_victim_groups` offers, in order, phase by phase."""
    settled = settled_units(state, promised=builder.promised)
    entries_of = builder.unit_entries
    for units, asking, quotas, admission, ranked in _phases(state, preemptor, ledger):
        # Elastic jobs give up their pods above their minimum before any whole job of
        # their priority or above goes.
        ceiling, _rule, equal_rule, _created_after = admission
        last = ceiling + 1 if equal_rule is not None else ceiling
        if priority_cap is not None:
            last = min(last, priority_cap)
        excess = [shed for shed in builder.excess(quotas) if shed[0] <= last]
        entries: Iterator[UnitEntry]
        lacking = wanted.lacking(quotas)
        lists: list[Sequence[UnitEntry]]
        if ranked is not None:  # one list per quota, merged by priority, then rank
            lists = [state.victims.units(quota) for quota in sorted(quotas)]
        else:
            lists = [units]
        if lacking is None:
            streams: list[Iterator[UnitEntry]] = [
                itertools.islice(part, bisect.bisect_right(part, last, key=by_priority))
                for part in lists
            ]
        else:  # pass over the units that cannot help, at C speed
            screen = places_wanted(lacking, state.victims.unit_resources())
            if ranked is None and asking is not None:
                lists = list(asking_for(asking, state.victims.asks_of_scattered(), lacking))
            streams = (
                [screened([part], last, screen) for part in lists]
                if ranked
                else [screened(lists, last, screen)]
            )
        order = None if ranked is None else _by_priority_then_rank(ranked)
        entries = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=order)
        if settled:
            entries = with_settled(entries, settled, quotas, last, order)
        for entry in entries:
            while excess and excess[0][0] <= entry[0]:
                _priority, job, _quota, pods = excess.pop(0)
                yield from _shed_offers(entries_of[job], admission, pods)
            if entry[3] in quotas and entry[2] != preemptor.job:
                yield entry, admission, None
        for _priority, job, _quota, pods in excess:
            yield from _shed_offers(entries_of[job], admission, pods)


def _shed_offers(
    entry: UnitEntry, admission: Admission, pods: Iterable[PodInfo]
) -> Iterator[Offer]:
    for pod in pods:
        yield entry, admission, pod


_Phase = tuple[
    Sequence[UnitEntry],
    Mapping[frozenset[str], Sequence[UnitEntry]] | None,
    AbstractSet[str],
    Admission,
    Mapping[str, int] | None,
]


def _phases(state: ClusterState, preemptor: Preemptor, ledger: QuotaLedger) -> list[_Phase]:
    """The walk's phases, in order: the borrowing quotas above the job's quota's fair share
    (fair sharing), the other borrowing quotas the cohort rule lets the job take from (a
    reclaim within ``min``; ``borrowWithinCohort`` only with fair sharing off), then its
    own quota's lower-priority work.  With ``fairSharing``, each phase taking
    from other quotas ranks them (the last element: quota → rank), the quota furthest
    above its fair share first: among victims of one priority, its go first."""
    policy = state.tree[preemptor.quota].policy
    phases: list[_Phase] = []
    victims = state.victims
    borrowing = frozenset(
        quota
        for quota in state.tree.specs
        if quota != preemptor.quota
        and reclaimable(ledger, quota, preemptor.quota, preemptor.contested)
    )
    fair = above_share(state, preemptor, borrowing, ledger)
    if fair:
        phases.append(
            (
                victims.units(),
                victims.units_asking(),
                fair,
                fair_share_admission(preemptor),
                _ranks(state, ledger, fair),
            )
        )
    cohort = cohort_rule(preemptor, policy)
    if preemptor.borrows and preemptor.fair_share is not None:
        # With fair sharing, a borrower takes from another quota only by fair sharing:
        # from a quota above its share, while the gap narrows (borrowWithinCohort would
        # let a quota far above its share take from one below it, widening the gap).
        cohort = None
    if cohort is not None and borrowing - fair:
        lenders = borrowing - fair
        ranks = _ranks(state, ledger, lenders)
        phases.append((victims.units(), victims.units_asking(), lenders, cohort, ranks))
    own = within_rule(preemptor, policy)
    if own is not None:
        phases.append((state.victims.units(preemptor.quota), None, {preemptor.quota}, own, None))
    return phases


def _ranks(
    state: ClusterState, ledger: QuotaLedger, quotas: AbstractSet[str]
) -> Mapping[str, int] | None:
    """With ``fairSharing``, ``quotas`` ranked by their share of borrowed capacity, the
    largest first (then by name); ``None`` when off, or for one quota."""
    if not state.args.fair_sharing or len(quotas) < 2:
        return None
    capacity = state.capacity()
    shares = {quota: share_after(ledger, quota, capacity) for quota in quotas}
    ordered = sorted(quotas, key=lambda quota: (-shares[quota], quota))
    return {quota: rank for rank, quota in enumerate(ordered)}


def _by_priority_then_rank(
    ranks: Mapping[str, int],
) -> Callable[[UnitEntry], tuple[int, int, float, str]]:
    """The walk's order with quotas ranked: priority, then the quota's rank, then the
    victim order (least work lost, then by job)."""

    def key(entry: UnitEntry) -> tuple[int, int, float, str]:
        return (entry[0], ranks[entry[3]], entry[1], entry[2])

    return key
