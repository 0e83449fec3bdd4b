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
import itertools
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from base.keys import COMPLETION_INDEX_ANNOTATION
from base.resources import add_into
from extender.core.objects import PodInfo
from extender.core.preemption.policy import (
    FAIR_SHARE_ADMISSION,
    Admission,
    Preemptor,
    Rule,
    above_share,
    allowed,
    cohort_rule,
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


@dataclass(slots=True)
class VictimGroup:
    """Pods that are evicted together: one pod, or the running pods of one gang.

    Not frozen, though never changed: the walk builds one per trial eviction (some
    3,000 a plan at 5,000 nodes), and a frozen dataclass is five times slower to build.
    """

    job: str
    quota: str
    pods: tuple[PodInfo, ...]
    requests: Mapping[str, int]
    priority: int  # the highest among the pods
    started: float  # when the latest work among the pods began (start or checkpoint)
    other_quota: bool
    rule: Rule
    #: One pod an elastic job runs above its minimum: its job keeps running.
    shed: bool = False

    @property
    def order_key(self) -> tuple[int, int, float, str]:
        return (0 if self.other_quota else 1, self.priority, -self.started, self.job)


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


class Wanted(Protocol):
    """The planner's side of the walk: could evicting a group still help it?"""

    def __call__(self, pods: tuple[PodInfo, ...], quota: str) -> bool:
        """Could evicting ``pods``, of ``quota``, help now?

        Asked with the planner's state at that moment; it must say no to a set
        of pods only if it says no to each of its subsets (as "could one of
        them help?" does).
        """
        ...

    @property
    def taken(self) -> AbstractSet[str]:
        """Keys of the pods the search has taken out so far (not offered again)."""
        ...

    def lacking(self, quotas: AbstractSet[str]) -> Mapping[str, AbstractSet[str]] | None:
        """Node → resources: for the rest of the walk, a group of one of ``quotas`` can
        be wanted only if one of its pods runs on one of these nodes and asks for one
        of its resources; ``None`` if any group may be."""
        ...


def find_victim_groups(
    state: ClusterState,
    preemptor: Preemptor,
    wanted: Wanted,
    ledger: QuotaLedger,
    priority_cap: int | None = None,
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
    earlier plans' victims still leaving are gone.
    """
    promised = state.book.promised_victims()
    walk = _Walk(
        state, preemptor, wanted, promised, state.victims.unit_pods(), state.victims.entries()
    )
    settled = settled_units(state, promised)
    for units, asking, quotas, admission in _phases(state, preemptor, ledger):
        # Elastic jobs give up their pods above their minimum before any whole job of
        # their priority or above goes.
        ceiling, _rule, equal_rule, _created_after = admission
        last = ceiling + 1 if equal_rule is not None else ceiling
        if priority_cap is not None:
            last = min(last, priority_cap)
        excess = [shed for shed in walk.excess(quotas) if shed[0] <= last]
        entries: Iterator[UnitEntry]
        lacking = wanted.lacking(quotas)
        if lacking is None:
            entries = itertools.islice(units, bisect.bisect_right(units, last, key=by_priority))
        else:  # pass over the units that cannot help, at C speed
            sources = (
                [units]
                if asking is None
                else asking_for(asking, state.victims.asks_of_scattered(), lacking)
            )
            screen = places_wanted(lacking, state.victims.unit_resources())
            entries = screened(sources, last, screen)
        if settled:
            entries = with_settled(entries, settled, quotas, last)
        for entry in entries:
            while excess and excess[0][0] <= entry[0]:
                _priority, job, quota, pods = excess.pop(0)
                yield from walk.shed(job, quota, pods, admission)
            if entry[3] in quotas and entry[2] != preemptor.job:
                group = walk.group(entry, admission)
                if group is not None:
                    yield group
        for _priority, job, quota, pods in excess:
            yield from walk.shed(job, quota, pods, admission)


#: One phase of the walk: its units, the same split by what they ask for (or ``None``),
#: the quotas it takes from, and how their policy admits victims.
_Phase = tuple[
    Sequence[UnitEntry],
    Mapping[frozenset[str], Sequence[UnitEntry]] | None,
    AbstractSet[str],
    Admission,
]


def _phases(state: ClusterState, preemptor: Preemptor, ledger: QuotaLedger) -> list[_Phase]:
    """The walk's phases, in order: the borrowing quotas above the job's quota's fair share
    (fair sharing), the other borrowing quotas the cohort rule lets the job take from,
    then its own quota's lower-priority work."""
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
        phases.append((victims.units(), victims.units_asking(), fair, FAIR_SHARE_ADMISSION))
    cohort = cohort_rule(preemptor, policy)
    if cohort is not None and borrowing - fair:
        phases.append((victims.units(), victims.units_asking(), borrowing - fair, cohort))
    own = within_rule(preemptor, policy)
    if own is not None:
        phases.append((state.victims.units(preemptor.quota), None, {preemptor.quota}, own))
    return phases


@dataclass(frozen=True, slots=True)
class _Walk:
    """What building a victim group from a unit reads."""

    state: ClusterState
    preemptor: Preemptor
    wanted: Wanted
    promised: AbstractSet[str]
    unit_pods: Mapping[str, tuple[PodInfo, ...]]
    unit_entries: Mapping[str, UnitEntry]

    def excess(self, quotas: AbstractSet[str]) -> list[tuple[int, str, str, list[PodInfo]]]:
        """The elastic jobs of ``quotas`` with pods above the minimum they declare, in the
        victim order: ``(priority, job, quota, pods to shed first)``, the pods by
        :func:`shed_order` (the highest completion index of an indexed Job, else the
        newest)."""
        elastic = self.state.victims.elastic()
        if not elastic:
            return []
        entries = sorted(
            self.unit_entries[job]
            for job in elastic
            if job in self.unit_entries
            and self.unit_entries[job][3] in quotas
            and job != self.preemptor.job
        )
        excess = []
        for priority, _start, job, quota, _place in entries:
            alive = [
                pod
                for pod in self.unit_pods[job]
                if not pod.departing and pod.key not in self.promised
            ]
            alive.sort(key=shed_order)
            above = alive[: max(0, len(alive) - elastic[job])]
            if above:
                excess.append((priority, job, quota, above))
        return excess

    def shed(
        self, job: str, quota: str, pods: list[PodInfo], admission: Admission
    ) -> Iterator[VictimGroup]:
        """One group per pod of ``pods`` (an elastic job's pods above its minimum) that the
        planner still wants and the policy allows: its job keeps running."""
        state = self.state
        for pod in pods:
            if pod.key in self.wanted.taken or not self.wanted((pod,), quota):
                continue
            rule = allowed(state, (pod,), admission, check_preemptible=True)
            if rule is None:
                continue
            requests: Mapping[str, int] = pod.requests
            if state.declarations.declares_min_resources(job):
                requests = _with_hold_change(state, job, (pod,), requests, self.wanted.taken)
            other = quota != self.preemptor.quota
            yield VictimGroup(
                job,
                quota,
                (pod,),
                requests,
                pod.priority,
                pod.work_started,
                other,
                rule,
                shed=True,
            )

    def group(self, entry: UnitEntry, admission: Admission) -> VictimGroup | None:
        """The victim group of ``entry``'s unit, if the planner wants it and the policy
        ``admission`` allows every pod of it; ``None`` otherwise."""
        state, promised = self.state, self.promised
        priority, negative_start, job, quota, place = entry
        unit = self.unit_pods[job]
        # A placed unit is all of its job's pods (see UnitPlace).
        size = len(unit) if place[0] else len(state.members.job_members(job))
        if size == len(unit) and not self.wanted(unit, quota):
            return None
        members: tuple[PodInfo, ...]
        requests: Mapping[str, int]
        if size == 1:  # the common case, kept cheap: the unit is that one pod
            only = unit[0]
            if only.departing or only.key in promised:
                return None
            members = unit
            requests = only.requests
            # It is preemptible (the unit index holds no other); its priority is the unit's.
            rule = (
                admission[1]
                if priority <= admission[0]
                else allowed(state, members, admission, check_preemptible=False)
            )
        else:
            taken = self.wanted.taken
            members = tuple(
                member
                for member in state.members.job_pods(job)
                if member.node_name is not None
                and not member.finished
                and not member.departing
                and member.key not in promised
                and member.key not in taken
            )
            if not members or not self.wanted(members, quota):
                return None
            # A gang's pods may not all be preemptible.
            rule = allowed(state, members, admission, check_preemptible=True)
            requests = members[0].requests if len(members) == 1 else _summed(members)
        if rule is None:
            return None
        if state.declarations.declares_min_resources(job):
            requests = _with_hold_change(state, job, members, requests, self.wanted.taken)
        other = quota != self.preemptor.quota
        return VictimGroup(job, quota, members, requests, priority, -negative_start, other, rule)


def shed_order(pod: PodInfo) -> tuple[int, float, str]:
    """Which of an elastic job's pods go first: the highest completion index of an indexed
    Job, else the newest (latest start), then by name."""
    index = pod.annotations.get(COMPLETION_INDEX_ANNOTATION, "")
    # Only plain ASCII digits, not too many (a tenant writes it: "²" is a digit to
    # str.isdigit and not to int, and int refuses thousands of digits).
    number = int(index) if 0 < len(index) <= 9 and index.isascii() and index.isdigit() else 0
    return (-number, -pod.start_or_created, pod.name)


def _summed(pods: Sequence[PodInfo]) -> dict[str, int]:
    total: dict[str, int] = {}
    for pod in pods:
        add_into(total, pod.requests)
    return total


def _with_hold_change(
    state: ClusterState,
    job: str,
    members: tuple[PodInfo, ...],
    requests: Mapping[str, int],
    taken: AbstractSet[str] = frozenset(),
) -> Mapping[str, int]:
    """What evicting ``members`` frees in their quota when their job's PodGroup declares
    ``minResources``: their requests, plus the job's hold once the pods already ``taken``
    are gone, less the hold it keeps without them too (it grows while other pods of the
    job still count, and goes with the last one)."""
    gone = set(taken)
    before = (
        state.min_resources.hold_without(state, job, gone)
        if gone
        else state.min_resources.held(job)
    )
    gone.update(pod.key for pod in members)
    after = state.min_resources.hold_without(state, job, gone)
    freed = dict(requests)
    if before is not None:
        add_into(freed, before.amount)
    if after is not None:
        add_into(freed, after.amount, -1)
    return freed
