"""Deep queues (issue 37): time from a gang's last pod to Muster's decision about it, as the
queue of waiting gangs grows from 10 to 500.

    python -m bench.deep_queue [--nodes 1300,5000] [--depths 10,50,100,250,500]
                               [--probes 20] [--teams 20] [--json PATH]

In process, over the service and the leader's PostFilter loop, as a live Muster runs
them (no control plane: at 5,000 nodes and 500 gangs one would not fit beside Muster on a
2-core machine, and kube-scheduler's own queue, not Muster, would be measured):
:class:`~extender.service.Extender` over a :class:`~extender.service.StaticSource`, its
``on_unschedulable`` handing jobs to a :class:`~extender.kube.postfilter.PostFilterLoop`
whose writes go to a client that answers nothing (``NullClient``).

The cluster is :func:`bench.clusters.gpu_cluster`: ``--nodes`` nodes of 8 GPUs, 10 pods
each, 3 of them 2-GPU pods (2 GPUs free per node), in ``--teams`` quotas (team-0
guaranteed half the cluster and running nothing, the others borrowing it), nodes in
racks of 32.  Gangs (:func:`queue_gangs`): sizes 1 to 64 pods, mostly small, of 1, 2, 4
or 8 GPUs a pod, one of four priorities, spread over every team in turn, every third
one with Kueue's ``podset-required-topology`` on the rack; each declares its size (so it
is planned at once, as a complete gang).

A gang's *decision* (:meth:`Queue.decide`): from its last pod's arrival, kube-scheduler's
filter call for its first pod with the names of the nodes its own filters pass
(``nodeCacheCapable``; with none, no call: the pod's ``Unschedulable`` condition hands the
job to the PostFilter, as Muster's informer does), then, if the job was handed on, one
round of the loop (settling reservations, completing in-flight ones, deciding the due
jobs): *placed* (the filter passed nodes: placed whole, for a gang), *planned* (victims
chosen, room held) or *refused* (the filter's or the planner's reason).

The queue is the gangs refused and waiting.  Gangs arrive and are decided one after
another; a refused one stays, pending; any other is taken back (room released, pods
removed), so the cluster every decision sees is the same at every depth and only the
queue grows.  At each of ``--depths`` waiting gangs, ``--probes`` probe gangs (the same
shapes at every depth, a seed of their own) arrive one at a time, are decided
``--repeat`` times (the median is the probe's time) and taken back.  Reported per depth:
the probes' p50 and p99 and what they were decided, and p99 at the deepest ÷ p99 at the
shallowest; beside them, the backlog's own decisions and its refusals' reasons.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from base import keys
from bench.clusters import RACK, add_gang, gpu_cluster
from bench.support.run_notes import log, machine_notes
from extender.core.config import MusterArgs
from extender.core.decisions import DecisionLog
from extender.core.effects import ReleaseRoom, apply
from extender.core.objects import PodInfo
from extender.core.placement.nodefit import static_misfit
from extender.core.preemption.eligibility import postfilter_trigger
from extender.core.records import RecordKeys
from extender.core.state import ClusterState
from extender.kube.client import KubeClient
from extender.kube.postfilter import PostFilterLoop
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter
from extender.service import Extender, StaticSource

#: Gang sizes (pods) and how often each is drawn: mostly small, a few of 32 and 64.
SIZES = (1, 2, 4, 8, 16, 32, 64)
SIZE_WEIGHTS = (10, 20, 25, 20, 12, 8, 5)
#: GPUs a pod asks for, and how often.
GPUS = (1, 2, 4, 8)
GPU_WEIGHTS = (2, 4, 2, 2)
PRIORITIES = (100, 500, 500, 1000)
#: Nodes per rack (the topology every third gang requires).
RACK_NODES = 32
#: The clock the bench hands Muster: fixed (a reservation or a hold expiring would be the
#: queue's age, not its depth), moved on only by a debounced PostFilter request.
NOW = 1_767_225_600.0 + 100_000


@dataclass(frozen=True)
class QueuedGang:
    name: str
    team: str
    size: int
    gpus: int
    priority: int
    topology: bool


def queue_gangs(count: int, teams: int, seed: int, prefix: str = "g") -> list[QueuedGang]:
    """``count`` gangs (module docstring): team ``i % teams``, a required rack when
    ``i % 3 == 0``, sizes, GPUs and priorities drawn from ``seed``."""
    rng = random.Random(seed)
    return [
        QueuedGang(
            name=f"{prefix}{i:04d}",
            team=f"team-{i % teams}",
            size=rng.choices(SIZES, SIZE_WEIGHTS)[0],
            gpus=rng.choices(GPUS, GPU_WEIGHTS)[0],
            priority=rng.choice(PRIORITIES),
            topology=i % 3 == 0,
        )
        for i in range(count)
    ]


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


class NullClient:
    """The API client the PostFilter's writes go to: answers ``{}`` to everything."""

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class Decided:
    ms: float  # wall clock
    cpu_ms: float  # the deciding thread's CPU time (what the machine's other load leaves alone)
    outcome: str  # placed, planned, refused
    reason: str = ""


