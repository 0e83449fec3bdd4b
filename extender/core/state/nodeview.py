"""What decisions read of nodes: the part of :class:`~extender.core.state.ClusterState`
that answers for one node: the pods bound to it, its requested, reserved and free room,
and what evicting its preemptible pods could free.

A mixin of reads only: the numbers are :class:`~extender.core.state.nodes.NodeUsage`'s
(kept by ``ClusterState._count``) and the nodes' allocatable room; the amounts per
preemptible pod are memoised on the node (:func:`~extender.core.state.nodes.memoise_on_node`)
until it changes.  The planner's copies and the overlay read nodes through it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from base.resources import Resources, add_into
from extender.core.objects import NodeInfo, PodInfo
from extender.core.state.membership import QuotaMembership
from extender.core.state.nodes import NodeUsage, memoise_on_node


class NodeViewMixin:
    """Per-node reads of :class:`ClusterState`: pods, room, preemptible amounts."""

    if TYPE_CHECKING:
        pods: dict[str, PodInfo]
        nodes: dict[str, NodeInfo]
        node_usage: NodeUsage
        membership: QuotaMembership
        node_memo: dict[tuple[object, ...], frozenset[Any]]

        def preemptible(self, pod: PodInfo) -> bool: ...

    def capacity(self) -> Mapping[str, int]:
        """The cluster's allocatable room summed over its nodes, by resource (what fair
        sharing's shares are fractions of); memoised until a node changes."""
        memo = self.node_memo.get(("capacity",))
        if memo is None:
            totals: dict[str, int] = {}
            for node in self.nodes.values():
                add_into(totals, node.allocatable)
            memo = frozenset(totals.items())
            self.node_memo[("capacity",)] = memo
        return dict(memo)

    def largest_allocatable(self) -> Mapping[str, int]:
        """The most any one node has of each resource; memoised until a node changes."""
        memo = self.node_memo.get(("largest",))
        if memo is None:
            largest: dict[str, int] = {}
            for node in self.nodes.values():
                for name, amount in node.allocatable.items():
                    if amount > largest.get(name, 0):
                        largest[name] = amount
            memo = frozenset(largest.items())
            self.node_memo[("largest",)] = memo
        return dict(memo)

    def pods_on(self, node: str) -> Iterator[PodInfo]:
        for key in self.node_usage.pods_on(node):
            yield self.pods[key]

    def newest_start(self, node: str) -> float:
        """When the newest pod bound to ``node`` started (:attr:`PodInfo.start_or_created
        <extender.core.objects.PodInfo.start_or_created>`); ``-inf`` for a node running
        none.  Memoised until the node changes."""
        usage = self.node_usage
        newest = usage.newest_starts.get(node)
        if newest is None:
            newest = max((pod.start_or_created for pod in self.pods_on(node)), default=-math.inf)
            usage.newest_starts[node] = newest
        return newest

    def requested_on(self, node: str) -> Mapping[str, int]:
        return self.node_usage.requested.get(node, {})

    def reserved_on(self, node: str) -> Mapping[str, Mapping[str, int]]:
        """Room held on ``node`` for pending pods of in-flight jobs, by pod key."""
        return self.node_usage.reserved.get(node, {})

    def nodes_with_reserved_room(self) -> Collection[str]:
        """The nodes holding room for some reserved pod (usually few or none)."""
        return self.node_usage.reserved.keys()

    def free_on(self, node: str, for_pod: str | None = None) -> Resources:
        """Allocatable minus requested minus room held for pods other than ``for_pod``."""
        return self.node_usage.free_on(node, self.nodes[node].allocatable, for_pod)

    def free_amount(self, node: str, resource: str) -> int:
        """:meth:`free_on` of one resource, read without copying the node's room."""
        return self.node_usage.free_room(node, self.nodes[node].allocatable).get(resource, 0)

    def preemptible_amounts(self, node: str, resource: str) -> tuple[tuple[int, int], ...]:
        """``(priority, amount of resource)`` of each preemptible pod bound to ``node`` that
        asks for some, sorted; memoised until the node changes."""
        known = self.node_usage.victim_amounts.get(node)
        amounts = known.get(resource) if known is not None else None
        if amounts is None:
            amounts = tuple(
                sorted(
                    (pod.priority, pod.requests[resource])
                    for pod in self.pods_on(node)
                    if pod.requests.get(resource, 0) > 0
                    and not pod.finished
                    and self.membership.charged_to(pod.key) is not None
                    and self.preemptible(pod)
                )
            )
            memoise_on_node(self.node_usage.victim_amounts, node, resource, amounts)
        return amounts

    def preemptible_on(self, node: str) -> Mapping[str, int]:
        """Requests of the preemptible pods bound to ``node``: the most eviction could free."""
        return self.node_usage.preemptible.get(node, {})
