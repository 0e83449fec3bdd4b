"""No starvation: a job that has waited too long is not passed by later, no larger jobs
for the room it needs; the room is held for it as it frees, for a bounded time.

Without this rule, a job needing much room at once (a 32-GPU gang) is passed by every
small job that fits the room freeing a GPU at a time: kube-scheduler places each small
pod as soon as it fits, and the gang never finds four whole nodes free.  So:

- A job is *starving* when its pods all exist (its min-available, for a gang), none of
  them is placed (bound, reserved, or held by an admission it is binding on) or gated
  (``schedulingGates``: kube-scheduler does not try it), its quota admits it, and it
  has waited ``starvation-seconds`` since its newest pod was created (the quota's
  ``muster.dev/starvation-seconds``, else the argument ``starvationSeconds``; 0: never).
- For it Muster *picks nodes*: each pod of the job, largest first, goes to the node it
  lacks least on (the sum over the resources it asks of the fraction it still lacks;
  ties to the node whose newest pod started first, then by name), among the nodes whose
  allocatable could ever hold it (node constraints as
  :func:`~extender.core.placement.nodefit.static_misfit` models them).  A job no nodes
  could ever hold whole picks none and holds nothing.  The choice is derived from the
  cluster as it is, not remembered: every call, replica and restart agrees.  It is
  mostly stable: held room only gains, while other nodes are refilled (their newest pod
  is newer than any picked node's); room beyond the hold, and earlier, higher-priority
  or larger jobs, can still start pods on a picked node and move the choice.
- While it starves, a pod of another job is *kept off* the room picked for it when its
  job is later (its newest pod created after the starving job's), of the same or lower
  priority and no larger (asks no more, in all its pods, of any resource the starving
  job asks for), and placing it would leave the node less of a resource than is held
  there.  Its reason names the starving job: ``room on this node is reserved for
  starving job ...``.  Room freed on those nodes thus accumulates until the job fits.
- *Bounded*: a hold lasts ``starvationHoldSeconds`` at most.  Then the nodes are let go,
  and the job starves again only after waiting another ``starvation-seconds``: it waits
  S, holds H, waits S, holds H... from when its newest pod was created, so a job that
  cannot fit holds room at most H of every S + H seconds (:func:`hold_window`).

Several starving jobs are served in order (priority, then the longest waiting, then
name), each picking among the room the ones before it have not.  A job whose room is
reserved already (a preemption's plan, a gang placed whole) neither starves nor is kept
off held room: that room was decided for it.  Pure: the time is passed in.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from base.resources import PODS, Resources, add_into
from base.times import format_time
from extender.core.filter.nodes import FilterResult
from extender.core.gangsize import gang_size
from extender.core.objects import PodInfo
from extender.core.placement.demand import job_demand
from extender.core.placement.nodefit import static_misfit
from extender.core.placement.reborrow import in_reborrow_backoff
from extender.core.placement.reserve import reserve_wait
from extender.core.state import ClusterState
from quota.admission import job_admission_failures, would_borrow
from quota.tree import QuotaMembershipError


@dataclass(frozen=True, slots=True)
class Hold:
    """Room held for a starving job until ``ends``."""

    job: str
    priority: int
    #: When its newest pod was created: it has waited since then.
    since: float
    #: When this hold began (``since`` + starvation-seconds, + S + H per hold before it).
    began: float
    #: ``began`` + ``starvationHoldSeconds``: the nodes are let go then.
    ends: float
    #: What its live pods ask in all (the pod count left out).
    asks: Mapping[str, int]
    #: Node → the room held there for it (what its pods picked for the node ask).
    claims: Mapping[str, Mapping[str, int]]
    #: Its quota, and whether admitting it takes that quota beyond its ``min``: a borrowing
    #: job's hold never keeps off a job of another quota that stays within its own ``min``.
    quota: str = ""
    borrows: bool = False


def starvation_seconds(state: ClusterState, quota: str) -> float:
    """How long a job of ``quota`` waits before it starves: the quota's
    ``muster.dev/starvation-seconds``, else ``starvationSeconds`` (0: never)."""
    spec = state.tree.specs.get(quota)
    own = spec.policy.starvation_seconds if spec is not None else None
    return state.args.starvation_seconds if own is None else own


def hold_window(since: float, starve: float, hold: float, now: float) -> tuple[float, float] | None:
    """The hold a job waiting since ``since`` is in at ``now``, as ``(began, ends)``, or
    ``None``: it waits ``starve`` seconds, holds for ``hold``, waits ``starve`` again,
    and so on.  ``began`` is the same at every time within one hold."""
    if starve <= 0 or hold <= 0:
        return None
    waited = now - since - starve
    if waited < 0:
        return None
    began = since + starve + math.floor(waited / (starve + hold)) * (starve + hold)
    if now - began >= hold:
        return None
    return began, began + hold


def starving_holds(state: ClusterState, now: float) -> tuple[Hold, ...]:
    """The holds of every starving job at ``now``, in the order they pick their nodes."""
    if state.args.starvation_seconds <= 0 and not any(
        spec.policy.starvation_seconds for spec in state.tree.specs.values()
    ):
        return ()
    starving = [
        found
        for job in state.members.pending_jobs()
        if (found := _starving(state, job, now)) is not None
    ]
    starving.sort(key=lambda item: (-item[0].priority, item[0].since, item[0].job))
    taken: dict[str, Resources] = {}  # node → room picked by the holds before
    holds = []
    for hold, pods in starving:
        claims = _pick_nodes(state, pods, taken)
        if claims is None:
            continue  # no nodes could ever hold it whole: it holds nothing
        for name, room in claims.items():
            add_into(taken.setdefault(name, {}), room)
        holds.append(dataclasses.replace(hold, claims=claims))
    return tuple(holds)


def _starving(state: ClusterState, job: str, now: float) -> tuple[Hold, list[PodInfo]] | None:
    """``job``'s hold (its claims still empty) and its pods to place, if it starves.  The
    cheap tests first: most pending jobs have not waited long enough."""
    if job in state.reservations:
        return None  # room decided for it already
    pending = [state.pods[key] for key in state.members.pending_jobs()[job]]
    if any(pod.gated for pod in pending):
        return None  # kube-scheduler does not try it until its gates go: no room would help
    first = min(pending, key=lambda pod: pod.key)
    quota = state.quota_name(first)
    if quota is None or quota in state.tree.parents:
        return None
    since = max(pod.created for pod in pending)
    window = hold_window(
        since, starvation_seconds(state, quota), state.args.starvation_hold_seconds, now
    )
    if window is None:
        return None
    pods = [pod for pod in state.members.job_pods(job) if not pod.finished and not pod.terminating]
    if len(pending) < len(pods):
        return None  # something of it is bound: it is not waiting whole
    if any(state.quota_held(pod.key) or state.reserved_node(pod.key) for pod in pending):
        return None  # admitted: binding
    if first.group is not None and len(pods) < gang_size(state, first):
        return None  # its pods do not all exist yet
    try:
        demand = job_demand(state, job)
    except (QuotaMembershipError, IndexError):
        return None
    if job_admission_failures(state.ledger, demand.quota, demand.np_request, demand.p_request):
        return None  # its quota does not admit it: no room would help
    asks = _asks(pods)
    priority = max(pod.priority for pod in pods)
    borrows = would_borrow(state.ledger, demand.quota, demand.request, demand.asks)
    if borrows and in_reborrow_backoff(state, job, demand.quota, now):
        return None  # it may not borrow yet: room held for it would stand idle
    if borrows and reserve_wait(state, demand, now) is not None:
        return None  # the room it would borrow is reserved for a guarantee
    hold = Hold(job, priority, since, window[0], window[1], asks, {}, demand.quota, borrows)
    return hold, pending


def _asks(pods: Collection[PodInfo]) -> Resources:
    total: Resources = {}
    for pod in pods:
        add_into(total, pod.requests)
    total.pop(PODS, None)
    return {name: amount for name, amount in total.items() if amount > 0}


def _pick_nodes(
    state: ClusterState, pods: list[PodInfo], taken: Mapping[str, Mapping[str, int]]
) -> dict[str, Resources] | None:
    """Node → room for ``pods``, each (largest first) on the node it lacks least on, of
    the room ``taken`` leaves, then the node whose newest pod started first (with pods
    running alike it empties first; and a node held gets no new pods, so a node the
    stream refills never displaces it), then by name; ``None`` when a pod fits no node
    even empty.  One heap of the nodes per pod shape and node constraints, each node's
    place in it worked out again only once a pod was picked for it."""
    picker = _Picker(state, taken, sorted({r for pod in pods for r in pod.requests if r != PODS}))
    order = sorted(
        pods, key=lambda p: (tuple(-p.requests.get(r, 0) for r in picker.resources), p.key)
    )
    claims: dict[str, Resources] = {}
    for pod in order:
        chosen = picker.pick(pod)
        if chosen is None:
            return None
        add_into(claims.setdefault(chosen, {}), {r: pod.requests[r] for r in picker.resources})
    return claims


class _Picker:
    """The nodes' room as pods are picked for them (:func:`_pick_nodes`)."""

    def __init__(
        self, state: ClusterState, taken: Mapping[str, Mapping[str, int]], resources: list[str]
    ) -> None:
        self.state, self.taken, self.resources = state, taken, resources
        self.free: dict[str, list[int]] = {}  # node → free of each resource, less picked
        self.room: dict[str, list[int]] = {}  # node → allocatable, less picked
        self.newest: dict[str, float] = {}  # node → when its newest pod started
        self.picked: dict[str, int] = {}  # node → pods picked for it (an entry's version)
        self.heaps: dict[tuple[object, ...], list[tuple[float, float, str, int]]] = {}

    def _node(self, name: str) -> None:
        state, taken = self.state, self.taken.get(name, {})
        self.free[name] = [state.free_amount(name, r) - taken.get(r, 0) for r in self.resources]
        allocatable = state.nodes[name].allocatable
        self.room[name] = [allocatable.get(r, 0) - taken.get(r, 0) for r in self.resources]
        self.newest[name] = state.newest_start(name)
        self.picked[name] = 0

    def _entry(self, name: str, asks: list[int]) -> tuple[float, float, str, int] | None:
        """The node's place for a pod asking ``asks``; ``None``: it can never hold one."""
        if any(room < amount for room, amount in zip(self.room[name], asks, strict=True)):
            return None
        lack = sum(
            max(0, amount - free) / amount
            for free, amount in zip(self.free[name], asks, strict=True)
            if amount > 0
        )
        return (lack, self.newest[name], name, self.picked[name])

    def pick(self, pod: PodInfo) -> str | None:
        """The node for ``pod``, its room taken; ``None`` when none could ever hold it."""
        asks = [pod.requests.get(r, 0) for r in self.resources]
        key = (
            tuple(asks),
            tuple(sorted(pod.node_selector.items())),
            repr(pod.required_affinity),
            repr(pod.tolerations),
        )
        heap = self.heaps.get(key)
        if heap is None:
            heap = []
            for name, node in self.state.nodes.items():
                if name not in self.picked:
                    self._node(name)
                entry = self._entry(name, asks)
                if entry is not None and static_misfit(pod, node) is None:
                    heap.append(entry)
            heapq.heapify(heap)
            self.heaps[key] = heap
        while heap:
            name, version = heap[0][2], heap[0][3]
            if version == self.picked[name]:
                break
            heapq.heappop(heap)  # the node's room changed since: its place again
            entry = self._entry(name, asks)
            if entry is not None:
                heapq.heappush(heap, entry)
        else:
            return None
        name = heap[0][2]
        for i, amount in enumerate(asks):
            self.free[name][i] -= amount
            self.room[name][i] -= amount
        self.picked[name] += 1
        return name


