"""``victimRanking``: how plans that keep every guarantee compare (issue 34, item 1).

Under ``PriorityFirst`` (the default) the plan whose highest victim priority is lowest
wins, then the one losing the least work.  Under ``LostWorkFirst`` every victim the job
outranks counts as one priority, so among them the plan losing the least work wins, then
the lower priority; a victim of the job's priority or above (a quota's reclaim may take
it) keeps its own, lowest first as before.  Expected victims are derived by hand in each
test's comment (lost work: GPUs x seconds since the victim started, none saving).
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

from extender.core.config import MusterArgs
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
Ranking = Literal["PriorityFirst", "LostWorkFirst"]


def plan_of(
    pods: list[dict[str, Any]], quotas: list[dict[str, Any]], job: str, ranking: Ranking
) -> PreemptionPlan:
    """The plan for ``job`` on two 8-GPU nodes n1, n2, under ``ranking``."""
    state = snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        pods,
        quotas,
        MusterArgs.model_validate({"victimRanking": ranking}),
    )
    found = plan_job_preemption(state, job, NOON)
    assert isinstance(found, PreemptionPlan), found
    return found


def victims_of(
    pods: list[dict[str, Any]], quotas: list[dict[str, Any]], job: str, ranking: Ranking
) -> list[str]:
    return sorted(victim.pod.key for victim in plan_of(pods, quotas, job, ranking).victims)


def own_quota(eval_priority: int, eval_started: str) -> list[dict[str, Any]]:
    """team-a (min = max = 16) fills both 8-GPU nodes: sweep (priority 0, since 09:00) on
    n1 and eval (``eval_priority``, since ``eval_started``) on n2.  serve (priority 1000,
    8 GPUs) waits: only team-a's own lower-priority work can make room, either pod."""
    return [
        pod("sweep", "team-a", gpu=8, node="n1", preemptible=True, priority=0,
            created="2026-01-01T09:00:00Z", started="2026-01-01T09:00:00Z"),
        pod("eval", "team-a", gpu=8, node="n2", preemptible=True, priority=eval_priority,
            created=eval_started, started=eval_started),
        pod("serve", "team-a", gpu=8, can_preempt=True, priority=1000,
            created="2026-01-01T12:00:00Z"),
    ]  # fmt: skip


FULL_TEAM_A = [quota("team-a", min={GPU: "16"}, max={GPU: "16"})]


@pytest.mark.parametrize(
    ("ranking", "expected"),
    [
        # sweep loses 8 x 10,800 = 86,400 GPU-s, eval 8 x 60 = 480.  PriorityFirst: the
        # lower priority goes, sweep (0 < 100).  LostWorkFirst: both are below serve's
        # 1000, one priority to the ranking; eval loses less.
        ("PriorityFirst", ["team-a/sweep"]),
        ("LostWorkFirst", ["team-a/eval"]),
    ],
)
def test_among_outranked_victims_the_ranking_decides(ranking: Ranking, expected: list[str]) -> None:
    assert victims_of(own_quota(100, "2026-01-01T11:59:00Z"), FULL_TEAM_A, "team-a/serve",
                      ranking) == expected  # fmt: skip


def test_outranked_victims_losing_alike_go_lowest_priority_first() -> None:
    # eval started at 09:00 too: both lose 8 x 10,800.  LostWorkFirst ties them on steps 2
    # and 3; step 4, the highest victim priority as it is, takes sweep (0 < 100).
    pods = own_quota(100, "2026-01-01T09:00:00Z")
    assert victims_of(pods, FULL_TEAM_A, "team-a/serve", "LostWorkFirst") == ["team-a/sweep"]


def test_the_reason_names_the_step_that_decided() -> None:
    found = plan_of(
        own_quota(100, "2026-01-01T11:59:00Z"), FULL_TEAM_A, "team-a/serve", "LostWorkFirst"
    )
    (victim,) = found.victims
    assert "chosen over evicting team-a/sweep (priority 0, " in victim.reason
    assert victim.reason.endswith("it loses its work since 2026-01-01T11:59:00Z")
    assert "less work lost" in victim.reason


def test_a_victim_the_job_does_not_outrank_keeps_its_priority() -> None:
    # team-b (min 0) borrows both nodes: b-low (priority 0, since 09:00: 86,400 GPU-s to
    # lose) on n1 and b-serve (priority 1000, since 11:59: 480) on n2.  team-a (min 8)
    # reclaims for a-train (priority 100), which reclaimWithinCohort lets take either.
    # b-serve is above a-train's priority: the ranking keeps 1000 > 0 at step 2 even under
    # LostWorkFirst, and b-low goes in both rankings, however much it loses.
    pods = [
        pod("b-low", "team-b", gpu=8, node="n1", preemptible=True, priority=0,
            created="2026-01-01T09:00:00Z", started="2026-01-01T09:00:00Z"),
        pod("b-serve", "team-b", gpu=8, node="n2", preemptible=True, priority=1000,
            created="2026-01-01T11:59:00Z", started="2026-01-01T11:59:00Z"),
        pod("a-train", "team-a", gpu=8, can_preempt=True, priority=100,
            created="2026-01-01T12:00:00Z"),
    ]  # fmt: skip
    quotas = [
        quota("team-a", min={GPU: "8"}, max={GPU: "16"}),
        quota("team-b", min={GPU: "0"}, max={GPU: "16"}),
    ]
    for ranking in ("PriorityFirst", "LostWorkFirst"):
        assert victims_of(pods, quotas, "team-a/a-train", ranking) == ["team-b/b-low"]


def test_an_unknown_ranking_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="victimRanking"):
        MusterArgs.model_validate({"victimRanking": "Cheapest"})
