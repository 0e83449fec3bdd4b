"""Kueue v0.17.0's controller manager beside the stock kube-scheduler (issue 25).

Kueue is not a scheduler: it decides when a Job may start (it *admits* its Workload
against ClusterQueue quotas and unsuspends the Job), and kube-scheduler then places its
pods. :func:`start_kueue` runs the manager built by ``hack/build-peers.sh kueue``
(:func:`~localcluster.binaries.ensure_peer`) against a started ``ControlPlane``, installed
from :mod:`localcluster.kueue_install`'s pieces (CRDs with their conversion webhook,
admission webhooks, ``Configuration``):

* **Certificates**: internal certificate management is off, so the webhook server's
  certificate is written to the configured ``webhook.certDir``, and the metrics
  certificate to the fixed path Kueue 0.17 reads it from, ``/etc/kueue/metrics/certs``:
  the manager runs in a private mount namespace (``unshare --mount``) whose ``/etc`` is
  an overlay adding that directory, so nothing is written to the host's ``/etc``. This
  needs root (or CAP_SYS_ADMIN).
* **Webhooks**: Kueue's admission webhooks for batch/v1 Jobs and Kueue's own kinds
  (:func:`~localcluster.kueue_install.kueue_webhooks`) are registered once the manager is
  ready; ``stop()`` deletes them again, so a stopped manager blocks no write.
* **Access**: the manager runs as the ServiceAccount ``kueue-system/kueue-controller-
  manager`` with a token from the TokenRequest API, like the harness's other users, bound
  to the built-in ``cluster-admin`` ClusterRole. That is broader than Kueue's chart
  grants; it is a test cluster, and Kueue's RBAC is not what is being compared.

The queues, Jobs and Workloads are :mod:`localcluster.kueue_objects`', all in the CRDs'
storage version: nothing the harness writes or reads goes through the conversion webhook,
which :func:`start_kueue` still checks once (its readiness probe reads v1beta1) because
kube-apiserver needs it for any v1beta1 client, and it shares the webhook server with the
admission webhooks.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import yaml

from .binaries import ensure_peer
from .common import Json
from .kueue_install import (
    KUEUE_API,
    KUEUE_NAMESPACE,
    KUEUE_OLD_API,
    KUEUE_SERVICE_ACCOUNT,
    METRICS_CERT_DIR,
    kueue_configuration,
    kueue_crds,
    kueue_webhooks,
)
from .kueue_objects import create_kueue_objects, delete_kueue_objects
from .pki import make_serving_pki
from .processes import ComponentError, free_ports, tail
from .rest import ApiError
from .services import ServiceProcess
from .waiting import wait_until

if TYPE_CHECKING:
    from .controlplane import ControlPlane

_WEBHOOK_PLURALS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}


def _webhook_path(configuration: Json) -> str:
    return f"/apis/admissionregistration.k8s.io/v1/{_WEBHOOK_PLURALS[configuration['kind']]}"


class KueueManager:
    """Kueue's controller manager as a child process (``process``), with its files in
    ``workdir``; ``stop()`` deletes its admission webhook configurations and ends it (the
    CRDs, their conversion webhook, and Kueue's objects stay)."""

    def __init__(
        self,
        process: ServiceProcess,
        workdir: Path,
        config: Json,
        plane: ControlPlane,
        webhooks: Sequence[Json] = (),
    ) -> None:
        self.process = process
        self.workdir = workdir
        self.config = config
        self.plane = plane
        self.webhooks = list(webhooks)

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def check_alive(self) -> None:
        """Raise ``ComponentError`` (with its log tail) if the manager has exited."""
        self.process.check_alive()

    def stop(self) -> None:
        for configuration in self.webhooks:
            name = quote(configuration["metadata"]["name"])
            with contextlib.suppress(Exception):
                self.plane.rest.request("DELETE", f"{_webhook_path(configuration)}/{name}")
        self.webhooks = []
        self.process.stop()

    def __enter__(self) -> KueueManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_kueue(
    plane: ControlPlane,
    *,
    bin_dir: Path | None = None,
    workdir: Path | None = None,
    pods_ready_timeout: float = 60.0,
    block_admission: bool = False,
    requeue_backoff_seconds: int = 10,
    admission_webhooks: bool = True,
    ready_timeout: float = 120.0,
    log_level: int = 2,
    fair_sharing: bool = False,
) -> KueueManager:
    """Start Kueue's controller manager against the started ``plane`` and wait until it is
    ready (its ``/readyz``: certificates loaded, webhook server listening; then its
    conversion webhook answers kube-apiserver). ``bin_dir``: where build-peers.sh put
    ``kueue-manager`` and ``crds/`` (default: ``ensure_peer("kueue")``, built if needed);
    ``workdir``: its files (default ``<plane.workdir>/kueue``); ``admission_webhooks``:
    register Kueue's Job and Kueue-kind admission webhooks (see the module docstring).
    The configuration is :func:`kueue_configuration`'s (``fair_sharing``: its fair
    sharing on). Stop it with ``.stop()``."""
    bin_dir = bin_dir or ensure_peer("kueue")
    workdir = workdir or plane.workdir / "kueue"
    workdir.mkdir(parents=True, exist_ok=True)
    unshare = shutil.which("unshare")
    if unshare is None:
        raise ComponentError("Kueue needs unshare(1) to give it /etc/kueue/metrics/certs")
    health_port, metrics_port, webhook_port = free_ports(3)

    # Certificates: the webhook server's (kube-apiserver calls it) and the metrics
    # server's (nothing here verifies it), the same pair.
    serving = make_serving_pki("kueue-webhook")
    cert_dir = workdir / "webhook-certs"
    overlay = workdir / "etc-overlay"
    metrics_dir = overlay / "upper" / METRICS_CERT_DIR.removeprefix("/etc/")
    for directory in (cert_dir, metrics_dir):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "tls.crt").write_bytes(serving.cert_pem)
        (directory / "tls.key").write_bytes(serving.key_pem)
        (directory / "tls.key").chmod(0o600)
    (overlay / "work").mkdir(exist_ok=True)

    config = kueue_configuration(
        health_port=health_port,
        metrics_port=metrics_port,
        webhook_port=webhook_port,
        cert_dir=cert_dir,
        pods_ready_timeout=pods_ready_timeout,
        block_admission=block_admission,
        requeue_backoff_seconds=requeue_backoff_seconds,
        fair_sharing=fair_sharing,
    )
    config_path = workdir / "kueue-config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    crds_dir = workdir / "crds"
    crds_dir.mkdir(exist_ok=True)
    for crd in kueue_crds(
        bin_dir / "crds", webhook_url=f"https://127.0.0.1:{webhook_port}", ca_pem=serving.ca_pem
    ):
        (crds_dir / f"{crd['metadata']['name']}.yaml").write_text(yaml.safe_dump(crd))
    plane.install_crds(crds_dir)
    plane.create_namespace(KUEUE_NAMESPACE)
    kubeconfig = plane.service_account_kubeconfig(KUEUE_NAMESPACE, KUEUE_SERVICE_ACCOUNT)
    _bind_cluster_admin(plane)

    manager = bin_dir / "kueue-manager"
    mount = (
        f"mount -t overlay kueue-etc -o lowerdir=/etc,upperdir={shlex.quote(str(overlay))}"
        f"/upper,workdir={shlex.quote(str(overlay))}/work /etc"
    )
    # unshare execs (no fork), and so does sh: the manager keeps the pid the harness
    # signals, and the parent-death signal the harness sets.
    argv = [
        unshare,
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        f'{mount} && exec "$0" "$@"',
        str(manager),
        f"--config={config_path}",
        f"--kubeconfig={kubeconfig}",
        f"--zap-log-level={log_level}",
    ]
    process = ServiceProcess(
        "kueue-manager",
        lambda _port: argv,
        plane.logs_dir / "kueue-manager.log",
        port=health_port,
        ready_path="/readyz",
        ready_timeout=ready_timeout,
    )
    process.start()
    handle = KueueManager(process, workdir, config, plane)
    try:
        _wait_conversion(plane, handle, ready_timeout)
        if admission_webhooks:
            for configuration in kueue_webhooks(
                bin_dir / "webhook",
                webhook_url=f"https://127.0.0.1:{webhook_port}",
                ca_pem=serving.ca_pem,
            ):
                handle.webhooks.append(configuration)
                try:
                    plane.rest.request("POST", _webhook_path(configuration), configuration)
                except ApiError as exc:
                    if exc.status != 409:
                        raise
                    name = quote(configuration["metadata"]["name"])
                    plane.rest.request("DELETE", f"{_webhook_path(configuration)}/{name}")
                    plane.rest.request("POST", _webhook_path(configuration), configuration)
    except BaseException:
        handle.stop()
        raise
    return handle


