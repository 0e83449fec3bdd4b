"""Pod shapes, and how many copies of each fit on a node, now and as victims go.

A *shape* is what makes two pods of a job interchangeable in a placement: the same
requests and node constraints (:func:`shape_of`).  :func:`count_copies` fills a shape's
per-node capacity from the state's running totals (memoised per node) or from a settled
overlay's rooms, and says on which nodes evicting could fit more, short of which
resources.  :class:`~extender.core.placement.fit.JobFit` keeps these counts as victims
come and go.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from base.resources import Resources, add_into, copies_that_fit, subtract
from extender.core.objects import PodInfo
from extender.core.placement.nodefit import constraint_signature, static_misfit
from extender.core.placement.score import COMMON_RESOURCES
from extender.core.state import ClusterState, Copies, Overlay, memoise_on_node


@dataclass(slots=True)
class Shape:
    """One shape of a job's pods (same requests and node constraints): its pods, the nodes
    that could hold one, and how many copies fit on each now."""

    request: Resources
    pods: list[PodInfo]
    eligible: frozenset[str]
    capacity: dict[str, int]  # node → copies that fit (at most len(pods))
    total: int
    size: int = 0  # len(pods)
    needs: tuple[tuple[str, int], ...] = ()  # the request's positive amounts


def shape_of(pod: PodInfo) -> tuple[object, ...]:
    """What makes two pods interchangeable in a placement: requests and node constraints."""
    return (tuple(sorted(pod.requests.items())), constraint_signature(pod))


def eligible_nodes(state: ClusterState, pod: PodInfo) -> frozenset[str]:
    """Nodes that pass the pod's static constraints and could hold it when empty (memoised)."""
    key = ("eligible", constraint_signature(pod), tuple(sorted(pod.requests.items())))
    cached = state.node_memo.get(key)
    if cached is not None:
        return cached
    eligible = frozenset(
        name
        for name, node in state.nodes.items()
        if copies_that_fit(pod.requests, node.allocatable, 1) and static_misfit(pod, node) is None
    )
    state.node_memo[key] = eligible
    return eligible


def fits_when_empty(state: ClusterState, pods: Sequence[PodInfo], *, whole: bool) -> bool:
    """Could ``pods`` run once room frees: does each fit some node when that node is empty
    (:func:`eligible_nodes`), and, ``whole`` (a gang), do they all fit the nodes together
    when every node is empty?  Together: each shape, largest first, fills the eligible
    nodes' allocatable, by name, less what the shapes before it took: enough when it
    finds room for all (one shape: its copies per node summed), so a refusal may be
    pessimistic only for a gang of several shapes.  Memoised per set of shapes until a
    node changes: it depends on the nodes alone."""
    counts: dict[tuple[object, ...], list[PodInfo]] = {}
    for pod in pods:
        counts.setdefault(shape_of(pod), []).append(pod)
    key = ("fits-empty", whole, frozenset((shape, len(each)) for shape, each in counts.items()))
    cached = state.node_memo.get(key)
    if cached is not None:
        return bool(cached)
    shapes = sorted(counts.values(), key=lambda each: size_order(each[0].requests), reverse=True)
    fits = all(eligible_nodes(state, each[0]) for each in shapes)
    if fits and whole:
        taken: dict[str, Resources] = {}  # node → what the shapes before took there
        for each in shapes:
            request, remaining = each[0].requests, len(each)
            for name in sorted(eligible_nodes(state, each[0])):
                room = state.nodes[name].allocatable
                count = copies_that_fit(
                    request, subtract(room, taken[name]) if name in taken else room, remaining
                )
                if count and len(shapes) > 1:
                    add_into(taken.setdefault(name, {}), {r: a * count for r, a in request.items()})
                remaining -= count
                if remaining == 0:
                    break
            if remaining:
                fits = False
                break
    state.node_memo[key] = frozenset({True}) if fits else frozenset()
    return fits


def size_order(request: Mapping[str, int]) -> tuple[int, ...]:
    """A request's place when shapes go largest first: its scarce resources (GPUs and the
    like) in all, then cpu, then memory."""
    scarce = sum(amount for name, amount in request.items() if name not in COMMON_RESOURCES)
    return (scarce, request.get("cpu", 0), request.get("memory", 0))


