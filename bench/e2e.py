"""End-to-end benchmark: the real kube-scheduler, alone and with Muster, on the local control plane.

    python -m bench.e2e [--nodes 500] [--pods 2000] [--repeat 3] [--gang 8] [--gang-repeat 3]
                        [--scheduler-qps 1000] [--kubelet] [--modes alone,muster-filter,...]
                        [--packing most-allocated|default] [--gang-mode muster-filter|muster]
                        [--muster-ref REF] [--profile PREFIX] [--json PATH]

Everything runs in one control plane (``localcluster/``: etcd, kube-apiserver and
kube-scheduler built from the pinned modules, the harness's kubelet emulator) with one
cluster shape: ``--nodes`` Ready nodes of 32 cpu, 128Gi and 8 ``nvidia.com/gpu``.
Muster runs as a child process (``python -m extender.cli.main``) from the working tree, or
from ``git archive REF`` with ``--muster-ref`` (the checkout may change under a long run);
the code measured is printed with the results.  A Muster mode written ``MODE@REF`` (e.g.
``muster-filter@HEAD~1``) runs the code at ``REF``: before and after, alternating in one run.

**Throughput** (kube-scheduler alone, then with Muster as its extender in the ``--modes``
configurations, alternating, ``--repeat`` rounds; ``noop-filter+watch`` is the no-op
extender with a ``curl`` watch on every pod beside it, what keeping a cluster view costs
kube-apiserver without an extender's own work). Every trial's kube-scheduler runs the
same profile (``--packing``: NodeResourcesFit MostAllocated, as the sample configuration
recommends, or kube-scheduler's defaults). In every trial:

1. kube-scheduler is stopped, and ``--pods`` pods (100m cpu, 128Mi each, no GPU) are
   created in ``--namespaces`` namespaces, concurrently (``--threads`` client threads).
   Each namespace has an ElasticQuota (min and max well above what its pods ask for), so
   Muster's job-level quota admission runs for every pod;
2. for a Muster trial, a fresh ``muster serve --kubeconfig <admin> --no-leader-elect`` is
   started and waited for (``/readyz``); for an *alone* trial no Muster process runs;
3. kube-scheduler is started (alone, or with an ``extenders`` entry, ``nodeCacheCapable:
   true``: filter and preempt; with prioritize; with prioritize and ``bindVerb``) and a
   watch on the pods records, with this process's monotonic clock, when each pod's ``spec.nodeName``
   first appears.

The figure is the scheduler's sustained rate with a full queue: ``(pods - 1) / (last
binding - first binding)``, the scheduler's point of view. Pods are created while the
scheduler is down so that the client's creation rate (and its CPU, on a small machine)
is not part of it: "first create to last bound" would mix the two. Scheduler start to
last binding (process start, informer sync, then the same work) is reported beside it.
Pods are then deleted (grace 0) and waited for until gone. kube-scheduler's client runs
with ``--scheduler-qps`` (default 1000, burst 2000): the harness's own 200/400 caps
bindings near 250/s, kube-scheduler's default 50/100 near 52/s. The kubelet emulator is
paused during these trials (pods stay bound and Pending, as in upstream scheduler_perf)
unless ``--kubelet``: it writes each pod's status from one thread, so at a high binding
rate its writes lag behind and load the machine after the window, not in it.

CPU seconds used by each component during the window (scheduler start to last binding)
are read from ``/proc``: etcd, kube-apiserver, kube-scheduler, Muster (and its main thread,
the event loop, apart) and this process; "others" is the rest of the machine's busy time
(other users of a shared machine), with the biggest such processes named in the log.
kube-apiserver's request and watch-event counters that grew in the window (its
``/metrics``: requests by verb and resource, watch events and their bytes by kind) are
logged and kept in ``--json``.

**Gang preemption** (after the throughput rounds): Muster (``--gang-mode``: filter and
preempt, or with prioritize too; no ``bindVerb``), ``muster evictor`` and the kubelet
emulator run; team B (quota min 0) borrows every GPU with one preemptible 8-GPU pod per node
(``terminationGracePeriodSeconds: 1``: the emulator removes a pod being deleted once its
grace period has passed); then team A, whose quota's min covers the gang, submits a gang of
``--gang`` non-preemptible 8-GPU pods that may preempt, its size declared with the
min-available annotation. Reported: gang creation to every
gang pod bound, and its parts: creation to the first victim marked
(``scheduling.koordinator.sh/soft-eviction``), first victim marked to the last victim gone
(*victim termination*), last victim gone to the last gang pod bound (kube-scheduler's retry
and binding). Between rounds the gang is deleted and team B refills the freed nodes.

``--profile PREFIX`` adds one Muster trial for each Muster mode of ``--modes`` (after the
rounds, not counted in the medians), with ``py-spy record`` attached to Muster (collapsed
stacks in ``PREFIX.txt``, a flame graph of the GIL holder's stacks in ``PREFIX.svg``; with
several Muster modes, ``PREFIX-MODE.txt`` and ``.svg``, ``@`` written ``-at-``; py-spy must be
installed), and prints the hottest functions of each.

Reported beside each trial's rate: the extender's CPU per pod bound (its process's CPU
seconds in the window ÷ the pods), and for every mode but *alone* and the no-op its rate ÷
the no-op's (medians, and per round paired) as well as ÷ alone's.

What the other live benchmarks share with this one (Muster's processes, the pod watch, the
CPU and kube-apiserver meters, the run's notes) is in :mod:`bench.support`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import localcluster as lc
from bench.support.cluster_setup import (
    CAN_PREEMPT,
    GPU,
    MIN_AVAILABLE,
    MOST_ALLOCATED_PROFILE,
    POD_GROUP,
    PREEMPTIBLE,
    TRIAL_LABEL,
    Json,
    create_pods,
    create_quota,
    delete_pods,
    pod_body,
)
from bench.support.meters import CpuMeter, apiserver_counters, counter_delta
from bench.support.pod_watch import PodWatch, is_bound, is_gone, is_running
from bench.support.processes import Evictor, ExtenderProcess, MusterServer, NoopExtender
from bench.support.profiling import py_spy, summarize_profile
from bench.support.run_notes import ROOT, export_muster, log, machine_notes, muster_tree_state

NODE_CAPACITY: dict[str, str | int] = {"cpu": "32", "memory": "128Gi", GPU: 8}

#: The throughput trials' configurations (``--modes``).
ALONE = "alone"
NOOP_FILTER = "noop-filter"
MUSTER_FILTER = "muster-filter"
MUSTER = "muster"
MUSTER_BIND = "muster+bind"
NOOP_WATCH = "noop-filter+watch"
MODES = (ALONE, NOOP_FILTER, NOOP_WATCH, MUSTER_FILTER, MUSTER, MUSTER_BIND)


@dataclasses.dataclass
class Trial:
    mode: str
    round: int
    pods: int
    create_s: float
    first_to_last_s: float
    start_to_last_s: float
    pods_per_s: float
    cpu: dict[str, float]
    others_top: list[tuple[str, float]]
    muster: dict[str, float]
    #: kube-apiserver's counters that grew in the window (:func:`apiserver_counters`).
    api: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class GangRound:
    round: int
    gang: int
    victims: int
    total_s: float
    to_first_mark_s: float
    termination_s: float
    rebind_s: float


class Bench:
    def __init__(
        self, cp: lc.ControlPlane, options: argparse.Namespace, muster_cwds: dict[str, Path]
    ) -> None:
        self.cp = cp
        #: Where Muster runs from: "" → the default code, a ref → that commit's export.
        self.muster_cwds = muster_cwds
        self.muster_cwd = muster_cwds[""]
        self.options = options
        self.rest = lc.RestClient(cp.server, cp.admin_token, cp.ca_file)
        self.watch = PodWatch(lc.RestClient(cp.server, cp.admin_token, cp.ca_file)).start()
        self.namespaces = [f"bench-{i}" for i in range(options.namespaces)]
        self.serial = 0
        self.noop_binary: Path | None = None
        self.muster_cpus = parse_cpus(options.muster_cpus) if options.muster_cpus else None
        if options.packing == "most-allocated":
            cp.scheduler_overrides["profiles"] = [MOST_ALLOCATED_PROFILE]
        if options.scheduler_qps:
            connection = cp.scheduler_configuration()["clientConnection"]
            qps = options.scheduler_qps
            cp.scheduler_overrides["clientConnection"] = {
                **connection,
                "qps": qps,
                "burst": 2 * qps,
            }

    # -- setup

    def create_nodes(self) -> None:
        count = self.options.nodes
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.options.threads) as pool:
            list(
                pool.map(
                    lambda i: self.cp.create_node(f"node-{i:04d}", NODE_CAPACITY), range(count)
                )
            )
        log(f"{count} nodes in {time.monotonic() - start:.1f} s")

    def create_quotas(self) -> None:
        per_ns = -(-self.options.pods // len(self.namespaces))
        cpu_min = max(1, per_ns // 5)  # pods ask for 100m: twice what they need
        for namespace in self.namespaces:
            self.cp.create_namespace(namespace)
            create_quota(
                self.rest,
                namespace,
                {
                    "min": {"cpu": str(cpu_min), "memory": f"{per_ns * 256}Mi"},
                    "max": {"cpu": str(cpu_min * 2), "memory": f"{per_ns * 512}Mi"},
                },
            )
        gang_gpus = self.options.gang * 8
        self.cp.create_namespace("team-a")
        create_quota(
            self.rest, "team-a", {"min": {GPU: str(gang_gpus)}, "max": {GPU: str(gang_gpus)}}
        )
        self.cp.create_namespace("team-b")
        all_gpus = self.options.nodes * 8
        create_quota(self.rest, "team-b", {"min": {GPU: "0"}, "max": {GPU: str(all_gpus)}})

    def pids(self, muster: ExtenderProcess | None) -> dict[str, int]:
        pids = {
            name: pid for name, pid in self.cp.pids.items() if name in ("etcd", "kube-apiserver")
        }
        pids["bench"] = os.getpid()
        if isinstance(muster, NoopExtender):
            pids["noop-extender"] = muster.pid
        elif muster is not None:
            pids["muster"] = muster.pid
        return pids

    # -- throughput

    def extender(self, mode: str, muster: ExtenderProcess | None) -> lc.ExtenderConfig | None:
        if muster is None:
            return None
        mode = base_mode(mode)
        if mode == NOOP_WATCH:
            mode = NOOP_FILTER
        return lc.ExtenderConfig(
            muster.url,
            bind=mode == MUSTER_BIND,
            prioritize_verb=None if mode in (MUSTER_FILTER, NOOP_FILTER) else "prioritize",
            preempt_verb=None if mode == NOOP_FILTER else "preempt",
        )

    def throughput_trial(self, mode: str, round_: int, profile: str | None = None) -> Trial:
        self.serial += 1
        trial = f"t{self.serial}"
        self.cp.stop_scheduler()
        bodies = [
            (
                self.namespaces[i % len(self.namespaces)],
                pod_body(f"{trial}-{i}", {"cpu": "100m", "memory": "128Mi"}, {TRIAL_LABEL: trial}),
            )
            for i in range(self.options.pods)
        ]
        keys, create_s = create_pods(self.rest, bodies, self.options.threads)
        self.watch.wait(keys, lambda r: True, timeout=60, what="pods seen by the watch")
        log(f"{trial} {mode}: {len(keys)} pods created in {create_s:.1f} s")
        muster: ExtenderProcess | None = None
        watcher: subprocess.Popen[bytes] | None = None
        if mode in (NOOP_FILTER, NOOP_WATCH):
            if self.noop_binary is None:
                self.noop_binary = NoopExtender.build(self.cp.workdir)
            muster = NoopExtender(
                self.noop_binary, self.cp.workdir / f"noop-{trial}.log", self.muster_cpus
            )
            if mode == NOOP_WATCH:
                watcher = self.pod_watcher()
        elif mode != ALONE:
            muster = MusterServer(
                self.cp.kubeconfig,
                self.cp.workdir / f"muster-{trial}.log",
                self.muster_cwds[ref_of(mode)],
                self.muster_cpus,
            )
        try:
            profiler = (
                py_spy(muster.pid, profile)
                if profile is not None and muster is not None
                else contextlib.nullcontext()
            )
            with profiler:
                api_before = apiserver_counters(self.rest)
                pids = self.pids(muster)
                if watcher is not None:
                    pids["watcher"] = watcher.pid
                meter = CpuMeter(pids)
                started = time.monotonic()
                self.cp.restart_scheduler(self.extender(mode, muster))
                meter.add("kube-scheduler", self.cp.pids["kube-scheduler"])
                records = self.watch.wait(
                    keys,
                    is_bound,
                    timeout=max(300.0, self.options.pods / 5),
                    what=f"{trial} {mode} bindings",
                )
                cpu = meter.read()
                others = meter.others_top()
                api = counter_delta(api_before, apiserver_counters(self.rest))
            stats = muster.metrics() if muster is not None else {}
        finally:
            if muster is not None:
                muster.stop()
            if watcher is not None:
                watcher.terminate()
                watcher.wait(10)
        bound = sorted(r.bound_at for r in records if r.bound_at is not None)
        span = bound[-1] - bound[0]
        result = Trial(
            mode=mode,
            round=round_,
            pods=len(keys),
            create_s=round(create_s, 2),
            first_to_last_s=round(span, 2),
            start_to_last_s=round(bound[-1] - started, 2),
            pods_per_s=round((len(bound) - 1) / span, 1) if span > 0 else float("inf"),
            cpu=cpu,
            others_top=others,
            muster=stats,
            api=api,
        )
        log(
            f"{trial} {mode}: {result.pods_per_s} pods/s (first to last binding "
            f"{result.first_to_last_s} s; scheduler start to last {result.start_to_last_s} s); "
            f"cpu {cpu}; others {others}; muster {stats}"
        )
        log(f"{trial} {mode}: kube-apiserver in the window: {api}")
        self.delete_and_wait(self.namespaces, f"{TRIAL_LABEL}={trial}", keys)
        return result

    def pod_watcher(self) -> subprocess.Popen[bytes]:
        """What an extender that keeps a cluster view costs kube-apiserver, without the
        extender: a watch on every pod, in JSON, from the current version (as Muster's
        informer watches after its list), read by ``curl`` and thrown away."""
        listed = self.rest.request("GET", "/api/v1/pods", query={"limit": 1})
        version = listed["metadata"]["resourceVersion"]
        url = (
            f"{self.cp.server}/api/v1/pods?watch=true&allowWatchBookmarks=true"
            f"&resourceVersion={version}"
        )
        process = subprocess.Popen(
            [
                "curl",
                "-sSN",
                "--cacert",
                str(self.cp.ca_file),
                "-H",
                f"Authorization: Bearer {self.cp.admin_token}",
                "-H",
                "Accept: application/json",
                "-o",
                "/dev/null",
                url,
            ]
        )
        time.sleep(1.0)  # connected and idle before the window
        return process

    def delete_and_wait(
        self, namespaces: Iterable[str], selector: str, keys: Sequence[str]
    ) -> None:
        start = time.monotonic()
        delete_pods(self.rest, namespaces, selector)
        self.watch.wait(keys, is_gone, timeout=300, what="pods to be deleted")
        log(f"{len(keys)} pods deleted in {time.monotonic() - start:.1f} s")

    # -- gang preemption

    def gang_phase(self) -> list[GangRound]:
        options = self.options
        muster = MusterServer(
            self.cp.kubeconfig,
            self.cp.workdir / "muster-gang.log",
            self.muster_cwd,
            self.muster_cpus,
        )
        evictor = Evictor(self.cp.kubeconfig, self.cp.workdir / "evictor.log", self.muster_cwd)
        rounds: list[GangRound] = []
        try:
            self.cp.restart_scheduler(self.extender(self.options.gang_mode, muster))
            filler = 0

            def fill(count: int) -> list[str]:
                nonlocal filler
                bodies = []
                for _ in range(count):
                    labels = {PREEMPTIBLE: "true", TRIAL_LABEL: "filler"}
                    name = f"filler-{filler}"
                    filler += 1
                    requests = {"cpu": "1", GPU: "8"}
                    bodies.append(("team-b", pod_body(name, requests, labels, grace_seconds=1)))
                keys, _ = create_pods(self.rest, bodies, options.threads)
                self.watch.wait(keys, is_running, timeout=600, what="team B's fillers running")
                return keys

            start = time.monotonic()
            fillers = fill(options.nodes)
            log(
                f"team B borrows every GPU: {len(fillers)} pods running in "
                f"{time.monotonic() - start:.1f} s"
            )
            time.sleep(1.0)  # start times have a resolution of one second
            for round_ in range(1, options.gang_repeat + 1):
                name = f"gang-{round_}"
                labels = {
                    POD_GROUP: name,
                    PREEMPTIBLE: "false",
                    CAN_PREEMPT: "true",
                    TRIAL_LABEL: name,
                }
                bodies = [
                    ("team-a", pod_body(f"{name}-{i}", {"cpu": "1", GPU: "8"}, labels))
                    for i in range(options.gang)
                ]
                for _namespace, body in bodies:  # its size declared, as a PodGroup would
                    body["metadata"]["annotations"] = {MIN_AVAILABLE: str(options.gang)}
                t0 = time.monotonic()
                keys, _ = create_pods(self.rest, bodies, options.threads)
                try:
                    records = self.watch.wait(
                        keys, is_bound, timeout=300, what=f"{name}: every gang pod bound"
                    )
                except TimeoutError:
                    log(json.dumps(muster.debug(f"pods/team-a/{name}-0"))[:3000])
                    raise
                with self.watch.cond:
                    victims = [
                        (k, r)
                        for k, r in self.watch.records.items()
                        if k.startswith("team-b/") and r.marked_at is not None and r.marked_at >= t0
                    ]
                victim_keys = [k for k, _ in victims]
                gone = self.watch.wait(victim_keys, is_gone, timeout=60, what="victims gone")
                last_bound = max(r.bound_at for r in records if r.bound_at is not None)
                first_mark = min(r.marked_at for _, r in victims if r.marked_at is not None)
                last_gone = max(r.deleted_at for r in gone if r.deleted_at is not None)
                result = GangRound(
                    round=round_,
                    gang=options.gang,
                    victims=len(victims),
                    total_s=round(last_bound - t0, 2),
                    to_first_mark_s=round(first_mark - t0, 2),
                    termination_s=round(last_gone - first_mark, 2),
                    rebind_s=round(last_bound - last_gone, 2),
                )
                rounds.append(result)
                log(f"{name}: {dataclasses.asdict(result)}")
                self.delete_and_wait(["team-a"], f"{TRIAL_LABEL}={name}", keys)
                fill(len(victims))
                time.sleep(1.0)
            self.delete_and_wait(
                ["team-b"],
                f"{TRIAL_LABEL}=filler",
                self.watch.keys(lambda key, r: key.startswith("team-b/") and not is_gone(r)),
            )
        finally:
            evictor.stop()
            muster.stop()
        return rounds


# --------------------------------------------------------------------------- report


def parse_cpus(text: str) -> set[int]:
    """``"1"``, ``"2,3"`` or ``"2-3"`` → a set of CPU numbers."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def base_mode(mode: str) -> str:
    """``muster-filter@REF`` → ``muster-filter``."""
    return mode.partition("@")[0]


