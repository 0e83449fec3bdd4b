"""DRA devices on nodes: the part of :class:`~extender.core.dra.DraCatalog` that counts
the devices ResourceSlices publish for each node, per device resource.

A mixin.  A node's devices are those of its slices (``spec.nodeName``) that some
DeviceClass of a resource selects, each device once (:meth:`NodeDevicesMixin.node_devices`);
``allocationMode: All`` and a request's own selectors are judged against the same
devices.  A resource Muster cannot count (a class selector outside :mod:`.selectors`'
subset, a slice shared by several nodes) is *unknown* (:meth:`unknown_resources`) and
every node has :data:`UNKNOWN_CAPACITY` of it.  The counts are memoised and forgotten
when classes or slices change (:meth:`_nodes_changed`); the catalog keeps the objects
(declared below) and the devices claims hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from base.resources import MILLI, Resources
from extender.core.dra.objects import DeviceClass, ResourceSlice
from extender.core.dra.selectors import DeviceFacts, Selector, Unsupported

#: Room of a device resource whose capacity Muster cannot count: every node has this many
#: (milli-units), so the count never refuses what only kube-scheduler can judge.
UNKNOWN_CAPACITY = 1_000_000 * MILLI


class NodeDevicesMixin:
    """The devices on each node, per device resource, of :class:`DraCatalog`'s slices."""

    if TYPE_CHECKING:
        classes: dict[str, DeviceClass]
        slices: dict[str, ResourceSlice]

        def resource_of(self, device_class: str) -> str: ...

    #: Node → the names of the slices holding its devices (``spec.nodeName``).
    _node_slices: dict[str, set[str]]
    #: Memos: each node's devices per resource, the unknown resources, whether a
    #: request's selectors narrow its class, and ``allocationMode: All``'s most per node.
    _capacity: dict[str, Resources]
    _unknown: dict[str, str] | None
    _narrowing: dict[tuple[str, tuple[Selector, ...]], bool]
    _most: dict[tuple[str, tuple[Selector, ...]], int]

    def unknown_resources(self) -> Mapping[str, str]:
        """Device resources whose capacity Muster cannot count, and why."""
        if self._unknown is None:
            unknown: dict[str, str] = {}
            for device_class in self.classes.values():
                why = self._class_unknown(device_class)
                if why is not None:
                    unknown.setdefault(self.resource_of(device_class.name), why)
            for resource_slice in self.slices.values():
                if resource_slice.node_name is not None:
                    continue
                for device_class in self.classes.values():
                    resource = self.resource_of(device_class.name)
                    if resource in unknown:
                        continue
                    if any(self._selects(device_class, d.facts) for d in resource_slice.devices):
                        unknown[resource] = (
                            f"ResourceSlice {resource_slice.name} holds devices of DeviceClass "
                            f"{device_class.name} for several nodes; Muster counts devices "
                            "per node"
                        )
            self._unknown = unknown
        return self._unknown

    def node_devices(self, node: str) -> Resources:
        """The devices a node's slices hold, per device resource (each device once; an
        unknown resource at :data:`UNKNOWN_CAPACITY`)."""
        known = self._capacity.get(node)
        if known is None:
            counted: dict[str, set[tuple[str, str, str]]] = {}
            for name in self._node_slices.get(node, ()):
                resource_slice = self.slices[name]
                for device in resource_slice.devices:
                    for device_class in self.classes.values():
                        if self._class_unknown(device_class) is None and self._selects(
                            device_class, device.facts
                        ):
                            counted.setdefault(self.resource_of(device_class.name), set()).add(
                                (resource_slice.driver, resource_slice.pool, device.name)
                            )
            known = {resource: len(ids) * MILLI for resource, ids in counted.items()}
            for resource in self.unknown_resources():
                known[resource] = UNKNOWN_CAPACITY
            self._capacity[node] = known
        return known

    def forget_capacity(self) -> None:
        """Count every node's devices again when next asked."""
        self._capacity.clear()

    def _nodes_changed(self, keep_capacity: bool = False) -> None:
        if not keep_capacity:
            self._capacity.clear()
        self._unknown = None
        self._narrowing.clear()
        self._most.clear()

    def _class_unknown(self, device_class: DeviceClass) -> str | None:
        for selector in device_class.selectors:
            if isinstance(selector, Unsupported):
                return (
                    f"DeviceClass {device_class.name}'s selector {selector.expression!r} is "
                    f"not evaluated ({selector.why})"
                )
        return None

    def _selects(
        self, device_class: DeviceClass, facts: DeviceFacts, extra: tuple[Selector, ...] = ()
    ) -> bool:
        return all(
            isinstance(s, Selector) and s.matches(facts) for s in device_class.selectors
        ) and all(s.matches(facts) for s in extra)

    def _devices_of(self, device_class: DeviceClass, extra: tuple[Selector, ...], node: str) -> int:
        return sum(
            1
            for name in self._node_slices.get(node, ())
            for device in self.slices[name].devices
            if self._selects(device_class, device.facts, extra)
        )

    def _all_count(
        self, device_class: DeviceClass, extra: tuple[Selector, ...], node: str | None
    ) -> int:
        """``allocationMode: All``: the devices selected on ``node``, or while pending, on
        the node with the most of them."""
        if node is not None:
            return self._devices_of(device_class, extra, node)
        memo = (device_class.name, extra)
        if memo not in self._most:
            self._most[memo] = max(
                (self._devices_of(device_class, extra, n) for n in self._node_slices), default=0
            )
        return self._most[memo]

    def _narrows(self, device_class: DeviceClass, extra: tuple[Selector, ...]) -> bool:
        """Do a request's selectors leave out some device its class selects?"""
        memo = (device_class.name, extra)
        if memo not in self._narrowing:
            self._narrowing[memo] = any(
                self._selects(device_class, device.facts)
                and not all(s.matches(device.facts) for s in extra)
                for resource_slice in self.slices.values()
                for device in resource_slice.devices
            )
        return self._narrowing[memo]
