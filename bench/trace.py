"""A seeded GPU-cluster trace for the head-to-head with the peers (issue 25): who asks for
how many GPUs, when, for how long, at what priority. Pure data: nothing here talks to a
cluster; :mod:`bench.peers` replays one trace identically on every system.

``make_trace(seed)`` draws everything from one ``random.Random(seed)``. Its shape follows
what published traces of shared deep-learning clusters report, qualitatively: most jobs
ask for one GPU, yet multi-GPU (gang) jobs hold most of the GPU time; run times are
heavy-tailed (log-normal-like); a minority of jobs is high priority (Jeon et al.,
"Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX
ATC 2019, the Microsoft Philly trace; Weng et al., "MLaaS in the Wild", NSDI 2022, the
Alibaba PAI trace). The numbers below are ours, chosen to fit a run of minutes:

- **Gang size** (GPUs per job): 1 (40 %), 2 (10 %), 4 (15 %), 8 (15 %), 16 (12 %),
  32 (8 %). 1 GPU is one pod; 2 and 4 are as many 1-GPU workers; 8 is two 4-GPU pods;
  16 and 32 are two and four 8-GPU pods (whole nodes). Every job of more than one pod is
  a gang: all of its pods run, or none.
- **Run time**: log-normal, median ``median_runtime`` seconds (45), sigma 0.8, clipped to
  [10, 240] s: the trace's hours compressed to seconds.
- **Priority**: high (1000) 15 %, normal (100) 60 %, low (0) 25 %. Every job may be
  preempted and may trigger preemption: the peers preempt by priority and quota alone.
- **Teams**: ``teams`` quotas with ``min`` = capacity / teams (the guarantees add up to
  the cluster) and ``max`` = capacity (idle GPUs may be borrowed, all of them). Team *i*
  starts submitting at ``i * seconds / (2 * teams)``: the first teams borrow what the
  later ones are owed, who then reclaim it. Each job goes to one of the teams already
  started, uniformly.
- **Arrivals**: the number of jobs is drawn so that the work offered is ``load`` (1.3)
  times what the cluster can do in ``seconds``; their times are uniform over the
  window, sorted (a Poisson stream, conditioned on its count).
- **What jobs declare of their work** (issue 34), drawn from a second generator so the
  jobs above stay those of earlier runs: half of the jobs save a checkpoint every
  ``CHECKPOINT_SECONDS`` (30) of their run; a quarter ask ``NOTICE_SECONDS`` (20) of
  notice before eviction, and save and exit when given it (on Muster, its mark; on the
  peers, the graceful deletion their preemption sends, as ``terminationGracePeriodSeconds``);
  a third of the jobs of more than one pod run with as few as half their pods (an
  elastic range: the PodGroup's ``minMember``, Koordinator's gang minimum, Kueue's
  ``job-min-parallelism``). The draws are independent.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

#: GPUs per job and their probabilities.
GANG_SIZES: tuple[tuple[int, float], ...] = (
    (1, 0.40),
    (2, 0.10),
    (4, 0.15),
    (8, 0.15),
    (16, 0.12),
    (32, 0.08),
)
#: Priority class name → (value, probability).
PRIORITIES: dict[str, tuple[int, float]] = {
    "bench-high": (1000, 0.15),
    "bench-normal": (100, 0.60),
    "bench-low": (0, 0.25),
}
RUNTIME_SIGMA = 0.8
RUNTIME_BOUNDS = (10.0, 240.0)
#: Shares of the jobs that checkpoint, that ask for notice, and (of those of more than one
#: pod) that declare an elastic range.
CHECKPOINT_SHARE, NOTICE_SHARE, ELASTIC_SHARE = 0.5, 0.25, 1 / 3
CHECKPOINT_SECONDS = 30.0
NOTICE_SECONDS = 20.0


@dataclass(frozen=True, slots=True)
class TeamSpec:
    """One team: its namespace (and quota) name and its GPU ``min`` and ``max``."""

    name: str
    min_gpus: int
    max_gpus: int
    #: Seconds into the trace at which the team starts submitting.
    starts: float


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job: ``pods`` pods of ``gpus_per_pod`` GPUs each, in ``team``'s namespace,
    submitted ``at`` seconds into the trace; each pod runs ``runtime`` seconds."""

    name: str
    team: str
    at: float
    pods: int
    gpus_per_pod: int
    priority_class: str
    runtime: float
    #: The fewest pods it runs with (an elastic range); ``None``: all of them, a gang.
    min_pods: int | None = None
    #: Seconds between its checkpoints; ``None``: it saves nothing before it ends.
    checkpoint_interval: float | None = None
    #: Notice it asks for before eviction (and saves and exits on); ``None``: none.
    notice_seconds: float | None = None

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod

    @property
    def runs_with(self) -> int:
        """The fewest pods it runs with: its elastic range's lower end, else all."""
        return self.pods if self.min_pods is None else self.min_pods


