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

A job with Kueue's slices (:class:`~extender.core.topology.SliceRequest`) fits when every
shape's pods go in whole slices, each inside one domain of the slice level
(:func:`~extender.core.topology.assign_slices`, on the shape's copies summed per domain:
for one shape these sums are kept as victims come and go).

Shapes and their per-node copy counts are :mod:`.shapes`.  Node copies are an
:class:`~extender.core.state.Overlay` (copy-on-write):
capacities come straight from the state's running totals, and a node's free room is
copied only when the planner first reads or changes it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from base.resources import Resources, add_into, copies_that_fit
from extender.core.objects import PodInfo
from extender.core.placement.score import COMMON_RESOURCES, packing_score, scored_resources
from extender.core.placement.search import search_placement
from extender.core.placement.shapes import (
    Shape,
    copies_in,
    count_copies,
    eligible_nodes,
    shape_of,
    short_on,
    size_order,
)
from extender.core.state import ClusterState, Overlay
from extender.core.topology import SliceRequest, assign_slices, slices_fit


class JobFit:
    """Copies-that-fit bookkeeping for one job over a changing set of removed victims.

    Capacities of every eligible node are counted straight from the state's
    running totals; a node's free room is copied only when the planner first
    looks at it or changes it (most nodes are never touched).
    """

    def __init__(
        self,
        state: ClusterState,
        job: str,
        pods: Sequence[PodInfo],
        *,
        excluded: Collection[str] = (),
        released: Collection[str] = (),
        settled: bool = False,
        slices: SliceRequest | None = None,
        bound: Sequence[PodInfo] = (),
    ) -> None:
        """``excluded``: nodes none of the pods may use (kube-scheduler refused them);
        ``released``: reserved pods whose held room counts as free (the job's own
        reservation, when it is planned again in its place); ``settled``: the pods in
        flight out of the cluster count as gone (a plan's view, :meth:`Overlay.settled`);
        ``slices``: the job's slices, with ``bound`` its pods on nodes already (their
        domains may hold incomplete slices); nodes without the slice level's label are in
        no domain, and hold none of the pods."""
        self.state = state
        self.job = job
        self.slices = slices
        shapes = _shapes_of(state, pods, excluded, slices)
        #: The node copies (free room) and the quota ledger copy,
        #: with the removed victims taken out.
        self.overlay = Overlay.settled(state, released) if settled else Overlay(state, released)
        # Largest first: the order the greedy placement uses.
        self.shapes = sorted(shapes.values(), key=lambda s: size_order(s.request), reverse=True)
        self.eligible = frozenset().union(*(shape.eligible for shape in self.shapes))
        lacking = self._count_copies(released)
        #: Every resource the job asks for (with an amount).
        self._needed = frozenset(name for shape in self.shapes for name, _ in shape.needs)
        #: Pods of several shapes: a node may hold each shape's share on its own and
        #: still lack room for the combination, which the per-shape counts above do not
        #: see.  Then every eligible node may help, in every resource the job asks for.
        self._combined = len(self.shapes) > 1
        if self._combined:
            lacking = dict.fromkeys(self.eligible, self._needed)
        #: Nodes where evicting preemptible pods could add room for the job.
        self.useful_nodes = frozenset(lacking)
        #: For each useful node, the resources it may lack at some point of the search.
        self.short: Mapping[str, frozenset[str]] = lacking
        #: For each useful node, the only resources it may lack for one more copy of a
        #: shape as victims go (see :meth:`frees_what_is_missing`).  (Every running pod
        #: is in the node totals this bound rests on: one whose quota label is refused is
        #: counted in its namespace's quota.)
        self.lacking: Mapping[str, frozenset[str]] | None = lacking
        self._initial = [dict(shape.capacity) for shape in self.shapes]
        #: With slices: each node's domain of the slice level, and per shape how many of
        #: the job's bound pods of that shape each domain holds and (kept as victims come
        #: and go) how many more copies fit in it.
        self._domain: dict[str, str] = {}
        self._bound: list[dict[str, int]] = []
        self._domain_room: list[dict[str, int]] = []
        if slices is not None:
            self._count_slices(slices, shapes, bound)

    def _count_copies(self, released: Collection[str]) -> dict[str, frozenset[str]]:
        """Count every shape's copies per eligible node; return, per node where evicting
        could add room for a shape, the resources it lacks for one more copy of any shape
        it is eligible for."""
        lacking: dict[str, frozenset[str]] = {}
        counted = []
        for shape in self.shapes:
            shape.size = len(shape.pods)
            # Scarce resources first: they are the ones that usually decide.
            shape.needs = tuple(
                sorted(
                    ((name, amount) for name, amount in shape.request.items() if amount > 0),
                    key=lambda need: need[0] in COMMON_RESOURCES,
                )
            )
            shorts = count_copies(self.state, shape, released, self.overlay)
            counted.append(shorts)
            for node, short in shorts.items():
                lacking[node] = lacking[node] | short if node in lacking else short
            shape.total = sum(shape.capacity.values())
        # A node useful for one shape is asked about every shape it is eligible for.
        for shape, shorts in zip(self.shapes, counted, strict=True):
            for node in lacking.keys() - shorts.keys():
                if node in shape.eligible:
                    lacking[node] = lacking[node] | short_on(shape, node, self.overlay)
        return lacking

    def _count_slices(
        self, slices: SliceRequest, shapes: Mapping[object, Shape], bound: Sequence[PodInfo]
    ) -> None:
        nodes = self.state.nodes
        for name in self.eligible:
            self._domain[name] = nodes[name].labels[slices.level]
        keys = {id(shape): key for key, shape in shapes.items()}
        for shape in self.shapes:
            key = keys[id(shape)]
            held: dict[str, int] = {}
            for pod in bound:
                node = nodes.get(pod.node_name or "")
                value = node.labels.get(slices.level) if node is not None else None
                if value is not None and shape_of(pod) == key:
                    held[value] = held.get(value, 0) + 1
            self._bound.append(held)
            room: dict[str, int] = {}
            for node_name, copies in shape.capacity.items():
                domain = self._domain[node_name]
                room[domain] = room.get(domain, 0) + copies
            self._domain_room.append(room)

    def free(self, node: str) -> Resources:
        """Free room on the node copy: minus reservations, plus removed victims."""
        return self.overlay.free(node)

    def remove(self, pods: Iterable[PodInfo]) -> None:
        """Take victims off their node copies."""
        self._shift(pods, 1, recount=True)

    def restore(self, pods: Iterable[PodInfo]) -> None:
        """Put victims back on their node copies."""
        self._shift(pods, -1, recount=True)

    def keep_removed(self, pods: Iterable[PodInfo]) -> None:
        """Put back every removed victim but ``pods`` (which stay removed), when the nodes
        of those put back gained nothing from the removals (see :meth:`gained_nodes`): the
        counts do not change, so they are not recomputed.

        (A node that gained nothing holds as many copies as before any removal, and
        so with any part of its victims back.)  The node copies become the
        state's nodes without ``pods``: the same room as putting the others back
        one by one, found without touching them.
        """
        self.overlay.forget_rooms()
        self._shift(pods, 1, recount=False)

    def _shift(self, pods: Iterable[PodInfo], sign: int, *, recount: bool) -> None:
        if sign > 0:
            touched = self.overlay.take(pods, self.eligible)
        else:
            touched = self.overlay.restore(pods, self.eligible)
        if not recount:
            return
        for node, room in touched.items():
            for index, shape in enumerate(self.shapes):
                if node not in shape.eligible:
                    continue
                after = copies_in(shape, room)
                capacity = shape.capacity
                before = capacity.get(node, 0)
                if after != before:
                    capacity[node] = after
                    shape.total += after - before
                    if self._domain_room:
                        room_of = self._domain_room[index]
                        domain = self._domain[node]
                        room_of[domain] = room_of.get(domain, 0) + after - before

    def frees_what_is_missing(self, pods: Iterable[PodInfo]) -> bool:
        """Would removing ``pods`` free a resource that one of their nodes may lack for a
        copy of a shape it can hold more of?  (A pod that frees only what is plentiful
        there gains the job nothing.)  "May lack" is judged against the most copies the
        node could hold with every victim gone (``short``), not against one copy
        more than it holds now: where another resource limits the node today, freeing
        this one helps only once that one is freed too, and the walk meets the pods in
        either order.  For a job of several shapes: does it free anything the job asks
        for on a node the job may use?"""
        useful = self.useful_nodes
        for pod in pods:
            node = pod.node_name
            if node is None or node not in useful:
                continue
            if self._combined:
                if any(pod.requests.get(name, 0) > 0 for name in self._needed):
                    return True
                continue
            short = self.short[node]
            room = self.overlay.room(node)
            requests = pod.requests
            for shape in self.shapes:
                if node not in shape.eligible or shape.capacity.get(node, 0) >= shape.size:
                    continue
                for name, amount in shape.needs:
                    if (
                        name in short
                        and requests.get(name, 0) > 0
                        and room.get(name, 0) < shape.size * amount
                    ):
                        return True
        return False

    def gained_nodes(self) -> set[str]:
        """The nodes whose copy holds more of the job now than before any removal (only a
        touched node copy can)."""
        gained: set[str] = set()
        for shape, initial in zip(self.shapes, self._initial, strict=True):
            capacity = shape.capacity
            gained.update(
                node
                for node in self.overlay.touched()
                if capacity.get(node, 0) > initial.get(node, 0)
            )
        return gained

    def nodes_suffice(self) -> bool:
        """Does every shape have room for all its pods, each shape on its own?"""
        return all(shape.total >= shape.size for shape in self.shapes)

    def fits(self) -> bool:
        """Can every unplaced pod of the job be placed at once (in whole slices, when it
        has slices)?"""
        if len(self.shapes) == 1:  # the usual gang, asked after every removal: kept cheap
            shape = self.shapes[0]
            if shape.total < shape.size:
                return False
            if self.slices is None:
                return True
            return slices_fit(self._domain_room[0], self._bound[0], self.slices.size, shape.size)
        return self.nodes_suffice() and self.place() is not None

    def place(
        self, *, partial: bool = False, smallest_first: bool = False
    ) -> dict[str, str] | None:
        """Pod key → node for every pod, or ``None`` if the greedy placement fails
        (with ``partial``, for as many pods as it places: within a shape, in the order
        the pods were given).

        Shapes largest first (``smallest_first``: the other way round, which places
        the most pods when not all fit); within a shape, nodes by packing score
        (fullest after placement first), then by name, each filled to what it holds.
        """
        if self.slices is not None:
            return self._place_slices(self.slices.size, partial, smallest_first)
        used: dict[str, Resources] = {}
        placement: dict[str, str] = {}
        for shape in reversed(self.shapes) if smallest_first else self.shapes:
            remaining = list(shape.pods)
            for _score, node, free in self._ranked(shape, shape.capacity, used):
                if not remaining:
                    break
                count = copies_that_fit(shape.request, free, len(remaining))
                for _ in range(count):
                    placement[remaining.pop(0).key] = node
                    add_into(used.setdefault(node, {}), shape.request)
            if remaining and not partial:
                return search_placement(self.shapes, self.free) if len(self.shapes) > 1 else None
        return placement

    def _ranked(
        self, shape: Shape, nodes: Iterable[str], used: Mapping[str, Resources]
    ) -> list[tuple[int, str, Resources]]:
        """``nodes`` where the shape has copies, by packing score (fullest after placement
        first), then by name, each with its free room less what ``used`` takes there."""
        considered = scored_resources(shape.request)
        ranked = []
        for node in nodes:
            if shape.capacity.get(node, 0) <= 0:
                continue
            free = self.free(node)
            if node in used:
                add_into(free, used[node], -1)
            allocatable = self.state.nodes[node].allocatable
            taken = {name: allocatable.get(name, 0) - free.get(name, 0) for name in considered}
            score = packing_score(shape.request, allocatable, taken, (), considered)
            ranked.append((-score, node, free))
        ranked.sort(key=lambda item: (item[0], item[1]))
        return ranked

    def _place_slices(
        self, size: int, partial: bool, smallest_first: bool
    ) -> dict[str, str] | None:
        """:meth:`place` for a job with slices: per shape, how many pods each domain takes
        (:func:`~extender.core.topology.assign_slices`, on the copies that fit in the room
        the shapes placed before it left), then the greedy node order inside each domain."""
        used: dict[str, Resources] = {}
        placement: dict[str, str] = {}
        order = list(enumerate(self.shapes))
        for index, shape in reversed(order) if smallest_first else order:
            room: dict[str, int] = {}
            members: dict[str, list[str]] = {}
            for node in shape.capacity:
                free = self.free(node)
                if node in used:
                    add_into(free, used[node], -1)
                copies = copies_that_fit(shape.request, free, shape.size)
                if copies > 0:
                    domain = self._domain[node]
                    room[domain] = room.get(domain, 0) + copies
                    members.setdefault(domain, []).append(node)
            counts = assign_slices(room, self._bound[index], size, shape.size, partial=partial)
            if counts is None:
                return None
            remaining = list(shape.pods)
            for domain in sorted(counts):
                wanted = counts[domain]
                for _score, node, free in self._ranked(shape, members[domain], used):
                    if wanted == 0:
                        break
                    count = copies_that_fit(shape.request, free, wanted)
                    wanted -= count
                    for _ in range(count):
                        placement[remaining.pop(0).key] = node
                        add_into(used.setdefault(node, {}), shape.request)
        return placement


def _shapes_of(
    state: ClusterState,
    pods: Sequence[PodInfo],
    excluded: Collection[str],
    slices: SliceRequest | None,
) -> dict[object, Shape]:
    """The job's pods by shape, each shape with the nodes it may use: eligible for it,
    not ``excluded``, and (with slices) labelled with the slice level."""
    shapes: dict[object, Shape] = {}
    for pod in pods:
        key = shape_of(pod)
        shape = shapes.get(key)
        if shape is None:
            eligible = eligible_nodes(state, pod)
            if excluded:
                eligible = eligible.difference(excluded)
            if slices is not None:
                level = slices.level
                eligible = frozenset(n for n in eligible if level in state.nodes[n].labels)
            shape = Shape(dict(pod.requests), [], eligible, {}, 0)
            shapes[key] = shape
        shape.pods.append(pod)
    return shapes
