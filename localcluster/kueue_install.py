"""Kueue v0.17.0's installation on the local control plane (issue 25): its constants, the
CRDs and admission webhooks from the pinned module, and the manager's ``Configuration``.

:func:`~localcluster.kueue.start_kueue` applies these pieces, read from what
``hack/build-peers.sh kueue`` copied beside the manager and adapted to one on loopback:

* **CRDs** from the pinned module (``config/components/crd/bases``, copied by
  build-peers.sh to ``<bin>/crds``), applied as Kueue's own kustomization does: the
  ClusterQueue, LocalQueue, Cohort, Workload and MultiKueueCluster CRDs with a conversion
  webhook, here at ``https://127.0.0.1:<port>/convert`` with the CA of a serving
  certificate made by :func:`~localcluster.pki.make_serving_pki` as ``caBundle``. Every
  Kueue CRD serves v1beta2, its storage version since Kueue v0.16 (what Kueue's
  controllers read and write), and v1beta1, deprecated (Kueue plans to stop serving it in
  v0.18); for those five the webhook converts between the two when a client asks for
  v1beta1, the others have no conversion, as in a Kueue installation.
* **Certificates**: ``internalCertManagement`` off (Kueue's rotator makes certificates
  for ``<service>.<namespace>.svc``, which kube-apiserver cannot reach here); the webhook
  server's certificate is read from the configured ``webhook.certDir``. With internal
  certificates off, Kueue 0.17 still reads its metrics certificate from the fixed path
  ``/etc/kueue/metrics/certs`` (``METRICS_CERT_DIR``, cmd/kueue/main.go);
  :func:`~localcluster.kueue.start_kueue` writes both.
* **Webhooks**: Kueue's admission webhooks (``config/components/webhook/manifests.yaml``
  of the module, copied by build-peers.sh to ``<bin>/webhook``) are registered for what
  this manager serves, batch/v1 Jobs and Kueue's own kinds, at the same loopback URL
  (the others, for pods, Deployments, JobSets, ..., would answer 404 and, being
  ``failurePolicy: Fail``, refuse every such object).
* **Configuration**: see :func:`kueue_configuration` (``config.kueue.x-k8s.io/v1beta2``,
  what the module's own ``controller_manager_config.yaml`` uses).
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from .common import Json
from .processes import ComponentError

#: Kueue v0.17.0 is built against Kubernetes 1.35 libraries (v0.35.3, its own go.mod's);
#: it runs on the 1.35 control plane.
KUEUE_KUBERNETES = "1.35"
#: The API version :func:`kueue_queues` writes and :func:`job_workloads` reads (the CRDs'
#: storage version since Kueue v0.16).
KUEUE_API = "kueue.x-k8s.io/v1beta2"
#: The version the CRDs still serve, deprecated, through the conversion webhook.
KUEUE_OLD_API = "kueue.x-k8s.io/v1beta1"
#: Where Kueue runs: its ServiceAccount's namespace, its configured ``namespace``.
KUEUE_NAMESPACE = "kueue-system"
KUEUE_SERVICE_ACCOUNT = "kueue-controller-manager"
#: The CRDs Kueue's kustomization (config/components/crd/kustomization.yaml, v0.17.0)
#: gives a conversion webhook.
CONVERTED_CRDS = frozenset(
    {
        "clusterqueues.kueue.x-k8s.io",
        "localqueues.kueue.x-k8s.io",
        "cohorts.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
        "multikueueclusters.kueue.x-k8s.io",
    }
)
#: The API groups of the admission webhooks registered: Jobs (the one integration
#: enabled) and Kueue's own kinds.
WEBHOOK_GROUPS = frozenset({"batch", "kueue.x-k8s.io"})
#: Kueue's fixed metrics certificate directory when internal certificates are off.
METRICS_CERT_DIR = "/etc/kueue/metrics/certs"


def kueue_configuration(
    *,
    health_port: int,
    metrics_port: int,
    webhook_port: int,
    cert_dir: Path,
    pods_ready_timeout: float = 60.0,
    block_admission: bool = False,
    requeue_backoff_seconds: int = 10,
    fair_sharing: bool = False,
) -> Json:
    """Kueue's ``Configuration`` (config.kueue.x-k8s.io/v1beta2) for the local plane.

    * ``integrations.frameworks: [batch/job]``: Jobs only; ``manageJobsWithoutQueueName``
      false (the default): a Job without the queue-name label is not Kueue's.
    * ``waitForPodsReady``: Kueue's documented all-or-nothing: an admitted Workload whose
      pods are not all Ready within ``pods_ready_timeout`` (60 s: the kubelet stand-in
      makes a bound pod Ready at once, so only a gang kube-scheduler cannot place whole
      waits that long) is evicted and requeued, its quota and pods let go.
      ``blockAdmission`` false (Kueue's default): with true, every ClusterQueue waits for
      each admitted Workload's pods to be Ready before admitting the next, which makes
      admission sequential cluster-wide; the timeout alone already frees what a partly
      placed gang holds. ``requeuingStrategy``: requeue after eviction (``timestamp:
      Eviction``, the default) with no limit on retries (``backoffLimitCount`` null, so
      every job eventually runs) and a base backoff of ``requeue_backoff_seconds``
      (Kueue's default is 60 s, doubling to an hour: long against a trace compressed to
      minutes). ``recoveryTimeout`` is left unset: since Kueue v0.16 it defaults to
      ``timeout`` (before, unset meant off), so a running Workload one of whose pods
      failed is evicted and requeued too if its replacement is not Ready within
      ``pods_ready_timeout``.
    * health and metrics on loopback ports, leader election off, the webhook server on
      ``127.0.0.1:<webhook_port>`` with its certificate in ``cert_dir``, internal
      certificate management off (see the module docstring).
    * feature gates: ``VisibilityOnDemand`` off (it serves an aggregated API on the fixed
      port 8082 of every interface, and needs an APIService), ``MultiKueue`` off (no
      worker clusters); the others keep v0.17.0's defaults, among them
      ``PartialAdmission`` on (beta since v0.5): a Job annotated
      ``kueue.x-k8s.io/job-min-parallelism: N`` may be admitted with fewer pods, down to
      N, when its whole parallelism does not fit.
    * ``fairSharing`` with ``fair_sharing`` only (off by default, as in Kueue): in the
      v1beta2 Configuration its presence turns fair sharing on (v1beta1's ``enable`` is
      gone; ``pkg/scheduler/preemption/fairsharing.Enabled`` is ``cfg.FairSharing !=
      nil``), and ``preemptionStrategies`` must be given (``pkg/config/validation.go``):
      here ``[LessThanOrEqualToFinalShare, LessThanInitialShare]``, v1beta1's default.
      Admission then favours the ClusterQueue with the lowest weighted share (borrowing
      above nominal quota over the cohort's lendable resources, divided by its
      ``spec.fairSharing.weight``) and reclaiming preempts from the highest.
    """
    config: Json = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        "waitForPodsReady": {
            "timeout": f"{pods_ready_timeout:g}s",
            "blockAdmission": block_admission,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": requeue_backoff_seconds,
                "backoffMaxSeconds": max(requeue_backoff_seconds, 300),
            },
        },
        "clientConnection": {"qps": 50, "burst": 100},
        "featureGates": {"VisibilityOnDemand": False, "MultiKueue": False},
    }
    if fair_sharing:
        config["fairSharing"] = {
            "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
        }
    return config


def kueue_crds(crds_dir: Path, *, webhook_url: str, ca_pem: bytes) -> list[Json]:
    """Kueue's CRDs from ``crds_dir``, those in ``CONVERTED_CRDS`` with their conversion
    webhook at ``webhook_url`` (``https://127.0.0.1:<port>``), trusted through
    ``ca_pem``."""
    crds: list[Json] = []
    for path in sorted(crds_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            if doc["metadata"]["name"] in CONVERTED_CRDS:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {
                            "url": f"{webhook_url}/convert",
                            "caBundle": base64.b64encode(ca_pem).decode(),
                        },
                        "conversionReviewVersions": ["v1"],
                    },
                }
            crds.append(doc)
    if not crds:
        raise ComponentError(f"no Kueue CRDs in {crds_dir} (run hack/build-peers.sh kueue)")
    return crds


def kueue_webhooks(webhook_dir: Path, *, webhook_url: str, ca_pem: bytes) -> list[Json]:
    """Kueue's Mutating- and ValidatingWebhookConfigurations from ``webhook_dir``
    (``manifests.yaml``), renamed ``kueue-peer-*``, keeping only the webhooks for
    ``WEBHOOK_GROUPS``, each pointed at ``webhook_url`` + its service path and trusting
    ``ca_pem``."""
    configurations: list[Json] = []
    ca_bundle = base64.b64encode(ca_pem).decode()
    for doc in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text()):
        if not doc or not doc.get("kind", "").endswith("WebhookConfiguration"):
            continue
        hooks = []
        for hook in doc["webhooks"]:
            groups = {g for rule in hook["rules"] for g in rule["apiGroups"]}
            if not groups <= WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{webhook_url}{path}", "caBundle": ca_bundle}
            hooks.append(hook)
        kind = "mutating" if doc["kind"].startswith("Mutating") else "validating"
        configurations.append(
            {
                "apiVersion": doc["apiVersion"],
                "kind": doc["kind"],
                "metadata": {"name": f"kueue-peer-{kind}"},
                "webhooks": hooks,
            }
        )
    if not configurations:
        raise ComponentError(f"no webhook configurations in {webhook_dir}/manifests.yaml")
    return configurations
