"""Filter and score for one pod: full mode (simulate) and extender mode."""

from __future__ import annotations

from extender.core.objects import parse_pod
from extender.core.scheduling import filter_nodes, packing_score, score_nodes
from tests.builders import node, pod, snapshot


def test_packing_score_prefers_fuller_nodes_and_the_fast_path_agrees() -> None:
    nodes = [node("empty"), node("half"), node("full")]
    pods = [
        pod("h", "x", gpu=4, node="half", preemptible=True),
        pod("f", "x", gpu=8, node="full", preemptible=True),
    ]
    snap = snapshot(nodes, pods)
    candidate = parse_pod(pod("p", "x", gpu=2, cpu="1"))
    scores = score_nodes(snap, candidate, ["empty", "half", "full", "unknown"])
    assert scores == {"empty": 2, "half": 7, "full": 10, "unknown": 0}
    for name in ("empty", "half", "full"):
        generic = packing_score(
            candidate.requests,
            snap.nodes[name].allocatable,
            snap.requested_on(name),
            (),
            ["nvidia.com/gpu"],
        )
        assert generic == scores[name]


def test_cpu_pods_are_packed_by_cpu_and_memory() -> None:
    snap = snapshot(
        [node("a", gpu=0, cpu="10"), node("b", gpu=0, cpu="10")],
        [pod("x", "x", cpu="5", node="b", preemptible=True)],
    )
    scores = score_nodes(snap, parse_pod(pod("p", "x", cpu="1")), ["a", "b"])
    assert scores["b"] > scores["a"]


def test_full_filter_reports_like_kube_scheduler() -> None:
    snap = snapshot(
        [node("n1"), node("tainted", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])],
        [pod("x", "x", gpu=8, node="n1", preemptible=True)],
    )
    result = filter_nodes(
        snap, parse_pod(pod("p", "x", gpu=1)), ["n1", "tainted", "gone"], as_extender=False
    )
    assert result.passed == []
    assert result.failed == {"n1": "Insufficient nvidia.com/gpu"}
    assert result.unresolvable == {
        "tainted": "node has untolerated taint k=v:NoSchedule",
        "gone": "node is not known",
    }
    # as an extender, resource fit and taints are kube-scheduler's business
    extender = filter_nodes(
        snap, parse_pod(pod("p", "x", gpu=1)), ["n1", "tainted", "gone"], as_extender=True
    )
    assert extender.passed == ["n1", "tainted", "gone"]
