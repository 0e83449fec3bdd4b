"""The evictor's book of the victims whose marks restart their Job.

A mark may say to restart the victim's Job whole (:mod:`extender.core.restart`) rather
than evict its pods one by one.  Each such pod waits on notice until it is ready (its
notice due, answered, or it exited); the Job is restarted once every one of them is
ready, for the suspension deletes them all: one pod's answer does not cut its siblings'
notice short.  A victim Muster spares (its mark taken back while it runs) keeps its Job
from being restarted for that plan: its siblings are evicted one by one, those already
ready shortly (Muster may be taking their marks back too).  Another plan's restart mark
(another preemptor, or written later) restarts the Job again.  A pod whose mark its owner
took off stays in the book (Muster marks it again) for :data:`STRIPPED_PATIENCE_SECONDS`;
not marked again by then (it exited, say), it is forgotten as gone.  Bookkeeping only:
:class:`~extender.kube.evictor.Evictor` calls it under its lock, and does the evicting.
"""

from __future__ import annotations

from extender.core.marks import Mark
from extender.kube.client import Json
from extender.kube.restarter import job_key

#: How long a pod whose mark its owner took off is waited for, to be marked again.
STRIPPED_PATIENCE_SECONDS = 10.0
#: How long a spared victim's ready siblings wait before their eviction (their own marks
#: may be on their way back).
SPARED_SIBLING_DELAY_SECONDS = 5.0


class RestartSiblings:
    """Per Job, its pods on notice whose marks restart it (see the module docstring)."""

    def __init__(self) -> None:
        #: Job (namespace/UID) → each such pod's key → the pod once it is ready, ``None``
        #: until then.
        self._pods: dict[str, dict[str, Json | None]] = {}
        self._job_of: dict[str, str] = {}  # pod key → its Job, for those
        #: Job → the latest mark of its pods on notice (a plan's marks may be stamped a
        #: second apart: written at once, across a second's turn).
        self._marks: dict[str, Mark] = {}
        #: Jobs a victim of which was spared: the spared plan's mark (its preemptor and
        #: time); not restarted for that plan's marks.
        self._kept: dict[str, Mark] = {}
        #: Pods whose marks their owners took off, by key: when they are given up.
        self.stripped: dict[str, float] = {}

    def restarting_job(self, obj: Json, mark: Mark) -> str | None:
        """The Job a marked pod's eviction restarts: its ``mark`` says so, and no victim
        of that plan was spared."""
        job = job_key(obj.get("metadata") or {}) if mark.restart_job else None
        if job is None or job not in self._kept:
            return job
        kept = self._kept[job]
        later = mark.timestamp is not None and (kept.timestamp or 0.0) < mark.timestamp
        if mark.preemptor != kept.preemptor or later:
            del self._kept[job]  # another plan's mark: restart it again
            return job
        return None

    def wait(self, job: str, key: str, obj: Json, mark: Mark, *, ready: bool) -> list[Json] | None:
        """Note ``obj`` (keyed ``key``) of ``job`` on notice under ``mark``, ready or not;
        once every such pod of the Job is ready, forget them and return them (the Job is
        to restart), else ``None``."""
        pods = self._pods.setdefault(job, {})
        self._job_of[key] = job
        latest = self._marks.get(job)
        if latest is None or (mark.timestamp or 0.0) > (latest.timestamp or 0.0):
            self._marks[job] = mark
        self.stripped.pop(key, None)
        pods[key] = obj if ready else None
        return self._all_ready(job) if ready else None

    def forget(self, key: str, *, spared: bool = False) -> list[Json]:
        """Forget a pod gone or unmarked.  Returns the pods to act on: when it was
        ``spared`` (unmarked by Muster while it runs), its Job is kept and its siblings
        already ready are returned to be evicted one by one; else, when the others were
        all ready and waited for it alone, them (the Job is to restart)."""
        self.stripped.pop(key, None)
        job = self._job_of.pop(key, None)
        pods = self._pods.get(job) if job is not None else None
        if job is None or pods is None:
            return []
        if spared:
            self._kept[job] = self._marks.pop(job)
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
        self._marks.pop(job, None)
        for key in pods:
            self._job_of.pop(key, None)
        return ready

    def strip(self, key: str, now: float) -> None:
        """Its owner took ``key``'s mark off: keep it in the book, for a while."""
        if key in self._job_of:
            self.stripped[key] = now + STRIPPED_PATIENCE_SECONDS

    def given_up(self, now: float) -> list[str]:
        """The pods whose marks were taken off and not put back in time."""
        return [key for key, until in self.stripped.items() if until <= now]