def kept_off(
    state: ClusterState, pod: PodInfo, nodes: Collection[str], now: float
) -> dict[str, str]:
    """Of ``nodes``, those ``pod`` is kept off for a starving job (node → reason)."""
    if pod.job in state.reservations or state.reserved_node(pod.key) is not None:
        return {}
    holds = starving_holds(state, now)
    if not holds:
        return {}
    pods = [p for p in state.members.job_pods(pod.job) if not p.finished and not p.terminating]
    if pod.key not in state.pods:
        pods.append(pod)
    since = max(p.created for p in pods)
    mine = _asks(pods)
    guaranteed = _within_min(state, pod)
    ahead = [
        hold
        for hold in holds
        if hold.job != pod.job
        and since > hold.since
        and pod.priority <= hold.priority
        and all(mine.get(name, 0) <= amount for name, amount in hold.asks.items())
        and not (hold.borrows and guaranteed is not None and guaranteed != hold.quota)
    ]
    refused: dict[str, str] = {}
    for name in nodes:
        held: Resources = {}
        holders = [hold for hold in ahead if name in hold.claims]
        if not holders or name not in state.nodes:
            continue
        for hold in holders:
            add_into(held, hold.claims[name])
        free = state.free_on(name, for_pod=pod.key)
        if any(
            amount > 0 and name_r in held and free.get(name_r, 0) - amount < held[name_r]
            for name_r, amount in pod.requests.items()
        ):
            first = holders[0]
            refused[name] = (
                f"room on this node is reserved for starving job {first.job} (waiting since "
                f"{format_time(first.since)}; held until {format_time(first.ends)})"
            )
    return refused


def _within_min(state: ClusterState, pod: PodInfo) -> str | None:
    """``pod``'s quota if admitting its job keeps that quota within its ``min`` (a
    guarantee a borrowing job's hold must not withhold), else ``None``."""
    try:
        demand = job_demand(state, pod.job, including=pod)
    except (QuotaMembershipError, IndexError):
        return None
    if would_borrow(state.ledger, demand.quota, demand.request, demand.asks):
        return None
    return demand.quota


def keep_off_held_room(
    state: ClusterState, pod: PodInfo, result: FilterResult, now: float
) -> tuple[FilterResult, frozenset[str]]:
    """``result`` with the passed nodes ``pod`` is kept off for starving jobs failed
    (as room reserved for another job is), and those nodes: a gang is planned without
    them."""
    if result.quota_failures or not result.passed:
        return result, frozenset()
    refused = kept_off(state, pod, result.passed, now)
    if not refused:
        return result, frozenset()
    passed = [name for name in result.passed if name not in refused]
    failed = {**result.failed, **refused}
    pinned = result.pinned_to if result.pinned_to in passed else None
    kept = dataclasses.replace(result, passed=passed, failed=failed, pinned_to=pinned)
    return kept, frozenset(refused)


def describe_hold(hold: Hold) -> str:
    """One line for ``simulate``'s notes."""
    nodes = ", ".join(sorted(hold.claims))
    return (
        f"job {hold.job} is starving (waiting since {format_time(hold.since)}): room on "
        f"{nodes} is held for it until {format_time(hold.ends)}"
    )
