"""Which running pods a preempting job may evict, and in which order.

A candidate is a *victim group*: a running pod, or, for a pod of a gang,
every running pod of that gang (evicting part of a gang wastes the rest).
A pod is allowed when it is preemptible, bound, not departing (terminating,
marked for soft eviction, or preempted by kube-scheduler), not promised to
another in-flight job, and the
preemptor quota's policies allow it (Kueue's names):

- same quota: ``withinQuota`` (``LowerPriority``, or
  ``LowerOrNewerEqualPriority``: equal priority but created after the job);
- another quota, borrowing in a resource the job asks for, and so every quota
  on its path up to the level it shares with the job's quota
  (:func:`quota.admission.reclaimable`: a parent within its ``min`` shields its
  subtree): when the job stays within its own ``min`` (once its own quota's pods
  ``withinQuota`` lets it evict are gone), ``reclaimWithinCohort`` (``Any`` or
  ``LowerPriority``); when the job itself borrows, ``borrowWithinCohort``
  (``LowerPriority``, at or below ``maxPriorityThreshold`` if set).

Whether taking a group from another quota would push that quota below its
``min`` depends on what was taken before it, so the planner checks that as
it goes (:func:`quota.admission.min_violations`).  The order is: other quotas
first, lower priority first, most recently started first, then by name.

The planner says which groups could still help it (``wanted``); only those
are checked against the policies.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol

from base.resources import add_into
from extender.core.jobs import may_trigger_preemption
from extender.core.objects import PodInfo
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
from quota.tree import BorrowWithinCohort, QuotaPolicy, ReclaimWithinCohort, WithinQuota


class Rule(Enum):
    """The policy that allows a victim."""

    LOWER_PRIORITY = "withinQuota LowerPriority"
    NEWER_EQUAL_PRIORITY = "withinQuota LowerOrNewerEqualPriority"
    RECLAIM = "reclaimWithinCohort"
    BORROW = "borrowWithinCohort"


@dataclass(frozen=True, slots=True)
class Preemptor:
    """What the policies need to know about the preempting job."""

    job: str
    quota: str
    priority: int
    created: float
    borrows: bool  # admitting it takes its quota above min
    contested: frozenset[str]  # resources it asks for (not the pod count)
    #: Within its min only once its own quota's evictable pods are gone: a plan must then
    #: leave the quota within its min (the job reclaims; it may not borrow).
    within_min_by_own_work: bool = False


def preemptor_of(
    state: ClusterState,
    job: str,
    quota: str,
    unplaced: Sequence[PodInfo],
    contested: frozenset[str],
) -> Preemptor:
    """The job as the policies see it before borrowing is judged: the highest priority of
    its unplaced pods, created when its first pod was."""
    return Preemptor(
        job=job,
        quota=quota,
        priority=max(pod.priority for pod in unplaced),
        created=min(pod.created for pod in state.members.job_pods(job)),
        borrows=False,
        contested=contested,
    )


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
    started: float  # the most recent start among the pods
    other_quota: bool
    rule: Rule

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

    def lacking(self, quotas: AbstractSet[str]) -> Mapping[str, AbstractSet[str]] | None:
        """Node → resources: for the rest of the walk, a group of one of ``quotas`` can
        be wanted only if one of its pods runs on one of these nodes and asks for one
        of its resources; ``None`` if any group may be."""
        ...


def find_victim_groups(
    state: ClusterState, preemptor: Preemptor, wanted: Wanted, ledger: QuotaLedger
) -> Iterator[VictimGroup]:
    """Every victim group the policies allow and ``wanted(pods, quota)`` accepts, in
    preemption order, built lazily.

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
    policy = state.tree[preemptor.quota].policy
    # Per phase: its units, the same split by what they ask for (or None), its quotas and
    # how they are admitted.
    phases: list[
        tuple[
            Sequence[UnitEntry],
            Mapping[frozenset[str], Sequence[UnitEntry]] | None,
            AbstractSet[str],
            _Admission,
        ]
    ] = []
    cohort = _cohort_rule(preemptor, policy)
    if cohort is not None:
        borrowing = frozenset(
            quota
            for quota in state.tree.specs
            if quota != preemptor.quota
            and reclaimable(ledger, quota, preemptor.quota, preemptor.contested)
        )
        if borrowing:
            victims = state.victims
            phases.append((victims.units(), victims.units_asking(), borrowing, cohort))
    own = _within_rule(preemptor, policy)
    if own is not None:
        phases.append((state.victims.units(preemptor.quota), None, {preemptor.quota}, own))
    promised = state.book.promised_victims()
    unit_pods = state.victims.unit_pods()
    own_quota = preemptor.quota
    settled = settled_units(state, promised)
    for units, asking, quotas, admission in phases:
        ceiling, _rule, equal_rule, _created_after = admission
        last = ceiling + 1 if equal_rule is not None else ceiling
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
        for priority, negative_start, job, quota, place in entries:
            if quota not in quotas or job == preemptor.job:
                continue
            unit = unit_pods[job]
            # A placed unit is all of its job's pods (see UnitPlace).
            size = len(unit) if place[0] else len(state.members.job_members(job))
            if size == len(unit) and not wanted(unit, quota):
                continue
            members: tuple[PodInfo, ...]
            requests: Mapping[str, int]
            if size == 1:  # the common case, kept cheap: the unit is that one pod
                only = unit[0]
                if only.departing or only.key in promised:
                    continue
                members = unit
                requests = only.requests
                # It is preemptible (the unit index holds no other); its priority is the
                # unit's.
                rule = (
                    admission[1]
                    if priority <= ceiling
                    else _allowed(state, members, admission, check_preemptible=False)
                )
            else:
                members = tuple(
                    member
                    for member in state.members.job_pods(job)
                    if member.node_name is not None
                    and not member.finished
                    and not member.departing
                    and member.key not in promised
                )
                if not members or not wanted(members, quota):
                    continue
                # A gang's pods may not all be preemptible.
                rule = _allowed(state, members, admission, check_preemptible=True)
                if len(members) == 1:
                    requests = members[0].requests
                else:
                    total: dict[str, int] = {}
                    for member in members:
                        add_into(total, member.requests)
                    requests = total
            if rule is None:
                continue
            if state.declarations.declares_min_resources(job):
                requests = _with_hold_change(state, job, members, requests)
            yield VictimGroup(
                job, quota, members, requests, priority, -negative_start, quota != own_quota, rule
            )


