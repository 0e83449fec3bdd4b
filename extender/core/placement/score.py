"""The packing score behind the ``prioritize`` verb: fill busy nodes, keep whole ones free.

A pod's reserved node scores 10; any other node a *packing* score, 0..10: the mean, over
the resources the pod asks for, of how full the node would be after placing it.  Only
the scarce resources count when the pod asks for any (anything but cpu, memory,
ephemeral-storage), so GPU pods fill GPU nodes one at a time and whole nodes stay free
for gangs.  The planner's placements (:mod:`.fit`) break ties by the same score.

Borrowed pods go with borrowed pods (``borrowedApart``, on by default): a pod whose quota
borrows (it is, or the pod takes it, above its ``min`` in a resource the pod is packed
by: its scarce ones, if it asks for any)
scores 0 on a node running pods of a quota within its ``min`` in those resources, and a
pod whose quota does not, on a node running pods of a borrowing quota (its own quota's
pods never count against a node).  A reclaim takes borrowed pods: kept apart, they free
whole nodes with few victims, and guaranteed pods do not pin them in part.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from base.resources import PODS
from extender.core.objects import PodInfo
from extender.core.state import ClusterState, memoise_on_node
from quota.admission import is_borrowing, would_borrow

#: Resources every pod asks for; a pod asking for anything else is packed by that alone.
COMMON_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", PODS})
MAX_SCORE = 10


def score_nodes(state: ClusterState, pod: PodInfo, node_names: Iterable[str]) -> dict[str, int]:
    """Integer scores 0..10 per node; see the module docstring.  A node's score depends only
    on the pod's scored wants and on the node's totals, so it is memoised per node
    (``state.node_usage.scores``, dropped whenever the node's totals change)."""
    reserved_node = state.reserved_node(pod.key)
    wants = tuple(_wants(pod.requests, scored_resources(pod.requests)))
    usage = state.node_usage
    requested, held, memo = usage.requested, usage.reserved, usage.scores
    nodes = state.nodes
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
    if state.args.borrowed_apart:
        _keep_borrowed_apart(state, pod, scores, reserved_node)
    return scores


def _keep_borrowed_apart(
    state: ClusterState, pod: PodInfo, scores: dict[str, int], reserved_node: str | None
) -> None:
    """Score 0 the nodes running pods of a quota that borrows when the pod's quota does
    not, or the other way round (see the module docstring)."""
    own = state.quota_name(pod)
    if own is None:
        return
    # The resources it is packed by: its scarce ones (GPUs), if it asks for any.  A quota
    # borrowing only cpu does not make a GPU node costly to reclaim.
    asks = [name for name in scored_resources(pod.requests) if pod.requests[name]]
    ledger = state.ledger
    request: Mapping[str, int] = {} if state.counts_as_used(pod) else pod.requests
    borrowed = would_borrow(ledger, own, request, asks)
    # The quotas of the other kind: few (one per team), so decided once, not per node.
    apart = frozenset(
        quota
        for quota in state.tree.specs
        if quota != own and is_borrowing(ledger, quota, asks) != borrowed
    )
    if not apart:
        return
    # Set operations over the nodes each quota runs on: no Python loop over 5,000 nodes.
    zeroed: set[str] = set()
    for quota in apart:
        zeroed.update(state.node_usage.quota_nodes.get(quota, ()))
    zeroed.discard(reserved_node or "")
    scores.update(dict.fromkeys(zeroed.intersection(scores), 0))


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
