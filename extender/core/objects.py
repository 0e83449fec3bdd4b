"""The core's view of Kubernetes objects: nodes and pods.

Front doors hand the core ordinary Kubernetes JSON (camelCase dicts, as
``kubectl get -o yaml``, the API server and kube-scheduler's extender calls
all produce); the ``parse_*`` functions here turn them into small immutable
records holding just what scheduling decisions read.  Invalid input raises
:class:`ManifestError` naming the field and the bad value, never anything
else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from base import keys
from base.errors import ManifestError
from base.fields import mapping, mappings, object_name, string, string_map
from base.resources import parse_resource_list, pod_requests
from base.times import claimed_time, parse_time, seconds
from extender.core.constraints import (
    NodeSelectorTerm,
    Taint,
    Toleration,
    parse_node_selector,
    parse_tolerations,
)
from extender.core.dra.podclaims import PodDevices, parse_pod_devices
from extender.core.marks import read_mark
from extender.core.priorities import NO_PRIORITY_CLASSES, PriorityClasses


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[Taint, ...]
    unschedulable: bool


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod, as the scheduling core sees it."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    priority: int
    created: float  # epoch seconds
    started: float | None  # status.startTime, epoch seconds
    node_name: str | None
    phase: str
    terminating: bool  # metadata.deletionTimestamp is set
    requests: Mapping[str, int]
    node_selector: Mapping[str, str]
    required_affinity: tuple[NodeSelectorTerm, ...] | None
    tolerations: tuple[Toleration, ...]
    preemption_policy: str
    nominated_node_name: str | None
    #: Constraints the core cannot simulate (inter-pod affinity, spread, ...).
    unsupported: tuple[str, ...]
    #: ``metadata.resourceVersion``: with ``uid``, names exactly this version of the pod.
    resource_version: str = ""
    #: Who is preempting this pod: the component named by a ``DisruptionTarget=True``
    #: condition with reason ``PreemptionByScheduler`` (its message starts with the
    #: component's name: ``default-scheduler``, or ``muster`` for Muster's own marks).
    preempted_by: str | None = None
    #: Muster's ``muster.dev/AdmittedPreemptible=True`` condition: admitted preemptible,
    #: the pod stays so whatever its label says now (:mod:`extender.core.state.membership`).
    admitted_preemptible: bool = False
    #: ``Kind/name`` of the controller that owns the pod (its ``ownerReferences`` entry
    #: with ``controller: true``): one that re-creates the pod if it is deleted.
    controller: str | None = None
    #: The pod group the pod's spec names (Kubernetes' own gang API, KEP-4671):
    #: ``schedulingGroup.podGroupName`` (v1.36+), else ``workloadRef`` (v1.35).
    spec_group: str | None = None
    #: For a 1.35 ``workloadRef`` with a replica key: ``<workload>-<podGroup>``, the name
    #: the Workload declares the size under (every replica's pods are a gang of that size).
    declared_by: str | None = None
    #: ``metadata.deletionTimestamp`` (epoch seconds): when the kubelet is to have killed
    #: the pod (the deletion time plus its grace period); ``None`` unless terminating.
    deletion_deadline: float | None = None
    #: What the pod asks of Dynamic Resource Allocation (its claims), and its requests and
    #: constraints before DRA's devices are counted in (``None``: it asks nothing DRA
    #: could serve); :mod:`extender.core.dra` resolves them into ``requests``.
    devices: PodDevices | None = None
    #: ``spec.schedulingGates`` is not empty: kube-scheduler does not try the pod until
    #: its gates are removed, so it waits for them, not for room.
    gated: bool = False
    #: When the pod was bound to its node: its ``PodScheduled=True`` condition's
    #: ``lastTransitionTime``, which the API server sets at binding (a tenant does not
    #: write pod status); ``None`` when not bound or not said.
    bound: float | None = None
    #: ``namespace/name``.
    key: str = field(init=False)
    #: The pod-group name (for an all-or-nothing controller's pods with none, the
    #: controller's name), or ``None`` for a pod that is a job of its own.
    group: str | None = field(init=False)
    #: ``namespace/job``: the pod group's name, else the pod's own name.
    job: str = field(init=False)
    #: Marked for soft eviction already (the label is present).
    soft_evicted: bool = field(init=False)
    #: The job a soft-eviction mark names as its preemptor (``None``: no mark, or a mark
    #: for no job, such as a ``HoldAndDrain`` drain, or one Muster cannot read).
    marked_for: str | None = field(init=False)
    #: When the soft-eviction mark was written (its ``timestamp``), if Muster can read it.
    marked_at: float | None = field(init=False)
    #: The notice the mark gives the pod before its eviction (seconds; 0: none).
    marked_notice: float = field(init=False)
    #: ``started``; else, for a pod bound but not yet seen started, ``bound`` (its work
    #: has not begun: the kubelet has yet to say so); else ``created``.  A job's
    #: admission, for its minimum runtime, and the start its declared saves count from.
    start_or_created: float = field(init=False)
    #: When the work a pod would lose began: the later of ``start_or_created`` and its
    #: ``muster.dev/last-checkpoint`` (a time the job wrote: lying only makes its own pod
    #: the cheaper victim).
    work_started: float = field(init=False)

    def __post_init__(self) -> None:
        group = self.spec_group or _group_name(self.labels, self.annotations, self.controller)
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "job", f"{self.namespace}/{group or self.name}")
        object.__setattr__(self, "soft_evicted", keys.SOFT_EVICTION_KEY in self.labels)
        marked_for = marked_at = None
        notice = 0.0
        if self.soft_evicted and keys.SOFT_EVICTION_KEY in self.annotations:
            mark = read_mark(self.annotations[keys.SOFT_EVICTION_KEY])
            marked_for, marked_at, notice = mark.preemptor, mark.timestamp, mark.notice_seconds
        object.__setattr__(self, "marked_for", marked_for)
        object.__setattr__(self, "marked_at", marked_at)
        object.__setattr__(self, "marked_notice", notice)
        start = self.created
        if self.started is not None:
            start = self.started
        elif self.node_name is not None and self.bound is not None:
            start = max(self.bound, self.created)
        object.__setattr__(self, "start_or_created", start)
        saved = claimed_time(self.annotations.get(keys.LAST_CHECKPOINT_ANNOTATION))
        object.__setattr__(self, "work_started", max(start, saved or start))

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def waiting_to_bind(self) -> bool:
        """Not bound yet, and neither finished nor terminating: work waiting for room."""
        return self.node_name is None and not self.finished and not self.terminating

    @property
    def checkpoint_interval(self) -> float | None:
        """How often its job says it saves (``muster.dev/checkpoint-interval-seconds``,
        seconds from its start); ``None`` when it declares no interval (or 0)."""
        return seconds(self.annotations.get(keys.CHECKPOINT_INTERVAL_ANNOTATION)) or None

    @property
    def departing(self) -> bool:
        """On its way out already: marked for soft eviction, terminating, or preempted by
        another component (never a victim again, never counted as freed twice).  Muster's
        own ``DisruptionTarget`` without its mark is no departure: Muster marks a victim
        before it writes the condition, so someone else took the mark off (the victim is
        marked again while a plan counts on it: :mod:`extender.core.preemption.completion`),
        or a plan ended and its condition was left behind."""
        return (
            self.soft_evicted
            or self.terminating
            or (self.preempted_by is not None and self.preempted_by != keys.MUSTER_COMPONENT)
        )


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _group_name(
    labels: Mapping[str, str], annotations: Mapping[str, str], controller: str | None
) -> str | None:
    """The pod group a pod's labels and annotations name, in this order: the
    scheduler-plugins labels, Volcano's annotations, Kueue's label, Koordinator's
    annotation; else, for the pod of a controller whose template says all-or-nothing, the
    controller's name (its pods are one gang); else ``None``."""
    for label in (keys.POD_GROUP_LABEL, keys.POD_GROUP_NAME_LABEL, keys.POD_GROUP_X_K8S_LABEL):
        name = labels.get(label)
        if name:
            return name
    for annotation in keys.VOLCANO_GROUP_ANNOTATIONS:
        if annotations.get(annotation):
            return annotations[annotation]
    if labels.get(keys.KUEUE_POD_GROUP_LABEL):
        return labels[keys.KUEUE_POD_GROUP_LABEL]
    named = annotations.get(keys.GANG_NAME_ANNOTATION)
    if named:
        return named
    if controller is not None and labels.get(keys.ALL_OR_NOTHING_LABEL) == "true":
        return controller.split("/", 1)[1]
    return None


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    """A Node object (camelCase JSON) → :class:`NodeInfo`."""
    metadata = mapping(obj.get("metadata"), "metadata")
    spec = mapping(obj.get("spec"), "spec")
    status = mapping(obj.get("status"), "status")
    name = object_name(metadata)
    allocatable = status.get("allocatable")
    if allocatable is None:
        allocatable = status.get("capacity")
    taints = tuple(
        Taint(
            key=string(taint.get("key"), f"spec.taints[{index}].key"),
            value=string(taint.get("value"), f"spec.taints[{index}].value"),
            effect=string(taint.get("effect"), f"spec.taints[{index}].effect"),
        )
        for index, taint in enumerate(mappings(spec.get("taints"), "spec.taints"))
    )
    return NodeInfo(
        name=name,
        labels=string_map(metadata.get("labels"), "metadata.labels"),
        allocatable=parse_resource_list(allocatable, "status.allocatable"),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable", False)),
    )


