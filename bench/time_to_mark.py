"""Time to first mark: how soon a single-pod preemptor's victim is marked, Muster against
kube-scheduler's own preemption, on the local control plane.

    python -m bench.time_to_mark [--rounds 30] [--block 5] [--json PATH]

Issue 17's cluster, one round at a time: two nodes of 8 ``nvidia.com/gpu``, each running
one preemptible 8-GPU pod of quota ``team-a`` (max 16 GPUs; priorities 1 and 50), then a
new preemptible 8-GPU pod of ``team-a`` with priority 100 that may trigger preemption.
One victim is enough.  Two configurations, in alternating blocks of ``--block`` rounds:

- ``kube-scheduler``: no extender; its DefaultPreemption picks the victim and deletes it
  (``DisruptionTarget`` from default-scheduler);
- ``muster``: manifests/scheduler-config.yaml's verbs (filter and preempt) and
  ``muster evictor``: the preempt verb gives kube-scheduler no victims and Muster's
  PostFilter plans the job at once and marks its victim (``scheduling.koordinator.sh/
  soft-eviction``).

Measured with one watch and this process's monotonic clock: from just before the
preemptor's create call to the first sight of its victim's mark (Muster) or
``DisruptionTarget`` (kube-scheduler), and to the preemptor bound.  Reported per
configuration: median, p90, p99 (nearest rank) and max, and Muster's median over
kube-scheduler's in the same run.  Victims have a grace period of 1 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.e2e import (
    CAN_PREEMPT,
    GPU,
    MOST_ALLOCATED_PROFILE,
    PREEMPTIBLE,
    ROOT,
    TRIAL_LABEL,
    Evictor,
    MusterServer,
    PodWatch,
    create_pods,
    create_quota,
    delete_pods,
    is_bound,
    is_gone,
    is_running,
    lc,
    log,
    machine_notes,
    muster_tree_state,
    pod_body,
    with_retries,
)

KUBE_SCHEDULER = "kube-scheduler"
MUSTER = "muster"
NAMESPACE = "team-a"
PRIORITIES = {"low": 1, "mid": 50, "new": 100}
#: Both configurations run manifests/scheduler-config.yaml's profile (MostAllocated).
SAMPLE_PROFILES = {"profiles": [MOST_ALLOCATED_PROFILE]}


@dataclasses.dataclass
class Round:
    mode: str
    round: int
    victim: str
    marked_by: str
    to_mark_s: float
    to_bound_s: float


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


class TimeToMark:
    def __init__(self, cp: lc.ControlPlane, workdir: Path) -> None:
        self.cp = cp
        self.workdir = workdir
        self.rest = lc.RestClient(cp.server, cp.admin_token, cp.ca_file)
        self.watch = PodWatch(lc.RestClient(cp.server, cp.admin_token, cp.ca_file)).start()
        self.serial = 0

    def setup(self) -> None:
        for i in range(2):
            self.cp.create_node(f"node-{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
        self.cp.create_namespace(NAMESPACE)
        create_quota(self.rest, NAMESPACE, {"min": {GPU: "0"}, "max": {GPU: "16"}})
        for name, value in PRIORITIES.items():
            body = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": f"bench-{name}"},
                "value": value,
            }
            with_retries(
                lambda body=body: self.rest.request(
                    "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body
                )
            )

    def pod(self, name: str, priority: str, labels: dict[str, str], trial: str) -> Any:
        body = pod_body(
            f"{trial}-{name}",
            {"cpu": "1", GPU: "8"},
            {**labels, TRIAL_LABEL: trial},
            grace_seconds=1,
        )
        body["spec"]["priorityClassName"] = f"bench-{priority}"
        return (NAMESPACE, body)

    def round(self, mode: str, number: int) -> Round:
        self.serial += 1
        trial = f"r{self.serial}"
        victims, _ = create_pods(
            self.rest,
            [
                self.pod(name, name, {PREEMPTIBLE: "true"}, trial)
                for name in ("low", "mid")  # created together: priority alone decides
            ],
            threads=2,
        )
        self.watch.wait(victims, is_running, timeout=60, what=f"{trial}: victims running")
        labels = {PREEMPTIBLE: "true", CAN_PREEMPT: "true"}
        started = time.monotonic()
        (preemptor,), _ = create_pods(self.rest, [self.pod("new", "new", labels, trial)], 1)
        (bound,) = self.watch.wait([preemptor], is_bound, timeout=60, what=f"{trial}: bound")
        with self.watch.cond:
            seen = [(key, self.watch.records[key]) for key in victims]
        marks = [
            (record.marked_at if mode == MUSTER else record.disrupted_at, key, record)
            for key, record in seen
        ]
        hit = [(at, key, record) for at, key, record in marks if at is not None]
        if len(hit) != 1:
            raise RuntimeError(f"{trial} {mode}: {len(hit)} victims marked, expected 1")
        at, key, record = hit[0]
        result = Round(
            mode=mode,
            round=number,
            victim=key.rsplit("-", 1)[-1],
            marked_by=(record.disrupted_by or "") if mode == KUBE_SCHEDULER else "muster",
            to_mark_s=round(at - started, 4),
            to_bound_s=round((bound.bound_at or started) - started, 3),
        )
        log(f"{trial} {mode}: {dataclasses.asdict(result)}")
        keys = [*victims, preemptor]
        delete_pods(self.rest, [NAMESPACE], f"{TRIAL_LABEL}={trial}")
        self.watch.wait(keys, is_gone, timeout=60, what=f"{trial}: pods gone")
        return result

    def block(self, mode: str, rounds: range) -> list[Round]:
        if mode == KUBE_SCHEDULER:
            self.cp.restart_scheduler(None, scheduler_config=SAMPLE_PROFILES)
            return [self.round(mode, n) for n in rounds]
        muster = MusterServer(self.cp.kubeconfig, self.workdir / "muster.log", ROOT)
        evictor = Evictor(self.cp.kubeconfig, self.workdir / "evictor.log", ROOT)
        try:
            self.cp.restart_scheduler(
                lc.ExtenderConfig(muster.url, prioritize_verb=None, preempt_verb="preempt"),
                scheduler_config=SAMPLE_PROFILES,
            )
            return [self.round(mode, n) for n in rounds]
        finally:
            evictor.stop()
            muster.stop()


def summarize(rounds: list[Round]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for mode in (KUBE_SCHEDULER, MUSTER):
        mine = [r for r in rounds if r.mode == mode]
        if not mine:
            continue
        marks = [r.to_mark_s for r in mine]
        summary[mode] = {
            "rounds": len(mine),
            "to_mark_ms": {
                "median": round(1000 * statistics.median(marks), 1),
                "p90": round(1000 * percentile(marks, 0.90), 1),
                "p99": round(1000 * percentile(marks, 0.99), 1),
                "max": round(1000 * max(marks), 1),
            },
            "to_bound_s_median": round(statistics.median(r.to_bound_s for r in mine), 3),
            "victims": sorted({r.victim for r in mine}),
            "marked_by": sorted({r.marked_by for r in mine}),
        }
    if KUBE_SCHEDULER in summary and MUSTER in summary:
        summary["muster_over_kube_scheduler_median"] = round(
            summary[MUSTER]["to_mark_ms"]["median"]
            / summary[KUBE_SCHEDULER]["to_mark_ms"]["median"],
            2,
        )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds per configuration")
    parser.add_argument("--block", type=int, default=5, help="rounds before switching")
    parser.add_argument("--json", metavar="PATH", help="write the summary here")
    options = parser.parse_args(argv)
    notes = machine_notes()
    notes["muster"] = muster_tree_state()
    workdir = Path(tempfile.mkdtemp(prefix="muster-bench-mark-"))
    log(f"machine: {notes}; workdir (logs): {workdir}")
    rounds: list[Round] = []
    with lc.ControlPlane(bin_dir=lc.ensure_binaries(), workdir=workdir, keep_workdir=True) as cp:
        bench = TimeToMark(cp, workdir)
        try:
            bench.setup()
            done = 0
            while done < options.rounds:
                numbers = range(done + 1, min(options.rounds, done + options.block) + 1)
                for mode in (KUBE_SCHEDULER, MUSTER):
                    rounds.extend(bench.block(mode, numbers))
                done = numbers[-1]
        finally:
            bench.watch.stop()
    summary = {"machine": notes, "options": vars(options), **summarize(rounds)}
    summary["rounds"] = [dataclasses.asdict(r) for r in rounds]
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}, indent=1))
    if options.json:
        Path(options.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
