"""Restarting a Job whose pods are all victims: suspend it, resume it once they are gone.

The evictor's other way to evict (:mod:`extender.kube.evictor`): a victim whose mark says
``restartJob`` (:mod:`extender.core.restart`: every pod of its Job is a victim of one
plan) is not evicted; its Job is suspended, which deletes the Job's pods without
counting them as failures, then resumed once none is active or terminating, so the Job
controller creates their replacements at once rather than after its failure backoff.

The suspension is recorded on the Job (label and annotation ``muster.dev/restarting``,
the annotation signed for the Job's UID as Muster's records on pods are,
:mod:`extender.core.records`): the evictor resumes a Job only while that record is on
it, takes the record off when it lets a Job go (someone else resumed it), and an evictor
restarted half-way takes up the Jobs it suspended (:meth:`JobRestarter.recover`), never
one that anybody else did: a tenant's own label on its Job, or a record copied from
another Job, is not believed.

A Job started after the mark of the pod it is asked to restart for (the Job controller
sets ``status.startTime`` anew when a Job is resumed) was restarted since, by this
evictor or an earlier one: it is not restarted again, for that would delete the
replacements it runs now.

Not restarted, the pod evicted as before: a pod whose owner reference (its writer's to
write) names no valid Job name, or a Job that does not select it; a Job already
suspended, another controller manages (``spec.managedBy``), or that is itself run by
another controller (a JobSet's; Kueue's, by its queue label), which may resume it on its
own; and any Job the evictor may not read or patch.  A pod still there a while after its
Job's suspension is evicted too (:class:`~extender.kube.evictor.Evictor`).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from base import keys
from base.times import claimed_time, format_time
from extender.core.marks import read_mark
from extender.core.records import RecordKeys
from extender.kube.client import ApiError, Json, KubeClient

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
#: The ``spec.managedBy`` of a Job the built-in Job controller runs (unset means it too).
JOB_CONTROLLER = "kubernetes.io/job-controller"
#: The label by which Kueue manages a Job (suspending and resuming it itself).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: A Job's name: a DNS-1123 subdomain (so never a path: an owner reference is the pod
#: writer's to write).
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
#: The longest wait between two tries of resuming one Job.
MAX_RESUME_DELAY = 60.0


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
        #: "namespace/name" → (the Job's UID, when to try it next, the delay after that).
        self._suspended: dict[str, tuple[str, float, float]] = {}
        self._recovered = False
        self._lock = threading.Lock()
        #: Held through one restart's read and patch: the evictor's watch and retry
        #: threads may restart the same Job at once, and the second would read the Job
        #: the first just suspended, refuse it as suspended already, and evict its pod.
        self._restarting = threading.Lock()

    def restart(self, pod: Json) -> bool:
        """Restart the Job owning the marked ``pod`` (see the module docstring): ``True``
        when it is suspended now or was already (the pod needs no eviction), ``False``
        when it is not (evict the pod instead)."""
        metadata = pod.get("metadata") or {}
        owner = job_owner(metadata)
        if owner is None:
            return False
        namespace, (name, uid) = str(metadata.get("namespace")), owner
        key = f"{namespace}/{name}"
        with self._restarting:
            with self._lock:
                if key in self._suspended and self._suspended[key][0] == uid:
                    return True
            return self._suspend(key, namespace, name, uid, metadata)

    def _suspend(self, key: str, namespace: str, name: str, uid: str, metadata: Json) -> bool:
        """Read the Job and suspend it with Muster's record (:meth:`restart`)."""
        try:
            job = self.client.request("GET", _job_path(namespace, name))
            if not _restartable(job, namespace, name, uid, metadata):
                return False
            record = self.record_keys().sign(
                keys.RESTARTING_KEY, uid, {"timestamp": format_time(self.clock())}
            )
            body = {
                "metadata": {
                    "uid": uid,  # a precondition: never a new Job of the same name
                    "labels": {keys.RESTARTING_KEY: "true"},
                    "annotations": {keys.RESTARTING_KEY: json.dumps(record)},
                },
                "spec": {"suspend": True},
            }
            self.client.request("PATCH", _job_path(namespace, name), body, content_type=MERGE_PATCH)
        except ApiError as error:
            log.warning("restarting job %s: %s; its pods are evicted instead", key, error)
            return False
        except (httpx.HTTPError, OSError) as error:
            # The patch may have been applied: the Job is looked at again (and resumed,
            # if it carries the record) as one being restarted; this pod is evicted.
            log.warning("restarting job %s: %s; its pods are evicted instead", key, error)
            self._track(key, uid)
            return False
        self._track(key, uid)
        log.info("suspended job %s to restart it (its pods are all victims)", key)
        return True

    def resume_due(self) -> int:
        """Resume the Jobs suspended here whose pods are gone (none active or
        terminating); return how many were resumed.  A Job deleted, replaced, or resumed
        by someone else is let go (the record taken off what is left)."""
        if not self._recovered:
            self.recover()
        now = self.clock()
        with self._lock:
            due = {key: entry for key, entry in self._suspended.items() if entry[1] <= now}
        resumed = 0
        for key, (uid, _at, delay) in due.items():
            namespace, name = key.split("/", 1)
            try:
                job = self.client.request("GET", _job_path(namespace, name))
                metadata, status = job.get("metadata") or {}, job.get("status") or {}
                ours = metadata.get("uid") == uid and _believed(
                    self.record_keys(),
                    uid,
                    (metadata.get("annotations") or {}).get(keys.RESTARTING_KEY),
                )
                suspended = bool((job.get("spec") or {}).get("suspend"))
                if ours and suspended and (status.get("active") or status.get("terminating")):
                    self._later(key, uid, delay)  # its pods are still being deleted
                    continue
                if ours:  # resumed now, or by someone else: the record goes either way
                    body: Json = {
                        "metadata": {
                            "uid": uid,
                            "labels": {keys.RESTARTING_KEY: None},
                            "annotations": {keys.RESTARTING_KEY: None},
                        }
                    }
                    if suspended:
                        body["spec"] = {"suspend": False}
                    self.client.request(
                        "PATCH", _job_path(namespace, name), body, content_type=MERGE_PATCH
                    )
                    if suspended:
                        resumed += 1
                        log.info("resumed job %s: its pods are re-created", key)
            except ApiError as error:
                if error.status != 404:  # not gone: tried again later
                    log.warning("resuming job %s: %s (will retry)", key, error)
                    self._later(key, uid, delay)
                    continue
            except (httpx.HTTPError, OSError) as error:
                log.warning("resuming job %s: %s (will retry)", key, error)
                self._later(key, uid, delay)
                continue
            with self._lock:
                if key in self._suspended and self._suspended[key][0] == uid:
                    del self._suspended[key]
        return resumed

    def recover(self) -> int:
        """Take up the Jobs an earlier evictor suspended and did not resume (their record
        believed, for their UID); return how many.  Tried again on each round of
        :meth:`resume_due` until the list succeeds."""
        try:
            listed = self.client.request(
                "GET", "/apis/batch/v1/jobs", params={"labelSelector": keys.RESTARTING_KEY}
            )
        except (ApiError, httpx.HTTPError, OSError) as error:
            log.warning("listing the jobs being restarted: %s (will retry)", error)
            return 0
        self._recovered = True
        found = 0
        for job in listed.get("items") or []:
            metadata = job.get("metadata") or {}
            uid = metadata.get("uid")
            text = (metadata.get("annotations") or {}).get(keys.RESTARTING_KEY)
            if isinstance(uid, str) and _believed(self.record_keys(), uid, text):
                self._track(f"{metadata.get('namespace')}/{metadata.get('name')}", uid)
                found += 1
        return found

    def suspended(self) -> Mapping[str, str]:
        """The Jobs being restarted here: "namespace/name" → UID."""
        with self._lock:
            return {key: entry[0] for key, entry in self._suspended.items()}

    def _track(self, key: str, uid: str) -> None:
        with self._lock:
            self._suspended[key] = (uid, self.clock(), 1.0)

    def _later(self, key: str, uid: str, delay: float) -> None:
        """Try ``key`` again after ``delay`` seconds, doubling up to a minute."""
        with self._lock:
            if key in self._suspended and self._suspended[key][0] == uid:
                next_delay = min(delay * 2, MAX_RESUME_DELAY)
                self._suspended[key] = (uid, self.clock() + delay, next_delay)


