"""Notice until the next declared save (issue 34, items 1, 2 and 6).

The rule (docs/quotas-and-preemption.md, "Notice before eviction"): a victim whose pods
declare ``muster.dev/checkpoint-interval-seconds`` saves at its start plus each multiple
of the interval; it gets notice until 2 s (``SAVE_MARGIN_SECONDS``) after its next save,
when that is within its notice cap (its quota's ``muster.dev/max-preemption-notice-seconds``,
else ``maxPreemptionNoticeSeconds``, 0 by default), or the notice it declares if that is
longer.  Evicted then, it loses only the work since that save.  Each expectation below is
that arithmetic, by hand.
"""

from __future__ import annotations

from base import keys
from extender.core.config import MusterArgs
from extender.core.preemption.cost import LostWork, lost_work, next_save, save_notice
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z


def cluster(
    *,
    cap: str | None = "60",
    declared: str | None = None,
    interval: str = "600",
    started: str = "2026-01-01T10:00:00Z",
) -> ClusterState:
    """team-b's b-1 (8 GPUs, borrowed, started at ``started``, 10:00, saving every
    ``interval`` seconds from then, 600) on the one node, its quota's notice cap ``cap``;
    team-a's a-train (8 GPUs, within its min) reclaims it."""
    notes = {keys.CHECKPOINT_INTERVAL_ANNOTATION: interval}
    if declared is not None:
        notes[keys.PREEMPTION_NOTICE_ANNOTATION] = declared
    caps = {keys.MAX_PREEMPTION_NOTICE_ANNOTATION: cap} if cap is not None else {}
    return snapshot(
        [node("n1", gpu=8)],
        [
            pod(
                "b-1",
                "team-b",
                gpu=8,
                node="n1",
                preemptible=True,
                started=started,
                annotations=notes,
            ),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "8"}),
            quota("team-b", max={GPU: "8"}, annotations=caps),
        ],
        MusterArgs(reservationTimeoutSeconds=300),
    )


def test_the_next_save_is_the_next_multiple_of_the_interval_from_the_start() -> None:
    b1 = cluster().pods["team-b/b-1"]
    # From 10:00 every 600 s: at 11:59:30 the next save is 12:00; at 12:00 exactly, 12:10.
    assert next_save(b1, NOON - 30) == NOON
    assert next_save(b1, NOON) == NOON + 600
    # Before it starts (a clock behind): its first save, 10:10.
    assert next_save(b1, NOON - 7_200 - 5) == NOON - 7_200 + 600
    plain = cluster().pods["team-a/a-train"]
    assert next_save(plain, NOON) is None  # declares no interval


def test_a_victim_saving_within_the_cap_is_evicted_just_after_its_save() -> None:
    # At 11:59:30 its next save is at 12:00: 30 s away, plus the 2 s margin, 32 s, within
    # the cap of 60.  The reservation holds the timeout (300 s) plus 32 s.
    state = cluster()
    assert save_notice(state, state.pods["team-b/b-1"], NOON - 30) == (32, NOON)
    plan = plan_job_preemption(state, "team-a/a-train", NOON - 30)
    assert isinstance(plan, PreemptionPlan)
    (victim,) = plan.victims
    assert victim.notice_seconds == 32
    assert victim.reason.endswith(
        "; notice until just after its next save at 2026-01-01T12:00:00Z: "
        "it loses its work since 2026-01-01T12:00:00Z"
    )
    assert plan.reservation(NOON - 30, 300).expires == NOON - 30 + 332


def test_a_save_beyond_the_cap_or_with_no_cap_gives_no_notice() -> None:
    # At 11:50:30 its last save was 11:50 and the next is 12:00: 570 s + 2 s > 60.
    state = cluster()
    assert save_notice(state, state.pods["team-b/b-1"], NOON - 570) is None
    plan = plan_job_preemption(state, "team-a/a-train", NOON - 570)
    assert isinstance(plan, PreemptionPlan)
    assert plan.victims[0].notice_seconds == 0
    assert plan.victims[0].reason.endswith("; it loses its work since 2026-01-01T11:50:00Z")
    # No cap (the argument's default, 0): 32 s away is still too far.
    uncapped = cluster(cap=None)
    assert save_notice(uncapped, uncapped.pods["team-b/b-1"], NOON - 30) is None


