"""Which running pods a preempting job may evict, and in which order.

A candidate is a *victim group*: a running pod, or, for a pod of a gang,
every running pod of that gang (evicting part of a gang wastes the rest).
A pod is allowed when it is preemptible, bound, not terminating, not already
marked for soft eviction or promised to another in-flight job, and the
preemptor quota's policies allow it (Kueue's names):

- same quota: ``withinQuota`` (``LowerPriority``, or
  ``LowerOrNewerEqualPriority``: equal priority but created after the job);
- another quota, borrowing in a resource the job asks for: when the job
  stays within its own ``min``, ``reclaimWithinCohort`` (``Any`` or
  ``LowerPriority``); when the job itself borrows, ``borrowWithinCohort``
  (``LowerPriority``, at or below ``maxPriorityThreshold`` if set).

Whether taking a group from another quota would push that quota below its
``min`` depends on what was taken before it, so the planner checks that as
it goes (:func:`quota.admission.min_violation`).  The order is: other quotas
first, lower priority first, most recently started first, then by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from extender.core.jobs import group_name, job_key
from extender.core.objects import PodInfo
from extender.core.resources import PODS, Resources, add_into
from extender.core.snapshot import Snapshot
from quota.admission import is_borrowing
from quota.tree import BorrowWithinCohort, QuotaPolicy, ReclaimWithinCohort, WithinQuota


@dataclass(frozen=True, slots=True)
class VictimGroup:
    """Pods that are evicted together: one pod, or the running pods of one gang."""

    job: str
    quota: str
    pods: tuple[PodInfo, ...]
    requests: Resources
    priority: int  # the highest among the pods
    started: float  # the most recent start among the pods
    other_quota: bool
    reason: str

    @property
    def order_key(self) -> tuple[int, int, float, str]:
        return (0 if self.other_quota else 1, self.priority, -self.started, self.job)


@dataclass(frozen=True, slots=True)
class Preemptor:
    """What the policies need to know about the preempting job."""

    job: str
    quota: str
    priority: int
    created: float
    borrows: bool  # admitting it takes its quota above min
    contested: frozenset[str]  # resources it asks for (not the pod count)


def find_victim_groups(snapshot: Snapshot, preemptor: Preemptor) -> list[VictimGroup]:
    """Every victim group the policies allow, in preemption order."""
    policy = snapshot.tree[preemptor.quota].policy
    promised = {key for r in snapshot.reservations.values() for key in r.victims}
    allowed: dict[str, str] = {}  # pod key → why it may be evicted
    for quota in snapshot.tree.specs:
        other = quota != preemptor.quota
        if other and not is_borrowing(snapshot.ledger, quota, preemptor.contested):
            continue
        for key in snapshot.running_preemptible(quota):
            pod = snapshot.pods[key]
            if pod.terminating or pod.soft_evicted or key in promised:
                continue
            reason = (
                _cohort_reason(pod, quota, preemptor, policy)
                if other
                else _within_quota_reason(pod, preemptor, policy.within_quota)
            )
            if reason is not None:
                allowed[key] = reason
    groups = []
    seen_jobs: set[str] = set()
    for key in allowed:
        pod = snapshot.pods[key]
        job = job_key(pod)
        if job == preemptor.job:
            continue
        if group_name(pod) is None:
            groups.append(_group(job, [pod], allowed[key], snapshot, preemptor))
            continue
        if job in seen_jobs:
            continue
        seen_jobs.add(job)
        members = [
            member
            for member in snapshot.job_pods(job)
            if member.node_name is not None
            and not member.finished
            and not member.soft_evicted
            and member.key not in promised
        ]
        if all(member.key in allowed for member in members):
            groups.append(_group(job, members, allowed[key], snapshot, preemptor))
    groups.sort(key=lambda g: g.order_key)
    return groups


def _group(
    job: str, pods: Iterable[PodInfo], reason: str, snapshot: Snapshot, preemptor: Preemptor
) -> VictimGroup:
    members = tuple(pods)
    requests: Resources = {}
    for pod in members:
        add_into(requests, pod.requests)
    quota = snapshot.quota_of(members[0])
    return VictimGroup(
        job=job,
        quota=quota,
        pods=members,
        requests=requests,
        priority=max(pod.priority for pod in members),
        started=max(pod.start_or_created for pod in members),
        other_quota=quota != preemptor.quota,
        reason=reason,
    )


def _within_quota_reason(pod: PodInfo, preemptor: Preemptor, policy: WithinQuota) -> str | None:
    if policy is WithinQuota.NEVER:
        return None
    if pod.priority < preemptor.priority:
        return (
            f"lower priority ({pod.priority} < {preemptor.priority}) in the same quota "
            f"{preemptor.quota}"
        )
    if (
        policy is WithinQuota.LOWER_OR_NEWER_EQUAL_PRIORITY
        and pod.priority == preemptor.priority
        and pod.created > preemptor.created
    ):
        return f"equal priority ({pod.priority}) but newer, in the same quota {preemptor.quota}"
    return None


def _cohort_reason(
    pod: PodInfo, quota: str, preemptor: Preemptor, policy: QuotaPolicy
) -> str | None:
    reclaim = policy.reclaim_within_cohort
    resources = ", ".join(sorted(name for name in preemptor.contested if name != PODS))
    if not preemptor.borrows:
        if reclaim is ReclaimWithinCohort.NEVER:
            return None
        if reclaim is ReclaimWithinCohort.LOWER_PRIORITY and pod.priority >= preemptor.priority:
            return None
        return (
            f"quota {quota} is borrowing {resources} that quota {preemptor.quota} reclaims "
            f"within its min (reclaimWithinCohort {reclaim.value})"
        )
    if policy.borrow_within_cohort is BorrowWithinCohort.NEVER:
        return None
    if pod.priority >= preemptor.priority:
        return None
    threshold = policy.max_priority_threshold
    if threshold is not None and pod.priority > threshold:
        return None
    return (
        f"quota {quota} is borrowing {resources}; quota {preemptor.quota} borrows too and the "
        f"pod has lower priority ({pod.priority} < {preemptor.priority}; borrowWithinCohort)"
    )
