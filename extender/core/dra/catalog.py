"""DRA devices as quota and node room: :class:`DraCatalog`.

Muster's quotas and node copies count resources; DRA's devices are counted into them
under one resource name per DeviceClass (its *device resource*):

- the name ``deviceClassResources`` maps the class to (as Kueue's
  ``deviceClassMappings``), else the class's ``extendedResourceName``, else the
  implicit ``deviceclass.resource.kubernetes.io/<class>`` (KEP-5004);
- **a pod's requests** (:meth:`DraCatalog.resolve`) gain the devices of its claims (its
  own ResourceClaims, and those made from ResourceClaimTemplates): an allocated
  claim's devices as allocated, else each ``exactly`` request's ``count``, and for
  ``allocationMode: All`` the devices the class (and the request's selectors) select
  on the pod's node, or on the node with the most of them while the pod is pending.
  A container request of an extended resource a DeviceClass backs is charged as that
  class's device resource, and the claim kube-scheduler makes for it is not charged
  again;
- **a claim several pods use** is charged once: to the first of them (by key) when all
  are pods of one job, which therefore carries it as a victim; a claim pods of several
  jobs share is charged to none, and while it is allocated its devices stay taken on
  its node (no victim frees them: some other job still uses them);
- **a node's room** (:meth:`DraCatalog.node_devices`, counted by its mixin
  :class:`~.nodedevices.NodeDevicesMixin`) gains, per device resource, the devices of
  its ResourceSlices (``spec.nodeName``) that some class of that resource selects, each
  device once, less the allocated devices no bound pod carries (:meth:`DraCatalog.held_on`:
  a claim allocated before its pod binds, or shared between jobs).

So the planner's copies free a victim's devices exactly when its requests go, and a
job fits only where its devices are free; it is a *count*: a device two classes of
different resources select counts in both, and a request's own selectors are checked
only to say that they narrow nothing.  What Muster cannot count (a selector outside
:mod:`.selectors`' subset, a ``firstAvailable`` list not allocated yet, devices of a
slice shared by several nodes, a class or claim not seen) is *unknown*: the pod says so
in ``PodInfo.unsupported``, and Muster neither preempts for it nor guesses; a device
resource whose capacity is unknown is given every node in abundance
(:data:`~.nodedevices.UNKNOWN_CAPACITY`), so Muster's filter leaves the decision to kube-scheduler's
DynamicResources plugin.  Pure data; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from base.resources import MILLI, Resources, add_into, nonzero
from extender.core.dra.nodedevices import NodeDevicesMixin
from extender.core.dra.objects import (
    IMPLICIT_EXTENDED_PREFIX,
    DeviceClass,
    DeviceRequest,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from extender.core.dra.podclaims import PodDevices
from extender.core.dra.selectors import Selector, Unsupported


@dataclass(frozen=True, slots=True)
class _User:
    """A live pod that names a claim: its job and its node."""

    job: str
    node: str | None


class DraCatalog(NodeDevicesMixin):
    """The DRA objects seen, the live pods naming each claim, and what they make of pods'
    requests and nodes' room (the devices on nodes: :class:`NodeDevicesMixin`)."""

    def __init__(self, class_resources: Mapping[str, str] | None = None) -> None:
        self.class_resources = dict(class_resources or {})
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        #: Claim key → the live pods naming it, by pod key.
        self.users: dict[str, dict[str, _User]] = {}
        #: Pod key → the claim keys it names (in :attr:`users`).
        self.pod_claims: dict[str, tuple[str, ...]] = {}
        # NodeDevicesMixin's: the slices per node, and its memos of devices on nodes.
        self._node_slices = {}
        self._capacity = {}
        self._unknown = None
        self._narrowing = {}
        self._most = {}
        #: Claim key → (node, devices) it holds beyond bound pods' requests; per node.
        self._held: dict[str, tuple[str, Resources]] = {}
        self._held_on: dict[str, Resources] = {}

    # ---- names -----------------------------------------------------------------------

    def resource_of(self, device_class: str) -> str:
        """The device resource of a DeviceClass (mapped, else its extended resource, else
        the implicit ``deviceclass.resource.kubernetes.io/<class>``)."""
        mapped = self.class_resources.get(device_class)
        if mapped:
            return mapped
        known = self.classes.get(device_class)
        if known is not None and known.extended_resource_name:
            return known.extended_resource_name
        return IMPLICIT_EXTENDED_PREFIX + device_class

    def backing_class(self, resource: str) -> str | None:
        """The DeviceClass backing an extended resource a container requests, if any."""
        if resource.startswith(IMPLICIT_EXTENDED_PREFIX):
            return resource[len(IMPLICIT_EXTENDED_PREFIX) :]
        backing = sorted(
            name for name, c in self.classes.items() if c.extended_resource_name == resource
        )
        return backing[0] if backing else None

    # ---- the objects -----------------------------------------------------------------

    def set_class(self, device_class: DeviceClass) -> None:
        self.classes[device_class.name] = device_class
        self._nodes_changed()

    def forget_class(self, name: str) -> None:
        self.classes.pop(name, None)
        self._nodes_changed()

    def set_slice(self, resource_slice: ResourceSlice) -> set[str]:
        """Record a slice; the nodes whose room may change."""
        touched = self.forget_slice(resource_slice.name)
        self.slices[resource_slice.name] = resource_slice
        if resource_slice.node_name is not None:
            self._node_slices.setdefault(resource_slice.node_name, set()).add(resource_slice.name)
            touched.add(resource_slice.node_name)
        self._nodes_changed(keep_capacity=True)
        for node in touched:
            self._capacity.pop(node, None)
        return touched

    def forget_slice(self, name: str) -> set[str]:
        old = self.slices.pop(name, None)
        if old is None or old.node_name is None:
            if old is not None:
                self._nodes_changed(keep_capacity=True)
            return set()
        self._node_slices.get(old.node_name, set()).discard(name)
        self._capacity.pop(old.node_name, None)
        self._nodes_changed(keep_capacity=True)
        return {old.node_name}

    def set_claim(self, claim: ResourceClaim) -> None:
        self.claims[claim.key] = claim

    def forget_claim(self, key: str) -> None:
        self.claims.pop(key, None)

    def set_template(self, template: ResourceClaimTemplate) -> None:
        self.templates[template.key] = template

    def forget_template(self, key: str) -> None:
        self.templates.pop(key, None)

    # ---- pods naming claims ----------------------------------------------------------

    def claim_keys(self, namespace: str, devices: PodDevices, pod_key: str) -> tuple[str, ...]:
        """The claims a pod names: each made or named claim's key, ``pod:<key>/<entry>``
        for one its template has not made yet, and kube-scheduler's extended claim."""
        keys = [
            f"{namespace}/{claim.claim}" if claim.claim else f"pod:{pod_key}/{claim.name}"
            for claim in devices.claims
        ]
        if devices.extended_claim:
            keys.append(f"{namespace}/{devices.extended_claim}")
        return tuple(keys)

    def track(
        self, key: str, namespace: str, job: str, node: str | None, devices: PodDevices | None
    ) -> set[str]:
        """A live pod (``devices``: ``None`` for a pod naming no claim) and the claims it
        names; returns the keys of the other pods whose charge may change (a shared
        claim's bearer)."""
        changed = self.untrack(key)
        if devices is None:
            return changed
        claims = self.claim_keys(namespace, devices, key)
        if not claims:
            return changed
        self.pod_claims[key] = claims
        for claim in claims:
            users = self.users.setdefault(claim, {})
            changed |= users.keys()
            users[key] = _User(job, node)
        changed.discard(key)
        return changed

    def untrack(self, key: str) -> set[str]:
        """The pod is gone or finished; the other pods whose charge may change."""
        changed: set[str] = set()
        for claim in self.pod_claims.pop(key, ()):
            users = self.users.get(claim, {})
            users.pop(key, None)
            changed |= users.keys()
            if not users:
                self.users.pop(claim, None)
        return changed

    def users_of(self, claim_key: str) -> set[str]:
        return set(self.users.get(claim_key, {}))

    def bearer(self, claim_key: str) -> str | None:
        """The pod a claim is charged to: the first of its users by key when all are of
        one job, else none."""
        users = self.users.get(claim_key)
        if not users:
            return None
        if len({user.job for user in users.values()}) > 1:
            return None
        return min(users)

    # ---- a pod's requests ------------------------------------------------------------

    def resolve(
        self, key: str, namespace: str, node: str | None, devices: PodDevices
    ) -> tuple[Resources, tuple[str, ...]]:
        """A pod's requests with its devices, and what Muster cannot count of them."""
        requests: Resources = {}
        reasons: list[str] = []
        for name, amount in devices.own_requests.items():
            backing = self.backing_class(name)
            add_into(requests, {self.resource_of(backing) if backing else name: amount})
        claim_keys = self.claim_keys(namespace, devices, key)
        for entry, claim_key in zip(devices.claims, claim_keys, strict=False):
            if entry.claim is None:  # not made from its template yet
                template = self.templates.get(f"{namespace}/{entry.template}")
                if template is None:
                    reasons.append(f"ResourceClaimTemplate {namespace}/{entry.template} not seen")
                    continue
                self._charge_requests(template.requests, node, requests, reasons)
                continue
            if self.bearer(claim_key) not in (None, key):
                continue  # charged to the pod of its job that carries it
            if self.bearer(claim_key) is None and len(self.users.get(claim_key, {})) > 1:
                continue  # shared between jobs: charged to none, held on its node
            claim = self.claims.get(claim_key)
            if claim is None:
                reasons.append(f"ResourceClaim {claim_key} not seen")
                continue
            if claim.allocation is not None:
                add_into(requests, self._allocated(claim))
            else:
                self._charge_requests(claim.requests, node, requests, reasons)
        for resource in sorted(requests):
            why = self.unknown_resources().get(resource)
            if why is not None:
                reasons.append(f"{resource}: {why}")
        return nonzero(requests), tuple(dict.fromkeys(reasons))

    def _allocated(self, claim: ResourceClaim) -> Resources:
        requests = {request.name: request for request in claim.requests}
        charged: Resources = {}
        for result in claim.allocation or ():
            request = requests.get(result.request.partition("/")[0])
            if request is None or request.admin_access:
                continue
            add_into(charged, {self.resource_of(request.class_of(result.request)): MILLI})
        return charged

    def _charge_requests(
        self,
        requests: Iterable[DeviceRequest],
        node: str | None,
        charged: Resources,
        reasons: list[str],
    ) -> None:
        for request in requests:
            if request.admin_access:
                continue  # admin access does not take the device from others
            where = f"device request {request.name!r}"
            if request.first_available:
                reasons.append(
                    f"{where}: firstAvailable is counted as its first choice until allocated"
                )
            device_class = self.classes.get(request.device_class)
            if device_class is None:
                reasons.append(f"{where}: DeviceClass {request.device_class} not seen")
            unsupported = [s for s in request.selectors if isinstance(s, Unsupported)]
            if unsupported:
                reasons.append(
                    f"{where}: selector {unsupported[0].expression!r} not evaluated "
                    f"({unsupported[0].why})"
                )
            selectors = tuple(s for s in request.selectors if isinstance(s, Selector))
            if device_class is not None and selectors and self._narrows(device_class, selectors):
                reasons.append(
                    f"{where}: its selectors pick among DeviceClass {device_class.name}'s "
                    "devices, and Muster counts devices per class"
                )
            count = request.count
            if count is None:
                if device_class is None or self._class_unknown(device_class) is not None:
                    reasons.append(f"{where}: allocationMode All over devices Muster cannot count")
                    continue
                count = self._all_count(device_class, selectors, node)
            add_into(charged, {self.resource_of(request.device_class): count * MILLI})

    # ---- devices claims hold on nodes ----------------------------------------------

    def refresh_held(
        self, claim_keys: Iterable[str], node_of: Callable[[str], str | None]
    ) -> set[str]:
        """Recompute what the claims named hold on their nodes beyond the bound pods'
        requests (``node_of``: a pod's node, ``None`` while pending); the nodes whose
        held devices changed.  A claim holds its allocated devices unless its bearer is
        bound (it carries them in its requests): allocated before its pod binds, or
        shared between jobs.  A claim no live pod names holds nothing: the resourceclaim
        controller deallocates a claim once no pod uses it (and deletes one made for a
        pod with it)."""
        changed: set[str] = set()
        for key in claim_keys:
            old = self._held.pop(key, None)
            if old is not None:
                add_into(self._held_on[old[0]], old[1], -1)
                changed.add(old[0])
            claim = self.claims.get(key)
            if claim is None or not claim.allocation or not self.users.get(key):
                continue
            bearer = self.bearer(key)
            if bearer is not None and node_of(bearer) is not None:
                continue
            node = self._any_node(claim)
            devices = self._allocated(claim)
            if node is None or not devices:
                continue
            self._held[key] = (node, devices)
            add_into(self._held_on.setdefault(node, {}), devices)
            changed.add(node)
        return changed

    def held_on(self, node: str) -> Resources:
        """The allocated devices on ``node`` no bound pod's requests carry."""
        return nonzero(self._held_on.get(node, {}))

    def _any_node(self, claim: ResourceClaim) -> str | None:
        if claim.allocated_node is not None:
            return claim.allocated_node
        for result in claim.allocation or ():
            for resource_slice in self.slices.values():
                if (
                    resource_slice.driver == result.driver
                    and resource_slice.pool == result.pool
                    and resource_slice.node_name is not None
                    and any(d.name == result.device for d in resource_slice.devices)
                ):
                    return resource_slice.node_name
        return None
