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

The same for a second job planned while the first job's plan is in flight (issue 23,
item 4): the oracle's answer with the first plan's victims still there (leaving) is its
answer once they are deleted, and the planner's.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from base import keys
from base.resources import add_into, fits
from extender.core.objects import PodInfo, parse_pod
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import LEAVING, hold_plan, leaving, node, pod, quota, snapshot

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


def _free_after(
    snap: ClusterState, evicted: AbstractSet[str], gone: AbstractSet[str] = frozenset()
) -> dict[str, dict[str, int]]:
    """Each node's free room once the pods of ``evicted`` (job names) are gone, and the
    pods ``gone`` (keys: earlier plans' victims, still there but leaving)."""
    free = {name: dict(snap.free_on(name)) for name in snap.nodes}
    for victim in snap.pods.values():
        if victim.node_name is not None and (victim.job in evicted or victim.key in gone):
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


def _groups(snap: ClusterState, gone: AbstractSet[str] = frozenset()) -> list[str]:
    """The victim groups: the jobs of the running pods, but those ``gone``."""
    return sorted(
        {p.job for p in snap.pods.values() if p.node_name is not None}
        - {p.job for p in snap.pods.values() if p.key in gone}
    )


def _oracle(
    snap: ClusterState, requests: Sequence[Mapping[str, int]], gone: AbstractSet[str] = frozenset()
) -> tuple[bool, bool]:
    """Does the job fit with nothing evicted; does it once some set of victim groups is
    evicted (every subset tried)?  The pods ``gone`` count as gone, and are no victims."""
    fits_already = _placeable(requests, _free_after(snap, set(), gone))
    groups = _groups(snap, gone)
    found = any(
        _placeable(requests, _free_after(snap, set(subset), gone))
        for size in range(len(groups) + 1)
        for subset in itertools.combinations(groups, size)
    )
    return fits_already, found


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_planner_finds_a_plan_whenever_one_exists_and_spares_every_group_it_can(
    case: tuple[list[Any], list[Any]],
) -> None:
    nodes, pods = case
    snap = snapshot(nodes, pods, QUOTAS)
    job = [p for p in snap.members.job_pods(JOB) if p.node_name is None]
    requests = [p.requests for p in job]
    fits_already, oracle = _oracle(snap, requests)
    decision = plan_job_preemption(snap, JOB, NOW)
    planned = isinstance(decision, PreemptionPlan)
    event("fits already" if fits_already else f"oracle {oracle}, planner {planned}")
    if fits_already:
        return  # nothing to plan: the planner refuses ("fits without evicting")
    assert planned == oracle, (oracle, decision)
    if not isinstance(decision, PreemptionPlan):
        return
    _assert_valid_and_minimal(snap, job, decision)


