"""The guarantee reserve: a quota's unused ``min`` is not lent to a job that saves nothing
while the quota submitted lately (issue 34: fewer never-saving borrowers taken back).
Expected results are derived by hand from the rule (docs/quotas-and-preemption.md,
"Guarantee reserve") in each test's comment.

The cluster: n1, n2, n3 of 8 GPUs (24).  team-a: min 8, max 24, runs a-0 (8 GPUs) on n1,
its whole min.  team-b: min 16, max 24; its b-0 (8 GPUs, created at noon) runs on n2, so 8
of its min are unused, and n3 is free.  team-a's a-more (8 GPUs) would borrow n3.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from base import keys
from base.resources import parse_quantity
from base.times import format_time
from extender.core.config import MusterArgs
from extender.core.effects import AssumeBound, apply
from extender.core.filter.starvation import starving_holds
from extender.core.filter.verb import filter_pod
from extender.core.objects import parse_pod
from extender.core.preemption.planner import Refusal, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
SAVES = {keys.CHECKPOINT_INTERVAL_ANNOTATION: "30"}
ONE_GPU = parse_quantity("1")


def cluster(
    *,
    argument: float = 60.0,
    annotation: str | None = None,
    more: dict[str, Any] | None = None,
    b_0: dict[str, Any] | None = None,
) -> ClusterState:
    notes = {keys.GUARANTEE_RESERVE_ANNOTATION: annotation} if annotation is not None else {}
    return snapshot(
        [node("n1", gpu=8), node("n2", gpu=8), node("n3", gpu=8)],
        [
            pod("a-0", "team-a", gpu=8, node="n1", preemptible=True),
            b_0 or pod("b-0", "team-b", gpu=8, node="n2", created="2026-01-01T12:00:00Z"),
            more or pod("a-more", "team-a", gpu=8, preemptible=True),
        ],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "24"}),
            quota("team-b", min={GPU: "16"}, max={GPU: "24"}, annotations=notes),
        ],
        MusterArgs(guaranteeReserveSeconds=argument),
    )


def quota_failures(state: ClusterState, key: str, now: float) -> tuple[str, ...]:
    return quota_failures_on(state, key, now, ["n3"])


def quota_failures_on(
    state: ClusterState, key: str, now: float, nodes: list[str] | None = None
) -> tuple[str, ...]:
    nodes = nodes or ["n1", "n2"]
    return filter_pod(state, state.pods[key], nodes, as_extender=True, now=now).quota_failures


def test_a_job_that_saves_nothing_does_not_borrow_a_guarantee_owed_lately() -> None:
    # 10 s after b-0 was created (within 60 s): free 8 GPUs (n3) less a-more's 8 leaves 0,
    # below the 8 team-b is owed (16 - 8): a-more, which declares no checkpoint, waits.
    state = cluster()
    failures = quota_failures(state, "team-a/a-more", NOON + 10)
    assert len(failures) == 1
    assert "owed to quota team-b" in failures[0] and "guaranteeReserveSeconds" in failures[0]
    assert "(8 nvidia.com/gpu of min unused" in failures[0]


def test_the_reserve_ends_its_seconds_after_the_owners_newest_pod() -> None:
    # b-0 created at noon, 60 s reserve: at 12:01:00 team-b is quiet, n3 is lent.
    state = cluster()
    assert quota_failures(state, "team-a/a-more", NOON + 59) != ()
    assert quota_failures(state, "team-a/a-more", NOON + 60) == ()


def test_a_job_that_saves_checkpoints_borrows_as_ever() -> None:
    # a-more declares a 30 s checkpoint interval: taken back, it loses at most 30 s.
    more = pod("a-more", "team-a", gpu=8, preemptible=True, annotations=SAVES)
    assert quota_failures(cluster(more=more), "team-a/a-more", NOON + 10) == ()


def test_without_the_argument_or_annotation_anyone_borrows() -> None:
    assert quota_failures(cluster(argument=0), "team-a/a-more", NOON + 10) == ()


def test_the_owners_annotation_wins_over_the_argument() -> None:
    # Argument off, team-b's annotation 30 s: reserved at +10 s, not at +30 s.
    state = cluster(argument=0, annotation="30")
    assert quota_failures(state, "team-a/a-more", NOON + 10) != ()
    assert quota_failures(state, "team-a/a-more", NOON + 30) == ()
    # Argument 60 s, annotation 0: team-b lends to anyone.
    assert quota_failures(cluster(annotation="0"), "team-a/a-more", NOON + 10) == ()


def test_free_room_beyond_what_is_owed_is_lent() -> None:
    # team-b's min is 8 here, all of it used by b-0: it is owed nothing, so n3 is free
    # beyond what is owed.
    state = snapshot(
        [node("n1", gpu=8), node("n2", gpu=8), node("n3", gpu=8)],
        [
            pod("a-0", "team-a", gpu=8, node="n1", preemptible=True),
            pod("b-0", "team-b", gpu=8, node="n2", created="2026-01-01T12:00:00Z"),
            pod("a-more", "team-a", gpu=8, preemptible=True),
        ],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "24"}),
            quota("team-b", min={GPU: "8"}, max={GPU: "24"}),
        ],
        MusterArgs(guaranteeReserveSeconds=60),
    )
    # team-b uses its min of 8: owed 0; free 8 - 8 = 0 >= 0: a-more borrows n3.
    assert quota_failures(state, "team-a/a-more", NOON + 10) == ()


def test_within_its_own_min_a_job_is_admitted_whatever_the_reserve() -> None:
    # a-0 is gone: a-more takes team-a to 8 of its min of 8, it borrows nothing.
    state = cluster()
    state.remove_pod("team-a/a-0", NOON)
    assert quota_failures(state, "team-a/a-more", NOON + 10) == ()


def test_the_planner_makes_no_borrowing_plan_for_a_job_the_reserve_holds_back() -> None:
    # The planner asks the same rule before it searches: no plan, the reserve's reason.
    more = pod("a-more", "team-a", gpu=8, preemptible=True, can_preempt=True)
    state = cluster(more=more)
    refusal = plan_job_preemption(state, "team-a/a-more", NOON + 10)
    assert isinstance(refusal, Refusal)
    assert any("guaranteeReserveSeconds" in reason for reason in refusal.reasons)


def test_a_newer_pod_of_the_owner_renews_the_reserve() -> None:
    # team-b's b-1 created at 12:00:50 and gone at once (a short job): the reserve runs to
    # 12:01:50, 60 s after the newest creation, whether or not the pod is still there.
    state = cluster()
    state.upsert_pod(parse_pod(pod("b-1", "team-b", gpu=8, created="2026-01-01T12:00:50Z")))
    state.remove_pod("team-b/b-1", NOON + 51)
    assert quota_failures(state, "team-a/a-more", NOON + 100) != ()
    assert quota_failures(state, "team-a/a-more", NOON + 110) == ()


def test_an_owner_with_work_waiting_keeps_its_reserve_while_it_waits() -> None:
    # team-b's b-1 (24 GPUs: no node holds it) waits from 12:00:00: the reserve runs for as
    # long as it waits, at 12:10:00 too; once it is gone, 60 s after its creation have
    # passed, so a-more borrows.
    state = cluster()
    state.upsert_pod(parse_pod(pod("b-1", "team-b", gpu=24, created="2026-01-01T12:00:00Z")))
    assert quota_failures(state, "team-a/a-more", NOON + 600) != ()
    state.remove_pod("team-b/b-1", NOON + 600)
    assert quota_failures(state, "team-a/a-more", NOON + 600) == ()


def test_a_job_the_reserve_holds_back_holds_no_room_as_starving() -> None:
    # starvationSeconds 5: a-more (created 11:59:00) starves from 11:59:05.  Without the
    # reserve it holds room at 12:00:10; with it, the room it would borrow is team-b's
    # until 12:01:00, so room held for it would stand idle: none, until the reserve ends.
    def holds(reserve: float, at: float) -> list[str]:
        more = pod("a-more", "team-a", gpu=8, preemptible=True, created="2026-01-01T11:59:00Z")
        state = cluster(argument=reserve, more=more)
        state.args = state.args.model_copy(update={"starvation_seconds": 5.0})
        return [hold.job for hold in starving_holds(state, at)]

    assert holds(0, NOON + 10) == ["team-a/a-more"]
    assert holds(60, NOON + 10) == []
    assert holds(60, NOON + 61) == ["team-a/a-more"]


def test_a_job_above_the_priority_of_running_borrowers_is_not_held_back() -> None:
    # team-c (min 0) borrows n1 with c-low (priority 0); team-b owes 8 (16 - b-0's 8),
    # reserved; n3 is free.  a-high (priority 100, min-0 team-a, no checkpoint): free 8
    # less its 8, plus c-low's 8 that team-b's reclaim would take before it (lower
    # priority first), is 8 >= 8: admitted.  a-low (priority 0): nothing of lower priority
    # runs, 0 < 8: it waits.
    def failures(name: str, priority: int) -> tuple[str, ...]:
        state = snapshot(
            [node("n1", gpu=8), node("n2", gpu=8), node("n3", gpu=8)],
            [
                pod("c-low", "team-c", gpu=8, node="n1", preemptible=True, priority=0),
                pod("b-0", "team-b", gpu=8, node="n2", created="2026-01-01T12:00:00Z"),
                pod(name, "team-a", gpu=8, preemptible=True, priority=priority),
            ],
            [
                quota("team-a", min={GPU: "0"}, max={GPU: "24"}),
                quota("team-b", min={GPU: "16"}, max={GPU: "24"}),
                quota("team-c", min={GPU: "0"}, max={GPU: "24"}),
            ],
            MusterArgs(guaranteeReserveSeconds=60),
        )
        return quota_failures(state, f"team-a/{name}", NOON + 10)

    assert failures("a-high", 100) == ()
    assert len(failures("a-low", 0)) == 1


@settings(max_examples=40, deadline=None)
@given(
    gaps=st.lists(st.integers(min_value=1, max_value=29), min_size=1, max_size=25),
    lifetimes=st.lists(st.integers(min_value=1, max_value=40), min_size=25, max_size=25),
)
def test_once_the_owner_is_back_it_never_takes_back_a_borrower_that_saves_nothing(
    gaps: list[int], lifetimes: list[int]
) -> None:
    # Two 8-GPU nodes, 1-GPU pods (no fragmentation).  team-a (min 0) always has a pod
    # asking, that saves nothing, bound wherever room is free once admitted; team-b (min
    # 8, reserve 30 s) has a 1-GPU job arriving after each gap (< 30 s, so its reserve
    # never lapses), living its lifetime.  By the rule, from team-b's first arrival on, a
    # borrower is admitted only while free room less its GPU stays at least what team-b is
    # owed (its 8 less its use; nothing of lower priority runs): so every later team-b job
    # finds a free GPU while team-b is within its min, and no plan takes team-a's work.
    # Its first arrival may need one (team-a borrowed all 16 while team-b was quiet).
    state = snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [],
        [
            quota("team-a", min={GPU: "0"}, max={GPU: "16"}),
            quota("team-b", min={GPU: "8"}, max={GPU: "16"}),
        ],
        MusterArgs(guaranteeReserveSeconds=30),
    )

    def free_node() -> str | None:
        return next((n for n in ("n1", "n2") if state.free_amount(n, GPU) > 0), None)

    def bind(key: str, now: float) -> None:
        where = free_node()
        assert where is not None
        apply(state, AssumeBound(state.pods[key], where, started=now))

    now, a_count, b_index, next_b = NOON, 0, 0, NOON + 5
    ends: dict[str, float] = {}
    taken_after_first = 0
    while b_index < len(gaps) or ends:
        stamp = format_time(now)
        for key in [key for key, end in ends.items() if end <= now]:
            state.remove_pod(key, now)
            del ends[key]
        if b_index < len(gaps) and now >= next_b:
            b = parse_pod(pod(f"b-{b_index}", "team-b", gpu=1, created=stamp))
            state.upsert_pod(b, now)
            within_min = state.ledger["team-b"].used.get(GPU, 0) < 8 * ONE_GPU
            if free_node() is None and within_min:
                # Reclaim: one of team-a's running pods goes (its newest).
                victim = max(
                    (p for p in state.pods.values() if p.namespace == "team-a" and p.node_name),
                    key=lambda p: p.start_or_created,
                )
                state.remove_pod(victim.key, now)
                taken_after_first += b_index > 0
            if free_node() is not None:
                bind(b.key, now)
                ends[b.key] = now + lifetimes[b_index]
            else:
                state.remove_pod(b.key, now)  # past its min, no room: it gives up
            b_index += 1
            if b_index < len(gaps):
                next_b = now + gaps[b_index]
        asking = f"team-a/a-{a_count}"
        if asking not in state.pods:
            a = pod(f"a-{a_count}", "team-a", gpu=1, preemptible=True, created=stamp)
            state.upsert_pod(parse_pod(a), now)
        if free_node() is not None and not quota_failures_on(state, asking, now):
            bind(asking, now)
            a_count += 1
        now += 1
    assert taken_after_first == 0


def test_a_plan_taking_part_of_its_own_quotas_work_borrows_only_as_admission_lends() -> None:
    # n1 runs team-a's a-0 (priority 10, within team-a's min of 8), n3 team-a's a-low
    # (priority 0, saves: it borrows n3 past the reserve).  a-hi (priority 100, saves
    # nothing) is within team-a's min only if a-0 and a-low both go (24 - 16 = 8 <= 8),
    # so the planner may take team-a's own work; the cheapest plan takes a-low alone and
    # leaves a-hi borrowing n3 (team-a at 16 of its min 8).  Once a-low is gone the
    # reserve reads: free 24 - (8 + 8 + a-hi's 8) = 0, no lower-priority borrower left,
    # below the 8 team-b is owed at +10 s: admission would not lend n3 to a-hi, so no
    # plan.  At +60 s team-b is quiet: the plan takes a-low.
    def state_at() -> ClusterState:
        return snapshot(
            [node("n1", gpu=8), node("n2", gpu=8), node("n3", gpu=8)],
            [
                pod("a-0", "team-a", gpu=8, node="n1", preemptible=True, priority=10),
                pod("b-0", "team-b", gpu=8, node="n2", created="2026-01-01T12:00:00Z"),
                pod("a-low", "team-a", gpu=8, node="n3", preemptible=True, annotations=SAVES),
                pod("a-hi", "team-a", gpu=8, priority=100, can_preempt=True),
            ],
            [
                quota("team-a", min={GPU: "8"}, max={GPU: "24"}),
                quota("team-b", min={GPU: "16"}, max={GPU: "24"}),
            ],
            MusterArgs(guaranteeReserveSeconds=60),
        )

    refusal = plan_job_preemption(state_at(), "team-a/a-hi", NOON + 10)
    assert isinstance(refusal, Refusal)
    assert any("owed to quota team-b" in reason for reason in refusal.reasons)
    assert refusal.retry_at == NOON + 60  # when team-b's reserve ends
    plan = plan_job_preemption(state_at(), "team-a/a-hi", NOON + 60)
    assert not isinstance(plan, Refusal)
    assert [victim.pod.key for victim in plan.victims] == ["team-a/a-low"]
