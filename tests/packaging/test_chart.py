"""The Helm chart ``charts/muster`` (issue #16, item 2; issue 32, secure by default), with
the pinned helm (``hack/build-helm.sh``): it lints, renders with every values file in
``charts/muster/ci``, refuses bad values naming them, renders arguments and a scheduler
configuration Muster itself accepts, and the raw manifests in ``manifests/`` are the
chart's own rendering, without a secret.

By default the chart serves HTTPS with certificates it makes and requires kube-scheduler's
client certificate (the tests below run ``muster serve`` on the rendered certificates and
call it with the credentials the rendered scheduler configuration gives kube-scheduler),
admits only kube-scheduler and the metrics scrapers (NetworkPolicies), serves no /debug,
mounts a records key, and grants Muster no evictions.

Not testable offline: that ``helm upgrade`` keeps the certificates and the records key
(``lookup`` answers nothing to ``helm template``). ``tests/e2e/test_chart.py`` renders
against a real kube-apiserver for that, and dry-runs every rendered object there.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from extender.cli.scheduler_config import check_scheduler_config, check_scheduler_config_file
from extender.core.config import parse_args
from hack.render_manifests import CHART, RAW_VALUES, ROOT, helm, nothing_secret, render_chart
from tests.unit.test_serve_tls import FILTER_BODY, serve, wait_listening

VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
VALUE_SETS = [pytest.param((), id="defaults")] + [
    pytest.param((path,), id=path.stem) for path in VALUES
]
Objects = dict[tuple[str, str], dict[str, Any]]
SERVICE_NAME = "muster.muster-system.svc"


@pytest.fixture(scope="module")
def helm_binary() -> str:
    return helm()


def objects(helm_binary: str, *values: Path) -> Objects:
    """The rendered objects by (kind, name)."""
    rendered = [yaml.safe_load(text) for text in render_chart(helm_binary, *values)]
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in rendered}


def template(helm_binary: str, *options: str) -> Objects:
    """``helm template`` with other options (``--set``, ``--api-versions``)."""
    done = subprocess.run(
        [helm_binary, "template", "muster", str(CHART), "--namespace", "muster-system", *options],
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        (obj["kind"], obj["metadata"]["name"]): obj
        for obj in yaml.safe_load_all(done.stdout)
        if obj
    }


def container(obj: dict[str, Any]) -> dict[str, Any]:
    only: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return only


def volumes(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}


def scheduler_config_text(rendered: Objects) -> str:
    """The KubeSchedulerConfiguration, from the ConfigMap or (key data inline) the Secret."""
    if ("Secret", "muster-scheduler-config") in rendered:
        data = rendered["Secret", "muster-scheduler-config"]["data"]
        return base64.b64decode(data["scheduler-config.yaml"]).decode()
    text: str = rendered["ConfigMap", "muster-scheduler-config"]["data"]["scheduler-config.yaml"]
    return text


def extender_entry(rendered: Objects) -> dict[str, Any]:
    entry: dict[str, Any] = yaml.safe_load(scheduler_config_text(rendered))["extenders"][0]
    return entry


def secret_data(rendered: Objects, name: str) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in rendered["Secret", name]["data"].items()}


def rules(rendered: Objects, role: str) -> list[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every rule of a ClusterRole."""
    return [
        (group, resource, verb)
        for rule in rendered["ClusterRole", role]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]


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
    helm_binary: str, values: tuple[Path, ...], tmp_path: Path
) -> None:
    rendered = objects(helm_binary, *values)
    args = yaml.safe_load(rendered["ConfigMap", "muster-args"]["data"]["args.yaml"])
    parse_args(args)  # raises, naming the field, on anything Muster would refuse
    # Muster checks the same file at start-up (inline key data or files, either shape).
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(scheduler_config_text(rendered))
    assert check_scheduler_config_file(str(path)) == []
    # The Deployment mounts it from the object the chart renders it into, and names it.
    deployment = rendered["Deployment", "muster"]
    assert (
        "--scheduler-config=/etc/muster/scheduler/scheduler-config.yaml"
        in (container(deployment)["args"])
    )
    source = volumes(deployment)["scheduler-config"]
    if ("Secret", "muster-scheduler-config") in rendered:
        assert source["secret"] == {"secretName": "muster-scheduler-config"}
        assert ("ConfigMap", "muster-scheduler-config") not in rendered
    else:
        assert source["configMap"] == {"name": "muster-scheduler-config"}


