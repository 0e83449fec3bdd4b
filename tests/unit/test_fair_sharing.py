"""Fair sharing of borrowed capacity (issue 35, item 1): shares, the admission check,
preemption between borrowers, and no loop.  Expected results are derived by hand in each
test's comment from docs/quotas-and-preemption.md ("Fair sharing"): a quota's share is
the largest, over the resources it governs, of what it uses beyond its ``min`` as a
fraction of the cluster's capacity, divided by its weight.

The cluster, unless a test says otherwise: four nodes of one GPU each (capacity 4 GPUs),
team-a and team-b both ``min`` 0 and ``max`` 4 GPUs, so every GPU either uses is borrowed.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from base import keys
from extender.core.config import MusterArgs
from extender.core.effects import ReleaseRoom, apply
from extender.core.filter.verb import filter_pod
from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.preemption.policy import victim_refusal
from extender.core.state import ClusterState
from quota.fairshare import ZERO_WEIGHT, share_after
from tests.builders import hold_plan, node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
CREATED = "2026-01-01T12:00:00Z"
CREATED_AT = 1_767_268_800.0  # CREATED in seconds
NOW = CREATED_AT + 10
NODES = [node(f"n{i}", gpu=1) for i in range(1, 5)]
ON = MusterArgs(fairSharing=True)


def teams(weight_a: str = "1", weight_b: str = "1") -> list[dict[str, Any]]:
    return [
        quota(
            "team-a",
            min={GPU: "0"},
            max={GPU: "4"},
            annotations={"muster.dev/fair-sharing-weight": weight_a},
        ),
        quota(
            "team-b",
            min={GPU: "0"},
            max={GPU: "4"},
            annotations={"muster.dev/fair-sharing-weight": weight_b},
        ),
    ]


def running_b(count: int) -> list[dict[str, Any]]:
    """team-b's 1-GPU preemptible pods on n1, n2, ...: b-0 started first."""
    return [
        pod(
            f"b-{i}",
            "team-b",
            gpu=1,
            node=f"n{i + 1}",
            preemptible=True,
            started=f"2026-01-01T11:0{i}:00Z",
        )
        for i in range(count)
    ]


def gang(name: str, namespace: str, size: int, **extra: Any) -> list[dict[str, Any]]:
    annotations = {"muster.dev/min-available": str(size)}
    return [
        pod(
            f"{name}-{i}",
            namespace,
            gpu=1,
            group=name,
            created=CREATED,
            preemptible=True,  # what a quota borrows is preemptible
            annotations=annotations,
            **extra,
        )
        for i in range(size)
    ]


def admit(state: ClusterState, key: str, now: float = NOW) -> tuple[str, ...]:
    """The quota failures of the filter for pod ``key`` over every node."""
    result = filter_pod(state, state.pods[key], sorted(state.nodes), as_extender=True, now=now)
    return result.quota_failures


def test_shares_are_weighted_dominant_fractions_of_capacity() -> None:
    quotas = [
        quota(
            "team-a",
            min={GPU: "1", "cpu": "2"},
            max={GPU: "4", "cpu": "64"},
            annotations={"muster.dev/fair-sharing-weight": "2"},
        ),
        quota(
            "team-b",
            min={GPU: "0"},
            max={GPU: "4"},
            annotations={"muster.dev/fair-sharing-weight": "0"},
        ),
    ]
    pods = [
        pod("a-0", "team-a", gpu=1, cpu="8", node="n1"),
        pod("a-1", "team-a", gpu=1, cpu="8", node="n2"),
    ]
    state = snapshot(NODES, pods, quotas, ON)
    # Capacity: 4 GPUs, 4 x 32 = 128 cpu.  team-a uses 2 GPUs (borrows 2 - 1 = 1: 1/4) and
    # 16 cpu (borrows 16 - 2 = 14: 14/128 = 0.109); dominant 0.25, weight 2: 0.125.
    assert share_after(state.ledger, "team-a", state.capacity()) == 0.125
    # One more GPU: borrows 2 of 4 = 0.5, / 2 = 0.25.
    assert share_after(state.ledger, "team-a", state.capacity(), {GPU: 1000}) == 0.25
    # team-b borrows nothing: 0 whatever its weight; with one GPU, 1/4 over weight 0.
    assert share_after(state.ledger, "team-b", state.capacity()) == 0.0
    assert share_after(state.ledger, "team-b", state.capacity(), {GPU: 1000}) == 0.25 / ZERO_WEIGHT


def test_a_borrower_waits_while_a_quota_with_a_lower_share_has_work_waiting() -> None:
    # team-b runs 2 GPUs (share 2/4 = 0.5); team-a's gang of 2 waits (its share once
    # admitted: 2/4 = 0.5).  team-b's next pod would take team-b to 3/4 = 0.75 > 0.5: it
    # waits, and the two free GPUs stay free for team-a's gang.
    pods = [
        *running_b(2),
        pod("b-2", "team-b", gpu=1, created=CREATED, preemptible=True),
        *gang("a", "team-a", 2),
    ]
    state = snapshot(NODES, pods, teams(), ON)
    failures = admit(state, "team-b/b-2")
    assert len(failures) == 1
    assert "fair share" in failures[0] and "team-a/a" in failures[0], failures
    # team-a's gang is admitted: its share 0.5 is not above team-b's 0.5 (nothing of
    # team-b's waits with a lower share either).
    assert admit(state, "team-a/a-0") == ()


