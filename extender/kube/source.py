"""The live cluster as a :class:`extender.service.ClusterSource`: informers feed a snapshot.

Pods, Nodes, PriorityClasses, ElasticQuotas and PodGroups (both
``scheduling.x-k8s.io`` and ``scheduling.sigs.k8s.io``, whichever are
installed) are listed and watched; every event is translated by the core's
parsers and applied to one :class:`Snapshot` under a lock, which decisions
hold while they read.  Ready once every informer has listed once.  An object
the parsers reject is skipped and counted, never fatal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from extender.core import keys
from extender.core.config import MusterArgs
from extender.core.objects import ManifestError, PodInfo, PriorityClasses, parse_node, parse_pod
from extender.core.snapshot import Reservation, Snapshot
from extender.kube.client import Json, KubeClient
from extender.kube.informer import Handler, Informer, object_key
from extender.kube.reservations import parse_persisted
from extender.service import holding
from quota.tree import QuotaSpec, QuotaTreeError, parse_elastic_quota

log = logging.getLogger(__name__)

QUOTA_GROUPS = ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io")


class KubeSource:
    def __init__(self, client: KubeClient, args: MusterArgs) -> None:
        self.client = client
        self.snapshot = Snapshot(args)
        self.lock = threading.RLock()
        self.rejected: dict[str, str] = {}  # object → why it was skipped
        self._quotas: dict[str, QuotaSpec] = {}  # "group/ns/name" → spec
        self._applied: dict[str, QuotaSpec] = {}  # what the snapshot has, by quota name
        self._priorities: dict[str, tuple[int, bool]] = {}
        #: Called with (job, reason) when a pod turns PodScheduled=False/Unschedulable.
        self.on_unschedulable: Callable[[str, str], None] | None = None
        self.informers = [
            Informer(client, "/apis/scheduling.k8s.io/v1/priorityclasses", self._on_priority),
            Informer(client, "/api/v1/nodes", self._on_node),
            *(
                Informer(
                    client, f"/apis/{group}/v1alpha1/elasticquotas", self._quota_handler(group)
                )
                for group in QUOTA_GROUPS
            ),
            *(
                Informer(client, f"/apis/{group}/v1alpha1/podgroups", self._on_pod_group)
                for group in QUOTA_GROUPS
            ),
            Informer(client, "/api/v1/pods", self._on_pod),
        ]

    def quota_objects(self) -> dict[str, tuple[str, QuotaSpec]]:
        """Every ElasticQuota object seen: ``group/namespace/name`` → (API group, spec)."""
        with self.lock:
            return {key: (key.split("/", 1)[0], spec) for key, spec in self._quotas.items()}

    def start(self) -> KubeSource:
        for informer in self.informers:
            informer.start()
        return self

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    def ready(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)

    def wait_ready(self, timeout: float) -> bool:
        return all(informer.synced.wait(timeout) for informer in self.informers)

    def reading(self, wait: bool = True) -> AbstractContextManager[Snapshot]:
        return holding(self.lock, self.snapshot, wait)

    # ---- handlers (informer threads) ----------------------------------------------

    def _on_node(self, kind: str, obj: Json) -> None:
        with self.lock:
            if kind == "DELETED":
                self.snapshot.remove_node(object_key(obj))
                return
            try:
                self.snapshot.upsert_node(parse_node(obj))
            except ManifestError as error:
                self._reject(obj, error)

    def _on_pod(self, kind: str, obj: Json) -> None:
        with self.lock:
            if kind == "DELETED":
                self.snapshot.remove_pod(object_key(obj))
                return
            try:
                pod = parse_pod(obj, self._priority_classes())
            except ManifestError as error:
                self._reject(obj, error)
                return
            self.snapshot.upsert_pod(pod)
            if pod.node_name is None and not pod.finished:
                self._restore_reservation(pod)
        if pod.node_name is None and self.on_unschedulable is not None:
            reason = _unschedulable_reason(obj)
            if reason is not None:
                self.on_unschedulable(pod.job, reason)

    def _restore_reservation(self, pod: PodInfo) -> None:
        """Rebuild an in-flight reservation from the annotation on a pending pod."""
        text = pod.annotations.get(keys.RESERVATION_ANNOTATION)
        persisted = parse_persisted(text) if text else None
        if persisted is None or persisted.job != pod.job:
            return
        known = self.snapshot.reservations.get(pod.job)
        if known is not None and known.placements.get(pod.key) == persisted.node:
            return
        quota = self.snapshot.quota_name(pod)
        if quota is None:
            return
        placements = dict(known.placements) if known is not None else {}
        placements[pod.key] = persisted.node
        self.snapshot.add_reservation(
            Reservation(
                job=pod.job,
                quota=quota,
                placements=placements,
                victims=persisted.victims,
                created=persisted.created,
                expires=persisted.expires,
            )
        )

    def _on_priority(self, kind: str, obj: Json) -> None:
        with self.lock:
            name = object_key(obj)
            if kind == "DELETED":
                self._priorities.pop(name, None)
            else:
                value = obj.get("value")
                if isinstance(value, int):
                    self._priorities[name] = (value, bool(obj.get("globalDefault", False)))

    def _priority_classes(self) -> PriorityClasses:
        default = next((value for value, is_default in self._priorities.values() if is_default), 0)
        return PriorityClasses(
            values={name: value for name, (value, _) in self._priorities.items()},
            global_default=default,
        )

    def _quota_handler(self, group: str) -> Handler:
        def handle(kind: str, obj: Json) -> None:
            key = f"{group}/{object_key(obj)}"
            with self.lock:
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
        """Hand the snapshot every valid quota; a duplicate name keeps the first by key."""
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
            self.snapshot.set_quotas(specs.values())
            self._applied = specs
        except QuotaTreeError as error:
            self.rejected[f"quota/{error.quota}"] = str(error)
            log.warning("quota tree: %s; keeping the previous quotas", error)

    def _on_pod_group(self, kind: str, obj: Json) -> None:
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        min_member = spec.get("minMember") if isinstance(spec, dict) else None
        with self.lock:
            self.snapshot.set_pod_group(
                str(metadata.get("namespace", "default")),
                str(metadata.get("name", "")),
                None if kind == "DELETED" or not isinstance(min_member, int) else min_member,
            )

    def _reject(self, obj: Json, error: Exception) -> None:
        key = f"{obj.get('kind', '?')}/{object_key(obj)}"
        self.rejected[key] = str(error)
        log.warning("skipping %s: %s", key, error)


def _unschedulable_reason(obj: Json) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message", ""))
    return None
