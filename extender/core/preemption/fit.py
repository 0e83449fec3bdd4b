"""Where a job's unplaced pods could run, on copies of the nodes, as victims come and go.

The planner removes victims one group at a time and asks "does the whole job
fit now?" after each.  Re-placing 64 pods on 5,000 nodes each time would be
far too slow, so :class:`JobFit` keeps, for every pod *shape* (requests plus
node constraints) of the job, how many copies fit on each eligible node and
their sum.  Removing or restoring a victim changes only its node's counts.

For a job of one shape (the usual gang) the sum *is* the answer: each node
holds its copies independently.  A job of several shapes also needs every
shape's sum to suffice, and then a real greedy placement (:meth:`JobFit.place`,
the same one that produces the plan's reservation) decides.

Node copies are copy-on-write: only nodes that lose a victim get a delta.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from extender.core.nodefit import constraint_signature, static_misfit
from extender.core.objects import PodInfo
from extender.core.resources import PODS, Resources, add_into, copies_that_fit
from extender.core.scheduling import COMMON_RESOURCES, packing_score
from extender.core.snapshot import Snapshot


@dataclass(slots=True)
class _Shape:
    request: Resources
    pods: list[PodInfo]
    eligible: frozenset[str]
    capacity: dict[str, int]  # node → copies that fit (at most len(pods))
    total: int


def eligible_nodes(snapshot: Snapshot, pod: PodInfo) -> frozenset[str]:
    """Nodes that pass the pod's static constraints and could hold it when empty (memoised)."""
    key = ("eligible", constraint_signature(pod), tuple(sorted(pod.requests.items())))
    cached = snapshot.node_cache.get(key)
    if isinstance(cached, frozenset):
        return cached
    eligible = frozenset(
        name
        for name, node in snapshot.nodes.items()
        if copies_that_fit(pod.requests, node.allocatable, 1) and static_misfit(pod, node) is None
    )
    snapshot.node_cache[key] = eligible
    return eligible