def count_copies(
    state: ClusterState, shape: Shape, released: Collection[str], overlay: Overlay
) -> dict[str, frozenset[str]]:
    """Fill ``shape.capacity``: the copies that fit in each eligible node's free room
    (:meth:`~extender.core.state.ClusterState.free_on`), where any do.

    Returns the nodes where more copies would fit with every preemptible pod
    bound to them gone (:meth:`~extender.core.state.ClusterState.preemptible_on`),
    each with the resources in which it may lack room for one copy more than it
    holds, at any point of the search (see :func:`copies_on`).

    Both depend only on the shape and the node's totals, so they are memoised per node
    (``state.node_usage.copies``, dropped whenever the node's totals change), except
    when some reserved pods' room counts as free (``released``), and on the nodes of pods
    a settled overlay counts as gone (``overlay.left``), read from the overlay.
    """
    usage = state.node_usage
    nodes = state.nodes
    key = (shape.needs, shape.size)
    memo = None if released else usage.copies
    capacity = shape.capacity
    lacking: dict[str, frozenset[str]] = {}
    shared: dict[int, frozenset[str]] = {}  # one set per bit mask over needs
    left = overlay.left
    for node in shape.eligible:
        entry: Copies | None
        if left and node in left:  # pods counted as gone: not the memo's node
            entry = copies_on(shape, overlay.room(node), overlay.evictable(node), shared)
        else:
            known = memo.get(node) if memo is not None else None
            entry = known.get(key) if known is not None else None
        if entry is None:
            allocatable = nodes[node].allocatable
            free = (
                usage.free_on(node, allocatable, released=released)
                if released
                else usage.free_room(node, allocatable)
            )
            entry = copies_on(shape, free, state.preemptible_on(node), shared)
            if memo is not None:
                memoise_on_node(memo, node, key, entry)
        now, short = entry
        if now:
            capacity[node] = now
        if short is not None:
            lacking[node] = short
    return lacking


def copies_in(shape: Shape, room: Mapping[str, int]) -> int:
    """How many copies of ``shape`` fit in ``room``, at most its pod count: the same number
    as :func:`~base.resources.copies_that_fit`, with ``shape.needs`` scarcest first, so
    most rooms are settled by their first resource."""
    count = shape.size
    for name, amount in shape.needs:
        available = room.get(name, 0)
        if available < amount:
            return 0
        if available // amount < count:
            count = available // amount
    return count


def copies_on(
    shape: Shape,
    free: Mapping[str, int],
    evictable: Mapping[str, int],
    shared: dict[int, frozenset[str]],
) -> Copies:
    """The copies of ``shape`` that fit in a node's ``free`` room now, and, if more would
    fit with every preemptible pod bound to it gone (``evictable``), the resources in which
    it may lack room for one copy more than it holds (see :func:`short_resources`; else
    ``None``)."""
    now = copies_in(shape, free)
    if now == shape.size:
        return now, None
    most = shape.size
    for name, amount in shape.needs:
        copies = (free.get(name, 0) + evictable.get(name, 0)) // amount
        if copies <= now:  # evicting could not fit more
            return now, None
        if copies < most:
            most = copies
    return now, short_resources(shape, free, most, shared)


def short_resources(
    shape: Shape, free: Mapping[str, int], most: int, shared: dict[int, frozenset[str]]
) -> frozenset[str]:
    """The resources in which a node with ``free`` room may lack room for one more copy of
    ``shape`` as victims go, when it holds at most ``most`` copies with every preemptible
    pod gone.

    Victims only add room, and never more than the preemptible pods hold, so the node
    never holds more than ``most`` copies and its room never falls below ``free``: a
    resource can be short only if its free room now is below ``min(most + 1, size)``
    copies.  ``shared`` holds one set per bit mask over the needs, for every node.
    """
    wanted_at_most = min(max(most, 0) + 1, shape.size)
    mask = 0
    for bit, (name, amount) in enumerate(shape.needs):
        if free.get(name, 0) < wanted_at_most * amount:
            mask |= 1 << bit
    short = shared.get(mask)
    if short is None:
        short = shared[mask] = frozenset(
            name for bit, (name, _amount) in enumerate(shape.needs) if mask >> bit & 1
        )
    return short


def short_on(shape: Shape, node: str, overlay: Overlay) -> frozenset[str]:
    """:func:`short_resources` for ``node``, where evicting could not fit more of ``shape``
    (but could of another shape)."""
    free = overlay.free(node)
    evictable = overlay.evictable(node)
    most = shape.size
    for name, amount in shape.needs:
        most = min(most, (free.get(name, 0) + evictable.get(name, 0)) // amount)
    return short_resources(shape, free, most, {})
