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
from extender.core.state import ClusterState, Reservation
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOW = 1_767_268_800.0  # 2026-01-01T12:00:00Z
POLICY = {
    keys.WITHIN_QUOTA_ANNOTATION: "LowerPriority",
    keys.BORROW_WITHIN_COHORT_ANNOTATION: "LowerPriority",
}
SAVES = {keys.CHECKPOINT_INTERVAL_ANNOTATION: "30"}


def running() -> list[dict[str, Any]]:
    """a-1 (team-a, borrowing n1), b-run (team-b's min, on n2) and c-1 (team-c, on n4,
    created 10 s ago)."""
    return [
        pod("a-1", "team-a", gpu=8, node="n1", priority=0, preemptible=True),
        pod("b-run", "team-b", gpu=8, node="n2", priority=0, preemptible=False),
        pod("c-1", "team-c", gpu=8, node="n4", created="2026-01-01T11:59:50Z"),
    ]


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
    pods = [*running(), *(hi["pods"] if hi is not None else higher), *lo_gang(2)]
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
    # b-hi may borrow once team-c's reserve ends, 60 s after c-1's creation (11:59:50):
    # 12:00:50, when b-lo is planned again.
    assert reason == (
        "job team-b/b-hi of quota team-b waits with a higher priority (50), fits on the "
        "room free now, and may evict this job's pods (withinQuota LowerPriority): no other "
        "quota's work is evicted for room it would not keep (it may borrow from "
        "2026-01-01T12:00:50Z)"
    )
    assert decision.retry_at == NOW + 50


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


def test_a_higher_priority_job_that_may_not_preempt_holds_no_one_back() -> None:
    # b-hi labelled can-preempt=false: it could never take b-lo's pods, so b-lo plans.
    mute = [pod("b-hi", "team-b", gpu=8, priority=50, preemptible=True, can_preempt=False)]
    plan = plan_job_preemption(cluster(hi={"pods": mute}), "team-b/lo", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-a/a-1"]


def test_a_higher_priority_job_no_admission_rule_holds_back_holds_no_one_back() -> None:
    # Without the reserve b-hi waits for no rule (kube-scheduler places it as any job, or
    # something Muster does not model keeps it out, for as long as it likes): b-lo plans.
    state = cluster()
    state.args = state.args.model_copy(update={"guarantee_reserve_seconds": 0.0})
    plan = plan_job_preemption(state, "team-b/lo", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-a/a-1"]


def five_nodes(pods: list[dict[str, Any]], *, zones: bool = False) -> ClusterState:
    """n1..n5 (8 GPUs each; with ``zones``, n5 alone in zone b) and a-1, b-run and c-1
    as in :func:`cluster`, team-c's min 32 (owed 24, so b-hi stays held back however
    the free room is counted here), plus ``pods``."""
    nodes = [
        node(f"n{i}", gpu=8, labels={"zone": "b" if i == 5 else "a"} if zones else None)
        for i in range(1, 6)
    ]
    return snapshot(
        nodes,
        [*running(), *pods],
        [
            quota("team-a", min={GPU: "0"}, max={GPU: "40"}),
            quota("team-b", min={GPU: "8"}, max={GPU: "40"}, annotations=POLICY),
            quota("team-c", min={GPU: "32"}, max={GPU: "40"}),
        ],
        MusterArgs(guaranteeReserveSeconds=60),
    )


def lo_gang(size: int, spec: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [
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
            spec=spec,
        )
        for i in range(size)
    ]


def high(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return pod("b-hi", "team-b", gpu=8, priority=50, preemptible=True, can_preempt=True, spec=spec)


def test_a_plan_on_nodes_the_higher_priority_job_cannot_use_is_made() -> None:
    # b-hi may use only n5 (zone b), free; b-lo's two pods only zone a, where n3 is free
    # and n1 is a-1's: its plan takes n1 and n3, none of b-hi's room, so it is made.
    state = five_nodes(
        [high({"nodeSelector": {"zone": "b"}}), *lo_gang(2, {"nodeSelector": {"zone": "a"}})],
        zones=True,
    )
    held = plan_job_preemption(state, "team-b/b-hi", NOW)
    assert isinstance(held, Refusal) and "saves no checkpoint" in held.reasons[0], held
    plan = plan_job_preemption(state, "team-b/lo", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-a/a-1"]
    assert sorted(plan.placements.values()) == ["n1", "n3"]


def test_room_that_would_yield_to_the_borrower_is_no_way_round_the_rule() -> None:
    # n3 and n5 free, n3 reserved for team-b's b-res (priority 1, nothing bound).  b-lo, a
    # gang of three, has no plan without n3 (n5 and a-1's n1 make two); with n3 yielding
    # to it, a plan takes a-1.  But b-hi, held back by the reserve (free 8, less its 8,
    # plus a-1's 8, is 8; with n3 released 16; team-c is owed 24 either way), fits on
    # n5, which that plan takes: no plan, and b-res keeps its room.
    state = five_nodes(
        [high(), pod("b-res", "team-b", gpu=8, priority=1, preemptible=True), *lo_gang(3)]
    )
    state.add_reservation(
        Reservation(
            job="team-b/b-res",
            quota="team-b",
            placements={"team-b/b-res": "n3"},
            victims=(),
            created=NOW - 5,
            expires=NOW + 300,
        )
    )
    decision = plan_job_preemption(state, "team-b/lo", NOW)
    assert isinstance(decision, Refusal), decision
    assert "team-b/b-res" in state.reservations
