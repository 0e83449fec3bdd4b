"""Lost work is the victim's cost (issue 34, item 1).

The rule (docs/quotas-and-preemption.md, "Lost work"): a victim loses the work it did
since it last saved it: since its ``muster.dev/last-checkpoint``, or its last save at its
``muster.dev/checkpoint-interval-seconds`` from its start, else since it started; in
accelerator-seconds (scarce resources times seconds), pod-seconds for pods asking for
none.  Among victims of one priority the walk takes the one whose work began latest; among
plans of equal rank (guarantees, priority, victim pods) the one losing least wins.  Each
figure below is that arithmetic, by hand.
"""

from __future__ import annotations

from typing import Any

from base import keys
from extender.core.objects import parse_pod
from extender.core.preemption.cost import LostWork, lost_work
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
RACK = "cloud.provider.com/topology-rack"


def running(name: str, *, gpu: int = 8, started: str, **notes: str) -> dict[str, Any]:
    return pod(
        name, "team-b", gpu=gpu, node="n1", preemptible=True, started=started, annotations=notes
    )


def test_lost_work_counts_from_the_start_or_the_last_save() -> None:
    def lost(manifest: dict[str, Any], now: float = NOON) -> LostWork:
        return lost_work([parse_pod(manifest)], now)

    # 8 GPUs since 10:00, at noon: 8 x 7,200 s.
    assert lost(running("p", started="2026-01-01T10:00:00Z")) == LostWork(57_600, 0)
    # Saved at 11:30: 8 x 1,800 s.
    saved = {keys.LAST_CHECKPOINT_ANNOTATION: "2026-01-01T11:30:00Z"}
    assert lost(running("p", started="2026-01-01T10:00:00Z", **saved)) == LostWork(14_400, 0)
    # Saving every hour from 10:00, at 12:30: the last save was at 12:00, 8 x 1,800 s.
    hourly = {keys.CHECKPOINT_INTERVAL_ANNOTATION: "3600"}
    half_past = NOON + 1800
    assert lost(running("p", started="2026-01-01T10:00:00Z", **hourly), half_past) == LostWork(
        14_400, 0
    )
    # The later of the two wins: saved at 12:20, hourly saves at 12:00 → since 12:20.
    both = {**hourly, keys.LAST_CHECKPOINT_ANNOTATION: "2026-01-01T12:20:00Z"}
    assert lost(running("p", started="2026-01-01T10:00:00Z", **both), half_past) == LostWork(
        4_800, 0
    )
    # A checkpoint before the start counts from the start; one in the future, nothing lost.
    early = {keys.LAST_CHECKPOINT_ANNOTATION: "2026-01-01T09:00:00Z"}
    assert lost(running("p", started="2026-01-01T10:00:00Z", **early)) == LostWork(57_600, 0)
    future = {keys.LAST_CHECKPOINT_ANNOTATION: "2026-01-01T13:00:00Z"}
    assert lost(running("p", started="2026-01-01T10:00:00Z", **future)) == LostWork(0, 0)
    # Nonsense is no checkpoint (it can only make the job's own pod look dearer).
    for bad in (
        {keys.LAST_CHECKPOINT_ANNOTATION: "yesterday"},
        {keys.CHECKPOINT_INTERVAL_ANNOTATION: "-5"},
    ):
        assert lost(running("p", started="2026-01-01T10:00:00Z", **bad)) == LostWork(57_600, 0)
    # A pod asking for no GPU: pod-seconds.
    cpu_only = pod("c", "team-b", cpu="2", node="n1", started="2026-01-01T11:00:00Z")
    assert lost(cpu_only) == LostWork(0, 3_600)


def test_of_two_borrowers_of_one_priority_the_one_that_just_saved_goes() -> None:
    # b-old started at 9:00 but saved at 11:50; b-new started at 11:00 and never saved.
    # By start alone b-new (the newer) would go; by lost work at noon b-old loses 8 x 600 s
    # and b-new 8 x 3,600 s: b-old goes, and its reason says since when its work is lost.
    saved = {keys.LAST_CHECKPOINT_ANNOTATION: "2026-01-01T11:50:00Z"}
    state = snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [
            pod(
                "b-old",
                "team-b",
                gpu=8,
                node="n1",
                preemptible=True,
                started="2026-01-01T09:00:00Z",
                annotations=saved,
            ),
            pod(
                "b-new",
                "team-b",
                gpu=8,
                node="n2",
                preemptible=True,
                started="2026-01-01T11:00:00Z",
            ),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [quota("team-a", min={GPU: "8"}, max={GPU: "16"}), quota("team-b", max={GPU: "16"})],
    )
    plan = plan_job_preemption(state, "team-a/a-train", NOON)
    assert isinstance(plan, PreemptionPlan)
    assert [v.pod.key for v in plan.victims] == ["team-b/b-old"]
    assert plan.victims[0].reason.endswith("; it loses its work since 2026-01-01T11:50:00Z")


def test_of_two_racks_that_rank_alike_the_one_losing_less_work_is_chosen() -> None:
    # A job that must stay in one rack needs one 8-GPU node.  Each rack holds one node,
    # full with one borrower of priority 0 started at 10:00: both plans evict one pod of
    # priority 0, breaking nothing.  r2's borrower saved at 11:55, r1's never: r1's plan
    # loses 8 x 7,200 s, r2's 8 x 300 s, so r2 is chosen (by name alone, r1 would be).
    saved = {keys.LAST_CHECKPOINT_ANNOTATION: "2026-01-01T11:55:00Z"}
    state = snapshot(
        [node("n1", gpu=8, labels={RACK: "r1"}), node("n2", gpu=8, labels={RACK: "r2"})],
        [
            pod(
                "b-1", "team-b", gpu=8, node="n1", preemptible=True, started="2026-01-01T10:00:00Z"
            ),
            pod(
                "b-2",
                "team-b",
                gpu=8,
                node="n2",
                preemptible=True,
                started="2026-01-01T10:00:00Z",
                annotations=saved,
            ),
            pod(
                "a-train",
                "team-a",
                gpu=8,
                can_preempt=True,
                annotations={keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK},
            ),
        ],
        [quota("team-a", min={GPU: "8"}, max={GPU: "16"}), quota("team-b", max={GPU: "16"})],
    )
    plan = plan_job_preemption(state, "team-a/a-train", NOON)
    assert isinstance(plan, PreemptionPlan)
    assert [v.pod.key for v in plan.victims] == ["team-b/b-2"]
    assert dict(plan.placements) == {"team-a/a-train": "n2"}
