"""Reborrow backoff: a job another quota took back waits before it borrows again (issue 34,
item 3: no admit, reclaim, re-admit loop).  Expected results are derived by hand from the
rule (docs/quotas-and-preemption.md, "Reborrow backoff") in each test's comment.

The cluster: n1, n2 of 8 GPUs.  team-a: min 8, max 16.  team-b: min 0 (every GPU it uses is
borrowed), max 16.  team-b's b-0 (started 09:00) runs on n1, b-1 (10:00) on n2; at noon
team-a's a-train (8 GPUs, within its min) reclaims, taking b-1, the newest borrower (least
work lost).  b-1 goes, a-train binds on n2, then b-0 completes and n1 is free; b-1's
controller re-creates it under the same name (the same job) and it asks for n1.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from base import keys
from extender.core.config import MusterArgs
from extender.core.effects import AssumeBound, HoldRoom, apply
from extender.core.filter.starvation import starving_holds
from extender.core.filter.verb import filter_pod
from extender.core.objects import parse_pod
from extender.core.placement.reborrow import reborrow_until
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState, Reservation
from tests.builders import hold_plan, node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
BASE = 60.0


def b_1(**extra: Any) -> dict[str, Any]:
    return pod("b-1", "team-b", gpu=8, preemptible=True, **extra)


def cluster(
    *, argument: float = BASE, annotation: str | None = None, b_min: str = "0"
) -> ClusterState:
    notes = {keys.REBORROW_BACKOFF_ANNOTATION: annotation} if annotation is not None else {}
    return snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [
            pod(
                "b-0", "team-b", gpu=8, node="n1", preemptible=True, started="2026-01-01T09:00:00Z"
            ),
            b_1(node="n2", started="2026-01-01T10:00:00Z"),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "16"}),
            quota("team-b", min={GPU: b_min}, max={GPU: "16"}, annotations=notes),
        ],
        MusterArgs(reborrowBackoffSeconds=argument),
    )


def reclaimed(state: ClusterState) -> ClusterState:
    """a-train's plan held at noon, b-1 gone, a-train bound on n2, b-0 completed, b-1
    re-created pending."""
    plan = plan_job_preemption(state, "team-a/a-train", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-b/b-1"]
    hold_plan(state, plan, NOON)
    state.remove_pod("team-b/b-1", NOON + 1)
    apply(state, AssumeBound(state.pods["team-a/a-train"], "n2"))
    state.remove_pod("team-b/b-0", NOON + 2)
    state.upsert_pod(parse_pod(b_1(created="2026-01-01T12:00:02Z")))
    return state


def quota_failures(state: ClusterState, key: str, now: float) -> tuple[str, ...]:
    result = filter_pod(state, state.pods[key], ["n1", "n2"], as_extender=True, now=now)
    return result.quota_failures


def test_without_a_backoff_the_job_borrows_again_at_once() -> None:
    # reborrowBackoffSeconds 0: b-1 re-created borrows n1 as before the rule.
    state = reclaimed(cluster(argument=0))
    assert quota_failures(state, "team-b/b-1", NOON + 3) == ()


def test_a_job_taken_back_waits_out_its_backoff_before_it_borrows() -> None:
    # Taken back once at noon, base 60 s: no borrowing before 12:01:00, then admitted.
    state = reclaimed(cluster())
    assert reborrow_until(state, "team-b/b-1", "team-b") == NOON + BASE
    failures = quota_failures(state, "team-b/b-1", NOON + 3)
    assert len(failures) == 1
    assert "team-b/b-1 was taken back by another quota 1 time;" in failures[0]
    assert "2026-01-01T12:01:00Z" in failures[0]
    assert quota_failures(state, "team-b/b-1", NOON + BASE - 1) == failures
    assert quota_failures(state, "team-b/b-1", NOON + BASE) == ()


def test_the_quota_annotation_wins_over_the_argument() -> None:
    # The quota says 0: no backoff, though the argument says 60.
    state = reclaimed(cluster(annotation="0"))
    assert quota_failures(state, "team-b/b-1", NOON + 3) == ()
    # And 10 where the argument says none: admitted from 12:00:10.
    state = reclaimed(cluster(argument=0, annotation="10"))
    assert quota_failures(state, "team-b/b-1", NOON + 9) != ()
    assert quota_failures(state, "team-b/b-1", NOON + 10) == ()


def test_within_its_min_the_job_is_admitted_whatever_its_backoff() -> None:
    # team-b min 8: at noon it used 16 (8 borrowed), so the reclaim still took b-1 (team-b
    # stays at its min with b-0).  Once b-0 completed, b-1 alone is within team-b's min:
    # no borrowing, no wait.
    state = reclaimed(cluster(b_min="8"))
    assert state.book.taken_back["team-b/b-1"].times == 1
    assert quota_failures(state, "team-b/b-1", NOON + 3) == ()


def test_a_plan_seen_again_counts_once_and_each_new_plan_doubles_the_wait() -> None:
    # The same plan held again while its victim still runs (its room extended, its
    # record read back): still once.
    state = cluster()
    plan = plan_job_preemption(state, "team-a/a-train", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    hold_plan(state, plan, NOON)
    apply(state, HoldRoom(state.reservations["team-a/a-train"]))
    assert state.book.taken_back["team-b/b-1"].times == 1
    state = reclaimed(cluster())
    # b-1 borrows n1 at 12:01 (its backoff over) and team-a's second job takes it back at
    # 12:02: the second time, so the wait is 60 * 2 = 120 s, until 12:04.
    apply(state, AssumeBound(state.pods["team-b/b-1"], "n1"))
    second = Reservation(
        "team-a/a-two", "team-a", {"team-a/a-two": "n1"}, ("team-b/b-1",), NOON + 120, NOON + 420
    )
    apply(state, HoldRoom(second))
    assert state.book.taken_back["team-b/b-1"].times == 2
    assert reborrow_until(state, "team-b/b-1", "team-b") == NOON + 120 + 2 * BASE


def test_the_wait_is_capped_by_backoff_max_seconds() -> None:
    # base 60 s, taken back four times, backoffMaxSeconds 300: 60 * 2**3 = 480 → 300.
    state = snapshot(
        [node("n1", gpu=8)],
        [pod("b-1", "team-b", gpu=8, node="n1", preemptible=True)],
        [quota("team-a", min={GPU: "8"}), quota("team-b", max={GPU: "8"})],
        MusterArgs(reborrowBackoffSeconds=BASE, backoffMaxSeconds=300),
    )
    for i in range(4):
        at = NOON + 10 * i
        apply(
            state,
            HoldRoom(Reservation(f"team-a/a-{i}", "team-a", {}, ("team-b/b-1",), at, at + 60)),
        )
    assert state.book.taken_back["team-b/b-1"].times == 4
    assert reborrow_until(state, "team-b/b-1", "team-b") == NOON + 30 + 300


def test_priority_preemption_inside_its_own_quota_does_not_count() -> None:
    # team-b's own higher-priority job takes b-1: nothing another quota is owed.
    state = reclaimed(cluster())
    state.upsert_pod(parse_pod(pod("b-9", "team-b", gpu=8, node="n1", preemptible=True)))
    own = Reservation(
        "team-b/b-hi", "team-b", {"team-b/b-hi": "n1"}, ("team-b/b-9",), NOON, NOON + 300
    )
    apply(state, HoldRoom(own))
    assert "team-b/b-9" not in state.book.taken_back


def test_the_planner_makes_no_borrowing_plan_for_a_job_in_its_backoff() -> None:
    # b-1 re-created while n1 is still busy with team-b's b-0 is a borrower; it may
    # preempt (can-preempt), but during its backoff it gets no plan, retried at 12:01.
    state = cluster()
    plan = plan_job_preemption(state, "team-a/a-train", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    hold_plan(state, plan, NOON)
    state.remove_pod("team-b/b-1", NOON + 1)
    apply(state, AssumeBound(state.pods["team-a/a-train"], "n2"))
    state.upsert_pod(parse_pod(b_1(can_preempt=True, priority=100)))
    refusal = plan_job_preemption(state, "team-b/b-1", NOON + 3)
    assert isinstance(refusal, Refusal), refusal
    assert any("taken back by another quota" in reason for reason in refusal.reasons)
    assert refusal.retry_at == NOON + BASE


def test_under_fair_sharing_a_job_in_its_backoff_holds_no_borrower_back() -> None:
    # n3 holds team-c's c-run (borrowed, started 08:00, so b-1 is still the reclaim's
    # victim: the newest, and team-b the lender furthest above its share).  After the
    # reclaim and b-0's completion, team-c's c-0 asks for the free n1: team-c's share
    # would be 16 of 24 GPUs, team-b's with b-1 8 of 24, lower, so without the backoff
    # c-0 waits for b-1 (fairSharing); with it, b-1 may not borrow, so c-0 is admitted.
    def state(backoff: float) -> ClusterState:
        made = snapshot(
            [node("n1", gpu=8), node("n2", gpu=8), node("n3", gpu=8)],
            [
                pod(
                    "b-0",
                    "team-b",
                    gpu=8,
                    node="n1",
                    preemptible=True,
                    started="2026-01-01T09:00:00Z",
                ),
                b_1(node="n2", started="2026-01-01T10:00:00Z"),
                pod(
                    "c-run",
                    "team-c",
                    gpu=8,
                    node="n3",
                    preemptible=True,
                    started="2026-01-01T08:00:00Z",
                ),
                pod("a-train", "team-a", gpu=8, can_preempt=True),
            ],
            [
                quota("team-a", min={GPU: "8"}, max={GPU: "24"}),
                quota("team-b", min={GPU: "0"}, max={GPU: "24"}),
                quota("team-c", min={GPU: "0"}, max={GPU: "24"}),
            ],
            MusterArgs(reborrowBackoffSeconds=backoff, fairSharing=True),
        )
        reclaimed(made)
        made.upsert_pod(parse_pod(pod("c-0", "team-c", gpu=8, preemptible=True)))
        return made

    held_back = quota_failures(state(0), "team-c/c-0", NOON + 3)
    assert len(held_back) == 1 and "job team-b/b-1 waits" in held_back[0], held_back
    assert quota_failures(state(BASE), "team-c/c-0", NOON + 3) == ()


def test_a_job_in_its_backoff_that_would_borrow_holds_no_room_as_starving() -> None:
    # starvationSeconds 5: the re-created b-1 (created 12:00:02) starves from 12:00:07.
    # Without the backoff it holds room then; with it, it may not borrow before 12:01, so
    # room held for it would stand idle: it holds none until its backoff ends.
    def holds(backoff: float, at: float) -> list[str]:
        state = reclaimed(cluster(argument=backoff))
        state.args = state.args.model_copy(update={"starvation_seconds": 5.0})
        return [hold.job for hold in starving_holds(state, at)]

    assert holds(0, NOON + 10) == ["team-b/b-1"]
    assert holds(BASE, NOON + 10) == []
    assert holds(BASE, NOON + BASE + 1) == ["team-b/b-1"]


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(st.floats(min_value=1, max_value=40), min_size=1, max_size=30),
    base=st.sampled_from([10.0, 30.0, 60.0]),
)
def test_no_job_is_admitted_reclaimed_and_readmitted_in_a_loop(
    arrivals: list[float], base: float
) -> None:
    # A borrower re-created at once after each reclaim, asking every second, against a
    # guaranteed team whose jobs arrive after the given gaps and reclaim it whenever it
    # runs.  By the rule, its k-th admission as a borrower (k >= 2) comes at least
    # base * 2**(k-2) after the (k-1)-th taking back, so k admissions need
    # base * (2**(k-1) - 1) seconds: over the horizon T, k <= 1 + log2(T / base + 1).
    state = snapshot(
        [node("n1", gpu=8)],
        [b_1()],
        [quota("team-a", min={GPU: "8"}, max={GPU: "8"}), quota("team-b", max={GPU: "8"})],
        MusterArgs(reborrowBackoffSeconds=base),
    )
    now, admitted, next_arrival, arrived = NOON, 0, NOON + arrivals[0], 0
    horizon = NOON + sum(arrivals) + 1
    while now < horizon:
        b = state.pods.get("team-b/b-1")
        if b is not None and b.node_name is None and not quota_failures(state, b.key, now):
            apply(state, AssumeBound(b, "n1", started=now))
            admitted += 1
        if now >= next_arrival and arrived < len(arrivals):
            a = parse_pod(pod(f"a-{arrived}", "team-a", gpu=8, can_preempt=True))
            state.upsert_pod(a)
            running = state.pods["team-b/b-1"].node_name is not None
            decision = plan_job_preemption(state, a.job, now)
            if running:
                # Within its min, it reclaims the borrower.
                assert isinstance(decision, PreemptionPlan), decision
                hold_plan(state, decision, now)
                state.remove_pod("team-b/b-1", now)
                state.upsert_pod(parse_pod(b_1()))  # its controller re-creates it at once
            state.remove_pod(a.key, now)  # a short job: done, or never needed to wait
            state.remove_reservation(a.job)
            arrived += 1
            if arrived < len(arrivals):
                next_arrival = now + arrivals[arrived]
        now += 1
    taken = state.book.taken_back.get("team-b/b-1")
    bound = 1
    while base * (2**bound - 1) <= horizon - NOON:
        bound += 1
    assert admitted <= bound, (admitted, taken)
