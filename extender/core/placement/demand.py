"""What a job asks of its quota: its pods not yet charged, and their requests.

:func:`job_demand` is read by the filter (is the job admitted?) and by the preemption
planner (what must a plan make room for?).  A PodGroup's ``minResources`` counts here: a
job that declares it asks for the whole of it before its first pod starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from base.resources import PODS, Resources, add_into, nonzero
from extender.core.gangsize import bound_count
from extender.core.objects import PodInfo
from extender.core.state import ClusterState
from quota.accounting import QuotaLedger
from quota.admission import borrowed_in, would_borrow


@dataclass(frozen=True, slots=True)
class JobDemand:
    """A job's pods that are not yet counted as used, and what they ask of its quota."""

    job: str
    quota: str
    unplaced: tuple[PodInfo, ...]
    np_request: Resources
    p_request: Resources

    @property
    def asks(self) -> frozenset[str]:
        """The resources its unplaced pods ask for (not the pod count): what it contends for."""
        return frozenset(
            name
            for pod in self.unplaced
            for name, amount in pod.requests.items()
            if amount and name != PODS
        )

    @property
    def request(self) -> Resources:
        total = dict(self.np_request)
        add_into(total, self.p_request)
        return total


@dataclass(frozen=True, slots=True)
class AdmissionWait:
    """Why a job that would borrow waits though its quota admits it (fair sharing, a
    reborrow backoff), and until when at the latest."""

    reason: str
    until: float


def borrowed_resources(ledger: QuotaLedger, demand: JobDemand) -> frozenset[str]:
    """The resources the job asks for in which admitting it takes its quota beyond its
    ``min``: any resource some quota names (one its own quota does not name is
    guaranteed it nothing, as :func:`quota.admission.would_borrow` says)."""
    asked = [name for name, amount in demand.request.items() if amount > 0]
    return borrowed_in(ledger, demand.quota, demand.request, asked)


def job_demand(state: ClusterState, job: str, including: PodInfo | None = None) -> JobDemand:
    """The unplaced part of ``job`` (raises :class:`QuotaMembershipError`).

    ``including``: a pod of the job the state may not hold yet (kube-scheduler
    can ask about a pod before Muster's informer has seen it).
    """
    pods = state.members.job_pods(job)
    if including is not None and including.key not in state.pods:
        pods.append(including)
    unplaced = tuple(
        pod
        for pod in pods
        if not pod.finished
        and not pod.terminating
        and pod.node_name is None
        and state.reserved_node(pod.key) is None
    )
    np_request, p_request = uncharged_with_min_resources(state, job, unplaced)
    quota = state.quota_of(unplaced[0] if unplaced else pods[0])
    return JobDemand(job, quota, unplaced, np_request, p_request)


def running_its_minimum(state: ClusterState, demand: JobDemand, ledger: QuotaLedger) -> str | None:
    """Why an elastic job evicts no one for more pods, or ``None``: it declares a minimum
    (PodGroup ``minMember``, the min-available annotation) and runs at least that many
    pods, using all of its PodGroup's ``minResources`` if it declares them, so it is
    running; and its other pods would take its quota past its ``min`` (on the plan's
    settled ``ledger``).  Those pods wait for free room, as the pods an elastic victim
    shed do: a job that shrank for a preemptor never takes the room straight back.
    Within its quota's ``min`` it reclaims for them as any job: that room is its
    quota's guarantee."""
    job = demand.job
    declared = state.declarations.declared_min_available(job)
    if declared is None or state.min_resources.held(job) is not None:
        return None  # no minimum, or its PodGroup's minResources is not yet in use
    running = bound_count(state, job)
    if running < declared:
        return None
    if not would_borrow(ledger, demand.quota, demand.request, demand.asks):
        return None
    return (
        f"the job runs {running} pods, at least the minimum of {declared} it declares, and "
        f"its other pods would take quota {demand.quota} past its min: they wait for free "
        "room, and no one is evicted for them"
    )


def uncharged_with_min_resources(
    state: ClusterState, job: str, pods: Iterable[PodInfo]
) -> tuple[Resources, Resources]:
    """The non-preemptible and the preemptible requests that admitting ``pods`` of ``job``
    adds to its quota's charge: those its quota has not charged yet, with the job's
    ``minResources`` (:func:`_with_min_resources`)."""
    return _with_min_resources(state, job, *_uncharged_requests(state, pods))


def _with_min_resources(
    state: ClusterState, job: str, np_request: Resources, p_request: Resources
) -> tuple[Resources, Resources]:
    """What admitting the job's uncharged pods adds to its quota's charge, which is
    ``max(used, minResources)`` per resource for a job whose PodGroup declares
    ``minResources`` (see :func:`~extender.core.podgroups.min_resources_hold`): its
    first pods ask for the whole of it, and later ones only for what they add beyond the
    hold.  The difference from the pods' own requests is on the side (non-preemptible or
    preemptible) the job's pods are on; any other job's requests are returned as they are."""
    group = state.declarations.pod_group(job)
    if group is None or not group.min_resources or not (np_request or p_request):
        return np_request, p_request
    used = state.job_used(job)
    hold = state.min_resources.held(job)
    held = hold.amount if hold is not None else {}
    preemptible = bool(p_request) or not np_request
    main = dict(p_request if preemptible else np_request)
    other = dict(np_request if preemptible else p_request)
    for name in set(group.min_resources) | set(held):
        request = main.get(name, 0) + other.get(name, 0)
        declared = group.min_resources.get(name, 0)
        # The new charge, max(used + request, declared), less the charge now (used +
        # held) and the pods' own request: positive before the job starts, negative while
        # its hold already covers what they ask.
        extra = max(0, declared - used.get(name, 0) - request) - held.get(name, 0)
        if extra >= 0:
            main[name] = main.get(name, 0) + extra
            continue
        for side in (main, other):
            taken = min(side.get(name, 0), -extra)
            side[name] = side.get(name, 0) - taken
            extra += taken
    main, other = nonzero(main), nonzero(other)
    return (other, main) if preemptible else (main, other)


def _uncharged_requests(
    state: ClusterState, pods: Iterable[PodInfo]
) -> tuple[Resources, Resources]:
    """The non-preemptible and the preemptible requests of those ``pods`` their quota has
    not charged yet (not bound, reserved, or held by their job's admission)."""
    np_request: Resources = {}
    p_request: Resources = {}
    for pod in pods:
        if not state.counts_as_used(pod):
            add_into(p_request if state.preemptible(pod) else np_request, pod.requests)
    return np_request, p_request
