"""Every object the Helm chart renders, with each values file, is accepted by a real
kube-apiserver: server-side apply with ``dryRun=All`` (validation, defaulting, admission, CRD
schemas; nothing stored). prometheus-operator's ServiceMonitor and PrometheusRule CRDs and
cert-manager's Certificate and Issuer CRDs come from their Go modules at pinned versions, so
those objects are checked against their real schemas too.

Against the same API server (what ``helm template`` alone cannot show): the chart finds
cert-manager's API there (``tls.certManager.enabled: auto``); ``helm upgrade`` keeps the
certificates and the records key it made (``lookup``, rendered with ``--dry-run=server`` as
``helm install`` and ``helm upgrade`` render); and a kube-scheduler run on the chart's
scheduler configuration reaches Muster, run on the chart's certificate, over mTLS."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml
from cryptography import x509
from e2e_support import Cluster

import localcluster as lc
from hack.render_manifests import CHART, NAMESPACE, ROOT, helm, render_chart

PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
MONITORING_CRDS = ("servicemonitors", "prometheusrules")
CERT_MANAGER = "github.com/cert-manager/cert-manager@v1.21.2"
CERT_MANAGER_CRDS = ("certificates", "issuers")
VALUE_SETS = [pytest.param((), id="defaults")] + [
    pytest.param((path,), id=path.stem) for path in sorted((CHART / "ci").glob("*-values.yaml"))
]


@pytest.fixture(scope="module")
def helm_binary() -> str:
    return helm()


def go_module(module: str, workdir: Path) -> Path:
    """Where ``go mod download`` put ``module`` (path@version)."""
    done = subprocess.run(
        ["go", "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        check=True,
        cwd=workdir,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"},
    )
    return Path(json.loads(done.stdout)["Dir"])


@pytest.fixture(scope="module")
def api(control_plane: lc.ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> lc.RestClient:
    """The control plane with the chart's namespace, prometheus-operator's and
    cert-manager's CRDs."""
    crds = tmp_path_factory.mktemp("chart-crds")
    module = go_module(PROMETHEUS_OPERATOR, tmp_path_factory.getbasetemp())
    for plural in MONITORING_CRDS:
        name = f"monitoring.coreos.com_{plural}.yaml"
        shutil.copy(module / "example" / "prometheus-operator-crd" / name, crds / name)
    module = go_module(CERT_MANAGER, tmp_path_factory.getbasetemp())
    for plural in CERT_MANAGER_CRDS:
        name = f"cert-manager.io_{plural}.yaml"
        shutil.copy(module / "deploy" / "crds" / name, crds / name)
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


