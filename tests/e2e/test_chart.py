"""Every object the Helm chart renders, with each values file, is accepted by a real
kube-apiserver: server-side apply with ``dryRun=All`` (validation, defaulting, admission, CRD
schemas; nothing stored). prometheus-operator's ServiceMonitor and PrometheusRule CRDs come
from its Go module at a pinned version, so those objects are checked against their real
schemas too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import localcluster as lc
import pytest
import yaml
from render_manifests import CHART, NAMESPACE, helm, render_chart

PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
MONITORING_CRDS = ("servicemonitors", "prometheusrules")
VALUE_SETS = [pytest.param((), id="defaults")] + [
    pytest.param((path,), id=path.stem) for path in sorted((CHART / "ci").glob("*-values.yaml"))
]


@pytest.fixture(scope="module")
def helm_binary() -> str:
    return helm()


@pytest.fixture(scope="module")
def api(control_plane: lc.ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> lc.RestClient:
    """The control plane with the chart's namespace and prometheus-operator's CRDs."""
    done = subprocess.run(
        ["go", "mod", "download", "-json", PROMETHEUS_OPERATOR],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path_factory.getbasetemp(),
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"},
    )
    module = Path(json.loads(done.stdout)["Dir"])
    crds = tmp_path_factory.mktemp("monitoring-crds")
    for plural in MONITORING_CRDS:
        name = f"monitoring.coreos.com_{plural}.yaml"
        shutil.copy(module / "example" / "prometheus-operator-crd" / name, crds / name)
    control_plane.install_crds(crds)
    try:
        control_plane.rest.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    except lc.ApiError as error:
        if error.status != 409:
            raise
    return control_plane.rest


def resources(api: lc.RestClient) -> dict[tuple[str, str], tuple[str, bool]]:
    """(apiVersion, kind) -> (plural, namespaced), from the API server's discovery."""
    found: dict[tuple[str, str], tuple[str, bool]] = {}
    versions = ["v1"] + [
        version["groupVersion"]
        for group in api.request("GET", "/apis")["groups"]
        for version in group["versions"]
    ]
    for group_version in versions:
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        for resource in api.request("GET", path)["resources"]:
            if "/" not in resource["name"]:
                key = (group_version, resource["kind"])
                found[key] = (resource["name"], resource["namespaced"])
    return found


def dry_run_apply(
    api: lc.RestClient, known: dict[tuple[str, str], tuple[str, bool]], obj: dict[str, Any]
) -> dict[str, Any]:
    """Server-side apply ``obj`` with ``dryRun=All``; the API server's answer."""
    plural, namespaced = known[obj["apiVersion"], obj["kind"]]
    prefix = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    where = f"/namespaces/{obj['metadata']['namespace']}" if namespaced else ""
    path = f"{prefix}{where}/{plural}/{quote(obj['metadata']['name'])}"
    return api.request(
        "PATCH",
        path,
        obj,
        query={"dryRun": "All", "fieldManager": "helm", "force": True},
        content_type="application/apply-patch+yaml",
    )


@pytest.mark.parametrize("values", VALUE_SETS)
def test_every_rendered_object_passes_a_server_side_dry_run(
    api: lc.RestClient, helm_binary: str, values: tuple[Path, ...]
) -> None:
    known = resources(api)
    rendered = [yaml.safe_load(text) for text in render_chart(helm_binary, *values)]
    assert rendered
    for obj in rendered:
        assert (obj["apiVersion"], obj["kind"]) in known, f"{obj['kind']}: not served"
        answer = dry_run_apply(api, known, obj)
        assert (answer["kind"], answer["metadata"]["name"]) == (
            obj["kind"],
            obj["metadata"]["name"],
        )


def test_the_dry_run_checks_schemas(api: lc.RestClient, helm_binary: str) -> None:
    """The control: a ServiceMonitor whose interval is not a duration is refused by the
    CRD's schema, so the dry runs above would catch a bad rendering."""
    known = resources(api)
    rendered = [
        yaml.safe_load(text)
        for text in render_chart(helm_binary, CHART / "ci" / "monitoring-values.yaml")
    ]
    monitor = next(obj for obj in rendered if obj["kind"] == "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "fifteen seconds"
    with pytest.raises(lc.ApiError) as refused:
        dry_run_apply(api, known, monitor)
    assert refused.value.status == 422 and "interval" in refused.value.body