def _restartable(
    job: Mapping[str, Any], namespace: str, name: str, uid: str, pod: Mapping[str, Any]
) -> bool:
    """May the Job ``job`` (as read) be restarted for the pod whose ``metadata`` is
    ``pod``: it is that pod's Job, selects it, runs under the Job controller alone, is
    not suspended already, and has not been restarted since the pod's mark?"""
    metadata, spec = job.get("metadata") or {}, job.get("spec") or {}
    if (metadata.get("uid"), metadata.get("namespace"), metadata.get("name")) != (
        uid,
        namespace,
        name,
    ):
        return False
    if spec.get("suspend") or spec.get("managedBy") not in (None, JOB_CONTROLLER):
        return False
    if _resumed_since_marked(job, pod):
        return False
    if KUEUE_QUEUE_LABEL in (metadata.get("labels") or {}):
        return False
    owners = metadata.get("ownerReferences") or ()
    if any(ref.get("controller") and ref.get("kind") != "CronJob" for ref in owners):
        return False  # a JobSet's Job, say: its controller may resume it on its own
    return _selected(pod, spec.get("selector"))


def _resumed_since_marked(job: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Was the Job started after the pod's mark was written?  The Job controller clears
    a Job's ``status.startTime`` when it is suspended and sets it again when it is
    resumed, so such a Job was restarted (or resumed by its owner) since: a pod of it
    still marked has exited, or outlived the suspension, and restarting the Job again
    would delete the replacements it runs now.  Every process of the evictor reads it
    the same (the pod's later events, a new evictor's first list).  Time stamps are to
    the second, so a Job started in the mark's second counts as started before it."""
    annotations = pod.get("annotations") or {}
    marked = read_mark(str(annotations.get(keys.SOFT_EVICTION_KEY, ""))).timestamp
    started = claimed_time((job.get("status") or {}).get("startTime"))
    return marked is not None and started is not None and started > marked


def job_key(metadata: Mapping[str, Any]) -> str | None:
    """``namespace/UID`` of the ``batch/v1`` Job controlling a pod (:func:`job_owner`)."""
    owner = job_owner(metadata)
    return None if owner is None else f"{metadata.get('namespace')}/{owner[1]}"


def job_owner(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """The name and UID of the ``batch/v1`` Job controlling a pod, if one does (a name
    that is a valid Job name)."""
    for ref in metadata.get("ownerReferences") or ():
        if (
            isinstance(ref, Mapping)
            and ref.get("controller") is True
            and ref.get("kind") == "Job"
            and ref.get("apiVersion") == "batch/v1"
            and isinstance(ref.get("name"), str)
            and _NAME.fullmatch(ref["name"])
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
    return f"/apis/batch/v1/namespaces/{quote(namespace, safe='')}/jobs/{quote(name, safe='')}"