def ref_of(mode: str) -> str:
    """``muster-filter@REF`` → ``REF``; ``""`` for a mode without one."""
    return mode.partition("@")[2]


def profile_prefixes(prefix: str | None, modes: Sequence[str]) -> dict[str, str]:
    """``--profile``'s trials: each Muster mode → its files' prefix (``MUSTER`` if none)."""
    if prefix is None:
        return {}
    musters = [m for m in modes if base_mode(m) not in (ALONE, NOOP_FILTER, NOOP_WATCH)]
    if len(musters) <= 1:
        return {musters[0] if musters else MUSTER: prefix}
    return {m: f"{prefix}-{m.replace('@', '-at-')}" for m in musters}


def median(values: Iterable[float]) -> float:
    return round(statistics.median(list(values)), 2)


def extender_ms_per_pod(trial: Trial) -> float | None:
    """The extender's process CPU in the window (scheduler start to last binding) ÷ the
    pods bound, in ms; None without an extender."""
    cpu = trial.cpu.get("muster", trial.cpu.get("noop-extender"))
    if cpu is None or not trial.pods:
        return None
    return round(1000 * cpu / trial.pods, 3)


def _add_ratios(
    entry: Json, rows: list[Trial], baseline: list[Trial], of_medians: str, paired_median: str
) -> None:
    """Into ``entry``: its median rate ÷ ``baseline``'s (``of_medians``), and the median
    of each round's ratio to the baseline's trial of that round (``paired_median``)."""
    entry[of_medians] = round(
        entry["median_pods_per_s"] / median(t.pods_per_s for t in baseline), 3
    )
    paired = [
        t.pods_per_s / b.pods_per_s
        for t in rows
        for b in baseline
        if b.round == t.round and b.pods_per_s > 0
    ]
    if paired:
        entry[paired_median] = round(statistics.median(paired), 3)


