"""Differential check of the planner: a digest of its decisions on generated clusters.

    python -m bench.decisions [--cases 20000] [--seed 1] [--out PATH]

A speed change to the planner must not change a decision.  This draws ``--cases``
seeded random clusters of three families and prints one line per case, its number and a
digest of everything decided:

- *planner* cases: nodes of 4 or 8 GPUs; two to five quotas, some under a parent, with
  random ``min``/``max`` in GPUs and CPUs and random preemption policies; single pods and
  gangs, preemptible or not, some marked or terminating; PodDisruptionBudgets under
  either ``pdbPolicy``; a preempting job of one or two pod shapes.  The digest covers the
  whole decision (every victim in order with its reason, the placement, or the refusal's
  reasons).
- *mixed* cases (every other one; half of them *reclaiming*: every quota under one
  parent, the jobs' quota guaranteed some of everything, budgets under ``Strict``, more
  gangs, where a job may reclaim within its ``min`` only once its own work is gone): four
  resources (GPUs, CPUs, memory, an FPGA), pods asking for nothing or for a pod slot
  only, pods naming a quota that does not exist, up to four pending jobs.  Each job is
  planned twice (the second time with the node memos warm), then ``simulate``'s engine
  schedules everything (filter with reservations and their released room, scores,
  plans, evictions changing the state between decisions); the digest covers the plans
  and the simulation's placements, evictions and reasons.
- *benchmark-shaped* cases (every 50th): :func:`bench.clusters.gpu_cluster` at 4 to 120
  nodes with a gang of 1 to 64 pods.

Run it in two trees and compare the outputs (copy this file into an older tree that lacks
it)::

    (cd $OLD && python -m bench.decisions --out old.txt)
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
from extender.core.whatif import run_simulation
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
FPGA = "example.com/fpga"


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
        policy = _policy(
            rng, [ReclaimWithinCohort.ANY, ReclaimWithinCohort.ANY, *ReclaimWithinCohort]
        )
        maximum = _bounds(rng, 0, 96)
        minimum = {name: rng.choice([0, rng.randint(0, most)]) for name, most in maximum.items()}
        if i == job_quota and rng.random() < 0.7:  # a job that may reclaim: it plans more often
            minimum = maximum = {name: 96 * MILLI for name in maximum}
        parent_name = "parent" if parent and rng.random() < 0.7 else None
        specs.append(_leaf(i, minimum, maximum, parent_name, policy))
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
    _add_budgets(snap, rng, leaves, 0.3)
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


def _policy(rng: random.Random, reclaim: list[ReclaimWithinCohort]) -> QuotaPolicy:
    """A random preemption policy, its reclaim rule drawn from ``reclaim``."""
    return QuotaPolicy(
        within_quota=rng.choice(list(WithinQuota)),
        reclaim_within_cohort=rng.choice(reclaim),
        borrow_within_cohort=rng.choice(list(BorrowWithinCohort)),
        max_priority_threshold=rng.choice([None, None, 0, 5]),
    )


def _leaf(
    index: int,
    minimum: dict[str, int],
    maximum: dict[str, int],
    parent: str | None,
    policy: QuotaPolicy,
) -> QuotaSpec:
    return QuotaSpec(
        name=f"q{index}",
        namespace=f"q{index}",
        min=minimum,
        max=maximum,
        parent=parent,
        policy=policy,
    )


def _add_budgets(snap: ClusterState, rng: random.Random, quotas: list[str], chance: float) -> None:
    """A PodDisruptionBudget on ``app=x`` or ``app=y`` pods of each quota, with ``chance``."""
    for team in quotas:
        if rng.random() < chance:
            snap.set_budget(
                DisruptionBudget(
                    namespace=team,
                    name="pdb",
                    selector=LabelSelector((("app", rng.choice(["x", "y"])),), ()),
                    disruptions_allowed=rng.randint(0, 2),
                )
            )


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
    pod_slot: bool = True,
) -> PodInfo:
    """A pod; ``requests`` in whole units (milli-units in the pod), with a pod slot added
    if ``pod_slot``."""
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
        requests={k: v * MILLI for k, v in requests.items() if v}
        | ({"pods": MILLI} if pod_slot else {}),
        node_selector=node_selector or {},
        required_affinity=None,
        tolerations=(),
        preemption_policy="PreemptLowerPriority",
        nominated_node_name=None,
        unsupported=(),
    )


def mixed_cluster(rng: random.Random, reclaiming: bool) -> tuple[ClusterState, list[str]]:
    """A cluster of four resources with up to four pending jobs; returns them.
    ``reclaiming``: every quota under one parent, the jobs' quota guaranteed some of
    everything, ``pdbPolicy: Strict`` and budgets on most quotas, more gangs: where a job
    reclaims within its min only once its own quota's work is gone."""
    resources = [GPU, "cpu", "memory", FPGA]

    def bounds(low: int, high: int) -> dict[str, int]:
        return {
            name: rng.randint(low, high) * MILLI
            for name in resources
            if name == GPU or rng.random() < 0.4
        }

    def requests() -> dict[str, int]:
        kind = rng.random()
        if kind < 0.05:
            return {}  # asks for nothing
        if kind < 0.1:
            return {"pods": 1}
        asked = {}
        for name, choices in (
            (GPU, [0, 0, 1, 2, 4]),
            ("cpu", [0, 1, 2, 4]),
            ("memory", [0, 0, 2, 8]),
            (FPGA, [0, 0, 0, 1]),
        ):
            amount = rng.choice(choices)
            if amount:
                asked[name] = amount
        if rng.random() < 0.7:
            asked["pods"] = 1
        return asked

    quota_count = rng.randint(2, 4)
    parent = reclaiming or rng.random() < 0.6
    specs = []
    if parent:
        specs.append(
            QuotaSpec(name="parent", namespace="parent", min={}, max=bounds(8, 64), is_parent=True)
        )
    job_quota = rng.randrange(quota_count)
    for i in range(quota_count):
        policy = _policy(rng, [ReclaimWithinCohort.ANY, *ReclaimWithinCohort])
        maximum = bounds(0, 64)
        minimum = {name: rng.choice([0, rng.randint(0, most)]) for name, most in maximum.items()}
        if i == job_quota and (reclaiming or rng.random() < 0.5):
            low, high = (4, 24) if reclaiming else (0, 16)
            minimum = {name: rng.randint(low, high) * MILLI for name in maximum}
            maximum = {name: 96 * MILLI for name in maximum}
            if reclaiming:
                policy = QuotaPolicy(
                    within_quota=rng.choice(
                        [WithinQuota.LOWER_PRIORITY, WithinQuota.LOWER_OR_NEWER_EQUAL_PRIORITY]
                    ),
                    reclaim_within_cohort=ReclaimWithinCohort.ANY,
                )
        parent_name = "parent" if reclaiming or (parent and rng.random() < 0.8) else None
        specs.append(_leaf(i, minimum, maximum, parent_name, policy))
    policy_name = "Strict" if reclaiming else rng.choice(["BestEffort", "Strict"])
    args = MusterArgs.model_validate({"pdbPolicy": policy_name})
    snap = ClusterState(args, specs)
    leaves = [spec.name for spec in specs if not spec.is_parent]
    free = []
    for n in range(rng.randint(1, 10)):
        allocatable = {
            GPU: rng.choice([0, 4, 8]),
            "cpu": rng.choice([8, 16]),
            "memory": rng.choice([16, 32]),
            "pods": rng.choice([3, 6, 110]),
        }
        if rng.random() < 0.3:
            allocatable[FPGA] = 2
        free.append(dict(allocatable))
        snap.upsert_node(
            NodeInfo(
                name=f"n{n:02d}",
                labels={"pool": rng.choice(["a", "b"])},
                allocatable={name: amount * MILLI for name, amount in allocatable.items()},
                taints=(),
                unschedulable=False,
            )
        )
    for index in range(rng.randint(0, 6 * len(free))):
        members = rng.choice([1, 2, 3] if reclaiming else [1, 1, 2, 3])
        team = rng.choice(leaves)
        labels = {keys.PREEMPTIBLE_LABEL: rng.choice(["true", "true", "true", "false"])}
        if rng.random() < 0.03:
            labels[keys.QUOTA_NAME_LABEL] = "nonexistent"
        if members > 1:
            labels[keys.POD_GROUP_LABEL] = f"g{index}"
        if rng.random() < (0.7 if reclaiming else 0.3):
            labels["app"] = rng.choice(["x", "y"])
        priority = rng.choice([0, 0, 5, 10])
        started = EPOCH + rng.randrange(3_600)
        for member in range(members):
            asked = requests()
            spots = [
                i
                for i, room in enumerate(free)
                if all(room.get(name, 0) >= amount for name, amount in asked.items())
            ]
            if not spots:
                break
            spot = rng.choice(spots)
            for name, amount in asked.items():
                free[spot][name] -= amount
            snap.upsert_pod(
                _pod(
                    team,
                    f"r{index}-{member}",
                    dict(labels),
                    priority,
                    started + member,
                    f"n{spot:02d}",
                    asked,
                    terminating=rng.random() < 0.03,
                    pod_slot=False,
                )
            )
    _add_budgets(snap, rng, leaves, 0.8 if reclaiming else 0.3)
    jobs = []
    for j in range(rng.randint(1, 4)):
        team = rng.choice(leaves)
        priority = rng.choice([0, 5, 10, 10])
        shapes = [requests() for _ in range(rng.choice([1, 1, 2]))]
        size = rng.randint(1, 6)
        gang = size > 1 or rng.random() < 0.5
        selector = {"pool": "a"} if rng.random() < 0.2 else {}
        for member in range(size):
            labels = {
                keys.PREEMPTIBLE_LABEL: rng.choice(["true", "true", "true", "false"]),
                keys.CAN_PREEMPT_LABEL: "true",
            }
            if gang:
                labels[keys.POD_GROUP_LABEL] = f"job{j}"
            snap.upsert_pod(
                _pod(
                    team,
                    f"job{j}-{member}",
                    labels,
                    priority,
                    EPOCH + 1_800 + j,
                    None,
                    shapes[member % len(shapes)],
                    node_selector=selector,
                    pod_slot=False,
                )
            )
        jobs.append(f"{team}/job{j}" if gang else f"{team}/job{j}-0")
    return snap, jobs


