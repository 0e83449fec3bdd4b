"""Time to mark: how soon a preemptor's victims are marked, on the local control plane: a
single pod (Muster against kube-scheduler's own preemption), then gangs (Muster alone).

    python -m bench.time_to_mark [--rounds 30] [--block 5] [--gangs 4,8] [--gang-rounds 20]
                                 [--gang-nodes 16] [--json PATH]

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

**Gangs** (``--gangs``; ``--gang-rounds 0``: none), in a control plane of their own:
``--gang-nodes`` nodes of 8 GPUs, each running one preemptible 8-GPU pod of quota
``team-b`` (min 0: it borrows every GPU); team A's quota's min covers the largest gang.
Each round, a PodGroup (``minMember`` the gang's size) is created, then the gang's pods
(non-preemptible, 8 GPUs each, that may preempt) concurrently, one client thread per pod;
the gang sizes alternate round by round, one Muster (filter and preempt, as the sample
configures it) and ``muster evictor`` throughout.  Timed, with the same watch and clock:
from the start of the *last* create call (the gang is complete no earlier) to the *last*
victim's mark (**time to mark**), to the first mark, and to every gang pod bound; victim
termination (first mark to last victim gone), and creation to bound minus termination
(what is Muster's and kube-scheduler's, not the victims' grace period).  The gang and the
marked pods are then deleted, team B refills the freed nodes, and the next round waits a
second (start times have a resolution of one second).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import localcluster as lc
from bench.support.cluster_setup import (
    CAN_PREEMPT,
    GPU,
    MOST_ALLOCATED_PROFILE,
    POD_GROUP,
    PREEMPTIBLE,
    QUOTA_API,
    TRIAL_LABEL,
    create_pods,
    create_quota,
    delete_pods,
    pod_body,
    with_retries,
)
from bench.support.pod_watch import PodWatch, is_bound, is_gone, is_running
from bench.support.processes import Evictor, MusterServer
from bench.support.run_notes import ROOT, export_muster, log, machine_notes, muster_tree_state

KUBE_SCHEDULER = "kube-scheduler"
MUSTER = "muster"
NAMESPACE = "team-a"
BORROWER = "team-b"
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
    def __init__(self, cp: lc.ControlPlane, workdir: Path, muster_cwd: Path) -> None:
        self.cp = cp
        self.workdir = workdir
        self.muster_cwd = muster_cwd
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
        muster = MusterServer(self.cp.kubeconfig, self.workdir / "muster.log", self.muster_cwd)
        evictor = Evictor(self.cp.kubeconfig, self.workdir / "evictor.log", self.muster_cwd)
        try:
            self.cp.restart_scheduler(
                lc.ExtenderConfig(muster.url, prioritize_verb=None, preempt_verb="preempt"),
                scheduler_config=SAMPLE_PROFILES,
            )
            return [self.round(mode, n) for n in rounds]
        finally:
            evictor.stop()
            muster.stop()


@dataclasses.dataclass
class GangRound:
    gang: int
    round: int
    victims: int
    #: From the start of the last create call (the gang complete) to its last victim's mark.
    to_mark_s: float
    to_first_mark_s: float
    #: The gang's create calls, first start to last start.
    create_spread_s: float
    to_bound_s: float
    termination_s: float
    bound_minus_termination_s: float


class GangTimeToMark:
    """The gang rounds (module docstring): one control plane, one Muster and evictor."""

    def __init__(
        self, cp: lc.ControlPlane, workdir: Path, nodes: int, largest: int, muster_cwd: Path
    ) -> None:
        self.cp = cp
        self.workdir = workdir
        self.muster_cwd = muster_cwd
        self.nodes = nodes
        self.largest = largest
        self.rest = lc.RestClient(cp.server, cp.admin_token, cp.ca_file)
        self.watch = PodWatch(lc.RestClient(cp.server, cp.admin_token, cp.ca_file)).start()
        self.fillers = 0
        self.serial = 0

    def setup(self) -> None:
        for i in range(self.nodes):
            self.cp.create_node(f"node-{i:03d}", {"cpu": "32", "memory": "128Gi", GPU: 8})
        gpus = str(8 * self.largest)
        self.cp.create_namespace(NAMESPACE)
        create_quota(self.rest, NAMESPACE, {"min": {GPU: gpus}, "max": {GPU: gpus}})
        self.cp.create_namespace(BORROWER)
        create_quota(self.rest, BORROWER, {"min": {GPU: "0"}, "max": {GPU: str(8 * self.nodes)}})

    def fill(self, count: int) -> None:
        """Team B takes ``count`` more nodes whole (one preemptible 8-GPU pod each)."""
        bodies = []
        for _ in range(count):
            labels = {PREEMPTIBLE: "true", TRIAL_LABEL: "filler"}
            name = f"filler-{self.fillers}"
            self.fillers += 1
            body = pod_body(name, {"cpu": "1", GPU: "8"}, labels, grace_seconds=1)
            bodies.append((BORROWER, body))
        keys, _ = create_pods(self.rest, bodies, threads=8)
        self.watch.wait(keys, is_running, timeout=120, what="team B's pods running")

    def round(self, gang: int, number: int) -> GangRound:
        self.serial += 1
        name = f"g{self.serial}"
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"minMember": gang},
        }
        self.rest.request("POST", f"{QUOTA_API}/namespaces/{NAMESPACE}/podgroups", group)
        time.sleep(0.2)  # Muster's PodGroup informer: the size is declared before the pods
        labels = {POD_GROUP: name, PREEMPTIBLE: "false", CAN_PREEMPT: "true", TRIAL_LABEL: name}
        starts: list[float] = []
        lock = threading.Lock()

        def create(i: int) -> str:
            body = pod_body(f"{name}-{i}", {"cpu": "1", GPU: "8"}, labels)
            with lock:
                starts.append(time.monotonic())
            path = f"/api/v1/namespaces/{NAMESPACE}/pods"
            with_retries(lambda: self.rest.request("POST", path, body))
            return f"{NAMESPACE}/{name}-{i}"

        with ThreadPoolExecutor(max_workers=gang) as pool:
            keys = list(pool.map(create, range(gang)))
        first, last = min(starts), max(starts)
        records = self.watch.wait(keys, is_bound, timeout=120, what=f"{name}: gang bound")
        with self.watch.cond:
            victims = [
                key
                for key, record in self.watch.records.items()
                if key.startswith(f"{BORROWER}/")
                and record.marked_at is not None
                and record.marked_at >= first
            ]
        gone = self.watch.wait(victims, is_gone, timeout=60, what=f"{name}: victims gone")
        marks = [r.marked_at for r in gone if r.marked_at is not None]
        bound = max(r.bound_at for r in records if r.bound_at is not None)
        termination = max(r.deleted_at for r in gone if r.deleted_at is not None) - min(marks)
        result = GangRound(
            gang=gang,
            round=number,
            victims=len(victims),
            to_mark_s=round(max(marks) - last, 4),
            to_first_mark_s=round(min(marks) - last, 4),
            create_spread_s=round(last - first, 4),
            to_bound_s=round(bound - last, 3),
            termination_s=round(termination, 3),
            bound_minus_termination_s=round(bound - last - termination, 3),
        )
        log(f"{name}: {dataclasses.asdict(result)}")
        delete_pods(self.rest, [NAMESPACE], f"{TRIAL_LABEL}={name}")
        self.rest.request("DELETE", f"{QUOTA_API}/namespaces/{NAMESPACE}/podgroups/{name}")
        self.watch.wait(keys, is_gone, timeout=60, what=f"{name}: gang gone")
        self.fill(len(victims))
        time.sleep(1.0)  # start times have a resolution of one second
        return result

    def run(self, gangs: list[int], rounds: int) -> list[GangRound]:
        muster = MusterServer(
            self.cp.kubeconfig, self.workdir / "muster-gangs.log", self.muster_cwd
        )
        evictor = Evictor(self.cp.kubeconfig, self.workdir / "evictor-gangs.log", self.muster_cwd)
        results: list[GangRound] = []
        try:
            self.cp.restart_scheduler(
                lc.ExtenderConfig(muster.url, prioritize_verb=None, preempt_verb="preempt"),
                scheduler_config=SAMPLE_PROFILES,
            )
            self.fill(self.nodes)
            time.sleep(1.0)
            for number in range(1, rounds + 1):
                for gang in gangs:
                    results.append(self.round(gang, number))
        finally:
            evictor.stop()
            muster.stop()
            self.watch.stop()
        return results


def summarize_gangs(rounds: list[GangRound]) -> dict[str, Any]:
    def ms(values: list[float]) -> dict[str, float]:
        return {
            "median": round(1000 * statistics.median(values), 1),
            "p90": round(1000 * percentile(values, 0.90), 1),
            "p99": round(1000 * percentile(values, 0.99), 1),
            "max": round(1000 * max(values), 1),
        }

    summary: dict[str, Any] = {}
    for gang in sorted({r.gang for r in rounds}):
        mine = [r for r in rounds if r.gang == gang]
        summary[f"gang_{gang}"] = {
            "rounds": len(mine),
            "victims": sorted({r.victims for r in mine}),
            "to_mark_ms": ms([r.to_mark_s for r in mine]),
            "to_first_mark_ms": ms([r.to_first_mark_s for r in mine]),
            "create_spread_ms_median": round(
                1000 * statistics.median(r.create_spread_s for r in mine), 1
            ),
            "to_bound_s_median": round(statistics.median(r.to_bound_s for r in mine), 3),
            "termination_s_median": round(statistics.median(r.termination_s for r in mine), 3),
            "bound_minus_termination_ms": ms([r.bound_minus_termination_s for r in mine]),
        }
    return summary


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
    parser.add_argument(
        "--gangs", default="4,8", help="gang sizes, alternating (default: %(default)s)"
    )
    parser.add_argument("--gang-rounds", type=int, default=20, help="rounds per gang size")
    parser.add_argument("--gang-nodes", type=int, default=16, help="nodes in the gang cluster")
    parser.add_argument(
        "--muster-ref",
        metavar="REF",
        help="run Muster's code at this commit (exported with git archive) instead of the "
        "working tree",
    )
    parser.add_argument("--json", metavar="PATH", help="write the summary here")
    options = parser.parse_args(argv)
    gangs = [int(size) for size in options.gangs.split(",") if size]
    if gangs and max(gangs) > options.gang_nodes:
        parser.error("--gang-nodes must be at least the largest gang")
    notes = machine_notes()
    workdir = Path(tempfile.mkdtemp(prefix="muster-bench-mark-"))
    if options.muster_ref:
        commit, muster_cwd = export_muster(options.muster_ref, workdir)
        notes["muster"] = f"{commit[:12]} (exported)"
    else:
        muster_cwd = ROOT
        notes["muster"] = muster_tree_state()
    log(f"machine: {notes}; workdir (logs): {workdir}")
    rounds: list[Round] = []
    if options.rounds > 0:
        with lc.ControlPlane(
            bin_dir=lc.ensure_binaries(), workdir=workdir / "single", keep_workdir=True
        ) as cp:
            bench = TimeToMark(cp, workdir, muster_cwd)
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
    gang_rounds: list[GangRound] = []
    if gangs and options.gang_rounds > 0:
        with lc.ControlPlane(
            bin_dir=lc.ensure_binaries(), workdir=workdir / "gangs", keep_workdir=True
        ) as cp:
            gang_bench = GangTimeToMark(cp, workdir, options.gang_nodes, max(gangs), muster_cwd)
            gang_bench.setup()
            gang_rounds = gang_bench.run(gangs, options.gang_rounds)
    notes["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
    summary = {"machine": notes, "options": vars(options), **summarize(rounds)}
    if gang_rounds:
        summary["gangs"] = summarize_gangs(gang_rounds)
    summary["rounds"] = [dataclasses.asdict(r) for r in rounds]
    summary["gang_rounds"] = [dataclasses.asdict(r) for r in gang_rounds]
    print(
        json.dumps(
            {k: v for k, v in summary.items() if k not in ("rounds", "gang_rounds")}, indent=1
        )
    )
    if options.json:
        Path(options.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