class JobFit:
    """Copies-that-fit bookkeeping for one job over a changing set of removed victims."""

    def __init__(self, snapshot: Snapshot, job: str, pods: Sequence[PodInfo]) -> None:
        self.snapshot = snapshot
        self.job = job
        self._freed: dict[str, Resources] = {}
        self._base: dict[str, Resources] = {}
        shapes: dict[object, _Shape] = {}
        for pod in pods:
            key = (tuple(sorted(pod.requests.items())), constraint_signature(pod))
            shape = shapes.get(key)
            if shape is None:
                shape = _Shape(dict(pod.requests), [], eligible_nodes(snapshot, pod), {}, 0)
                shapes[key] = shape
            shape.pods.append(pod)
        # Largest first: the order the greedy placement uses.
        self.shapes = sorted(shapes.values(), key=lambda s: _size(s.request), reverse=True)
        self.eligible = frozenset().union(*(shape.eligible for shape in self.shapes))
        useful = set()
        for name in self.eligible:
            self._base[name] = snapshot.free_on(name)
        for shape in self.shapes:
            wanted = len(shape.pods)
            for name in shape.eligible:
                count = self._copies(shape, name)
                if count:
                    shape.capacity[name] = count
                    shape.total += count
                if count < wanted:
                    best = dict(self._base[name])
                    add_into(best, snapshot.preemptible_on(name))
                    if copies_that_fit(shape.request, best, wanted) > count:
                        useful.add(name)
        #: Nodes where evicting preemptible pods could add room for the job.
        self.useful_nodes = frozenset(useful)
        self._initial = [dict(shape.capacity) for shape in self.shapes]

    def free(self, node: str) -> Resources:
        """Free room on the node copy: minus reservations, plus removed victims."""
        free = dict(self._base[node])
        freed = self._freed.get(node)
        if freed:
            add_into(free, freed)
        return free

    def _copies(self, shape: _Shape, node: str) -> int:
        base = self._base[node]
        freed = self._freed.get(node)
        count = len(shape.pods)
        for name, amount in shape.request.items():
            if amount > 0:
                available = base.get(name, 0) + (freed.get(name, 0) if freed else 0)
                if available < amount:
                    return 0
                count = min(count, available // amount)
        return count

    def remove(self, pods: Iterable[PodInfo]) -> None:
        """Take victims off their node copies."""
        self._shift(pods, 1, recount=True)

    def restore(self, pods: Iterable[PodInfo]) -> None:
        """Put victims back on their node copies."""
        self._shift(pods, -1, recount=True)

    def restore_idle(self, pods: Iterable[PodInfo]) -> None:
        """Put back victims whose nodes gained nothing from their removal (see :meth:`gained`):
        the counts cannot change, so they are not recomputed."""
        self._shift(pods, -1, recount=False)

    def _shift(self, pods: Iterable[PodInfo], sign: int, *, recount: bool) -> None:
        touched = set()
        for pod in pods:
            node = pod.node_name
            if node is None or node not in self._base:
                continue
            freed = self._freed.get(node)
            if freed is None:
                freed = self._freed[node] = {}
            for name, amount in pod.requests.items():
                freed[name] = freed.get(name, 0) + sign * amount
            touched.add(node)
        if not recount:
            return
        for node in touched:
            for shape in self.shapes:
                if node not in shape.eligible:
                    continue
                before = shape.capacity.get(node, 0)
                after = self._copies(shape, node)
                if after != before:
                    shape.capacity[node] = after
                    shape.total += after - before

    def frees_what_is_missing(self, pods: Iterable[PodInfo]) -> bool:
        """Would removing ``pods`` free a resource that one of their nodes lacks for one
        more copy of a shape it can hold more of?  (A pod that frees only what is
        plentiful there gains the job nothing.)"""
        for pod in pods:
            node = pod.node_name
            if node not in self.useful_nodes:
                continue
            base = self._base[node]
            freed = self._freed.get(node) or {}
            for shape in self.shapes:
                wanted = shape.capacity.get(node, 0) + 1
                if wanted > len(shape.pods) or node not in shape.eligible:
                    continue
                for name, amount in shape.request.items():
                    if (
                        amount > 0
                        and pod.requests.get(name, 0) > 0
                        and base.get(name, 0) + freed.get(name, 0) < wanted * amount
                    ):
                        return True
        return False

    def gained(self, node: str) -> bool:
        """Does the node copy hold more of the job now than before any removal?"""
        return any(
            shape.capacity.get(node, 0) > initial.get(node, 0)
            for shape, initial in zip(self.shapes, self._initial, strict=True)
        )

    def nodes_suffice(self) -> bool:
        """Does every shape have room for all its pods, each shape on its own?"""
        return all(shape.total >= len(shape.pods) for shape in self.shapes)

    def fits(self) -> bool:
        """Can every unplaced pod of the job be placed at once?"""
        if not self.nodes_suffice():
            return False
        return len(self.shapes) == 1 or self.place() is not None

    def place(self) -> dict[str, str] | None:
        """Pod key → node for every pod, or ``None`` if the greedy placement fails.

        Shapes largest first; within a shape, nodes by packing score (fullest
        after placement first), then by name, each filled to what it holds.
        """
        used: dict[str, Resources] = {}
        placement: dict[str, str] = {}
        for shape in self.shapes:
            remaining = list(shape.pods)
            considered = [n for n in shape.request if n not in COMMON_RESOURCES] or [
                n for n in shape.request if n != PODS
            ]
            ranked = []
            for node in shape.capacity:
                if shape.capacity[node] <= 0:
                    continue
                free = self.free(node)
                if node in used:
                    add_into(free, used[node], -1)
                allocatable = self.snapshot.nodes[node].allocatable
                taken = {name: allocatable.get(name, 0) - free.get(name, 0) for name in considered}
                score = packing_score(shape.request, allocatable, taken, (), considered)
                ranked.append((-score, node, free))
            ranked.sort(key=lambda item: (item[0], item[1]))
            for _score, node, free in ranked:
                if not remaining:
                    break
                count = copies_that_fit(shape.request, free, len(remaining))
                for _ in range(count):
                    placement[remaining.pop(0).key] = node
                    add_into(used.setdefault(node, {}), shape.request)
            if remaining:
                return None
        return placement


def _size(request: Resources) -> tuple[int, ...]:
    scarce = sum(amount for name, amount in request.items() if name not in COMMON_RESOURCES)
    return (scarce, request.get("cpu", 0), request.get("memory", 0))