def test_equal_shares_admit_and_the_weight_decides() -> None:
    # team-a weighs 1/4: its gang of 2 would take its share to 0.5 / 0.25 = 2.0, above the
    # 0.75 team-b's next pod brings team-b to, so team-b's pod is admitted.
    pods = [
        *running_b(2),
        pod("b-2", "team-b", gpu=1, created=CREATED, preemptible=True),
        *gang("a", "team-a", 2),
    ]
    state = snapshot(NODES, pods, teams(weight_a="0.25"), ON)
    assert admit(state, "team-b/b-2") == ()
    # team-b runs 1 (0.25) and team-a's gang of 2 waits (0.5); team-b's next takes it to
    # 2/4 = 0.5: equal, admitted.
    pods = [
        *running_b(1),
        pod("b-1", "team-b", gpu=1, created=CREATED, preemptible=True),
        *gang("a", "team-a", 2),
    ]
    state = snapshot(NODES, pods, teams(), ON)
    assert admit(state, "team-b/b-1") == ()


def test_waiting_work_holds_others_back_only_for_a_while_and_only_when_on() -> None:
    pods = [
        *running_b(2),
        pod("b-2", "team-b", gpu=1, created=CREATED, preemptible=True),
        *gang("a", "team-a", 2),
    ]
    state = snapshot(NODES, pods, teams(), ON)
    # fairSharingWaitSeconds (300 s) after team-a's newest pod was created, it no longer
    # holds team-b back.
    assert admit(state, "team-b/b-2", now=CREATED_AT + 299)
    assert admit(state, "team-b/b-2", now=CREATED_AT + 301) == ()
    off = snapshot(NODES, pods, teams(), MusterArgs(fairSharing=False))
    assert admit(off, "team-b/b-2") == ()


