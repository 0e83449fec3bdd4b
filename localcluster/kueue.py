"""Kueue v0.17.0's controller manager beside the stock kube-scheduler (issue 25).

Kueue is not a scheduler: it decides when a Job may start (it *admits* its Workload
against ClusterQueue quotas and unsuspends the Job), and kube-scheduler then places its
pods. :func:`start_kueue` runs the manager built by ``hack/build-peers.sh kueue``
(:func:`~localcluster.binaries.ensure_peer`) against a started ``ControlPlane``:

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
  server's certificate is written to the configured ``webhook.certDir``. With internal
  certificates off, Kueue 0.17 still reads its metrics certificate from the fixed path
  ``/etc/kueue/metrics/certs`` (cmd/kueue/main.go): the manager runs in a private mount
  namespace (``unshare --mount``) whose ``/etc`` is an overlay adding that directory, so
  nothing is written to the host's ``/etc``. This needs root (or CAP_SYS_ADMIN).
* **Webhooks**: Kueue's admission webhooks (``config/components/webhook/manifests.yaml``
  of the module, copied by build-peers.sh to ``<bin>/webhook``) are registered for what
  this manager serves, batch/v1 Jobs and Kueue's own kinds, at the same loopback URL
  (the others, for pods, Deployments, JobSets, ..., would answer 404 and, being
  ``failurePolicy: Fail``, refuse every such object); ``stop()`` deletes them again, so a
  stopped manager blocks no write. The Job webhook suspends a Job that names a
  LocalQueue when it is created, as in a Kueue installation. Submitting a Job to Kueue:
  the label ``kueue.x-k8s.io/queue-name: <LocalQueue>``; create it with ``spec.suspend:
  true`` as well (:func:`kueue_job` does both) so that it is right without the webhook
  too (``start_kueue(admission_webhooks=False)``); Kueue unsuspends it when it admits its
  Workload.
* **Access**: the manager runs as the ServiceAccount ``kueue-system/kueue-controller-
  manager`` with a token from the TokenRequest API, like the harness's other users, bound
  to the built-in ``cluster-admin`` ClusterRole. That is broader than Kueue's chart
  grants; it is a test cluster, and Kueue's RBAC is not what is being compared.
* **Configuration**: see :func:`kueue_configuration` (``config.kueue.x-k8s.io/v1beta2``,
  what the module's own ``controller_manager_config.yaml`` uses).

Queues (:func:`kueue_queues`) are written, and Workloads read, in
``kueue.x-k8s.io/v1beta2`` (``KUEUE_API``), the CRDs' storage version: nothing the harness
writes or reads goes through the conversion webhook, which :func:`start_kueue` still
checks once (its readiness probe reads v1beta1) because kube-apiserver needs it for any
v1beta1 client, and it shares the webhook server with the admission webhooks.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import shlex
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import quote

import yaml

from .binaries import ensure_peer
from .common import Json
from .pki import make_serving_pki
from .processes import ComponentError, free_ports, tail
from .rest import ApiError
from .services import ServiceProcess
from .waiting import wait_until

if TYPE_CHECKING:
    from .controlplane import ControlPlane

#: Kueue v0.17.0 is built against Kubernetes 1.35 libraries (v0.35.3, its own go.mod's);
#: it runs on the 1.35 control plane.
KUEUE_KUBERNETES = "1.35"
#: The API version :func:`kueue_queues` writes and :func:`job_workloads` reads (the CRDs'
#: storage version since Kueue v0.16).
KUEUE_API = "kueue.x-k8s.io/v1beta2"
#: The version the CRDs still serve, deprecated, through the conversion webhook.
KUEUE_OLD_API = "kueue.x-k8s.io/v1beta1"
#: The label that names a Job's LocalQueue.
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
#: Where Kueue runs: its ServiceAccount's namespace, its configured ``namespace``.
KUEUE_NAMESPACE = "kueue-system"
KUEUE_SERVICE_ACCOUNT = "kueue-controller-manager"
GPU = "nvidia.com/gpu"
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


class TeamQuota(NamedTuple):
    """One team's quota: its namespace ``name``, ``min_gpus`` (ClusterQueue nominal
    quota) and ``max_gpus`` (nominal + borrowing limit), and cpu/memory nominal quotas
    generous enough never to limit (GPUs alone decide, as in the ElasticQuotas)."""

    name: str
    min_gpus: int
    max_gpus: int
    cpu: str = "100000"
    memory: str = "1000Ti"
    #: The ClusterQueue's ``spec.fairSharing.weight``, read when fair sharing is on
    #: (``kueue_configuration(fair_sharing=True)``); None: unset (Kueue's default, 1).
    weight: float | None = None


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


# -- queues


def kueue_queues(
    teams: Iterable[TeamQuota | tuple[str, int, int]],
    *,
    cohort: str = "muster",
    flavor: str = "default",
) -> list[Json]:
    """Kueue's objects for teams' quotas (``KUEUE_API``, v1beta2): one ResourceFlavor
    ``flavor`` (no node labels: every node), and per team a ClusterQueue named after it in
    ``cohort`` (v1beta2's ``spec.cohortName``, v1beta1's ``spec.cohort``) and a LocalQueue
    of the same name in its namespace.

    A ClusterQueue's ``nominalQuota`` of ``nvidia.com/gpu`` is the team's ``min`` and its
    ``borrowingLimit`` ``max - min`` (Kueue: a queue may use its nominal quota plus what it
    borrows from the cohort's unused nominal quota, up to the limit), the same meaning as an
    ElasticQuota's ``min``/``max``. cpu and memory have generous nominal quotas (no
    borrowing limit). ``preemption`` is Muster's defaults: ``withinClusterQueue:
    LowerPriority``, ``reclaimWithinCohort: Any`` (a team within its nominal quota takes
    back what others borrowed, whatever their priority), ``borrowWithinCohort: {policy:
    Never}`` (a borrowing job preempts no one); ``queueingStrategy: BestEffortFIFO`` (a
    job that does not fit does not hold back smaller ones behind it). The ClusterQueue
    admits only its team's namespace; a team's ``weight``, if set, is its
    ``spec.fairSharing.weight``."""
    objects: list[Json] = [
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor}}
    ]
    for team in teams:
        quota = team if isinstance(team, TeamQuota) else TeamQuota(*team)
        if quota.max_gpus < quota.min_gpus:
            raise ValueError(f"team {quota.name}: max {quota.max_gpus} < min {quota.min_gpus}")
        fair_sharing = (
            {} if quota.weight is None else {"fairSharing": {"weight": f"{quota.weight:g}"}}
        )
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": {"name": quota.name},
                "spec": {
                    **fair_sharing,
                    "cohortName": cohort,
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": quota.name}
                    },
                    "queueingStrategy": "BestEffortFIFO",
                    "preemption": {
                        "withinClusterQueue": "LowerPriority",
                        "reclaimWithinCohort": "Any",
                        "borrowWithinCohort": {"policy": "Never"},
                    },
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", GPU],
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": quota.cpu},
                                        {"name": "memory", "nominalQuota": quota.memory},
                                        {
                                            "name": GPU,
                                            "nominalQuota": str(quota.min_gpus),
                                            "borrowingLimit": str(quota.max_gpus - quota.min_gpus),
                                        },
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": quota.name, "namespace": quota.name},
                "spec": {"clusterQueue": quota.name},
            }
        )
    return objects


_PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "Cohort": "cohorts",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "Workload": "workloads",
}


def kueue_path(obj: Json) -> str:
    """The collection path of a Kueue object (its ``apiVersion`` and kind)."""
    namespace = obj["metadata"].get("namespace")
    scope = f"/namespaces/{quote(namespace)}" if namespace else ""
    return f"/apis/{obj['apiVersion']}{scope}/{_PLURALS[obj['kind']]}"


def create_kueue_objects(plane: ControlPlane, objects: Sequence[Json]) -> None:
    """Create ``objects`` (e.g. :func:`kueue_queues`'), the namespaces of namespaced ones
    first; an object that exists is replaced."""
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if namespace:
            plane.create_namespace(namespace)
        path = kueue_path(obj)
        try:
            plane.rest.request("POST", path, obj)
        except ApiError as exc:
            if exc.status != 409:
                raise
            name = quote(obj["metadata"]["name"])
            current = plane.rest.request("GET", f"{path}/{name}")
            body = copy.deepcopy(obj)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            plane.rest.request("PUT", f"{path}/{name}", body)


def delete_kueue_objects(plane: ControlPlane, objects: Sequence[Json]) -> None:
    """Delete ``objects`` (best effort, not waited for: a ClusterQueue with admitted
    Workloads keeps Kueue's finalizer until they finish)."""
    for obj in reversed(objects):
        with contextlib.suppress(ApiError):
            plane.rest.request("DELETE", f"{kueue_path(obj)}/{quote(obj['metadata']['name'])}")


def wait_queues_active(plane: ControlPlane, objects: Sequence[Json], timeout: float = 60.0) -> None:
    """Until every ClusterQueue and LocalQueue among ``objects`` reports ``Active`` true:
    Kueue has seen them, their flavor and their cohort, and will admit into them."""
    queues = [o for o in objects if o["kind"] in ("ClusterQueue", "LocalQueue")]
    last: dict[str, Json] = {}

    def active() -> bool:
        for obj in queues:
            path = f"{kueue_path(obj)}/{quote(obj['metadata']['name'])}"
            current = last[path] = plane.rest.request("GET", path)
            if not _condition_true(current, "Active"):
                return False
        return True

    wait_until(
        active,
        timeout=timeout,
        what="Kueue's queues to be Active",
        on_timeout=lambda: "\n".join(
            f"{p}: {v.get('status', {}).get('conditions')}" for p, v in last.items()
        ),
    )


# -- jobs and workloads


def kueue_job(job: Json, queue: str) -> Json:
    """A copy of the batch/v1 ``job`` submitted to Kueue's LocalQueue ``queue``: the
    ``kueue.x-k8s.io/queue-name`` label and ``spec.suspend: true`` (no Job webhook does it
    here; Kueue unsuspends the Job when it admits its Workload)."""
    job = copy.deepcopy(job)
    metadata = job.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), QUEUE_NAME_LABEL: queue}
    job.setdefault("spec", {})["suspend"] = True
    return job


def job_workloads(plane: ControlPlane, namespace: str, job: str) -> list[Json]:
    """The Workloads (``KUEUE_API``) Kueue made for the Job ``job`` of ``namespace`` (its
    owner reference names the Job)."""
    items: list[Json] = plane.rest.request(
        "GET", f"/apis/{KUEUE_API}/namespaces/{quote(namespace)}/workloads"
    )["items"]
    return [
        w
        for w in items
        if any(
            ref.get("kind") == "Job" and ref.get("name") == job
            for ref in w["metadata"].get("ownerReferences", [])
        )
    ]


def workload_condition(workload: Json, kind: str) -> bool:
    """Whether a Workload's condition ``kind`` (``QuotaReserved``, ``Admitted``,
    ``PodsReady``, ``Evicted``, ``Preempted``, ``Finished``) is true."""
    return _condition_true(workload, kind)


def _condition_true(obj: Json, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )
