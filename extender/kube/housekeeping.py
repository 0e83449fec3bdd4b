"""The leader's periodic chores: ElasticQuota status, draining stopped quotas, and
recording the pods that stay preemptible against their labels.

Every few seconds the leader writes each ElasticQuota's ``status.used`` (the
requests of its bound or reserved pods, subtree included) and its
non-preemptible part, ``status.nonPreemptibleUsed``, only where they changed,
through the status subresource alone (Muster may not patch a quota's spec or
metadata); and soft-evicts the running pods of quotas whose
``muster.dev/stop-policy`` is ``HoldAndDrain``, or whose ancestor's is (their
filter already admits nothing new); and records, on each pod admitted preemptible whose
label now says otherwise, that it stays preemptible (a condition: pod status, which its
owner cannot write), so that a restarted Muster, or another replica, reads it so too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import httpx

from extender.core.objects import PodInfo
from extender.kube.client import ApiError
from extender.kube.source import KubeSource
from extender.kube.worker import LeaderWorker
from extender.kube.writer import ClusterWriter
from quota.accounting import usage_report
from quota.tree import StopPolicy

log = logging.getLogger(__name__)


class Housekeeper(LeaderWorker):
    def __init__(
        self,
        source: KubeSource,
        writer: ClusterWriter,
        *,
        interval_seconds: float = 5.0,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(
            "housekeeping", source, writer, interval_seconds=interval_seconds, is_leader=is_leader
        )
        # quota object → the status fields last written (or found, before the first write)
        self._written: dict[str, dict[str, dict[str, str]]] = {}
        #: Pods marked for a drain, by UID: the version that lacked the mark (not marked
        #: again until the informer shows another: a mark its owner took off is put back).
        self._drained: dict[str, str] = {}
        self._recorded: set[str] = set()  # pod UIDs recorded as staying preemptible

    def chores(self) -> Sequence[Callable[[float], object]]:
        return (
            lambda _now: self.write_quota_status(),
            lambda _now: self.drain_stopped_quotas(),
            lambda _now: self.record_kept_preemptible(),
        )

    def write_quota_status(self) -> int:
        """Write the status of every quota whose usage changed; return how many."""
        with self.source.exclusive() as state:
            wanted = {}
            for key, (group, spec) in self.source.quota_objects().items():
                if spec.name not in state.tree:
                    continue
                report = usage_report(state.ledger, spec.name)
                used, np_used = report["used"], report["nonPreemptibleUsed"]
                wanted[key] = (group, spec.namespace, spec.name, used, np_used)
        written = 0
        for key, (group, namespace, name, used, np_used) in wanted.items():
            status = {"used": used, "nonPreemptibleUsed": np_used}
            before = self._written.get(key)
            if before == status:
                continue
            path = f"/apis/{group}/v1alpha1/namespaces/{namespace}/elasticquotas/{name}"
            if before is None:  # first time since this leader started: what is there now
                before = self._stored_status(path)
            # A merge patch: a resource no longer used (left out of the report) is removed
            # with a null. A CRD whose status schema lacks nonPreemptibleUsed
            # (scheduler-plugins' own) prunes it; Muster's metrics and /debug/quotas show it.
            patch = {
                field: {**dict.fromkeys(before.get(field, {})), **amounts}
                for field, amounts in status.items()
            }
            self.writer.merge_patch(f"{path}/status", {"status": patch})
            self._written[key] = status
            written += 1
        return written

    def _stored_status(self, path: str) -> dict[str, dict[str, str]]:
        """The ``used`` and ``nonPreemptibleUsed`` a quota object has now."""
        stored = self.writer.retrying(lambda: self.writer.client.request("GET", path))
        status = stored.get("status") or {}
        return {
            field: dict(amounts)
            for field in ("used", "nonPreemptibleUsed")
            if isinstance(amounts := status.get(field), dict)
        }

    def drain_stopped_quotas(self) -> int:
        """Soft-evict the running pods of ``HoldAndDrain`` quotas; return how many."""
        with self.source.exclusive() as state:
            # A parent's HoldAndDrain drains its whole subtree: quota → who set it.
            drained_by = {
                name: source
                for name in state.tree.specs
                for stop, source in (state.tree.stop_policy(name),)
                if stop is StopPolicy.HOLD_AND_DRAIN
            }
            pods: list[tuple[PodInfo, str]] = []
            unmarked: dict[str, str] = {}
            for pod in state.pods.values():
                if (
                    pod.node_name is None
                    or pod.finished
                    or pod.terminating
                    or pod.soft_evicted
                    or (quota := state.quota_name(pod) or "") not in drained_by
                ):
                    continue
                if pod.uid in self._drained:
                    unmarked[pod.uid] = self._drained[pod.uid]
                    if self._drained[pod.uid] == pod.resource_version:
                        continue  # marked, not seen back yet
                pods.append((pod, quota))
            self._drained = unmarked  # pods marked (or gone) since need no memory
        for pod, quota in pods:
            try:
                self.writer.mark_victim(
                    pod,
                    preemptor=None,  # a drain makes room for no job
                    reason=f"quota {drained_by[quota]} has stop-policy HoldAndDrain",
                    grace_seconds=None,
                )
            except ApiError as error:
                if error.status != 422 or not self._evict_at_once(pod, error):
                    log.info("draining %s: %s (will retry)", pod.key, error)
                    continue
            except httpx.HTTPError as error:
                log.info("draining %s: %s (will retry)", pod.key, error)
                continue
            self._drained[pod.uid] = pod.resource_version
        return len(pods)

    def _evict_at_once(self, pod: PodInfo, error: ApiError) -> bool:
        """Evict a pod that cannot take a drain's mark (its annotations at the API
        server's limit, say); return whether that was done."""
        log.warning("%s cannot be marked for the drain (%s): evicting it at once", pod.key, error)
        try:
            self.writer.evict(pod.namespace, pod.name, pod.uid, None)
        except (ApiError, httpx.HTTPError) as failure:
            log.info("evicting %s: %s (will retry)", pod.key, failure)
            return False
        return True

    def record_kept_preemptible(self) -> int:
        """Record the pods that stay preemptible against their label
        (:meth:`~extender.core.state.membership.QuotaMembership.preemptible`) and lack the
        record; return how many were recorded."""
        with self.source.exclusive() as state:
            kept = state.membership.kept_preemptible()
            self._recorded &= kept  # forget pods gone
            pods = (
                [
                    pod
                    for pod in state.pods.values()
                    if pod.uid in kept
                    and pod.uid not in self._recorded
                    and not pod.admitted_preemptible
                    and not pod.finished
                ]
                if kept - self._recorded
                else []
            )
        recorded = 0
        for pod in pods:
            try:
                self.writer.record_admitted_preemptible(pod)
            except ApiError as error:
                if error.status == 404:  # gone: nothing to record
                    self._recorded.add(pod.uid)
                else:
                    log.info("recording %s as preemptible: %s (will retry)", pod.key, error)
                continue
            except httpx.HTTPError as error:
                log.info("recording %s as preemptible: %s (will retry)", pod.key, error)
                continue
            log.info("%s stays preemptible: recorded (its label changed after admission)", pod.key)
            self._recorded.add(pod.uid)
            recorded += 1
        return recorded
