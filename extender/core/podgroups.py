"""The objects that declare a gang, whichever API wrote them, read into one record.

A pod names its gang (:attr:`~extender.core.objects.PodInfo.group`); an object of the
same name in its namespace may declare how many of its pods must run together, how long
it may wait, and which resources must be admitted together.  Four APIs write such
objects, listed in :data:`GANG_OBJECT_KINDS` in the order of precedence the pods' own
keys follow (docs/design.md): Kubernetes' own gang API (KEP-4671: the ``PodGroup`` of
``scheduling.k8s.io`` v1alpha2 in 1.36 and v1beta1 in 1.37, the ``Workload`` of v1alpha1
in 1.35), the scheduler-plugins ``PodGroup`` (both API groups), and Volcano's
``PodGroup``.  Each is parsed here into :class:`PodGroupInfo`; the live source watches
every kind (an API the server does not serve is an empty list) and ``muster simulate``
reads the same kinds from a dump, through the same parsers.  Field names are those of
the pinned versions' own Go types (k8s.io/api v0.35.8, v0.36.3 and v0.37.2; the
scheduler-plugins and Volcano CRDs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from base.errors import ManifestError
from base.resources import Resources, parse_resource_list
from extender.core.topology import TopologyRequest


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    """One gang declaration: its job (``namespace/name``), how many pods must run
    together (``None``: not said, so every pod of the job), ``scheduleTimeoutSeconds``
    (``None``: Muster's ``gangTimeoutSeconds``), and ``minResources``: what the whole
    gang needs admitted together even when fewer pods are declared (a Spark driver with
    ``minMember: 1`` whose executors do not exist yet).  ``rank`` is the declaring kind's
    place in :data:`GANG_OBJECT_KINDS` (lower wins when two APIs declare one job)."""

    namespace: str
    name: str
    min_member: int | None
    schedule_timeout_seconds: int | None = None
    min_resources: Mapping[str, int] = field(default_factory=dict)
    rank: int = 0
    #: The topology level the gang must stay inside (Kubernetes' PodGroup
    #: ``spec.schedulingConstraints.topology[].key``), if declared.
    topology: TopologyRequest | None = None

    @property
    def job(self) -> str:
        return f"{self.namespace}/{self.name}"


def min_resources_hold(min_resources: Mapping[str, int], used: Mapping[str, int]) -> Resources:
    """What a started job's ``minResources`` holds in its quota beyond what its pods use:
    per resource, the declared amount less the job's pods' used requests, where that is
    positive.  A job's quota charge is ``max(used, minResources)`` per resource from its
    first admitted pod until its last pod ends, so the room for pods not created yet (a
    Spark driver's executors) is the job's, not the next team's."""
    return {
        name: amount - used.get(name, 0)
        for name, amount in min_resources.items()
        if amount > used.get(name, 0)
    }


#: Parses one object into the gang declarations it makes (a v1.35 Workload makes one per
#: pod group); a bad field is a :class:`ManifestError` naming it.
GangParser = Callable[[Mapping[str, Any], int], tuple[PodGroupInfo, ...]]


@dataclass(frozen=True, slots=True)
class GangObjectKind:
    """An API whose objects declare gangs: where to watch them and how to read them."""

    group: str
    version: str
    kind: str
    plural: str
    parse: GangParser
    #: Muster writes the status of these objects (the scheduler-plugins PodGroup's
    #: ``phase``, ``scheduled``, ``running`` ...); the others' status belongs to their
    #: own controllers.
    writes_status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def path(self) -> str:
        return f"/apis/{self.group}/{self.version}/{self.plural}"

    @property
    def rank(self) -> int:
        return next(i for i, kind in enumerate(GANG_OBJECT_KINDS) if kind == self)

    def read(self, obj: Mapping[str, Any]) -> tuple[PodGroupInfo, ...]:
        """The declarations ``obj`` makes, ranked by this kind's precedence."""
        return self.parse(obj, self.rank)


def _metadata(obj: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any]]:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        raise ManifestError("metadata.name", "expected a non-empty string")
    if not metadata["name"]:
        raise ManifestError("metadata.name", "expected a non-empty string")
    if not isinstance(spec, Mapping):
        raise ManifestError("spec", f"expected an object, got {type(spec).__name__}")
    return str(metadata.get("namespace") or "default"), metadata["name"], spec


def _positive(value: object, field: str, minimum: int = 1) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive" if minimum == 1 else "a non-negative"
        raise ManifestError(field, f"{value!r} is not {kind} integer")
    return value


def parse_scheduler_plugins_pod_group(obj: Mapping[str, Any], rank: int = 0) -> PodGroupInfo:
    """A scheduler-plugins PodGroup (``scheduling.x-k8s.io`` or ``scheduling.sigs.k8s.io``
    v1alpha1): ``spec.minMember``, ``spec.scheduleTimeoutSeconds``, ``spec.minResources``."""
    namespace, name, spec = _metadata(obj)
    return PodGroupInfo(
        namespace,
        name,
        _positive(spec.get("minMember"), "spec.minMember"),
        _positive(spec.get("scheduleTimeoutSeconds"), "spec.scheduleTimeoutSeconds"),
        parse_resource_list(spec.get("minResources"), "spec.minResources"),
        rank,
    )


def parse_volcano_pod_group(obj: Mapping[str, Any], rank: int = 0) -> PodGroupInfo:
    """A Volcano PodGroup (``scheduling.volcano.sh/v1beta1``): ``spec.minMember`` pods of
    the group must run together (Volcano's gang plugin also wants ``spec.minTaskMember``
    of each task, which is at most that many in all: Muster, which does not tell tasks
    apart, holds the gang to the larger of ``minMember`` and their sum), and
    ``spec.minResources`` must be admitted together."""
    namespace, name, spec = _metadata(obj)
    min_member = _positive(spec.get("minMember"), "spec.minMember", minimum=0)
    tasks = spec.get("minTaskMember") or {}
    if not isinstance(tasks, Mapping):
        raise ManifestError("spec.minTaskMember", f"expected an object, got {tasks!r}")
    task_total = sum(
        _positive(count, f"spec.minTaskMember.{task}", minimum=0) or 0
        for task, count in tasks.items()
    )
    size = max(min_member or 0, task_total)
    return PodGroupInfo(
        namespace,
        name,
        size if size > 0 else None,
        None,
        parse_resource_list(spec.get("minResources"), "spec.minResources"),
        rank,
    )


def _native_policy(policy: object, field: str) -> int | None:
    """``schedulingPolicy`` (or v1alpha1's ``policy``) → the gang's ``minCount``; a basic
    policy (pods scheduled one by one) is a gang of one."""
    if not isinstance(policy, Mapping):
        raise ManifestError(field, f"expected an object, got {policy!r}")
    gang = policy.get("gang")
    if isinstance(gang, Mapping):
        return _positive(gang.get("minCount"), f"{field}.gang.minCount")
    if gang is not None:
        raise ManifestError(f"{field}.gang", f"expected an object, got {gang!r}")
    if "basic" in policy:
        return 1
    raise ManifestError(field, "expected one of gang or basic")


def parse_native_pod_group(obj: Mapping[str, Any], rank: int = 0) -> PodGroupInfo:
    """A Kubernetes PodGroup (``scheduling.k8s.io`` v1alpha2 in 1.36, v1beta1 in 1.37):
    ``spec.schedulingPolicy.gang.minCount`` (a basic policy: a gang of one).  The pods
    it governs name it in ``spec.schedulingGroup.podGroupName``."""
    namespace, name, spec = _metadata(obj)
    min_count = _native_policy(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    topology = _native_topology(spec.get("schedulingConstraints"))
    return PodGroupInfo(namespace, name, min_count, rank=rank, topology=topology)


def _native_topology(constraints: object) -> TopologyRequest | None:
    """``spec.schedulingConstraints.topology[0].key`` (KEP-5732), a required level."""
    if constraints is None:
        return None
    field = "spec.schedulingConstraints"
    if not isinstance(constraints, Mapping):
        raise ManifestError(field, f"expected an object, got {constraints!r}")
    topology = constraints.get("topology") or []
    if not isinstance(topology, list):
        raise ManifestError(f"{field}.topology", f"expected a list, got {topology!r}")
    if not topology:
        return None
    first = topology[0]
    key = first.get("key") if isinstance(first, Mapping) else None
    if not isinstance(key, str) or not key:
        raise ManifestError(f"{field}.topology[0].key", "expected a node label key")
    return TopologyRequest(key, required=True)


def parse_native_workload(obj: Mapping[str, Any], rank: int = 0) -> tuple[PodGroupInfo, ...]:
    """A Kubernetes 1.35 Workload (``scheduling.k8s.io/v1alpha1``): one declaration per
    ``spec.podGroups[]``, named ``<workload>-<podGroup>`` as the pods' ``workloadRef``
    names their group (:func:`extender.core.objects.parse_pod`), with
    ``policy.gang.minCount``."""
    namespace, name, spec = _metadata(obj)
    groups = spec.get("podGroups") or []
    if not isinstance(groups, list):
        raise ManifestError("spec.podGroups", f"expected a list, got {groups!r}")
    declared = []
    for index, group in enumerate(groups):
        where = f"spec.podGroups[{index}]"
        if not isinstance(group, Mapping) or not isinstance(group.get("name"), str):
            raise ManifestError(f"{where}.name", "expected a non-empty string")
        min_count = _native_policy(group.get("policy"), f"{where}.policy")
        declared.append(PodGroupInfo(namespace, f"{name}-{group['name']}", min_count, rank=rank))
    return tuple(declared)


def _one(parse: Callable[[Mapping[str, Any], int], PodGroupInfo]) -> GangParser:
    return lambda obj, rank: (parse(obj, rank),)


#: Every API that declares gangs, in order of precedence (the first to declare a job
#: wins); Muster watches each, and a server that does not serve one lists it empty.
#: Kubernetes 1.37 also serves v1alpha3 PodGroups: the same objects as v1beta1's.
GANG_OBJECT_KINDS: tuple[GangObjectKind, ...] = (
    GangObjectKind(
        "scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups", _one(parse_native_pod_group)
    ),
    GangObjectKind(
        "scheduling.k8s.io", "v1alpha2", "PodGroup", "podgroups", _one(parse_native_pod_group)
    ),
    GangObjectKind("scheduling.k8s.io", "v1alpha1", "Workload", "workloads", parse_native_workload),
    *(
        GangObjectKind(
            group,
            "v1alpha1",
            "PodGroup",
            "podgroups",
            _one(parse_scheduler_plugins_pod_group),
            writes_status=True,
        )
        for group in ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io")
    ),
    GangObjectKind(
        "scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups", _one(parse_volcano_pod_group)
    ),
)


def gang_object_kind(api_version: object, kind: object) -> GangObjectKind | None:
    """The entry of :data:`GANG_OBJECT_KINDS` for a manifest's ``apiVersion`` and
    ``kind``, if it declares gangs."""
    for entry in GANG_OBJECT_KINDS:
        if entry.api_version == api_version and entry.kind == kind:
            return entry
    return None
