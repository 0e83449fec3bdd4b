"""The live cluster as a :class:`extender.service.ClusterSource`: informers feed a state.

Pods, Nodes, PriorityClasses, PodDisruptionBudgets, ElasticQuotas, PodGroups (both
``scheduling.x-k8s.io`` and ``scheduling.sigs.k8s.io``, whichever are installed), Kueue's
Topology objects (the order of topology levels, where Kueue is installed), Jobs,
ReplicaSets and StatefulSets (their size, and whether they still exist) and DRA's
DeviceClasses, ResourceSlices, ResourceClaimTemplates and ResourceClaims (where
``resource.k8s.io/v1`` is served) are listed and watched; every event is translated by
the core's parsers and applied to one :class:`ClusterState` under a lock, which decisions
hold while they read.  Ready once every
informer has listed once.  An object the parsers reject is skipped and counted, never fatal.

The pods' handler is here, with what a pod event sets off (a reservation rebuilt, the
PostFilter asked, kube-scheduler's own preemption noticed, forged records dropped); the
handlers of every other kind are :class:`~extender.kube.handlers.ObjectHandlers`'s.
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
from extender.core.config import MusterArgs
from extender.core.dra import DRA_API_VERSION, DRA_PLURALS
from extender.core.effects import apply
from extender.core.jobs import OWNER_KINDS
from extender.core.objects import PodInfo, parse_pod
from extender.core.podgroups import GANG_OBJECT_KINDS
from extender.core.preemption.eligibility import postfilter_trigger
from extender.core.records import RecordKeys, believed_pod
from extender.core.reservations import restored_effects
from extender.core.state import ClusterState
from extender.core.topology import (
    KUEUE_TOPOLOGY_GROUP,
    KUEUE_TOPOLOGY_PLURAL,
    KUEUE_TOPOLOGY_VERSION,
)
from extender.kube.client import Json, KubeClient
from extender.kube.decoding import LEAN
from extender.kube.handlers import ObjectHandlers
from extender.kube.health import Health
from extender.kube.informer import Informer, object_key
from extender.service import holding
from quota.tree import QuotaSpec

log = logging.getLogger(__name__)

QUOTA_GROUPS = ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io")


class KubeSource(ObjectHandlers):
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
        self.state = ClusterState(args)
        self.state_lock = threading.RLock()
        self.rejected: dict[str, str] = {}  # object → why it was skipped
        self._init_object_handlers()
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
        self.informers = self._informers(client)
        #: The health of the informers and of every background thread registered with it.
        self.health = Health()
        for informer in self.informers:
            self.health.add(informer)

    def _informers(self, client: KubeClient) -> list[Informer]:
        """One informer per kind, each with its handler."""
        return [
            Informer(client, "/apis/scheduling.k8s.io/v1/priorityclasses", self._on_priority),
            Informer(client, "/api/v1/nodes", self._on_node, keep_objects=False, decoding=LEAN),
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
            *(
                Informer(client, f"/apis/{DRA_API_VERSION}/{plural}", self._dra_handler(kind))
                for kind, plural in DRA_PLURALS.items()
            ),
            Informer(client, "/api/v1/pods", self._on_pod, keep_objects=False, decoding=LEAN),
        ]

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
        return holding(self.state_lock, self.state, wait)

    # ---- the pods' handler (an informer thread) ------------------------------------

    def _on_pod(self, kind: str, obj: Json) -> None:
        trigger: tuple[str, str, bool] | None = None
        with self.state_lock:
            if kind == "DELETED":
                key = object_key(obj)
                gone = self.state.pods.get(key)
                if gone is not None:
                    self._scheduler_victims.discard(gone.uid)
                    self._forged_seen.pop(gone.uid, None)
                self.state.remove_pod(key, now=self.clock())
                self._parked.pop(key, None)
                return
            obj = self._believed(obj)
            try:
                pod = parse_pod(obj, self._priority_classes())
            except ManifestError as error:
                self._reject(obj, error)
                return
            self.state.upsert_pod(pod, now=self.clock())
            self._parked.pop(pod.key, None)
            if pod.node_name is None and not pod.finished:
                self._restore_reservation(pod)
                if pod.nominated_node_name is not None:
                    self._hold_for_scheduler_preemption({pod.job})
                reason = _unschedulable_reason(obj)
                if reason is not None:
                    self._parked[pod.key] = reason
                    plan_at_once = postfilter_trigger(
                        self.state, pod, self.clock()
                    )  # None: not Muster's
                    if plan_at_once is not None:
                        trigger = (pod.job, reason, plan_at_once)
            elif pod.node_name is not None and preempted_by_scheduler(pod):
                self._note_scheduler_victim(pod)
                self._hold_for_scheduler_preemption(jobs_nominated_to(self.state, pod.node_name))
        if trigger is not None and self.on_unschedulable is not None:
            self.on_unschedulable(*trigger)

    def _note_scheduler_victim(self, pod: PodInfo) -> None:
        """kube-scheduler preempts a pod itself: count and log it once when Muster governs
        the pod (it should be Muster's to mark; the configuration let kube-scheduler)."""
        if pod.uid in self._scheduler_victims:
            return
        self._scheduler_victims.add(pod.uid)
        governed = governing_reason(self.state, pod)
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
            decided = hold_for_scheduler_preemption(self.state, job, self.clock())
            if decided is not None:
                held, effect = decided
                apply(self.state, effect)
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
        for effect in restored_effects(self.state, pod):
            apply(self.state, effect)

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


def _unschedulable_reason(obj: Json) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message", ""))
    return None