def test_defaults_two_replicas_with_a_lease_an_evictor_and_mutual_tls(helm_binary: str) -> None:
    rendered = objects(helm_binary)
    deployment = rendered["Deployment", "muster"]
    muster = container(deployment)
    assert deployment["spec"]["replicas"] == 2
    assert "--no-leader-elect" not in muster["args"]
    assert ("Role", "muster-leader-election") in rendered
    assert ("PodDisruptionBudget", "muster") in rendered
    assert container(rendered["Deployment", "muster-evictor"])["image"] == "muster:0.1.0"
    # HTTPS with the chart's certificate, and only kube-scheduler's client certificate.
    for flag in (
        "--tls-cert=/etc/muster/tls/tls.crt",
        "--tls-key=/etc/muster/tls/tls.key",
        "--client-ca=/etc/muster/tls/ca.crt",
    ):
        assert flag in muster["args"]
    assert volumes(deployment)["tls"]["secret"] == {"secretName": "muster-tls"}
    mounts = {m["name"]: m for m in muster["volumeMounts"]}
    assert mounts["tls"] == {"name": "tls", "mountPath": "/etc/muster/tls", "readOnly": True}
    # No /debug.
    assert "--enable-debug-endpoints" not in muster["args"]
    # Probes and Prometheus use the plain probe port (values.yaml's probePort).
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert muster["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert f"--probe-port={defaults['probePort']}" in muster["args"]
    # Replicas spread over nodes where they can.
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    # kube-scheduler reaches Muster through its Service over HTTPS, checks the Service's
    # name, and presents its client certificate: all inline, so in a Secret.
    assert ("ConfigMap", "muster-scheduler-config") not in rendered
    extender = extender_entry(rendered)
    assert extender["urlPrefix"] == f"https://{SERVICE_NAME}:8888"
    assert extender["enableHTTPS"] is True
    assert sorted(extender["tlsConfig"]) == ["caData", "certData", "keyData", "serverName"]
    assert extender["tlsConfig"]["serverName"] == SERVICE_NAME
    assert "prioritizeVerb" not in extender
    # The four CRDs, kept on uninstall.
    crds = [obj for (kind, _), obj in rendered.items() if kind == "CustomResourceDefinition"]
    assert len(crds) == 4
    for crd in crds:
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert not [obj for kind, obj in rendered.items() if kind[0] == "ServiceMonitor"]


def test_one_rendering_gives_muster_and_kube_scheduler_the_same_ca(helm_binary: str) -> None:
    """The certificates are made once per rendering: the CA in Muster's Secret (its client
    CA), in kube-scheduler's client Secret and in the scheduler configuration is one."""
    rendered = objects(helm_binary)
    ca = secret_data(rendered, "muster-ca")
    serving = secret_data(rendered, "muster-tls")
    client = secret_data(rendered, "muster-scheduler-client")
    inline = extender_entry(rendered)["tlsConfig"]
    assert serving["ca.crt"] == client["ca.crt"] == ca["tls.crt"]
    assert base64.b64decode(inline["caData"]) == ca["tls.crt"]
    assert base64.b64decode(inline["certData"]) == client["tls.crt"]
    assert base64.b64decode(inline["keyData"]) == client["tls.key"]
    for name in ("muster-ca", "muster-tls", "muster-scheduler-client"):
        assert rendered["Secret", name]["type"] == "kubernetes.io/tls"
    # The serving certificate names the Service; the client certificate is the CA's too.
    authority = x509.load_pem_x509_certificate(ca["tls.crt"])
    leaf = x509.load_pem_x509_certificate(serving["tls.crt"])
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [
        SERVICE_NAME,
        f"{SERVICE_NAME}.cluster.local",
        "muster",
    ]
    for pem in (serving["tls.crt"], client["tls.crt"]):
        x509.load_pem_x509_certificate(pem).verify_directly_issued_by(authority)
    usage = x509.load_pem_x509_certificate(client["tls.crt"]).extensions.get_extension_for_class(
        x509.ExtendedKeyUsage
    )
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage.value


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


def muster_over_mutual_tls(
    tmp_path: Path, cert: bytes, key: bytes, client_ca: bytes, stop: list[subprocess.Popen[bytes]]
) -> str:
    """``muster serve`` (over a snapshot) with these files; its filter URL."""
    for name, content in (("tls.crt", cert), ("tls.key", key), ("ca.crt", client_ca)):
        (tmp_path / name).write_bytes(content)
    process, port = serve(
        *("--tls-cert", str(tmp_path / "tls.crt"), "--tls-key", str(tmp_path / "tls.key")),
        *("--client-ca", str(tmp_path / "ca.crt")),
    )
    stop.append(process)
    wait_listening(process, port)
    return f"https://127.0.0.1:{port}/filter"


def call(url: str, server_name: str, ca: bytes, client: tuple[Path, Path] | None) -> int:
    """POST a filter call as kube-scheduler does: trusting ``ca``, checking the certificate
    against ``server_name`` (its ``tlsConfig.serverName``), with a client certificate."""
    context = ssl.create_default_context(cadata=ca.decode())
    if client is not None:
        context.load_cert_chain(str(client[0]), str(client[1]))
    with httpx.Client(verify=context) as client_session:
        response = client_session.post(
            url, json=FILTER_BODY, extensions={"sni_hostname": server_name}
        )
    return response.status_code


def test_muster_serves_the_charts_certificate_to_kube_schedulers_inline_credentials_only(
    helm_binary: str, tmp_path: Path, stop: list[subprocess.Popen[bytes]]
) -> None:
    """Muster run as the Deployment runs it, on the Secret the chart makes, answers a
    caller holding what the rendered scheduler configuration gives kube-scheduler, and
    refuses one without the client certificate."""
    rendered = objects(helm_binary)
    serving = secret_data(rendered, "muster-tls")
    url = muster_over_mutual_tls(
        tmp_path, serving["tls.crt"], serving["tls.key"], serving["ca.crt"], stop
    )
    inline = extender_entry(rendered)["tlsConfig"]
    (tmp_path / "client.crt").write_bytes(base64.b64decode(inline["certData"]))
    (tmp_path / "client.key").write_bytes(base64.b64decode(inline["keyData"]))
    client = (tmp_path / "client.crt", tmp_path / "client.key")
    ca = base64.b64decode(inline["caData"])
    assert call(url, inline["serverName"], ca, client) == 200
    with pytest.raises(httpx.TransportError):
        call(url, inline["serverName"], ca, None)  # no client certificate
    with pytest.raises(httpx.ConnectError):
        call(url, "evil.example.com", ca, client)  # a name the certificate does not carry


def test_make_secrets_makes_what_the_raw_manifests_name_and_kube_scheduler_needs(
    tmp_path: Path, stop: list[subprocess.Popen[bytes]]
) -> None:
    """manifests/make-secrets.sh (with a kubectl that records its arguments): the Secrets it
    creates are the ones manifests/deployment.yaml mounts, with the keys Muster reads; its
    certificates work with Muster's mTLS under the name the scheduler configuration checks;
    the records key is one, long enough."""
    kubectl = tmp_path / "kubectl"
    log = tmp_path / "kubectl.log"
    kubectl.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n')
    kubectl.chmod(0o755)
    done = subprocess.run(
        [str(ROOT / "manifests" / "make-secrets.sh"), str(tmp_path / "pki")],
        env={"PATH": "/usr/bin:/bin", "KUBECTL": str(kubectl)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    created = {}
    for line in log.read_text().splitlines():
        words = line.split()
        assert words[:5] == ["-n", "muster-system", "create", "secret", "generic"], line
        created[words[5]] = words[6:]
    deployments = [
        obj
        for obj in yaml.safe_load_all((ROOT / "manifests" / "deployment.yaml").read_text())
        if obj["kind"] == "Deployment"
    ]
    mounted = {
        volume["secret"]["secretName"]
        for obj in deployments
        for volume in obj["spec"]["template"]["spec"]["volumes"]
        if "secret" in volume
    }
    assert mounted == set(created) == {"muster-tls", "muster-records-key"}
    assert sorted(created["muster-tls"]) == [
        "--from-file=ca.crt",
        "--from-file=tls.crt",
        "--from-file=tls.key",
    ]
    (literal,) = created["muster-records-key"]
    name, _, key = literal.removeprefix("--from-literal=").partition("=")
    assert re.fullmatch(r"key-[0-9]{14}", name) and len(base64.b64decode(key)) == 32
    # kube-scheduler's side, as manifests/scheduler-config.yaml names it.
    pki = tmp_path / "pki"
    tls = yaml.safe_load((ROOT / "manifests" / "scheduler-config.yaml").read_text())
    tls_config = tls["extenders"][0]["tlsConfig"]
    assert {Path(tls_config[k]).name for k in ("caFile", "certFile", "keyFile")} == {
        "ca.crt",
        "client.crt",
        "client.key",
    }
    ca = (pki / "ca.crt").read_bytes()
    url = muster_over_mutual_tls(
        tmp_path, (pki / "tls.crt").read_bytes(), (pki / "tls.key").read_bytes(), ca, stop
    )
    client = (pki / "client.crt", pki / "client.key")
    assert call(url, tls_config["serverName"], ca, client) == 200
    with pytest.raises(httpx.TransportError):
        call(url, tls_config["serverName"], ca, None)


def test_the_raw_manifests_hold_no_secret_and_the_guard_would_say_so(helm_binary: str) -> None:
    """manifests/ is public: rendered with ci/raw-manifests-values.yaml it names the admin's
    Secrets; with the defaults, the guard refuses the chart's."""
    for path in (ROOT / "manifests").rglob("*.yaml"):
        assert "PRIVATE KEY" not in path.read_text(), path
        kinds = {obj["kind"] for obj in yaml.safe_load_all(path.read_text()) if obj}
        assert "Secret" not in kinds, path
    nothing_secret(render_chart(helm_binary, RAW_VALUES))
    with pytest.raises(SystemExit, match="key material would land in manifests/"):
        nothing_secret(render_chart(helm_binary))


def test_the_records_key_is_made_mounted_and_passed_to_muster_and_the_evictor(
    helm_binary: str,
) -> None:
    rendered = objects(helm_binary)
    secret = rendered["Secret", "muster-records-key"]
    ((name, value),) = secret["data"].items()  # one key
    assert re.fullmatch(r"key-[0-9]{14}", name)  # sorts by time: a later key sorts after
    assert len(base64.b64decode(value)) >= 32
    for deployment in ("muster", "muster-evictor"):
        obj = rendered["Deployment", deployment]
        assert "--records-key-dir=/etc/muster/records-key" in container(obj)["args"]
        assert volumes(obj)["records-key"]["secret"] == {"secretName": "muster-records-key"}
        mounts = {m["name"]: m for m in container(obj)["volumeMounts"]}
        assert mounts["records-key"]["mountPath"] == "/etc/muster/records-key"
        assert mounts["records-key"]["readOnly"] is True
    # A Secret of one's own: nothing made, the same mounts.
    own = template(helm_binary, "--set", "records.existingSecret=my-keys")
    assert ("Secret", "muster-records-key") not in own
    for deployment in ("muster", "muster-evictor"):
        assert volumes(own["Deployment", deployment])["records-key"]["secret"] == {
            "secretName": "my-keys"
        }


def test_muster_may_evict_only_when_it_deletes_its_victims_itself(helm_binary: str) -> None:
    defaults = objects(helm_binary)
    eviction = ("", "pods/eviction", "create")
    assert eviction not in rules(defaults, "muster")
    assert eviction in rules(defaults, "muster-evictor")
    # Muster writes a quota's status only, never the quota itself.
    assert [r for r in rules(defaults, "muster") if r[1] == "elasticquotas" and r[2] != "get"] == [
        (group, "elasticquotas", verb)
        for group in ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io")
        for verb in ("list", "watch")
    ]
    assert {r[2] for r in rules(defaults, "muster") if r[1] == "elasticquotas/status"} == {"patch"}
    assert not [r for r in rules(defaults, "muster") if r[1] == "secrets"]
    deleting = template(helm_binary, "--set", "args.podShouldBeDeletedWhenPreempted=true")
    assert eviction in rules(deleting, "muster")


def test_every_rule_names_the_code_that_uses_it() -> None:
    """Each rule in templates/rbac.yaml follows a comment naming a module that exists."""
    lines = (CHART / "templates" / "rbac.yaml").read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
    assert len(starts) > 15
    for start in starts:
        comment = []
        for line in reversed(lines[:start]):
            stripped = line.strip()
            if stripped.startswith("{{"):
                continue
            if not stripped.startswith("#"):
                break
            comment.append(stripped)
        named = re.findall(r"extender/[a-z_/]+\.py", " ".join(comment))
        assert named, f"rbac.yaml line {start + 1}: no comment names the code"
        for path in named:
            assert (ROOT / path).is_file(), f"rbac.yaml line {start + 1}: {path}"


def network_policy_rules(policy: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Port name → the peers admitted to it."""
    return {
        port["port"]: rule["from"]
        for rule in policy["spec"]["ingress"] or []
        for port in rule["ports"]
    }


def test_network_policies_admit_kube_scheduler_to_the_extender_port_and_nothing_else(
    helm_binary: str,
) -> None:
    rendered = objects(helm_binary)
    muster, evictor = (
        rendered["NetworkPolicy", "muster"],
        rendered["NetworkPolicy", "muster-evictor"],
    )
    for policy, deployment in ((muster, "muster"), (evictor, "muster-evictor")):
        selected = rendered["Deployment", deployment]["spec"]["selector"]["matchLabels"]
        assert policy["spec"]["podSelector"]["matchLabels"] == selected
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        ports = {p["name"] for p in container(rendered["Deployment", deployment])["ports"]}
        assert set(network_policy_rules(policy)) <= ports
    assert network_policy_rules(muster) == {
        "http": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"component": "kube-scheduler"}},
            }
        ]
    }
    assert evictor["spec"]["ingress"] == []  # only its own node (the kubelet)
    # Host-network kube-scheduler: by CIDR; the metrics ports to Prometheus.
    monitored = objects(helm_binary, CHART / "ci" / "monitoring-values.yaml")
    prometheus = yaml.safe_load((CHART / "ci" / "monitoring-values.yaml").read_text())[
        "networkPolicy"
    ]["metrics"]["from"]
    assert network_policy_rules(monitored["NetworkPolicy", "muster"])["probes"] == prometheus
    assert network_policy_rules(monitored["NetworkPolicy", "muster-evictor"]) == {
        "metrics": prometheus
    }
    cidrs = objects(helm_binary, CHART / "ci" / "cert-manager-values.yaml")
    assert network_policy_rules(cidrs["NetworkPolicy", "muster"])["http"][0] == {
        "ipBlock": {"cidr": "10.0.0.0/24"}
    }
    off = template(helm_binary, "--set", "networkPolicy.enabled=false")
    assert not [name for kind, name in off if kind == "NetworkPolicy"]


def test_cert_manager_makes_and_renews_the_certificates_where_its_api_is_served(
    helm_binary: str,
) -> None:
    """``tls.certManager.enabled: auto`` (the default): cert-manager's Issuers and
    Certificates where cert-manager.io/v1 is served, no key material from the chart, and
    kube-scheduler's files (cert-manager renews them); false: the chart's own."""
    served = template(helm_binary, "--api-versions", "cert-manager.io/v1")
    kinds = {kind for kind, _ in served}
    assert {"Issuer", "Certificate"} <= kinds
    assert {name for kind, name in served if kind == "Secret"} == {"muster-records-key"}
    certificates = {
        name: obj["spec"] for (kind, name), obj in served.items() if kind == "Certificate"
    }
    assert certificates["muster-ca"]["isCA"] is True
    serving, client = certificates["muster-tls"], certificates["muster-scheduler-client"]
    assert serving["dnsNames"] == [SERVICE_NAME, f"{SERVICE_NAME}.cluster.local", "muster"]
    assert "server auth" in serving["usages"] and "client auth" in client["usages"]
    assert (
        serving["issuerRef"]
        == client["issuerRef"]
        == {
            "name": "muster-ca",
            "kind": "Issuer",
            "group": "cert-manager.io",
        }
    )
    assert (
        served["Issuer", "muster-ca"]["spec"]["ca"]["secretName"]
        == (certificates["muster-ca"]["secretName"])
    )
    muster = served["Deployment", "muster"]
    assert volumes(muster)["tls"]["secret"]["secretName"] == serving["secretName"]
    assert "--client-ca=/etc/muster/tls/ca.crt" in container(muster)["args"]
    extender = extender_entry(served)
    assert ("ConfigMap", "muster-scheduler-config") in served
    assert extender["tlsConfig"] == {
        "serverName": SERVICE_NAME,
        "caFile": "/etc/kubernetes/pki/muster/ca.crt",
        "certFile": "/etc/kubernetes/pki/muster/client.crt",
        "keyFile": "/etc/kubernetes/pki/muster/client.key",
    }
    declined = template(
        helm_binary,
        "--api-versions",
        "cert-manager.io/v1",
        "--set",
        "tls.certManager.enabled=false",
    )
    assert "Certificate" not in {kind for kind, _ in declined}
    assert ("Secret", "muster-tls") in declined


def test_the_charts_certificates_with_kube_scheduler_files_instead(helm_binary: str) -> None:
    """Admins who copy files to the control plane: the configuration names them, in a
    ConfigMap (no key in it)."""
    rendered = template(
        helm_binary,
        *("--set", "schedulerConfig.tls.caFile=/pki/ca.crt"),
        *("--set", "schedulerConfig.tls.certFile=/pki/client.crt"),
        *("--set", "schedulerConfig.tls.keyFile=/pki/client.key"),
    )
    assert ("Secret", "muster-scheduler-config") not in rendered
    assert extender_entry(rendered)["tlsConfig"] == {
        "serverName": SERVICE_NAME,
        "caFile": "/pki/ca.crt",
        "certFile": "/pki/client.crt",
        "keyFile": "/pki/client.key",
    }
    assert volumes(rendered["Deployment", "muster"])["scheduler-config"]["configMap"]
    assert ("Secret", "muster-scheduler-client") in rendered  # where the files come from


def test_debug_endpoints_are_served_only_when_asked(helm_binary: str) -> None:
    on = objects(helm_binary, CHART / "ci" / "cert-manager-values.yaml")
    assert "--enable-debug-endpoints" in container(on["Deployment", "muster"])["args"]


def test_the_scheduler_can_be_told_another_address(helm_binary: str) -> None:
    rendered = template(helm_binary, "--set", "schedulerConfig.urlPrefix=https://10.96.0.88:8888")
    extender = extender_entry(rendered)
    assert extender["urlPrefix"] == "https://10.96.0.88:8888"
    # The certificate is still checked against the Service's name.
    assert extender["tlsConfig"]["serverName"] == SERVICE_NAME


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
    volume = volumes(deployment)
    assert volume["tls"]["secret"]["secretName"] == "muster-serving-cert"
    assert volume["client-ca"]["secret"]["secretName"] == "kube-scheduler-client-ca"
    assert muster["image"] == "registry.example.com/muster:0.1.0-rc1"
    # Your own certificates: the chart makes none.
    assert not [name for kind, name in rendered if kind in ("Certificate", "Issuer")]
    assert {name for kind, name in rendered if kind == "Secret"} == {"muster-records-key"}
    extender = extender_entry(rendered)
    assert extender["urlPrefix"] == f"https://{SERVICE_NAME}:8888"
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {
        "caFile": "/etc/kubernetes/pki/muster-ca.crt",
        "certFile": "/etc/kubernetes/pki/muster-client.crt",
        "keyFile": "/etc/kubernetes/pki/muster-client.key",
    }
    assert (extender["prioritizeVerb"], extender["bindVerb"]) == ("prioritize", "bind")
    assert extender["httpTimeout"] == "2500ms"


def test_minimal_values_one_replica_plain_http_and_muster_evicts_itself(
    helm_binary: str,
) -> None:
    rendered = objects(helm_binary, CHART / "ci" / "minimal-values.yaml")
    muster = container(rendered["Deployment", "muster"])
    assert "--no-leader-elect" in muster["args"]
    assert not [arg for arg in muster["args"] if arg.startswith(("--tls", "--client-ca"))]
    assert extender_entry(rendered)["urlPrefix"] == f"http://{SERVICE_NAME}:8888"
    assert "enableHTTPS" not in extender_entry(rendered)
    kinds = {kind for kind, _ in rendered}
    assert not kinds & {"CustomResourceDefinition", "PodDisruptionBudget", "NetworkPolicy"}
    assert not [name for _, name in rendered if "evictor" in name or "leader" in name]
    # podShouldBeDeletedWhenPreempted: true, and no evictor: Muster evicts.
    assert ("", "pods/eviction", "create") in rules(rendered, "muster")


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
    rules_file = (CHART / "files" / "monitoring" / "prometheus-rules.yaml").read_text()
    assert rendered["PrometheusRule", "muster"]["spec"] == yaml.safe_load(rules_file)
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
        ("tls.secretName=s", "schedulerConfig.tls.caFile is required"),
        (
            "tls.secretName=s,tls.clientCASecretName=ca,schedulerConfig.tls.caFile=/ca.crt",
            "schedulerConfig.tls.certFile is required",
        ),
        ("schedulerConfig.tls.caFile=/ca.crt", "schedulerConfig.tls.certFile is required"),
        ("tls.enabled=false,tls.clientCASecretName=ca", "needs tls.enabled"),
        ("tls.clientCASecretName=ca", "goes with your own tls.secretName"),
        ("tls.certManager.enabled=maybe", "certManager"),
        ("tls.validityDays=0", "validityDays"),
        ("debug.enabled=true,tls.enabled=false", "debug.enabled needs mTLS"),
        (
            "debug.enabled=true,tls.secretName=s,schedulerConfig.tls.caFile=/ca.crt",
            "debug.enabled needs mTLS",
        ),
        ("networkPolicy.extender.ipBlocks={10.0.0.1}", "ipBlocks"),
        ("networkPolicy.metrics.from[0].namespace=monitoring", "namespace"),
        ("records.existingSecret=1", "existingSecret"),
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
    scheduler = yaml.safe_load(scheduler_config_text(rendered))
    (profile,) = scheduler["profiles"]
    (sample,) = yaml.safe_load((ROOT / "manifests" / "scheduler-config.yaml").read_text())[
        "profiles"
    ]
    assert profile["plugins"] == {
        **sample["plugins"],
        "podGroupPostFilter": {"disabled": [{"name": "DefaultPreemption"}]},
    }
    assert check_scheduler_config(scheduler, feature_gates={"GenericWorkload": True}) == []
