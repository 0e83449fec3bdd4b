"""A gang in flight is another quota's victim only when no plan spares it (issue 34).

The rule (docs/quotas-and-preemption.md, "A gang in flight"): a gang holding room for
pods not bound yet, fewer than its min-available bound, is taken by another quota's
plan only when the search finds no plan without it.  Property: on generated clusters
with such a gang, whenever the plan takes it, the same planner told to spare it (its
pods refused as victims, the planner's own way of keeping a victim out of a plan) finds
no plan; and whenever it finds a plan that spares it, so does the planner.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from base import keys
from extender.core.budgets import parse_pod_disruption_budget
from extender.core.config import parse_args
from extender.core.effects import HoldRoom, apply
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.preemption.protection import gangs_in_flight
from extender.core.state import ClusterState, Reservation
from tests.builders import node, pod, quota, snapshot

NOW = 1_767_268_800.0  # 2026-01-01T12:00:00Z
GANG = "qb/g"
PREEMPTOR = "qa/p"


def _at(minute: int) -> str:
    return f"2026-01-01T11:{minute:02d}:00Z"


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Any], list[Any], int, list[str]]:
    """Nodes of 8 GPUs; gang qb/g of ``size`` 8-GPU pods, ``bound`` of them running on
    the first nodes (started last of all), the rest pending with room reserved on the
    next nodes; qb's other pods on the nodes left; qa's job p, within qa's min.  Returns
    the nodes, the pods, the gang's size and its pending pods' reserved nodes."""
    size = draw(st.integers(2, 3))
    bound = draw(st.integers(1, size - 1))
    others = draw(st.integers(0, 3))
    count = size + others
    nodes = [node(f"n{i}", gpu=8, cpu="32") for i in range(count)]
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: str(size)}
    pods = []
    reserved = []
    for i in range(size):
        placed = {"node": f"n{i}", "started": _at(50)} if i < bound else {}
        pods.append(
            pod(
                f"g-{i}",
                "qb",
                gpu=8,
                cpu="1",
                group="g",
                preemptible=True,
                created=_at(49),
                annotations=annotations,
                **placed,
            )
        )
        if i >= bound:
            reserved.append(f"n{i}")
    for i in range(others):
        gpus = draw(st.sampled_from([2, 4, 8]))
        for j in range(8 // gpus if draw(st.booleans()) else 1):
            pods.append(
                pod(
                    f"o-{i}-{j}",
                    "qb",
                    gpu=gpus,
                    cpu="1",
                    node=f"n{size + i}",
                    preemptible=draw(st.booleans()),
                    priority=draw(st.sampled_from([0, 5])),
                    created=_at(draw(st.integers(0, 55))),
                )
            )
    for i in range(draw(st.integers(1, 2))):
        pods.append(
            pod(
                f"p-{i}",
                "qa",
                gpu=draw(st.sampled_from([4, 8])),
                cpu="1",
                group="p",
                can_preempt=True,
                priority=draw(st.sampled_from([0, 5])),
                created=_at(58),
            )
        )
    return nodes, pods, size, reserved


def _state(nodes: list[Any], pods: list[Any], reserved: list[str], size: int) -> ClusterState:
    quotas = [
        quota("qa", min={"nvidia.com/gpu": "64"}, max={"nvidia.com/gpu": "64"}),
        quota("qb", min={"nvidia.com/gpu": "0"}, max={"nvidia.com/gpu": "64"}),
    ]
    state = snapshot(nodes, pods, quotas)
    placements = {f"qb/g-{size - len(reserved) + i}": n for i, n in enumerate(reserved)}
    apply(state, HoldRoom(Reservation(GANG, "qb", placements, (), NOW - 5, NOW + 300)))
    return state


def _takes_gang(decision: object) -> bool:
    return isinstance(decision, PreemptionPlan) and any(
        victim.job == GANG for victim in decision.victims
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_a_gang_in_flight_is_taken_only_when_no_plan_spares_it(
    case: tuple[list[Any], list[Any], int, list[str]],
) -> None:
    nodes, pods, size, reserved = case
    state = _state(nodes, pods, reserved, size)
    assert GANG in gangs_in_flight(state)  # the premise: g is in flight
    decision = plan_job_preemption(state, PREEMPTOR, NOW)

    spared = _state(nodes, pods, reserved, size)
    gang_pods = {p.key for p in spared.members.job_pods(GANG) if p.node_name is not None}
    spared.book.refused_victims[PREEMPTOR] = set(gang_pods)
    without = plan_job_preemption(spared, PREEMPTOR, NOW)

    if _takes_gang(decision):
        event("the plan takes the gang in flight")
        assert not isinstance(without, PreemptionPlan), "a plan sparing the gang exists"
        assert all("gang is in flight" in v.reason for v in decision.victims if v.job == GANG)
    elif isinstance(without, PreemptionPlan):
        event("a plan spares the gang")
        assert isinstance(decision, PreemptionPlan)
        assert sorted(v.pod.key for v in decision.victims) == sorted(
            v.pod.key for v in without.victims
        )
    else:
        event("no plan")


def test_a_plan_breaking_a_budget_is_preferred_to_taking_a_gang_in_flight() -> None:
    # Under pdbPolicy BestEffort.  n0 holds qb's gang g in flight (two 4-GPU pods bound,
    # min-available 3, room held on n1 for the third); n2 holds qb's b-old (8 GPUs),
    # whose PodDisruptionBudget allows no disruption.  qa's p (8 GPUs, within qa's min)
    # needs a node.  Spared first: g (in flight) and b-old (its budget), so nothing; then
    # budgets allowed, g still spared: b-old goes, breaking its budget.  g is taken only
    # when no plan spares it even so (docs/quotas-and-preemption.md, "A gang in flight").
    nodes = [node(f"n{i}", gpu=8, cpu="32") for i in range(3)]
    gang = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "3"}
    pods = [
        pod(
            f"g-{i}",
            "qb",
            gpu=4,
            cpu="1",
            group="g",
            preemptible=True,
            created=_at(50),
            annotations=gang,
            **({"node": "n0", "started": _at(50)} if i < 2 else {}),
        )
        for i in range(3)
    ]
    pods.append(
        pod(
            "b-old",
            "qb",
            gpu=8,
            cpu="1",
            node="n2",
            preemptible=True,
            created=_at(0),
            labels={"app": "old"},
        )
    )
    pods.append(pod("p-0", "qa", gpu=8, cpu="1", group="p", can_preempt=True, created=_at(58)))
    quotas = [
        quota("qa", min={"nvidia.com/gpu": "64"}, max={"nvidia.com/gpu": "64"}),
        quota("qb", min={"nvidia.com/gpu": "0"}, max={"nvidia.com/gpu": "64"}),
    ]
    state = snapshot(nodes, pods, quotas, parse_args({"pdbPolicy": "BestEffort"}))
    state.set_budget(
        parse_pod_disruption_budget(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "old", "namespace": "qb"},
                "spec": {"selector": {"matchLabels": {"app": "old"}}},
                "status": {"disruptionsAllowed": 0},
            }
        )
    )
    apply(state, HoldRoom(Reservation(GANG, "qb", {"qb/g-2": "n1"}, (), NOW - 5, NOW + 300)))
    assert GANG in gangs_in_flight(state)
    decision = plan_job_preemption(state, PREEMPTOR, NOW)
    assert isinstance(decision, PreemptionPlan)
    assert [v.pod.key for v in decision.victims] == ["qb/b-old"]
    assert "breaks" in decision.victims[0].reason
