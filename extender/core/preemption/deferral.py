"""Passing over victim units until their node could gain the job something.

The candidate walk takes victims in the victim order until the whole job fits.  For a
gang of whole-node pods, a node gains a copy only once every pod on it is out, and the
lowest-priority pods are spread over every node: the walk takes thousands of pods from
nodes that never clear, and the minimisation puts them all back (at 15,000 nodes, some
8,000 trial evictions for a plan of 261 victims).

:class:`Deferral` holds a unit back instead, on its node, until the units held there
could, all taken, let the node hold one more copy of the job (judged on the node's room
as the walk has changed it so far, so a gang's pods taken there count); then it offers
the node's held units, in their order, and every later unit of that node at its place;
a unit offered at its place (a gang's, say) that could let a node gain with the units
held there is offered after them.  Until then the held units could not make their node
gain even with that unit out, so a node gains at the same point of the walk as without
deferral: the walk stops at the same point and keeps the same victims, and the
minimisation puts groups back in the order they were offered without it (each group's
``position``).

Only what nothing else reads is held: whole units on one node, of a quota whose usage
does not enter the job's quota checks, outside fair sharing's phase, whose job holds no
``minResources`` (it would free more than its requests); for a job whose quota checks
hold before any eviction, of one pod shape, without slices, that does not reclaim within
its ``min`` once its own work is gone, with no PodDisruptionBudget in play, and whose
every pod together needs more than any node has of each resource a node may lack, or that
is one pod that may lack only one resource on any node (so whether a unit could help, which
the walk asks when it is offered, is the same whenever it is asked: node room does not
suffice, in any resource a node may lack, until the walk stops).  What the units
still held when the walk stops would have taken from their quotas' usage is not taken:
:meth:`Deferral.keeps_guarantees` says whether every ``min`` check of the walk would
have passed as it did with it taken too; when it would not, or a check spared a victim,
the planner walks again without deferral.  A walk that runs out of units offers the
units still held last, in order: it then has met every unit, as the walk without does.

The walk's first phase may also go only up to a horizon, on the nodes that could gain by
then (:mod:`.horizon`): where every unit the screen passes would be held, the units on
the other nodes could only have been held.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet

from base.resources import add_into
from extender.core.objects import PodInfo
from extender.core.placement.fit import JobFit
from extender.core.preemption.groups import Offer, VictimGroup
from extender.core.preemption.horizon import LOWEST, gains_at, held_beyond, pays, walk_up_to
from extender.core.preemption.policy import Admission, Rule
from extender.core.state import ClusterState, UnitEntry, memoise_on_node
from quota.accounting import QuotaLedger


class Deferral:
    """Holds victim units back on their nodes (see the module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        fit: JobFit,
        counted: Callable[[str], bool],
        *,
        horizon: bool = False,
    ) -> None:
        """``counted(quota)``: does the quota's usage enter the job's quota checks (its
        units are never held)?  ``horizon``: walk the first phase up to a horizon
        (:meth:`horizon`)."""
        shape = fit.shapes[0]
        self._amounts = dict(shape.needs)
        self._capacity = shape.capacity
        self._short = fit.short
        self._peek = fit.overlay.peek
        self._untouched = fit.overlay.untouched
        #: What a node untouched by the walk lacks for one more copy, memoised on the
        #: state until the node changes (the walk reads it on thousands of nodes a plan).
        self._memo = state.node_usage.missing
        self._memo_key = (shape.needs, shape.size)
        self._gains_memo = state.node_usage.gains
        self._uncounted = frozenset(q for q in state.tree.specs if not counted(q))
        self._unit_pods = state.victims.unit_pods()
        self._requests = state.victims.unit_requests()
        self._declarations = state.declarations
        #: Node → the positions of its held offers, in order; and each held offer by its
        #: position (no object made per unit held: a plan may hold thousands).
        self._held: dict[str, list[int]] = {}
        self._offer_at: dict[int, Offer] = {}
        #: Node → how much of each resource it may lack is still missing for one more
        #: copy with its held units out (dropped when the walk frees room there itself).
        self._missing: dict[str, dict[str, int]] = {}
        #: Nodes whose units are offered at their place now.
        self._released: set[str] = set()
        #: Quota → what its units held now ask of each resource some quota has a ``min``
        #: of (what :meth:`keeps_guarantees` weighs).
        self._bounded = tuple(
            sorted(
                {
                    name
                    for spec in state.tree.specs.values()
                    for name, b in spec.min.items()
                    if b > 0
                }
            )
        )
        self._held_of: dict[str, dict[str, int]] = {}
        #: The place of the next offer.
        self._next = 0
        self._state = state
        #: Copies the job lacks: the horizon is drawn for as many nodes gaining one.
        self._needed = shape.size - sum(shape.capacity.values())
        #: With a horizon (:meth:`horizon`): the quotas of the phase it was drawn for.
        self._horizon: AbstractSet[str] | None = None
        self._may_horizon = horizon
        #: The nodes walked up to the horizon.
        self._walked: AbstractSet[str] = frozenset()
        self.cut_short = False
        #: The priority of the last unit the walk met (where it stopped, once it has).
        self._reached = LOWEST

    @staticmethod
    def applies(
        state: ClusterState, fit: JobFit, *, budgets: bool, within_min: bool, quota_ok: bool
    ) -> bool:
        """May the walk for ``fit``'s job hold units back?  ``budgets``: the search spares
        victims for PodDisruptionBudgets (the order of takes decides which are spared);
        ``quota_ok``: the job's quota checks hold before any eviction (else node room may
        suffice before they do, and a unit released after that could help no more, where
        taken at its place it counted)."""
        if not quota_ok or budgets or within_min:
            return False
        if fit.slices is not None or len(fit.shapes) != 1:
            return False
        shape = fit.shapes[0]
        if shape.size == 1:
            # Room for it on a node is the walk's end; but where a node may lack two
            # resources, a unit freeing one of them helps only until a unit taken before
            # it there freed enough of that one, and deferral changes what comes first.
            return all(len(lacks) == 1 for lacks in fit.short.values())
        largest = state.largest_allocatable()
        may_lack = frozenset().union(*set(fit.short.values()))  # on some useful node
        return all(
            shape.size * amount > largest.get(name, 0)
            for name, amount in shape.needs
            if name in may_lack
        )

    def units(
        self,
        entries: Iterable[UnitEntry],
        admission: Admission,
        quotas: AbstractSet[str],
        job: str,
    ) -> Iterator[tuple[int, Offer]]:
        """The units of ``entries`` of one of ``quotas`` and not ``job``'s, numbered by
        their place, some held back and offered later (one loop: a walk meets thousands
        of units it holds)."""
        held, released, short, uncounted = self._held, self._released, self._short, self._uncounted
        unit_requests, missing_of = self._requests, self._missing
        offer_at = self._offer_at
        # (A unit whose PodGroup holds minResources frees more than its requests.)
        declares_min_resources = self._declarations.declares_min_resources
        held_of, bounded = self._held_of, self._bounded
        holds = admission[1] is not Rule.FAIR_SHARE
        for entry in entries:
            quota = entry[3]
            if quota not in quotas or entry[2] == job:
                continue
            position = self._next
            self._next = position + 1
            node = entry[4][0]
            if (
                holds
                and node in short
                and node not in released
                and quota in uncounted
                and not declares_min_resources(entry[2])
            ):
                requests = unit_requests[entry[2]]
                missing = missing_of.get(node)
                if missing is None:
                    missing = missing_of[node] = self._missing_now(node)
                gains = True
                for name in short[node]:
                    left = missing[name] = missing[name] - requests.get(name, 0)
                    if left > 0:
                        gains = False  # still short of it with this unit out too
                if gains:  # (its node's missing is dropped as it is released)
                    self._reached = entry[0]
                    yield from self._release(node)
                    yield position, (entry, admission, None)
                    continue
                positions = held.get(node)
                if positions is None:
                    held[node] = [position]
                else:
                    positions.append(position)
                offer_at[position] = (entry, admission, None)
                counted = held_of.get(quota)
                if counted is None:
                    counted = held_of[quota] = dict.fromkeys(bounded, 0)
                for name in bounded:
                    counted[name] += requests.get(name, 0)
                continue
            offer = (entry, admission, None)
            self._reached = entry[0]
            if held:
                yield from self._releasing(self._unit_pods.get(entry[2], ()))
            yield position, offer

    def horizon(
        self, quotas: AbstractSet[str], admission: Admission
    ) -> tuple[int, dict[str, frozenset[str]]] | None:
        """For the walk's first phase (``quotas``, ``admission``): the priority to walk up
        to, and the nodes to walk, each with the resources it may lack (:mod:`.horizon`);
        ``None`` when some unit the walk's screen passes might not be held, so that every
        unit on every node must be met, or when a sample of the nodes says the horizon
        would pass over too few of them to pay for reading them all."""
        if (
            not self._may_horizon
            or admission[1] is Rule.FAIR_SHARE
            or not quotas <= self._uncounted
            or self._declarations.any_min_resources(self._state.victims)
            or not pays(self._state.nodes, self._short, self._gains, self._needed)
        ):
            return None
        found = walk_up_to(self._short, self._all_gains(), self._needed)
        if found is not None:
            self._horizon = quotas
            self._walked = found[1].keys()
        return found

    @property
    def horizon_used(self) -> bool:
        """Did the walk go up to a horizon?"""
        return self._horizon is not None

    def offer(self, offer: Offer) -> Iterator[tuple[int, Offer]]:
        """One pod an elastic job sheds, offered at its place (never held)."""
        position = self._next
        self._next = position + 1
        self._reached = max(self._reached, offer[0][0])
        if self._held:
            yield from self._releasing((offer[2],) if offer[2] is not None else ())
        yield position, offer

    def rest(self) -> Iterator[tuple[int, Offer]]:
        """Nothing more to offer: the units still held go, in order, so a walk that finds
        no plan has met every unit, as the walk without deferral does."""
        rest = sorted(self._offer_at.items())
        self._held.clear()
        self._offer_at.clear()
        self._held_of.clear()
        yield from rest

    def _releasing(self, pods: Iterable[PodInfo]) -> Iterator[tuple[int, Offer]]:
        """Before a unit offered at its place: the units held on a node its ``pods`` run
        on, where taking it could let that node gain with them."""
        short, missing_of = self._short, self._missing
        for where, freed in _by_node(pods, self._held).items():
            missing = self._missing_now(where)
            if all(missing[name] <= freed.get(name, 0) for name in short[where]):
                yield from self._release(where)
            else:
                missing_of.pop(where, None)  # its room may change now

    def keeps_guarantees(
        self,
        ledger: QuotaLedger,
        taken: list[VictimGroup],
        guarding: Callable[[str], tuple[str, ...]],
    ) -> bool:
        """Would every ``min`` check of the walk that found ``taken`` (on ``ledger``, the
        plan's) have passed as it did, had the units still held been taken out of their
        quotas too?  ``guarding(quota)``: the quotas whose ``min`` a victim of ``quota``
        must not break.  Judged on the least any check could have seen, for every guard
        of a quota with units held: its usage now, less what is held, less the largest
        amount of the resource a group taken asks for, at least its ``min``."""
        if self._horizon is None:
            return self._keeps_guarantees(ledger, self._held_of, taken, guarding)
        # The units held on the nodes the horizon passed over are not known: at most,
        # every unit of the phase's quotas up to the priority where the walk stopped; or,
        # counted, those of them on such nodes.
        quotas, reached = self._horizon, self._reached
        asked_up_to = self._state.victims.asked_up_to
        most = {quota: asked_up_to(quota, reached) for quota in quotas}
        if self._keeps_guarantees(ledger, most, taken, guarding):
            return True
        held = held_beyond(self._state, self._short, self._walked, quotas, reached)
        for quota, amounts in self._held_of.items():
            add_into(held.setdefault(quota, {}), amounts)
        return self._keeps_guarantees(ledger, held, taken, guarding)

    def _keeps_guarantees(
        self,
        ledger: QuotaLedger,
        held_of: Mapping[str, Mapping[str, int]],
        taken: list[VictimGroup],
        guarding: Callable[[str], tuple[str, ...]],
    ) -> bool:
        """:meth:`keeps_guarantees`, with ``held_of`` held (quota → amounts)."""
        tree = ledger.tree
        lowered: dict[str, dict[str, int]] = {}
        for quota, amounts in held_of.items():
            for guard in guarding(quota):
                add_into(lowered.setdefault(guard, {}), amounts)
        largest: dict[str, int] = {}
        for group in taken:
            for name, amount in group.requests.items():
                largest[name] = max(amount, largest.get(name, 0))
        for guard, amounts in lowered.items():
            used = ledger[guard].subtree_used
            for name, bound in tree[guard].min.items():
                less = amounts.get(name, 0)
                lowest = used.get(name, 0) - less - largest.get(name, 0)
                if bound > 0 and less > 0 and lowest < bound:
                    return False
        return True

    def _release(self, node: str) -> Iterator[tuple[int, Offer]]:
        """Offer ``node``'s held units, in order; its later units come at their place."""
        self._released.add(node)
        self._missing.pop(node, None)
        for position in self._held.pop(node, ()):
            offer = self._offer_at.pop(position)
            requests = self._requests[offer[0][2]]
            counted = self._held_of[offer[0][3]]
            for name in self._bounded:
                counted[name] -= requests.get(name, 0)
            yield position, offer

    def _all_gains(self) -> dict[str, int]:
        """:meth:`_gains` of every useful node that could ever gain."""
        gains = {node: self._gains(node) for node in self._short}
        return {node: at for node, at in gains.items() if at is not None}

    def _gains(self, node: str) -> int | None:
        """:func:`.horizon.gains_at` for ``node`` before the walk, memoised on the state
        for a node the walk's overlay leaves untouched, until the node changes."""
        if not self._untouched(node):
            return self._gains_on(node)
        known = self._gains_memo.get(node)
        if known is not None and self._memo_key in known:
            return known[self._memo_key]
        at = self._gains_on(node)
        memoise_on_node(self._gains_memo, node, self._memo_key, at)
        return at

    def _gains_on(self, node: str) -> int | None:
        amounts_on = self._state.preemptible_amounts
        return gains_at(self._missing_now(node), self._short[node], node, amounts_on)

    def _missing_now(self, node: str) -> dict[str, int]:
        """How much of each resource ``node`` may lack is missing for one more copy of
        the job's shape, on the room the walk left it, with its held units out.  Only
        those resources can stop it (:attr:`JobFit.short`)."""
        held = self._held.get(node)
        if held is None and self._untouched(node):
            known = self._memo.get(node)
            memoised = known.get(self._memo_key) if known is not None else None
            if memoised is None:
                memoised = self._missing_on(node)
                memoise_on_node(self._memo, node, self._memo_key, memoised)
            return dict(memoised)
        missing = self._missing_on(node)
        for position in held or ():
            requests = self._requests[self._offer_at[position][0][2]]
            for name in missing:
                missing[name] -= requests.get(name, 0)
        return missing

    def _missing_on(self, node: str) -> dict[str, int]:
        """What ``node``'s room, as the walk left it, lacks for one more copy, in the
        resources it may lack."""
        room = self._peek(node)
        wanted = self._capacity.get(node, 0) + 1
        amounts = self._amounts
        return {name: wanted * amounts[name] - room.get(name, 0) for name in self._short[node]}


def _by_node(pods: Iterable[PodInfo], nodes: Container[str]) -> dict[str, dict[str, int]]:
    """The requests of ``pods`` summed by node, for those on ``nodes``."""
    totals: dict[str, dict[str, int]] = {}
    for pod in pods:
        node = pod.node_name
        if node is not None and node in nodes:
            add_into(totals.setdefault(node, {}), pod.requests)
    return totals
