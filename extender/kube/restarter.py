"""Restarting a Job whose pods are all victims: suspend it, resume it once they are gone.

The evictor's other way to evict (:mod:`extender.kube.evictor`): a victim whose mark says
``restartJob`` (:mod:`extender.core.restart`: every pod of its Job is a victim of one
plan) is not evicted; its Job is suspended, which deletes the Job's pods without
counting them as failures, then resumed once none is active, so the Job controller
creates their replacements at once rather than after its failure backoff.

The suspension is recorded on the Job (label and annotation ``muster.dev/restarting``,
the annotation signed for the Job's UID as Muster's records on pods are,
:mod:`extender.core.records`), so an evictor restarted half-way resumes the Jobs it
suspended (:meth:`JobRestarter.recover`) and never one that anybody else suspended: a
tenant's own label on its Job, or an annotation copied from another Job, is not believed.
A Job another controller manages (``spec.managedBy``), one already suspended, one whose
selector does not select the pod (an owner reference is the pod writer's to forge), or one
the evictor may not read or patch is not restarted: its pods are evicted as before; and a
pod still there ``restart_patience_seconds`` after its Job's suspension is evicted too
(:class:`~extender.kube.evictor.Evictor`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from base import keys
from base.times import format_time
from extender.core.records import RecordKeys
from extender.kube.client import ApiError, Json, KubeClient

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
#: The ``spec.managedBy`` of a Job the built-in Job controller runs (unset means it too).
JOB_CONTROLLER = "kubernetes.io/job-controller"


class JobRestarter:
    """Suspends Jobs to restart them, and resumes them once their pods are gone."""

    def __init__(
        self,
        client: KubeClient,
        *,
        record_keys: Callable[[], RecordKeys],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.record_keys = record_keys
        self.clock = clock
        self._suspended: dict[str, str] = {}  # "namespace/name" → the Job's UID
        self._lock = threading.Lock()

    def restart(self, pod: Json) -> bool:
        """Restart the Job owning the marked ``pod`` (see the module docstring): ``True``
        when it is suspended now or was already (the pod needs no eviction), ``False``
        when it cannot be (evict the pod instead)."""
        metadata = pod.get("metadata") or {}
        owner = _job_owner(metadata)
        if owner is None:
            return False
        namespace, (name, uid) = str(metadata.get("namespace")), owner
        key = f"{namespace}/{name}"
        with self._lock:
            if self._suspended.get(key) == uid:
                return True
        try:
            job = self.client.request("GET", _job_path(namespace, name))
            spec = job.get("spec") or {}
            if (job.get("metadata") or {}).get("uid") != uid or spec.get("suspend"):
                return False
            if spec.get("managedBy") not in (None, JOB_CONTROLLER):
                return False
            if not _selected(metadata, spec.get("selector")):
                return False  # not a pod the Job controller would delete
            record = self.record_keys().sign(
                keys.RESTARTING_KEY, uid, {"timestamp": format_time(self.clock())}
            )
            self.client.request(
                "PATCH",
                _job_path(namespace, name),
                {
                    "metadata": {
                        "uid": uid,  # a precondition: never a new Job of the same name
                        "labels": {keys.RESTARTING_KEY: "true"},
                        "annotations": {keys.RESTARTING_KEY: json.dumps(record)},
                    },
                    "spec": {"suspend": True},
                },
                content_type=MERGE_PATCH,
            )
        except (ApiError, httpx.HTTPError, OSError) as error:
            log.warning("restarting job %s: %s; its pods are evicted instead", key, error)
            return False
        with self._lock:
            self._suspended[key] = uid
        log.info("suspended job %s to restart it (its pods are all victims)", key)
        return True

    def resume_due(self) -> int:
        """Resume the Jobs suspended here whose pods are gone (none active); return how
        many were resumed.  A Job deleted, replaced, or resumed by someone else is let go."""
        with self._lock:
            suspended = dict(self._suspended)
        resumed = 0
        for key, uid in suspended.items():
            namespace, name = key.split("/", 1)
            try:
                job = self.client.request("GET", _job_path(namespace, name))
                ours = (job.get("metadata") or {}).get("uid") == uid
                if ours and (job.get("spec") or {}).get("suspend"):
                    if (job.get("status") or {}).get("active"):
                        continue  # its pods are still being deleted
                    self.client.request(
                        "PATCH",
                        _job_path(namespace, name),
                        {
                            "metadata": {
                                "uid": uid,
                                "labels": {keys.RESTARTING_KEY: None},
                                "annotations": {keys.RESTARTING_KEY: None},
                            },
                            "spec": {"suspend": False},
                        },
                        content_type=MERGE_PATCH,
                    )
                    resumed += 1
                    log.info("resumed job %s: its pods are re-created", key)
            except ApiError as error:
                if error.status != 404:  # (not gone: tried again next round)
                    log.warning("resuming job %s: %s (will retry)", key, error)
                    continue
            except (httpx.HTTPError, OSError) as error:
                log.warning("resuming job %s: %s (will retry)", key, error)
                continue
            with self._lock:
                if self._suspended.get(key) == uid:
                    del self._suspended[key]
        return resumed

    def recover(self) -> int:
        """Take up the Jobs an earlier evictor suspended and did not resume (their record
        believed, for their UID); return how many."""
        try:
            listed = self.client.request(
                "GET", "/apis/batch/v1/jobs", params={"labelSelector": keys.RESTARTING_KEY}
            )
        except (ApiError, httpx.HTTPError, OSError) as error:
            log.warning("listing the jobs being restarted: %s", error)
            return 0
        found = 0
        for job in listed.get("items") or []:
            metadata = job.get("metadata") or {}
            uid = metadata.get("uid")
            text = (metadata.get("annotations") or {}).get(keys.RESTARTING_KEY)
            if isinstance(uid, str) and _believed(self.record_keys(), uid, text):
                with self._lock:
                    self._suspended[f"{metadata.get('namespace')}/{metadata.get('name')}"] = uid
                found += 1
        return found

    def suspended(self) -> Mapping[str, str]:
        """The Jobs suspended here and not resumed yet: "namespace/name" → UID."""
        with self._lock:
            return dict(self._suspended)


def _job_owner(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """The name and UID of the ``batch/v1`` Job controlling a pod, if one does."""
    for ref in metadata.get("ownerReferences") or ():
        if (
            isinstance(ref, Mapping)
            and ref.get("controller") is True
            and ref.get("kind") == "Job"
            and str(ref.get("apiVersion", "")).startswith("batch/")
            and isinstance(ref.get("name"), str)
            and isinstance(ref.get("uid"), str)
        ):
            return ref["name"], ref["uid"]
    return None


def _selected(metadata: Mapping[str, Any], selector: object) -> bool:
    """Do the pod's labels match the Job's ``matchLabels`` (a tenant may write an owner
    reference on its own pod; the Job controller deletes only the pods it selects)?  A
    selector with ``matchExpressions`` is not judged here: ``False``."""
    if not isinstance(selector, Mapping) or selector.get("matchExpressions"):
        return False
    wanted = selector.get("matchLabels")
    labels = metadata.get("labels") or {}
    return (
        isinstance(wanted, Mapping)
        and bool(wanted)
        and all(labels.get(name) == value for name, value in wanted.items())
    )


def _believed(record_keys: RecordKeys, uid: str, text: object) -> bool:
    """Is ``text`` Muster's restarting record for the Job ``uid``?"""
    if not isinstance(text, str):
        return False
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(payload, dict) and record_keys.verify(keys.RESTARTING_KEY, uid, payload)


def _job_path(namespace: str, name: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}"
