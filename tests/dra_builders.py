"""Builders of DRA objects (``resource.k8s.io/v1``) for tests: DeviceClasses,
ResourceSlices, ResourceClaims, ResourceClaimTemplates, and pods that name claims."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.builders import pod

API = "resource.k8s.io/v1"
DRIVER = "gpu.example.com"


def device_class(
    name: str = DRIVER,
    expressions: Sequence[str] = (f'device.driver == "{DRIVER}"',),
    extended: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if extended is not None:
        spec["extendedResourceName"] = extended
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def resource_slice(
    node: str | None,
    count: int,
    driver: str = DRIVER,
    attributes: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """A slice of ``count`` devices ``gpu-0``... on ``node`` (``None``: all nodes)."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": node or "shared", "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {"name": f"gpu-{i}", "attributes": dict(attributes or {"model": {"string": "A100"}})}
            for i in range(count)
        ],
    }
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node or 'shared'}-{driver}"},
        "spec": spec,
    }


def exactly(
    count: int | None = 1, device_class_name: str = DRIVER, selectors: Sequence[str] = ()
) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": device_class_name}
    if count is None:
        request["allocationMode"] = "All"
    else:
        request["count"] = count
    if selectors:
        request["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return request


def claim_spec(*requests: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [{"name": f"r{i}", "exactly": dict(r)} for i, r in enumerate(requests)]
        }
    }


def resource_claim(
    name: str,
    namespace: str,
    *requests: Mapping[str, Any],
    allocated_on: str | None = None,
    devices: Sequence[str] = (),
) -> dict[str, Any]:
    """A claim; ``allocated_on``: allocated on that node, its devices ``devices`` for
    request ``r0``."""
    obj: dict[str, Any] = {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(*requests),
    }
    if allocated_on is not None:
        obj["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r0", "driver": DRIVER, "pool": allocated_on, "device": d}
                        for d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [allocated_on]}
                            ]
                        }
                    ]
                },
            }
        }
    return obj


def claim_template(name: str, namespace: str, *requests: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim_spec(*requests)},
    }


def dra_pod(
    name: str,
    namespace: str = "team-a",
    *,
    claim: str | None = None,
    template: str | None = None,
    made: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """A pod naming ``claim``, or a claim made from ``template`` (``made``: the claim's
    name in ``status.resourceClaimStatuses``)."""
    entry: dict[str, Any] = {"name": "gpus"}
    if claim is not None:
        entry["resourceClaimName"] = claim
    if template is not None:
        entry["resourceClaimTemplateName"] = template
    obj = pod(name, namespace, spec={"resourceClaims": [entry]}, **kwargs)
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    if made is not None:
        obj["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": made}]
    return obj
