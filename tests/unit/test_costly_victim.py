"""A plan spares a victim the walk's order took at a cost (issues 34 and 35).

The walk takes lower-priority victims first, so beside the work of the plan's highest
victim priority that it needs anyway, it may evict a lower-priority job whose eviction is
most of the plan's lost work; and among victims of one priority it takes those whose
work began latest, so it may take a job that has just saved, whose notice to its next
save the job then waits through, where another is about to save.  The planner searches
once more sparing that job, at that priority or lower, and keeps the plan that ranks
better (:class:`PlanRank`: less work lost, a victim given notice to its next save losing
only the margin after it, then fewer victims, then a shorter wait).  Expected victims
are derived by hand in each test's comment.
"""

from __future__ import annotations

from typing import Any

from base import keys
from extender.core.preemption.cost import SAVE_MARGIN_SECONDS, evicted_loss, lost_work
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"
QUOTAS = [
    quota("team-a", min={GPU: "8"}, max={GPU: "32"}),
    quota("team-c", min={GPU: "16"}, max={GPU: "32"}),
]


def cluster(old_started: str, train_minimum: int) -> list[dict[str, Any]]:
    """Four 8-GPU nodes.  team-a (min 8) borrows 24 GPUs: its gang old (2 pods of 4 GPUs
    on n1, priority 0, saving nothing, running since ``old_started``) and its elastic job
    train (3 pods of 8 GPUs on n2, n3, n4, priority 100, started 11:50, 11:51, 11:52,
    declaring a minimum of ``train_minimum`` pods).  team-c (min 16) waits with big, 2 pods
    of 8 GPUs within its min: it reclaims from team-a, each pod needing a whole node."""
    minimum = {MIN_AVAILABLE: str(train_minimum)}
    return [
        pod("old-0", "team-a", gpu=4, node="n1", group="old", preemptible=True,
            created=old_started, started=old_started),
        pod("old-1", "team-a", gpu=4, node="n1", group="old", preemptible=True,
            created=old_started, started=old_started),
        *(
            pod(f"train-{i}", "team-a", gpu=8, node=f"n{i + 2}", group="train",
                preemptible=True, priority=100, annotations=minimum,
                created=f"2026-01-01T11:5{i}:00Z", started=f"2026-01-01T11:5{i}:00Z")
            for i in range(3)
        ),
        pod("big-0", "team-c", gpu=8, group="big", can_preempt=True,
            created="2026-01-01T11:59:00Z"),
        pod("big-1", "team-c", gpu=8, group="big", can_preempt=True,
            created="2026-01-01T11:59:00Z"),
    ]  # fmt: skip


def plan(old_started: str, train_minimum: int = 1) -> PreemptionPlan:
    nodes = [node(f"n{i}", gpu=8) for i in range(1, 5)]
    state = snapshot(nodes, cluster(old_started, train_minimum), QUOTAS)
    found = plan_job_preemption(state, "team-c/big", NOON)
    assert isinstance(found, PreemptionPlan), found
    return found


def victims(found: PreemptionPlan) -> list[str]:
    return sorted(victim.pod.key for victim in found.victims)


def test_more_work_of_the_top_priority_spares_a_costly_lower_priority_job() -> None:
    # The walk: old (priority 0) frees n1, then train's newest pod above its minimum,
    # train-2 (priority 100), frees n4; old is still needed (one node free without it).
    # Plan A: old-0, old-1, train-2, three pods, losing 2 x 4 x 3,600 (old, since 11:00)
    # + 8 x 480 = 32,640 GPU-s: old's 28,800 is more than half.  Sparing old, up to
    # priority 100: train sheds train-2 and train-1, two pods losing 8 x (540 + 480) =
    # 8,160, at the same highest victim priority: less work lost (and fewer victims), it
    # ranks better.  team-a keeps 16 >= its min 8.
    found = plan("2026-01-01T11:00:00Z")
    assert victims(found) == ["team-a/train-1", "team-a/train-2"]
    assert sorted(found.placements.values()) == ["n3", "n4"]
    assert "chosen over evicting team-a/old (priority 0, " in found.victims[0].reason
    assert "less work lost" in found.victims[0].reason


