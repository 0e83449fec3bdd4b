"""The second walk, in the order of least work lost (issue 34, items 1 and 6).

The rule (docs/quotas-and-preemption.md, step 3 "Order" and the comparator): the planner
walks the candidates twice, in the victim order (among victims of one priority, the one
whose work began latest first: its start or its last written checkpoint) and in the
order of least work lost per accelerator freed (each victim's seconds since its last
save, counting the saves its ``muster.dev/checkpoint-interval-seconds`` implies, weighted
by its accelerators), and keeps the plan the comparator ranks better: the same victim
priority, no more victim pods, then less work lost.  Every figure below is worked out by
hand in its comment.
"""

from __future__ import annotations

import math
from typing import Any

from base import keys
from extender.core.config import MusterArgs
from extender.core.objects import PodInfo, parse_pod
from extender.core.preemption.cost import least_lost_first, unsaved_seconds
from extender.core.preemption.groups import Offer
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.preemption.policy import Admission, Rule
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
EVERY_TEN_MINUTES = {keys.CHECKPOINT_INTERVAL_ANNOTATION: "600"}


def borrower(name: str, node_name: str, started: str, *, gpu: int = 8, **notes: str) -> Any:
    return pod(
        name,
        "team-b",
        gpu=gpu,
        node=node_name,
        preemptible=True,
        started=started,
        annotations=notes,
    )


def parsed(manifest: dict[str, Any]) -> PodInfo:
    return parse_pod(manifest)


def test_unsaved_seconds_is_per_accelerator_and_counts_declared_saves() -> None:
    at = NOON + 300  # 12:05
    # 8 GPUs from 11:00, never saved: 3,900 s.  4 GPUs from 10:00 saving every 600 s:
    # the last save at 12:00 (10:00 + 12 x 600 s), 300 s.  Per GPU:
    # (8 x 3,900 + 4 x 300) / 12 = 32,400 / 12 = 2,700.
    big = parsed(borrower("big", "n1", "2026-01-01T11:00:00Z"))
    saving = parsed(borrower("saving", "n1", "2026-01-01T10:00:00Z", gpu=4, **EVERY_TEN_MINUTES))
    assert unsaved_seconds([big, saving], at) == 2_700
    assert unsaved_seconds([saving], at) == 300
    # Pods asking for no accelerator count one each: 3,900 s and 300 s, mean 2,100.
    cpu_old = parsed(
        pod("c1", "team-b", cpu="1", node="n1", preemptible=True, started="2026-01-01T11:00:00Z")
    )
    cpu_new = parsed(
        pod("c2", "team-b", cpu="1", node="n1", preemptible=True, started="2026-01-01T12:00:00Z")
    )
    assert unsaved_seconds([cpu_old, cpu_new], at) == 2_100
    assert unsaved_seconds([], at) == 0


def test_a_borrower_that_saves_on_its_interval_goes_before_a_newer_one_that_never_saved() -> None:
    # a-train needs one 8-GPU node; team-b borrows both.  b-old started 10:00 and saves
    # every 600 s: at 12:05 its last save was 12:00, it loses 8 x 300 = 2,400 GPU-s.
    # b-new started 11:30 and never saved: 8 x 2,100 = 16,800.  The victim order reads
    # starts only and offers b-new first (its work began later); both plans evict one pod
    # of priority 0, so the one losing less, b-old's, is kept.
    state = snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [
            borrower("b-old", "n1", "2026-01-01T10:00:00Z", **EVERY_TEN_MINUTES),
            borrower("b-new", "n2", "2026-01-01T11:30:00Z"),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [quota("team-a", min={GPU: "8"}, max={GPU: "16"}), quota("team-b", max={GPU: "16"})],
    )
    plan = plan_job_preemption(state, "team-a/a-train", NOON + 300)
    assert isinstance(plan, PreemptionPlan)
    assert [v.pod.key for v in plan.victims] == ["team-b/b-old"]
    assert dict(plan.placements) == {"team-a/a-train": "n1"}
    reason = plan.victims[0].reason
    assert "chosen over evicting team-b/b-new: less work lost" in reason
    assert reason.endswith("; it loses its work since 2026-01-01T12:00:00Z")


def test_the_walk_losing_less_never_wins_with_more_victim_pods() -> None:
    # a-train needs one 8-GPU node.  n1: b-big (8 GPUs from 11:58, never saved: at 12:01
    # it loses 8 x 180 = 1,440 GPU-s).  n2: b-s1 and b-s2, two jobs of 4 GPUs from 11:00
    # saving every 600 s (last save 12:00: 4 x 60 = 240 each, 480 together).  By work lost
    # per GPU (60 s against 180 s) the second walk takes b-s1 and b-s2: 480 GPU-s but two
    # pods.  The victim order takes b-big (its work began latest): one pod.  Victim pods
    # come before lost work in the comparator, so b-big goes.
    state = snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [
            borrower("b-big", "n1", "2026-01-01T11:58:00Z"),
            borrower("b-s1", "n2", "2026-01-01T11:00:00Z", gpu=4, **EVERY_TEN_MINUTES),
            borrower("b-s2", "n2", "2026-01-01T11:00:00Z", gpu=4, **EVERY_TEN_MINUTES),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [quota("team-a", min={GPU: "8"}, max={GPU: "16"}), quota("team-b", max={GPU: "16"})],
    )
    plan = plan_job_preemption(state, "team-a/a-train", NOON + 60)
    assert isinstance(plan, PreemptionPlan)
    assert [v.pod.key for v in plan.victims] == ["team-b/b-big"]
    assert "chosen over" not in plan.victims[0].reason


