"""The preempt verb's guard on kube-scheduler's own priority preemption."""

from __future__ import annotations

from extender.core.objects import parse_pod
from extender.core.preemption.guard import guard_scheduler_preemption
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"


def test_a_node_is_dropped_when_the_quota_would_still_refuse_the_pod() -> None:
    # q is full (8 of max 8) with two 4-GPU low-priority pods; an 8-GPU pod proposed to
    # replace one of them fits the node but not the quota.
    snap = snapshot(
        [node("n0"), node("n1")],
        [
            pod("low-0", "q", gpu=4, node="n0", preemptible=True, priority=0),
            pod("low-1", "q", gpu=4, node="n1", preemptible=True, priority=0),
        ],
        [quota("q", min={GPU: "8"}, max={GPU: "8"})],
    )
    preemptor = parse_pod(pod("hi", "q", gpu=8, priority=10, can_preempt=True, preemptible=False))
    result = guard_scheduler_preemption(snap, preemptor, {"n0": ["q/low-0"]})
    assert result.victims == {}
    assert any("would still not admit" in note for note in result.notes)
    # both victims on one node would be enough: that node is kept
    snap2 = snapshot(
        [node("n0")],
        [
            pod("low-0", "q", gpu=4, node="n0", preemptible=True, priority=0),
            pod("low-1", "q", gpu=4, node="n0", preemptible=True, priority=0),
        ],
        [quota("q", min={GPU: "8"}, max={GPU: "8"})],
    )
    result = guard_scheduler_preemption(snap2, preemptor, {"n0": ["q/low-0", "q/low-1"]})
    assert result.victims == {"n0": ["q/low-0", "q/low-1"]}
