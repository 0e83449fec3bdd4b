"""``muster evictor``: the reference soft-eviction operator.

Watches pods carrying the ``scheduling.koordinator.sh/soft-eviction`` label
and evicts each through the Eviction API once its notice, if the mark gives one, has run
out, or the job has answered it (:mod:`extender.core.notice`); when the mark says so, it
restarts the pod's Job whole instead (:mod:`extender.kube.restarter`).  Evictions go
through the API, so PodDisruptionBudgets are honoured (a ``429`` is retried later, with a
per-pod backoff), with the grace period the mark's ``deleteOptions`` asks for; each pod
is evicted once, and only if Muster wrote its mark (the mark's signature,
:mod:`extender.core.records`): a label a tenant put on a pod itself, or a mark copied
from another pod, is ignored.  A cluster with its own operator (one that checkpoints a
training job first, say) runs that instead.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry

from base import keys
from base.errors import ManifestError
from extender.core.marks import Mark, read_mark, taken_back
from extender.core.notice import answered
from extender.core.objects import preempting_component
from extender.core.records import RecordKeys, forged_records
from extender.kube.client import ApiError, Json, KubeClient
from extender.kube.evictor_metrics import register_evictor_metrics
from extender.kube.informer import Informer, object_key
from extender.kube.restarter import JobRestarter
from extender.kube.siblings import SPARED_SIBLING_DELAY_SECONDS, RestartSiblings
from extender.kube.writer import ClusterWriter

log = logging.getLogger(__name__)


@dataclass
class _Refused:
    """A marked pod whose eviction was refused (a PodDisruptionBudget's 429, a 5xx)."""

    obj: Json
    first_refused: float
    attempts: int
    next_try: float


class Evictor:
    """Evicts marked pods, each once: the watch thread and the retry thread claim a pod
    under one lock before they call the API, so neither evicts what the other is
    evicting or has evicted.  A refused eviction is retried with a per-pod exponential
    backoff (``retry_seconds`` doubling up to ``max_retry_seconds``, with ±20% jitter,
    so a budget's pods are not all retried in step)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        retry_seconds: float = 5.0,
        max_retry_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
        record_keys: Callable[[], RecordKeys],
        restart_patience_seconds: float = 30.0,
    ) -> None:
        self.record_keys = record_keys
        self.writer = ClusterWriter(client, clock, record_keys=record_keys)
        self.writer.attempts = 1  # a refusal is retried by the evictor's own backoff
        self.retry_seconds = retry_seconds
        self.max_retry_seconds = max_retry_seconds
        self.clock = clock
        self.jitter = jitter
        self._waiting: dict[str, _Refused] = {}  # refused, retried later; by pod key
        #: Marked pods on notice, by key: the pod as last seen, and when the notice ends.
        self._noticed: dict[str, tuple[Json, float]] = {}
        self._exited: set[str] = set()  # UIDs that exited on notice (counted once)
        self._evicted: set[str] = set()  # UIDs evicted already (their updates follow)
        self._claimed: set[str] = set()  # UIDs a thread is evicting right now
        self._dropped: set[str] = set()  # claimed UIDs unmarked or deleted meanwhile
        self._forged: set[str] = set()  # UIDs whose mark Muster did not write (counted once)
        #: Marked pods whose Job was suspended to restart it, by key: the pod, and when.  One
        #: still there ``restart_patience_seconds`` later (its Job's controller did not
        #: delete it: not its pod after all, or not running) is evicted after all.
        self._restarted: dict[str, tuple[Json, float]] = {}
        self._overdue: set[str] = set()  # UIDs of those: evicted, not restarted
        #: Pods on notice whose marks restart their Job (:mod:`extender.kube.siblings`).
        self._siblings = RestartSiblings()
        self.restart_patience_seconds = restart_patience_seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.informer = Informer(
            client, "/api/v1/pods", self._on_pod, label_selector=keys.SOFT_EVICTION_KEY
        )
        self._retry = threading.Thread(target=self._retry_loop, name="evictor retry", daemon=True)
        self.restarter = JobRestarter(client, record_keys=record_keys, clock=clock)
        self.registry = CollectorRegistry()
        self.evictions = register_evictor_metrics(
            self.registry,
            oldest_refused_age=self.oldest_refused_age,
            on_notice=lambda: len(self._noticed),
            restarting=lambda: len(self.restarter.suspended()),
        )

    def start(self) -> Evictor:
        self.restarter.recover()
        self.informer.start()
        self._retry.start()
        return self

    def stop(self) -> None:
        """Stop at once: the informer's thread idles in a watch read that only the server
        ends, so it is not waited for (a pod half-evicted stays marked, and is evicted by
        the next evictor)."""
        self._stop.set()
        self.informer.stop(timeout=0.2)

    def oldest_refused_age(self) -> float:
        with self._lock:
            first = min((r.first_refused for r in self._waiting.values()), default=None)
        return 0.0 if first is None else max(0.0, self.clock() - first)

    def _on_pod(self, kind: str, obj: Json) -> None:
        metadata = obj.get("metadata") or {}
        uid = str(metadata.get("uid"))
        if kind == "DELETED" or metadata.get("deletionTimestamp"):
            # Gone, leaving, or no longer marked (a watch by label sees that as DELETED).
            unmarked = kind == "DELETED" and not metadata.get("deletionTimestamp")
            unmarked = unmarked and keys.SOFT_EVICTION_KEY not in (metadata.get("labels") or {})
            if unmarked and _preempted_by_muster(obj):
                # Its owner took the mark off: Muster puts it back, to the same deadline.
                with self._lock:
                    self._noticed.pop(object_key(obj), None)
                    self._waiting.pop(object_key(obj), None)
                    self._siblings.strip(object_key(obj), self.clock())
                return
            with self._lock:
                act_on = self._siblings.forget(object_key(obj), spared=unmarked)
                self._waiting.pop(object_key(obj), None)
                self._noticed.pop(object_key(obj), None)
                self._restarted.pop(object_key(obj), None)
                if uid in self._claimed:  # a refusal arriving later must not re-add it
                    self._dropped.add(uid)
                if kind == "DELETED":
                    self._evicted.discard(uid)
                    self._overdue.discard(uid)
                    self._forged.discard(uid)
                    self._exited.discard(uid)
            if unmarked:  # spared: its siblings already ready are evicted one by one
                due = self.clock() + SPARED_SIBLING_DELAY_SECONDS
                with self._lock:
                    self._noticed.update((object_key(pod), (pod, due)) for pod in act_on)
            elif act_on:  # its siblings, all ready, waited for it alone
                self._restart_all(act_on)
            return
        with self._lock:
            # Evicted or restarted: acted on once.  (A pod that exited stays after its
            # Job's suspension, and the API goes on changing it.)
            if uid in self._evicted:
                return
            overdue = uid in self._overdue
        if keys.SOFT_EVICTION_KEY in forged_records(obj, self.record_keys()):
            with self._lock:
                self._waiting.pop(object_key(obj), None)
                if uid in self._claimed:
                    self._dropped.add(uid)
                if uid in self._forged:
                    return
                self._forged.add(uid)
            self.evictions.labels("forged").inc()
            log.warning("not evicting %s: its soft-eviction mark is not Muster's", object_key(obj))
            return
        if taken_back(obj):  # Muster is taking this mark back (a spare, a plan ended)
            with self._lock:
                self._noticed.pop(object_key(obj), None)
            return
        if overdue:  # its notice long over, its Job not restarted: evicted, not noticed
            self._evict(obj)
            return
        if self._on_notice(obj):
            return
        self._evict(obj)

    def _on_notice(self, obj: Json) -> bool:
        """Is a marked pod still on notice (:mod:`extender.core.notice`)?  Its notice has
        not run out, and the job has neither answered (``muster.dev/checkpointed`` at or
        after the mark) nor exited; one that exited by itself needs no eviction either."""
        metadata = obj.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        key, uid = object_key(obj), str(metadata.get("uid"))
        mark = read_mark(str(annotations.get(keys.SOFT_EVICTION_KEY, "")))
        if mark.notice_seconds <= 0 or mark.timestamp is None:
            return False
        exited = _exited(obj)
        if exited:
            with self._lock:
                first = uid not in self._exited
                self._exited.add(uid)
            if first:
                self.evictions.labels("exited").inc()
                log.info("%s exited on notice: no eviction needed", key)
        due = mark.timestamp + mark.notice_seconds
        ready = exited or answered(annotations, mark.timestamp) or self.clock() >= due
        with self._lock:
            job = self._siblings.restarting_job(obj, mark)
        if job is not None:
            return self._wait_for_siblings(job, key, obj, (due, mark), ready=ready, exited=exited)
        with self._lock:
            if ready:
                self._noticed.pop(key, None)
            else:
                self._noticed[key] = (obj, due)
        return exited or not ready

    def _wait_for_siblings(
        self, job: str, key: str, obj: Json, when: tuple[float, Mark], *, ready: bool, exited: bool
    ) -> bool:
        """A pod on notice whose mark restarts its Job: held back (always ``True``: not
        evicted by the caller).  Until every such pod of its Job is ready (due, answered,
        or exited), the ready ones wait: one pod's answer does not cut its siblings' notice
        short.  The last one ready restarts the Job (:meth:`_restart_all`)."""
        due, mark = when
        with self._lock:
            ready_pods = self._siblings.wait(job, key, obj, mark, ready=ready)
            if not ready:
                self._noticed[key] = (obj, due)
                return True
            self._noticed.pop(key, None)
        if ready_pods is not None:
            self._restart_all(ready_pods)
        return True

    def _restart_all(self, ready: list[Json]) -> None:
        """Restart the Job of ``ready``, its noticed pods all ready (the suspension
        deletes them); if it cannot be restarted, evict those still running, one by one."""
        if self.restarter.restart(ready[0]):
            for pod in ready:
                self._restarting(pod)
            return
        log.warning("could not restart the Job of %s: evicting its pods", object_key(ready[0]))
        for pod in ready:
            uid = str((pod.get("metadata") or {}).get("uid"))
            if _exited(pod):
                with self._lock:  # nothing to evict: acted on all the same
                    self._evicted.add(uid)
                continue
            with self._lock:  # evicted, not restarted (see _call)
                self._overdue.add(uid)
            self._evict(pod)

    def _restarting(self, obj: Json) -> None:
        """``obj``'s Job is suspended to restart it: the pod is counted, and watched, to be
        evicted if still there ``restart_patience_seconds`` later (one that exited stays
        after the suspension, which deletes only active pods: it goes then, its mark with
        it)."""
        metadata = obj.get("metadata") or {}
        key, uid = object_key(obj), str(metadata.get("uid"))
        self.evictions.labels("job-restarted").inc()
        with self._lock:
            self._evicted.add(uid)
            self._waiting.pop(key, None)
            self._restarted[key] = (obj, self.clock())

    def retry_due(self) -> int:
        """Evict the pods whose notice ran out, and try again the refused evictions whose
        backoff is over; return how many were tried."""
        now = self.clock()
        with self._lock:  # taken out here: an unmark seen meanwhile finds nothing
            keys = [key for key, (_obj, due) in self._noticed.items() if due <= now]
            ended = [self._noticed.pop(key)[0] for key in keys]
        for obj in ended:
            self._on_pod("MODIFIED", obj)
        with self._lock:  # marks taken off and not put back: gone, for their Jobs
            given_up = [self._siblings.forget(key) for key in self._siblings.given_up(now)]
        for act_on in (pods for pods in given_up if pods):
            self._restart_all(act_on)
        with self._lock:
            due = [r.obj for r in self._waiting.values() if r.next_try <= now]
            overdue = [
                self._restarted.pop(key)[0]
                for key, (_obj, since) in list(self._restarted.items())
                if since + self.restart_patience_seconds <= now
            ]
            for obj in overdue:
                uid = str((obj.get("metadata") or {}).get("uid"))
                self._evicted.discard(uid)
                self._overdue.add(uid)
        for obj in due:
            self._evict(obj, retry=True)
        for obj in overdue:
            log.warning(
                "%s is still there %.0fs after its Job was suspended: evicting it",
                object_key(obj),
                self.restart_patience_seconds,
            )
            self._evict(obj)
        return len(ended) + len(due) + len(overdue)

    def _evict(self, obj: Json, *, retry: bool = False) -> None:
        metadata = obj.get("metadata") or {}
        key = object_key(obj)
        uid = str(metadata.get("uid"))
        with self._lock:
            if uid in self._evicted or uid in self._claimed:
                return
            if retry and key not in self._waiting:
                return  # unmarked or gone since the retry round listed it
            self._claimed.add(uid)
        try:
            self._call(obj, key, uid)
        finally:
            with self._lock:
                self._claimed.discard(uid)
                self._dropped.discard(uid)

    def _call(self, obj: Json, key: str, uid: str) -> None:
        metadata = obj.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        mark = read_mark(str(annotations.get(keys.SOFT_EVICTION_KEY, "")))
        with self._lock:
            restart = self._siblings.restarting_job(obj, mark)
        if restart is not None and uid not in self._overdue and self.restarter.restart(obj):
            # Its Job deletes it, and re-creates it at once (extender.kube.restarter).
            self._restarting(obj)
            return
        grace = mark.grace_seconds
        try:
            self.writer.evict(str(metadata.get("namespace")), str(metadata.get("name")), uid, grace)
        except ApiError as error:
            if error.status in (404, 409):
                self.evictions.labels("gone").inc()
                with self._lock:
                    self._waiting.pop(key, None)
                return  # gone, or replaced by a new pod of the same name
            self.evictions.labels("refused" if error.status == 429 else "failed").inc()
            self._refused(obj, key, error)
            return
        except (httpx.HTTPError, OSError) as error:
            self.evictions.labels("failed").inc()
            self._refused(obj, key, error)
            return
        self.evictions.labels("evicted").inc()
        log.info("evicted %s", key)
        with self._lock:
            self._evicted.add(uid)
            self._waiting.pop(key, None)

    def _refused(self, obj: Json, key: str, error: Exception) -> None:
        now = self.clock()
        uid = str((obj.get("metadata") or {}).get("uid"))
        with self._lock:
            if uid in self._dropped:
                log.info("evicting %s: %s; no longer marked, not retried", key, error)
                return
            known = self._waiting.get(key)
            attempts = 1 if known is None else known.attempts + 1
            first = now if known is None else known.first_refused
            delay = min(self.retry_seconds * 2 ** (attempts - 1), self.max_retry_seconds)
            delay *= 0.8 + 0.4 * self.jitter()
            self._waiting[key] = _Refused(obj, first, attempts, now + delay)
        log.warning("evicting %s: %s (retry %d in %.1fs)", key, error, attempts, delay)

    def _retry_loop(self) -> None:
        while not self._stop.wait(min(1.0, self.retry_seconds)):
            self.retry_due()
            self.restarter.resume_due()


def _preempted_by_muster(obj: Json) -> bool:
    """Does the pod carry Muster's ``DisruptionTarget=True``?  Muster turns it ``False``
    before it takes a mark back, so on a pod without its mark it says someone else took
    the mark off."""
    try:
        return preempting_component(obj.get("status") or {}) == keys.MUSTER_COMPONENT
    except ManifestError:
        return False


def _exited(obj: Json) -> bool:
    """Has the pod's every container ended (phase ``Succeeded`` or ``Failed``)?"""
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
