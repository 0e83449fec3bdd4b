"""Property tests of gang placement over generated clusters (hypothesis), through
``simulate``'s engine (:func:`extender.core.whatif.run_simulation`, which plays
kube-scheduler with the same filter the extender serves).

For every generated cluster, quotas and pending jobs: no gang ends with some but fewer
than its min-available pods bound.  Hand-built examples check that a job whose pods fit
on free nodes alone is placed whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from base import keys
from extender.core.podgroups import PodGroupInfo
from extender.core.state import ClusterState
from extender.core.whatif import SimulationResult, run_simulation
from tests.builders import node, pod, quota, snapshot

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"
NAMESPACES = ["qa", "qb"]


@st.composite
def cases(
    draw: st.DrawFn,
) -> tuple[list[Any], list[Any], list[Any], dict[str, int], list[PodGroupInfo]]:
    """Nodes, pods, quotas, each pending job's min-available (by job), and PodGroups."""
    node_count = draw(st.integers(1, 4))
    nodes = []
    free: list[list[int]] = []  # [gpu, cpu] left on each node
    for index in range(node_count):
        gpu = draw(st.sampled_from([0, 4, 8, 8]))
        cpu = draw(st.sampled_from([4, 8, 16]))
        nodes.append(node(f"n{index}", gpu=gpu, cpu=str(cpu)))
        free.append([gpu, cpu])
    pods = []
    # Running pods of no gang, each fitting in its node's room.
    for index in range(draw(st.integers(0, 5))):
        spot = draw(st.integers(0, node_count - 1))
        gpu_left, cpu_left = free[spot]
        if cpu_left < 1:
            continue
        gpu = draw(st.integers(0, gpu_left))
        cpu = draw(st.integers(1, cpu_left))
        free[spot] = [gpu_left - gpu, cpu_left - cpu]
        pods.append(
            pod(
                f"run-{index}",
                draw(st.sampled_from(NAMESPACES)),
                gpu=gpu,
                cpu=str(cpu),
                node=f"n{spot}",
                preemptible=draw(st.booleans()),
                priority=draw(st.sampled_from([0, 5])),
            )
        )
    quotas = []
    for name in NAMESPACES:
        if draw(st.booleans()):  # else the namespace's pods fall in the unlimited default
            limit = draw(st.sampled_from([4, 8, 16, 32, 64]))
            quotas.append(
                quota(name, min={GPU: str(limit), "cpu": "64"}, max={GPU: str(limit), "cpu": "64"})
            )
    # Pending jobs (gangs), none of whose pods is bound.
    needed: dict[str, int] = {}
    groups: list[PodGroupInfo] = []
    for index in range(draw(st.integers(1, 3))):
        namespace = draw(st.sampled_from(NAMESPACES))
        group = f"job{index}"
        size = draw(st.integers(1, 4))
        declared = draw(st.sampled_from(["none", "annotation", "podgroup"]))
        min_available = size if declared == "none" else draw(st.integers(1, size))
        needed[f"{namespace}/{group}"] = min_available
        if declared == "podgroup":
            groups.append(PodGroupInfo(namespace, group, min_member=min_available))
        priority = draw(st.sampled_from([0, 5, 10]))
        can_preempt = draw(st.booleans())
        preemptible = draw(st.booleans())
        for member in range(size):
            annotations = (
                {keys.GANG_MIN_AVAILABLE_ANNOTATION: str(min_available)}
                if declared == "annotation"
                else {}
            )
            pods.append(
                pod(
                    f"{group}-{member}",
                    namespace,
                    gpu=draw(st.sampled_from([0, 1, 2, 4, 8])),
                    cpu=str(draw(st.integers(1, 4))),
                    group=group,
                    priority=priority,
                    can_preempt=can_preempt,
                    preemptible=preemptible,
                    created=f"2026-01-01T11:{draw(st.integers(0, 3)):02d}:00Z",
                    annotations=annotations,
                )
            )
    return nodes, pods, quotas, needed, groups


def build(
    nodes: list[Any], pods: list[Any], quotas: list[Any], groups: list[PodGroupInfo]
) -> ClusterState:
    snap = snapshot(nodes, pods, quotas)
    for group in groups:
        snap.set_pod_group(group)
    return snap


