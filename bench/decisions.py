"""Differential check of the planner: a digest of its decisions on generated clusters.

    python -m bench.decisions [--cases 20000] [--seed 1] [--out PATH]

A speed change to the planner must not change a decision.  This draws ``--cases``
seeded random clusters (nodes of 4 or 8 GPUs; two to five quotas, some under a parent,
with random ``min``/``max`` in GPUs and CPUs and random preemption policies; single pods
and gangs, preemptible or not, some marked or terminating; PodDisruptionBudgets under
either ``pdbPolicy``; a preempting job of one or two pod shapes), plus the benchmark's
own cluster shape (:func:`bench.clusters.gpu_cluster`) at small sizes, and prints one
line per case: its number and a digest of the whole decision (every victim in order
with its reason, the placement, or the refusal's reasons).  Run it in two trees and
compare the outputs::

    PYTHONPATH=$OLD python -m bench.decisions --out old.txt
    python -m bench.decisions --out new.txt && cmp old.txt new.txt

The last line counts plans and refusals, so a generator that stopped producing plans
would show.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time

from base import keys
from base.resources import MILLI
from bench.clusters import EPOCH, GPU, add_gang, gpu_cluster
from extender.core.budgets import DisruptionBudget
from extender.core.config import MusterArgs
from extender.core.constraints import LabelSelector
from extender.core.objects import NodeInfo, PodInfo
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState
from quota.tree import (
    BorrowWithinCohort,
    QuotaPolicy,
    QuotaSpec,
    ReclaimWithinCohort,
    WithinQuota,
)

NOW = EPOCH + 100_000
#: How many of the cases are the benchmark's cluster shape, at small sizes.
BENCH_SHAPED_EVERY = 50


def random_cluster(rng: random.Random) -> tuple[ClusterState, str]:
    """A random cluster and the job to plan for."""
    quota_count = rng.randint(2, 5)
    parent = rng.random() < 0.4
    specs = []
    if parent:
        specs.append(
            QuotaSpec(
                name="parent",
                namespace="parent",
                min={},
                max=_bounds(rng, 16, 96),
                is_parent=True,
            )
        )
    job_quota = rng.randrange(quota_count)
    for i in range(quota_count):
        policy = QuotaPolicy(
            within_quota=rng.choice(list(WithinQuota)),
            reclaim_within_cohort=rng.choice(
                [ReclaimWithinCohort.ANY, ReclaimWithinCohort.ANY, *ReclaimWithinCohort]
            ),
            borrow_within_cohort=rng.choice(list(BorrowWithinCohort)),
            max_priority_threshold=rng.choice([None, None, 0, 5]),
        )
        maximum = _bounds(rng, 0, 96)
        minimum = {name: rng.choice([0, rng.randint(0, most)]) for name, most in maximum.items()}
        if i == job_quota and rng.random() < 0.7:  # a job that may reclaim: it plans more often
            minimum = maximum = {name: 96 * MILLI for name in maximum}
        specs.append(
            QuotaSpec(
                name=f"q{i}",
                namespace=f"q{i}",
                min=minimum,
                max=maximum,
                parent="parent" if parent and rng.random() < 0.7 else None,
                policy=policy,
            )
        )
    args = MusterArgs.model_validate({"pdbPolicy": rng.choice(["BestEffort", "Strict"])})
    snap = ClusterState(args, specs)
    leaves = [spec.name for spec in specs if not spec.is_parent]
    free = []
    for n in range(rng.randint(1, 40)):
        gpus = rng.choice([4, 8])
        cpus = rng.choice([16, 32])
        free.append({GPU: gpus, "cpu": cpus})
        snap.upsert_node(
            NodeInfo(
                name=f"n{n:02d}",
                labels={"pool": rng.choice(["a", "b"])},
                allocatable={GPU: gpus * MILLI, "cpu": cpus * MILLI, "pods": 110 * MILLI},
                taints=(),
                unschedulable=False,
            )
        )
    for index in range(rng.randint(0, 8 * len(free))):
        members = rng.choice([1, 1, 1, 2, 3])
        team = rng.choice(leaves)
        labels = {keys.PREEMPTIBLE_LABEL: rng.choice(["true", "true", "true", "false"])}
        if members > 1:
            labels[keys.POD_GROUP_LABEL] = f"g{index}"
        if rng.random() < 0.3:
            labels["app"] = rng.choice(["x", "y"])
        priority = rng.choice([0, 0, 5, 10])
        started = EPOCH + rng.randrange(3_600)
        for member in range(members):
            gpu, cpu = rng.choice([(1, 1), (2, 4), (4, 2), (0, 4), (8, 8)])
            spots = [i for i, room in enumerate(free) if room[GPU] >= gpu and room["cpu"] >= cpu]
            if not spots:
                break
            spot = rng.choice(spots)
            free[spot][GPU] -= gpu
            free[spot]["cpu"] -= cpu
            pod_labels = dict(labels)
            if rng.random() < 0.05:
                pod_labels[keys.SOFT_EVICTION_KEY] = "true"
            snap.upsert_pod(
                _pod(
                    team,
                    f"r{index}-{member}",
                    pod_labels,
                    priority,
                    started + member,
                    f"n{spot:02d}",
                    {GPU: gpu, "cpu": cpu},
                    terminating=rng.random() < 0.03,
                )
            )
    for team in leaves:
        if rng.random() < 0.3:
            snap.set_budget(
                DisruptionBudget(
                    namespace=team,
                    name="pdb",
                    selector=LabelSelector((("app", rng.choice(["x", "y"])),), ()),
                    disruptions_allowed=rng.randint(0, 2),
                )
            )
    team = f"q{job_quota}"
    priority = rng.choice([0, 5, 10, 10])
    shapes = [rng.choice([(1, 1), (2, 4), (4, 2), (8, 4), (0, 8)])]
    if rng.random() < 0.3:
        shapes.append(rng.choice([(1, 1), (2, 4), (4, 2), (8, 4)]))
    selector = {"pool": "a"} if rng.random() < 0.2 else {}
    for member in range(rng.randint(1, 8)):
        gpu, cpu = shapes[member % len(shapes)]
        pod = _pod(
            team,
            f"job-{member}",
            {
                keys.POD_GROUP_LABEL: "job",
                keys.PREEMPTIBLE_LABEL: rng.choice(["true", "false"]),
                keys.CAN_PREEMPT_LABEL: "true",
            },
            priority,
            EPOCH + 1_800,
            None,
            {GPU: gpu, "cpu": cpu},
            node_selector=selector,
        )
        snap.upsert_pod(pod)
    return snap, f"{team}/job"


def _bounds(rng: random.Random, low: int, high: int) -> dict[str, int]:
    bounds = {GPU: rng.randint(low, high) * MILLI}
    if rng.random() < 0.5:
        bounds["cpu"] = rng.randint(low, high * 2) * MILLI
    return bounds


def _pod(
    namespace: str,
    name: str,
    labels: dict[str, str],
    priority: int,
    created: float,
    node: str | None,
    requests: dict[str, int],
    *,
    terminating: bool = False,
    node_selector: dict[str, str] | None = None,
) -> PodInfo:
    return PodInfo(
        namespace=namespace,
        name=name,
        uid=f"{namespace}-{name}",
        labels=labels,
        annotations={},
        priority=priority,
        created=created,
        started=created if node else None,
        node_name=node,
        phase="Running" if node else "Pending",
        terminating=terminating,
        requests={k: v * MILLI for k, v in requests.items() if v} | {"pods": MILLI},
        node_selector=node_selector or {},
        required_affinity=None,
        tolerations=(),
        preemption_policy="PreemptLowerPriority",
        nominated_node_name=None,
        unsupported=(),
    )


def bench_shaped(rng: random.Random) -> tuple[ClusterState, str]:
    """The benchmark's cluster shape, small: ``bench.clusters``."""
    snap = gpu_cluster(rng.randint(4, 120), seed=rng.randrange(2**31))
    return snap, add_gang(snap, rng.choice([1, 2, 4, 8, 16, 64]), gpus=rng.choice([2, 4, 8]))


