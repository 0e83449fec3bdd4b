"""The Helm chart ``charts/muster`` (issue #16, item 2), with the pinned helm
(``hack/build-helm.sh``): it lints, renders with every values file in ``charts/muster/ci``,
refuses bad values naming them, renders arguments and a scheduler configuration Muster
itself accepts, and the raw manifests in ``manifests/`` are the chart's own rendering.

Server-side dry runs of the rendered objects against a real kube-apiserver are in
``tests/e2e/test_chart.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from render_manifests import CHART, ROOT, helm, render_chart

from extender.cli.scheduler_config import check_scheduler_config
from extender.core.config import parse_args

VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
VALUE_SETS = [pytest.param((), id="defaults")] + [
    pytest.param((path,), id=path.stem) for path in VALUES
]


@pytest.fixture(scope="module")
def helm_binary() -> str:
    return helm()


def objects(helm_binary: str, *values: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The rendered objects by (kind, name)."""
    rendered = [yaml.safe_load(text) for text in render_chart(helm_binary, *values)]
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in rendered}


def container(obj: dict[str, Any]) -> dict[str, Any]:
    only: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return only


def test_the_chart_lints_with_every_values_file(helm_binary: str) -> None:
    for values in [None, *VALUES]:
        command = [helm_binary, "lint", "--strict", str(CHART)]
        if values is not None:
            command += ["--values", str(values)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{values}: {done.stdout}{done.stderr}"


def test_the_raw_manifests_are_the_charts_rendering() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "render_manifests.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("values", VALUE_SETS)
def test_rendered_arguments_and_scheduler_configuration_are_ones_muster_accepts(
    helm_binary: str, values: tuple[Path, ...]
) -> None:
    rendered = objects(helm_binary, *values)
    args = yaml.safe_load(rendered["ConfigMap", "muster-args"]["data"]["args.yaml"])
    parse_args(args)  # raises, naming the field, on anything Muster would refuse
    scheduler = yaml.safe_load(
        rendered["ConfigMap", "muster-scheduler-config"]["data"]["scheduler-config.yaml"]
    )
    assert check_scheduler_config(scheduler) == []
    # Muster checks the same file at start-up: the Deployment mounts it and names it.
    muster = container(rendered["Deployment", "muster"])
    assert "--scheduler-config=/etc/muster/scheduler/scheduler-config.yaml" in muster["args"]


def test_defaults_two_replicas_with_a_lease_an_evictor_and_plain_http(helm_binary: str) -> None:
    rendered = objects(helm_binary)
    deployment = rendered["Deployment", "muster"]
    muster = container(deployment)
    assert deployment["spec"]["replicas"] == 2
    assert "--no-leader-elect" not in muster["args"]
    assert not any(arg.startswith("--tls") for arg in muster["args"])
    assert ("Role", "muster-leader-election") in rendered
    assert ("PodDisruptionBudget", "muster") in rendered
    assert container(rendered["Deployment", "muster-evictor"])["image"] == "muster:0.1.0"
    # Probes and Prometheus use the plain probe port (values.yaml's probePort).
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert muster["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert f"--probe-port={defaults['probePort']}" in muster["args"]
    # Replicas spread over nodes where they can.
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    # The scheduler reaches Muster through its Service, in plain HTTP.
    extender = yaml.safe_load(
        rendered["ConfigMap", "muster-scheduler-config"]["data"]["scheduler-config.yaml"]
    )["extenders"][0]
    assert extender["urlPrefix"] == "http://muster.muster-system.svc:8888"
    assert "enableHTTPS" not in extender and "prioritizeVerb" not in extender
    # The four CRDs, kept on uninstall.
    crds = [obj for (kind, _), obj in rendered.items() if kind == "CustomResourceDefinition"]
    assert len(crds) == 4
    for crd in crds:
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not [obj for kind, obj in rendered.items() if kind[0] == "ServiceMonitor"]


def test_the_scheduler_can_be_told_another_address(helm_binary: str) -> None:
    done = subprocess.run(
        [
            *(helm_binary, "template", "muster", str(CHART), "--namespace", "muster-system"),
            *("--set", "schedulerConfig.urlPrefix=http://10.96.0.88:8888"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    configs = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "ConfigMap"]
    scheduler = next(c for c in configs if c["metadata"]["name"] == "muster-scheduler-config")
    extender = yaml.safe_load(scheduler["data"]["scheduler-config.yaml"])["extenders"][0]
    assert extender["urlPrefix"] == "http://10.96.0.88:8888"


def test_tls_values_serve_https_require_client_certificates_and_configure_the_scheduler(
    helm_binary: str,
) -> None:
    rendered = objects(helm_binary, CHART / "ci" / "tls-values.yaml")
    deployment = rendered["Deployment", "muster"]
    muster = container(deployment)
    for flag in (
        "--tls-cert=/etc/muster/tls/tls.crt",
        "--tls-key=/etc/muster/tls/tls.key",
        "--client-ca=/etc/muster/client-ca/ca.crt",
    ):
        assert flag in muster["args"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "muster-serving-cert"
    assert volumes["client-ca"]["secret"]["secretName"] == "kube-scheduler-client-ca"
    assert muster["image"] == "registry.example.com/muster:0.1.0-rc1"
    extender = yaml.safe_load(
        rendered["ConfigMap", "muster-scheduler-config"]["data"]["scheduler-config.yaml"]
    )["extenders"][0]
    assert extender["urlPrefix"] == "https://muster.muster-system.svc:8888"
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {
        "caFile": "/etc/kubernetes/pki/muster-ca.crt",
        "certFile": "/etc/kubernetes/pki/muster-client.crt",
        "keyFile": "/etc/kubernetes/pki/muster-client.key",
    }
    assert (extender["prioritizeVerb"], extender["bindVerb"]) == ("prioritize", "bind")
    assert extender["httpTimeout"] == "2500ms"


def test_minimal_values_one_replica_without_lease_evictor_budget_or_crds(
    helm_binary: str,
) -> None:
    rendered = objects(helm_binary, CHART / "ci" / "minimal-values.yaml")
    assert "--no-leader-elect" in container(rendered["Deployment", "muster"])["args"]
    kinds = {kind for kind, _ in rendered}
    assert "CustomResourceDefinition" not in kinds and "PodDisruptionBudget" not in kinds
    assert not [name for _, name in rendered if "evictor" in name or "leader" in name]


def test_monitoring_values_carry_the_repositorys_rules_and_dashboard(helm_binary: str) -> None:
    rendered = objects(helm_binary, CHART / "ci" / "monitoring-values.yaml")
    monitor = rendered["ServiceMonitor", "muster"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # It selects exactly the two Services, and both name their Prometheus port "metrics".
    (selector,) = monitor["spec"]["selector"]["matchExpressions"]
    selected = [
        name
        for (kind, name), obj in rendered.items()
        if kind == "Service"
        and obj["metadata"]["labels"].get(selector["key"]) in selector["values"]
    ]
    assert sorted(selected) == ["muster", "muster-evictor"]
    for name in selected:
        ports = rendered["Service", name]["spec"]["ports"]
        assert "metrics" in [port["name"] for port in ports]
    rules = yaml.safe_load((CHART / "files" / "monitoring" / "prometheus-rules.yaml").read_text())
    assert rendered["PrometheusRule", "muster"]["spec"] == rules
    dashboard = json.loads((CHART / "files" / "monitoring" / "grafana-dashboard.json").read_text())
    config_map = rendered["ConfigMap", "muster-dashboard"]
    assert json.loads(config_map["data"]["muster.json"]) == dashboard
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("args.reservationTimeoutSeconds=-1", "reservationTimeoutSeconds"),
        ("args.reservationTimeout=60", "reservationTimeout"),
        ("args.pdbPolicy=Sometimes", "pdbPolicy"),
        ("replicas=0", "replicas"),
        ("probePort=70000", "probePort"),
        ("tls.enabled=true,schedulerConfig.tls.caFile=/ca.crt", "tls.secretName is required"),
        ("tls.enabled=true,tls.secretName=s", "schedulerConfig.tls.caFile is required"),
        ("tls.clientCASecretName=ca", "needs tls.enabled"),
        ("probePort=8888", "service.port and probePort must differ"),
        ("schedulerConfig.urlPrefix=muster:8888", "urlPrefix"),
        ("schedulerConfig.httpTimeout=5", "httpTimeout"),
        ("evictr.enabled=false", "evictr"),
    ],
)
def test_bad_values_are_refused_naming_the_field(
    helm_binary: str, setting: str, named: str
) -> None:
    done = subprocess.run(
        [helm_binary, "template", "muster", str(CHART), "--set", setting],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert named in done.stderr, done.stderr


def test_generic_workload_turns_off_kube_schedulers_group_preemption_too(
    helm_binary: str,
) -> None:
    """``schedulerConfig.genericWorkload: true`` (kube-scheduler 1.37+ with the gate on):
    the profile is the sample's (GangScheduling off) plus DefaultPreemption off at
    ``podGroupPostFilter``, exactly what the e2e tier runs kube-scheduler with
    (tests/e2e/test_gang_apis.py), and the check passes with the gate on."""
    rendered = objects(helm_binary, CHART / "ci" / "generic-workload-values.yaml")
    scheduler = yaml.safe_load(
        rendered["ConfigMap", "muster-scheduler-config"]["data"]["scheduler-config.yaml"]
    )
    (profile,) = scheduler["profiles"]
    (sample,) = yaml.safe_load((ROOT / "manifests" / "scheduler-config.yaml").read_text())[
        "profiles"
    ]
    assert profile["plugins"] == {
        **sample["plugins"],
        "podGroupPostFilter": {"disabled": [{"name": "DefaultPreemption"}]},
    }
    assert check_scheduler_config(scheduler, feature_gates={"GenericWorkload": True}) == []
