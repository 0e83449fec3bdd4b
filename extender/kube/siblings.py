"""The evictor's book of the victims whose marks restart their Job.

A mark may say to restart the victim's Job whole (:mod:`extender.core.restart`) rather
than evict its pods one by one.  Each such pod waits on notice until it is ready (its
notice due, answered, or it exited); the Job is restarted once every one of them is
ready, for the suspension deletes them all: one pod's answer does not cut its siblings'
notice short.  A victim Muster spares (its mark taken back while it runs) keeps its Job
from being restarted for that plan: its siblings are evicted one by one, those already
ready at once.  A later plan's restart mark (written after the spare) restarts the Job
again.  Bookkeeping only: :class:`~extender.kube.evictor.Evictor` calls it under its
lock, and does the evicting.
"""

from __future__ import annotations

from extender.kube.client import Json
from extender.kube.restarter import job_key


class RestartSiblings:
    """Per Job, its pods on notice whose marks restart it (see the module docstring)."""

    def __init__(self) -> None:
        #: Job (namespace/UID) → each such pod's key → the pod once it is ready, ``None``
        #: until then.
        self._pods: dict[str, dict[str, Json | None]] = {}
        self._job_of: dict[str, str] = {}  # pod key → its Job, for those
        #: Jobs a victim of which was spared, and when: not restarted for marks as old.
        self._kept: dict[str, float] = {}

    def restarting_job(self, obj: Json, restart: bool, marked_at: float | None) -> str | None:
        """The Job a marked pod's eviction restarts: its mark says so (``restart``,
        written at ``marked_at``), and no victim of that plan was spared."""
        job = job_key(obj.get("metadata") or {}) if restart else None
        if job is None or job not in self._kept:
            return job
        if marked_at is not None and marked_at > self._kept[job]:
            del self._kept[job]  # a later plan's mark: restart it again
            return job
        return None

    def wait(self, job: str, key: str, obj: Json, *, ready: bool) -> list[Json] | None:
        """Note ``obj`` (keyed ``key``) of ``job`` on notice, ready or not; once every
        such pod of the Job is ready, forget them and return them (the Job is to
        restart), else ``None``."""
        pods = self._pods.setdefault(job, {})
        self._job_of[key] = job
        pods[key] = obj if ready else None
        return self._all_ready(job) if ready else None

    def forget(self, key: str, *, spared_at: float | None = None) -> list[Json]:
        """Forget a pod gone or unmarked.  Returns the pods to act on now: when it was
        spared (unmarked while it runs, at ``spared_at``), its Job is kept and its
        siblings already ready are returned to be evicted one by one; else, when the
        others were all ready and waited for it alone, them (the Job is to restart)."""
        job = self._job_of.pop(key, None)
        pods = self._pods.get(job) if job is not None else None
        if job is None or pods is None:
            return []
        if spared_at is not None:
            self._kept[job] = spared_at
            del self._pods[job]
            for other in pods:
                self._job_of.pop(other, None)
            return [pod for other, pod in pods.items() if other != key and pod is not None]
        pods.pop(key, None)
        return self._all_ready(job) or []

    def _all_ready(self, job: str) -> list[Json] | None:
        """When every noticed pod of ``job`` is ready, forget them and return them."""
        pods = self._pods[job]
        ready = [pod for pod in pods.values() if pod is not None]
        if len(ready) < len(pods):
            return None
        del self._pods[job]
        for key in pods:
            self._job_of.pop(key, None)
        return ready
