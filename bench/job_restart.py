"""How long a Job's evicted pods take to come back: evicted one by one, or restarted whole.

    python -m bench.job_restart [--pods 2] [--rounds 3] [--json PATH]

On the local control plane (its real Job controller, kube-scheduler alone, the kubelet
stand-in), one ``batch/v1`` Job of ``--pods`` pods of one GPU each, ``podFailurePolicy``
Ignore on ``DisruptionTarget`` (the shape docs/gangs.md recommends), running on nodes with
room to spare.  Each round takes every pod of the Job away, then times from the first
call to the moment all its replacements exist (created by the Job controller), two ways,
each in a Job of its own:

- **evicted**: each pod through the Eviction API (grace 0), as ``muster evictor`` evicts a
  victim whose Job keeps other pods;
- **restarted**: the Job suspended, then resumed once none of its pods is active or
  terminating, as ``muster evictor`` restarts a Job whose pods are all victims
  (:mod:`extender.kube.restarter`).

The rounds of one way follow each other once the replacements run, so the Job
controller's failure back-off (10 s, doubled per pod failed since the Job's last
success) grows round by round for the evicted Job, as it does for a Job evicted again
and again.  Reported: each round's seconds, per way.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import localcluster as lc
from bench.support.cluster_setup import GPU, IGNORE_DISRUPTIONS

NAMESPACE = "restart"
MERGE_PATCH = "application/merge-patch+json"


def job_body(name: str, pods: int) -> dict[str, Any]:
    container = {
        "name": "work",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "1", GPU: "1"}, "limits": {GPU: "1"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 100,
            "podFailurePolicy": IGNORE_DISRUPTIONS,
            "template": {
                # The kubelet stand-in runs it for an hour: it never ends by itself here.
                "metadata": {"annotations": {lc.RUN_SECONDS: "3600"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [container],
                },
            },
        },
    }


def live_pods(plane: lc.ControlPlane, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.rest.request(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"labelSelector": f"job-name={job}"}
    )["items"]
    return [
        p
        for p in items
        if not p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]


def running(plane: lc.ControlPlane, job: str, pods: int) -> list[str] | None:
    names = [
        p["metadata"]["name"]
        for p in live_pods(plane, job)
        if p["status"].get("phase") == "Running"
    ]
    return names if len(names) == pods else None


def job_path(job: str) -> str:
    return f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job}"


def take_away(plane: lc.ControlPlane, job: str, names: list[str], way: str) -> None:
    """Every pod of ``job`` away, ``way``: evicted one by one, or the Job restarted."""
    if way == "evicted":
        for name in names:
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "deleteOptions": {"gracePeriodSeconds": 0},
            }
            plane.rest.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/eviction", body)
        return
    plane.rest.request(
        "PATCH", job_path(job), {"spec": {"suspend": True}}, content_type=MERGE_PATCH
    )

    def gone() -> bool | None:
        status = plane.rest.request("GET", job_path(job)).get("status") or {}
        return (not status.get("active") and not status.get("terminating")) or None

    lc.wait_until(gone, timeout=60, interval=0.05, what=f"{job}'s pods gone")
    plane.rest.request(
        "PATCH", job_path(job), {"spec": {"suspend": False}}, content_type=MERGE_PATCH
    )


def replaced(plane: lc.ControlPlane, job: str, pods: int, old: frozenset[str]) -> list[str] | None:
    """The Job's live pods once all ``pods`` of them are new (none of ``old``)."""
    fresh = [p["metadata"]["name"] for p in live_pods(plane, job)]
    return fresh if len(fresh) == pods and not old & set(fresh) else None


def measure(plane: lc.ControlPlane, way: str, pods: int, rounds: int) -> list[float]:
    job = f"job-{way}"
    plane.rest.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", job_body(job, pods))
    names = lc.wait_until(lambda: running(plane, job, pods), timeout=120, what=f"{job} running")
    seconds = []
    for _ in range(rounds):
        start = time.monotonic()
        take_away(plane, job, names, way)
        lc.wait_until(
            lambda old=frozenset(names): replaced(plane, job, pods, old),
            timeout=600,
            interval=0.05,
            what=f"{job}'s replacements",
        )
        seconds.append(round(time.monotonic() - start, 2))
        names = lc.wait_until(
            lambda: running(plane, job, pods), timeout=120, what=f"{job} running again"
        )
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=2, help="pods of each Job")
    parser.add_argument("--rounds", type=int, default=3, help="times each Job loses its pods")
    parser.add_argument("--json", type=Path, help="write the results here")
    options = parser.parse_args(argv)
    if options.pods < 1 or options.rounds < 1:
        parser.error("--pods and --rounds must be at least 1")
    with (
        tempfile.TemporaryDirectory(prefix="muster-job-restart-") as workdir,
        lc.ControlPlane(bin_dir=lc.ensure_binaries(), workdir=Path(workdir)) as plane,
    ):
        for i in range(2):
            plane.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
        plane.create_namespace(NAMESPACE)
        results = {
            way: measure(plane, way, options.pods, options.rounds)
            for way in ("evicted", "restarted")
        }
    document = {"pods": options.pods, "rounds": options.rounds, "seconds": results}
    print(json.dumps(document))
    if options.json is not None:
        options.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
