"""The soak's workload figures (issue 24): what the users of a shared GPU cluster feel.

Pure bookkeeping, fed by the driver (:mod:`tests.soak.run`) from the pods it watches and
the Jobs it reads back:

* ``GpuSeconds``: GPU-seconds held by bound pods (from the bind until the pod finishes or
  is gone; a terminating pod still holds its GPUs), over the stream's window;
* ``job_completion_figures``: Jobs completed, completion time (creation to
  ``status.completionTime``) p50/p95 per priority class, and evictions per completed Job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from base.resources import pod_requests
from extender.core.objects import parse_time
from tests.soak.invariants import percentile

Json = dict[str, Any]


@dataclass
class GpuSeconds:
    """GPU-seconds held by pods, each from the moment it is seen bound until it is seen
    finished or gone."""

    #: pod key → (GPUs, held since) for the pods holding GPUs now.
    holding: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: GPU-seconds of holds that ended.
    ended: float = 0.0

    def observe(self, key: str, gpus: float, holds: bool, at: float) -> None:
        """The pod ``key`` is seen at ``at``: holding ``gpus`` GPUs (bound, not finished)
        or not (pending, finished, deleted)."""
        current = self.holding.get(key)
        if holds and current is None:
            self.holding[key] = (gpus, at)
        elif not holds and current is not None:
            held, since = self.holding.pop(key)
            self.ended += held * max(0.0, at - since)

    def total(self, until: float) -> float:
        """GPU-seconds held up to ``until``, counting the holds still going on."""
        going = sum(gpus * max(0.0, until - since) for gpus, since in self.holding.values())
        return self.ended + going


def pod_gpus(obj: Mapping[str, Any], resource: str) -> float:
    """The GPUs a pod manifest requests, by the Kubernetes rules (``pod_requests``)."""
    return pod_requests(obj.get("spec") or {}).get(resource, 0) / 1000


def holds_gpus(obj: Mapping[str, Any]) -> bool:
    """Bound and not finished: the pod's GPUs are taken (terminating ones included)."""
    phase = (obj.get("status") or {}).get("phase")
    return bool((obj.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class CompletedJob:
    name: str
    priority_class: str
    seconds: float


def completed_jobs(
    jobs: Iterable[Mapping[str, Any]], priority_of: Mapping[str, str]
) -> list[CompletedJob]:
    """The batch/v1 Jobs (as the API returns them) with a ``Complete=True`` condition:
    their completion time, creation to ``status.completionTime`` (whole seconds, as the
    API keeps them), and the priority class ``priority_of`` gives their name."""
    done = []
    for job in jobs:
        metadata = job.get("metadata") or {}
        status = job.get("status") or {}
        complete = any(
            c.get("type") == "Complete" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        created = parse_time(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
        finished = parse_time(status.get("completionTime"), "status.completionTime")
        name = str(metadata.get("name"))
        if complete and created is not None and finished is not None and name in priority_of:
            done.append(CompletedJob(name, priority_of[name], finished - created))
    return done


def job_completion_figures(done: list[CompletedJob], evictions: int) -> dict[str, Any]:
    """Jobs completed, completion time p50/p95 per priority class, evictions per completed
    Job."""
    by_class: dict[str, list[float]] = {}
    for job in done:
        by_class.setdefault(job.priority_class, []).append(job.seconds)
    times = {
        name: (percentile(values, 0.5), percentile(values, 0.95), len(values))
        for name, values in sorted(by_class.items())
    }
    return {
        "jobs completed": len(done),
        "job completion time p50/p95 (s), count, by priority class": {
            name: (round(p50 or 0.0, 1), round(p95 or 0.0, 1), count)
            for name, (p50, p95, count) in times.items()
        },
        "evictions per completed job": round(evictions / len(done), 3) if done else None,
    }
