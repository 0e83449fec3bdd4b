"""Scheduling one pod: job-level quota admission, node filtering, node scoring.

These are the decisions behind the extender's ``filter`` and ``prioritize``
verbs, and the same functions ``simulate`` uses to play kube-scheduler's part.

Filter, in two modes:

- ``as_extender``: kube-scheduler has already run its own filters, so Muster
  only adds what it alone knows: the stop policy and job-level quota
  admission (every node ``FailedAndUnresolvable``: no eviction on a node
  helps a quota), and room held for other jobs' reservations (``Failed``).
  A node Muster has not seen yet holds no reservation, so it passes.
  A pod with reserved room is held to its reserved node whenever that node passes.
- full (``simulate``): also the node constraints of :mod:`extender.core.nodefit`.

Score: a pod's reserved node scores 10; otherwise a *packing* score, 0..10:
the mean, over the resources the pod asks for, of how full the node would be
after placing it.  Only the scarce resources count when the pod asks for any
(anything but cpu, memory, ephemeral-storage), so GPU pods fill GPU nodes one
at a time and whole nodes stay free for gangs.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from base.resources import PODS, Resources, add_into, nonzero, shortfall
from extender.core.effects import Effect, HoldQuota
from extender.core.nodefit import static_misfit
from extender.core.objects import PodInfo
from extender.core.state import ClusterState, memoise_on_node
from quota.admission import job_admission_failures, over_max_on_path
from quota.tree import QuotaMembershipError

#: Resources every pod asks for; a pod asking for anything else is packed by that alone.
COMMON_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", PODS})
MAX_SCORE = 10


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


class FilterOutcome(enum.Enum):
    """What a filter call decided, in one word (the decision log's and the metrics')."""

    REJECTED_BY_QUOTA = "rejected_quota"
    GANG_WAITING = "gang_waiting"
    GANG_PLACED = "gang_placed"
    PINNED_TO_RESERVATION = "pinned_to_reservation"
    KEPT_OFF_RESERVED_ROOM = "reserved_room"
    ADMITTED = "admitted"


@dataclass
class FilterResult:
    passed: list[str] = field(default_factory=list)
    #: node → reason; evicting something may help.
    failed: dict[str, str] = field(default_factory=dict)
    #: node → reason; evicting nothing helps.
    unresolvable: dict[str, str] = field(default_factory=dict)
    #: Job-level quota reasons, when the job is not admitted at all.
    quota_failures: tuple[str, ...] = ()
    #: The pod's reserved node, when the pod was held to it (every other node failed).
    pinned_to: str | None = None
    #: A gang's reason for turning all its pods away (see :mod:`extender.core.gang`).
    gang_waiting: str | None = None
    #: The filter placed the pod's gang whole just now (and holds this pod to its node).
    gang_placed: bool = False
    #: What the front door must apply to the state (before letting it go).
    effects: tuple[Effect, ...] = ()

    @property
    def outcome(self) -> FilterOutcome:
        if self.quota_failures:
            return FilterOutcome.REJECTED_BY_QUOTA
        if self.gang_waiting is not None:
            return FilterOutcome.GANG_WAITING
        if self.gang_placed:
            return FilterOutcome.GANG_PLACED
        if self.pinned_to is not None:
            return FilterOutcome.PINNED_TO_RESERVATION
        if self.failed:
            return FilterOutcome.KEPT_OFF_RESERVED_ROOM
        return FilterOutcome.ADMITTED


def job_demand(snapshot: ClusterState, job: str, including: PodInfo | None = None) -> JobDemand:
    """The unplaced part of ``job`` (raises :class:`QuotaMembershipError`).

    ``including``: a pod of the job the snapshot may not hold yet (kube-scheduler
    can ask about a pod before Muster's informer has seen it).
    """
    pods = snapshot.job_pods(job)
    if including is not None and including.key not in snapshot.pods:
        pods.append(including)
    unplaced = tuple(
        pod
        for pod in pods
        if not pod.finished
        and not pod.terminating
        and pod.node_name is None
        and snapshot.reserved_node(pod.key) is None
    )
    np_request, p_request = _with_min_resources(
        snapshot, job, *_uncharged_requests(snapshot, unplaced)
    )
    quota = snapshot.quota_of(unplaced[0] if unplaced else pods[0])
    return JobDemand(job, quota, unplaced, np_request, p_request)


def _with_min_resources(
    snapshot: ClusterState, job: str, np_request: Resources, p_request: Resources
) -> tuple[Resources, Resources]:
    """What admitting the job's uncharged pods adds to its quota's charge, which is
    ``max(used, minResources)`` per resource for a job whose PodGroup declares
    ``minResources`` (see :func:`~extender.core.podgroups.min_resources_hold`): its
    first pods ask for the whole of it, and later ones only for what they add beyond the
    hold.  The difference from the pods' own requests is on the side (non-preemptible or
    preemptible) the job's pods are on; any other job's requests are returned as they are."""
    group = snapshot.pod_group(job)
    if group is None or not group.min_resources or not (np_request or p_request):
        return np_request, p_request
    used = snapshot.job_used(job)
    hold = snapshot.min_resources_held(job)
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
    snapshot: ClusterState, pods: Iterable[PodInfo]
) -> tuple[Resources, Resources]:
    """The non-preemptible and the preemptible requests of those ``pods`` their quota has
    not charged yet (not bound, reserved, or held by their job's admission)."""
    np_request: Resources = {}
    p_request: Resources = {}
    for pod in pods:
        if not snapshot.counts_as_used(pod):
            add_into(p_request if snapshot.preemptible(pod) else np_request, pod.requests)
    return np_request, p_request


def admission_failures(snapshot: ClusterState, pod: PodInfo) -> list[str]:
    """Why the job of ``pod`` is not admitted by its quota; empty when it is."""
    try:
        quota = snapshot.quota_of(pod)
    except QuotaMembershipError as error:
        return [error.reason]
    if quota in snapshot.tree.parents:
        return [f"quota {quota} is a parent quota; pods must use a leaf quota"]
    waiting = room_not_free_yet(snapshot, pod)
    if waiting is not None:
        return [waiting]
    if snapshot.counts_as_used(pod):
        return []  # its room is already charged (bound, reserved, or its job's hold)
    try:
        demand = job_demand(snapshot, pod.job, including=pod)
    except QuotaMembershipError as error:  # another pod of the job names a quota it may not
        return [error.reason]
    if not demand.unplaced:
        return []
    return job_admission_failures(snapshot.ledger, quota, demand.np_request, demand.p_request)


def room_not_free_yet(snapshot: ClusterState, pod: PodInfo) -> str | None:
    """Why pending ``pod`` waits for room its job's preemption freed to be free in fact;
    ``None`` when it need not.  A wait, not a refusal: the room comes once pods on their
    way out have left (kube-scheduler waits the same way for its own nominated node's
    terminating victims)."""
    if pod.node_name is not None:
        return None
    if victims_still_there(snapshot, pod.job):
        # Every pending pod of a job whose preemption victims are still there waits for
        # them to go: the room its plan freed is still theirs, and binding now would put
        # the quota (or an ancestor) above its max until they leave.  (One message while
        # they leave: a changing one would requeue the pod at every victim.)
        return (
            f"quota room reserved for job {pod.job} is not free yet: its preemption's "
            "victims are still there"
        )
    quota = snapshot.quota_name(pod) if pod.job in snapshot.reservations else None
    if quota is not None:
        over = over_max_on_path(snapshot.ledger, quota)
        if over is not None:
            # Its plan counted every pod on its way out as gone, its own victims and
            # others (terminating, marked for other jobs), and saw only what its replica
            # had seen: until those pods have left (or what another replica admitted
            # meanwhile), the ledger, which counts them and the job's reserved room, is
            # over a max on the job's path, and binding would keep it there.
            return (
                f"quota room reserved for job {pod.job} is not free yet: quota {over} is "
                "over its max until pods on their way out have left"
            )
    return None


def victims_still_there(snapshot: ClusterState, job: str) -> bool:
    """Is a victim of ``job``'s preemption still there: a pod whose soft-eviction mark
    names the job (until it is gone), or one its reservation counts on that is not yet
    terminating (Muster's plan committed in memory before the informer reads its marks
    back)?  Victims kube-scheduler preempted itself are deleted at once, unmarked: once
    terminating, kube-scheduler's own nomination waits for them."""
    if snapshot.marked_victims(job):
        return True
    reservation = snapshot.reservations.get(job)
    if reservation is None:
        return False
    victims = (snapshot.pods.get(key) for key in reservation.victims)
    return any(victim is not None and not victim.terminating for victim in victims)


def added_pods_admission_failures(
    snapshot: ClusterState, pod: PodInfo, placed: Collection[str]
) -> list[str]:
    """Why the ``placed`` pods of ``pod``'s job that its quota has not charged yet (pods
    created after the job's room was reserved or held) do not fit the quota; empty when
    they do."""
    pods = [snapshot.pods[key] for key in placed if key in snapshot.pods]
    np_request, p_request = _with_min_resources(
        snapshot, pod.job, *_uncharged_requests(snapshot, pods)
    )
    if not np_request and not p_request:
        return []
    quota = snapshot.quota_of(pod)
    return job_admission_failures(snapshot.ledger, quota, np_request, p_request)


def admission_hold(snapshot: ClusterState, pod: PodInfo, until: float) -> HoldQuota | None:
    """After ``pod`` passed admission, the hold that charges it, and its job's other
    pending pods, to the quota until ``until`` (or until each is seen bound, deleted, or
    turned away): kube-scheduler assumes the pod and binds it a moment later, and
    Muster's cache sees the binding only then, so a pod filtered meanwhile must not be
    admitted against the same room (kube-scheduler's own cache assumes a pod the same
    way).  The job was admitted whole: its other pods are held with it.  ``pod`` itself
    may not have reached the state yet: the hold carries it."""
    unseen = () if pod.key in snapshot.pods else (pod,)
    if pod.group is None:
        return HoldQuota(pod.job, (pod.key,), until, unseen)
    # A pod admitted before (held) extends its job's hold over the pods it held then: pods
    # created since were never checked against the quota.
    readmitted = snapshot.quota_held(pod.key)
    pending = tuple(
        other.key
        for other in snapshot.job_pods(pod.job)
        if other.node_name is None
        and not other.finished
        and not other.terminating
        and (not readmitted or snapshot.quota_held(other.key))
    ) + tuple(p.key for p in unseen)
    return HoldQuota(pod.job, pending, until, unseen) if pending else None


def filter_nodes(
    snapshot: ClusterState, pod: PodInfo, node_names: Iterable[str], *, as_extender: bool
) -> FilterResult:
    """Sort ``node_names`` into passed, failed and unresolvable for ``pod``."""
    names = list(node_names)
    failures = admission_failures(snapshot, pod)
    if failures:
        reason = "; ".join(failures)
        if room_not_free_yet(snapshot, pod) is not None:
            # Waiting for room on its way out: resolvable, as kube-scheduler's own wait
            # for a nominated node's terminating victims is.  Unresolvable would make
            # kube-scheduler preempt on another node (when it preempts by itself).
            return FilterResult(failed=dict.fromkeys(names, reason), quota_failures=(reason,))
        return FilterResult(
            unresolvable=dict.fromkeys(names, reason), quota_failures=tuple(failures)
        )
    result = FilterResult()
    if as_extender:
        # kube-scheduler has judged node constraints and plain fit; only room held for
        # other pods can fail a node here, and most nodes hold none.
        holding = snapshot.nodes_with_reserved_room()
        suspects = [name for name in names if name in holding] if holding else []
        for name in suspects:
            held = snapshot.reserved_on(name)
            if (len(held) > 1 or pod.key not in held) and name in snapshot.nodes:
                failure = _resource_failure(snapshot, pod, name, as_extender=True)
                if failure is not None:
                    result.failed[name] = failure
        result.passed = [name for name in names if name not in result.failed] if suspects else names
    else:
        for name in names:
            node = snapshot.nodes.get(name)
            misfit = "node is not known" if node is None else static_misfit(pod, node)
            if misfit is not None:
                result.unresolvable[name] = misfit
                continue
            failure = _resource_failure(snapshot, pod, name, as_extender=False)
            if failure is None:
                result.passed.append(name)
            else:
                result.failed[name] = failure
    reserved_node = snapshot.reserved_node(pod.key)
    if reserved_node is not None and reserved_node in result.passed and len(result.passed) > 1:
        # Room was freed for this pod on its reserved node: it goes there, not elsewhere
        # (where it would waste the eviction and could take room another job needs).
        pinned = f"the pod's room is reserved on node {reserved_node}"
        for name in result.passed:
            if name != reserved_node:
                result.failed[name] = pinned
        result.passed = [reserved_node]
        result.pinned_to = reserved_node
    return result


def _resource_failure(
    snapshot: ClusterState, pod: PodInfo, node: str, *, as_extender: bool
) -> str | None:
    free = snapshot.free_on(node, for_pod=pod.key)
    short = shortfall(pod.requests, free)
    if short is None:
        return None
    held = {key: room for key, room in snapshot.reserved_on(node).items() if key != pod.key}
    if held:
        for room in held.values():
            add_into(free, room)
        if shortfall(pod.requests, free) is None:
            holders = sorted({snapshot.reservation_holder(key) or key for key in held})
            return f"room on this node is reserved for job {', '.join(holders)}"
    if as_extender:
        return None  # kube-scheduler judges plain resource fit from its own cache
    return "Too many pods" if short == PODS else f"Insufficient {short}"


def score_nodes(snapshot: ClusterState, pod: PodInfo, node_names: Iterable[str]) -> dict[str, int]:
    """Integer scores 0..10 per node; see the module docstring.  A node's score depends only
    on the pod's scored wants and on the node's totals, so it is memoised per node
    (``snapshot.node_usage.scores``, dropped whenever the node's totals change)."""
    reserved_node = snapshot.reserved_node(pod.key)
    wants = tuple(_wants(pod.requests, scored_resources(pod.requests)))
    usage = snapshot.node_usage
    requested, held, memo = usage.requested, usage.reserved, usage.scores
    nodes = snapshot.nodes
    nothing: Mapping[str, int] = {}
    scores = {}
    for name in node_names:
        known = memo.get(name)
        if known is not None:
            score = known.get(wants)
            if score is not None and name != reserved_node:
                scores[name] = score
                continue
        node = nodes.get(name)
        if name == reserved_node:
            scores[name] = MAX_SCORE
        elif node is None:
            scores[name] = 0
        else:
            rooms = held.get(name)
            score = _mean_fullness(
                wants,
                node.allocatable,
                requested.get(name, nothing),
                rooms.values() if rooms else (),
            )
            scores[name] = score
            memoise_on_node(memo, name, wants, score)
    return scores


def scored_resources(request: Mapping[str, int]) -> list[str]:
    """The resources a pod is packed by: its scarce ones if any, else all it asks for."""
    scarce = [name for name in request if name not in COMMON_RESOURCES]
    return scarce or [name for name in request if name != PODS]


def packing_score(
    request: Mapping[str, int],
    allocatable: Mapping[str, int],
    requested: Mapping[str, int],
    reserved: Iterable[Mapping[str, int]],
    considered: Iterable[str],
) -> int:
    """``floor(10 * mean fullness after placing the pod)`` over ``considered`` resources."""
    return _mean_fullness(_wants(request, considered), allocatable, requested, tuple(reserved))


def _wants(request: Mapping[str, int], considered: Iterable[str]) -> list[tuple[str, int]]:
    return [(name, request.get(name, 0)) for name in considered]


def _mean_fullness(
    wants: Iterable[tuple[str, int]],
    allocatable: Mapping[str, int],
    requested: Mapping[str, int],
    reserved: Collection[Mapping[str, int]],
) -> int:
    """:func:`packing_score` for the pod's ``(resource, amount)`` wants; score_nodes calls
    it for every candidate node, so it is kept to plain integer arithmetic."""
    numerator, denominator, count = 0, 1, 0
    for name, amount in wants:
        capacity = allocatable.get(name, 0)
        if capacity <= 0:
            continue
        used = requested.get(name, 0) + amount
        if reserved:
            used += sum(room.get(name, 0) for room in reserved)
        # Accumulate the sum of used/capacity as one exact fraction.
        numerator = numerator * capacity + min(used, capacity) * denominator
        denominator *= capacity
        count += 1
    if count == 0:
        return 0
    return min(MAX_SCORE, (MAX_SCORE * numerator) // (denominator * count))


def best_node(scores: Mapping[str, int]) -> str | None:
    """The highest-scoring node, ties broken by name."""
    if not scores:
        return None
    return min(scores, key=lambda name: (-scores[name], name))