def _bind_cluster_admin(plane: ControlPlane) -> None:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "kueue-controller-manager-peer"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": KUEUE_SERVICE_ACCOUNT,
                "namespace": KUEUE_NAMESPACE,
            }
        ],
    }
    try:
        path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
        plane.rest.request("POST", path, binding)
    except ApiError as exc:
        if exc.status != 409:
            raise


def _wait_conversion(plane: ControlPlane, manager: KueueManager, timeout: float) -> None:
    """Until kube-apiserver converts through Kueue's webhook: a LocalQueue written in
    ``KUEUE_API`` (the storage version) read back in the deprecated ``KUEUE_OLD_API``,
    then deleted."""
    probe = {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": "conversion-probe", "namespace": KUEUE_NAMESPACE},
        "spec": {"clusterQueue": "conversion-probe"},
    }
    create_kueue_objects(plane, [probe])
    path = f"/apis/{KUEUE_OLD_API}/namespaces/{KUEUE_NAMESPACE}/localqueues"

    def converted() -> bool:
        manager.check_alive()  # an exit is reported at the deadline, with the log tail
        plane.rest.request("GET", f"{path}/conversion-probe")  # fails until it answers
        return True

    try:
        wait_until(
            converted,
            timeout=timeout,
            what="kube-apiserver converting through Kueue's webhook",
            on_timeout=lambda: tail(manager.log_path, 40),
        )
    finally:
        delete_kueue_objects(plane, [probe])
