"""A real, local Kubernetes control plane for Muster's e2e tests, demo and benchmarks.

``ControlPlane`` runs etcd, kube-apiserver, kube-scheduler and kube-controller-manager
(upstream binaries built by ``hack/build-k8s.sh``) on 127.0.0.1 in a temporary directory,
and ``KubeletEmulator`` plays the kubelet. A package of the project (beside ``base``,
``quota`` and ``extender``, not shipped in the image): ``import localcluster as lc``.

Modules: ``controlplane`` (``ControlPlane``: lifecycle, components, logs, clients),
``apiserver`` (etcd and kube-apiserver: their files, start, readiness and restarts),
``scheduler`` (``ExtenderConfig``, kube-scheduler's configuration and restarts),
``controllers`` (kube-controller-manager: which controllers, how it runs),
``objects`` (namespaces, nodes, CRDs, service accounts), ``peers``, ``kueue_install``,
``kueue``, ``kueue_objects`` and ``koordinator`` (the peers of issue 25: scheduler-plugins'
configuration; Kueue's CRDs, webhooks and configuration, its manager, and its queues,
Jobs and Workloads; koord-scheduler's configuration and plane),
``kubelet`` (``KubeletEmulator``),
``watch`` (``Watcher``: list, then watch, a collection), ``rest`` (``RestClient``,
``ApiError``), ``processes`` (component processes; ``free_port``, ``free_ports``),
``services`` (``ServiceProcess``: a child process on a port, waited for until ready),
``pki`` (certificates, kubeconfigs), ``binaries`` (``ensure_binaries``), ``waiting``
(``wait_until``) and ``common`` (shared paths, types and timestamps).

Typical use::

    with ControlPlane(extender=ExtenderConfig("http://127.0.0.1:8888", bind=True)) as cp:
        cp.create_namespace("team-a")
        cp.create_node("node-1", {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4})
        core = cp.core_v1()
        ...
"""

from __future__ import annotations

from . import koordinator, kueue, kueue_install, kueue_objects, peers
from .binaries import (
    BuildError,
    default_bin_dir,
    ensure_binaries,
    ensure_peer,
    kubernetes_minor,
)
from .controlplane import ControlPlane
from .kubelet import ANSWERS_NOTICE, RUN_SECONDS, KubeletEmulator
from .pki import MutualTlsPki, make_mutual_tls_pki, records_key_dir
from .processes import ComponentError, free_port, free_ports
from .rest import ApiError, RestClient
from .scheduler import KEEP, ExtenderConfig, ExtenderTLS, ManagedResource
from .services import ServiceProcess
from .waiting import wait_until
from .watch import Watcher

__all__ = [
    "ANSWERS_NOTICE",
    "KEEP",
    "RUN_SECONDS",
    "ApiError",
    "BuildError",
    "ComponentError",
    "ControlPlane",
    "ExtenderConfig",
    "ExtenderTLS",
    "KubeletEmulator",
    "ManagedResource",
    "MutualTlsPki",
    "RestClient",
    "ServiceProcess",
    "Watcher",
    "default_bin_dir",
    "ensure_binaries",
    "ensure_peer",
    "free_port",
    "free_ports",
    "koordinator",
    "kubernetes_minor",
    "kueue",
    "kueue_install",
    "kueue_objects",
    "make_mutual_tls_pki",
    "peers",
    "records_key_dir",
    "wait_until",
]
