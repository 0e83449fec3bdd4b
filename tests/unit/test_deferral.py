"""Holding victim units back until their node could gain (:mod:`extender.core.preemption.
deferral`) changes how fast the walk is, never what it decides.

The expected decision of each case is the planner's own without deferral: the walk that
takes every unit at its place, which the rest of the suite derives by hand.  The cases
are built so that deferral applies and is put to work: gangs of whole-node (or
half-node) pods on GPU clusters whose lowest-priority pods are spread over every node,
gangs of running pods spread over several nodes (offered at their place, between held
units), pods already leaving, and quotas whose ``min`` sits close to their usage, so
that some walks must fall back.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Iterator

import pytest

from base.resources import MILLI
from bench.clusters import GPU, add_gang, gpu_cluster
from extender.core.preemption import search
from extender.core.preemption.deferral import Deferral
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState
from quota.tree import QuotaSpec

NOW = 1_767_400_000.0


def random_case(seed: int) -> tuple[ClusterState, str]:
    """A GPU cluster with quotas whose ``min`` is drawn near their usage, some pods
    leaving, and a pending gang that needs several nodes' GPUs."""
    rng = random.Random(seed)
    quotas = rng.randint(3, 6)
    drawn = gpu_cluster(
        rng.randint(12, 90),
        pods_per_node=rng.randint(4, 10),
        quotas=quotas,
        seed=seed,
        gpu_pods_per_node=rng.choice((2, 3, 4)),
    )
    used: Counter[str] = Counter()
    for pod in drawn.pods.values():
        used[pod.namespace] += pod.requests.get(GPU, 0)
    cluster_gpus = sum(node.allocatable[GPU] for node in drawn.nodes.values())
    specs = [
        QuotaSpec(
            name=f"team-{i}",
            namespace=f"team-{i}",
            min={
                GPU: cluster_gpus // 2
                if i == 0
                else int(used[f"team-{i}"] * rng.choice((0.2, 0.6, 0.85, 0.95, 1.0)))
                // MILLI
                * MILLI
            },
            max={GPU: cluster_gpus},
        )
        for i in range(quotas)
    ]
    state = ClusterState(drawn.args, specs)
    for node in drawn.nodes.values():
        state.upsert_node(node)
    for pod in drawn.pods.values():
        if rng.random() < 0.03:  # leaving: a plan counts it gone
            pod = dataclasses.replace(pod, terminating=True)
        state.upsert_pod(pod)
    whole = rng.random() < 0.7
    job = add_gang(
        state,
        rng.randint(1, 12) if whole else rng.randint(2, 16),
        gpus=8 if whole else 4,
        priority=rng.choice((50, 500, 5000)),
    )
    return state, job


def decision(state: ClusterState, job: str) -> tuple[object, ...]:
    """Everything the planner decided: each victim with its reason, the placement, or
    the refusal's reasons."""
    outcome = plan_job_preemption(state, job, NOW)
    if isinstance(outcome, PreemptionPlan):
        return (
            "plan",
            tuple((victim.pod.key, victim.reason) for victim in outcome.victims),
            tuple(sorted(outcome.placements.items())),
        )
    assert isinstance(outcome, Refusal)
    return ("refused", tuple(outcome.reasons))


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts the walks that held units back and stood by their answer."""
    counts: Counter[str] = Counter()
    walk = search._walk

    def counted(*args: object, **kwargs: object) -> object:
        found = walk(*args, **kwargs)  # type: ignore[arg-type]
        if kwargs["defer"]:
            counts["vouched" if found is not None else "walked again"] += 1
        return found

    monkeypatch.setattr(search, "_walk", counted)
    yield counts


def test_deferral_decides_what_the_walk_without_decides(
    walks: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = 160
    for seed in range(cases):
        state, job = random_case(seed)
        with_deferral = decision(state, job)
        with monkeypatch.context() as patched:
            patched.setattr(Deferral, "applies", staticmethod(lambda *a, **k: False))
            without = decision(state, job)
        assert with_deferral == without, f"seed {seed}"
    # The property is only as good as its cases: most must take the deferred path to the
    # end, and some must be sent back to walk again.
    assert walks["vouched"] >= cases // 2, walks
    assert walks["walked again"] >= 5, walks