def test_the_longer_of_the_declared_notice_and_the_save_s_wins() -> None:
    # Declaring 20 s: at 11:59:30 the save is 32 s away, longer: 32.  At 11:59:50 it is
    # 10 + 2 = 12 s away, shorter than 20: the declared 20 s, said as before.
    state = cluster(declared="20")
    far = plan_job_preemption(state, "team-a/a-train", NOON - 30)
    assert isinstance(far, PreemptionPlan)
    assert far.victims[0].notice_seconds == 32
    near = plan_job_preemption(state, "team-a/a-train", NOON - 10)
    assert isinstance(near, PreemptionPlan)
    assert near.victims[0].notice_seconds == 20
    assert near.victims[0].reason.endswith("; 20s notice to save its work")


def test_a_victim_with_no_more_than_the_margin_to_save_is_not_kept_waiting() -> None:
    # Started 11:59:00, saving every 30 s.  At 11:59:31 it saved 1 s ago (11:59:30): no
    # more than the 2 s margin to lose, so no notice, though its next save (12:00:00, 29
    # s + 2 s = 31 s away) is within the cap of 60.  At 11:59:33 it has 3 s to lose: 27 s
    # + 2 s = 29 s of notice, to its save at 12:00:00.
    state = cluster(interval="30", started="2026-01-01T11:59:00Z")
    b1 = state.pods["team-b/b-1"]
    assert save_notice(state, b1, NOON - 29) is None
    assert save_notice(state, b1, NOON - 27) == (29, NOON)


CAP = keys.MAX_PREEMPTION_NOTICE_ANNOTATION


def bound_not_started() -> ClusterState:
    """team-b's b-1 as in :func:`cluster`, but created at 11:40, pending until it was
    bound at 11:59:20 (its ``PodScheduled=True`` condition's time) and not yet seen
    started: the kubelet has not written ``startTime``."""
    victim = pod(
        "b-1",
        "team-b",
        gpu=8,
        node="n1",
        preemptible=True,
        created="2026-01-01T11:40:00Z",
        annotations={keys.CHECKPOINT_INTERVAL_ANNOTATION: "600"},
    )
    victim["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T11:59:20Z"}
        ],
    }
    return snapshot(
        [node("n1", gpu=8)],
        [victim, pod("a-train", "team-a", gpu=8, can_preempt=True)],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "8"}),
            quota("team-b", max={GPU: "8"}, annotations={CAP: "60"}),
        ],
        MusterArgs(reservationTimeoutSeconds=300),
    )


def test_a_victim_bound_but_not_yet_started_counts_its_saves_from_its_binding() -> None:
    # Counted from its creation (11:40), it would have saved at 11:50 and save next at
    # 12:00: at 11:59:30 that is 30 s + 2 s = 32 s away, within the cap of 60, and the
    # notice would wait for a save its pod, bound 10 s ago, never makes.  Counted from its
    # binding (11:59:20), its next save is 12:09:20, 590 s + 2 s away: beyond the cap, so
    # no notice; it is evicted at once and loses its 10 s since binding, 80 GPU-seconds.
    state = bound_not_started()
    b1 = state.pods["team-b/b-1"]
    assert b1.start_or_created == NOON - 40
    assert next_save(b1, NOON - 30) == NOON - 40 + 600
    assert save_notice(state, b1, NOON - 30) is None
    assert lost_work([b1], NOON - 30) == LostWork(80.0, 0.0)
    plan = plan_job_preemption(state, "team-a/a-train", NOON - 30)
    assert isinstance(plan, PreemptionPlan)
    (victim,) = plan.victims
    assert victim.notice_seconds == 0
    assert victim.reason.endswith("; it loses its work since 2026-01-01T11:59:20Z")


def test_a_started_pod_counts_from_its_start_whatever_its_binding_says() -> None:
    # The kubelet's startTime, once written, is the start: 10:00 here, not the binding.
    started = pod("b-1", "team-b", gpu=8, node="n1", started="2026-01-01T10:00:00Z")
    started["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T11:59:20Z"}
    ]
    state = snapshot([node("n1", gpu=8)], [started])
    assert state.pods["team-b/b-1"].start_or_created == NOON - 7_200
