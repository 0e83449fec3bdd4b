"""One preemption authority: which pods Muster governs, and kube-scheduler's preemptions.

kube-scheduler's DefaultPreemption deletes its victims itself, without the
soft-eviction mark, pod by pod and blind to quotas and gangs.  Two
authorities over the same pods evict twice: kube-scheduler takes one victim
while Muster's PostFilter plans the same job again and takes another.  So
each pod has exactly one:

- Muster preempts for, and only Muster preempts, the pods it *governs*
  (:func:`governing_reason`): a pod of a gang, a pod that carries one of
  Muster's labels (quota name, preemptible, can-preempt), a pod whose
  namespace has an ElasticQuota, and, when Muster's arguments make every pod
  preemptible or every pod a trigger, every pod.  For a governed preemptor the ``preempt``
  verb gives kube-scheduler no victims (the job goes to the PostFilter at
  once); a governed pod is never left to kube-scheduler as a victim.
- kube-scheduler preempts for the other pods, among the other pods.

The filter and the pod informer hand only governed jobs to the PostFilter;
the guard and the planner ask the same function.

Should kube-scheduler preempt for a governed job anyway (Muster's
``preemptVerb`` not configured, or Muster unreachable with ``ignorable``),
:func:`scheduler_preemption` finds it from the cluster alone: a pending pod of
the job nominated to a node where a lower-priority pod carries
kube-scheduler's ``DisruptionTarget``.  That job is in flight: it is not
planned again, and the room its victims free is held for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from base import keys
from extender.core.effects import HoldRoom
from extender.core.jobs import may_trigger_preemption
from extender.core.objects import UNNAMED_COMPONENT, PodInfo
from extender.core.reservations import reserved_by_muster
from extender.core.state import ClusterState, Reservation

#: Pod labels by which a pod places itself under Muster's rules.
_MUSTER_POD_LABELS = (keys.QUOTA_NAME_LABEL, keys.PREEMPTIBLE_LABEL, keys.CAN_PREEMPT_LABEL)


def governing_reason(state: ClusterState, pod: PodInfo) -> str | None:
    """Why Muster is the preemption authority for ``pod`` (as preemptor and as victim),
    or ``None`` when kube-scheduler is."""
    if pod.group is not None:
        return f"it belongs to gang {pod.job}"
    for label in _MUSTER_POD_LABELS:
        if label in pod.labels:
            return f"it carries the label {label}"
    declared = state.tree.quota_in_namespace(pod.namespace)
    if declared is not None:
        return f"its namespace has quota {declared}"
    if state.tree.default_is_explicit:
        return f"it falls to the ElasticQuota {keys.DEFAULT_QUOTA}"
    if not state.args.disable_default_preemptible:
        return "every pod may be Muster's victim (disableDefaultPreemptible: false)"
    if may_trigger_preemption(pod, state.args):
        return "it may trigger Muster's preemption"
    return None


def preempted_by_scheduler(pod: PodInfo) -> bool:
    """Is kube-scheduler's own preemption deleting this pod (its ``DisruptionTarget``,
    naming a scheduler, not Muster's mark)?"""
    return (
        pod.preempted_by not in (None, keys.MUSTER_COMPONENT, UNNAMED_COMPONENT)
        and not pod.soft_evicted
        and not pod.finished
    )


@dataclass(frozen=True, slots=True)
class SchedulerPreemption:
    """kube-scheduler preempted for this job itself: where it nominated the job's pods,
    and the victims it is deleting there."""

    job: str
    placements: Mapping[str, str]  # pending pod key → the node kube-scheduler nominated
    victims: tuple[str, ...]  # pod keys, sorted


def scheduler_preemption(state: ClusterState, job: str) -> SchedulerPreemption | None:
    """kube-scheduler's own preemption in flight for ``job``, if there is one: a pending
    pod of the job nominated by kube-scheduler (not by Muster's reservation) to a node
    where a pod of lower priority is being preempted by kube-scheduler."""
    placements: dict[str, str] = {}
    victims: set[str] = set()
    for pod in state.members.job_pods(job):
        node = pod.nominated_node_name
        if node is None or pod.node_name is not None or pod.finished:
            continue
        if reserved_by_muster(pod) == node:
            continue  # Muster's own nomination (its victims carry Muster's marks)
        found = [
            other.key
            for other in state.pods_on(node)
            if other.priority < pod.priority and preempted_by_scheduler(other)
        ]
        if found:
            placements[pod.key] = node
            victims.update(found)
    if not placements:
        return None
    return SchedulerPreemption(job, placements, tuple(sorted(victims)))


def nominated_elsewhere(state: ClusterState, job: str) -> bool:
    """Does a pending pod of ``job`` carry a nomination Muster did not make (no room
    reserved for it there)?  kube-scheduler nominates a pod when it preempts for it; the
    victims' ``DisruptionTarget`` may reach Muster a moment later."""
    for key in state.members.job_members(job):
        pod = state.pods[key]
        node = pod.nominated_node_name
        if (
            node is not None
            and pod.node_name is None
            and state.reserved_node(key) != node
            and reserved_by_muster(pod) != node
        ):
            return True
    return False


def hold_for_scheduler_preemption(
    state: ClusterState, job: str, now: float
) -> tuple[SchedulerPreemption, HoldRoom] | None:
    """If kube-scheduler is preempting for ``job`` and no room is held for it yet, what it
    is doing and the effect that holds the room on the nodes it nominated, in the
    reservation book, as for Muster's own plans (in memory only: the nomination and the
    victims' conditions are the record, and every replica derives the same from them)."""
    if job in state.reservations:
        return None
    found = scheduler_preemption(state, job)
    if found is None:
        return None
    first = state.pods[next(iter(found.placements))]
    quota = state.quota_name(first)
    if quota is None or governing_reason(state, first) is None:
        return None  # kube-scheduler's to preempt for: its own nomination holds the room
    promised = state.book.promised_victims()
    if any(victim in promised for victim in found.victims):
        return None  # those victims already free room held for another job
    reservation = Reservation(
        job=job,
        quota=quota,
        placements=dict(found.placements),
        victims=found.victims,
        created=now,
        expires=now + state.args.reservation_timeout_seconds,
    )
    return found, HoldRoom(reservation)


def jobs_nominated_to(state: ClusterState, node: str) -> set[str]:
    """The jobs with a pending pod nominated to ``node``."""
    return {state.pods[key].job for key in state.members.nominated_to(node)}
