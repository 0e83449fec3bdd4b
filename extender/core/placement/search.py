"""The exhaustive placement of a job of several pod shapes, when the greedy order fails.

:meth:`~extender.core.placement.fit.JobFit.place` fills nodes greedily, shapes largest
first.  When pods of several shapes must share nodes, that order can miss a placement
(a small pod taking the room a large one needed); :func:`search_placement` then tries
every placement, depth first, within a budget of node trials.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from base.resources import Resources, add_into, fits
from extender.core.placement.shapes import Shape

#: Node trials the exhaustive placement may spend, and the most pods it searches for.
SEARCH_BUDGET = 5_000
SEARCH_MAX_PODS = 256


def search_placement(
    shapes: Sequence[Shape], free: Callable[[str], Resources], budget: int = SEARCH_BUDGET
) -> dict[str, str] | None:
    """Pod key → node for every pod of ``shapes``, found depth first, or ``None`` once
    ``budget`` node trials are spent (or the job has more than ``SEARCH_MAX_PODS`` pods:
    one level of recursion per pod).  ``free``: a node's free room (copied before use).
    Pods of one shape are interchangeable, so each goes to a node no earlier than the one
    before it (no placement is tried twice)."""
    order = [(index, pod) for index, shape in enumerate(shapes) for pod in shape.pods]
    if len(order) > SEARCH_MAX_PODS:
        return None
    nodes = sorted({node for shape in shapes for node in shape.eligible})
    rank = {node: i for i, node in enumerate(nodes)}
    rooms: dict[str, Resources] = {}
    placement: dict[str, str] = {}
    trials = 0

    def room(node: str) -> Resources:
        if node not in rooms:
            rooms[node] = dict(free(node))
        return rooms[node]

    def place_from(at: int, first: int) -> bool:
        nonlocal trials
        if at == len(order):
            return True
        index, pod = order[at]
        shape = shapes[index]
        for node in nodes[first:]:
            if node not in shape.eligible:
                continue
            trials += 1
            if trials > budget:
                return False
            node_room = room(node)
            if not fits(shape.request, node_room):
                continue
            add_into(node_room, shape.request, -1)
            placement[pod.key] = node
            same = at + 1 < len(order) and order[at + 1][0] == index
            if place_from(at + 1, rank[node] if same else 0):
                return True
            add_into(node_room, shape.request)
            del placement[pod.key]
        return False

    return dict(placement) if place_from(0, 0) else None
