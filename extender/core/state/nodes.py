"""Node usage: what the pods on each node take, and the room held there for reservations.

One of the indexes behind :class:`~extender.core.state.ClusterState`.  Per node it keeps
the requests of its bound pods, the room held for each reserved (still pending) pod of
an in-flight job, and the requests of its bound preemptible pods: the most that evicting
could free there.  :meth:`NodeUsage.free_on` is the one definition of a node's free
room; the planner's hot loops read the same totals (:attr:`requested`,
:attr:`reserved`, :attr:`preemptible`) directly, and only read them.

Memos per node hold what depends only on a node and its totals, asked for again and
again: its free room (:meth:`NodeUsage.free_on` starts from it), and for pod shapes
:attr:`scores`, the prioritize verb's packing scores, and :attr:`copies`, the
planner's count of a shape's copies there.  Every change to a node's totals (or to the
node) drops that node's memos.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from typing import TypeVar

from base.resources import Resources, add_into, subtract

_NOTHING: Mapping[str, int] = {}
_NO_ROOMS: Mapping[str, Resources] = {}

#: Entries a node's memo keeps (one per pod shape); one more and it starts again.
MEMO_SHAPES = 64

_Key = TypeVar("_Key", bound=Hashable)
_Value = TypeVar("_Value")

#: A job shape's needs (resource, amount) and its pod count: see
#: :func:`extender.core.placement.shapes.count_copies`.
CopiesKey = tuple[tuple[tuple[str, int], ...], int]
#: Copies that fit now, and the resources the node may lack for one more as victims go
#: (``None``: evicting could not fit more there).
Copies = tuple[int, frozenset[str] | None]


def memoise_on_node(
    memo: dict[str, dict[_Key, _Value]], node: str, key: _Key, value: _Value
) -> None:
    """Keep ``value`` in ``node``'s entry of a per-node memo, at most :data:`MEMO_SHAPES`
    keys a node."""
    known = memo.get(node)
    if known is None or len(known) >= MEMO_SHAPES:
        memo[node] = {key: value}
    else:
        known[key] = value


class NodeUsage:
    def __init__(self) -> None:
        #: node → requests of the pods bound to it.
        self.requested: dict[str, Resources] = {}
        #: node → reserved pod → the room held for it there.
        self.reserved: dict[str, dict[str, Resources]] = {}
        #: node → requests of its bound preemptible pods.
        self.preemptible: dict[str, Resources] = {}
        self._pods: dict[str, set[str]] = {}
        #: quota → node → how many pods charged to that quota are bound to the node.
        self.quota_nodes: dict[str, dict[str, int]] = {}
        #: node → a pod's scored wants → its packing score there (see
        #: :func:`extender.core.placement.score.score_nodes`); dropped when the node changes.
        self.scores: dict[str, dict[tuple[tuple[str, int], ...], int]] = {}
        #: node → a job shape → its copies there (see
        #: :func:`extender.core.placement.shapes.count_copies`); dropped when the node changes.
        self.copies: dict[str, dict[CopiesKey, Copies]] = {}
        #: node → its free room with every held room counted used (see :meth:`free_on`);
        #: dropped when the node changes.
        self.free_rooms: dict[str, Resources] = {}
        #: node → a resource → (priority, amount) of each preemptible pod bound to it that
        #: asks for some, sorted (see ``ClusterState.preemptible_amounts``); dropped when
        #: the node changes.
        self.victim_amounts: dict[str, dict[str, tuple[tuple[int, int], ...]]] = {}
        #: node → when its newest bound pod started (see ``ClusterState.newest_start``);
        #: dropped when the node changes.
        self.newest_starts: dict[str, float] = {}
        #: node → a job shape → what the node lacks for one more copy of it, in the
        #: resources it may lack (see :mod:`extender.core.preemption.deferral`); dropped
        #: when the node changes.
        self.missing: dict[str, dict[CopiesKey, dict[str, int]]] = {}
        #: node → a job shape → the lowest priority by which its preemptible pods free
        #: what it lacks for one more copy (``None``: never; see
        #: :mod:`extender.core.preemption.horizon`); dropped when the node changes.
        self.gains: dict[str, dict[CopiesKey, int | None]] = {}

    def changed(self, node: str) -> None:
        """Drop what the memos hold for ``node``: it, or its totals, changed."""
        self.scores.pop(node, None)
        self.copies.pop(node, None)
        self.free_rooms.pop(node, None)
        self.victim_amounts.pop(node, None)
        self.newest_starts.pop(node, None)
        self.missing.pop(node, None)
        self.gains.pop(node, None)

    def add_node(self, node: str) -> None:
        """A node added or changed (its allocatable may differ)."""
        self.requested.setdefault(node, {})
        self._pods.setdefault(node, set())
        self.changed(node)

    def remove_node(self, node: str) -> None:
        self.changed(node)

    def bind(
        self,
        node: str,
        key: str,
        requests: Mapping[str, int],
        *,
        preemptible: bool,
        sign: int,
        quota: str | None = None,
    ) -> None:
        """Count a pod bound to ``node``, charged to ``quota`` (``sign=-1``: take it back
        out)."""
        self.changed(node)
        if quota is not None:
            counts = self.quota_nodes.setdefault(quota, {})
            left = counts.get(node, 0) + sign
            if left > 0:
                counts[node] = left
            else:
                counts.pop(node, None)
        add_into(self.requested.setdefault(node, {}), requests, sign)
        pods = self._pods.setdefault(node, set())
        if sign > 0:
            pods.add(key)
        else:
            pods.discard(key)
        if preemptible:
            add_into(self.preemptible.setdefault(node, {}), requests, sign)

    def hold(self, node: str, key: str, requests: Mapping[str, int]) -> None:
        """Hold room on ``node`` for the reserved pod ``key``."""
        self.changed(node)
        self.reserved.setdefault(node, {})[key] = dict(requests)

    def release(self, node: str, key: str) -> None:
        self.changed(node)
        held = self.reserved[node]
        del held[key]
        if not held:
            del self.reserved[node]

    def pods_on(self, node: str) -> Collection[str]:
        return self._pods.get(node, ())

    def free_room(self, node: str, allocatable: Mapping[str, int]) -> Mapping[str, int]:
        """:meth:`free_on` with every held room counted used, the memo itself: to read,
        never to change."""
        free = self.free_rooms.get(node)
        if free is None:
            free = subtract(allocatable, self.requested.get(node, _NOTHING))
            for room in self.reserved.get(node, _NO_ROOMS).values():
                add_into(free, room, -1)
            self.free_rooms[node] = free
        return free

    def free_on(
        self,
        node: str,
        allocatable: Mapping[str, int],
        for_pod: str | None = None,
        released: Collection[str] = (),
    ) -> Resources:
        """Allocatable minus the requests of the node's pods minus the room held there for
        reserved pods other than ``for_pod`` (and those ``released``), a copy to keep.
        ``allocatable`` is the node's own (the memo behind it is dropped only when the
        node or its totals change)."""
        free = dict(self.free_room(node, allocatable))
        held = self.reserved.get(node)
        if held and (for_pod is not None or released):
            for holder, room in held.items():
                if holder == for_pod or holder in released:
                    add_into(free, room)
        return free
