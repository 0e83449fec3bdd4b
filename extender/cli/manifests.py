"""Read Kubernetes manifests (YAML files) into a :class:`ClusterState`.

The input of ``muster simulate`` and ``muster serve --snapshot``: what
``kubectl get nodes,pods,elasticquotas,podgroups,priorityclasses -A -o yaml``
prints, plus the jobs a user is about to submit.  ``kind: List`` documents
are unpacked.  Every problem becomes an :class:`InputError` that names the
file, the document (1-based, ``#3`` or ``#3.items[0]`` inside a List), the
object's kind and name, the field, and the bad value.  Unknown kinds are
skipped with a note.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml

from base import keys
from base.errors import ManifestError
from extender.core.budgets import parse_pod_disruption_budget
from extender.core.config import MusterArgs
from extender.core.effects import apply
from extender.core.gangsize import gang_size
from extender.core.jobs import OWNER_KINDS, min_available_annotation, parse_owner_size
from extender.core.objects import (
    PodInfo,
    PriorityClasses,
    parse_node,
    parse_pod,
    parse_priority_class,
)
from extender.core.podgroups import GANG_OBJECT_KINDS, gang_object_kind
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
#: libyaml's loader when PyYAML has it (many times faster than the pure-Python one).
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_JSON = json.JSONDecoder()
#: The kinds a large file has many of, decoded again one at a time (see ``_Deferred``).
_DEFERRED = ("Node", "Pod")
QUOTA_GROUPS = ("scheduling.x-k8s.io/v1alpha1", "scheduling.sigs.k8s.io/v1alpha1")


class InputError(ValueError):
    """Invalid input; the message is one line naming where and what."""


@dataclass(frozen=True, slots=True)
class _Document:
    path: str
    index: str
    obj: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        metadata = self.obj.get("metadata")
        if not isinstance(metadata, Mapping):
            return "?"
        name = str(metadata.get("name", "?"))
        namespace = metadata.get("namespace")
        return f"{namespace}/{name}" if namespace else name

    def full(self) -> _Document:
        """The document with its object decoded, if it was deferred."""
        if isinstance(self.obj, _Deferred):
            return _Document(self.path, self.index, self.obj.load())
        return self

    def error(self, field: str, message: str) -> InputError:
        where = f"{self.path} document {self.index} ({self.kind} {self.name})"
        return InputError(f"{where}: {field}: {message}")


@dataclass
class LoadedManifests:
    snapshot: ClusterState
    notes: list[str] = field(default_factory=list)


#: Kueue's Topology in the versions v0.15.0 serves (the same ``spec.levels`` in both).
KUEUE_TOPOLOGY_API_VERSIONS = tuple(f"{KUEUE_TOPOLOGY_GROUP}/{v}" for v in ("v1beta1", "v1beta2"))


def load_manifests(
    paths: Sequence[str | Path],
    args: MusterArgs,
    record_keys: RecordKeys | None = None,
    *,
    tenant_input: bool = False,
) -> LoadedManifests:
    """Parse, validate and load every object of ``paths`` into a new snapshot.  With
    ``record_keys``, records on pods that they do not verify are dropped first, as the
    live informer drops them (:func:`extender.core.records.believed_pod`), each with a
    note; without, the records are believed as written (the files are the admin's).

    ``tenant_input``: the files are a dump of a live cluster (``kubectl muster``), whose
    pods' labels and annotations tenants wrote: a pod's quota label Muster would refuse,
    or a record Muster could not have written, is then a note (the label refused as the
    live Muster refuses it, the record dropped as the informer drops it), not an input
    error, so one tenant's pod cannot stop everyone's what-if."""
    notes: list[str] = []
    by_kind: dict[str, list[_Document]] = {
        "Node": [],
        "Pod": [],
        "ElasticQuota": [],
        **{kind.kind: [] for kind in GANG_OBJECT_KINDS},
        "PriorityClass": [],
        "PodDisruptionBudget": [],
        "Topology": [],
        **{kind: [] for kind in OWNER_KINDS},
    }
    for document in _documents(paths):
        if document.kind in by_kind:
            gang_kind = document.kind in ("PodGroup", "Workload")
            if (
                gang_kind
                and gang_object_kind(document.obj.get("apiVersion"), document.kind) is None
            ) or (
                document.kind == "ElasticQuota"
                and document.obj.get("apiVersion") not in QUOTA_GROUPS
            ):
                notes.append(
                    f"{document.path} document {document.index}: ignored {document.kind} of "
                    f"apiVersion {document.obj.get('apiVersion')!r}"
                )
                continue
            if document.kind == "Topology" and document.obj.get("apiVersion") not in (
                KUEUE_TOPOLOGY_API_VERSIONS
            ):
                notes.append(
                    f"{document.path} document {document.index}: ignored Topology of "
                    f"apiVersion {document.obj.get('apiVersion')!r} (Kueue's is read)"
                )
                continue
            if document.kind == "PodDisruptionBudget" and document.obj.get("apiVersion") != (
                "policy/v1"
            ):
                notes.append(
                    f"{document.path} document {document.index}: ignored PodDisruptionBudget "
                    f"of apiVersion {document.obj.get('apiVersion')!r} (policy/v1 is read)"
                )
                continue
            if document.kind in OWNER_KINDS and (
                document.obj.get("apiVersion") != OWNER_KINDS[document.kind][0]
            ):
                notes.append(
                    f"{document.path} document {document.index}: ignored {document.kind} of "
                    f"apiVersion {document.obj.get('apiVersion')!r} "
                    f"({OWNER_KINDS[document.kind][0]} is read)"
                )
                continue
            by_kind[document.kind].append(document)
        else:
            notes.append(
                f"{document.path} document {document.index}: ignored kind {document.kind!r}"
            )

    priorities = _priority_classes(by_kind["PriorityClass"])
    quotas: dict[str, tuple[QuotaSpec, _Document]] = {}
    for document in by_kind["ElasticQuota"]:
        spec = _parse(document, parse_elastic_quota)
        if spec.name in quotas:
            raise document.error("metadata.name", f"duplicate ElasticQuota name {spec.name!r}")
        quotas[spec.name] = (spec, document)
    snapshot = ClusterState(args)
    try:
        snapshot.set_quotas(spec for spec, _ in quotas.values())
    except QuotaTreeError as error:
        raise quotas[error.quota][1].error(error.field, error.message) from None

    nodes = by_kind.pop("Node")
    nodes.reverse()
    while nodes:
        document = nodes.pop().full()
        node = _parse(document, parse_node)
        if node.name in snapshot.nodes:
            raise document.error("metadata.name", f"duplicate Node name {node.name!r}")
        snapshot.upsert_node(node)
    for document in by_kind["Topology"]:
        name, levels = _parse(document, parse_kueue_topology)  # as the live informer reads it
        if name in snapshot.declarations.kueue_topologies:
            raise document.error("metadata.name", f"duplicate Topology {name!r}")
        snapshot.declarations.set_kueue_topology(name, levels)
    for kind in ("PodGroup", "Workload"):
        for document in by_kind[kind]:
            entry = gang_object_kind(document.obj.get("apiVersion"), kind)
            assert entry is not None  # checked as the documents were sorted
            for group in _parse(document, entry.read):
                snapshot.set_pod_group(group)
    for kind in OWNER_KINDS:
        for document in by_kind[kind]:
            snapshot.declarations.set_owner_size(_parse(document, partial(parse_owner_size, kind)))
    for document in by_kind["PodDisruptionBudget"]:
        budget = _parse(document, parse_pod_disruption_budget)
        if budget.key in snapshot.budgets:
            raise document.error("metadata.name", f"duplicate PodDisruptionBudget {budget.key!r}")
        snapshot.set_budget(budget)
    pods = by_kind.pop("Pod")
    pods.reverse()
    #: Each job asking for slices: its first such pod (and document), for the size check.
    sliced: dict[str, tuple[SliceRequest, PodInfo, _Document]] = {}
    while pods:
        document = pods.pop().full()  # each object let go once parsed (see _Deferred)
        believed, forged = believed_pod(document.obj, record_keys)
        document = dataclasses.replace(document, obj=believed)
        pod = _parse(document, lambda obj: parse_pod(obj, priorities))
        notes.extend(f"{pod.key}: ignoring {record}: Muster did not write it" for record in forged)
        if pod.key in snapshot.pods:
            raise document.error("metadata.name", f"duplicate Pod {pod.key!r}")
        if pod.node_name is not None and pod.node_name not in snapshot.nodes:
            raise document.error("spec.nodeName", f"unknown node {pod.node_name!r}")
        named = pod.labels.get(keys.QUOTA_NAME_LABEL)
        label_problem = None
        if named and named not in snapshot.tree:
            label_problem = f"unknown quota {named!r}"
        elif named and named in snapshot.tree.parents:
            label_problem = f"quota {named!r} is a parent quota; pods must use a leaf quota"
        if label_problem is not None:
            if not tenant_input:
                raise document.error(f"metadata.labels.{keys.QUOTA_NAME_LABEL}", label_problem)
            notes.append(f"{pod.key}: {label_problem}: its job is refused, as Muster would")
        problems = record_problems(pod)
        if problems and not tenant_input:
            field_name, why = problems[0]
            raise document.error(field_name, why)
        if problems:
            dropped = [field_name.split("annotations.", 1)[1] for field_name, _ in problems]
            pod = parse_pod(without_records(document.obj, dropped), priorities)
            notes.extend(
                f"{pod.key}: ignoring {record}: {why}"
                for record, (_, why) in zip(dropped, problems, strict=True)
            )
        try:
            min_available_annotation(pod)
            pod_topology_request(pod)
            slices = pod_slice_request(pod)
        except ManifestError as error:
            raise document.error(error.field, error.message) from None
        if slices is not None and pod.job not in sliced:
            sliced[pod.job] = (slices, pod, document)
        snapshot.upsert_pod(pod)
        if pod.node_name is None and not pod.finished:
            for effect in restored_effects(snapshot, pod):  # as the live informer reads them
                apply(snapshot, effect)
    for slices, pod, document in sliced.values():
        try:
            check_slice_size(slices, gang_size(snapshot, pod))
        except ManifestError as error:
            raise document.error(error.field, error.message) from None
    return LoadedManifests(snapshot, notes)


def _parse(document: _Document, parser: Callable[[Mapping[str, Any]], _T]) -> _T:
    try:
        return parser(document.obj)
    except ManifestError as error:
        raise document.error(error.field, error.message) from None


def _priority_classes(documents: list[_Document]) -> PriorityClasses:
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


class _Deferred(dict[str, Any]):
    """A node or pod of a JSON file, decoded again only when its turn comes (its kind,
    name and namespace meanwhile): 50,000 decoded pods held at once take ~2 GB, and
    the memory they leave behind stays with the process."""

    __slots__ = ("_end", "_start", "_text")

    def __init__(self, text: str, start: int, end: int, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata")
        if isinstance(metadata, Mapping):
            metadata = {k: metadata[k] for k in ("name", "namespace") if k in metadata}
        super().__init__(kind=obj.get("kind"), metadata=metadata)
        self._text, self._start, self._end = text, start, end

    def load(self) -> Any:
        return json.loads(self._text[self._start : self._end])


def _skip(text: str, at: int) -> int:
    while text[at] in " \t\n\r":
        at += 1
    return at


def _json_list(text: str) -> dict[str, Any]:
    """A JSON object read key by key; the pods of its ``items`` deferred (:class:`_Deferred`).
    Raises ``ValueError`` (or ``IndexError``) on anything that is not well-formed JSON."""
    decode = _JSON.raw_decode
    top: dict[str, Any] = {}
    at = _skip(text, _skip(text, 0) + 1)  # past the "{"
    while text[at] != "}":
        key, at = decode(text, at)
        at = _skip(text, at)
        if text[at] != ":":
            raise ValueError(f"expected ':' at {at}")
        at = _skip(text, at + 1)
        if key == "items" and text[at] == "[":
            items: list[Any] = []
            at = _skip(text, at + 1)
            while text[at] != "]":
                start = at
                item, at = decode(text, at)
                if isinstance(item, Mapping) and item.get("kind") in _DEFERRED:
                    item = _Deferred(text, start, at, item)
                items.append(item)
                at = _skip(text, at)
                if text[at] == ",":
                    at = _skip(text, at + 1)
                elif text[at] != "]":
                    raise ValueError(f"expected ',' or ']' at {at}")
            value: Any = items
            at += 1
        else:
            value, at = decode(text, at)
        top[key] = value
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
        elif text[at] != "}":
            raise ValueError(f"expected ',' or '}}' at {at}")
    if text[at + 1 :].strip():
        raise ValueError("extra data")
    return top


def _load(text: str) -> list[Any]:
    """The documents of a file: JSON (``kubectl get -o json``) is read as JSON, fast, its
    pods deferred; anything else (or JSON that does not parse as such) as YAML."""
    if text.lstrip()[:1] == "{":
        try:
            return [_json_list(text)]
        except (ValueError, IndexError):
            pass  # perhaps YAML's flow style: YAML says what is wrong
    return list(yaml.load_all(text, Loader=_YAML_LOADER))


def _documents(paths: Sequence[str | Path]) -> Iterator[_Document]:
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise InputError(f"{path}: cannot read: {error.strerror}") from None
        try:
            loaded = _load(text)
        except yaml.YAMLError as error:
            where = getattr(error, "problem_mark", None)
            line = f" at line {where.line + 1}" if where is not None else ""
            problem = getattr(error, "problem", None) or str(error)
            raise InputError(f"{path}: invalid YAML{line}: {problem}") from None
        for number, obj in enumerate(loaded, start=1):
            if obj is None:
                continue
            if not isinstance(obj, Mapping):
                raise InputError(f"{path} document {number}: expected a Kubernetes object")
            if obj.get("kind") == "List":
                items = obj.get("items") or []
                if not isinstance(items, list):
                    raise InputError(f"{path} document {number} (List): items: expected a list")
                for position, item in enumerate(items):
                    if not isinstance(item, Mapping):
                        where = f"{path} document {number}.items[{position}]"
                        raise InputError(f"{where}: expected a Kubernetes object")
                    yield _Document(str(path), f"{number}.items[{position}]", item)
            else:
                yield _Document(str(path), str(number), obj)
