"""Priority before quota among plans that keep every guarantee (issue 35, item 2).

The walk takes the borrowing quotas' work before the job's own quota's.  A plan that
evicts a borrower's high-priority job ranks below one that evicts the job's own
lower-priority work (the comparator's step 2, ``PlanRank.priority``), and the planner
finds the latter.  Expected victims are derived by hand in each test's comment.
"""

from __future__ import annotations

from typing import Any

from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
QUOTAS = [
    quota("team-a", min={GPU: "4"}, max={GPU: "8"}),
    quota("team-b", min={GPU: "4"}, max={GPU: "8"}),
]


def cluster(borrower_priority: int) -> list[dict[str, Any]]:
    """n1, n2 of 4 GPUs.  team-a runs a-sweep (2 GPUs, priority 10) on n1; team-b runs
    b-serve (4 GPUs, n2) and b-extra (2 GPUs, n1, ``borrower_priority``): team-b uses
    6 > its min 4, so it borrows 2.  a-train (2 GPUs, priority 500) waits: team-a with it
    uses 4 <= its min 4, so it reclaims from team-b, and may evict its own lower-priority
    work.  Only n1 can make room (2 GPUs: b-extra or a-sweep)."""
    return [
        pod("a-sweep", "team-a", gpu=2, node="n1", preemptible=True, priority=10,
            started="2026-01-01T09:00:00Z"),
        pod("b-serve", "team-b", gpu=4, node="n2", preemptible=True, priority=1000,
            started="2026-01-01T09:00:00Z"),
        pod("b-extra", "team-b", gpu=2, node="n1", preemptible=True,
            priority=borrower_priority, started="2026-01-01T11:00:00Z"),
        pod("a-train", "team-a", gpu=2, can_preempt=True, priority=500),
    ]  # fmt: skip


def plan(borrower_priority: int) -> PreemptionPlan:
    state = snapshot([node("n1", gpu=4), node("n2", gpu=4)], cluster(borrower_priority), QUOTAS)
    found = plan_job_preemption(state, "team-a/a-train", NOON)
    assert isinstance(found, PreemptionPlan), found
    return found


def victims(borrower_priority: int) -> list[str]:
    return [victim.pod.key for victim in plan(borrower_priority).victims]


def test_own_lower_priority_work_goes_before_a_borrowers_higher_priority_job() -> None:
    # The walk's plan (other quotas first) evicts b-extra, priority 1000.  Evicting
    # a-sweep instead (priority 10 < a-train's 500: team-a's policy allows it) frees the
    # same 2 GPUs on n1 and keeps team-b at its min 4: its highest victim priority is 10
    # < 1000, so it ranks better and is the plan.
    assert victims(1000) == ["team-a/a-sweep"]
    # And simulate says which step decided.
    reason = plan(1000).victims[0].reason
    assert "chosen over evicting team-b/b-extra (priority 1000)" in reason


def test_a_borrowers_lower_priority_job_still_goes_first() -> None:
    # b-extra at priority 5 < a-sweep's 10: the walk's plan (b-extra) already has the
    # lowest highest victim priority, and other quotas come first: b-extra goes.
    assert victims(5) == ["team-b/b-extra"]
    assert "chosen over" not in plan(5).victims[0].reason


def test_equal_priorities_keep_the_walk_order() -> None:
    # b-extra at priority 10, as a-sweep: no plan has a lower highest priority, so the
    # walk's order decides (other quotas first): b-extra goes.
    assert victims(10) == ["team-b/b-extra"]