def test_a_victim_freeing_what_another_resource_limits_today_is_not_passed_over() -> None:
    """Found by the oracle above.  One node (8 GPUs, 32 CPUs) runs v0 (8 CPUs) and v1 (8
    GPUs, 4 CPUs): 0 GPUs and 20 CPUs are free.  The gang needs two pods of 2 GPUs and
    16 CPUs: 4 GPUs and 32 CPUs, the whole node's CPUs, so both victims must go (v1 alone
    frees 24 CPUs: one pod; v0 alone frees no GPU: none).  Today the node holds no copy
    for want of GPUs, and its 20 free CPUs are room for one copy: judged against "one
    copy more than it holds", v0 (CPUs only) looked useless and was passed over."""
    nodes = [node("n0", gpu=8, cpu="32")]
    started = "2026-01-01T10:00:00Z"
    victims = [
        pod(
            "v0-0", "team-b", cpu="8", node="n0", preemptible=True, created=started, started=started
        ),
        pod(
            "v1-0",
            "team-b",
            gpu=8,
            cpu="4",
            node="n0",
            preemptible=True,
            created=started,
            started=started,
        ),
    ]
    gang = [
        pod(f"t-{i}", "team-a", gpu=2, cpu="16", group="train", preemptible=False, can_preempt=True)
        for i in range(2)
    ]
    snap = snapshot(nodes, victims + gang, QUOTAS)
    decision = plan_job_preemption(snap, JOB, NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert sorted(v.pod.name for v in decision.victims) == ["v0-0", "v1-0"]


def _assert_valid_and_minimal(
    snap: ClusterState, job: Sequence[PodInfo], decision: PreemptionPlan
) -> None:
    """Valid: with its victims gone, the placement the plan names fits.  Minimal: no
    victim group can be spared (with it back, no placement of the job fits)."""
    evicted = {v.job for v in decision.victims}
    free = _free_after(snap, evicted)
    used: dict[str, dict[str, int]] = {}
    for p in job:
        add_into(used.setdefault(decision.placements[p.key], {}), p.requests)
    assert all(fits(room, free[name]) for name, room in used.items())
    requests = [p.requests for p in job]
    for group in evicted:
        assert not _placeable(requests, _free_after(snap, evicted - {group})), group


# ---- a second job, planned while the first one's victims leave ------------------------
#
# docs/design.md, Job-level preemption, step 2: pods "already marked, or leaving, for another
# job are gone for every rule here: they are never candidates, and their quota is judged
# as it will be without them".  So once the first job's plan is committed (its room
# reserved: step 6), the oracle for a second job counts the first plan's victims as gone,
# and the first job's reserved room as taken; it must answer what it answers once those
# victims are deleted, and the planner with it.  The quotas still never limit either job:
# team-a's min (64 GPUs, 256 CPUs) holds both (4 and 3 pods at most, of at most 8 GPUs
# and 16 CPUs each), and team-b guarantees nothing.

SECOND = "team-a/second"


@st.composite
def two_job_cases(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    nodes, pods = draw(cases())
    for index in range(draw(st.integers(1, 3))):
        gpu, cpu = draw(st.sampled_from(SHAPES))
        pods.append(
            pod(
                f"s-{index}",
                "team-a",
                gpu=gpu,
                cpu=str(cpu),
                group="second",
                preemptible=False,
                can_preempt=True,
                created="2026-01-01T11:00:00Z",
            )
        )
    return nodes, pods


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_job_cases(), st.data())
def test_a_second_job_planned_while_the_first_ones_victims_leave_is_planned_as_after(
    case: tuple[list[Any], list[Any]], data: st.DataObject
) -> None:
    nodes, pods = case
    manifests = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
    in_flight = snapshot(nodes, pods, QUOTAS)
    gone = snapshot(nodes, pods, QUOTAS)
    first = plan_job_preemption(in_flight, JOB, NOW)
    assume(isinstance(first, PreemptionPlan))  # nothing in flight otherwise: the test above
    assert isinstance(first, PreemptionPlan)
    # Committed (step 6): room reserved for the first job on both; its victims leaving (as
    # drawn) on one, deleted on the other.
    for state in (in_flight, gone):
        hold_plan(state, first, NOW)
    for victim in first.victims:
        how = data.draw(st.sampled_from(LEAVING), label=f"{victim.pod.key} leaving")
        if how != "promised":
            in_flight.upsert_pod(parse_pod(leaving(manifests[victim.pod.key], JOB, how)))
        gone.remove_pod(victim.pod.key)
    first_victims = {v.pod.key for v in first.victims}

    # The room the in-flight cluster offers, the first plan's victims counted as gone, is
    # the room once they are gone, node by node; and so is every answer the oracle gives.
    assert _free_after(in_flight, set(), first_victims) == _free_after(gone, set())
    requests = [p.requests for p in in_flight.members.job_pods(SECOND)]
    fits_already, oracle = _oracle(in_flight, requests, first_victims)
    assert (fits_already, oracle) == _oracle(gone, requests)

    decision = plan_job_preemption(in_flight, SECOND, NOW)
    assert decision == plan_job_preemption(gone, SECOND, NOW), decision
    planned = isinstance(decision, PreemptionPlan)
    event("fits already" if fits_already else f"oracle {oracle}, planner {planned}")
    if fits_already:
        return  # nothing to plan: the planner refuses ("fits without evicting")
    assert planned == oracle, (oracle, decision)
    if not isinstance(decision, PreemptionPlan):
        return
    # Never one of the first plan's victims again; valid and minimal where they are gone.
    assert first_victims.isdisjoint(v.pod.key for v in decision.victims)
    _assert_valid_and_minimal(gone, gone.members.job_pods(SECOND), decision)


# ---- topology: every domain, every victim subset (issue 27) - -------------------------
#
# The same cases, the nodes in two racks, the job's pods required to share one rack
# (README "Topology-aware gangs").  A plan exists exactly when, for some rack, some set of
# victim groups whose pods all run in that rack, once evicted, leaves room for every pod
# of the job on that rack's nodes; victims outside the chosen rack are never taken.

RACK = "cloud.provider.com/topology-rack"


@st.composite
def rack_cases(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    nodes, pods = draw(cases())
    for item in nodes:
        item["metadata"]["labels"][RACK] = draw(st.sampled_from(["r1", "r2"]))
    for item in pods:
        if item["metadata"]["name"].startswith("t-"):
            item["metadata"]["annotations"][keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION] = RACK
    return nodes, pods


def _rack_oracle(
    snap: ClusterState, requests: Sequence[Mapping[str, int]]
) -> tuple[bool, dict[str, bool]]:
    """Does the job fit in some rack with nothing evicted; and per rack, does it once some
    set of that rack's victim groups is evicted (every subset tried)?"""
    racks: dict[str, set[str]] = {}
    for name, item in snap.nodes.items():
        racks.setdefault(item.labels[RACK], set()).add(name)
    fits_already = False
    found: dict[str, bool] = {}
    for rack, names in sorted(racks.items()):
        inside = [
            group
            for group in _groups(snap)
            if all(
                p.node_name in names
                for p in snap.members.job_pods(group)
                if p.node_name is not None
            )
        ]

        def placeable(evicted: AbstractSet[str], names: set[str] = names) -> bool:
            free = _free_after(snap, evicted)
            return _placeable(requests, {n: room for n, room in free.items() if n in names})

        fits_already = fits_already or placeable(set())
        found[rack] = any(
            placeable(set(subset))
            for size in range(len(inside) + 1)
            for subset in itertools.combinations(inside, size)
        )
    return fits_already, found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rack_cases())
def test_a_rack_bound_job_is_planned_in_one_rack_whenever_one_can_hold_it(
    case: tuple[list[Any], list[Any]],
) -> None:
    nodes, pods = case
    snap = snapshot(nodes, pods, QUOTAS)
    job = [p for p in snap.members.job_pods(JOB) if p.node_name is None]
    requests = [p.requests for p in job]
    fits_already, found = _rack_oracle(snap, requests)
    decision = plan_job_preemption(snap, JOB, NOW)
    planned = isinstance(decision, PreemptionPlan)
    event("fits already" if fits_already else f"oracle {any(found.values())}, planner {planned}")
    if fits_already:
        return
    assert planned == any(found.values()), (found, decision)
    if not isinstance(decision, PreemptionPlan):
        return
    racks = {snap.nodes[name].labels[RACK] for name in decision.placements.values()}
    assert len(racks) == 1, decision.placements
    (rack,) = racks
    assert found[rack], (rack, found)
    assert all(snap.nodes[v.pod.node_name or ""].labels[RACK] == rack for v in decision.victims)
    # Minimal inside its rack: with any victim group back, the job fits there no more.
    evicted = {v.job for v in decision.victims}
    inside = {name for name, item in snap.nodes.items() if item.labels[RACK] == rack}
    for group in evicted:
        free = _free_after(snap, evicted - {group})
        assert not _placeable(requests, {n: r for n, r in free.items() if n in inside}), group


# ---- slices: every victim subset, every placement in whole slices (issue 27) ----------
#
# The same cases, the nodes in two racks, the job one shape of 2 or 4 pods (a Kueue podset:
# one pod template) in slices of 2 per rack, with no level for the whole gang (README
# "Topology-aware gangs").  A placement is valid when it fits and every rack holds a
# multiple of 2 of the job's pods; a plan exists exactly when some set of victim groups,
# in any rack, once evicted, leaves room for such a placement.

SLICE = 2


@st.composite
def slice_cases(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    nodes, pods = draw(cases())
    for item in nodes:
        item["metadata"]["labels"][RACK] = draw(st.sampled_from(["r1", "r2"]))
    pods = [item for item in pods if not item["metadata"]["name"].startswith("t-")]
    gpu, cpu = draw(st.sampled_from(SHAPES))
    annotations = {
        keys.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: RACK,
        keys.KUEUE_SLICE_SIZE_ANNOTATION: str(SLICE),
    }
    for index in range(draw(st.sampled_from([2, 4]))):
        pods.append(
            pod(
                f"t-{index}",
                "team-a",
                gpu=gpu,
                cpu=str(cpu),
                group="train",
                preemptible=False,
                can_preempt=True,
                annotations=annotations,
            )
        )
    return nodes, pods


def _sliceable(
    snap: ClusterState, requests: Sequence[Mapping[str, int]], free: Mapping[str, Mapping[str, int]]
) -> bool:
    """Is there any placement of all these pods at once (every pod to every node) that
    fits and puts a multiple of ``SLICE`` of them in every rack?"""
    nodes = sorted(free)
    for choice in itertools.product(nodes, repeat=len(requests)):
        per_rack: dict[str, int] = {}
        for name in choice:
            rack = snap.nodes[name].labels[RACK]
            per_rack[rack] = per_rack.get(rack, 0) + 1
        if any(count % SLICE for count in per_rack.values()):
            continue
        used: dict[str, dict[str, int]] = {name: {} for name in nodes}
        for request, name in zip(requests, choice, strict=True):
            add_into(used[name], request)
        if all(fits(used[name], free[name]) for name in nodes):
            return True
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slice_cases())
def test_a_sliced_job_is_planned_in_whole_slices_whenever_it_can_be(
    case: tuple[list[Any], list[Any]],
) -> None:
    nodes, pods = case
    snap = snapshot(nodes, pods, QUOTAS)
    job = [p for p in snap.members.job_pods(JOB) if p.node_name is None]
    requests = [p.requests for p in job]
    fits_already = _sliceable(snap, requests, _free_after(snap, set()))
    groups = _groups(snap)
    oracle = any(
        _sliceable(snap, requests, _free_after(snap, set(subset)))
        for size in range(len(groups) + 1)
        for subset in itertools.combinations(groups, size)
    )
    decision = plan_job_preemption(snap, JOB, NOW)
    planned = isinstance(decision, PreemptionPlan)
    event("fits already" if fits_already else f"oracle {oracle}, planner {planned}")
    if fits_already:
        return
    assert planned == oracle, (oracle, decision)
    if not isinstance(decision, PreemptionPlan):
        return
    # Valid: its placement fits once its victims are gone, in whole slices.
    evicted = {v.job for v in decision.victims}
    free = _free_after(snap, evicted)
    used: dict[str, dict[str, int]] = {}
    per_rack: dict[str, int] = {}
    for p in job:
        name = decision.placements[p.key]
        add_into(used.setdefault(name, {}), p.requests)
        rack = snap.nodes[name].labels[RACK]
        per_rack[rack] = per_rack.get(rack, 0) + 1
    assert all(fits(room, free[name]) for name, room in used.items())
    assert all(count % SLICE == 0 for count in per_rack.values()), per_rack
    # Minimal: with any victim group back, no placement in whole slices fits.
    for group in evicted:
        assert not _sliceable(snap, requests, _free_after(snap, evicted - {group})), group
