"""DRA's objects (``resource.k8s.io/v1``) as the core reads them.

DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates are parsed
into small immutable records holding what quota and node fit read
(:class:`~extender.core.dra.DraCatalog` keeps them); a pod's own claims are
:mod:`.podclaims`'.  Malformed input raises :class:`~base.errors.ManifestError` naming
the field, never anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from base.errors import ManifestError, QuantityError
from base.fields import mapping, mappings, object_name, string
from base.resources import parse_quantity
from extender.core.dra.selectors import (
    AttributeValue,
    DeviceFacts,
    Selector,
    Unsupported,
    parse_selector,
)

#: The API group and version read.
DRA_API_VERSION = "resource.k8s.io/v1"
#: The extended resource every DeviceClass answers to (KEP-5004), followed by its name.
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
#: The kinds read, in the order they refer to each other.
DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim")
#: Each kind's collection under ``/apis/resource.k8s.io/v1``.
DRA_PLURALS = {
    "DeviceClass": "deviceclasses",
    "ResourceSlice": "resourceslices",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ResourceClaim": "resourceclaims",
}


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[Selector | Unsupported, ...]
    #: ``spec.extendedResourceName``: the extended resource this class backs, if any.
    extended_resource_name: str | None


@dataclass(frozen=True, slots=True)
class Device:
    """One device a ResourceSlice publishes; ``facts`` is what selectors read."""

    name: str
    facts: DeviceFacts


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    #: ``spec.nodeName``: the one node whose devices these are; ``None`` for a slice
    #: of devices reachable from several nodes (``allNodes``, ``nodeSelector``,
    #: ``perDeviceNodeSelection``).
    node_name: str | None
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One request of a claim: ``exactly`` (or ``firstAvailable``'s first choice, with
    ``first_available`` set: Muster does not know which alternative the scheduler takes).
    ``count`` is ``None`` for ``allocationMode: All``."""

    name: str
    device_class: str
    count: int | None
    selectors: tuple[Selector | Unsupported, ...]
    admin_access: bool
    first_available: bool
    #: For ``firstAvailable``: each subrequest's name and DeviceClass (an allocation's
    #: result names ``request/subrequest``).
    alternatives: tuple[tuple[str, str], ...] = ()

    def class_of(self, result_request: str) -> str:
        """The DeviceClass of an allocation result naming ``result_request``."""
        _, _, sub = result_request.partition("/")
        return dict(self.alternatives).get(sub, self.device_class) if sub else self.device_class


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str  # the request's name (``request/subrequest`` for a firstAvailable choice)
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    requests: tuple[DeviceRequest, ...]
    #: ``status.allocation.devices.results``; ``None``: not allocated.
    allocation: tuple[AllocatedDevice, ...] | None
    #: The node ``status.allocation.nodeSelector`` names (one ``metadata.name`` field), if any.
    allocated_node: str | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    namespace: str
    name: str
    requests: tuple[DeviceRequest, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    """A DeviceClass → :class:`DeviceClass`."""
    metadata = mapping(obj.get("metadata"), "metadata")
    spec = mapping(obj.get("spec"), "spec")
    extended = string(spec.get("extendedResourceName"), "spec.extendedResourceName") or None
    return DeviceClass(
        name=object_name(metadata),
        selectors=_selectors(spec.get("selectors"), "spec.selectors"),
        extended_resource_name=extended,
    )


def parse_resource_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    """A ResourceSlice → :class:`ResourceSlice`."""
    metadata = mapping(obj.get("metadata"), "metadata")
    spec = mapping(obj.get("spec"), "spec")
    driver = string(spec.get("driver"), "spec.driver")
    if not driver:
        raise ManifestError("spec.driver", "required")
    pool = string(mapping(spec.get("pool"), "spec.pool").get("name"), "spec.pool.name")
    if not pool:
        raise ManifestError("spec.pool.name", "required")
    node = string(spec.get("nodeName"), "spec.nodeName") or None
    devices = tuple(
        _device(device, driver, f"spec.devices[{index}]")
        for index, device in enumerate(mappings(spec.get("devices"), "spec.devices"))
    )
    return ResourceSlice(object_name(metadata), driver, pool, node, devices)


def parse_resource_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    """A ResourceClaim → :class:`ResourceClaim`."""
    metadata = mapping(obj.get("metadata"), "metadata")
    status = mapping(obj.get("status"), "status")
    allocation_obj = status.get("allocation")
    allocation = None
    node = None
    if allocation_obj is not None:
        allocation_map = mapping(allocation_obj, "status.allocation")
        devices = mapping(allocation_map.get("devices"), "status.allocation.devices")
        results = mappings(devices.get("results"), "status.allocation.devices.results")
        allocation = tuple(
            _allocated(result, f"status.allocation.devices.results[{index}]")
            for index, result in enumerate(results)
        )
        node = _selected_node(allocation_map.get("nodeSelector"), "status.allocation.nodeSelector")
    return ResourceClaim(
        namespace=_namespace(metadata),
        name=object_name(metadata),
        requests=_requests(mapping(obj.get("spec"), "spec"), "spec"),
        allocation=allocation,
        allocated_node=node,
    )


def parse_resource_claim_template(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    """A ResourceClaimTemplate → :class:`ResourceClaimTemplate`."""
    metadata = mapping(obj.get("metadata"), "metadata")
    spec = mapping(obj.get("spec"), "spec")
    return ResourceClaimTemplate(
        namespace=_namespace(metadata),
        name=object_name(metadata),
        requests=_requests(mapping(spec.get("spec"), "spec.spec"), "spec.spec"),
    )


def _namespace(metadata: Mapping[str, Any]) -> str:
    return string(metadata.get("namespace") or "default", "metadata.namespace")


def _selectors(value: object, field: str) -> tuple[Selector | Unsupported, ...]:
    selectors = []
    for index, selector in enumerate(mappings(value, field)):
        cel = mapping(selector.get("cel"), f"{field}[{index}].cel")
        expression = string(cel.get("expression"), f"{field}[{index}].cel.expression")
        if not expression:
            raise ManifestError(f"{field}[{index}].cel.expression", "required")
        selectors.append(parse_selector(expression))
    return tuple(selectors)


def _requests(spec: Mapping[str, Any], field: str) -> tuple[DeviceRequest, ...]:
    devices = mapping(spec.get("devices"), f"{field}.devices")
    requests = []
    for index, request in enumerate(mappings(devices.get("requests"), f"{field}.devices.requests")):
        where = f"{field}.devices.requests[{index}]"
        name = string(request.get("name"), f"{where}.name")
        if not name:
            raise ManifestError(f"{where}.name", "required")
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if (exactly is None) == (first is None):
            raise ManifestError(where, "exactly one of exactly and firstAvailable is required")
        if exactly is not None:
            requests.append(
                _request(name, mapping(exactly, f"{where}.exactly"), f"{where}.exactly")
            )
            continue
        choices = mappings(first, f"{where}.firstAvailable")
        if not choices:
            raise ManifestError(f"{where}.firstAvailable", "expected at least one subrequest")
        alternatives = []
        for sub_index, choice in enumerate(choices):
            sub = _request(name, choice, f"{where}.firstAvailable[{sub_index}]")
            alternatives.append(
                (
                    string(choice.get("name"), f"{where}.firstAvailable[{sub_index}].name"),
                    sub.device_class,
                )
            )
        chosen = _request(name, choices[0], f"{where}.firstAvailable[0]")
        requests.append(
            DeviceRequest(
                chosen.name,
                chosen.device_class,
                chosen.count,
                chosen.selectors,
                chosen.admin_access,
                first_available=True,
                alternatives=tuple(alternatives),
            )
        )
    return tuple(requests)


def _request(name: str, exactly: Mapping[str, Any], where: str) -> DeviceRequest:
    device_class = string(exactly.get("deviceClassName"), f"{where}.deviceClassName")
    if not device_class:
        raise ManifestError(f"{where}.deviceClassName", "required")
    mode = exactly.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise ManifestError(f"{where}.allocationMode", f"unknown mode {mode!r}")
    count: int | None = None
    if mode == "ExactCount":
        raw = exactly.get("count", 1)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise ManifestError(f"{where}.count", f"expected a positive integer, got {raw!r}")
        count = raw
    admin = exactly.get("adminAccess") or False
    if not isinstance(admin, bool):
        raise ManifestError(f"{where}.adminAccess", f"expected a bool, got {admin!r}")
    return DeviceRequest(
        name=name,
        device_class=device_class,
        count=count,
        selectors=_selectors(exactly.get("selectors"), f"{where}.selectors"),
        admin_access=admin,
        first_available=False,
    )


def _device(device: Mapping[str, Any], driver: str, where: str) -> Device:
    name = string(device.get("name"), f"{where}.name")
    if not name:
        raise ManifestError(f"{where}.name", "required")
    attributes: dict[str, AttributeValue] = {}
    for key, value in mapping(device.get("attributes"), f"{where}.attributes").items():
        attributes[_qualified(key, driver, f"{where}.attributes")] = _attribute(
            value, f"{where}.attributes.{key}"
        )
    capacity: dict[str, int] = {}
    for key, value in mapping(device.get("capacity"), f"{where}.capacity").items():
        field = f"{where}.capacity.{key}"
        try:
            capacity[_qualified(key, driver, f"{where}.capacity")] = parse_quantity(
                mapping(value, field).get("value")
            )
        except QuantityError as error:
            raise ManifestError(f"{field}.value", error.message) from None
    return Device(name, DeviceFacts(driver, attributes, capacity))


def _qualified(key: object, driver: str, field: str) -> str:
    if not isinstance(key, str) or not key:
        raise ManifestError(field, f"name {key!r} is not a string")
    return key if "/" in key else f"{driver}/{key}"


def _attribute(value: object, field: str) -> AttributeValue:
    kinds = mapping(value, field)
    for kind in ("int", "bool", "string", "version"):
        if kind in kinds:
            item = kinds[kind]
            if kind == "int" and (isinstance(item, bool) or not isinstance(item, int)):
                raise ManifestError(f"{field}.int", f"expected an integer, got {item!r}")
            if kind == "bool" and not isinstance(item, bool):
                raise ManifestError(f"{field}.bool", f"expected a bool, got {item!r}")
            if kind in ("string", "version") and not isinstance(item, str):
                raise ManifestError(f"{field}.{kind}", f"expected a string, got {item!r}")
            result: AttributeValue = item
            return result
    raise ManifestError(field, "expected one of int, bool, string, version")


def _allocated(result: Mapping[str, Any], where: str) -> AllocatedDevice:
    values = {}
    for name in ("request", "driver", "pool", "device"):
        values[name] = string(result.get(name), f"{where}.{name}")
        if not values[name]:
            raise ManifestError(f"{where}.{name}", "required")
    return AllocatedDevice(**values)


def _selected_node(value: object, field: str) -> str | None:
    """The node a ``nodeSelector`` names by ``metadata.name`` (one term, one value)."""
    selector = mapping(value, field)
    terms = mappings(selector.get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms")
    if len(terms) != 1:
        return None
    for index, requirement in enumerate(
        mappings(terms[0].get("matchFields"), f"{field}.nodeSelectorTerms[0].matchFields")
    ):
        values = requirement.get("values")
        if (
            requirement.get("key") == "metadata.name"
            and requirement.get("operator") == "In"
            and isinstance(values, list)
            and len(values) == 1
            and isinstance(values[0], str)
        ):
            return values[0]
        if not isinstance(values, list | None):
            raise ManifestError(
                f"{field}.nodeSelectorTerms[0].matchFields[{index}].values", "expected a list"
            )
    return None