class Queue:
    """One cluster, Muster's service and PostFilter loop over it, and the waiting gangs."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.now = NOW
        source = StaticSource(state)
        writer = ClusterWriter(
            cast(KubeClient, NullClient()),
            clock=lambda: self.now,
            record_keys=lambda: RecordKeys((("bench", b"k" * 32),)),
        )
        self.loop = PostFilterLoop(
            cast(KubeSource, source), writer, DecisionLog(), clock=lambda: self.now
        )
        self.handed: list[tuple[str, bool]] = []
        self.extender = Extender(
            source,
            clock=lambda: self.now,
            on_unschedulable=lambda job, _why, at_once: self.handed.append((job, at_once)),
        )
        self.names = sorted(state.nodes)
        self.waiting: list[str] = []

    def close(self) -> None:
        self.loop.issuer.close()

    def arrive(self, gang: QueuedGang) -> str:
        annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: str(gang.size)}
        if gang.topology:
            annotations[keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION] = RACK
        return add_gang(
            self.state,
            gang.size,
            gang.gpus,
            name=gang.name,
            annotations=annotations,
            team=gang.team,
            priority=gang.priority,
        )

    def scheduler_fit(self, pod: PodInfo) -> list[str]:
        """The nodes kube-scheduler's own filters pass for ``pod`` (node constraints, and
        room by the pods bound there: it knows nothing of Muster's reservations), which
        are the names it sends the extender."""
        state = self.state
        passing = []
        for name in self.names:
            node = state.nodes[name]
            if static_misfit(pod, node) is not None:
                continue
            used = state.requested_on(name)
            if all(
                node.allocatable.get(r, 0) - used.get(r, 0) >= amount
                for r, amount in pod.requests.items()
            ):
                passing.append(name)
        return passing

    def decide(self, job: str) -> Decided:
        """The gang's decision (module docstring), timed from kube-scheduler's filter call
        for its first pod; when kube-scheduler's own filters pass no node it calls no
        extender, and the pod's ``Unschedulable`` condition hands the job to the
        PostFilter (as Muster's pod informer does, timed from there)."""
        first = min(self.state.members.job_pods(job), key=lambda p: p.key)
        passing = self.scheduler_fit(first)  # kube-scheduler's work, not timed
        committed, refused = self.loop.committed, self.loop.refused
        self.handed.clear()
        started, cpu_started = time.perf_counter(), time.thread_time()
        result = None
        if passing:
            result = self.extender.filter(first, passing)
        else:
            with self.loop.source.exclusive() as state:
                at_once = postfilter_trigger(state, first, self.now)
            if at_once is not None:
                self.handed.append((job, at_once))
        waited = 0.0
        if self.handed:
            _job, at_once = self.handed[-1]
            self.loop.request(job, at_once=at_once)
            if not at_once:  # the loop's quiet period, waited for by the clock
                waited = self.loop.debounce_seconds
                self.now += waited
            self.loop._round()
        ms = (time.perf_counter() - started + waited) * 1000
        cpu = (time.thread_time() - cpu_started) * 1000
        if result is not None and result.passed:
            return Decided(ms, cpu, "placed")
        if self.loop.committed > committed:
            return Decided(ms, cpu, "planned")
        if self.loop.refused > refused:
            reasons = self.loop.decisions.for_pod(first.key)[-1].reasons
            return Decided(ms, cpu, "refused", reasons[0] if reasons else "")
        if result is None:
            why = "kube-scheduler's: no node fits, not Muster's to plan"
            return Decided(ms, cpu, "refused", why)
        why = result.gang_waiting or "; ".join(result.quota_failures)
        if not why:
            why = next(iter({**result.unresolvable, **result.failed}.values()), "")
        return Decided(ms, cpu, "refused", f"by the filter: {why}")

    def take_back(self, job: str) -> None:
        """Undo a probe: its room released, its pods removed."""
        apply(self.state, ReleaseRoom(job))
        for pod in list(self.state.members.job_pods(job)):
            self.state.remove_pod(pod.key)


def summary(decisions: Sequence[Decided]) -> dict[str, Any]:
    times = [d.ms for d in decisions]
    cpu = [d.cpu_ms for d in decisions]
    return {
        "n": len(times),
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(percentile(times, 99), 2),
        "cpu_p50_ms": round(statistics.median(cpu), 2),
        "cpu_p99_ms": round(percentile(cpu, 99), 2),
        "outcomes": dict(Counter(d.outcome for d in decisions)),
    }


def measure(
    nodes: int,
    depths: list[int],
    probes: int,
    teams: int,
    seed: int,
    repeat: int,
    fair_sharing: bool = False,
) -> dict[str, Any]:
    built = time.perf_counter()
    state = gpu_cluster(
        nodes,
        quotas=teams,
        racks=max(1, nodes // RACK_NODES),
        gpu_pods_per_node=3,
        args=MusterArgs(fairSharing=fair_sharing),
    )
    queue = Queue(state)
    build_s = time.perf_counter() - built
    backlog: list[Decided] = []
    probe_gangs = queue_gangs(probes, teams, seed + 1000, prefix="probe")
    rows: dict[int, dict[str, Any]] = {}
    reasons: Counter[str] = Counter()
    stream = iter(queue_gangs(100 * max(depths), teams, seed))
    for depth in sorted(depths):
        while len(queue.waiting) < depth:
            job = queue.arrive(next(stream))
            decided = queue.decide(job)
            backlog.append(decided)
            if decided.outcome == "refused":
                queue.waiting.append(job)
                reasons[decided.reason.split(":")[0]] += 1
            else:
                queue.take_back(job)
        results = []
        for n, gang in enumerate(probe_gangs):
            runs = []
            for attempt in range(repeat):
                named = dataclasses.replace(gang, name=f"{gang.name}-d{depth}-{n}-{attempt}")
                job = queue.arrive(named)
                runs.append(queue.decide(job))
                queue.take_back(job)
            results.append(
                dataclasses.replace(
                    runs[0],
                    ms=statistics.median(r.ms for r in runs),
                    cpu_ms=statistics.median(r.cpu_ms for r in runs),
                )
            )
        rows[depth] = summary(results)
        log(f"nodes={nodes} waiting={depth}: probes {rows[depth]}")
    queue.close()
    shallow, deep = min(depths), max(depths)
    return {
        "nodes": nodes,
        "running_pods": sum(1 for p in state.pods.values() if p.node_name),
        "waiting_pods": sum(1 for p in state.pods.values() if p.node_name is None),
        "build_s": round(build_s, 1),
        "probes": rows,
        "p99_ratio": round(rows[deep]["p99_ms"] / rows[shallow]["p99_ms"], 2),
        "cpu_p99_ratio": round(rows[deep]["cpu_p99_ms"] / rows[shallow]["cpu_p99_ms"], 2),
        "backlog": {**summary(backlog), "refusals": dict(reasons.most_common(8))},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1300,5000")
    parser.add_argument("--depths", default="10,50,100,250,500")
    parser.add_argument("--probes", type=int, default=40)
    parser.add_argument("--teams", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="decisions per probe (median)")
    parser.add_argument(
        "--fair-sharing",
        action="store_true",
        help="Muster's fairSharing on (the chart's setting; its admission check reads the "
        "waiting gangs)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results here")
    options = parser.parse_args(argv)
    depths = [int(d) for d in options.depths.split(",")]
    results = {"machine": machine_notes(), "options": vars(options), "runs": []}
    for nodes in (int(n) for n in options.nodes.split(",")):
        row = measure(
            nodes,
            depths,
            options.probes,
            options.teams,
            options.seed,
            options.repeat,
            options.fair_sharing,
        )
        cast(list[Any], results["runs"]).append(row)
        print(json.dumps(row), flush=True)
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
