"""Read Kubernetes manifests (YAML files) into a :class:`ClusterState`.

The input of ``muster simulate`` and ``muster serve --snapshot``: what
``kubectl get nodes,pods,elasticquotas,podgroups,priorityclasses -A -o yaml``
prints, plus the jobs a user is about to submit.  ``kind: List`` documents
are unpacked.  Every problem becomes an :class:`~extender.cli.errors.InputError`
that names the file, the document (1-based, ``#3`` or ``#3.items[0]`` inside a
List), the object's kind and name, the field, and the bad value.  Unknown kinds
are skipped with a note.

The files are read into documents by :mod:`extender.cli.documents`; here each
document is parsed by the core's parsers (as the live informer parses the same
objects) and loaded, kind by kind, in the order the objects refer to each other:
PriorityClasses and quotas, nodes, DRA's objects (DeviceClasses, ResourceSlices,
ResourceClaimTemplates, ResourceClaims), what declares and sizes gangs, budgets, then pods.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from base import keys
from base.errors import ManifestError
from extender.cli.documents import Document, read_documents
from extender.core.budgets import parse_pod_disruption_budget
from extender.core.config import MusterArgs
from extender.core.dra import DRA_API_VERSION, DRA_KINDS
from extender.core.effects import apply
from extender.core.gangsize import gang_size
from extender.core.jobs import OWNER_KINDS, min_available_annotation, parse_owner_size
from extender.core.objects import PodInfo, parse_node, parse_pod
from extender.core.podgroups import GANG_OBJECT_KINDS, gang_object_kind
from extender.core.priorities import PriorityClasses, parse_priority_class
from extender.core.records import RecordKeys, believed_pod, without_records
from extender.core.reservations import record_problems, restored_effects
from extender.core.state import ClusterState
from extender.core.topology import (
    KUEUE_TOPOLOGY_GROUP,
    SliceRequest,
    check_slice_size,
    parse_kueue_topology,
    pod_slice_request,
    pod_topology_request,
)
from quota.tree import QuotaSpec, QuotaTreeError, parse_elastic_quota

_T = TypeVar("_T")
QUOTA_GROUPS = ("scheduling.x-k8s.io/v1alpha1", "scheduling.sigs.k8s.io/v1alpha1")
#: Kueue's Topology in the versions v0.15.0 serves (the same ``spec.levels`` in both).
KUEUE_TOPOLOGY_API_VERSIONS = tuple(f"{KUEUE_TOPOLOGY_GROUP}/{v}" for v in ("v1beta1", "v1beta2"))


@dataclass
class LoadedManifests:
    state: ClusterState
    notes: list[str] = field(default_factory=list)


def load_manifests(
    paths: Sequence[str | Path],
    args: MusterArgs,
    record_keys: RecordKeys | None = None,
    *,
    tenant_input: bool = False,
) -> LoadedManifests:
    """Parse, validate and load every object of ``paths`` into a new state.  With
    ``record_keys``, records on pods that they do not verify are dropped first, as the
    live informer drops them (:func:`extender.core.records.believed_pod`), each with a
    note; without, the records are believed as written (the files are the admin's).

    ``tenant_input``: the files are a dump of a live cluster (``kubectl muster``), whose
    pods' labels and annotations tenants wrote: a pod's quota label Muster would refuse,
    or a record Muster could not have written, is then a note (the label refused as the
    live Muster refuses it, the record dropped as the informer drops it), not an input
    error, so one tenant's pod cannot stop everyone's what-if."""
    notes: list[str] = []
    by_kind = _sorted_by_kind(read_documents(paths), notes)
    priorities = _priority_classes(by_kind["PriorityClass"])
    state = _with_quotas(ClusterState(args), by_kind["ElasticQuota"])
    _load_nodes(state, by_kind.pop("Node"))
    _load_dra(state, by_kind)
    _load_declarations(state, by_kind)
    pods = _PodLoader(state, priorities, record_keys, tenant_input, notes)
    pods.load(by_kind.pop("Pod"))
    pods.check_slices()
    return LoadedManifests(state, notes)


def _sorted_by_kind(documents: Iterable[Document], notes: list[str]) -> dict[str, list[Document]]:
    """The documents of each kind Muster reads, in order; each other one is a note."""
    by_kind: dict[str, list[Document]] = {
        "Node": [],
        "Pod": [],
        "ElasticQuota": [],
        **{kind.kind: [] for kind in GANG_OBJECT_KINDS},
        "PriorityClass": [],
        "PodDisruptionBudget": [],
        "Topology": [],
        **{kind: [] for kind in OWNER_KINDS},
        **{kind: [] for kind in DRA_KINDS},
    }
    for document in documents:
        if document.kind not in by_kind:
            notes.append(
                f"{document.path} document {document.index}: ignored kind {document.kind!r}"
            )
            continue
        ignored = _ignored_version(document)
        if ignored is not None:
            notes.append(f"{document.path} document {document.index}: ignored {ignored}")
            continue
        by_kind[document.kind].append(document)
    return by_kind


def _ignored_version(document: Document) -> str | None:
    """Why a document of a kind Muster reads is ignored (an ``apiVersion`` it does not
    read), or ``None``."""
    kind, version = document.kind, document.obj.get("apiVersion")
    if (kind in ("PodGroup", "Workload") and gang_object_kind(version, kind) is None) or (
        kind == "ElasticQuota" and version not in QUOTA_GROUPS
    ):
        return f"{kind} of apiVersion {version!r}"
    if kind == "Topology" and version not in KUEUE_TOPOLOGY_API_VERSIONS:
        return f"Topology of apiVersion {version!r} (Kueue's is read)"
    if kind == "PodDisruptionBudget" and version != "policy/v1":
        return f"PodDisruptionBudget of apiVersion {version!r} (policy/v1 is read)"
    if kind in DRA_KINDS and version != DRA_API_VERSION:
        return f"{kind} of apiVersion {version!r} ({DRA_API_VERSION} is read)"
    if kind in OWNER_KINDS and version != OWNER_KINDS[kind][0]:
        return f"{kind} of apiVersion {version!r} ({OWNER_KINDS[kind][0]} is read)"
    return None


def _parse(document: Document, parser: Callable[[Mapping[str, Any]], _T]) -> _T:
    try:
        return parser(document.obj)
    except ManifestError as error:
        raise document.error(error.field, error.message) from None


def _priority_classes(documents: list[Document]) -> PriorityClasses:
    values: dict[str, int] = {}
    default: tuple[str, int] | None = None
    for document in documents:
        name, value, is_default = _parse(document, parse_priority_class)
        if name in values:
            raise document.error("metadata.name", f"duplicate PriorityClass name {name!r}")
        values[name] = value
        if is_default:
            if default is not None:
                raise document.error(
                    "globalDefault", f"PriorityClass {default[0]!r} is the global default already"
                )
            default = (name, value)
    return PriorityClasses(values=values, global_default=default[1] if default else 0)


def _with_quotas(state: ClusterState, documents: list[Document]) -> ClusterState:
    """``state`` with the ElasticQuotas of ``documents`` (one tree; names unique)."""
    quotas: dict[str, tuple[QuotaSpec, Document]] = {}
    for document in documents:
        spec = _parse(document, parse_elastic_quota)
        if spec.name in quotas:
            raise document.error("metadata.name", f"duplicate ElasticQuota name {spec.name!r}")
        quotas[spec.name] = (spec, document)
    try:
        state.set_quotas(spec for spec, _ in quotas.values())
    except QuotaTreeError as error:
        raise quotas[error.quota][1].error(error.field, error.message) from None
    return state


def _load_nodes(state: ClusterState, nodes: list[Document]) -> None:
    """The nodes, each object let go once loaded (``nodes`` is emptied)."""
    nodes.reverse()
    while nodes:
        document = nodes.pop().full()
        node = _parse(document, parse_node)
        if node.name in state.nodes:
            raise document.error("metadata.name", f"duplicate Node name {node.name!r}")
        state.upsert_node(node)


def _load_dra(state: ClusterState, by_kind: Mapping[str, list[Document]]) -> None:
    """DRA's objects, in the order they refer to each other (names unique per kind)."""
    for kind in DRA_KINDS:
        seen: set[str] = set()
        for document in by_kind[kind]:
            metadata = document.obj.get("metadata")
            name = metadata.get("name") if isinstance(metadata, Mapping) else None
            namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
            key = f"{namespace or 'default'}/{name}" if kind.startswith("ResourceClaim") else name
            if key in seen:
                raise document.error("metadata.name", f"duplicate {kind} {key!r}")
            seen.add(str(key))
            try:
                state.set_dra_object(kind, document.obj)
            except ManifestError as error:
                raise document.error(error.field, error.message) from None


def _load_declarations(state: ClusterState, by_kind: Mapping[str, list[Document]]) -> None:
    """What the pods' jobs are read against: Kueue's Topologies, the objects that declare
    gangs (PodGroups, Workloads), the owners that size them, PodDisruptionBudgets."""
    for document in by_kind["Topology"]:
        name, levels = _parse(document, parse_kueue_topology)  # as the live informer reads it
        if name in state.declarations.kueue_topologies:
            raise document.error("metadata.name", f"duplicate Topology {name!r}")
        state.declarations.set_kueue_topology(name, levels)
    for kind in ("PodGroup", "Workload"):
        for document in by_kind[kind]:
            entry = gang_object_kind(document.obj.get("apiVersion"), kind)
            assert entry is not None  # checked as the documents were sorted
            for group in _parse(document, entry.read):
                state.set_pod_group(group)
    for kind in OWNER_KINDS:
        for document in by_kind[kind]:
            state.declarations.set_owner_size(_parse(document, partial(parse_owner_size, kind)))
    for document in by_kind["PodDisruptionBudget"]:
        budget = _parse(document, parse_pod_disruption_budget)
        if budget.key in state.budgets:
            raise document.error("metadata.name", f"duplicate PodDisruptionBudget {budget.key!r}")
        state.set_budget(budget)


class _PodLoader:
    """Loads the pods into ``state`` as the live informer reads them (records checked,
    reservations restored), one document at a time; with ``tenant_input``, a quota label
    or a record Muster would refuse is a note rather than an error."""

    def __init__(
        self,
        state: ClusterState,
        priorities: PriorityClasses,
        record_keys: RecordKeys | None,
        tenant_input: bool,
        notes: list[str],
    ) -> None:
        self.state = state
        self.priorities = priorities
        self.record_keys = record_keys
        self.tenant_input = tenant_input
        self.notes = notes
        #: Each job asking for slices: its first such pod (and document), for the size check.
        self.sliced: dict[str, tuple[SliceRequest, PodInfo, Document]] = {}

    def load(self, pods: list[Document]) -> None:
        """Every pod, each object let go once parsed (``pods`` is emptied; see
        ``_Deferred`` in :mod:`extender.cli.documents`)."""
        pods.reverse()
        while pods:
            self._load(pods.pop().full())

    def check_slices(self) -> None:
        """Each job's slices against its gang size, known once every pod is in."""
        for slices, pod, document in self.sliced.values():
            try:
                check_slice_size(slices, gang_size(self.state, pod))
            except ManifestError as error:
                raise document.error(error.field, error.message) from None

    def _load(self, document: Document) -> None:
        believed, forged = believed_pod(document.obj, self.record_keys)
        document = dataclasses.replace(document, obj=believed)
        pod = _parse(document, lambda obj: parse_pod(obj, self.priorities))
        self.notes.extend(
            f"{pod.key}: ignoring {record}: Muster did not write it" for record in forged
        )
        if pod.key in self.state.pods:
            raise document.error("metadata.name", f"duplicate Pod {pod.key!r}")
        if pod.node_name is not None and pod.node_name not in self.state.nodes:
            raise document.error("spec.nodeName", f"unknown node {pod.node_name!r}")
        self._check_quota_label(document, pod)
        pod = self._without_bad_records(document, pod)
        try:
            min_available_annotation(pod)
            pod_topology_request(pod)
            slices = pod_slice_request(pod)
        except ManifestError as error:
            raise document.error(error.field, error.message) from None
        if slices is not None and pod.job not in self.sliced:
            self.sliced[pod.job] = (slices, pod, document)
        self.state.upsert_pod(pod)
        if pod.node_name is None and not pod.finished:
            for effect in restored_effects(self.state, pod):  # as the live informer does
                apply(self.state, effect)

    def _check_quota_label(self, document: Document, pod: PodInfo) -> None:
        """A quota label naming no quota, or a parent quota: an error (a note for
        ``tenant_input``: the job is refused, as Muster would refuse it)."""
        named = pod.labels.get(keys.QUOTA_NAME_LABEL)
        label_problem = None
        if named and named not in self.state.tree:
            label_problem = f"unknown quota {named!r}"
        elif named and named in self.state.tree.parents:
            label_problem = f"quota {named!r} is a parent quota; pods must use a leaf quota"
        if label_problem is not None:
            if not self.tenant_input:
                raise document.error(f"metadata.labels.{keys.QUOTA_NAME_LABEL}", label_problem)
            self.notes.append(f"{pod.key}: {label_problem}: its job is refused, as Muster would")

    def _without_bad_records(self, document: Document, pod: PodInfo) -> PodInfo:
        """``pod`` without the records Muster could not have written (an error unless
        ``tenant_input``: then each is dropped with a note, as the informer drops it)."""
        problems = record_problems(pod)
        if problems and not self.tenant_input:
            field_name, why = problems[0]
            raise document.error(field_name, why)
        if not problems:
            return pod
        dropped = [field_name.split("annotations.", 1)[1] for field_name, _ in problems]
        pod = parse_pod(without_records(document.obj, dropped), self.priorities)
        self.notes.extend(
            f"{pod.key}: ignoring {record}: {why}"
            for record, (_, why) in zip(dropped, problems, strict=True)
        )
        return pod
