"""Writing decisions to the cluster: soft-eviction marks, reservations, events, evictions.

Every write is a merge patch (or a create) that carries the pod's UID as a
precondition, so a pod that was deleted and re-created under the same name
is never touched by a decision about its predecessor, and retried writes are
idempotent.  Transient failures (connection errors, 429, 5xx) are retried
with capped exponential backoff; anything else is raised.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from base import keys
from base.times import format_time
from extender.core.objects import PodInfo
from extender.core.records import RecordKeys
from extender.kube.client import ApiError, Json, KubeClient

log = logging.getLogger(__name__)

_T = TypeVar("_T")
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
COMPONENT = keys.MUSTER_COMPONENT


class ClusterWriter:
    def __init__(
        self,
        client: KubeClient,
        clock: Callable[[], float] = time.time,
        attempts: int = 5,
        backoff: float = 0.2,
        *,
        record_keys: Callable[[], RecordKeys],
    ) -> None:
        self.client = client
        self.clock = clock
        #: What Muster's records are signed with (:mod:`extender.core.records`).
        self.record_keys = record_keys
        self.attempts = attempts
        self.backoff = backoff

    def retrying(self, action: Callable[[], _T]) -> _T:
        """Run ``action``, retrying transient failures with backoff."""
        delay = self.backoff
        for attempt in range(self.attempts):
            try:
                return action()
            except ApiError as error:
                if error.status not in (429, 500, 502, 503, 504) or attempt == self.attempts - 1:
                    raise
            except httpx.TransportError:
                if attempt == self.attempts - 1:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def mark_victim(
        self,
        pod: PodInfo,
        *,
        preemptor: str | None,
        reason: str,
        grace_seconds: int | None,
        notice_seconds: float = 0.0,
    ) -> None:
        """Label and annotate a victim for soft eviction, set ``DisruptionTarget``, emit
        a ``Preempted`` event (:meth:`label_victim`, then :meth:`record_disruption`).
        ``preemptor`` is the job it makes room for (``None``: a drain, for no job)."""
        self.label_victim(
            pod,
            preemptor=preemptor,
            reason=reason,
            grace_seconds=grace_seconds,
            notice_seconds=notice_seconds,
        )
        self.record_disruption(pod, preemptor=preemptor, reason=reason)

    def label_victim(
        self,
        pod: PodInfo,
        *,
        preemptor: str | None,
        reason: str,
        grace_seconds: int | None,
        notice_seconds: float = 0.0,
        restart_job: bool = False,
    ) -> None:
        """The mark itself: the soft-eviction label and annotation (one patch), what the
        evictor acts on and what makes the victim departing for every replica; with
        ``notice_seconds``, the time the victim has to save its work before its eviction
        (:mod:`extender.core.notice`)."""
        mark: Json = {
            "timestamp": format_time(self.clock()),
            "initiator": COMPONENT,
            "reason": reason,
            "preemptor": preemptor,
            "deleteOptions": {"gracePeriodSeconds": grace_seconds},
        }
        if notice_seconds > 0:
            mark["noticeSeconds"] = notice_seconds
        if restart_job:
            mark["restartJob"] = True
        self.patch_pod(
            pod,
            {
                "labels": {keys.SOFT_EVICTION_KEY: "true"},
                "annotations": {
                    keys.SOFT_EVICTION_KEY: self._signed(keys.SOFT_EVICTION_KEY, pod, mark)
                },
            },
        )

    def _signed(self, record: str, pod: PodInfo, payload: Json) -> str:
        """The annotation text of Muster's ``record`` on ``pod``: ``payload``, signed."""
        return json.dumps(self.record_keys().sign(record, pod.uid, payload))

    def record_disruption(self, pod: PodInfo, *, preemptor: str | None, reason: str) -> None:
        """What follows a mark, for people and controllers: a ``Preempted`` event, then the
        ``DisruptionTarget`` condition.  The event comes first: the evictor may have
        removed the victim since its mark, and the event is history that outlives it
        (the condition's patch then fails with 404, for the caller to ignore)."""
        cause = f"preempted by job {preemptor}" if preemptor is not None else "drained"
        # Named by the pod and its preemptor: a Muster that completes the record after
        # another stopped between this event and the condition cannot post it twice.
        once = hashlib.sha256(f"{pod.uid}/{preemptor}".encode()).hexdigest()[:16]
        name = f"{pod.name}.preempted.{once}"
        self.event(pod, "Preempted", f"Marked for eviction, {cause}: {reason}", name=name)
        self._set_condition(
            pod, "DisruptionTarget", "True", keys.PREEMPTION_BY_SCHEDULER, f"{cause}: {reason}"
        )

    def record_admitted_preemptible(self, pod: PodInfo) -> None:
        """Record on a pod admitted preemptible, whose label now says otherwise, that it
        stays preemptible: Muster's ``muster.dev/AdmittedPreemptible`` condition (pod
        status, which its owner cannot write), for every replica and after a restart."""
        why = (
            f"admitted preemptible; its {keys.PREEMPTIBLE_LABEL} label changed afterwards, "
            "and it stays preemptible"
        )
        self._set_condition(
            pod, keys.ADMITTED_PREEMPTIBLE_CONDITION, "True", "LabelChangedAfterAdmission", why
        )

    def unmark_victim(self, pod: PodInfo, reason: str) -> None:
        """Take a victim's soft-eviction mark back (its plan was abandoned, or it was
        spared): ``DisruptionTarget`` turns ``False``, then the label and annotation go,
        and an event says why.  In that order, Muster's ``DisruptionTarget=True`` on a pod
        without its mark always means someone else took the mark off (the evictor, and
        Muster itself, tell that from a mark taken back)."""
        self._set_condition(pod, "DisruptionTarget", "False", keys.PREEMPTION_ABANDONED, reason)
        self.patch_pod(
            pod,
            {
                "labels": {keys.SOFT_EVICTION_KEY: None},
                "annotations": {keys.SOFT_EVICTION_KEY: None},
            },
        )
        self.event(pod, keys.PREEMPTION_ABANDONED, reason, kind="Warning")

    def _set_condition(
        self, pod: PodInfo, kind: str, status: str, reason: str, message: str
    ) -> None:
        """Set the pod condition ``kind`` (Muster's, its message ``"muster: <message>"``)
        through the status subresource; the patch merges conditions by type."""
        condition = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": f"{COMPONENT}: {message}",
            "lastTransitionTime": format_time(self.clock()),
        }
        self.patch_pod(pod, {}, status={"conditions": [condition]}, content_type=STRATEGIC_PATCH)

    def persist_reservation(self, pod: PodInfo, reservation: Json) -> None:
        """Persist a pod's reservation in its annotation (a restarted Muster reads it)."""
        written = self._signed(keys.RESERVATION_ANNOTATION, pod, reservation)
        self.patch_pod(pod, {"annotations": {keys.RESERVATION_ANNOTATION: written}})

    def persist_backoff(self, pod: PodInfo, backoff: Json) -> None:
        """Persist a given-up gang's backoff on one of its pending pods."""
        written = self._signed(keys.GANG_BACKOFF_ANNOTATION, pod, backoff)
        self.patch_pod(pod, {"annotations": {keys.GANG_BACKOFF_ANNOTATION: written}})

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Set ``status.nominatedNodeName``: kube-scheduler tries that node first, and keeps
        lower-priority pods off the room (the update also requeues the pod)."""
        self.patch_pod(pod, {}, status={"nominatedNodeName": node})

    def release_room(self, pod: PodInfo, *, nominated: bool) -> None:
        """Drop a pod's persisted reservation (expired, or the job went away), and with
        ``nominated`` the ``nominatedNodeName`` Muster wrote for it: a stale nomination
        would keep kube-scheduler holding the room, and look like kube-scheduler's own."""
        self.patch_pod(pod, {"annotations": {keys.RESERVATION_ANNOTATION: None}})
        if nominated:
            self.patch_pod(pod, {}, status={"nominatedNodeName": None})

    def patch_pod(
        self,
        pod: PodInfo,
        metadata: Json,
        *,
        status: Json | None = None,
        content_type: str = MERGE_PATCH,
    ) -> None:
        """Patch the pod's metadata, or with ``status`` its status subresource, with its
        UID as a precondition; retried when transient."""
        path = _pod_path(pod)
        body: Json = {"metadata": {"uid": pod.uid, **metadata}}
        if status is not None:
            path = f"{path}/status"
            body["status"] = status
        self.retrying(lambda: self.client.request("PATCH", path, body, content_type=content_type))

    def merge_patch(self, path: str, body: Json) -> None:
        """Merge-patch the object (or subresource) at ``path``; retried when transient."""
        self.retrying(lambda: self.client.request("PATCH", path, body, content_type=MERGE_PATCH))

    def evict(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> None:
        """Evict through the Eviction API (PodDisruptionBudgets apply: 429 is retried)."""
        delete_options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if grace_seconds is not None:
            delete_options["gracePeriodSeconds"] = grace_seconds
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": delete_options,
        }
        self.retrying(
            lambda: self.client.request(
                "POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body
            )
        )

    def event(
        self,
        pod: PodInfo,
        reason: str,
        message: str,
        kind: str = "Normal",
        *,
        name: str | None = None,
    ) -> None:
        """Record an Event on a pod (best effort: a lost event is logged, not raised);
        ``name``: the event's own name, so that it is posted at most once (an event of
        that name already there is the same event)."""
        now = format_time(self.clock())
        naming = {"name": name} if name is not None else {"generateName": f"{pod.name}."}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {**naming, "namespace": pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.retrying(
                lambda: self.client.request(
                    "POST", f"/api/v1/namespaces/{pod.namespace}/events", body
                )
            )
        except ApiError as error:
            if name is not None and error.status == 409:
                return  # posted already
            log.warning("event %s on %s lost: %s", reason, pod.key, error)
        except httpx.HTTPError as error:
            log.warning("event %s on %s lost: %s", reason, pod.key, error)


def _pod_path(pod: PodInfo) -> str:
    return f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"


def best_effort(pod: PodInfo, write: Callable[[PodInfo], object]) -> bool:
    """Write to ``pod``; a pod gone or replaced meanwhile (404, 409) needs nothing, other
    failures are logged.  Returns whether the write went through."""
    try:
        write(pod)
    except ApiError as error:
        if error.status not in (404, 409):
            log.warning("write to %s: %s", pod.key, error)
        return False
    except httpx.HTTPError as error:
        log.warning("write to %s: %s", pod.key, error)
        return False
    return True
