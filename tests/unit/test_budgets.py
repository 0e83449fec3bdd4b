"""PodDisruptionBudgets in the planner and the preempt verb (issue #13, rule 7).

Expectations are derived by hand: nodes have 8 GPUs, every pod asks for 8, so one
victim frees one node; victims are ordered other quotas first, then most recently
started first.  team-a (min 16) reclaims from team-b (min 0), which borrows.
"""

from __future__ import annotations

from typing import Any

import pytest

from base import keys
from base.errors import ManifestError
from base.times import parse_time
from extender.core.budgets import BudgetUse, parse_pod_disruption_budget
from extender.core.config import parse_args
from extender.core.effects import AbandonPlan, apply
from extender.core.objects import parse_pod
from extender.core.preemption.guard import guard_scheduler_preemption
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.settling import refused_victims
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"
QUOTAS = [
    quota("team-a", min={GPU: "16"}, max={GPU: "32"}),
    quota("team-b", min={GPU: "0"}, max={GPU: "32"}),
]


def budget(
    name: str, selector: dict[str, Any] | None, allowed: int, namespace: str = "team-b"
) -> dict[str, Any]:
    spec = {} if selector is None else {"selector": selector}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"disruptionsAllowed": allowed},
    }


def borrower(name: str, node_name: str, minute: int, app: str) -> dict[str, Any]:
    started = f"2026-01-01T10:{minute:02d}:00Z"
    return pod(
        name,
        "team-b",
        gpu=8,
        node=node_name,
        preemptible=True,
        created=started,
        started=started,
        labels={"app": app},
    )


def trainer(count: int) -> list[dict[str, Any]]:
    return [
        pod(f"t-{i}", "team-a", gpu=8, group="train", can_preempt=True, preemptible=False)
        for i in range(count)
    ]


def cluster(
    pods: list[dict[str, Any]], budgets: list[dict[str, Any]], policy: str = "BestEffort"
) -> ClusterState:
    nodes = [node(f"n{i}") for i in range(sum(1 for p in pods if p["spec"].get("nodeName")))]
    snap = snapshot(nodes, pods, QUOTAS, parse_args({"pdbPolicy": policy}))
    for item in budgets:
        snap.set_budget(parse_pod_disruption_budget(item))
    return snap


def victims(decision: PreemptionPlan | Refusal) -> list[str]:
    assert isinstance(decision, PreemptionPlan), decision
    return sorted(victim.pod.key for victim in decision.victims)


def test_the_most_recent_borrower_protected_by_a_budget_is_spared_for_another() -> None:
    # b-0 (app web, 10:30) would go first, but "web" allows 0 disruptions; b-1 (10:05)
    # is protected by nothing: it goes, in either policy.
    pods = [borrower("b-0", "n0", 30, "web"), borrower("b-1", "n1", 5, "batch"), *trainer(1)]
    web = budget("web", {"matchLabels": {"app": "web"}}, 0)
    for policy in ("BestEffort", "Strict"):
        decision = plan_job_preemption(cluster(pods, [web], policy), "team-a/train", NOW)
        assert victims(decision) == ["team-b/b-1"], policy


def test_only_protected_victims_best_effort_evicts_and_says_so_strict_refuses() -> None:
    pods = [borrower("b-0", "n0", 30, "web"), *trainer(1)]
    web = budget("web", {"matchLabels": {"app": "web"}}, 0)
    best = plan_job_preemption(cluster(pods, [web]), "team-a/train", NOW)
    assert victims(best) == ["team-b/b-0"]
    assert isinstance(best, PreemptionPlan)
    assert "breaks PodDisruptionBudget team-b/web allows 0 disruptions" in best.victims[0].reason
    strict = plan_job_preemption(cluster(pods, [web], "Strict"), "team-a/train", NOW)
    assert isinstance(strict, Refusal)
    assert any("team-b/web" in reason and "Strict" in reason for reason in strict.reasons), strict


def test_victims_of_one_plan_count_together_under_one_budget() -> None:
    # The job needs both nodes; one budget covers both pods and allows 1 disruption:
    # each alone is allowed, both together are not.  Strict: refused.  BestEffort: both
    # go (no plan spares them), and the second one taken is the one said to break it.
    pods = [borrower("b-0", "n0", 30, "web"), borrower("b-1", "n1", 5, "web"), *trainer(2)]
    web = budget("web", {"matchLabels": {"app": "web"}}, 1)
    assert isinstance(
        plan_job_preemption(cluster(pods, [web], "Strict"), "team-a/train", NOW), Refusal
    )
    best = plan_job_preemption(cluster(pods, [web]), "team-a/train", NOW)
    assert victims(best) == ["team-b/b-0", "team-b/b-1"]
    assert isinstance(best, PreemptionPlan)
    broken = [v.pod.key for v in best.victims if "PodDisruptionBudget" in v.reason]
    assert len(broken) == 1


