"""A pod on its way out for too long counts as staying (issue 34, item 5).

The rule (docs/quotas-and-preemption.md, "Pods on their way out"): a terminating pod counts
as leaving, its room free for a plan, only until ``stuckTerminatingSeconds`` past its
deletion deadline (``metadata.deletionTimestamp``, which already includes its grace
period).  After that the state counts it as staying: its room is taken, it is nobody's
victim on its way out, and a job whose victim it was is no longer in flight because of it.

The cluster in every test, worked by hand:

- two nodes of 8 GPUs, n1 and n2;
- quota team-a (min 8, max 16 GPUs) and quota team-b (min 0, max 16): every GPU team-b
  uses is borrowed, so team-a, within its min, may reclaim it (reclaimWithinCohort Any,
  the default);
- team-b runs b-old (8 GPUs) on n1, terminating with deadline D = 12:00:00, and b-new
  (8 GPUs) on n2;
- team-a's a-train asks for 8 GPUs and may preempt.
"""

from __future__ import annotations

from typing import Any

from extender.core.config import MusterArgs
from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.preemption.search import FITS_ALREADY
from extender.core.requeue import jobs_to_replan
from extender.core.state import ClusterState
from extender.core.whatif import run_simulation
from tests.builders import leaving, node, pod, quota, snapshot

DEADLINE = 1_767_268_800.0  # 2026-01-01T12:00:00Z, b-old's deletionTimestamp
MARGIN = 60.0  # stuckTerminatingSeconds, the default
JOB = "team-a/a-train"


def b_old(marked_for: str | None = None) -> dict[str, Any]:
    made = pod("b-old", "team-b", gpu=8, node="n1", preemptible=True)
    if marked_for is not None:
        made = leaving(made, marked_for, "terminating")  # marked, and deleted at D
    made["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return made


def cluster(victim: dict[str, Any]) -> ClusterState:
    return snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [
            victim,
            pod("b-new", "team-b", gpu=8, node="n2", preemptible=True),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [
            quota("team-a", min={"nvidia.com/gpu": "8"}, max={"nvidia.com/gpu": "16"}),
            quota("team-b", max={"nvidia.com/gpu": "16"}),
        ],
        MusterArgs(),
    )


def test_the_deletion_deadline_is_read_from_the_pod() -> None:
    assert parse_pod(b_old()).deletion_deadline == DEADLINE
    assert parse_pod(pod("p", node="n1")).deletion_deadline is None


def test_within_the_margin_a_terminating_pod_is_still_leaving() -> None:
    # At D + 30 s, b-old still counts as leaving: in the plan's view n1 is free, so the job
    # fits without evicting anything, and the planner says so instead of evicting b-new.
    state = cluster(b_old())
    now = DEADLINE + MARGIN / 2
    assert state.expire_departures(now) == []
    assert [p.key for p in state.leaving()] == ["team-b/b-old"]
    decision = plan_job_preemption(state, JOB, now)
    assert isinstance(decision, Refusal) and decision.reasons == (FITS_ALREADY,)


def test_past_the_margin_its_room_counts_as_taken_and_the_plan_looks_elsewhere() -> None:
    # At D + 61 s, b-old is stuck: it stays, so n1 is full; the only room is n2, where
    # b-new borrows: the plan evicts b-new and places a-train on n2.
    state = cluster(b_old())
    now = DEADLINE + MARGIN + 1
    assert state.expire_departures(now) == ["team-b/b-old"]
    assert state.leaving() == []
    assert state.expire_departures(now + 10) == []  # once is enough
    decision = plan_job_preemption(state, JOB, now)
    assert isinstance(decision, PreemptionPlan)
    assert [v.pod.key for v in decision.victims] == ["team-b/b-new"]
    assert dict(decision.placements) == {"team-a/a-train": "n2"}


def test_a_stuck_victim_no_longer_holds_its_job_in_flight() -> None:
    # b-old is marked for a-train and terminating.  Until D + 60 s a-train is in flight (its
    # victim is still leaving) and is not planned again; after, b-old is nobody's victim on
    # its way out, and a-train is planned with it staying: b-new goes.
    state = cluster(b_old(marked_for=JOB))
    before = plan_job_preemption(state, JOB, DEADLINE + 1)
    assert isinstance(before, Refusal)
    assert "victims marked for it are still leaving" in before.reasons[0]
    assert state.members.marked_victims(JOB) == {"team-b/b-old"}
    now = DEADLINE + MARGIN + 1
    state.expire_departures(now)
    assert not state.members.marked_victims(JOB)
    after = plan_job_preemption(state, JOB, now)
    assert isinstance(after, PreemptionPlan)
    assert [v.pod.key for v in after.victims] == ["team-b/b-new"]


def test_a_stuck_pod_updated_or_removed() -> None:
    # A status update of a stuck pod keeps it stuck; once it is gone it is forgotten.
    state = cluster(b_old())
    state.expire_departures(DEADLINE + MARGIN + 1)
    state.upsert_pod(parse_pod(b_old()))
    assert state.leaving() == []
    state.remove_pod("team-b/b-old")
    assert "team-b/b-old" not in state.members.stuck


def test_the_margin_is_an_argument() -> None:
    # With stuckTerminatingSeconds 0, b-old is stuck one second past its deadline.
    state = cluster(b_old())
    state.args = MusterArgs(stuckTerminatingSeconds=0)
    assert state.expire_departures(DEADLINE + 1) == ["team-b/b-old"]


def test_simulate_says_which_pods_it_counts_as_staying() -> None:
    # simulate at D + 61 s: b-old stuck, so a-train evicts b-new and is placed on n2.
    state = cluster(b_old())
    result = run_simulation(state, DEADLINE + MARGIN + 1)
    assert result.placements == {JOB: "n2"}
    assert [eviction.pod for eviction in result.evictions] == ["team-b/b-new"]
    assert any("team-b/b-old has been terminating" in note for note in result.notes)


def test_the_jobs_planned_again_are_those_still_waiting() -> None:
    # a-train is parked (kube-scheduler found it unschedulable), pending with no
    # reservation: the PostFilter plans it again once b-old is stuck.  b-new runs and b-old
    # terminates: neither is planned; a pod kube-scheduler has not parked is not either.
    state = cluster(b_old())
    assert jobs_to_replan(state, ["team-a/a-train", "team-b/b-new", "team-b/b-old"]) == [JOB]
    assert jobs_to_replan(state, []) == []