def digest(decision: PreemptionPlan | Refusal) -> str:
    """A digest of everything a decision says."""
    if isinstance(decision, PreemptionPlan):
        parts = [
            "plan",
            decision.quota,
            *(f"{v.pod.key}|{v.quota}|{v.job}|{v.reason}" for v in decision.victims),
            *(f"{pod}->{node}" for pod, node in sorted(decision.placements.items())),
        ]
    else:
        parts = ["refusal", *decision.reasons]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", metavar="PATH", help="write the digests here (default stdout)")
    options = parser.parse_args(argv)
    out = open(options.out, "w") if options.out else sys.stdout  # noqa: SIM115
    plans = refusals = 0
    started = time.perf_counter()
    with out:
        for case in range(options.cases):
            rng = random.Random(options.seed * 1_000_003 + case)
            if case % BENCH_SHAPED_EVERY == BENCH_SHAPED_EVERY - 1:
                snap, job = bench_shaped(rng)
            else:
                snap, job = random_cluster(rng)
            decision = plan_job_preemption(snap, job, NOW)
            if isinstance(decision, PreemptionPlan):
                plans += 1
            else:
                refusals += 1
            print(case, digest(decision), file=out)
        print(f"cases {options.cases} plans {plans} refusals {refusals}", file=out)
    print(
        f"{options.cases} cases: {plans} plans, {refusals} refusals "
        f"in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
