"""Dynamic Resource Allocation (``resource.k8s.io/v1``) in the pure core.

``objects`` parses DeviceClasses, ResourceSlices, ResourceClaims and
ResourceClaimTemplates; ``podclaims`` a pod's claims (:class:`PodDevices`);
``selectors`` evaluates the subset of CEL device selectors Muster reads; ``catalog``
(:class:`DraCatalog`) turns claims into devices charged to a pod's requests, and
``nodedevices`` (its mixin) slices into devices on nodes.  No I/O; the state feeds it
(:mod:`extender.core.state.devices`).
"""

from extender.core.dra.catalog import DraCatalog
from extender.core.dra.nodedevices import UNKNOWN_CAPACITY
from extender.core.dra.objects import (
    DRA_API_VERSION,
    DRA_KINDS,
    DRA_PLURALS,
    IMPLICIT_EXTENDED_PREFIX,
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from extender.core.dra.podclaims import PodDevices, parse_pod_devices
from extender.core.dra.selectors import Selector, Unsupported, parse_selector

__all__ = [
    "DRA_API_VERSION",
    "DRA_KINDS",
    "DRA_PLURALS",
    "IMPLICIT_EXTENDED_PREFIX",
    "UNKNOWN_CAPACITY",
    "DeviceClass",
    "DraCatalog",
    "PodDevices",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "Selector",
    "Unsupported",
    "parse_device_class",
    "parse_pod_devices",
    "parse_resource_claim",
    "parse_resource_claim_template",
    "parse_resource_slice",
    "parse_selector",
]
