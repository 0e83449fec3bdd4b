"""The informers' handlers for every kind but pods: what each object tells the state.

A mixin of :class:`~extender.kube.source.KubeSource` (the state, its lock and the
rejected objects live there; the pod handler too, with what a pod event sets off).  Each
handler translates one informer's events with the core's parsers and applies them to the
``ClusterState`` under the source's lock: Nodes, PriorityClasses, ElasticQuotas, the
objects that declare gangs (PodGroups, Workloads), the owners that size them (Jobs,
ReplicaSets, StatefulSets), PodDisruptionBudgets, Kueue's Topologies and DRA's
DeviceClasses, ResourceSlices, ResourceClaimTemplates and ResourceClaims.  An object the
parsers reject is skipped, recorded in ``rejected`` and logged, never fatal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from base.errors import ManifestError
from extender.core.budgets import parse_pod_disruption_budget
from extender.core.jobs import OwnerSize, parse_owner_size
from extender.core.objects import parse_node
from extender.core.podgroups import GangObjectKind, PodGroupInfo
from extender.core.priorities import PriorityClasses
from extender.core.state import ClusterState
from extender.core.topology import parse_kueue_topology
from extender.kube.client import Json
from extender.kube.informer import Handler, object_key
from quota.tree import QuotaSpec, QuotaTreeError, parse_elastic_quota

log = logging.getLogger(__name__)


class ObjectHandlers:
    """Handlers for every informer but the pods'; see the module's docstring."""

    if TYPE_CHECKING:
        state: ClusterState
        state_lock: threading.RLock
        rejected: dict[str, str]

    def _init_object_handlers(self) -> None:
        self._quotas: dict[str, QuotaSpec] = {}  # "group/ns/name" → spec
        self._applied: dict[str, QuotaSpec] = {}  # what the state has, by quota name
        self._priorities: dict[str, tuple[int, bool]] = {}
        self._priority_view: PriorityClasses | None = None  # of _priorities, built on use
        self._pod_group_apis: dict[str, str] = {}  # job → its status-written PodGroup's API
        #: "apiVersion/kind/ns/name" of each gang-declaring object → the jobs it declares.
        self._declared: dict[str, tuple[str, ...]] = {}

    def _on_node(self, kind: str, obj: Json) -> None:
        with self.state_lock:
            if kind == "DELETED":
                self.state.remove_node(object_key(obj))
                return
            try:
                self.state.upsert_node(parse_node(obj))
            except ManifestError as error:
                self._reject(obj, error)

    def _on_priority(self, kind: str, obj: Json) -> None:
        with self.state_lock:
            self._priority_view = None
            name = object_key(obj)
            if kind == "DELETED":
                self._priorities.pop(name, None)
            else:
                value = obj.get("value")
                if isinstance(value, int):
                    self._priorities[name] = (value, bool(obj.get("globalDefault", False)))

    def _priority_classes(self) -> PriorityClasses:
        """The PriorityClasses seen, as the pod parser takes them (built once per change:
        every pod event asks)."""
        if self._priority_view is None:
            priorities = self._priorities.values()
            default = next((value for value, is_default in priorities if is_default), 0)
            self._priority_view = PriorityClasses(
                values={name: value for name, (value, _) in self._priorities.items()},
                global_default=default,
            )
        return self._priority_view

    def _quota_handler(self, group: str) -> Handler:
        def handle(kind: str, obj: Json) -> None:
            key = f"{group}/{object_key(obj)}"
            with self.state_lock:
                if kind == "DELETED":
                    self._quotas.pop(key, None)
                else:
                    try:
                        self._quotas[key] = parse_elastic_quota(obj)
                    except ManifestError as error:
                        self._reject(obj, error)
                        self._quotas.pop(key, None)
                self._apply_quotas()

        return handle

    def _apply_quotas(self) -> None:
        """Hand the state every valid quota; a duplicate name keeps the first by key."""
        specs: dict[str, QuotaSpec] = {}
        for key in sorted(self._quotas):
            spec = self._quotas[key]
            if spec.name in specs:
                self.rejected[key] = f"duplicate quota name {spec.name!r}"
                continue
            specs[spec.name] = spec
        if specs == self._applied:
            return  # e.g. only status or annotations changed: nothing to re-index
        try:
            self.state.set_quotas(specs.values())
            self._applied = specs
        except QuotaTreeError as error:
            self.rejected[f"quota/{error.quota}"] = str(error)
            log.warning("quota tree: %s; keeping the previous quotas", error)

    def _gang_object_handler(self, kind: GangObjectKind) -> Handler:
        """Record the gangs an object of ``kind`` declares; an update forgets what it no
        longer declares, a deletion (or an unreadable object) all of it."""

        def handle(event: str, obj: Json) -> None:
            metadata = obj.get("metadata") or {}
            namespace = str(metadata.get("namespace") or "default")
            key = f"{kind.api_version}/{kind.kind}/{namespace}/{metadata.get('name')}"
            groups: tuple[PodGroupInfo, ...] = ()
            if event != "DELETED":
                try:
                    groups = kind.read(obj)
                except ManifestError as error:
                    with self.state_lock:
                        self._reject(
                            {"apiVersion": kind.api_version, "kind": kind.kind, **obj}, error
                        )
            with self.state_lock:
                jobs = tuple(group.job for group in groups)
                for job in self._declared.pop(key, ()):
                    if job not in jobs:
                        if kind.writes_status:
                            self._pod_group_apis.pop(job, None)
                        group_namespace, group_name = job.split("/", 1)
                        self.state.forget_pod_group(group_namespace, group_name, kind.rank)
                if groups:
                    self._declared[key] = jobs
                for group in groups:
                    if kind.writes_status:
                        self._pod_group_apis[group.job] = kind.group
                    self.state.set_pod_group(group)

        return handle

    def _owner_handler(self, owner_kind: str) -> Callable[[str, Json], None]:
        def handle(kind: str, obj: Json) -> None:
            """A Job, ReplicaSet or StatefulSet: how many pods it runs at once (the gang
            size of the pod group its pods form, when nothing else declares one).
            Deleted, or being deleted, it re-creates no pod: the room its pods left for
            replacements is let go (see ``ClusterState.forget_owner``)."""
            metadata = obj.get("metadata") or {}
            namespace = str(metadata.get("namespace") or "default")
            controller = f"{owner_kind}/{metadata.get('name')}"
            with self.state_lock:
                if kind == "DELETED" or metadata.get("deletionTimestamp"):
                    self.state.forget_owner(namespace, controller)
                    return
                self.state.declarations.owner_present(namespace, controller)
                try:
                    self.state.declarations.set_owner_size(parse_owner_size(owner_kind, obj))
                except ManifestError as error:
                    # its pods' gang size is what arrives
                    self._reject({"kind": owner_kind, **obj}, error)
                    self.state.declarations.set_owner_size(OwnerSize(namespace, controller, None))

        return handle

    def _on_budget(self, kind: str, obj: Json) -> None:
        with self.state_lock:
            if kind == "DELETED":
                self.state.forget_budget(*object_key(obj).split("/", 1))
                return
            try:
                self.state.set_budget(parse_pod_disruption_budget(obj))
            except ManifestError as error:
                self._reject(obj, error)  # ignored: it protects nothing Muster knows of
                self.state.forget_budget(*object_key(obj).split("/", 1))

    def _on_kueue_topology(self, kind: str, obj: Json) -> None:
        """Kueue's Topology: the order of topology levels, when ``topologyLevels`` is
        empty (an API the server does not serve lists nothing)."""
        with self.state_lock:
            if kind == "DELETED":
                self.state.declarations.forget_kueue_topology(object_key(obj))
                return
            try:
                name, levels = parse_kueue_topology(obj)
            except ManifestError as error:
                self._reject({"kind": "Topology", **obj}, error)
                return
            self.state.declarations.set_kueue_topology(name, levels)

    def _dra_handler(self, dra_kind: str) -> Handler:
        def handle(kind: str, obj: Json) -> None:
            """A DRA object (``resource.k8s.io/v1``): its devices counted into pods'
            requests and nodes' room; an unreadable one counts as absent."""
            metadata = obj.get("metadata") or {}
            namespace = str(metadata.get("namespace") or "")
            name = str(metadata.get("name") or "")
            with self.state_lock:
                if kind == "DELETED":
                    self.state.forget_dra_object(dra_kind, namespace, name)
                    return
                try:
                    self.state.set_dra_object(dra_kind, obj)
                except ManifestError as error:
                    self._reject({"kind": dra_kind, **obj}, error)
                    self.state.forget_dra_object(dra_kind, namespace, name)

        return handle

    def _reject(self, obj: Json, error: Exception) -> None:
        key = f"{obj.get('kind', '?')}/{object_key(obj)}"
        self.rejected[key] = str(error)
        log.warning("skipping %s: %s", key, error)