def mixed_digest(snap: ClusterState, jobs: list[str]) -> tuple[str, int, int]:
    """Plan every job twice, then simulate; the digest and the counts of plans and
    refusals among the plans."""
    decisions = [plan_job_preemption(snap, job, NOW) for job in [*jobs, *jobs]]
    result = run_simulation(snap, NOW)
    parts = [
        *(_parts(decision) for decision in decisions),
        repr(sorted(result.placements.items())),
        repr(result.evictions),
        repr(sorted(result.unschedulable.items())),
        repr(result.notes),
    ]
    plans = sum(isinstance(decision, PreemptionPlan) for decision in decisions)
    return _sha("\n".join(parts)), plans, len(decisions) - plans


def bench_shaped(rng: random.Random) -> tuple[ClusterState, str]:
    """The benchmark's cluster shape, small: ``bench.clusters``."""
    snap = gpu_cluster(rng.randint(4, 120), seed=rng.randrange(2**31))
    return snap, add_gang(snap, rng.choice([1, 2, 4, 8, 16, 64]), gpus=rng.choice([2, 4, 8]))


def digest(decision: PreemptionPlan | Refusal) -> str:
    """A digest of everything a decision says."""
    return _sha(_parts(decision))


def _parts(decision: PreemptionPlan | Refusal) -> str:
    if isinstance(decision, PreemptionPlan):
        parts = [
            "plan",
            decision.quota,
            *(f"{v.pod.key}|{v.quota}|{v.job}|{v.reason}" for v in decision.victims),
            *(f"{pod}->{node}" for pod, node in sorted(decision.placements.items())),
        ]
    else:
        parts = ["refusal", *decision.reasons]
    return "\n".join(parts)


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


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
            if case % 2:
                mixed, jobs = mixed_cluster(rng, reclaiming=case % 4 == 3)
                line, planned, refused = mixed_digest(mixed, jobs)
                plans += planned
                refusals += refused
                print(case, line, file=out)
                continue
            if case % BENCH_SHAPED_EVERY == BENCH_SHAPED_EVERY - 2:
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