def parse_pod(obj: Mapping[str, Any], priorities: PriorityClasses = NO_PRIORITY_CLASSES) -> PodInfo:
    """A Pod object (camelCase JSON) → :class:`PodInfo`."""
    metadata = mapping(obj.get("metadata"), "metadata")
    spec = mapping(obj.get("spec"), "spec")
    status = mapping(obj.get("status"), "status")
    name = object_name(metadata)
    namespace = string(metadata.get("namespace") or "default", "metadata.namespace")
    requests = pod_requests(spec)
    created = parse_time(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
    affinity = mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    unsupported = _unsupported_constraints(spec, affinity)
    policy = spec.get("preemptionPolicy") or "PreemptLowerPriority"
    if policy not in ("PreemptLowerPriority", "Never"):
        raise ManifestError("spec.preemptionPolicy", f"unknown policy {policy!r}")
    return PodInfo(
        namespace=namespace,
        name=name,
        uid=string(metadata.get("uid") or f"{namespace}/{name}", "metadata.uid"),
        labels=string_map(metadata.get("labels"), "metadata.labels"),
        annotations=string_map(metadata.get("annotations"), "metadata.annotations"),
        priority=priorities.resolve(spec),
        created=created if created is not None else 0.0,
        started=parse_time(status.get("startTime"), "status.startTime"),
        node_name=string(spec.get("nodeName") or "", "spec.nodeName") or None,
        phase=string(status.get("phase") or "Pending", "status.phase"),
        terminating=metadata.get("deletionTimestamp") is not None,
        deletion_deadline=parse_time(
            metadata.get("deletionTimestamp"), "metadata.deletionTimestamp"
        ),
        requests=requests,
        node_selector=string_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        required_affinity=(
            None
            if required is None
            else parse_node_selector(
                required,
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            )
        ),
        tolerations=parse_tolerations(spec.get("tolerations")),
        preemption_policy=policy,
        nominated_node_name=status.get("nominatedNodeName") or None,
        unsupported=unsupported,
        resource_version=string(metadata.get("resourceVersion") or "", "metadata.resourceVersion"),
        preempted_by=preempting_component(status),
        admitted_preemptible=_admitted_preemptible(status),
        controller=_controller(metadata),
        devices=parse_pod_devices(spec, status, requests, unsupported),
        gated=bool(mappings(spec.get("schedulingGates"), "spec.schedulingGates")),
        bound=_bound_at(status),
        **_spec_group(spec),
    )


def _spec_group(spec: Mapping[str, Any]) -> dict[str, str | None]:
    """The pod group ``spec`` names through Kubernetes' own gang API (``spec_group``,
    and ``declared_by``), read leniently (an alpha field whose shape changes between
    releases is ignored, never an error): ``schedulingGroup.podGroupName`` (v1.36+: a
    PodGroup object of that name), else ``workloadRef`` (v1.35: ``name``, ``podGroup``
    and ``podGroupReplicaKey`` joined by ``-``; the Workload declares the size of
    ``name-podGroup``, which is every replica's)."""
    group = spec.get("schedulingGroup")
    if isinstance(group, Mapping) and isinstance(group.get("podGroupName"), str):
        return {"spec_group": group["podGroupName"] or None}
    ref = spec.get("workloadRef")
    if isinstance(ref, Mapping) and isinstance(ref.get("name"), str) and ref["name"]:
        parts = [ref["name"]]
        if isinstance(ref.get("podGroup"), str) and ref["podGroup"]:
            parts.append(ref["podGroup"])
        declared = "-".join(parts)
        replica = ref.get("podGroupReplicaKey")
        if isinstance(replica, str) and replica:
            return {"spec_group": f"{declared}-{replica}", "declared_by": declared}
        return {"spec_group": declared}
    return {}


def _controller(metadata: Mapping[str, Any]) -> str | None:
    """``Kind/name`` of the owner reference marked ``controller: true``, if any."""
    owners = metadata.get("ownerReferences") or []
    if not isinstance(owners, list):
        raise ManifestError("metadata.ownerReferences", f"expected a list, got {owners!r}")
    for index, owner in enumerate(owners):
        where = f"metadata.ownerReferences[{index}]"
        owner = mapping(owner, where)
        if owner.get("controller") is True:
            kind = string(owner.get("kind"), f"{where}.kind")
            return f"{kind}/{string(owner.get('name'), f'{where}.name')}"
    return None


#: :attr:`PodInfo.preempted_by` when the condition's message names no component.
UNNAMED_COMPONENT = "unknown"


def preempting_component(status: Mapping[str, Any]) -> str | None:
    """The component a ``DisruptionTarget=True/PreemptionByScheduler`` condition names:
    kube-scheduler writes ``"<schedulerName>: preempting to accommodate a higher priority
    pod"``, Muster ``"muster: preempted by job ..."``."""
    for index, condition in enumerate(mappings(status.get("conditions"), "status.conditions")):
        if (
            condition.get("type") == "DisruptionTarget"
            and condition.get("status") == "True"
            and condition.get("reason") == keys.PREEMPTION_BY_SCHEDULER
        ):
            message = string(condition.get("message"), f"status.conditions[{index}].message")
            component, colon, _rest = message.partition(":")
            return component.strip() if colon and component.strip() else UNNAMED_COMPONENT
    return None


def _bound_at(status: Mapping[str, Any]) -> float | None:
    """When the pod was bound: its ``PodScheduled=True`` condition's
    ``lastTransitionTime``, or ``None``."""
    for index, condition in enumerate(mappings(status.get("conditions"), "status.conditions")):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            where = f"status.conditions[{index}].lastTransitionTime"
            return parse_time(condition.get("lastTransitionTime"), where)
    return None


def _admitted_preemptible(status: Mapping[str, Any]) -> bool:
    """Does the pod carry Muster's ``muster.dev/AdmittedPreemptible=True`` condition?"""
    return any(
        condition.get("type") == keys.ADMITTED_PREEMPTIBLE_CONDITION
        and condition.get("status") == "True"
        for condition in mappings(status.get("conditions"), "status.conditions")
    )


def _unsupported_constraints(
    spec: Mapping[str, Any], affinity: Mapping[str, Any]
) -> tuple[str, ...]:
    found = []
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = mapping(affinity.get(kind), f"spec.affinity.{kind}")
        if terms.get("requiredDuringSchedulingIgnoredDuringExecution"):
            found.append(f"required {kind}")
    spread = mappings(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints")
    if any(c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule" for c in spread):
        found.append("topologySpreadConstraints (DoNotSchedule)")
    containers = mappings(spec.get("containers"), "spec.containers") + mappings(
        spec.get("initContainers"), "spec.initContainers"
    )
    if any(
        port.get("hostPort")
        for container in containers
        for port in mappings(container.get("ports"), "spec.containers[].ports")
    ):
        found.append("hostPort")
    volumes = mappings(spec.get("volumes"), "spec.volumes")
    if any("persistentVolumeClaim" in volume for volume in volumes):
        found.append("persistentVolumeClaim volumes")
    return tuple(found)
