"""etcd and kube-apiserver: how ``ControlPlane`` runs its storage and API server, and the
files they read.

``ApiServerMixin`` is the part of ``ControlPlane`` that writes the certificates, static
tokens, audit policy and kubeconfigs, and starts, waits for and restarts these two:

* etcd with loopback client/peer URLs and its data in the temporary directory;
* kube-apiserver with RBAC (``--authorization-mode=Node,RBAC``), a serving certificate
  signed by a throw-away CA, service-account signing keys, and static bearer tokens:
  an admin (group ``system:masters``) and ``system:kube-scheduler`` for the scheduler.
  The admin kubeconfig is written to ``<workdir>/admin.kubeconfig``. kube-apiserver can
  be restarted on the same port (``restart_apiserver``).

There is no kubelet and no node-lifecycle controller (see ``controlplane``), so nothing
removes the ``not-ready`` taint of new nodes: kube-apiserver runs with the
``TaintNodesByCondition`` admission plugin off. The ``ServiceAccount`` admission plugin is
off too, so pods can be created in a namespace as soon as it exists, before the
``default`` service account does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3
import yaml

from .pki import SERVICE_CLUSTER_IP_RANGE, Pki, make_pki, write_kubeconfig
from .processes import Process, wait_port_released
from .rest import RestClient
from .waiting import wait_until

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "muster-admin"
SCHEDULER_USER = "system:kube-scheduler"


class ApiServerMixin:
    """Runs etcd and kube-apiserver and writes their files (part of ``ControlPlane``; see
    ``ControlPlane`` for the attributes)."""

    if TYPE_CHECKING:
        workdir: Path
        logs_dir: Path
        ca_file: Path
        kubeconfig: Path
        scheduler_kubeconfig: Path
        server: str
        etcd_url: str
        etcd_peer_port: int
        apiserver_port: int
        admin_token: str
        _scheduler_token: str
        audit_policy: dict[str, Any] | None
        audit_log: Path
        runtime_config: tuple[str, ...]
        verbosity: int
        start_timeout: float
        _processes: dict[str, Process]
        _pki: Pki | None

        @property
        def rest(self) -> RestClient: ...

        def _binary(self, name: str) -> Path: ...

        def feature_gates_argv(self) -> list[str]: ...

        def log_tail(self, lines: int = 40, components: Sequence[str] | None = None) -> str: ...

    # -- etcd

    def _etcd_argv(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(self._binary("etcd")),
            "--name=muster",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=muster={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",  # test data: durability does not matter, speed does
            "--log-level=warn",
        ]

    def _start_etcd(self) -> None:
        process = self._processes["etcd"]
        process.start()
        pool = urllib3.PoolManager()

        def healthy() -> bool:
            process.check_alive()
            response = pool.request("GET", f"{self.etcd_url}/health", timeout=2.0, retries=False)
            return response.status == 200 and b'"health":"true"' in response.data

        wait_until(
            healthy,
            timeout=self.start_timeout,
            what="etcd /health",
            on_timeout=lambda: self.log_tail(components=["etcd"]),
        )

    # -- kube-apiserver

    def _apiserver_argv(self) -> list[str]:
        pki = self.workdir / "pki"
        return [
            str(self._binary("kube-apiserver")),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--cert-dir={pki}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # Nothing reconciles the kubernetes Service's endpoints to a loopback address.
            "--endpoint-reconciler-type=none",
            # No controller creates "default" service accounts or removes the not-ready
            # taint of new nodes (see the module docstring).
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            # Close watches when terminating instead of waiting for them to time out.
            "--shutdown-watch-termination-grace-period=2s",
            "--allow-privileged=true",
            "--profiling=false",
            f"--v={self.verbosity}",
            *self._audit_argv(),
            *self.feature_gates_argv(),
            *([f"--runtime-config={','.join(self.runtime_config)}"] if self.runtime_config else []),
        ]

    def _audit_argv(self) -> list[str]:
        if self.audit_policy is None:
            return []
        return [
            f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
        ]

    def _start_apiserver(self) -> None:
        self._processes["kube-apiserver"].start()
        self.wait_apiserver_ready()

    def wait_apiserver_ready(self, timeout: float | None = None) -> None:
        """Poll kube-apiserver's ``/readyz`` until it answers ``ok``."""
        process = self._processes["kube-apiserver"]

        def ready() -> bool:
            process.check_alive()
            status, body = self.rest.get_text("/readyz")
            return status == 200 and body.strip() == "ok"

        wait_until(
            ready,
            timeout=timeout or self.start_timeout,
            interval=0.2,
            what="kube-apiserver /readyz",
            on_timeout=lambda: self.log_tail(components=["kube-apiserver", "etcd"]),
        )

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM) and start it again on the same port and data."""
        process = self._processes["kube-apiserver"]
        process.stop()
        wait_port_released(self.apiserver_port)
        self._start_apiserver()

    # -- files

    def _write_files(self) -> None:
        pki_dir = self.workdir / "pki"
        pki_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        pki = self._pki = make_pki()
        self.ca_file.write_bytes(pki.ca_pem)
        (pki_dir / "apiserver.crt").write_bytes(pki.serving_cert_pem + pki.ca_pem)
        (pki_dir / "apiserver.key").write_bytes(pki.serving_key_pem)
        (pki_dir / "sa.key").write_bytes(pki.sa_private_pem)
        (pki_dir / "sa.pub").write_bytes(pki.sa_public_pem)
        for key in ("apiserver.key", "sa.key"):
            (pki_dir / key).chmod(0o600)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(
            f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
            f"{self._scheduler_token},{SCHEDULER_USER},{SCHEDULER_USER}\n"
        )
        tokens.chmod(0o600)
        if self.audit_policy is not None:
            (self.workdir / "audit-policy.yaml").write_text(yaml.safe_dump(self.audit_policy))
        write_kubeconfig(
            self.kubeconfig,
            server=self.server,
            ca_pem=pki.ca_pem,
            user=ADMIN_USER,
            token=self.admin_token,
        )
        write_kubeconfig(
            self.scheduler_kubeconfig,
            server=self.server,
            ca_pem=pki.ca_pem,
            user=SCHEDULER_USER,
            token=self._scheduler_token,
        )