def test_a_budget_in_another_namespace_or_with_no_selector_protects_nothing() -> None:
    pods = [borrower("b-0", "n0", 30, "web"), *trainer(1)]
    elsewhere = budget("web", {"matchLabels": {"app": "web"}}, 0, namespace="team-c")
    nothing = budget("none", None, 0)
    decision = plan_job_preemption(
        cluster(pods, [elsewhere, nothing], "Strict"), "team-a/train", NOW
    )
    assert victims(decision) == ["team-b/b-0"]


def test_an_empty_selector_covers_every_pod_of_its_namespace() -> None:
    everything = parse_pod_disruption_budget(budget("all", {}, 0))
    assert everything.covers(parse_pod(borrower("b-0", "n0", 0, "web")))
    assert not everything.covers(parse_pod(pod("x", "team-c")))


@pytest.mark.parametrize(
    ("selector", "status", "field"),
    [
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, {}, "operator"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, {}, "values"),
        ({"matchLabels": "app=web"}, {}, "spec.selector.matchLabels"),
        ({}, {"disruptionsAllowed": -1}, "status.disruptionsAllowed"),
    ],
)
def test_a_bad_budget_is_an_error_naming_the_field(
    selector: dict[str, Any], status: dict[str, Any], field: str
) -> None:
    obj = budget("b", selector, 0)
    obj["status"] = status
    with pytest.raises(ManifestError) as caught:
        parse_pod_disruption_budget(obj)
    assert field in caught.value.field


def test_the_preempt_verb_counts_the_violations_of_the_victims_it_keeps() -> None:
    # kube-scheduler proposes both ops pods (no quota, no Muster label: not governed) for
    # a pod Muster does not govern either; a budget over them allows 1 disruption: of
    # the two kept, 1 is a violation.
    ops = [pod(f"x-{i}", "ops", gpu=4, node="n0", labels={"app": "db"}) for i in range(2)]
    snap = snapshot([node("n0")], ops)
    snap.set_budget(
        parse_pod_disruption_budget(budget("db", {"matchLabels": {"app": "db"}}, 1, "ops"))
    )
    critical = parse_pod(pod("critical", "kube-system", gpu=8))
    uids = [snap.pods[f"ops/x-{i}"].uid for i in range(2)]
    result = guard_scheduler_preemption(snap, critical, {"n0": uids})
    assert result.victims == {"n0": uids}
    assert result.pdb_violations == {"n0": 1}
    assert BudgetUse(snap.budgets.values()).violation_count(snap.pods.values()) == 1


def test_a_victim_refused_past_the_deadline_stalls_its_plan_which_is_then_made_without_it() -> None:
    # b-0 (10:30, web: 0 disruptions allowed) was marked for team-a/train at 10:40 and
    # is still running.  Before the deadline (120 s) nothing is stalled; after it, b-0
    # is.  Abandoned (its mark taken back), the job's next plan leaves b-0 alone, though
    # it started last: b-1 goes.
    mark = '{"timestamp": "2026-01-01T10:40:00Z", "preemptor": "team-a/train"}'
    marked = borrower("b-0", "n0", 30, "web")
    marked["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    marked["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = mark
    pods = [marked, borrower("b-1", "n1", 5, "etl"), *trainer(1)]
    snap = cluster(pods, [budget("web", {"matchLabels": {"app": "web"}}, 0)])
    at = parse_time("2026-01-01T10:40:00Z", "t") or 0.0
    assert refused_victims(snap, at + 119) == {}
    stalled = refused_victims(snap, at + 121)
    assert [pod.key for pod in stalled["team-a/train"]] == ["team-b/b-0"]
    apply(snap, AbandonPlan("team-a/train", frozenset({"team-b/b-0"})))
    snap.upsert_pod(parse_pod(borrower("b-0", "n0", 30, "web")))  # the mark taken back
    decision = plan_job_preemption(snap, "team-a/train", at + 122)
    assert victims(decision) == ["team-b/b-1"]