def report(trials: list[Trial], gangs: list[GangRound], notes: dict[str, Any]) -> Json:
    modes = list(dict.fromkeys(t.mode for t in trials))
    summary: Json = {"machine": notes, "throughput": {}, "gang": {}}
    print(f"Machine and code: {json.dumps(notes)}")
    print("\nThroughput (pods/s = (pods - 1) / (first to last binding))")
    print(
        f"{'mode':<20} {'round':>5} {'pods/s':>8} {'1st→last s':>11} {'start→last s':>13} "
        f"{'ext ms/pod':>10}  cpu s"
    )
    for t in trials:
        per_pod = extender_ms_per_pod(t)
        print(
            f"{t.mode:<20} {t.round:>5} {t.pods_per_s:>8} {t.first_to_last_s:>11} "
            f"{t.start_to_last_s:>13} {'-' if per_pod is None else per_pod:>10}  {t.cpu}"
        )
    alone = [t for t in trials if t.mode == ALONE]
    noop = [t for t in trials if t.mode == NOOP_FILTER]
    for mode in modes:
        rows = [t for t in trials if t.mode == mode]
        entry: Json = {
            "median_pods_per_s": median(t.pods_per_s for t in rows),
            "median_start_to_last_s": median(t.start_to_last_s for t in rows),
            "runs": [t.pods_per_s for t in rows],
            "median_cpu_s": {
                name: median(t.cpu.get(name, 0.0) for t in rows) for name in rows[0].cpu
            },
        }
        costs = [ms for t in rows if (ms := extender_ms_per_pod(t)) is not None]
        if costs:
            entry["median_extender_cpu_ms_per_pod"] = median(costs)
        if rows[0].muster:
            entry["median_muster"] = {
                key: median(t.muster.get(key, 0.0) for t in rows) for key in rows[0].muster
            }
        if mode != ALONE and alone:
            _add_ratios(entry, rows, alone, "ratio_of_medians", "median_paired_ratio")
        if mode not in (ALONE, NOOP_FILTER) and noop:
            _add_ratios(entry, rows, noop, "ratio_to_noop", "median_paired_ratio_to_noop")
        summary["throughput"][mode] = entry
        print(f"{mode}: {json.dumps(entry)}")
    if gangs:
        print("\nGang preemption (seconds)")
        for g in gangs:
            print(json.dumps(dataclasses.asdict(g)))
        summary["gang"] = {
            "rounds": [dataclasses.asdict(g) for g in gangs],
            "median_total_s": median(g.total_s for g in gangs),
            "median_to_first_mark_s": median(g.to_first_mark_s for g in gangs),
            "median_termination_s": median(g.termination_s for g in gangs),
            "median_rebind_s": median(g.rebind_s for g in gangs),
        }
        print(json.dumps(summary["gang"]))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of alone/Muster trials")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="throughput trials per round, in this order (default: %(default)s): "
        f"{ALONE}: no extender; {NOOP_FILTER}: a no-op extender in Go (filter only, "
        f"passes every node: the floor for any extender); {NOOP_WATCH}: the same and a "
        f"watch on every pod (curl; what a cluster view costs kube-apiserver); "
        f"{MUSTER_FILTER}: filter and preempt verbs; {MUSTER}: also prioritize; "
        f"{MUSTER_BIND}: also bind. A Muster mode may name a commit to run, "
        f"e.g. {MUSTER_FILTER}@HEAD~2, beside the default code in the same run",
    )
    parser.add_argument(
        "--packing",
        choices=("most-allocated", "default"),
        default="most-allocated",
        help="kube-scheduler's profile in every trial: NodeResourcesFit MostAllocated, as "
        "manifests/scheduler-config.yaml sets it (default), or kube-scheduler's defaults",
    )
    parser.add_argument(
        "--gang-mode",
        choices=(MUSTER_FILTER, MUSTER),
        default=MUSTER_FILTER,
        help="Muster's verbs in the gang phase (default: %(default)s)",
    )
    parser.add_argument("--gang", type=int, default=8, help="pods in the preempting gang")
    parser.add_argument("--gang-repeat", type=int, default=3, help="gang rounds (0: none)")
    parser.add_argument("--threads", type=int, default=8, help="client threads creating pods")
    parser.add_argument(
        "--scheduler-qps",
        type=int,
        default=1000,
        metavar="QPS",
        help="kube-scheduler's clientConnection qps, burst twice that (default: %(default)s, "
        "so the client's rate limiter does not bound bindings; 0 keeps the harness's 200, "
        "burst 400, which caps kube-scheduler alone near 250 pods/s here; kube-scheduler's "
        "own default is 50, burst 100)",
    )
    parser.add_argument(
        "--kubelet",
        action="store_true",
        help="keep the harness's kubelet emulator running during the throughput trials "
        "(bound pods turn Running: one status write per pod, in one thread of this process)",
    )
    parser.add_argument("--profile", metavar="PREFIX", help="one extra Muster trial under py-spy")
    parser.add_argument(
        "--muster-ref",
        metavar="REF",
        help="run Muster's code at this commit (exported with git archive) instead of the "
        "working tree",
    )
    parser.add_argument(
        "--muster-cpus",
        metavar="CPUS",
        help="run muster serve on these CPUs (e.g. 1 or 2-3) and everything else "
        "(etcd, kube-apiserver, kube-scheduler, this process) on the others, in every trial, "
        "as when Muster runs on a node of its own; default: all share all CPUs",
    )
    parser.add_argument("--json", metavar="PATH", help="write the summary here")
    parser.add_argument("--workdir", metavar="DIR", help="control-plane workdir (kept)")
    options = parser.parse_args(argv)
    modes = options.modes.split(",")
    if unknown := sorted({base_mode(m) for m in modes} - set(MODES)):
        parser.error(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(MODES)}")

    notes = machine_notes()
    if options.muster_cpus:
        try:
            muster_cpus = parse_cpus(options.muster_cpus)
        except ValueError:
            parser.error(f"--muster-cpus: expected e.g. 1, 2,3 or 2-3, not {options.muster_cpus}")
        rest = os.sched_getaffinity(0) - muster_cpus
        if not rest or not muster_cpus <= os.sched_getaffinity(0):
            parser.error(
                f"--muster-cpus {options.muster_cpus}: must be some, not all, of "
                f"this machine's CPUs {sorted(os.sched_getaffinity(0))}"
            )
        # Children started from this thread (the control plane) and later threads inherit it.
        os.sched_setaffinity(0, rest)
        notes["cpu_split"] = {"muster": sorted(muster_cpus), "others": sorted(rest)}
    bin_dir = lc.ensure_binaries()
    notes["kubernetes"] = bin_dir.parent.name
    log(f"machine: {notes}")
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="muster-bench-e2e-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"workdir (logs): {workdir}")
    if options.muster_ref:
        commit, muster_cwd = export_muster(options.muster_ref, workdir)
        notes["muster"] = f"{commit[:12]} (exported)"
    else:
        muster_cwd = ROOT
        notes["muster"] = muster_tree_state()
    log(f"Muster's code: {notes['muster']}")
    muster_cwds = {"": muster_cwd}
    for ref in sorted({ref_of(m) for m in modes} - {""}):
        commit, muster_cwds[ref] = export_muster(ref, workdir)
        notes[f"muster@{ref}"] = f"{commit[:12]} (exported)"
        log(f"Muster's code for @{ref}: {commit[:12]}")
    profiled = profile_prefixes(options.profile, modes)
    trials: list[Trial] = []
    gangs: list[GangRound] = []
    began = time.monotonic()
    with lc.ControlPlane(bin_dir=bin_dir, workdir=workdir, keep_workdir=True) as cp:
        bench = Bench(cp, options, muster_cwds)
        try:
            bench.create_nodes()
            bench.create_quotas()
            if not options.kubelet and cp.kubelet is not None:
                cp.kubelet.stop()  # restarted for the gang phase: victims must terminate
            for round_ in range(1, options.repeat + 1):
                for mode in modes:
                    trials.append(bench.throughput_trial(mode, round_))
            for mode, prefix in profiled.items():
                extra = bench.throughput_trial(mode, 0, profile=prefix)
                log(f"profiled trial {mode} (not in the medians): {extra.pods_per_s} pods/s")
            if options.gang_repeat > 0:
                if cp.kubelet is not None and not cp.kubelet.running:
                    cp.kubelet.start()
                gangs = bench.gang_phase()
        finally:
            bench.watch.stop()
    notes["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
    notes["wall_s"] = round(time.monotonic() - began, 1)
    if not options.muster_ref and muster_tree_state() != notes["muster"]:
        notes["muster_changed_during_run"] = muster_tree_state()
        log(f"WARNING: Muster's code changed during the run: now {muster_tree_state()}")
    summary = report(trials, gangs, notes)
    summary["options"] = vars(options)
    summary["trials"] = [dataclasses.asdict(t) for t in trials]
    for mode, prefix in profiled.items():
        path = Path(f"{prefix}.txt")
        if path.exists():
            print(f"\nMuster ({mode}) under py-spy ({path})")
            print("\n".join(summarize_profile(path)))
    if options.json:
        Path(options.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
