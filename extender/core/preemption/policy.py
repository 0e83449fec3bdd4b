"""Which pods a quota's policies let a preempting job evict (Kueue's names).

- same quota: ``withinQuota`` (``LowerPriority``, or ``LowerOrNewerEqualPriority``: equal
  priority but created after the job);
- another quota, borrowing in a resource the job asks for: when the job stays within its
  own ``min``, ``reclaimWithinCohort`` (``Any`` or ``LowerPriority``); when the job itself
  borrows, ``borrowWithinCohort`` (``LowerPriority``, at or below
  ``maxPriorityThreshold`` if set); with ``fairSharing``, a borrowing job takes from
  other quotas only by fair sharing instead: from quotas whose share of borrowed capacity
  is above its quota's, of the job's priority or lower (:func:`above_share`,
  :func:`fair_share_admission`), while the gap between the two narrows
  (:mod:`.fairness`), never from a quota at or below its share.

A policy admits a victim by its priority (and, for equal priority, its creation time): an
:data:`Admission`.  The candidate walk (:mod:`.candidates`) asks here for every group it
builds; :func:`victim_refusal` asks the same rules of one victim read back from a record.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from enum import Enum

from base.resources import add_into
from extender.core.jobs import may_trigger_preemption
from extender.core.objects import PodInfo
from extender.core.preemption.walk import by_priority, settled_units, with_settled
from extender.core.state import ClusterState, UnitEntry
from quota.accounting import QuotaLedger
from quota.fairshare import share_after
from quota.tree import BorrowWithinCohort, QuotaPolicy, ReclaimWithinCohort, WithinQuota


class Rule(Enum):
    """The policy that allows a victim."""

    LOWER_PRIORITY = "withinQuota LowerPriority"
    NEWER_EQUAL_PRIORITY = "withinQuota LowerOrNewerEqualPriority"
    RECLAIM = "reclaimWithinCohort"
    BORROW = "borrowWithinCohort"
    FAIR_SHARE = "fairSharing"


#: How a quota's policy admits victims: a pod is allowed with ``rule`` if its priority is at
#: most ``ceiling``; else with ``equal_rule`` if its priority is ``ceiling + 1`` and it was
#: created after ``created_after``.
Admission = tuple[float, Rule, Rule | None, float]


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
    #: Its quota's share of borrowed capacity before the job, when fair sharing is on
    #: (:mod:`.fairness`); ``None`` when off.
    fair_share: float | None = None


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


def own_evictable_requests(state: ClusterState, preemptor: Preemptor) -> dict[str, int]:
    """The requests of the pods of the job's own quota that ``withinQuota`` lets it
    evict (preemptible, bound, staying, not promised to another job): what the job's
    quota would use less of once its own lower-priority work is gone."""
    admission = within_rule(preemptor, state.tree[preemptor.quota].policy)
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
        if allowed(state, members, admission, check_preemptible=True) is not None:
            for pod in members:
                add_into(freed, pod.requests)
    return freed


def allowed(
    state: ClusterState,
    members: tuple[PodInfo, ...],
    admission: Admission,
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


def within_rule(preemptor: Preemptor, policy: QuotaPolicy) -> Admission | None:
    if policy.within_quota is WithinQuota.NEVER:
        return None
    newer = policy.within_quota is WithinQuota.LOWER_OR_NEWER_EQUAL_PRIORITY
    return (
        preemptor.priority - 1,
        Rule.LOWER_PRIORITY,
        Rule.NEWER_EQUAL_PRIORITY if newer else None,
        preemptor.created,
    )


def cohort_rule(preemptor: Preemptor, policy: QuotaPolicy) -> Admission | None:
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


def fair_share_admission(preemptor: Preemptor) -> Admission:
    """How fair sharing admits victims, from quotas above the preemptor's share: of the
    preemptor's priority or lower.  Fair sharing divides borrowed capacity among the jobs
    of a priority: a job is not taken for another quota's job of lower priority, as it is
    not held back for one at admission (:mod:`extender.core.placement.fairshare`)."""
    return (preemptor.priority, Rule.FAIR_SHARE, None, 0.0)


def above_share(
    state: ClusterState, preemptor: Preemptor, borrowing: AbstractSet[str], ledger: QuotaLedger
) -> frozenset[str]:
    """Of the ``borrowing`` quotas, those whose share of borrowed
    capacity is above its quota's: fair sharing may take from them when the job borrows
    (:mod:`.fairness`)."""
    if preemptor.fair_share is None or not preemptor.borrows:
        return frozenset()
    capacity = state.capacity()
    return frozenset(
        quota for quota in borrowing if share_after(ledger, quota, capacity) > preemptor.fair_share
    )


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
        admissions = [within_rule(preemptor, policy)]
    else:
        admissions = [cohort_rule(preemptor, policy)]  # a reclaim within min
        if not state.args.fair_sharing:
            admissions.append(cohort_rule(replace(preemptor, borrows=True), policy))
        elif _above_share_now(state, job, quota, victim_quota):
            admissions.append(fair_share_admission(preemptor))
    for admission in admissions:
        if admission is not None and allowed(state, (victim,), admission, check_preemptible=True):
            return None
    return f"quota {quota}'s policy does not let job {job} preempt {victim.key}"


def _above_share_now(state: ClusterState, job: str, quota: str, victim_quota: str) -> bool:
    """Is ``victim_quota``'s share of borrowed capacity above ``quota``'s before ``job``
    (fair sharing may then take from it; the plan checked the gap)?  The pods ``job``'s
    reservation holds room for are charged to ``quota`` already: they are taken out, as
    the planner judged the share before the job."""
    capacity = state.capacity()
    before_job: dict[str, int] = {}
    reservation = state.reservations.get(job)
    for key in reservation.placements if reservation is not None else ():
        pod = state.pods.get(key)
        if pod is not None and pod.node_name is None:
            add_into(before_job, pod.requests, -1)
    return share_after(state.ledger, victim_quota, capacity) > share_after(
        state.ledger, quota, capacity, before_job
    )