def render_against(
    helm_binary: str, plane: lc.ControlPlane, release: str, namespace: str, *options: str
) -> dict[tuple[str, str], dict[str, Any]]:
    """The chart rendered as ``helm install`` and ``helm upgrade`` render it: ``lookup``
    reads the API server, whose API versions are the capabilities (nothing is applied).
    Without the CRDs, which the control plane has already, from no Helm release (helm
    refuses to render objects another owner has)."""
    done = subprocess.run(
        [
            *(helm_binary, "template", release, str(CHART), "--namespace", namespace),
            *("--dry-run=server", "--kubeconfig", str(plane.kubeconfig)),
            *("--set", "crds.install=false", *options),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {
        (obj["kind"], obj["metadata"]["name"]): obj
        for obj in yaml.safe_load_all(done.stdout)
        if obj
    }


def test_the_chart_asks_cert_manager_where_its_api_is_served(
    api: lc.RestClient, control_plane: lc.ControlPlane, helm_binary: str
) -> None:
    """``tls.certManager.enabled: auto`` (the default) on a server that serves
    cert-manager.io/v1: Issuers and Certificates, no certificate made by the chart."""
    release, namespace = "capabilities", "chart-capabilities"
    served = render_against(helm_binary, control_plane, release, namespace)
    assert ("Certificate", "capabilities-muster-tls") in served
    assert ("Issuer", "capabilities-muster-ca") in served
    assert ("Secret", "capabilities-muster-tls") not in served
    declined = render_against(
        helm_binary, control_plane, release, namespace, "--set", "tls.certManager.enabled=false"
    )
    assert ("Secret", "capabilities-muster-tls") in declined
    assert "Certificate" not in {kind for kind, _ in declined}


def test_an_upgrade_keeps_the_certificates_and_the_records_key(
    api: lc.RestClient, control_plane: lc.ControlPlane, helm_binary: str
) -> None:
    """What one rendering made, stored in the cluster, is what the next rendering renders
    (``lookup``): an upgrade rotates no certificate and no key; keys added for a rotation
    stay; a serving certificate whose Secret is gone is signed again by the CA kept."""
    namespace, release = "chart-upgrade", "persist"
    fixed = ("--set", "tls.certManager.enabled=false")
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    secrets = f"/api/v1/namespaces/{namespace}/secrets"
    try:
        first = render_against(helm_binary, control_plane, release, namespace, *fixed)
        made = {name: obj for (kind, name), obj in first.items() if kind == "Secret"}
        assert set(made) == {
            f"persist-muster-{suffix}"
            for suffix in ("ca", "tls", "scheduler-client", "scheduler-config", "records-key")
        }
        # Stored as helm install stores them: owned by the release.
        owner = {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}
        for obj in made.values():
            stored = {**obj, "metadata": {**obj["metadata"], "annotations": owner}}
            api.request("POST", secrets, stored)
        again = render_against(helm_binary, control_plane, release, namespace, *fixed)
        for name, obj in made.items():
            assert again["Secret", name]["data"] == obj["data"], name
        # A rotation: the admin adds a key that sorts last; the upgrade keeps both.
        keys = made["persist-muster-records-key"]["data"]
        added = {"key-99990101000000": base64.b64encode(b"n" * 32).decode()}
        api.request(
            "PATCH",
            f"{secrets}/persist-muster-records-key",
            {"data": added},
            content_type="application/merge-patch+json",
        )
        rotated = render_against(helm_binary, control_plane, release, namespace, *fixed)
        assert rotated["Secret", "persist-muster-records-key"]["data"] == {**keys, **added}
        # The serving certificate's Secret deleted: a new one, from the same CA.
        api.request("DELETE", f"{secrets}/persist-muster-tls")
        renewed = render_against(helm_binary, control_plane, release, namespace, *fixed)
        old, new = (
            made["persist-muster-tls"]["data"],
            renewed["Secret", "persist-muster-tls"]["data"],
        )
        assert new["tls.crt"] != old["tls.crt"] and new["ca.crt"] == old["ca.crt"]
        authority = x509.load_pem_x509_certificate(base64.b64decode(old["ca.crt"]))
        leaf = x509.load_pem_x509_certificate(base64.b64decode(new["tls.crt"]))
        leaf.verify_directly_issued_by(authority)
        client = renewed["Secret", "persist-muster-scheduler-client"]["data"]
        assert client == made["persist-muster-scheduler-client"]["data"]
    finally:
        api.request("DELETE", f"/api/v1/namespaces/{namespace}")


SCHEDULER_NAME = "chart-mtls"
SCENARIO = ROOT / "tests" / "scenarios" / "gang-fits-after-eviction.yaml"


@pytest.fixture
def processes() -> Iterator[list[lc.ServiceProcess]]:
    started: list[lc.ServiceProcess] = []
    yield started
    for process in reversed(started):
        process.stop()


def test_kube_scheduler_on_the_charts_configuration_calls_muster_over_mutual_tls(
    cluster: Cluster,
    control_plane: lc.ControlPlane,
    helm_binary: str,
    k8s_bin_dir: Path,
    tmp_path: Path,
    processes: list[lc.ServiceProcess],
) -> None:
    """The chart's defaults, as a cluster would run them: Muster on the serving certificate
    the chart made, requiring client certificates from the chart's CA; a kube-scheduler
    (a profile of its own) on the configuration the chart renders, with its CA, client
    certificate and key inline and the Service's name to check. A pod of that profile binds
    after kube-scheduler's filter call to Muster succeeded over mTLS."""
    port = lc.free_port()
    settings = {
        "schedulerConfig.urlPrefix": f"https://127.0.0.1:{port}",
        "schedulerConfig.kubeconfig": str(control_plane.scheduler_kubeconfig),
        "schedulerConfig.leaderElect": "false",
        "schedulerConfig.schedulerName": SCHEDULER_NAME,
        "tls.certManager.enabled": "false",
    }
    done = subprocess.run(
        [
            *(helm_binary, "template", "muster", str(CHART), "--namespace", NAMESPACE),
            *(f"--set={key}={value}" for key, value in settings.items()),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rendered = {
        (obj["kind"], obj["metadata"]["name"]): obj
        for obj in yaml.safe_load_all(done.stdout)
        if obj
    }
    for key, value in rendered["Secret", "muster-tls"]["data"].items():
        (tmp_path / key).write_bytes(base64.b64decode(value))
    config = tmp_path / "scheduler-config.yaml"
    config.touch(mode=0o600)
    text = rendered["Secret", "muster-scheduler-config"]["data"]["scheduler-config.yaml"]
    config.write_bytes(base64.b64decode(text))
    assert "certData" in config.read_text()
    # Muster as the Deployment runs it (its probe port is what start() waits on), checking
    # the rendered configuration at start-up.
    muster = lc.ServiceProcess(
        "muster serve (the chart's TLS)",
        lambda probe: [
            *(sys.executable, "-m", "extender.cli.main", "serve", "--snapshot", str(SCENARIO)),
            *("--port", str(port), "--probe-port", str(probe)),
            *("--tls-cert", str(tmp_path / "tls.crt"), "--tls-key", str(tmp_path / "tls.key")),
            *("--client-ca", str(tmp_path / "ca.crt"), "--scheduler-config", str(config)),
        ],
        tmp_path / "muster.log",
        cwd=ROOT,
    )
    muster.start()
    processes.append(muster)
    scheduler = lc.ServiceProcess(
        "kube-scheduler (the chart's configuration)",
        lambda secure_port: [
            str(k8s_bin_dir / "kube-scheduler"),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={secure_port}",
            f"--authentication-kubeconfig={control_plane.scheduler_kubeconfig}",
            f"--authorization-kubeconfig={control_plane.scheduler_kubeconfig}",
            "--authentication-skip-lookup=true",
        ],
        tmp_path / "kube-scheduler.log",
        ready_path=None,
    )
    scheduler.start()
    processes.append(scheduler)
    cluster.create_node("n0", {"cpu": "8", "memory": "16Gi"})
    cluster.create_pod("p", requests={"cpu": "1"}, scheduler_name=SCHEDULER_NAME)
    try:
        bound = cluster.wait_running("p", timeout=60)
    except Exception:
        log = (tmp_path / "kube-scheduler.log").read_text(errors="replace")[-3000:]
        raise AssertionError(f"not bound; kube-scheduler's log:\n{log}") from None
    assert bound["spec"]["schedulerName"] == SCHEDULER_NAME
    metrics = httpx.get(f"{muster.url}/metrics", timeout=5).text
    filtered = [
        line
        for line in metrics.splitlines()
        if line.startswith("muster_extender_requests_total{")
        and 'verb="filter"' in line
        and 'code="200"' in line
    ]
    assert filtered and float(filtered[0].split()[-1]) >= 1, metrics