@dataclass(frozen=True, slots=True)
class Trace:
    seed: int
    seconds: float
    nodes: int
    gpus_per_node: int
    teams: tuple[TeamSpec, ...]
    jobs: tuple[TraceJob, ...]

    @property
    def capacity(self) -> int:
        return self.nodes * self.gpus_per_node

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def pods_of(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """How a job of ``gpus`` GPUs is split into pods: (pods, GPUs per pod)."""
    if gpus <= 4:
        return gpus, 1
    if gpus <= gpus_per_node:
        return 2, gpus // 2
    return math.ceil(gpus / gpus_per_node), gpus_per_node


def make_trace(
    seed: int,
    *,
    seconds: float = 240.0,
    nodes: int = 32,
    gpus_per_node: int = 8,
    teams: int = 4,
    load: float = 1.3,
    median_runtime: float = 45.0,
) -> Trace:
    """The trace of ``seed`` (see the module's docstring for its distributions)."""
    if teams < 1 or nodes < 1 or gpus_per_node < 1 or seconds <= 0 or load <= 0:
        raise ValueError("teams, nodes, gpus_per_node, seconds and load must be positive")
    rng = random.Random(seed)
    capacity = nodes * gpus_per_node
    specs = tuple(
        TeamSpec(
            f"team-{chr(ord('a') + i)}", capacity // teams, capacity, i * seconds / (2 * teams)
        )
        for i in range(teams)
    )
    low, high = RUNTIME_BOUNDS
    sizes = [size for size, _ in GANG_SIZES if size <= capacity]
    size_weights = [weight for size, weight in GANG_SIZES if size <= capacity]
    classes = list(PRIORITIES)
    class_weights = [weight for _, weight in PRIORITIES.values()]
    drawn: list[tuple[int, float, str]] = []
    offered, wanted = 0.0, load * capacity * seconds
    while offered < wanted:
        gpus = rng.choices(sizes, size_weights)[0]
        runtime = min(high, max(low, rng.lognormvariate(math.log(median_runtime), RUNTIME_SIGMA)))
        drawn.append((gpus, round(runtime, 1), rng.choices(classes, class_weights)[0]))
        offered += gpus * runtime
    arrivals = sorted(round(rng.uniform(0, seconds), 2) for _ in drawn)
    declares = random.Random(f"declarations-{seed}")
    jobs = []
    for index, (at, (gpus, runtime, priority)) in enumerate(zip(arrivals, drawn, strict=True)):
        team = rng.choice([spec for spec in specs if spec.starts <= at])
        pods, per_pod = pods_of(gpus, gpus_per_node)
        checkpoints = declares.random() < CHECKPOINT_SHARE
        notice = declares.random() < NOTICE_SHARE
        elastic = declares.random() < ELASTIC_SHARE and pods > 1
        jobs.append(
            TraceJob(
                f"j{index:04d}",
                team.name,
                at,
                pods,
                per_pod,
                priority,
                runtime,
                min_pods=pods // 2 if elastic else None,
                checkpoint_interval=CHECKPOINT_SECONDS if checkpoints else None,
                notice_seconds=NOTICE_SECONDS if notice else None,
            )
        )
    return Trace(seed, seconds, nodes, gpus_per_node, specs, tuple(jobs))
