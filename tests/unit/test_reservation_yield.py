"""Room held for a lower-priority job, not used yet, yields to a higher-priority job of its
quota (issue 35, item 2).  Expected results are derived by hand in each test's comment.

The cluster: n1, n2 of 8 GPUs, both borrowed by team-b (min 0) with b-0 (n1, started
first) and b-1 (n2).  team-a has min = max = 8 GPUs.  a-lo (priority 5) plans first: it
is within team-a's min, reclaims, and takes the newer borrower, b-1 (the walk's order:
least work lost first); its room on n2 is held.  Then a-hi (priority 50, 8 GPUs) arrives.
"""

from __future__ import annotations

from typing import Any

from base import keys
from extender.core.effects import AssumeBound, HoldRoom, ReleaseRoom, apply
from extender.core.objects import parse_pod
from extender.core.placement.demand import job_demand
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.preemption.yielding import yieldable_reservations
from extender.core.state import ClusterState
from tests.builders import hold_plan, node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
QUOTAS = [
    quota("team-a", min={GPU: "8"}, max={GPU: "8"}),
    quota("team-b", min={GPU: "0"}, max={GPU: "16"}),
]


def borrowers() -> list[dict[str, Any]]:
    return [
        pod("b-0", "team-b", gpu=8, node="n1", preemptible=True, started="2026-01-01T09:00:00Z"),
        pod("b-1", "team-b", gpu=8, node="n2", preemptible=True, started="2026-01-01T10:00:00Z"),
    ]


def with_a_lo_planned(*lo_pods: dict[str, Any]) -> tuple[ClusterState, PreemptionPlan]:
    state = snapshot([node("n1", gpu=8), node("n2", gpu=8)], [*borrowers(), *lo_pods], QUOTAS)
    plan = plan_job_preemption(state, "team-a/a-lo", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    hold_plan(state, plan, NOON)
    return state, plan


def a_lo(priority: int = 5) -> dict[str, Any]:
    return pod("a-lo", "team-a", gpu=8, can_preempt=True, priority=priority)


def a_hi(priority: int = 50) -> dict[str, Any]:
    return pod("a-hi", "team-a", gpu=8, can_preempt=True, priority=priority)


def test_a_higher_priority_job_takes_the_room_held_for_a_lower_one() -> None:
    state, lo_plan = with_a_lo_planned(a_lo())
    # a-lo took b-1, the newer borrower; its room on n2 is held.
    assert [v.pod.key for v in lo_plan.victims] == ["team-b/b-1"]
    assert lo_plan.placements == {"team-a/a-lo": "n2"}
    state.upsert_pod(parse_pod(a_hi()))
    plan = plan_job_preemption(state, "team-a/a-hi", NOON + 1)
    # Without the yield a-hi cannot run: team-a would use 8 (a-lo's room) + 8 > max 8.
    # With a-lo's room released, team-a uses 8 <= 8 and n2 is free once b-1 (leaving) is
    # gone: a-hi takes n2 evicting no one more, a-lo's reservation yields, and b-1 is
    # a-hi's victim to wait for now.
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victims == ()
    assert plan.placements == {"team-a/a-hi": "n2"}
    assert [held.job for held in plan.yielded] == ["team-a/a-lo"]
    reservation = plan.reservation(NOON + 1, 60)
    assert reservation.victims == ("team-b/b-1",)
    assert reservation.expires >= lo_plan.reservation(NOON, 60).expires
    # Committed as the front doors do: a-lo's room goes, a-hi's is held.  a-lo is then
    # pending with no room: it fits nowhere (b-0 runs on n1, n2 is a-hi's), and team-a is
    # at its max with a-hi: no plan.
    apply(state, ReleaseRoom("team-a/a-lo"))
    apply(state, HoldRoom(reservation))
    again = plan_job_preemption(state, "team-a/a-lo", NOON + 2)
    assert isinstance(again, Refusal)


def test_equal_priority_does_not_take_held_room() -> None:
    # a-hi at a-lo's priority: arrival order stands; team-a would exceed its max.
    state, _ = with_a_lo_planned(a_lo())
    state.upsert_pod(parse_pod(a_hi(priority=5)))
    assert isinstance(plan_job_preemption(state, "team-a/a-hi", NOON + 1), Refusal)


def test_a_job_with_a_pod_bound_does_not_yield() -> None:
    # a-lo is a gang of two 4-GPU pods; its plan holds n2 for both.  Once one binds, the
    # job runs there: its room no longer yields.
    gang = [
        pod(f"a-lo-{i}", "team-a", gpu=4, group="a-lo", can_preempt=True, priority=5)
        for i in range(2)
    ]
    state = snapshot([node("n1", gpu=8), node("n2", gpu=8)], [*borrowers(), *gang], QUOTAS)
    plan = plan_job_preemption(state, "team-a/a-lo", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    hold_plan(state, plan, NOON)
    state.upsert_pod(parse_pod(a_hi()))
    demand = job_demand(state, "team-a/a-hi")
    assert [held.job for held in yieldable_reservations(state, demand)] == ["team-a/a-lo"]
    state.remove_pod("team-b/b-1")
    apply(state, AssumeBound(state.pods["team-a/a-lo-0"], "n2"))
    assert yieldable_reservations(state, job_demand(state, "team-a/a-hi")) == []


def test_a_job_kept_to_one_rack_sees_the_room_that_yields_in_its_rack() -> None:
    # As the first test, with n1 in rack r1 and n2 in rack r2, and a-hi required to stay
    # in one rack.  a-lo holds n2 (b-1 leaving).  Yielded, n2's room is a-hi's with no
    # victim; the only other rack, r1, would cost b-0.  The rack bounds must count the
    # room that yields, or r2 looks full and a-hi evicts b-0 in r1 besides taking a-lo's
    # room (team-a's max needs it either way).  By hand: a-hi on n2, no victims.
    rack = "cloud.provider.com/topology-rack"
    nodes = [node("n1", gpu=8, labels={rack: "r1"}), node("n2", gpu=8, labels={rack: "r2"})]
    state = snapshot(nodes, [*borrowers(), a_lo()], QUOTAS)
    lo_plan = plan_job_preemption(state, "team-a/a-lo", NOON)
    assert isinstance(lo_plan, PreemptionPlan) and lo_plan.placements == {"team-a/a-lo": "n2"}
    hold_plan(state, lo_plan, NOON)
    required = {keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: rack}
    state.upsert_pod(
        parse_pod(pod("a-hi", "team-a", gpu=8, can_preempt=True, priority=50, annotations=required))
    )
    plan = plan_job_preemption(state, "team-a/a-hi", NOON + 1)
    assert isinstance(plan, PreemptionPlan), plan
    assert plan.victims == ()
    assert plan.placements == {"team-a/a-hi": "n2"}
    assert [held.job for held in plan.yielded] == ["team-a/a-lo"]
