"""The planner against an exhaustive oracle, for gangs whose pods differ in size (issue #13,
rule 4).

Small clusters (up to 4 nodes, up to 6 victim groups, a job of up to 4 pods of mixed
GPU and CPU shapes) where every victim the policies could allow is allowed: the job's
quota is within its ``min`` (it reclaims, ``Any``), the victims' quota guarantees
nothing and borrows, no quota limits the job.  So a plan exists exactly when some set
of victim groups, once evicted, leaves room for every pod of the job at once, which the
oracle decides by trying every subset of groups and every placement of the job's pods.

Properties: whenever the oracle finds a plan, the planner finds one; the planner's
plan is itself valid (its placement fits); and no victim group of it can be spared
(with that group back, no placement of the job fits).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from base.resources import add_into, fits
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"
CPU = "cpu"
JOB = "team-a/train"
QUOTAS = [
    quota("team-a", min={GPU: "64", CPU: "256"}, max={GPU: "64", CPU: "256"}),
    quota("team-b", min={GPU: "0", CPU: "0"}, max={GPU: "64", CPU: "256"}),
]
SHAPES = [(8, 4), (4, 2), (2, 16), (1, 1), (4, 12), (0, 8)]  # (GPUs, CPUs)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    node_count = draw(st.integers(1, 4))
    nodes = [
        node(f"n{i}", gpu=draw(st.sampled_from([4, 8])), cpu=str(draw(st.sampled_from([16, 32]))))
        for i in range(node_count)
    ]
    free = [
        {GPU: int(n["status"]["allocatable"][GPU]), CPU: int(n["status"]["allocatable"][CPU])}
        for n in nodes
    ]
    pods = []
    for index in range(draw(st.integers(0, 6))):  # victim groups: a pod, or a gang of 2
        members = draw(st.integers(1, 2))
        group = f"v{index}" if members > 1 else None
        minute = draw(st.integers(0, 59))
        for member in range(members):
            gpu, cpu = draw(st.sampled_from(SHAPES))
            spots = [i for i, room in enumerate(free) if room[GPU] >= gpu and room[CPU] >= cpu]
            if not spots:
                break
            spot = draw(st.sampled_from(spots))
            free[spot][GPU] -= gpu
            free[spot][CPU] -= cpu
            started = f"2026-01-01T10:{minute:02d}:00Z"
            pods.append(
                pod(
                    f"v{index}-{member}",
                    "team-b",
                    gpu=gpu,
                    cpu=str(cpu),
                    node=f"n{spot}",
                    group=group,
                    preemptible=True,
                    created=started,
                    started=started,
                )
            )
    for index in range(draw(st.integers(1, 4))):
        gpu, cpu = draw(st.sampled_from(SHAPES))
        pods.append(
            pod(
                f"t-{index}",
                "team-a",
                gpu=gpu,
                cpu=str(cpu),
                group="train",
                preemptible=False,
                can_preempt=True,
            )
        )
    return nodes, pods


def _free_after(snap: ClusterState, evicted: set[str]) -> dict[str, dict[str, int]]:
    """Each node's free room once the pods of ``evicted`` (job names) are gone."""
    free = {name: dict(snap.free_on(name)) for name in snap.nodes}
    for victim in snap.pods.values():
        if victim.node_name is not None and victim.job in evicted:
            add_into(free[victim.node_name], victim.requests)
    return free


def _placeable(
    requests: Sequence[Mapping[str, int]], free: Mapping[str, Mapping[str, int]]
) -> bool:
    """Is there any placement of all these pods at once (every pod to every node)?"""
    nodes = sorted(free)
    for choice in itertools.product(nodes, repeat=len(requests)):
        used: dict[str, dict[str, int]] = {name: {} for name in nodes}
        for request, name in zip(requests, choice, strict=True):
            add_into(used[name], request)
        if all(fits(used[name], free[name]) for name in nodes):
            return True
    return False


def _groups(snap: ClusterState) -> list[str]:
    return sorted({p.job for p in snap.pods.values() if p.node_name is not None})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_planner_finds_a_plan_whenever_one_exists_and_spares_every_group_it_can(
    case: tuple[list[Any], list[Any]],
) -> None:
    nodes, pods = case
    snap = snapshot(nodes, pods, QUOTAS)
    job = [p for p in snap.job_pods(JOB) if p.node_name is None]
    requests = [p.requests for p in job]
    groups = _groups(snap)
    oracle = any(
        _placeable(requests, _free_after(snap, set(subset)))
        for size in range(len(groups) + 1)
        for subset in itertools.combinations(groups, size)
    )
    decision = plan_job_preemption(snap, JOB, NOW)
    planned = isinstance(decision, PreemptionPlan)
    fits_already = _placeable(requests, _free_after(snap, set()))
    event("fits already" if fits_already else f"oracle {oracle}, planner {planned}")
    if fits_already:
        return  # nothing to plan: the planner refuses ("fits without evicting")
    assert planned == oracle, (oracle, decision)
    if not isinstance(decision, PreemptionPlan):
        return
    evicted = {v.job for v in decision.victims}
    # Valid: with its victims gone, the placement it names fits.
    free = _free_after(snap, evicted)
    used: dict[str, dict[str, int]] = {}
    for p in job:
        add_into(used.setdefault(decision.placements[p.key], {}), p.requests)
    assert all(fits(room, free[name]) for name, room in used.items())
    # Minimal: no victim group can be spared.
    for group in evicted:
        assert not _placeable(requests, _free_after(snap, evicted - {group})), group