def _reordered(fair_sharing: bool, offers: list[Offer], state_pods: list[Any]) -> list[str]:
    state = snapshot(
        [node("n1", gpu=8)],
        state_pods,
        [quota("team-a"), quota("team-b"), quota("team-c")],
        MusterArgs(fairSharing=fair_sharing),
    )
    reorder = least_lost_first(state, "team-a", NOON)
    numbered = list(reorder(iter(offers)))
    assert [position for position, _offer in numbered] == list(range(len(offers)))
    return [
        f"{entry[2]}{' (shed)' if shed is not None else ''}"
        for _position, (entry, _admission, shed) in numbered
    ]


def test_the_order_sorts_each_stretch_and_keeps_what_the_victim_order_promises() -> None:
    # At noon, per GPU: b-1 (from 11:00, saving every 600 s) 0 s; c-1 (from 10:05, saving
    # every 600 s: last save 11:55) 300 s; b-2 (from 11:50, never saved) 600 s; b-3
    # (priority 5) and a-1 (the job's own quota) each in a stretch of their own.
    pods = [
        pod("b-1", "team-b", gpu=1, node="n1", preemptible=True, started="2026-01-01T11:00:00Z"),
        pod("b-2", "team-b", gpu=1, node="n1", preemptible=True, started="2026-01-01T11:50:00Z"),
        pod(
            "b-3",
            "team-b",
            gpu=1,
            node="n1",
            preemptible=True,
            priority=5,
            started="2026-01-01T11:59:00Z",
        ),
        pod("c-1", "team-c", gpu=1, node="n1", preemptible=True, started="2026-01-01T10:05:00Z"),
        pod("a-1", "team-a", gpu=1, node="n1", preemptible=True, started="2026-01-01T11:55:00Z"),
    ]
    pods[0]["metadata"]["annotations"].update(EVERY_TEN_MINUTES)
    pods[3]["metadata"]["annotations"].update(EVERY_TEN_MINUTES)
    state = snapshot([node("n1", gpu=8)], pods, [quota("team-a"), quota("team-b"), quota("team-c")])
    entry = state.victims.entries()
    reclaim: Admission = (math.inf, Rule.RECLAIM, None, 0.0)
    own: Admission = (10, Rule.LOWER_PRIORITY, None, 0.0)
    b2_pod = state.victims.unit_pods()["team-b/b-2"][0]
    # As a walk offers them: one pod an elastic job sheds first (here b-2's pod, though it
    # loses the most), then the other quotas' units of priority 0 latest start first, then
    # priority 5, then the job's own quota.
    offers: list[Offer] = [
        (entry["team-b/b-2"], reclaim, b2_pod),
        *((entry[job], reclaim, None) for job in ("team-b/b-2", "team-b/b-1", "team-c/c-1")),
        (entry["team-b/b-3"], reclaim, None),
        (entry["team-a/a-1"], own, None),
    ]
    # Without fair sharing: the stretch of priority 0 by seconds lost, 0, 300, 600 (the
    # shed pod first, as before).
    assert _reordered(False, offers, pods) == [
        "team-b/b-2 (shed)",
        "team-b/b-1",
        "team-c/c-1",
        "team-b/b-2",
        "team-b/b-3",
        "team-a/a-1",
    ]
    # With fair sharing the walk ranks quotas within a priority (team-b first here, as
    # offered): team-b's units stay before team-c's, sorted among themselves (0, 600).
    assert _reordered(True, offers, pods) == [
        "team-b/b-2 (shed)",
        "team-b/b-1",
        "team-b/b-2",
        "team-c/c-1",
        "team-b/b-3",
        "team-a/a-1",
    ]


def test_stretches_never_merge_across_priorities_or_sides() -> None:
    # Offers alternating between two priorities, and one of each side at the same
    # priority: no stretch holds two of them, so the order is kept exactly.
    pods = [
        pod("b-1", "team-b", gpu=1, node="n1", preemptible=True, started="2026-01-01T11:00:00Z"),
        pod(
            "b-2",
            "team-b",
            gpu=1,
            node="n1",
            preemptible=True,
            priority=1,
            started="2026-01-01T11:59:00Z",
        ),
        pod("a-1", "team-a", gpu=1, node="n1", preemptible=True, started="2026-01-01T11:59:30Z"),
    ]
    state = snapshot([node("n1", gpu=8)], pods, [quota("team-a"), quota("team-b")])
    entry = state.victims.entries()
    admission: Admission = (10, Rule.LOWER_PRIORITY, None, 0.0)
    order = ["team-b/b-1", "team-b/b-2", "team-b/b-1", "team-a/a-1", "team-b/b-1"]
    offers: list[Offer] = [(entry[job], admission, None) for job in order]
    assert _reordered(False, offers, pods) == order
    # Nothing offered, nothing numbered.
    assert list(least_lost_first(state, "team-a", NOON)(iter([]))) == []