def bound_per_job(snap: ClusterState, jobs: list[str]) -> dict[str, int]:
    """How many live pods of each job are bound (in the snapshot ``run_simulation`` left:
    evicted pods are gone from it)."""
    return {
        job: sum(
            1
            for p in snap.members.job_pods(job)
            if p.node_name is not None and not p.finished and not p.terminating
        )
        for job in jobs
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_no_gang_ends_with_fewer_than_min_available_pods_bound(case: Any) -> None:
    nodes, pods, quotas, needed, groups = case
    snap = build(nodes, pods, quotas, groups)
    jobs = sorted(needed)
    assert all(count == 0 for count in bound_per_job(snap, jobs).values())  # none starts bound
    job_of = {key: p.job for key, p in snap.pods.items()}  # evicted pods leave the state
    declared = {job: snap.declarations.declared_min_available(job) for job in jobs}
    result = run_simulation(snap, NOW)
    bound = bound_per_job(snap, jobs)
    # A gang of undeclared size is all its pods that exist: one that lost pods to a
    # preemption (simulate deletes victims; nothing re-creates them) is a smaller gang
    # now, so its size at the start does not bind it.  Declared gangs are checked.
    preempted = {job_of[victim.pod] for victim in result.evictions}
    for job in jobs:
        # No job pod was bound in the input, so every bound one is a placement.
        placed = sum(1 for key in result.placements if snap.pods[key].job == job)
        assert placed == bound[job], (job, result)
        event(f"{'placed' if bound[job] else 'waits'}")
        if job in preempted:
            event("a gang was preempted")
            if declared[job] is None:
                continue
        assert bound[job] == 0 or bound[job] >= needed[job], (
            f"{job}: {bound[job]} of min-available {needed[job]} bound",
            result,
        )


# ---- hand-built: a job whose pods fit on free nodes alone is placed -------------------


def simulate(
    nodes: list[Any],
    pods: Sequence[Any],
    quotas: Sequence[Any] = (),
    groups: Sequence[PodGroupInfo] = (),
) -> tuple[ClusterState, SimulationResult]:
    snap = build(nodes, list(pods), list(quotas), list(groups))
    return snap, run_simulation(snap, NOW)


def test_a_gang_that_fits_on_free_nodes_is_placed_whole() -> None:
    # Two 8-GPU pods, n0 and n1 free (n2 is full of a running pod): one pod each.
    nodes = [node("n0"), node("n1"), node("n2")]
    pods = [
        pod("busy", "qa", gpu=8, node="n2"),
        pod("job-0", "qa", gpu=8, group="job"),
        pod("job-1", "qa", gpu=8, group="job"),
    ]
    _, result = simulate(nodes, pods)
    assert sorted(result.placements) == ["qa/job-0", "qa/job-1"]
    assert sorted(result.placements.values()) == ["n0", "n1"]
    assert result.unschedulable == {} and result.evictions == []


def test_a_quota_over_its_max_in_another_resource_does_not_hold_a_gang_half_bound() -> None:
    # Found by the property above: quota qa's max is 4 GPUs, and a pod of it already runs
    # with 5 (the max was lowered since).  A gang of two CPU-only pods is placed whole on
    # n0 and its first pod binds; the second must bind too: its job asks for no GPU, so
    # the quota being over its max in GPUs says nothing about the room held for it.
    nodes = [node("n0", gpu=0), node("n1")]
    pods = [
        pod("run-0", "qa", gpu=5, node="n1", preemptible=False),
        pod("job0-0", "qa", cpu="1", group="job0"),
        pod("job0-1", "qa", cpu="1", group="job0"),
    ]
    quotas = [
        quota(
            "qa", min={"nvidia.com/gpu": "4", "cpu": "64"}, max={"nvidia.com/gpu": "4", "cpu": "64"}
        )
    ]
    _, result = simulate(nodes, pods, quotas)
    assert result.placements == {"qa/job0-0": "n0", "qa/job0-1": "n0"}


def test_a_gang_of_mixed_shapes_that_fits_on_free_nodes_is_placed_whole() -> None:
    # 8 + 4 + 4 GPUs on two free 8-GPU nodes: the big pod takes one node, the two small
    # ones share the other.
    nodes = [node("n0"), node("n1")]
    pods = [
        pod("job-a", "qa", gpu=4, group="job"),
        pod("job-b", "qa", gpu=8, group="job"),
        pod("job-c", "qa", gpu=4, group="job"),
    ]
    _, result = simulate(nodes, pods)
    assert len(result.placements) == 3 and result.unschedulable == {}
    assert result.placements["qa/job-a"] == result.placements["qa/job-c"]
    assert result.placements["qa/job-b"] != result.placements["qa/job-a"]


def test_a_gang_within_its_quota_is_placed_beside_one_that_waits() -> None:
    # Four free 8-GPU nodes.  qa's gang (two 8-GPU pods, higher priority, so scheduled
    # first) is within its quota (16 GPUs) and fits on two nodes: placed.  qb's gang of
    # three 8-GPU pods then has two nodes left: 2 of 3 fit, so it waits whole.
    nodes = [node(f"n{i}") for i in range(4)]
    pods = [
        pod("a-0", "qa", gpu=8, group="a", priority=10),
        pod("a-1", "qa", gpu=8, group="a", priority=10),
        pod("b-0", "qb", gpu=8, group="b"),
        pod("b-1", "qb", gpu=8, group="b"),
        pod("b-2", "qb", gpu=8, group="b"),
    ]
    quotas = [quota("qa", min={GPU: "16"}, max={GPU: "16"})]
    _, result = simulate(nodes, pods, quotas)
    assert sorted(result.placements) == ["qa/a-0", "qa/a-1"]
    assert sorted(result.unschedulable) == ["qb/b-0", "qb/b-1", "qb/b-2"]
    assert "2 of 3 pods fit" in result.unschedulable["qb/b-0"]


def test_a_gang_with_min_available_below_its_size_is_placed_with_what_fits() -> None:
    # PodGroup minMember 2 of three 8-GPU pods, two free 8-GPU nodes: two are placed,
    # the third stays pending.
    nodes = [node("n0"), node("n1")]
    pods = [pod(f"job-{i}", "qa", gpu=8, group="job") for i in range(3)]
    _, result = simulate(nodes, pods, groups=[PodGroupInfo("qa", "job", min_member=2)])
    assert len(result.placements) == 2
    assert sorted(result.placements.values()) == ["n0", "n1"]
    assert len(result.unschedulable) == 1


def test_a_gang_preempted_while_placing_is_not_left_partly_bound() -> None:
    # One node with 4 cpu.  qb/v (three preemptible 1-cpu pods, PodGroup minMember 3) is
    # first in the queue: it fits whole (3 of 4 cpu), so it is reserved; v-0 and v-1
    # bind.  qa/p (3 cpu, may preempt, qa reclaims within its min) comes next: 1 cpu is
    # free, so it preempts, and a gang victim goes whole.  v-2 (created last) must not
    # then bind alone: qb/v ends with 0 pods bound (or all 3), never 1.
    nodes = [node("n1", gpu=0, cpu="4")]
    pods = [
        pod("v-0", "qb", cpu="1", group="v", preemptible=True, created="2026-01-01T10:00:00Z"),
        pod("v-1", "qb", cpu="1", group="v", preemptible=True, created="2026-01-01T10:00:00Z"),
        pod("p", "qa", cpu="3", can_preempt=True, created="2026-01-01T10:01:00Z"),
        pod("v-2", "qb", cpu="1", group="v", preemptible=True, created="2026-01-01T10:02:00Z"),
    ]
    quotas = [quota("qa", min={"cpu": "8"}, max={"cpu": "8"})]
    snap, result = simulate(nodes, pods, quotas, groups=[PodGroupInfo("qb", "v", min_member=3)])
    assert result.placements.get("qa/p") == "n1"
    assert sorted(e.pod for e in result.evictions) == ["qb/v-0", "qb/v-1"]
    assert bound_per_job(snap, ["qb/v"])["qb/v"] in (0, 3)
    # v was in flight and no other victim frees room: taken, and the reason says so.
    assert all("gang is in flight" in e.reason for e in result.evictions)


def test_a_gang_in_flight_is_spared_when_another_victim_will_do() -> None:
    # The same gang qb/v in flight (v-0, v-1 bound on n1, room held there for v-2, created
    # last), and a second node n2 that qb/r (4 cpu, started an hour before) fills.  qa/p
    # (3 cpu, within qa's min) must reclaim a node from qb.  By the victim order alone v,
    # whose work began last, goes first (as in the test above); but v is a gang in flight
    # (2 bound < its minMember 3, room reserved for the rest), and evicting r frees n2
    # for p, a plan that spares it (docs/quotas-and-preemption.md, "A gang in
    # flight").  So r alone is evicted, p goes to n2, v-2 binds on n1: v runs whole.
    nodes = [node("n1", gpu=0, cpu="4"), node("n2", gpu=0, cpu="4")]
    pods = [
        pod("r", "qb", cpu="4", node="n2", preemptible=True, created="2026-01-01T09:00:00Z"),
        pod("v-0", "qb", cpu="1", group="v", preemptible=True, created="2026-01-01T10:00:00Z"),
        pod("v-1", "qb", cpu="1", group="v", preemptible=True, created="2026-01-01T10:00:00Z"),
        pod("p", "qa", cpu="3", can_preempt=True, created="2026-01-01T10:01:00Z"),
        pod("v-2", "qb", cpu="1", group="v", preemptible=True, created="2026-01-01T10:02:00Z"),
    ]
    quotas = [quota("qa", min={"cpu": "8"}, max={"cpu": "8"})]
    snap, result = simulate(nodes, pods, quotas, groups=[PodGroupInfo("qb", "v", min_member=3)])
    assert [e.pod for e in result.evictions] == ["qb/r"]
    assert result.placements.get("qa/p") == "n2"
    assert result.placements.get("qb/v-2") == "n1"
    assert bound_per_job(snap, ["qb/v"])["qb/v"] == 3
