"""DRA devices in the state: the part of :class:`~extender.core.state.ClusterState` that
keeps DeviceClasses, ResourceSlices, ResourceClaims and templates
(:class:`~extender.core.dra.DraCatalog`) and counts their devices into pods' requests
and nodes' allocatable room.

A mixin.  A node is stored with its devices added to ``allocatable`` (less the devices
claims hold that no bound pod carries); a pod with claims is stored with their devices
in ``requests`` (:meth:`DraCatalog.resolve <extender.core.dra.DraCatalog.resolve>`), so
the ledger, node usage, the victims' order and the planner's copies count them as any
other resource.  When a DRA object changes, or a pod sharing a claim comes or goes, the
pods and nodes it changes are stored again through the ordinary paths
(``_upsert`` and ``upsert_node``): one path into the parts still.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from base.resources import add, subtract
from extender.core.dra import (
    DraCatalog,
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from extender.core.objects import NodeInfo, PodInfo


class DevicesMixin:
    """DRA's objects, and their devices counted into pods and nodes."""

    if TYPE_CHECKING:
        pods: dict[str, PodInfo]
        nodes: dict[str, NodeInfo]

        def upsert_node(self, node: NodeInfo) -> None: ...

        def _upsert(self, pod: PodInfo, now: float | None) -> None: ...

    dra: DraCatalog
    #: Each node as given (without its devices), by name.
    given_nodes: dict[str, NodeInfo]
    #: The keys of the pods that ask something of DRA (``PodInfo.devices``).
    device_pods: set[str]

    # ---- DRA's objects ----------------------------------------------------------------

    def set_dra_object(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Add or replace a DeviceClass, ResourceSlice, ResourceClaim or
        ResourceClaimTemplate (camelCase JSON; raises ``ManifestError`` naming the field)."""
        unknown = dict(self.dra.unknown_resources())
        if kind == "DeviceClass":
            self.dra.set_class(parse_device_class(obj))
            self._devices_changed(all_nodes=True)
        elif kind == "ResourceSlice":
            touched = self.dra.set_slice(parse_resource_slice(obj))
            self._devices_changed(nodes=touched, unknown=unknown)
        elif kind == "ResourceClaim":
            claim = parse_resource_claim(obj)
            self.dra.set_claim(claim)
            self._claims_changed((claim.key,))
        elif kind == "ResourceClaimTemplate":
            self.dra.set_template(parse_resource_claim_template(obj))
            self._recharge(self._dra_pods())
        else:
            raise ValueError(f"not a DRA kind: {kind!r}")

    def forget_dra_object(self, kind: str, namespace: str, name: str) -> None:
        """The object of that kind and name is gone."""
        unknown = dict(self.dra.unknown_resources())
        key = f"{namespace or 'default'}/{name}"
        if kind == "DeviceClass":
            self.dra.forget_class(name)
            self._devices_changed(all_nodes=True)
        elif kind == "ResourceSlice":
            self._devices_changed(nodes=self.dra.forget_slice(name), unknown=unknown)
        elif kind == "ResourceClaim":
            self.dra.forget_claim(key)
            self._claims_changed((key,))
        elif kind == "ResourceClaimTemplate":
            self.dra.forget_template(key)
            self._recharge(self._dra_pods())
        else:
            raise ValueError(f"not a DRA kind: {kind!r}")

    # ---- nodes and pods with their devices --------------------------------------------

    def _with_devices(self, node: NodeInfo) -> NodeInfo:
        """``node`` with its devices in ``allocatable``, less those claims hold."""
        devices = self.dra.node_devices(node.name)
        held = self.dra.held_on(node.name)
        if not devices and not held:
            return node
        allocatable = {
            name: max(0, amount)
            for name, amount in subtract(add(node.allocatable, devices), held).items()
        }
        return dataclasses.replace(node, allocatable=allocatable)

    def _resolved(self, pod: PodInfo) -> PodInfo:
        """``pod`` with its claims' devices in ``requests`` (and what is not counted in
        ``unsupported``)."""
        devices = pod.devices
        if devices is None:
            return pod
        requests, reasons = self.dra.resolve(pod.key, pod.namespace, pod.node_name, devices)
        unsupported = devices.own_unsupported + tuple(f"DRA: {reason}" for reason in reasons)
        if requests == pod.requests and unsupported == pod.unsupported:
            return pod
        return dataclasses.replace(pod, requests=requests, unsupported=unsupported)

    def _track(self, pod: PodInfo) -> set[str]:
        """Note the claims a pod names (none once it is finished); the other pods whose
        charge may change."""
        devices = None if pod.finished else pod.devices
        if pod.devices is None:
            self.device_pods.discard(pod.key)
        else:
            self.device_pods.add(pod.key)
        claims_before = self.dra.pod_claims.get(pod.key, ())
        changed = self.dra.track(pod.key, pod.namespace, pod.job, pod.node_name, devices)
        self._held_changed((*claims_before, *self.dra.pod_claims.get(pod.key, ())), pod)
        return changed

    def _untrack(self, pod: PodInfo) -> set[str]:
        self.device_pods.discard(pod.key)
        claims_before = self.dra.pod_claims.get(pod.key, ())
        changed = self.dra.untrack(pod.key)
        self._held_changed(claims_before, None)
        return changed

    def _held_changed(self, claims: Iterable[str], pod: PodInfo | None) -> None:
        if not claims:
            return

        def node_of(key: str) -> str | None:
            if pod is not None and key == pod.key:
                return None if pod.finished else pod.node_name
            known = self.pods.get(key)
            return known.node_name if known is not None and not known.finished else None

        for node in self.dra.refresh_held(set(claims), node_of):
            if node in self.given_nodes:
                self.upsert_node(self.given_nodes[node])

    def _claims_changed(self, claim_keys: Iterable[str]) -> None:
        keys = set(claim_keys)
        users = set().union(*(self.dra.users_of(key) for key in keys)) if keys else set()
        self._held_changed(keys, None)
        self._recharge(users)

    def _devices_changed(
        self,
        nodes: Iterable[str] = (),
        all_nodes: bool = False,
        unknown: Mapping[str, str] | None = None,
    ) -> None:
        if unknown is not None and dict(self.dra.unknown_resources()) != unknown:
            all_nodes = True
        if all_nodes:
            self.dra.forget_capacity()
        for name in list(self.given_nodes) if all_nodes else nodes:
            if name in self.given_nodes:
                self.upsert_node(self.given_nodes[name])
        self._recharge(self._dra_pods())

    def _dra_pods(self) -> list[str]:
        return [key for key in self.device_pods if key in self.pods]

    def _recharge(self, keys: Iterable[str]) -> None:
        """Store the pods again whose devices may count differently now."""
        for key in sorted(keys):
            pod = self.pods.get(key)
            if pod is None:
                continue
            resolved = self._resolved(pod)
            if resolved is not pod:
                self._upsert(resolved, None)