def test_equal_victims_the_plan_losing_less_work_wins() -> None:
    # train declares a minimum of 2: one pod above it.  Plan A: old (n1) and train-2 (n4),
    # three pods, losing 28,800 + 8 x 480 = 32,640.  Sparing old: train-2 shed, then the
    # rest of train goes whole (its pods shed first go with it): three pods too, losing
    # 8 x (600 + 540 + 480) = 12,960 < 32,640, at the same highest priority (100): less
    # work lost decides.
    found = plan("2026-01-01T11:00:00Z", train_minimum=2)
    assert victims(found) == ["team-a/train-0", "team-a/train-1", "team-a/train-2"]
    assert "less work lost" in found.victims[0].reason


def test_a_cheap_lower_priority_job_keeps_the_walk_order() -> None:
    # old started at 11:58: it loses 2 x 4 x 120 = 960 of plan A's 960 + 3,840 = 4,800,
    # less than half: no second search, and the walk's plan stands.
    found = plan("2026-01-01T11:58:00Z")
    assert victims(found) == ["team-a/old-0", "team-a/old-1", "team-a/train-2"]
    assert all("chosen over" not in victim.reason for victim in found.victims)


def savers() -> ClusterState:
    """Two 8-GPU nodes.  team-b (min 0, notice capped at 60 s) borrows both with two
    jobs of one pod each, priority 0, saving every 30 s from their start: s-new on n1,
    started 11:59:25, and s-old on n2, started 11:58:02.  team-a (min 8) reclaims with
    a-train, 8 GPUs."""
    every = {keys.CHECKPOINT_INTERVAL_ANNOTATION: "30"}
    return snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [
            pod("s-new", "team-b", gpu=8, node="n1", preemptible=True, annotations=every,
                created="2026-01-01T11:59:25Z", started="2026-01-01T11:59:25Z"),
            pod("s-old", "team-b", gpu=8, node="n2", preemptible=True, annotations=every,
                created="2026-01-01T11:58:02Z", started="2026-01-01T11:58:02Z"),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "16"}),
            quota("team-b", max={GPU: "16"},
                  annotations={keys.MAX_PREEMPTION_NOTICE_ANNOTATION: "60"}),
        ],
    )  # fmt: skip


def test_a_victim_about_to_save_goes_before_one_that_has_just_saved() -> None:
    # At noon s-new has run 35 s: saved at 11:59:55, next at 12:00:25, notice until
    # 12:00:27 (27 s); s-old has run 118 s: saved at 11:59:32, next at 12:00:02, notice
    # 4 s.  The walk (latest start first) takes s-new: one victim, 27 s of notice, over
    # the 10 s that asks for a second search.  Sparing s-new, s-old: one victim too, and
    # each evicted 2 s after its save loses 8 x 2 = 16 GPU-s (equal), so the shorter wait
    # decides: s-old goes, its notice 4 s.
    found = plan_job_preemption(savers(), "team-a/a-train", NOON)
    assert isinstance(found, PreemptionPlan), found
    assert victims(found) == ["team-b/s-old"]
    assert found.victims[0].notice_seconds == 4.0
    assert found.placements == {"team-a/a-train": "n2"}
    assert "chosen over evicting team-b/s-new" in found.victims[0].reason
    assert "a shorter wait" in found.victims[0].reason


def test_a_victim_given_notice_to_its_next_save_loses_only_the_margin() -> None:
    # s-old, marked at noon, is evicted 2 s after its save at 12:00:02: it loses 8 x 2 =
    # 16 GPU-s, where evicted at noon it would lose its 28 s since 11:59:32, 8 x 28.
    state = savers()
    s_old = state.pods["team-b/s-old"]
    assert evicted_loss(state, [s_old], NOON) == (8 * SAVE_MARGIN_SECONDS, 0.0)
    assert lost_work([s_old], NOON) == (8 * 28.0, 0.0)
