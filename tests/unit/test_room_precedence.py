"""Room in priority order within a quota (issue 34: the least work lost; issue 35: priority
before arrival).

The rule (docs/quotas-and-preemption.md, "Room in priority order within a quota"): a job
that borrows makes no plan evicting other quotas' work while a job of its own quota with
a higher priority waits that fits on the room free now and that ``withinQuota`` lets
evict the borrower's pods.  The cluster below, and every expectation, by hand:

- four 8-GPU nodes.  team-a (min 0) borrows n1 with a-1 (priority 0, preemptible,
  saves nothing); team-b (min 8; ``withinQuota`` and ``borrowWithinCohort``
  ``LowerPriority``) runs b-run (not preemptible) on n2, within its min; team-c (min
  24) runs c-1 on n4, created 10 s ago; n3 is free.  ``guaranteeReserveSeconds`` 60.
- team-b's b-hi (priority 50, 8 GPUs, saves nothing) would borrow 8: the free room (8)
  less its 8, plus what lower-priority borrowers hold (team-a's 8), is 8, less than
  team-c's unused min (24 - 8 = 16): the reserve holds it back.
- team-b's b-lo (priority 5, a gang of two 8-GPU pods, saves every 30 s) borrows 16;
  the reserve lends to savers.  Its plan would take n3 and, with ``borrowWithinCohort``
  (a-1's priority 0 is below 5), n1 from a-1.  But b-hi fits on n3 now, and team-b's
  ``withinQuota LowerPriority`` lets it evict b-lo's pods: no plan.
"""

from __future__ import annotations

from typing import Any

from base import keys
from extender.core.config import MusterArgs
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOW = 1_767_268_800.0  # 2026-01-01T12:00:00Z
POLICY = {
    keys.WITHIN_QUOTA_ANNOTATION: "LowerPriority",
    keys.BORROW_WITHIN_COHORT_ANNOTATION: "LowerPriority",
}
SAVES = {keys.CHECKPOINT_INTERVAL_ANNOTATION: "30"}


def cluster(*, hi: dict[str, Any] | None = None, policy: dict[str, str] = POLICY) -> ClusterState:
    """The cluster of the module docstring; ``hi`` replaces b-hi's pods (a list) if given."""
    higher = [
        pod(
            "b-hi",
            "team-b",
            gpu=8,
            priority=50,
            preemptible=True,
            can_preempt=True,
            created="2026-01-01T11:59:00Z",
        )
    ]
    pods = [
        pod("a-1", "team-a", gpu=8, node="n1", priority=0, preemptible=True),
        pod("b-run", "team-b", gpu=8, node="n2", priority=0, preemptible=False),
        pod("c-1", "team-c", gpu=8, node="n4", created="2026-01-01T11:59:50Z"),
        *(hi["pods"] if hi is not None else higher),
        *(
            pod(
                f"b-lo-{i}",
                "team-b",
                gpu=8,
                group="lo",
                priority=5,
                preemptible=True,
                can_preempt=True,
                annotations=SAVES,
                created="2026-01-01T11:59:30Z",
            )
            for i in range(2)
        ),
    ]
    return snapshot(
        [node(f"n{i}", gpu=8) for i in range(1, 5)],
        pods,
        [
            quota("team-a", min={GPU: "0"}, max={GPU: "32"}),
            quota("team-b", min={GPU: "8"}, max={GPU: "32"}, annotations=policy),
            quota("team-c", min={GPU: "24"}, max={GPU: "32"}),
        ],
        MusterArgs(guaranteeReserveSeconds=60),
    )


def test_the_higher_priority_job_is_held_back_by_the_reserve() -> None:
    decision = plan_job_preemption(cluster(), "team-b/b-hi", NOW)
    assert isinstance(decision, Refusal)
    assert "saves no checkpoint" in decision.reasons[0], decision.reasons


def test_a_borrower_evicts_no_other_quotas_work_for_room_its_higher_priority_job_takes() -> None:
    decision = plan_job_preemption(cluster(), "team-b/lo", NOW)
    assert isinstance(decision, Refusal), decision
    (reason,) = decision.reasons
    assert reason == (
        "job team-b/b-hi of quota team-b waits with a higher priority (50), fits on the "
        "room free now, and may evict this job's pods (withinQuota LowerPriority): no other "
        "quota's work is evicted for room it would not keep"
    )


def test_without_such_a_job_the_borrower_takes_the_other_quotas_work() -> None:
    # b-hi a gang of two 8-GPU pods: only n3 is free, so it does not fit now, and b-lo's
    # plan is made: a-1 goes (borrowWithinCohort), b-lo on n1 and n3.
    gang = [
        pod(
            f"b-hi-{i}",
            "team-b",
            gpu=8,
            group="hi",
            priority=50,
            preemptible=True,
            can_preempt=True,
        )
        for i in range(2)
    ]
    plan = plan_job_preemption(cluster(hi={"pods": gang}), "team-b/lo", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-a/a-1"]
    assert sorted(plan.placements.values()) == ["n1", "n3"]


def test_a_job_of_lower_priority_or_a_policy_that_protects_the_borrower_holds_nothing() -> None:
    # b-hi at priority 1, below b-lo's 5: it could not evict b-lo, so b-lo plans.
    lower = [pod("b-hi", "team-b", gpu=8, priority=1, preemptible=True, can_preempt=True)]
    plan = plan_job_preemption(cluster(hi={"pods": lower}), "team-b/lo", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-a/a-1"]
    # withinQuota Never: b-hi may never evict b-lo's pods, so b-lo keeps the room it takes.
    never = {**POLICY, keys.WITHIN_QUOTA_ANNOTATION: "Never"}
    plan = plan_job_preemption(cluster(policy=never), "team-b/lo", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-a/a-1"]


def test_a_higher_priority_job_its_quota_keeps_out_holds_no_one_back() -> None:
    # b-hi not preemptible: with b-run's 8 its 8 would take team-b's non-preemptible use
    # to 16, over its min of 8, so team-b never admits it, and b-lo's plan is made.
    kept_out = [pod("b-hi", "team-b", gpu=8, priority=50, preemptible=False, can_preempt=True)]
    plan = plan_job_preemption(cluster(hi={"pods": kept_out}), "team-b/lo", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-a/a-1"]
