"""The soak's seeded random stream: quotas, jobs and faults, as pure data.

``make_plan(seed, seconds)`` draws everything a soak run submits from one
``random.Random(seed)``, so a seed replays the same stream (the timing of the real
control plane around it still varies).  Nothing here talks to a cluster: the driver
(:mod:`tests.soak.run`) turns the plan into API objects at the planned times.

The stream (issue #14, item 7): 2 to 4 leaf quotas under one parent quota (a two-level
tree, the parent's ``max`` bounding them all); jobs are gangs of 1 to 8 pods in one
leaf quota, with a random priority class, preemptible or not, allowed to trigger
preemption or not, sometimes a PodDisruptionBudget over the job, a victim grace period
of 0 to 20 s, and a run time; the driver submits each as a batch/v1 Job (issue 24:
``parallelism`` = its pods, the gang's size; each pod runs the run time on the kubelet
stand-in and succeeds; evicted pods are replaced by the Job controller);
one job in ``BURST_SHARE`` is a *burst* instead (issue 23): 5 to 20 single pods of
1, 2 or 4 GPUs each, no pod group, created back to back (as a Job with ``parallelism``
does), often more than their quota's ``max`` holds, deleted by the soak after the run
time;
faults at random times: kill -9 of the leader Muster, kill -9 of the evictor, a
kube-apiserver restart, an ElasticQuota edit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

GPU = "nvidia.com/gpu"
#: Priority classes the soak creates (name → value); jobs draw one of them.
PRIORITY_CLASSES = {"soak-low": 0, "soak-mid": 100, "soak-high": 1000}
FAULT_KINDS = ("kill-leader", "kill-evictor", "restart-apiserver", "edit-quota")
#: Nodes of the soak's cluster and the GPUs of each.
NODES = 6
GPUS_PER_NODE = 8
#: Mean time between two jobs' submissions, seconds.
MEAN_ARRIVAL_SECONDS = 4.0
#: The share of jobs that are bursts of single pods.
BURST_SHARE = 0.15
#: Faults keep this far from each other and from the start and end of the stream.
FAULT_SPACING_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class QuotaPlan:
    """One ElasticQuota: a leaf (its pods' namespace is ``namespace``) or the parent."""

    name: str
    namespace: str
    min_gpus: int
    max_gpus: int
    parent: str | None = None
    is_parent: bool = False


@dataclass(frozen=True, slots=True)
class JobPlan:
    """One job: ``pods`` pods of ``gpus_per_pod`` GPUs in ``quota``'s namespace, submitted
    ``at`` seconds into the stream; each pod runs ``runtime`` seconds (a burst's are
    deleted ``runtime`` seconds after all are bound)."""

    name: str
    quota: str
    at: float
    pods: int
    gpus_per_pod: int
    priority_class: str
    preemptible: bool
    can_preempt: bool
    #: A PodDisruptionBudget over the job's pods with this ``minAvailable`` (``None``: none).
    pdb_min_available: int | None
    grace_seconds: int
    runtime: float
    #: A burst: ``pods`` single pods (no pod group), pod ``i`` asking ``sizes[i]`` GPUs.
    sizes: tuple[int, ...] = ()

    @property
    def burst(self) -> bool:
        return bool(self.sizes)

    def gpus(self, index: int) -> int:
        """The GPUs pod ``index`` asks for."""
        return self.sizes[index] if self.sizes else self.gpus_per_pod


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """A fault at ``at`` seconds; an ``edit-quota`` sets ``quota``'s ``field`` (``min`` or
    ``max``) to ``gpus``."""

    at: float
    kind: str
    quota: str = ""
    field: str = ""
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class SoakPlan:
    seed: int
    seconds: float
    nodes: int
    gpus_per_node: int
    quotas: tuple[QuotaPlan, ...]
    jobs: tuple[JobPlan, ...]
    faults: tuple[FaultPlan, ...]

    @property
    def leaves(self) -> tuple[QuotaPlan, ...]:
        return tuple(q for q in self.quotas if not q.is_parent)

    def quota(self, name: str) -> QuotaPlan:
        return next(q for q in self.quotas if q.name == name)


def make_plan(seed: int, seconds: float, prefix: str = "soak") -> SoakPlan:
    """The stream of a soak of ``seconds`` seconds drawn from ``seed``."""
    rng = random.Random(seed)
    capacity = NODES * GPUS_PER_NODE
    quotas = _quotas(rng, capacity, prefix)
    leaves = [q for q in quotas if not q.is_parent]
    jobs = _jobs(rng, seconds, leaves, prefix)
    faults = _faults(rng, seconds, quotas)
    return SoakPlan(seed, seconds, NODES, GPUS_PER_NODE, tuple(quotas), jobs, faults)


def _quotas(rng: random.Random, capacity: int, prefix: str) -> list[QuotaPlan]:
    parent_max = rng.randint(capacity * 3 // 4, capacity)
    parent = QuotaPlan(
        f"{prefix}-org", f"{prefix}-org", parent_max, parent_max, parent=None, is_parent=True
    )
    count = rng.randint(2, 4)
    share = parent_max // count
    leaves = []
    for i in range(count):
        minimum = rng.randint(share // 4, share)
        maximum = rng.randint(minimum + GPUS_PER_NODE, parent_max)
        name = f"{prefix}-q{i}"
        leaves.append(QuotaPlan(name, name, minimum, maximum, parent=parent.name))
    return [parent, *leaves]


def _jobs(
    rng: random.Random, seconds: float, leaves: list[QuotaPlan], prefix: str
) -> tuple[JobPlan, ...]:
    jobs: list[JobPlan] = []
    at = rng.expovariate(1 / MEAN_ARRIVAL_SECONDS)
    while at < seconds:
        if rng.random() < BURST_SHARE:
            jobs.append(_burst(rng, f"{prefix}-j{len(jobs):04d}", rng.choice(leaves), at))
            at += rng.expovariate(1 / MEAN_ARRIVAL_SECONDS)
            continue
        pods = rng.randint(1, 8)
        preemptible = rng.random() < 0.6
        jobs.append(
            JobPlan(
                name=f"{prefix}-j{len(jobs):04d}",
                quota=rng.choice(leaves).name,
                at=round(at, 3),
                pods=pods,
                gpus_per_pod=rng.choice((1, 1, 2)),
                priority_class=rng.choice(sorted(PRIORITY_CLASSES)),
                preemptible=preemptible,
                can_preempt=rng.random() < 0.5,
                pdb_min_available=(
                    rng.randint(1, pods) if preemptible and rng.random() < 0.3 else None
                ),
                grace_seconds=rng.randint(0, 20),
                runtime=round(rng.uniform(20.0, 90.0), 3),
            )
        )
        at += rng.expovariate(1 / MEAN_ARRIVAL_SECONDS)
    return tuple(jobs)


def _burst(rng: random.Random, name: str, leaf: QuotaPlan, at: float) -> JobPlan:
    """5 to 20 single pods of 1, 2 or 4 GPUs, created back to back."""
    count = rng.randint(5, 20)
    sizes = tuple(rng.choice((1, 2, 4)) for _ in range(count))
    return JobPlan(
        name=name,
        quota=leaf.name,
        at=round(at, 3),
        pods=count,
        gpus_per_pod=max(sizes),
        priority_class=rng.choice(sorted(PRIORITY_CLASSES)),
        preemptible=rng.random() < 0.6,
        can_preempt=False,
        pdb_min_available=None,
        grace_seconds=rng.randint(0, 20),
        runtime=round(rng.uniform(20.0, 90.0), 3),
        sizes=sizes,
    )


def _faults(rng: random.Random, seconds: float, quotas: list[QuotaPlan]) -> tuple[FaultPlan, ...]:
    """Every kind once, then one more fault a minute, in random order, spread over the
    stream with ``FAULT_SPACING_SECONDS`` between them (fewer if the stream is short)."""
    slots = int(seconds // FAULT_SPACING_SECONDS) - 1
    count = min(slots, len(FAULT_KINDS) + int(seconds // 60))
    if count <= 0:
        return ()
    kinds = list(FAULT_KINDS)
    rng.shuffle(kinds)
    kinds = (kinds + [rng.choice(FAULT_KINDS) for _ in range(count)])[:count]
    # ``count`` distinct slots of FAULT_SPACING_SECONDS, jittered within the slot's first half.
    chosen = sorted(rng.sample(range(1, slots + 1), count))
    faults = []
    bounds = {q.name: (q.min_gpus, q.max_gpus) for q in quotas}
    for slot, kind in zip(chosen, kinds, strict=True):
        at = round(slot * FAULT_SPACING_SECONDS + rng.uniform(0, FAULT_SPACING_SECONDS / 2), 3)
        if kind == "edit-quota":
            edit = _quota_edit(rng, at, quotas, bounds)
            low, high = bounds[edit.quota]
            bounds[edit.quota] = (edit.gpus, high) if edit.field == "min" else (low, edit.gpus)
            faults.append(edit)
        else:
            faults.append(FaultPlan(at, kind))
    return tuple(faults)


def _quota_edit(
    rng: random.Random,
    at: float,
    quotas: list[QuotaPlan],
    bounds: dict[str, tuple[int, int]],
) -> FaultPlan:
    """A leaf's ``max`` raised or lowered (never below its ``min``, never above the
    parent's ``max``), or its ``min`` (never above its ``max``), against ``bounds``: each
    quota's (min, max) after the edits before this one."""
    leaf = rng.choice([q for q in quotas if not q.is_parent])
    parent = next(q for q in quotas if q.is_parent)
    low, high = bounds[leaf.name]
    if rng.random() < 0.5:
        return FaultPlan(at, "edit-quota", leaf.name, "max", rng.randint(low, parent.max_gpus))
    return FaultPlan(at, "edit-quota", leaf.name, "min", rng.randint(0, high))
