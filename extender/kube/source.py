"""The live cluster as a :class:`extender.service.ClusterSource`: informers feed a snapshot.

Pods, Nodes, PriorityClasses, PodDisruptionBudgets, ElasticQuotas, PodGroups (both
``scheduling.x-k8s.io`` and ``scheduling.sigs.k8s.io``, whichever are installed), Kueue's
Topology objects (the order of topology levels, where Kueue is installed) and Jobs,
ReplicaSets and StatefulSets (their size, and whether they still exist) are listed and
watched; every event is translated by the core's parsers and applied to one
:class:`ClusterState` under a lock, which decisions hold while they read.  Ready once every
informer has listed once.  An object the parsers reject is skipped and counted, never fatal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from prometheus_client import Counter

from base.errors import ManifestError
from extender.core.authority import (
    governing_reason,
    hold_for_scheduler_preemption,
    jobs_nominated_to,
    preempted_by_scheduler,
)
from extender.core.budgets import parse_pod_disruption_budget
from extender.core.config import MusterArgs
from extender.core.effects import apply
from extender.core.jobs import OWNER_KINDS, OwnerSize, parse_owner_size
from extender.core.objects import PodInfo, PriorityClasses, parse_node, parse_pod
from extender.core.podgroups import GANG_OBJECT_KINDS, GangObjectKind, PodGroupInfo
from extender.core.preemption.eligibility import postfilter_trigger
from extender.core.records import RecordKeys, believed_pod
from extender.core.reservations import restored_effects
from extender.core.state import ClusterState
from extender.core.topology import (
    KUEUE_TOPOLOGY_GROUP,
    KUEUE_TOPOLOGY_PLURAL,
    KUEUE_TOPOLOGY_VERSION,
    parse_kueue_topology,
)
from extender.kube.client import Json, KubeClient
from extender.kube.health import Health
from extender.kube.informer import Handler, Informer, object_key
from extender.service import holding
from quota.tree import QuotaSpec, QuotaTreeError, parse_elastic_quota

log = logging.getLogger(__name__)

QUOTA_GROUPS = ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io")


class KubeSource:
    #: The informers deliver pods as they are created (see ``ClusterSource``).
    pods_arrive = True

    def __init__(
        self,
        client: KubeClient,
        args: MusterArgs,
        clock: Callable[[], float] = time.time,
        *,
        record_keys: Callable[[], RecordKeys],
    ) -> None:
        self.client = client
        self.clock = clock
        #: The keys Muster's own records are checked with (:mod:`extender.core.records`).
        self.record_keys = record_keys
        self.snapshot = ClusterState(args)
        self.state_lock = threading.RLock()
        self.rejected: dict[str, str] = {}  # object → why it was skipped
        self._quotas: dict[str, QuotaSpec] = {}  # "group/ns/name" → spec
        self._applied: dict[str, QuotaSpec] = {}  # what the snapshot has, by quota name
        self._priorities: dict[str, tuple[int, bool]] = {}
        self._priority_view: PriorityClasses | None = None  # of _priorities, built on use
        self._pod_group_apis: dict[str, str] = {}  # job → its status-written PodGroup's API
        #: "apiVersion/kind/ns/name" of each gang-declaring object → the jobs it declares.
        self._declared: dict[str, tuple[str, ...]] = {}
        self._parked: dict[str, str] = {}  # pending pod → kube-scheduler's Unschedulable message
        #: Called with (job, reason, plan at once) when a pod of a job Muster governs turns
        #: PodScheduled=False/Unschedulable.
        self.on_unschedulable: Callable[[str, str, bool], None] | None = None
        #: Pods Muster governs that kube-scheduler preempted itself (see
        #: :mod:`extender.core.authority`): a configuration that lets it.
        self.scheduler_preemptions = Counter(
            "muster_foreign_preemptions",
            "Pods Muster governs that kube-scheduler's own preemption deleted, without "
            "Muster's soft-eviction mark (kube-scheduler runs without Muster's preemptVerb, "
            "or preempted while Muster was unreachable).",
            registry=None,
        )
        self._scheduler_victims: set[str] = set()  # UIDs seen preempted by kube-scheduler
        self.forged_records = Counter(
            "muster_forged_records",
            "Records on pods that look like Muster's (reservation, gang backoff, "
            "soft-eviction mark) but fail the signature check: ignored, as if absent.",
            ["record"],
            registry=None,
        )
        self._forged_seen: dict[str, set[str]] = {}  # pod UID → its forged records, logged
        self.informers = [
            Informer(client, "/apis/scheduling.k8s.io/v1/priorityclasses", self._on_priority),
            Informer(client, "/api/v1/nodes", self._on_node, keep_objects=False),
            *(
                Informer(
                    client, f"/apis/{group}/v1alpha1/elasticquotas", self._quota_handler(group)
                )
                for group in QUOTA_GROUPS
            ),
            *(
                Informer(client, kind.path, self._gang_object_handler(kind))
                for kind in GANG_OBJECT_KINDS
            ),
            Informer(client, "/apis/policy/v1/poddisruptionbudgets", self._on_budget),
            Informer(
                client,
                f"/apis/{KUEUE_TOPOLOGY_GROUP}/{KUEUE_TOPOLOGY_VERSION}/{KUEUE_TOPOLOGY_PLURAL}",
                self._on_kueue_topology,
            ),
            *(
                Informer(client, f"/apis/{api}/{plural}", self._owner_handler(kind))
                for kind, (api, plural) in OWNER_KINDS.items()
            ),
            Informer(client, "/api/v1/pods", self._on_pod, keep_objects=False),
        ]
        #: The health of the informers and of every background thread registered with it.
        self.health = Health()
        for informer in self.informers:
            self.health.add(informer)

    def quota_objects(self) -> dict[str, tuple[str, QuotaSpec]]:
        """Every ElasticQuota object seen: ``group/namespace/name`` → (API group, spec)."""
        with self.state_lock:
            return {key: (key.split("/", 1)[0], spec) for key, spec in self._quotas.items()}

    def parked(self) -> dict[str, str]:
        """The pending pods kube-scheduler has marked Unschedulable, with its message."""
        with self.state_lock:
            return dict(self._parked)

    def pod_group_api(self, job: str) -> str | None:
        """The API group of the job's PodGroup object, if it has one."""
        with self.state_lock:
            return self._pod_group_apis.get(job)

    def start(self) -> KubeSource:
        for informer in self.informers:
            informer.start()
        return self

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    def ready(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)

    def problems(self) -> list[str]:
        return self.health.problems()

    def lasting_problems(self) -> list[str]:
        return self.health.lasting_problems()

    def wait_ready(self, timeout: float) -> bool:
        return all(informer.synced.wait(timeout) for informer in self.informers)

    def exclusive(self, wait: bool = True) -> AbstractContextManager[ClusterState]:
        return holding(self.state_lock, self.snapshot, wait)

    # ---- handlers (informer threads) ----------------------------------------------

    def _on_node(self, kind: str, obj: Json) -> None:
        with self.state_lock:
            if kind == "DELETED":
                self.snapshot.remove_node(object_key(obj))
                return
            try:
                self.snapshot.upsert_node(parse_node(obj))
            except ManifestError as error:
                self._reject(obj, error)

    def _on_pod(self, kind: str, obj: Json) -> None:
        trigger: tuple[str, str, bool] | None = None
        with self.state_lock:
            if kind == "DELETED":
                key = object_key(obj)
                gone = self.snapshot.pods.get(key)
                if gone is not None:
                    self._scheduler_victims.discard(gone.uid)
                    self._forged_seen.pop(gone.uid, None)
                self.snapshot.remove_pod(key, now=self.clock())
                self._parked.pop(key, None)
                return
            obj = self._believed(obj)
            try:
                pod = parse_pod(obj, self._priority_classes())
            except ManifestError as error:
                self._reject(obj, error)
                return
            self.snapshot.upsert_pod(pod, now=self.clock())
            self._parked.pop(pod.key, None)
            if pod.node_name is None and not pod.finished:
                self._restore_reservation(pod)
                if pod.nominated_node_name is not None:
                    self._hold_for_scheduler_preemption({pod.job})
                reason = _unschedulable_reason(obj)
                if reason is not None:
                    self._parked[pod.key] = reason
                    plan_at_once = postfilter_trigger(
                        self.snapshot, pod, self.clock()
                    )  # None: not Muster's
                    if plan_at_once is not None:
                        trigger = (pod.job, reason, plan_at_once)
            elif pod.node_name is not None and preempted_by_scheduler(pod):
                self._note_scheduler_victim(pod)
                self._hold_for_scheduler_preemption(jobs_nominated_to(self.snapshot, pod.node_name))
        if trigger is not None and self.on_unschedulable is not None:
            self.on_unschedulable(*trigger)

    def _note_scheduler_victim(self, pod: PodInfo) -> None:
        """kube-scheduler preempts a pod itself: count and log it once when Muster governs
        the pod (it should be Muster's to mark; the configuration let kube-scheduler)."""
        if pod.uid in self._scheduler_victims:
            return
        self._scheduler_victims.add(pod.uid)
        governed = governing_reason(self.snapshot, pod)
        if governed is None:
            return  # kube-scheduler's to preempt: not Muster's business
        self.scheduler_preemptions.inc()
        log.warning(
            "%s preempted %s itself, without Muster's soft-eviction mark, though Muster "
            "governs it (%s): is Muster's preemptVerb configured, and was Muster reachable?",
            pod.preempted_by,
            pod.key,
            governed,
        )

    def _hold_for_scheduler_preemption(self, jobs: set[str]) -> None:
        for job in sorted(jobs):
            decided = hold_for_scheduler_preemption(self.snapshot, job, self.clock())
            if decided is not None:
                held, effect = decided
                apply(self.snapshot, effect)
                log.warning(
                    "kube-scheduler is preempting %s for job %s: no second plan for it; "
                    "its room is held on %s",
                    ", ".join(held.victims),
                    job,
                    ", ".join(sorted(set(held.placements.values()))),
                )

    def _restore_reservation(self, pod: PodInfo) -> None:
        """Rebuild an in-flight reservation, and a gang's backoff, from the annotations
        on a pending pod."""
        for effect in restored_effects(self.snapshot, pod):
            apply(self.snapshot, effect)

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
                        self.snapshot.forget_pod_group(group_namespace, group_name, kind.rank)
                if groups:
                    self._declared[key] = jobs
                for group in groups:
                    if kind.writes_status:
                        self._pod_group_apis[group.job] = kind.group
                    self.snapshot.set_pod_group(group)

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
                    self.snapshot.forget_owner(namespace, controller)
                    return
                self.snapshot.owner_present(namespace, controller)
                try:
                    self.snapshot.set_owner_size(parse_owner_size(owner_kind, obj))
                except ManifestError as error:
                    # its pods' gang size is what arrives
                    self._reject({"kind": owner_kind, **obj}, error)
                    self.snapshot.set_owner_size(OwnerSize(namespace, controller, None))

        return handle

    def _on_budget(self, kind: str, obj: Json) -> None:
        with self.state_lock:
            if kind == "DELETED":
                self.snapshot.forget_budget(*object_key(obj).split("/", 1))
                return
            try:
                self.snapshot.set_budget(parse_pod_disruption_budget(obj))
            except ManifestError as error:
                self._reject(obj, error)  # ignored: it protects nothing Muster knows of
                self.snapshot.forget_budget(*object_key(obj).split("/", 1))

    def _on_kueue_topology(self, kind: str, obj: Json) -> None:
        """Kueue's Topology: the order of topology levels, when ``topologyLevels`` is
        empty (an API the server does not serve lists nothing)."""
        with self.state_lock:
            if kind == "DELETED":
                self.snapshot.forget_kueue_topology(object_key(obj))
                return
            try:
                name, levels = parse_kueue_topology(obj)
            except ManifestError as error:
                self._reject({"kind": "Topology", **obj}, error)
                return
            self.snapshot.set_kueue_topology(name, levels)

    def _believed(self, obj: Json) -> Json:
        """The pod as Muster believes it: records Muster did not write are dropped,
        counted, and logged once per pod and record."""
        believed, forged = believed_pod(obj, self.record_keys())
        if not forged:
            return obj  # the common case: nothing dropped, nothing copied
        uid = str((obj.get("metadata") or {}).get("uid"))
        for record in forged:
            seen = self._forged_seen.setdefault(uid, set())
            if record not in seen:
                seen.add(record)
                self.forged_records.labels(record).inc()
                log.warning(
                    "ignoring %s on pod %s: Muster did not write it", record, object_key(obj)
                )
        return dict(believed)

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