def test_a_borrower_below_its_share_takes_back_from_one_above_it() -> None:
    # team-b borrows all 4 GPUs (share 1.0); team-a (share 0) asks for 2.  After: team-a
    # 0.5, team-b 0.5: the gap goes from 1.0 to 0, so 2 of team-b's pods go, the newest
    # first (least work lost): b-3 and b-2.
    pods = [*running_b(4), *gang("a", "team-a", 2, can_preempt=True)]
    state = snapshot(NODES, pods, teams(), ON)
    plan = plan_job_preemption(state, "team-a/a", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert sorted(v.pod.key for v in plan.victims) == ["team-b/b-2", "team-b/b-3"]
    assert all("fairSharing" in v.reason for v in plan.victims)
    # Without fair sharing a borrower takes nothing from another (borrowWithinCohort
    # Never, the default).
    off = snapshot(NODES, pods, teams(), MusterArgs(fairSharing=False))
    assert isinstance(plan_job_preemption(off, "team-a/a", NOW), Refusal)


def test_a_preemption_that_would_not_narrow_the_gap_is_refused() -> None:
    # team-a asks for all 4: after, team-a 1.0 and team-b 0: the gap stays 1.0, not
    # narrower, so no plan.  2 GPUs: 0.5 against 0.5, the gap closed: allowed.
    pods = [*running_b(4), *gang("a", "team-a", 4, can_preempt=True)]
    refused = plan_job_preemption(snapshot(NODES, pods, teams(), ON), "team-a/a", NOW)
    assert isinstance(refused, Refusal)
    assert any("fair sharing" in reason for reason in refused.reasons), refused
    pods = [*running_b(4), *gang("a", "team-a", 2, can_preempt=True)]
    plan = plan_job_preemption(snapshot(NODES, pods, teams(), ON), "team-a/a", NOW)
    assert isinstance(plan, PreemptionPlan) and len(plan.victims) == 2


def test_a_preemption_that_would_reverse_the_gap_is_refused() -> None:
    # team-b borrows all 4 (1.0), team-a nothing.  team-a's gang of 3 would leave team-a
    # at 0.75 and team-b at 0.25: the gap narrows (0.5 < 1.0) but reverses, so team-b,
    # now the poorer, could take the room back the same way: two evictions of 3 and
    # more to settle a difference of 2 GPUs.  Refused, and the reason says so.
    pods = [*running_b(4), *gang("a", "team-a", 3, can_preempt=True)]
    refused = plan_job_preemption(snapshot(NODES, pods, teams(), ON), "team-a/a", NOW)
    assert isinstance(refused, Refusal), refused
    said = " ".join(refused.reasons)
    assert "would leave quota team-a's above it" in said, said
    # team-b weighs twice team-a: its 4 borrowed GPUs count 1.0 / 2 = 0.5.  team-a's
    # gang of 1 leaves team-a at 0.25 and team-b at 3/4 / 2 = 0.375: allowed.  A gang
    # of 2: team-a 0.5, team-b 2/4 / 2 = 0.25, reversed: refused.
    for size, allowed in ((1, True), (2, False)):
        pods = [*running_b(4), *gang("a", "team-a", size, can_preempt=True)]
        state = snapshot(NODES, pods, teams(weight_b="2"), ON)
        plan = plan_job_preemption(state, "team-a/a", NOW)
        assert isinstance(plan, PreemptionPlan) is allowed, (size, plan)


def test_weight_zero_borrows_only_what_nobody_else_wants() -> None:
    # team-b weighs 0: borrowing 4 GPUs its share is 1.0 / 1e-6.  team-a's 4 would leave
    # team-b at 0 and team-a at 1.0: a gap of 1.0, far narrower than 1e6: allowed.
    pods = [*running_b(4), *gang("a", "team-a", 4, can_preempt=True)]
    plan = plan_job_preemption(snapshot(NODES, pods, teams(weight_b="0"), ON), "team-a/a", NOW)
    assert isinstance(plan, PreemptionPlan) and len(plan.victims) == 4


@settings(max_examples=60, deadline=None)
@given(
    weights=st.tuples(*[st.sampled_from(["0", "0.5", "1", "2", "3"])] * 2),
    running=st.integers(min_value=1, max_value=4),
    ask=st.integers(min_value=1, max_value=4),
    priorities=st.tuples(*[st.sampled_from([0, 50, 100])] * 2),
)
def test_no_admit_reclaim_readmit_loop(
    weights: tuple[str, str], running: int, ask: int, priorities: tuple[int, int]
) -> None:
    # team-b runs `running` 1-GPU pods; team-a's gang of `ask` plans (priorities: team-a's,
    # team-b's).  When fair sharing lets it evict, the plan is committed (victims gone, the
    # gang bound where the plan put it) and the victims' job comes back at once as a
    # pending gang that may preempt, of its old priority: it must not be able to take the
    # room back from team-a (it would widen the gap it narrowed, by the rule's arithmetic:
    # docs/quotas-and-preemption.md; or take a job of higher priority than its own).
    a_priority, b_priority = priorities
    b_running = running_b(running)
    for manifest in b_running:
        manifest["spec"]["priority"] = b_priority
    pods = [*b_running, *gang("a", "team-a", ask, can_preempt=True, priority=a_priority)]
    state = snapshot(NODES, pods, teams(*weights), ON)
    plan = plan_job_preemption(state, "team-a/a", NOW)
    if not isinstance(plan, PreemptionPlan) or not plan.victims:
        return
    hold_plan(state, plan, NOW)
    back: list[dict[str, Any]] = []
    for victim in plan.victims:
        state.remove_pod(victim.pod.key)
        back.append(
            pod(
                victim.pod.name + "-again",
                "team-b",
                gpu=1,
                group="b-again",
                can_preempt=True,
                preemptible=True,
                created=CREATED,
                priority=b_priority,
                annotations={"muster.dev/min-available": str(len(plan.victims))},
            )
        )
    assert all(victim.pod.priority <= a_priority for victim in plan.victims)
    for key, node_name in plan.placements.items():
        bound = parse_pod(
            pod(
                key.split("/")[1],
                "team-a",
                gpu=1,
                node=node_name,
                preemptible=True,
                group="a",
                created=CREATED,
                started=CREATED,
                priority=a_priority,
                annotations={"muster.dev/min-available": str(ask)},
            )
        )
        state.upsert_pod(bound)
    apply(state, ReleaseRoom("team-a/a"))
    # The gap did not reverse: team-a ends at or below team-b, unless team-b weighs 0.
    capacity = state.capacity()
    shares = [share_after(state.ledger, team, capacity) for team in ("team-a", "team-b")]
    assert weights[1] == "0" or shares[0] <= shares[1], shares
    for item in back:
        state.upsert_pod(parse_pod(item))
    again = plan_job_preemption(state, "team-b/b-again", NOW + 1)
    # team-a and team-b are the only quotas, and every GPU is in use: the returning job
    # could run only by evicting team-a's gang, which the gap rule refuses.
    assert isinstance(again, Refusal), again


def test_no_plan_for_a_borrower_while_a_quota_below_its_share_waits() -> None:
    # team-c borrows all 4 GPUs (share 1.0).  team-b's 1-GPU job b-new may preempt: its
    # share after is 1/4 = 0.25, and evicting one of team-c's (0.75 after) narrows the gap.
    # But team-a (weight 2) has a 1-GPU job waiting whose share after is 0.25 / 2 = 0.125
    # < 0.25: b-new is not admitted past it, so it gets no plan either; a-wait itself
    # gets one (0.125 against team-c's 0.75 after: the gap narrows from 1.0).
    quotas = [
        *teams(weight_a="2"),
        quota("team-c", min={GPU: "0"}, max={GPU: "4"}),
    ]
    running_c = [
        pod(f"c-{i}", "team-c", gpu=1, node=f"n{i + 1}", preemptible=True) for i in range(4)
    ]
    waiting = [
        pod("a-wait", "team-a", gpu=1, created=CREATED, preemptible=True, can_preempt=True),
        pod("b-new", "team-b", gpu=1, created=CREATED, preemptible=True, can_preempt=True),
    ]
    state = snapshot(NODES, [*running_c, *waiting], quotas, ON)
    refused = plan_job_preemption(state, "team-b/b-new", NOW)
    assert isinstance(refused, Refusal), refused
    assert "team-a/a-wait" in refused.reasons[0], refused
    plan = plan_job_preemption(state, "team-a/a-wait", NOW)
    assert isinstance(plan, PreemptionPlan) and len(plan.victims) == 1
    # Without team-a's waiting job, b-new gets its plan.
    state = snapshot(NODES, [*running_c, waiting[1]], quotas, ON)
    assert isinstance(plan_job_preemption(state, "team-b/b-new", NOW), PreemptionPlan)


def test_a_quota_naming_no_gpus_borrows_every_gpu_it_uses() -> None:
    # team-x names only cpu: every GPU it uses is borrowed (guaranteed none), as for a
    # quota with GPU min 0.  Its gang of 4 GPUs against team-b's 4: after, team-x 4/4 = 1.0
    # and team-b 0: the gap stays 1.0, so no plan; its gang of 2: 0.5 and 0.5, a plan.
    quotas = [*teams(), quota("team-x", min={"cpu": "8"}, max={"cpu": "64"})]
    for size, planned in ((4, False), (2, True)):
        pods = [*running_b(4), *gang("x", "team-x", size, can_preempt=True)]
        plan = plan_job_preemption(snapshot(NODES, pods, quotas, ON), "team-x/x", NOW)
        assert isinstance(plan, PreemptionPlan) is planned, (size, plan)


def test_a_job_within_min_once_its_own_work_goes_is_not_held_back() -> None:
    # team-a (min 2) runs two priority-1 pods on n1, n2; team-c (min = max 2) runs two
    # non-preemptible pods on n3, n4.  team-a's priority-100 gang of 2 would take team-a to
    # 4 > min 2, but once its own two are evicted (withinQuota LowerPriority) it is within
    # its min: it does not borrow, so team-b's waiting 1-GPU job (share 0.25 once admitted,
    # below the 0.5 team-a's gang would borrow to) does not hold it back.  Its plan evicts
    # its own two.
    quotas = [
        quota("team-a", min={GPU: "2"}, max={GPU: "4"}),
        quota("team-b", min={GPU: "0"}, max={GPU: "4"}),
        quota("team-c", min={GPU: "2"}, max={GPU: "2"}),
    ]
    pods = [
        *[
            pod(f"a-low-{i}", "team-a", gpu=1, node=f"n{i + 1}", preemptible=True, priority=1)
            for i in range(2)
        ],
        *[pod(f"c-{i}", "team-c", gpu=1, node=f"n{i + 3}") for i in range(2)],
        pod("b-wait", "team-b", gpu=1, created=CREATED, preemptible=True),
        *gang("a", "team-a", 2, can_preempt=True, priority=100),
    ]
    plan = plan_job_preemption(snapshot(NODES, pods, quotas, ON), "team-a/a", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert sorted(v.pod.key for v in plan.victims) == ["team-a/a-low-0", "team-a/a-low-1"]


BORROWS_FROM_LOWER = quota(
    "team-a",
    min={GPU: "0"},
    max={GPU: "4"},
    annotations={"muster.dev/borrow-within-cohort": "LowerPriority"},
)


def test_fair_sharing_replaces_borrow_within_cohort() -> None:
    # team-a may borrow from lower priority (borrow-within-cohort LowerPriority).  Its
    # priority-100 gang of 4 needs team-b's four priority-0 pods.  Off, borrowWithinCohort
    # takes them.  On, a borrower takes from another quota only by fair sharing, and the
    # gap would not narrow: team-b's share 4/4 = 1.0 against team-a's 0.0 before, 0.0
    # against 1.0 after, a gap of 1.0 both ways.
    quotas = [BORROWS_FROM_LOWER, quota("team-b", min={GPU: "0"}, max={GPU: "4"})]
    pods = [*running_b(4), *gang("a", "team-a", 4, can_preempt=True, priority=100)]
    off = plan_job_preemption(
        snapshot(NODES, pods, quotas, MusterArgs(fairSharing=False)), "team-a/a", NOW
    )
    assert isinstance(off, PreemptionPlan) and len(off.victims) == 4, off
    on = plan_job_preemption(snapshot(NODES, pods, quotas, ON), "team-a/a", NOW)
    assert isinstance(on, Refusal), on
    assert any("would not narrow the gap" in reason for reason in on.reasons), on.reasons


def test_a_borrower_above_its_share_takes_nothing_from_one_below() -> None:
    # 4 GPUs.  team-a borrows 2 (share 2/4 = 0.5), team-b borrows 1 (0.25) with a
    # priority-0 pod on n3; n4 is free.  team-a's priority-100 job of 2 needs n4 and n3.
    # Off, borrowWithinCohort lets it take team-b's lower-priority pod: team-a 1.0,
    # team-b 0.0, the gap widened from 0.25 to 1.0.  On, team-b is below team-a's share,
    # so nothing of it may be taken: team-a's own lower-priority work goes instead (its two
    # priority-0 pods started together; the first by name, a-run-0, frees n1).
    quotas = [BORROWS_FROM_LOWER, quota("team-b", min={GPU: "0"}, max={GPU: "4"})]
    pods = [
        *[pod(f"a-run-{i}", "team-a", gpu=1, node=f"n{i + 1}", preemptible=True) for i in range(2)],
        pod("b-0", "team-b", gpu=1, node="n3", preemptible=True, priority=0),
        *gang("a", "team-a", 2, can_preempt=True, priority=100),
    ]
    off = plan_job_preemption(
        snapshot(NODES, pods, quotas, MusterArgs(fairSharing=False)), "team-a/a", NOW
    )
    assert isinstance(off, PreemptionPlan), off
    assert [victim.pod.key for victim in off.victims] == ["team-b/b-0"]
    on = plan_job_preemption(snapshot(NODES, pods, quotas, ON), "team-a/a", NOW)
    assert isinstance(on, PreemptionPlan), on
    assert [victim.pod.key for victim in on.victims] == ["team-a/a-run-0"]


def test_a_fair_sharing_victim_read_back_is_still_allowed_once_its_room_is_held() -> None:
    # 8 GPUs; team-a may not reclaim (reclaim-within-cohort Never), so only fair sharing
    # lets it take team-b's pods.  team-a runs 1 (share 1/8), team-b 5 (5/8); team-a's
    # gang of 3 needs 1 more than the 2 free GPUs: after, 4/8 against 4/8, the gap 0.5 ->
    # 0: one of team-b's pods goes.  Once the plan's room is held, its pods are charged to
    # team-a (4/8), and then another of team-b's pods completes (team-b 4/8): team-a is no
    # longer below team-b, but the share that counts is the one before the job (1/8): a
    # Muster completing the plan (victim_refusal) still allows the victim.
    nodes = [node(f"n{i}", gpu=1) for i in range(1, 9)]
    quotas = [
        quota(
            "team-a",
            min={GPU: "0"},
            max={GPU: "8"},
            annotations={"muster.dev/reclaim-within-cohort": "Never"},
        ),
        quota("team-b", min={GPU: "0"}, max={GPU: "8"}),
    ]
    pods = [
        pod("a-run", "team-a", gpu=1, node="n1", preemptible=True),
        *[pod(f"b-{i}", "team-b", gpu=1, node=f"n{i + 2}", preemptible=True) for i in range(5)],
        *gang("a", "team-a", 3, can_preempt=True),
    ]
    state = snapshot(nodes, pods, quotas, ON)
    plan = plan_job_preemption(state, "team-a/a", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert len(plan.victims) == 1 and all(v.quota == "team-b" for v in plan.victims)
    hold_plan(state, plan, NOW)
    victims = {victim.pod.key for victim in plan.victims}
    state.remove_pod(next(f"team-b/b-{i}" for i in range(5) if f"team-b/b-{i}" not in victims))
    for victim in plan.victims:
        assert victim_refusal(state, "team-a/a", victim.pod) is None


def test_equal_shares_compare_equal() -> None:
    # 10 GPUs.  team-a (weight 3) borrows 3: (3/10)/3 = 0.1 exactly; team-b (weight 1)
    # borrows 1: 0.1.  In floating point 0.3/3 is 0.0999..., below 0.1: shares are rounded.
    nodes = [node(f"n{i}", gpu=1) for i in range(10)]
    pods = [
        *[pod(f"a-{i}", "team-a", gpu=1, node=f"n{i}", preemptible=True) for i in range(3)],
        pod("b-0", "team-b", gpu=1, node="n3", preemptible=True),
    ]
    state = snapshot(nodes, pods, teams(weight_a="3"), ON)
    capacity = state.capacity()
    assert share_after(state.ledger, "team-a", capacity) == share_after(
        state.ledger, "team-b", capacity
    )


# Only waiting work that could run once room frees holds others back (a tenant controls
# its own pods: pending pods that can never run must not keep the room idle).  Each test:
# team-b runs 2 GPUs (share 2/4 = 0.5) and its next pod b-2 would take it to 3/4 = 0.75;
# team-a's waiting work, with a lower share once admitted, holds b-2 back only if it could
# run on the cluster's nodes once they empty (its quota admits it in every case: max 4).

SELECT = {"spec": {"nodeSelector": {"pool": "x"}}}
NEVER = {
    # No node is labelled pool=x.
    "a node selector matching no node": SELECT,
    # 2 GPUs a pod on nodes of 1 GPU.
    "a request larger than any node": {"gpu": 2},
    # Every node is tainted (below), and the pod tolerates nothing.
    "a taint on every node": {},
}
TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
TOLERATE = {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}


def held_back(waiting: list[dict[str, Any]], nodes: list[dict[str, Any]] = NODES) -> bool:
    """Is team-b's b-2 held back by fair sharing, with team-a's ``waiting`` pods?"""
    b_2 = pod("b-2", "team-b", gpu=1, created=CREATED, preemptible=True)
    state = snapshot(nodes, [*running_b(2), b_2, *waiting], teams(weight_a="2"), ON)
    failures = admit(state, "team-b/b-2")
    assert all("fair share" in failure for failure in failures), failures
    return bool(failures)


def test_pods_that_can_never_run_hold_no_one_back() -> None:
    # team-a's pod a-x (weight 2: its share once admitted 1/4 / 2 = 0.125 < 0.75, or
    # 2/4 / 2 = 0.25 for the 2-GPU pod) fits no node even empty, in each way a tenant can
    # write one: b-2 is admitted.  Created just now (re-created, say): still nothing.
    tainted = [node(f"n{i}", gpu=1, taints=[TAINT]) for i in range(1, 5)]
    for how, extra in NEVER.items():
        nodes = tainted if how == "a taint on every node" else NODES
        spec = {"gpu": 1, **extra}
        never = pod("a-x", "team-a", created=CREATED, preemptible=True, **spec)
        assert not held_back([never], nodes), how
    # The controls, each fitting some node once it empties (n1..n4 run team-b's pods or
    # are free): they hold b-2 back.
    fits = pod("a-x", "team-a", gpu=1, created=CREATED, preemptible=True)
    assert held_back([fits])
    labelled = [node("n1", gpu=1, labels={"pool": "x"}), *NODES[1:]]
    selects = pod("a-x", "team-a", gpu=1, created=CREATED, preemptible=True, **SELECT)
    assert held_back([selects], labelled)
    tolerates = pod("a-x", "team-a", gpu=1, created=CREATED, preemptible=True, spec=TOLERATE)
    assert held_back([tolerates], tainted)


def test_a_gang_counts_only_if_it_fits_the_empty_nodes_whole() -> None:
    # n1 and n2 are labelled pool=x; team-a's gang asks for 1 GPU a pod on pool=x.  Each
    # pod fits n1 or n2 once empty, but 2 nodes of 1 GPU hold 2 copies: a gang of 3 can
    # never run whole (its share once admitted, 3/4 / 2 = 0.375 < 0.75, and its quota's
    # max of 4 would have let it hold b-2 back); a gang of 2 can (2/4 / 2 = 0.25): held.
    pool = [node(f"n{i}", gpu=1, labels={"pool": "x"}) for i in (1, 2)]
    nodes = [*pool, *NODES[2:]]
    assert not held_back(gang("a", "team-a", 3, **SELECT), nodes)
    assert held_back(gang("a", "team-a", 2, **SELECT), nodes)


def test_a_gang_of_two_shapes_counts_only_if_both_fit_together() -> None:
    # Only n1 (1 GPU) is labelled pool=x.  The gang's two pods both select it, one also
    # tolerating a taint (so two shapes): each fits n1 alone, both never (2 GPUs on a
    # node of 1): b-2 is admitted.  With the second pod selecting nothing, it goes to
    # n2..n4 while the first takes n1: held.
    nodes = [node("n1", gpu=1, labels={"pool": "x"}), *NODES[1:]]
    first, second = gang("a", "team-a", 2, **SELECT)
    second["spec"]["tolerations"] = TOLERATE["tolerations"]
    assert not held_back([first, second], nodes)
    del second["spec"]["nodeSelector"]
    assert held_back([first, second], nodes)


def test_a_gang_whose_pods_do_not_all_exist_holds_no_one_back() -> None:
    # min-available 3, two pods created: it waits for its third pod, not for room (its
    # two pods' share, 2/4 / 2 = 0.25 < 0.75, would have held b-2 back).  With the
    # third (3/4 / 2 = 0.375 < 0.75, 3 GPUs free once n1..n4 empty): held.
    three = gang("a", "team-a", 3)
    for item in three:  # (the size gang() writes is not a key Muster reads)
        item["metadata"]["annotations"] = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "3"}
    assert not held_back(three[:2])
    assert held_back(three)


def test_a_gated_pod_holds_no_one_back() -> None:
    # team-a's 1-GPU pod (share once admitted 1/4 / 2 = 0.125 < 0.75) carries a
    # scheduling gate: kube-scheduler does not try it until the gate goes, which its
    # tenant may never do.  It waits for its gate, not for room: b-2 is admitted.  The
    # same pod without the gate holds b-2 back (test above).
    gated = pod("a-x", "team-a", gpu=1, created=CREATED, preemptible=True)
    gated["spec"]["schedulingGates"] = [{"name": "wait"}]
    assert not held_back([gated])


def test_waiting_work_holds_back_only_a_pod_that_could_take_room_it_could_use() -> None:
    # team-a's 1-GPU pod a-x (share once admitted 0.125 < 0.75) selects pool=x.  team-b
    # runs b-0 on n1 and b-1 on n2, so kube-scheduler offers b-2 only n3 and n4.  With n1
    # labelled pool=x, a-x could use n1 alone, which b-2 cannot take: b-2 is admitted (a
    # tenant's pod pinned to nodes that stay full holds no one back elsewhere).  With n3
    # labelled instead, b-2 could take the room a-x waits for: held back.
    b_2 = pod("b-2", "team-b", gpu=1, created=CREATED, preemptible=True)
    a_x = pod("a-x", "team-a", gpu=1, created=CREATED, preemptible=True, **SELECT)
    for labelled, held in (("n1", False), ("n3", True)):
        nodes = [
            node(f"n{i}", gpu=1, labels={"pool": "x"} if f"n{i}" == labelled else {})
            for i in range(1, 5)
        ]
        state = snapshot(nodes, [*running_b(2), b_2, a_x], teams(weight_a="2"), ON)
        pod_b = state.pods["team-b/b-2"]
        result = filter_pod(state, pod_b, ["n3", "n4"], as_extender=True, now=NOW)
        assert bool(result.quota_failures) is held, (labelled, result.quota_failures)
        # Asked about every node (simulate, the planner), b-2 is held back either way.
        assert admit(state, "team-b/b-2")


def _one_gpu_each(team: str, count: int, *, first_node: int, hour: int) -> list[dict[str, Any]]:
    """``count`` preemptible 1-GPU pods of ``team`` (priority 1) on consecutive nodes from
    ``n<first_node>``, started a minute apart from ``<hour>:00``, in name order."""
    letter = team[-1]
    return [
        pod(
            f"{letter}-{i}",
            team,
            gpu=1,
            node=f"n{first_node + i}",
            preemptible=True,
            priority=1,
            started=f"2026-01-01T{hour}:0{i}:00Z",
        )
        for i in range(count)
    ]


def test_reclaim_takes_from_the_quota_furthest_above_its_share_first() -> None:
    # Eight nodes of one GPU.  team-a, team-b and team-c: min 2, max 8 each.  team-a runs
    # a-0..a-4 (5 GPUs: borrows 3, share 3/8 = 0.375), team-b runs b-0..b-2 (3 GPUs:
    # borrows 1, share 1/8 = 0.125), all priority 1; b-2 started last of all, a-4 last of
    # team-a's.  team-c's pod (priority 100, below its min of 2) reclaims one GPU from a
    # borrowing quota.  The victim order alone (priority 1 for all, then the least work
    # lost: the latest start) would take b-2.  With fairSharing, among victims of one
    # priority the quota furthest above its fair share goes first: team-a, so a-4 (team-a
    # goes from 5 to 4, still above its min of 2).  With it off: b-2.
    nodes = [node(f"n{i}", gpu=1) for i in range(1, 9)]
    quotas = [
        quota(name, min={GPU: "2"}, max={GPU: "8"}) for name in ("team-a", "team-b", "team-c")
    ]
    running = [
        *_one_gpu_each("team-a", 5, first_node=1, hour=10),
        *_one_gpu_each("team-b", 3, first_node=6, hour=11),
        pod("c-0", "team-c", gpu=1, created=CREATED, priority=100, can_preempt=True),
    ]
    plan = plan_job_preemption(snapshot(nodes, running, quotas, ON), "team-c/c-0", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-a/a-4"]
    off = snapshot(nodes, running, quotas, MusterArgs(fairSharing=False))
    plan = plan_job_preemption(off, "team-c/c-0", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-b/b-2"]


def test_fair_sharing_divides_what_is_borrowed_among_jobs_of_a_priority() -> None:
    # As test_no_plan_for_a_borrower_while_a_quota_below_its_share_waits: team-c borrows
    # all 4 GPUs (share 1.0, its pods at priority 0); team-b's b-new would leave team-b's
    # share at 0.25, team-a's (weight 2) waiting job a-wait would leave team-a's at 0.125.
    # By the rule, a job is held back only for a waiting job of its priority or higher:
    # b-new at priority 100 is not held back for a-wait at 0, and gets its plan (one of
    # team-c's, priority 0 ≤ 100); at 0 against a-wait's 100 it is.
    quotas = [*teams(weight_a="2"), quota("team-c", min={GPU: "0"}, max={GPU: "4"})]
    running_c = [
        pod(f"c-{i}", "team-c", gpu=1, node=f"n{i + 1}", preemptible=True) for i in range(4)
    ]
    for a_priority, b_priority, b_waits in ((0, 100, False), (100, 0, True), (50, 50, True)):
        waiting = [
            pod("a-wait", "team-a", gpu=1, created=CREATED, preemptible=True, can_preempt=True,
                priority=a_priority),
            pod("b-new", "team-b", gpu=1, created=CREATED, preemptible=True, can_preempt=True,
                priority=b_priority),
        ]  # fmt: skip
        state = snapshot(NODES, [*running_c, *waiting], quotas, ON)
        decision = plan_job_preemption(state, "team-b/b-new", NOW)
        if b_waits:
            assert isinstance(decision, Refusal), (a_priority, b_priority, decision)
            assert "team-a/a-wait" in decision.reasons[0]
        else:
            assert isinstance(decision, PreemptionPlan), decision
            assert [v.pod.key.split("/")[0] for v in decision.victims] == ["team-c"]


def test_fair_sharing_takes_no_victim_of_higher_priority_than_its_job() -> None:
    # team-c borrows all 4 GPUs (share 1.0) with pods of priority 100; team-b's b-new
    # (share 0.25 after) would narrow the gap by taking one, but fair sharing divides what
    # is borrowed among jobs of a priority: at priority 50 it takes none of them (and is
    # refused: there is nothing else to take); at 100, one.
    quotas = [*teams(), quota("team-c", min={GPU: "0"}, max={GPU: "4"})]
    running_c = [
        pod(f"c-{i}", "team-c", gpu=1, node=f"n{i + 1}", preemptible=True, priority=100)
        for i in range(4)
    ]
    for b_priority, planned in ((50, False), (100, True)):
        b_new = pod("b-new", "team-b", gpu=1, created=CREATED, preemptible=True,
                    can_preempt=True, priority=b_priority)  # fmt: skip
        state = snapshot(NODES, [*running_c, b_new], quotas, ON)
        decision = plan_job_preemption(state, "team-b/b-new", NOW)
        assert isinstance(decision, PreemptionPlan) is planned, (b_priority, decision)


def test_a_job_of_mixed_priorities_gets_past_no_work_that_could_take_its_pods_back() -> None:
    # team-c runs c-0 within its min on n2; n1 is free.  team-b (weight 2) has b-w waiting
    # at priority 50 (share 0.25 once admitted).  team-a's elastic job (min-available 1)
    # has a-lo at priority 0 and a-hi at 100, a-hi pinned to a node pool no node has.
    # Admitting a-lo would make team-a's share 0.5 > 0.25.  By the rule a job gets past
    # waiting work only if every pod it would run is of higher priority than that work
    # (b-w's preemption, at 50, could take a-lo, at 0, straight back): a-lo waits for b-w,
    # as it does when a-hi is at 0 too.
    nodes = [node("n1", gpu=1), node("n2", gpu=1)]
    quotas = [
        quota("team-a", min={GPU: "0"}, max={GPU: "2"}),
        quota("team-b", min={GPU: "0"}, max={GPU: "2"},
              annotations={"muster.dev/fair-sharing-weight": "2"}),
        quota("team-c", min={GPU: "1"}, max={GPU: "1"}),
    ]  # fmt: skip
    c0 = pod("c-0", "team-c", gpu=1, node="n2", preemptible=False)
    b_wait = pod("b-w", "team-b", gpu=1, created=CREATED, preemptible=True, can_preempt=True,
                 priority=50)  # fmt: skip
    elastic = {"muster.dev/min-available": "1"}
    for hi_priority in (0, 100):
        a_lo = pod("a-lo", "team-a", gpu=1, group="a", created=CREATED, preemptible=True,
                   priority=0, annotations=elastic)  # fmt: skip
        a_hi = pod("a-hi", "team-a", gpu=1, group="a", created=CREATED, preemptible=True,
                   priority=hi_priority, annotations=elastic,
                   spec={"nodeSelector": {"pool": "later"}})  # fmt: skip
        state = snapshot(nodes, [c0, b_wait, a_lo, a_hi], quotas, ON)
        result = filter_pod(
            state, state.pods["team-a/a-lo"], sorted(state.nodes), as_extender=True, now=NOW
        )
        assert result.quota_failures and "team-b/b-w" in result.quota_failures[0], hi_priority


def test_work_within_its_quota_s_min_holds_back_borrowers_of_any_priority() -> None:
    # As test_fair_sharing_divides_what_is_borrowed_among_jobs_of_a_priority (team-c
    # borrows all 4 GPUs, team-b's b-new at priority 100 would borrow one), but team-a is
    # guaranteed 1 GPU and its a-wait (priority 0) fits within that min: a guarantee, not
    # a borrower, so it holds b-new back whatever the priorities (its reclaim would take
    # the room back from b-new: reclaimWithinCohort Any).  With team-a's min at 0, a-wait
    # would borrow, and b-new gets its plan (the priority rule).
    running_c = [
        pod(f"c-{i}", "team-c", gpu=1, node=f"n{i + 1}", preemptible=True) for i in range(4)
    ]
    waiting = [
        pod("a-wait", "team-a", gpu=1, created=CREATED, preemptible=True, can_preempt=True),
        pod("b-new", "team-b", gpu=1, created=CREATED, preemptible=True, can_preempt=True,
            priority=100),
    ]  # fmt: skip
    for a_min, b_waits in (("1", True), ("0", False)):
        quotas = [
            quota("team-a", min={GPU: a_min}, max={GPU: "4"}),
            quota("team-b", min={GPU: "0"}, max={GPU: "4"}),
            quota("team-c", min={GPU: "0"}, max={GPU: "4"}),
        ]
        state = snapshot(NODES, [*running_c, *waiting], quotas, ON)
        decision = plan_job_preemption(state, "team-b/b-new", NOW)
        assert isinstance(decision, Refusal) is b_waits, (a_min, decision)


def test_an_elastic_job_running_its_minimum_holds_back_admission_but_no_plan() -> None:
    # team-c borrows 3 GPUs (n1-n3, share 3/4 = 0.75).  team-a (weight 4) runs grow-0 of
    # its elastic job on n4 (share 1/4 / 4 = 0.0625); grow-1, once admitted, would leave
    # its share at 2/4 / 4 = 0.125, below the 1/4 = 0.25 team-b's b-new would borrow to.
    # grow declares a minimum of 1 and runs it, so grow-1 waits for free room and evicts
    # no one (the elastic rule): it holds b-new back at admission (room that frees goes
    # to it first), but not from a plan, whose room grow-1 would not get either.  b-new
    # takes one of team-c's pods: team-c ends at 2/4 = 0.5, above b-new's 0.25, so the
    # gap narrows without reversing.  The control, grow declaring a minimum of 2: it runs
    # less than that, so it would preempt for grow-1 itself, and b-new gets no plan.
    running_c = [
        pod(f"c-{i}", "team-c", gpu=1, node=f"n{i + 1}", preemptible=True) for i in range(3)
    ]
    b_new = pod("b-new", "team-b", gpu=1, created=CREATED, preemptible=True, can_preempt=True)
    quotas = [*teams(weight_a="4"), quota("team-c", min={GPU: "0"}, max={GPU: "4"})]
    for minimum, planned in (("1", True), ("2", False)):
        grow = [
            pod(
                f"grow-{i}",
                "team-a",
                gpu=1,
                group="grow",
                created=CREATED,
                preemptible=True,
                can_preempt=True,
                annotations={keys.GANG_MIN_AVAILABLE_ANNOTATION: minimum},
                **({"node": "n4", "started": "2026-01-01T11:00:00Z"} if i == 0 else {}),
            )
            for i in range(2)
        ]
        state = snapshot(NODES, [*running_c, *grow, b_new], quotas, ON)
        assert any("team-a/grow" in failure for failure in admit(state, "team-b/b-new"))
        decision = plan_job_preemption(state, "team-b/b-new", NOW)
        if planned:
            assert isinstance(decision, PreemptionPlan), decision
            assert [v.pod.namespace for v in decision.victims] == ["team-c"]
        else:
            assert isinstance(decision, Refusal), decision
            assert "team-a/grow" in decision.reasons[0], decision
