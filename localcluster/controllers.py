"""kube-controller-manager: the controllers a batch cluster relies on, and how
``ControlPlane`` runs them.

``CONTROLLERS`` names the controllers started by default: Jobs, ReplicaSets, Deployments
and StatefulSets create and replace their pods; the disruption controller keeps each
PodDisruptionBudget's status; the garbage collector deletes what an owner leaves behind;
the namespace, pod-GC and service-account(-token) controllers keep the rest tidy; the
resourceclaim controller makes pods' ResourceClaims from their templates (DRA). The
node-lifecycle controller is left out on purpose: there is no kubelet to post node
heartbeats, so it would taint every node unreachable and evict its pods.

``ControllerManagerMixin`` is the part of ``ControlPlane`` that starts, stops and checks
kube-controller-manager. It runs as the admin user (``system:masters``) without
per-controller service-account credentials: one identity, no token plumbing, the same
controllers' behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import urllib3

from .processes import Process
from .scheduler import quiet_insecure_warnings
from .waiting import wait_until

CONTROLLERS: tuple[str, ...] = (
    "job-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "disruption-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "pod-garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "resourceclaim-controller",
)


def controller_manager_argv(
    binary: Path,
    *,
    kubeconfig: Path,
    port: int,
    workdir: Path,
    controllers: Sequence[str],
    verbosity: int,
    extra: Sequence[str] = (),
) -> list[str]:
    """kube-controller-manager's command line for the local control plane (``extra``:
    more flags, such as ``--feature-gates``)."""
    pki = workdir / "pki"
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--controllers={','.join(controllers)}",
        "--leader-elect=false",
        "--use-service-account-credentials=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={workdir / 'controller-manager-certs'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        # The default 20 queries/s would make a 64-pod Job take seconds to create.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        f"--v={verbosity}",
        *extra,
    ]


class ControllerManagerMixin:
    """Starts, stops and waits for kube-controller-manager (part of ``ControlPlane``)."""

    if TYPE_CHECKING:
        _processes: dict[str, Process]
        controller_manager_port: int
        start_timeout: float

        def log_tail(self, lines: int = 40, components: Sequence[str] | None = None) -> str: ...

    def start_controller_manager(self) -> None:
        """Start kube-controller-manager and wait until its ``/healthz`` answers ``ok``."""
        process = self._processes["kube-controller-manager"]
        process.start()
        pool = urllib3.PoolManager(cert_reqs="CERT_NONE")  # its self-signed serving cert

        def healthy() -> bool:
            process.check_alive()
            response = pool.request(
                "GET",
                f"https://127.0.0.1:{self.controller_manager_port}/healthz",
                timeout=2.0,
                retries=False,
            )
            return response.status == 200 and response.data.strip() == b"ok"

        with quiet_insecure_warnings():
            wait_until(
                healthy,
                timeout=self.start_timeout,
                interval=0.2,
                what="kube-controller-manager /healthz",
                on_timeout=lambda: self.log_tail(components=["kube-controller-manager"]),
            )

    def stop_controller_manager(self) -> None:
        """Stop kube-controller-manager (SIGTERM); the cluster keeps serving without it."""
        process = self._processes.get("kube-controller-manager")
        if process is not None:
            process.stop()
