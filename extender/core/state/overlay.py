"""What-ifs over a :class:`~extender.core.state.ClusterState`, without changing it.

An :class:`Overlay` answers "what if these pods were gone (evicted), or back?": it
keeps copies of the nodes' free room and of the quota ledger, made the first time a
node or a quota is touched (copy-on-write), so a what-if over 5,000 nodes costs only
what it touches.  The planner simulates evictions on one; the ``preempt`` verb checks
kube-scheduler's proposed victims on one.  The state underneath must not change while
an overlay is in use (decisions hold the state's lock).

A *settled* overlay (:meth:`Overlay.settled`) starts from the cluster as it will be once
the pods in flight out of it are gone (:meth:`ClusterState.leaving`: earlier plans'
victims, marked or promised, and terminating pods): their room is free on the node
copies and their requests are out of the ledger copy.  Every rule a plan keeps reads
that one, so a plan made while earlier victims are still leaving decides what it would
after they left.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from base.resources import Resources
from extender.core.objects import PodInfo
from extender.core.state.cluster import ClusterState
from extender.core.state.minresources import change_hold
from quota.accounting import QuotaLedger


class Overlay:
    """Copies of node free room and quota usage, with pods taken out or put back.

    ``released``: reserved pods whose held room the copies count as free (a job
    re-planned in place of its own reservation).  A node copy holds every resource of
    the node (copying the state's memoised free room whole is cheaper than picking the
    few a planner reads).
    """

    def __init__(self, state: ClusterState, released: Collection[str] = ()) -> None:
        self.state = state
        self._released = released
        #: The quota ledger, copied entry by entry as charges touch it.
        self.ledger: QuotaLedger = state.ledger.overlay()
        self._rooms: dict[str, Resources] = {}
        #: Pods counted as gone from the start (a settled overlay's), by node.
        self.left: dict[str, list[PodInfo]] = {}

    @classmethod
    def settled(cls, state: ClusterState, released: Collection[str] = ()) -> Overlay:
        """An overlay of the cluster once the pods :meth:`ClusterState.leaving` lists are
        gone: off their node copies (when first read) and out of the ledger copy; and,
        for the reserved pods ``released``, their held room free and their quota no
        longer charged for it (they are pending again: a reservation that yields)."""
        overlay = cls(state, released)
        for key in released:
            pod = state.pods.get(key)
            quota = None if pod is None else state.quota_name(pod)
            if pod is not None and quota is not None and state.counts_as_used(pod):
                overlay.ledger.charge(
                    quota,
                    pod.requests,
                    preemptible=state.preemptible(pod),
                    used=True,
                    sign=-1,
                    requested=False,
                )
        leaving = state.leaving()
        for pod in leaving:
            assert pod.node_name is not None
            overlay.left.setdefault(pod.node_name, []).append(pod)
            quota = state.quota_name(pod)
            if quota is not None:
                overlay.ledger.charge(
                    quota, pod.requests, preemptible=state.preemptible(pod), used=True, sign=-1
                )
        gone = {pod.key for pod in leaving}
        for job in {pod.job for pod in leaving}:
            # A job's minResources hold grows as its pods leave, and goes with the last.
            change_hold(
                overlay.ledger,
                state.min_resources.held(job),
                state.min_resources.hold_without(state, job, gone),
            )
        return overlay

    def evictable(self, node: str) -> Mapping[str, int]:
        """Requests of the preemptible pods bound to ``node`` and not counted as gone."""
        evictable = self.state.preemptible_on(node)
        left = self.left.get(node)
        if not left:
            return evictable
        rest = dict(evictable)
        for pod in left:
            if self.state.preemptible(pod):
                for name, amount in pod.requests.items():
                    rest[name] = rest.get(name, 0) - amount
        return rest

    def free(self, node: str) -> Resources:
        """The node copy's free room (a copy of it, to keep)."""
        room = self._rooms.get(node)
        return dict(room) if room is not None else self._room_now(node)

    def room(self, node: str) -> Resources:
        """The node copy's free room itself, to read (copied from the state on first use)."""
        room = self._rooms.get(node)
        if room is None:
            room = self._rooms[node] = self._room_now(node)
        return room

    def peek(self, node: str) -> Mapping[str, int]:
        """The node copy's free room, to read only: the state's own while the copy was
        never made (and nothing makes it differ)."""
        room = self._rooms.get(node)
        if room is not None:
            return room
        if self._released or node in self.left:
            return self._room_now(node)
        return self.state.node_usage.free_room(node, self.state.nodes[node].allocatable)

    def untouched(self, node: str) -> bool:
        """Is ``node``'s copy the state's own: never made, and nothing released or counted
        gone there (what the state's memos say of the node holds for the copy)?"""
        return node not in self._rooms and not self._released and node not in self.left

    def touched(self) -> Collection[str]:
        """The nodes whose copies differ from the state, or may."""
        return self._rooms.keys()

    def take(
        self, pods: Iterable[PodInfo], nodes: Collection[str] | None = None
    ) -> dict[str, Resources]:
        """Take bound pods off their node copies (as if evicted); only on ``nodes`` if
        given.  Returns the rooms of the nodes touched."""
        return self._shift(pods, 1, nodes)

    def restore(
        self, pods: Iterable[PodInfo], nodes: Collection[str] | None = None
    ) -> dict[str, Resources]:
        """Put taken pods back on their node copies."""
        return self._shift(pods, -1, nodes)

    def charge(self, quota: str, requests: Mapping[str, int], sign: int) -> None:
        """Take running preemptible pods' ``requests`` out of ``quota``'s usage on the ledger
        copy (``sign=-1``), or put them back (``+1``)."""
        self.ledger.charge(quota, requests, preemptible=True, used=True, sign=sign)

    def forget_rooms(self) -> None:
        """Drop every node copy: the nodes are the state's again, but for the pods counted
        as gone from the start (the ledger copy stays)."""
        self._rooms = {}

    def _shift(
        self, pods: Iterable[PodInfo], sign: int, nodes: Collection[str] | None
    ) -> dict[str, Resources]:
        rooms = self._rooms
        touched: dict[str, Resources] = {}
        for pod in pods:
            node = pod.node_name
            if node is None or (nodes is not None and node not in nodes):
                continue
            room = rooms.get(node)
            if room is None:
                room = rooms[node] = self._room_now(node)
            for name, amount in pod.requests.items():
                room[name] = room.get(name, 0) + sign * amount
            touched[node] = room
        return touched

    def _room_now(self, node: str) -> Resources:
        """The state's free room on ``node`` (with the room of pods counted as gone)."""
        allocatable = self.state.nodes[node].allocatable
        room = self.state.node_usage.free_on(node, allocatable, released=self._released)
        for pod in self.left.get(node, ()):
            for name, amount in pod.requests.items():
                room[name] = room.get(name, 0) + amount
        return room