def _with_hold_change(
    state: ClusterState, job: str, members: tuple[PodInfo, ...], requests: Mapping[str, int]
) -> Mapping[str, int]:
    """What evicting ``members`` frees in their quota when their job's PodGroup declares
    ``minResources``: their requests, plus the job's hold as it is, less the hold it keeps
    without them (it grows while other pods of the job still count, and goes with the
    last one)."""
    before = state.min_resources.held(job)
    after = state.min_resources.hold_without(state, job, {pod.key for pod in members})
    freed = dict(requests)
    if before is not None:
        add_into(freed, before.amount)
    if after is not None:
        add_into(freed, after.amount, -1)
    return freed


def own_evictable_requests(state: ClusterState, preemptor: Preemptor) -> dict[str, int]:
    """The requests of the pods of the job's own quota that ``withinQuota`` lets it
    evict (preemptible, bound, staying, not promised to another job): what the job's
    quota would use less of once its own lower-priority work is gone."""
    admission = _within_rule(preemptor, state.tree[preemptor.quota].policy)
    if admission is None:
        return {}
    ceiling, _rule, equal_rule, _created_after = admission
    last = ceiling + 1 if equal_rule is not None else ceiling
    units = state.victims.units(preemptor.quota)
    promised = state.book.promised_victims()
    freed: dict[str, int] = {}
    entries: Iterator[UnitEntry] = itertools.islice(
        units, bisect.bisect_right(units, last, key=by_priority)
    )
    settled = settled_units(state, promised)
    if settled:
        entries = with_settled(entries, settled, {preemptor.quota}, last)
    for _unit_priority, _start, job, _quota, _place in entries:
        if job == preemptor.job:
            continue
        members = tuple(
            pod
            for pod in state.victims.unit_pods()[job]
            if not pod.departing and pod.key not in promised
        )
        # A gang goes whole or not at all: every pod of it must be allowed.
        if _allowed(state, members, admission, check_preemptible=True) is not None:
            for pod in members:
                add_into(freed, pod.requests)
    return freed


