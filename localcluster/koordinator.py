"""Koordinator v1.6.0's scheduler, koord-scheduler, in kube-scheduler's place (issue 25).

``hack/build-peers.sh koordinator`` builds ``cmd/koord-scheduler`` of the published module
``github.com/koordinator-sh/koordinator`` v1.6.0 (against Kubernetes v1.28.7, Koordinator's
own ``replace`` lines) and copies the module's ``config/crd/bases/*.yaml`` next to it, to
``<bin>/crds`` (:func:`koordinator_crds_dir`). :func:`koordinator_control_plane` runs it::

    with koordinator_control_plane(bin_dir=lc.ensure_binaries(version="1.35")) as cp:
        ...

What the plane differs in from a stock one, and why:

* **CRDs**: Koordinator's own, all of them (its ``config/crd/kustomization.yaml`` lists
  every file in ``bases``; none has a conversion webhook): ``scheduling.sigs.k8s.io``
  ElasticQuota and PodGroup in Koordinator's schema (which replace the harness's default
  ones of the same name), and the ``scheduling.koordinator.sh`` (Reservation, Device,
  PodMigrationJob), ``slo.koordinator.sh`` (NodeMetric, NodeSLO), ``config.koordinator.sh``,
  ``quota.koordinator.sh``, ``analysis.koordinator.sh`` and ``topology.node.k8s.io`` kinds:
  koord-scheduler starts informers for its kinds whatever plugins are enabled
  (``cmd/koord-scheduler/app/server.go``: ``KoordinatorSharedInformerFactory``), so they
  must be served. The ``scheduling.x-k8s.io`` kinds Muster reads are not installed.
* **Namespace** ``koordinator-system`` exists before the scheduler starts: the
  ElasticQuota plugin creates its ``koordinator-root-quota``, ``koordinator-system-quota``
  and ``koordinator-default-quota`` ElasticQuotas there when it starts
  (``pkg/scheduler/plugins/elasticquota/plugin.go``, ``New``), its
  ``quotaGroupNamespace`` (:func:`koordinator_scheduler_config`).
* **RBAC**: :func:`koordinator_rbac`.

How work is declared for it (Koordinator v1.6.0, ``apis/extension``):

* **A gang**: the pod annotations ``gang.scheduling.koordinator.sh/name`` and
  ``gang.scheduling.koordinator.sh/min-available`` (:func:`gang_annotations`), or a
  ``scheduling.sigs.k8s.io/v1alpha1`` PodGroup named by the pod label
  ``pod-group.scheduling.sigs.k8s.io``. Its default mode is ``StrictMode``: when one member
  fails to schedule, the members waiting at Permit are rejected and the gang retries.
* **A quota**: a ``scheduling.sigs.k8s.io/v1alpha1`` ElasticQuota (``spec.min``,
  ``spec.max``). A pod belongs to the quota named by its label
  ``quota.scheduling.koordinator.sh/name``, else to an ElasticQuota named as its namespace in
  that namespace, else to one whose annotation ``quota.scheduling.koordinator.sh/namespaces``
  lists its namespace, else to ``koordinator-default-quota``
  (``pkg/scheduler/plugins/elasticquota/plugin_helper.go``, ``GetQuotaName``).
  :func:`elastic_quota` writes one that claims its namespace by that annotation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .binaries import ensure_binaries, ensure_peer
from .common import Json
from .controlplane import ControlPlane
from .peers import scheduler_user_role

#: koord-scheduler v1.6.0 is built against Kubernetes 1.28 libraries. It runs beside the
#: oldest control plane the harness builds, 1.35: that is outside Kubernetes' version-skew
#: policy (a kube-scheduler may be one minor release older than kube-apiserver), but every
#: API it uses (core/v1, events.k8s.io/v1, storage.k8s.io/v1, policy/v1,
#: coordination.k8s.io/v1 and the CRDs) is still served.
KOORDINATOR_KUBERNETES = "1.35"
#: Where the ElasticQuota plugin keeps its root, system and default quotas (its
#: ``quotaGroupNamespace``: the module's ``config/manager/scheduler-config.yaml`` and
#: the default in ``pkg/scheduler/apis/config/v1/defaults.go``).
QUOTA_GROUP_NAMESPACE = "koordinator-system"
#: The scheduler name its profile answers to (the harness's pods use the default).
SCHEDULER_NAME = "default-scheduler"
GANG_NAME = "gang.scheduling.koordinator.sh/name"
GANG_MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"
GANG_WAITING_TIME = "gang.scheduling.koordinator.sh/waiting-time"
QUOTA_NAME_LABEL = "quota.scheduling.koordinator.sh/name"
QUOTA_PARENT_LABEL = "quota.scheduling.koordinator.sh/parent"
QUOTA_IS_PARENT_LABEL = "quota.scheduling.koordinator.sh/is-parent"
QUOTA_NAMESPACES_ANNOTATION = "quota.scheduling.koordinator.sh/namespaces"
ELASTIC_QUOTA_API = "scheduling.sigs.k8s.io/v1alpha1"
#: The plugins of the module's documented profile that read what only koordlet reports
#: (NodeMetric, Device, NodeResourceTopology objects), disabled here: without a
#: koordlet, DeviceShare would refuse every ``nvidia.com/gpu`` pod (it takes that
#: resource as a device request and finds no Device object), LoadAwareScheduling has no
#: NodeMetric to read, NodeNUMAResource no topology.
KOORDLET_PLUGINS = ("LoadAwareScheduling", "NodeNUMAResource", "DeviceShare")


def koordinator_crds_dir(bin_dir: Path | None = None) -> Path:
    """The CRDs of the pinned module next to the binary (``<bin>/crds``), building the
    peer if needed when ``bin_dir`` is not given."""
    return (bin_dir or ensure_peer("koordinator")) / "crds"


def koordinator_scheduler_config(*, gang_timeout_seconds: int = 600) -> Json:
    """koord-scheduler's documented configuration for ElasticQuota and Coscheduling: the
    profile of the module's ``config/manager/scheduler-config.yaml`` (v1.6.0), with the
    plugins that need koordlet's reports (:data:`KOORDLET_PLUGINS`) left out, as the top-
    level fields of a KubeSchedulerConfiguration for ``ControlPlane(scheduler_config=...)``.

    Kept from that file, extension point by extension point: Coscheduling at preEnqueue,
    queueSort (in place of PrioritySort), preFilter, postFilter, reserve, permit and
    postBind; ElasticQuota at preFilter, postFilter and reserve; Reservation at preFilter,
    filter, postFilter, preScore, score (weight 5000), preBind and bind (with
    DefaultBinder); DefaultPreBind at preBind; postFilter otherwise DefaultPreemption only;
    ElasticQuotaArgs ``quotaGroupNamespace: koordinator-system``. Its NodeResourcesFit
    scoring over batch-cpu/batch-memory (colocation resources koord-manager reports) is
    left at kube-scheduler's default, and ``schedulerName`` is the harness's
    ``default-scheduler`` rather than ``koord-scheduler``. Coscheduling's
    ``defaultTimeout`` (the gang's Permit wait) keeps its default, 600 s
    (``pkg/scheduler/apis/config/v1/defaults.go``), unless ``gang_timeout_seconds`` says
    otherwise."""
    disabled = [{"name": name} for name in KOORDLET_PLUGINS]

    def enabled(*names: str) -> list[dict[str, Any]]:
        return [{"name": name} for name in names]

    return {
        "profiles": [
            {
                "schedulerName": SCHEDULER_NAME,
                "plugins": {
                    "preEnqueue": {"enabled": enabled("Coscheduling")},
                    "queueSort": {"disabled": [{"name": "*"}], "enabled": enabled("Coscheduling")},
                    "preFilter": {
                        "enabled": enabled("Reservation", "Coscheduling", "ElasticQuota"),
                        "disabled": disabled,
                    },
                    "filter": {"enabled": enabled("Reservation"), "disabled": disabled},
                    "postFilter": {
                        "disabled": [{"name": "*"}],
                        "enabled": enabled(
                            "Reservation", "Coscheduling", "ElasticQuota", "DefaultPreemption"
                        ),
                    },
                    "preScore": {"enabled": enabled("Reservation"), "disabled": disabled},
                    "score": {
                        "enabled": [{"name": "Reservation", "weight": 5000}],
                        "disabled": disabled,
                    },
                    "reserve": {
                        "enabled": enabled("Coscheduling", "ElasticQuota"),
                        "disabled": disabled,
                    },
                    "permit": {"enabled": enabled("Coscheduling")},
                    "preBind": {
                        "enabled": enabled("Reservation", "DefaultPreBind"),
                        "disabled": disabled,
                    },
                    "bind": {
                        "disabled": [{"name": "*"}],
                        "enabled": enabled("Reservation", "DefaultBinder"),
                    },
                    "postBind": {"enabled": enabled("Coscheduling")},
                },
                "pluginConfig": [
                    {
                        "name": "ElasticQuota",
                        "args": {
                            "apiVersion": "kubescheduler.config.k8s.io/v1",
                            "kind": "ElasticQuotaArgs",
                            "quotaGroupNamespace": QUOTA_GROUP_NAMESPACE,
                        },
                    },
                    {
                        "name": "Coscheduling",
                        "args": {
                            "apiVersion": "kubescheduler.config.k8s.io/v1",
                            "kind": "CoschedulingArgs",
                            "defaultTimeout": f"{gang_timeout_seconds}s",
                        },
                    },
                ],
            }
        ]
    }


def koordinator_rbac() -> list[Json]:
    """What koord-scheduler reads and writes beyond kube-scheduler's own rights: the
    module's ``config/rbac/scheduler_role.yaml`` (v1.6.0) -- leases, patching pods,
    reading CRDs, and everything on the config/slo/scheduling.koordinator.sh,
    topology.node.k8s.io and scheduling.sigs.k8s.io kinds -- bound to the scheduler's user
    (``scheduler_role_binding.yaml`` binds it, with ``system:kube-scheduler`` and
    ``system:volume-scheduler``, which that user already has, to its ServiceAccount)."""
    return scheduler_user_role(
        "koordinator-scheduler-peer",
        [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["create", "get", "update"],
            },
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
            {
                "apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"],
                "verbs": ["get", "list", "patch", "update", "watch"],
            },
            {
                "apiGroups": [
                    "config.koordinator.sh",
                    "slo.koordinator.sh",
                    "scheduling.koordinator.sh",
                    "topology.node.k8s.io",
                    "scheduling.sigs.k8s.io",
                ],
                "resources": ["*"],
                "verbs": ["*"],
            },
        ],
    )


class KoordinatorControlPlane(ControlPlane):
    """A ``ControlPlane`` whose scheduler is koord-scheduler. It differs from kube-scheduler
    in what the harness sees:

    * its serving endpoint has ``/healthz`` but no ``/readyz`` (``newHealthzAndMetricsHandler``
      in ``cmd/koord-scheduler/app/server.go`` installs healthz, metrics, configz and its
      services API only), so readiness is ``/healthz``;
    * it keeps the deprecated insecure port (``--port``, default 10251, on every interface):
      ``--port=0`` turns it off, as its help says, so that two planes never collide;
    * :data:`QUOTA_GROUP_NAMESPACE` is created before each (re)start.

    ``max_unschedulable_seconds`` (``None``: its default, 300 s) is its
    ``--pod-max-in-unschedulable-pods-duration`` (a deprecated flag koord-scheduler still
    has, as kube-scheduler 1.28 does): how long a pod stays in the unschedulable pool,
    with no event to move it, before it is tried again (a sweep every 30 s). It matters
    for gangs on a quiet cluster: Coscheduling's PreEnqueue rejects a member while its
    gang cache has not yet counted min-available members, and the gang cache learns of a
    new pod from its own handler of the pod informer, which can run after the scheduling
    queue's (seen here: ``PreEnqueue failed ... gang child pod not collect enough`` for the
    last member logged before ``SetChild`` of that member). A gated member is tried again
    on the next pod creation or PodGroup change (Coscheduling's ``EventsToRegister``); when
    the last member of a gang loses that race and nothing else is created, the gang waits
    for this sweep.
    """

    #: koord-scheduler serves no ``/readyz``.
    scheduler_ready_path = "/healthz"

    def __init__(self, *, max_unschedulable_seconds: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_unschedulable_seconds = max_unschedulable_seconds

    def _scheduler_argv(self) -> list[str]:
        argv = [*super()._scheduler_argv(), "--port=0"]
        if self.max_unschedulable_seconds is not None:
            argv.append(
                f"--pod-max-in-unschedulable-pods-duration={self.max_unschedulable_seconds}s"
            )
        return argv

    def start_scheduler(self) -> None:
        self.create_namespace(QUOTA_GROUP_NAMESPACE)
        super().start_scheduler()


def koordinator_control_plane(
    *,
    bin_dir: Path | None = None,
    peer_dir: Path | None = None,
    gang_timeout_seconds: int = 600,
    max_unschedulable_seconds: float | None = None,
    **kwargs: Any,
) -> KoordinatorControlPlane:
    """A control plane (not started) running koord-scheduler with
    :func:`koordinator_scheduler_config`, :func:`koordinator_rbac` and Koordinator's CRDs.

    ``bin_dir``: the control plane's binaries (``ensure_binaries(version=
    KOORDINATOR_KUBERNETES)`` when ``None``); ``peer_dir``: koord-scheduler's bin directory
    (``ensure_peer("koordinator")`` when ``None``); ``gang_timeout_seconds``: Coscheduling's
    ``defaultTimeout``; ``max_unschedulable_seconds``: see :class:`KoordinatorControlPlane`;
    the other ``kwargs`` go to ``ControlPlane``
    (``scheduler_config`` entries are added to the profile's top-level fields, e.g.
    ``podMaxBackoffSeconds``)."""
    peer_dir = peer_dir or ensure_peer("koordinator")
    config = koordinator_scheduler_config(gang_timeout_seconds=gang_timeout_seconds)
    config.update(kwargs.pop("scheduler_config", None) or {})
    return KoordinatorControlPlane(
        bin_dir=bin_dir or ensure_binaries(version=KOORDINATOR_KUBERNETES),
        scheduler_binary=peer_dir / "koord-scheduler",
        scheduler_config=config,
        scheduler_rbac=koordinator_rbac(),
        crds_dir=koordinator_crds_dir(peer_dir),
        max_unschedulable_seconds=max_unschedulable_seconds,
        **kwargs,
    )


def gang_annotations(name: str, min_available: int) -> dict[str, str]:
    """The pod annotations that make a pod a member of Koordinator gang ``name`` of at
    least ``min_available`` members (``apis/extension/coscheduling.go``)."""
    return {GANG_NAME: name, GANG_MIN_AVAILABLE: str(min_available)}


def elastic_quota(name: str, namespace: str, *, min: dict[str, Any], max: dict[str, Any]) -> Json:
    """A ``scheduling.sigs.k8s.io/v1alpha1`` ElasticQuota ``name`` in ``namespace`` for
    koord-scheduler: a leaf of the root quota (``quota.scheduling.koordinator.sh/parent``
    unset, ``is-parent: "false"``) whose pods are those of ``namespace`` (its annotation
    ``quota.scheduling.koordinator.sh/namespaces``) and any pod labelled
    ``quota.scheduling.koordinator.sh/name: <name>``."""
    return {
        "apiVersion": ELASTIC_QUOTA_API,
        "kind": "ElasticQuota",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUOTA_IS_PARENT_LABEL: "false"},
            "annotations": {QUOTA_NAMESPACES_ANNOTATION: json.dumps([namespace])},
        },
        "spec": {"min": dict(min), "max": dict(max)},
    }
