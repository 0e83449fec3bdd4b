"""The filter verb's node sorting: which nodes pass, fail, or fail for good, for one pod.

Two modes:

- ``as_extender``: kube-scheduler has already run its own filters, so Muster only adds
  what it alone knows: job-level quota admission (:mod:`.admission`; every node
  ``FailedAndUnresolvable``: no eviction on a node helps a quota), and room held for
  other jobs' reservations (``Failed``).  A node Muster has not seen yet holds no
  reservation, so it passes.  A pod with reserved room is held to its reserved node
  whenever that node passes.
- full (``simulate``): also the node constraints of
  :mod:`extender.core.placement.nodefit`.

A pod of a gang is then placed with its whole job (:mod:`.gang`, :mod:`.verb`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from base.resources import PODS, add_into, shortfall
from extender.core.effects import Effect
from extender.core.filter.admission import admission_verdict
from extender.core.objects import PodInfo
from extender.core.placement.nodefit import static_misfit
from extender.core.state import ClusterState


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
    #: A gang's reason for turning all its pods away (see :mod:`extender.core.filter.gang`).
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


def filter_nodes(
    state: ClusterState,
    pod: PodInfo,
    node_names: Iterable[str],
    *,
    as_extender: bool,
    now: float | None = None,
) -> FilterResult:
    """Sort ``node_names`` into passed, failed and unresolvable for ``pod`` (at ``now``,
    for fair sharing's admission check, which holds the pod back only for waiting work
    that could use one of ``node_names``: see :func:`.admission.admission_failures`)."""
    names = list(node_names)
    failures, waiting = admission_verdict(state, pod, now, names)
    if failures:
        reason = "; ".join(failures)
        if waiting:
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
        holding = state.nodes_with_reserved_room()
        suspects = [name for name in names if name in holding] if holding else []
        for name in suspects:
            held = state.reserved_on(name)
            if (len(held) > 1 or pod.key not in held) and name in state.nodes:
                failure = _resource_failure(state, pod, name, as_extender=True)
                if failure is not None:
                    result.failed[name] = failure
        result.passed = [name for name in names if name not in result.failed] if suspects else names
    else:
        for name in names:
            node = state.nodes.get(name)
            misfit = "node is not known" if node is None else static_misfit(pod, node)
            if misfit is not None:
                result.unresolvable[name] = misfit
                continue
            failure = _resource_failure(state, pod, name, as_extender=False)
            if failure is None:
                result.passed.append(name)
            else:
                result.failed[name] = failure
    reserved_node = state.reserved_node(pod.key)
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
    state: ClusterState, pod: PodInfo, node: str, *, as_extender: bool
) -> str | None:
    free = state.free_on(node, for_pod=pod.key)
    short = shortfall(pod.requests, free)
    if short is None:
        return None
    held = {key: room for key, room in state.reserved_on(node).items() if key != pod.key}
    if held:
        for room in held.values():
            add_into(free, room)
        # As an extender, kube-scheduler found the pod fits: where this state counts the
        # node fuller still (a pod kube-scheduler has seen leave is not gone here yet), the
        # room kube-scheduler sees free is the room held all the same.
        if as_extender or shortfall(pod.requests, free) is None:
            holders = sorted({state.reservation_holder(key) or key for key in held})
            return f"room on this node is reserved for job {', '.join(holders)}"
    if as_extender:
        return None  # kube-scheduler judges plain resource fit from its own cache
    return "Too many pods" if short == PODS else f"Insufficient {short}"