def _allowed(
    state: ClusterState,
    members: tuple[PodInfo, ...],
    admission: _Admission,
    *,
    check_preemptible: bool,
) -> Rule | None:
    """The rule that allows evicting all of ``members``, or ``None``."""
    ceiling, rule, equal_rule, created_after = admission
    result = rule
    for member in members:
        if check_preemptible and not state.preemptible(member):
            return None
        if member.priority <= ceiling:
            continue
        if equal_rule is None or member.priority != ceiling + 1 or member.created <= created_after:
            return None
        result = equal_rule
    return result


#: How a quota's policy admits victims: a pod is allowed with ``rule`` if its priority is at
#: most ``ceiling``; else with ``equal_rule`` if its priority is ``ceiling + 1`` and it was
#: created after ``created_after``.
_Admission = tuple[float, Rule, Rule | None, float]


def _within_rule(preemptor: Preemptor, policy: QuotaPolicy) -> _Admission | None:
    if policy.within_quota is WithinQuota.NEVER:
        return None
    newer = policy.within_quota is WithinQuota.LOWER_OR_NEWER_EQUAL_PRIORITY
    return (
        preemptor.priority - 1,
        Rule.LOWER_PRIORITY,
        Rule.NEWER_EQUAL_PRIORITY if newer else None,
        preemptor.created,
    )


def _cohort_rule(preemptor: Preemptor, policy: QuotaPolicy) -> _Admission | None:
    if not preemptor.borrows:
        reclaim = policy.reclaim_within_cohort
        if reclaim is ReclaimWithinCohort.NEVER:
            return None
        ceiling = math.inf if reclaim is ReclaimWithinCohort.ANY else preemptor.priority - 1
        return (ceiling, Rule.RECLAIM, None, 0.0)
    if policy.borrow_within_cohort is BorrowWithinCohort.NEVER:
        return None
    ceiling = preemptor.priority - 1
    if policy.max_priority_threshold is not None:
        ceiling = min(ceiling, policy.max_priority_threshold)
    return (ceiling, Rule.BORROW, None, 0.0)


def victim_refusal(state: ClusterState, job: str, victim: PodInfo) -> str | None:
    """Why ``victim`` may not be marked for ``job`` now, whatever record names it (``None``:
    the rules allow it).  Checked before the victims of a reservation read back are marked
    (a Muster that died between writing a reservation and marking its victims): the
    victim must be running, preemptible, in a quota; the job must still wait, may preempt,
    and its quota's policy must allow a pod of the victim's quota and priority.  Budgets
    need no check here: the evictor evicts through the Eviction API, which honours them."""
    pending = [
        pod for pod in state.members.job_pods(job) if pod.node_name is None and not pod.finished
    ]
    if not pending:
        return f"job {job} has no pending pods"
    quota = state.quota_name(pending[0])
    if quota is None:
        return f"job {job} has no quota it may use"
    if not any(may_trigger_preemption(pod, state.args) for pod in pending):
        return f"job {job} may not trigger preemption"
    if victim.node_name is None or victim.finished or victim.departing:
        return f"{victim.key} is not running"
    victim_quota = state.charged_to(victim)
    if victim_quota is None or not state.preemptible(victim):
        return f"{victim.key} is not preemptible"
    preemptor = preemptor_of(state, job, quota, pending, frozenset())
    policy = state.tree[quota].policy
    if victim_quota == quota:
        admissions = [_within_rule(preemptor, policy)]
    else:
        lending = _cohort_rule(preemptor, policy)
        borrowing = _cohort_rule(replace(preemptor, borrows=True), policy)
        admissions = [lending, borrowing]
    for admission in admissions:
        if admission is not None and _allowed(state, (victim,), admission, check_preemptible=True):
            return None
    return f"quota {quota}'s policy does not let job {job} preempt {victim.key}"
