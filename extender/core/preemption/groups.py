"""Victim groups, and how the candidate walk builds them from victim units.

A victim group is what one trial eviction takes: a running pod, or, for a pod of a gang,
every running pod of that gang (evicting part of a gang wastes the rest), or one pod an
elastic job runs above its minimum.  :class:`GroupBuilder` builds the group of a unit
the walk (:mod:`.candidates`) offers, asking the planner first whether it could help
(:class:`Wanted`) and the policy (:mod:`.policy`) whether it may be taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from base.keys import COMPLETION_INDEX_ANNOTATION
from base.resources import add_into, total
from extender.core.objects import PodInfo
from extender.core.preemption.policy import Admission, Preemptor, Rule, allowed
from extender.core.state import ClusterState, UnitEntry

#: One thing the walk offers, in the victim order: a victim unit (its entry), or one pod
#: of an elastic unit above its minimum (the unit's entry and that pod); with the policy
#: admission of the walk's phase.
Offer = tuple[UnitEntry, Admission, PodInfo | None]


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
    #: Where the walk offered it in the victim order (:mod:`.deferral` may offer a unit
    #: later than its place: the planner puts its groups back in this order).
    position: int = 0

    @property
    def order_key(self) -> tuple[int, int, float, str]:
        return (0 if self.other_quota else 1, self.priority, -self.started, self.job)


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


@dataclass(frozen=True, slots=True)
class GroupBuilder:
    """Builds the victim group of a unit the walk offers, or of one pod an elastic job
    sheds, if the planner wants it and the policy allows it."""

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
        self, job: str, quota: str, pod: PodInfo, admission: Admission, position: int
    ) -> VictimGroup | None:
        """The group of ``pod``, one of an elastic job's pods above its minimum (its job
        keeps running), if the planner still wants it and the policy allows it."""
        state = self.state
        if pod.key in self.wanted.taken or not self.wanted((pod,), quota):
            return None
        rule = allowed(state, (pod,), admission, check_preemptible=True)
        if rule is None:
            return None
        requests: Mapping[str, int] = pod.requests
        if state.declarations.declares_min_resources(job):
            requests = _with_hold_change(state, job, (pod,), requests, self.wanted.taken)
        other = quota != self.preemptor.quota
        return VictimGroup(
            job,
            quota,
            (pod,),
            requests,
            pod.priority,
            pod.work_started,
            other,
            rule,
            shed=True,
            position=position,
        )

    def group(self, entry: UnitEntry, admission: Admission, position: int) -> VictimGroup | None:
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
            requests = (
                members[0].requests if len(members) == 1 else total(p.requests for p in members)
            )
        if rule is None:
            return None
        if state.declarations.declares_min_resources(job):
            requests = _with_hold_change(state, job, members, requests, self.wanted.taken)
        other = quota != self.preemptor.quota
        return VictimGroup(
            job, quota, members, requests, priority, -negative_start, other, rule, position=position
        )


def shed_order(pod: PodInfo) -> tuple[int, float, str]:
    """Which of an elastic job's pods go first: the highest completion index of an indexed
    Job, else the newest (latest start), then by name."""
    index = pod.annotations.get(COMPLETION_INDEX_ANNOTATION, "")
    # Only plain ASCII digits, not too many (a tenant writes it: "²" is a digit to
    # str.isdigit and not to int, and int refuses thousands of digits).
    number = int(index) if 0 < len(index) <= 9 and index.isascii() and index.isdigit() else 0
    return (-number, -pod.start_or_created, pod.name)


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
