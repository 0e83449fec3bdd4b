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
from typing import Protocol

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
    pace: Pace | None = None,
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
    earlier plans' victims still leaving are gone.  ``pace``: numbers the offers by
    their place and may offer some later (:mod:`.deferral`; by default every offer comes
    at its place); each group says where it was offered (``position``).
    """
    promised = state.book.promised_victims()
    builder = GroupBuilder(
        state, preemptor, wanted, promised, state.victims.unit_pods(), state.victims.entries()
    )
    numbered = _offers(state, preemptor, wanted, ledger, priority_cap, builder, pace or InOrder())
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
    pace: Pace,
) -> Iterator[tuple[int, Offer]]:
    """What :func:`find_victim_groups` offers, phase by phase, as ``pace`` numbers it."""
    settled = settled_units(state, promised=builder.promised)
    entries_of = builder.unit_entries
    for phase, (units, asking, quotas, admission, ranked) in enumerate(
        _phases(state, preemptor, ledger)
    ):
        # Elastic jobs give up their pods above their minimum before any whole job of
        # their priority or above goes.
        ceiling, _rule, equal_rule, _created_after = admission
        last = ceiling + 1 if equal_rule is not None else ceiling
        if priority_cap is not None:
            last = min(last, priority_cap)
        lacking = wanted.lacking(quotas)
        horizon = pace.horizon(quotas, admission) if phase == 0 and lacking else None
        if horizon is not None:  # walk up to it, on the nodes that could gain by then
            last = min(last, horizon[0])
            lacking = horizon[1]
        excess = [shed for shed in builder.excess(quotas) if shed[0] <= last]
        entries: Iterator[UnitEntry]
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
        if excess:
            for entry in entries:
                while excess and excess[0][0] <= entry[0]:
                    _priority, job, _quota, pods = excess.pop(0)
                    yield from _shed_offers(pace, entries_of[job], admission, pods)
                yield from pace.units((entry,), admission, quotas, preemptor.job)
            for _priority, job, _quota, pods in excess:
                yield from _shed_offers(pace, entries_of[job], admission, pods)
        else:
            yield from pace.units(entries, admission, quotas, preemptor.job)
        if horizon is not None:
            pace.cut_short = True  # every unit up to the horizon met, and no room yet
            return
    yield from pace.rest()


def _shed_offers(
    pace: Pace, entry: UnitEntry, admission: Admission, pods: Iterable[PodInfo]
) -> Iterator[tuple[int, Offer]]:
    for pod in pods:
        yield from pace.offer((entry, admission, pod))


class Pace(Protocol):
    """Numbers the walk's offers by their place (the order they come in), and may hold
    some back to offer later (:class:`~.deferral.Deferral`)."""

    def units(
        self,
        entries: Iterable[UnitEntry],
        admission: Admission,
        quotas: AbstractSet[str],
        job: str,
    ) -> Iterator[tuple[int, Offer]]:
        """The units of ``entries`` of one of ``quotas`` and not ``job``'s."""
        ...

    def offer(self, offer: Offer) -> Iterator[tuple[int, Offer]]:
        """One pod an elastic job sheds."""
        ...

    def rest(self) -> Iterator[tuple[int, Offer]]:
        """What is still held once nothing more is offered."""
        ...

    def horizon(
        self, quotas: AbstractSet[str], admission: Admission
    ) -> tuple[int, Mapping[str, frozenset[str]]] | None:
        """For the first phase: the priority to walk up to, and the nodes to walk (as
        :meth:`.Wants.lacking`), or ``None`` to walk every phase whole."""
        ...

    #: Set when a walk up to the horizon ended without finding room.
    cut_short: bool


class InOrder:
    """Every offer at its place."""

    def __init__(self) -> None:
        self._next = 0
        self.cut_short = False

    def units(
        self,
        entries: Iterable[UnitEntry],
        admission: Admission,
        quotas: AbstractSet[str],
        job: str,
    ) -> Iterator[tuple[int, Offer]]:
        for entry in entries:
            if entry[3] in quotas and entry[2] != job:
                position = self._next
                self._next = position + 1
                yield position, (entry, admission, None)

    def offer(self, offer: Offer) -> Iterator[tuple[int, Offer]]:
        position = self._next
        self._next = position + 1
        yield position, offer

    def rest(self) -> Iterator[tuple[int, Offer]]:
        return iter(())

    def horizon(
        self, quotas: AbstractSet[str], admission: Admission
    ) -> tuple[int, Mapping[str, frozenset[str]]] | None:
        return None


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
