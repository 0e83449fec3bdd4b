"""A pod's DRA asks: its ``spec.resourceClaims`` as :class:`PodDevices`.

Each entry names a ResourceClaim or the ResourceClaimTemplate one is made from (and,
once made, the claim ``status.resourceClaimStatuses`` names); kube-scheduler's claim for
an extended resource DRA backs is read from ``status.extendedResourceClaimStatus``.
:func:`parse_pod_devices` is called by the pod parser (:mod:`extender.core.objects`);
:class:`~extender.core.dra.DraCatalog` resolves the claims into devices.  The cluster's
own DRA objects are :mod:`.objects`'.  Malformed input raises
:class:`~base.errors.ManifestError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from base.errors import ManifestError
from base.fields import mapping, mappings, string


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims``: the claim it names, or the
    template it is made from and (once made) the claim ``status.resourceClaimStatuses``
    names."""

    name: str
    claim: str | None
    template: str | None


@dataclass(frozen=True, slots=True)
class PodDevices:
    """What a pod asks of DRA, as parsed, and its requests before DRA is resolved."""

    #: The pod's requests by the pod-request rules (containers, overhead, ``pods``).
    own_requests: Mapping[str, int]
    #: The constraints it uses that the core cannot simulate, DRA's aside.
    own_unsupported: tuple[str, ...]
    claims: tuple[PodClaim, ...]
    #: ``status.extendedResourceClaimStatus.resourceClaimName``: the claim kube-scheduler
    #: made for an extended resource backed by DRA (charged through the container request).
    extended_claim: str | None


def parse_pod_devices(
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    own_requests: Mapping[str, int],
    own_unsupported: tuple[str, ...] = (),
) -> PodDevices | None:
    """A pod's DRA asks (``None``: none, and no extended resource DRA could back)."""
    entries = mappings(spec.get("resourceClaims"), "spec.resourceClaims")
    made: dict[str, str] = {}
    for index, entry in enumerate(
        mappings(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses")
    ):
        where = f"status.resourceClaimStatuses[{index}]"
        claim = string(entry.get("resourceClaimName"), f"{where}.resourceClaimName")
        if claim:
            made[string(entry.get("name"), f"{where}.name")] = claim
    claims = []
    for index, entry in enumerate(entries):
        where = f"spec.resourceClaims[{index}]"
        name = string(entry.get("name"), f"{where}.name")
        if not name:
            raise ManifestError(f"{where}.name", "required")
        named = string(entry.get("resourceClaimName"), f"{where}.resourceClaimName") or None
        template = (
            string(entry.get("resourceClaimTemplateName"), f"{where}.resourceClaimTemplateName")
            or None
        )
        if (named is None) == (template is None):
            raise ManifestError(
                where, "exactly one of resourceClaimName and resourceClaimTemplateName is required"
            )
        claims.append(PodClaim(name, named or made.get(name), template))
    extended_status = mapping(
        status.get("extendedResourceClaimStatus"), "status.extendedResourceClaimStatus"
    )
    extended = (
        string(
            extended_status.get("resourceClaimName"),
            "status.extendedResourceClaimStatus.resourceClaimName",
        )
        or None
    )
    if not claims and extended is None and not any("/" in name for name in own_requests):
        return None
    return PodDevices(own_requests, own_unsupported, tuple(claims), extended)
