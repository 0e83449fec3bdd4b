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

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from base import keys
from base.errors import ManifestError
from extender.core.budgets import parse_pod_disruption_budget
from extender.core.config import MusterArgs
from extender.core.effects import apply
from extender.core.jobs import min_available_annotation, parse_pod_group
from extender.core.objects import (
    PriorityClasses,
    parse_node,
    parse_pod,
    parse_priority_class,
)
from extender.core.reservations import restored_effects
from extender.core.state import ClusterState
from quota.tree import QuotaSpec, QuotaTreeError, parse_elastic_quota

_T = TypeVar("_T")
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

    def error(self, field: str, message: str) -> InputError:
        where = f"{self.path} document {self.index} ({self.kind} {self.name})"
        return InputError(f"{where}: {field}: {message}")


@dataclass
class LoadedManifests:
    snapshot: ClusterState
    notes: list[str] = field(default_factory=list)


def load_manifests(paths: Sequence[str | Path], args: MusterArgs) -> LoadedManifests:
    """Parse, validate and load every object of ``paths`` into a new snapshot."""
    notes: list[str] = []
    by_kind: dict[str, list[_Document]] = {
        "Node": [],
        "Pod": [],
        "ElasticQuota": [],
        "PodGroup": [],
        "PriorityClass": [],
        "PodDisruptionBudget": [],
    }
    for document in _documents(paths):
        if document.kind in by_kind:
            if (
                document.kind in ("ElasticQuota", "PodGroup")
                and document.obj.get("apiVersion") not in QUOTA_GROUPS
            ):
                notes.append(
                    f"{document.path} document {document.index}: ignored {document.kind} of "
                    f"apiVersion {document.obj.get('apiVersion')!r}"
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

    for document in by_kind["Node"]:
        node = _parse(document, parse_node)
        if node.name in snapshot.nodes:
            raise document.error("metadata.name", f"duplicate Node name {node.name!r}")
        snapshot.upsert_node(node)
    for document in by_kind["PodGroup"]:
        group = _parse(document, parse_pod_group)
        snapshot.set_pod_group(group)
    for document in by_kind["PodDisruptionBudget"]:
        budget = _parse(document, parse_pod_disruption_budget)
        if budget.key in snapshot.budgets:
            raise document.error("metadata.name", f"duplicate PodDisruptionBudget {budget.key!r}")
        snapshot.set_budget(budget)
    for document in by_kind["Pod"]:
        pod = _parse(document, lambda obj: parse_pod(obj, priorities))
        if pod.key in snapshot.pods:
            raise document.error("metadata.name", f"duplicate Pod {pod.key!r}")
        if pod.node_name is not None and pod.node_name not in snapshot.nodes:
            raise document.error("spec.nodeName", f"unknown node {pod.node_name!r}")
        named = pod.labels.get(keys.QUOTA_NAME_LABEL)
        if named and named not in snapshot.tree:
            raise document.error(
                f"metadata.labels.{keys.QUOTA_NAME_LABEL}", f"unknown quota {named!r}"
            )
        if named and named in snapshot.tree.parents:
            raise document.error(
                f"metadata.labels.{keys.QUOTA_NAME_LABEL}",
                f"quota {named!r} is a parent quota; pods must use a leaf quota",
            )
        try:
            min_available_annotation(pod)
        except ManifestError as error:
            raise document.error(error.field, error.message) from None
        snapshot.upsert_pod(pod)
        if pod.node_name is None and not pod.finished:
            for effect in restored_effects(snapshot, pod):  # as the live informer reads them
                apply(snapshot, effect)
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


def _documents(paths: Sequence[str | Path]) -> Iterator[_Document]:
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise InputError(f"{path}: cannot read: {error.strerror}") from None
        try:
            loaded = list(yaml.safe_load_all(text))
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
