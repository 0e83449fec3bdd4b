"""The job-level preemption planner: policies, gangs, minimisation, refusals."""

from __future__ import annotations

from typing import Any

from base import keys
from extender.core.config import MusterArgs
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"


def two_teams(**a_annotations: str) -> list[dict[str, Any]]:
    return [
        quota("team-a", min={GPU: "16"}, max={GPU: "32"}, annotations=a_annotations),
        quota("team-b", min={GPU: "0"}, max={GPU: "32"}),
    ]


def trainer(name: str, gpu: int = 8, group: str = "train", **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("preemptible", False)
    kwargs.setdefault("can_preempt", True)
    return pod(name, "team-a", gpu=gpu, group=group, created="2026-01-01T11:00:00Z", **kwargs)


def filler(name: str, node_name: str, minute: int, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("namespace", "team-b")
    kwargs.setdefault("gpu", 8)
    kwargs.setdefault("preemptible", True)
    started = f"2026-01-01T10:{minute:02d}:00Z"
    created = kwargs.pop("created", started)
    return pod(name, node=node_name, created=created, started=started, **kwargs)


def plan(snap: ClusterState, job: str = "team-a/train") -> PreemptionPlan:
    decision = plan_job_preemption(snap, job, NOW)
    assert isinstance(decision, PreemptionPlan), decision
    return decision


def refusal(snap: ClusterState, job: str = "team-a/train") -> Refusal:
    decision = plan_job_preemption(snap, job, NOW)
    assert isinstance(decision, Refusal), decision
    return decision


def victims(decision: PreemptionPlan) -> list[str]:
    return sorted(v.pod.key for v in decision.victims)


def full_cluster(**a_annotations: str) -> list[dict[str, Any]]:
    return [filler(f"b-{i}", f"n{i}", minute=5 * i) for i in range(4)]


NODES = [node(f"n{i}") for i in range(4)]


def test_reclaims_most_recently_started_borrowers_and_places_every_pod() -> None:
    snap = snapshot(NODES, [*full_cluster(), trainer("t-0"), trainer("t-1")], two_teams())
    decision = plan(snap)
    assert victims(decision) == ["team-b/b-2", "team-b/b-3"]
    assert sorted(decision.placements) == ["team-a/t-0", "team-a/t-1"]
    assert sorted(decision.placements.values()) == ["n2", "n3"]


def test_no_eviction_when_the_whole_job_cannot_fit() -> None:
    pods = [*full_cluster(), *(trainer(f"t-{i}") for i in range(5))]
    quotas = [quota("team-a", min={GPU: "40"}, max={GPU: "40"}), quota("team-b", max={GPU: "32"})]
    decision = refusal(snapshot(NODES, pods, quotas))
    assert "room for 4 of its 5 unplaced pods" in decision.reasons[0]


def test_non_preemptible_pods_are_never_victims() -> None:
    pods = [
        filler("b-0", "n0", 1, preemptible=False),
        filler("b-1", "n1", 2),
        trainer("t-0"),
        trainer("t-1"),
    ]
    decision = refusal(snapshot(NODES[:2], pods, two_teams()))
    assert "room for 1 of its 2" in decision.reasons[0]


def test_victims_without_label_follow_disable_default_preemptible() -> None:
    pods = [filler("b-0", "n0", 1, preemptible=None), trainer("t-0", group="solo")]
    assert isinstance(refusal(snapshot(NODES[:1], pods, two_teams()), "team-a/solo"), Refusal)
    koordinator = MusterArgs(disableDefaultPreemptible=False)
    decision = plan(snapshot(NODES[:1], pods, two_teams(), koordinator), "team-a/solo")
    assert victims(decision) == ["team-b/b-0"]


def test_a_victim_gang_is_evicted_whole() -> None:
    # b's gang holds n0 and n1; a solo b pod holds n2. The trainer needs one node.  The
    # gang saved a minute ago: it loses 2 x 8 x 60 GPU-s, the solo pod all it did since
    # 10:01, so no plan sparing the gang loses less.
    saved = {keys.LAST_CHECKPOINT_ANNOTATION: "2027-01-15T07:59:00Z"}
    pods = [
        filler("g-0", "n0", 30, group="gang", annotations=saved),
        filler("g-1", "n1", 31, group="gang", annotations=saved),
        filler("s-0", "n2", 1),
        trainer("t-0", group="one"),
    ]
    decision = plan(snapshot(NODES[:3], pods, two_teams()), "team-a/one")
    # the gang's unsaved work began latest, so it goes first; its whole gang goes with it
    assert victims(decision) == ["team-b/g-0", "team-b/g-1"]
    assert {v.job for v in decision.victims} == {"team-b/gang"}


def test_minimisation_spares_victims_that_are_not_needed() -> None:
    # Order by start: b-3 (newest, n3, 2 GPUs) is tried before b-0 (n0, 8 GPUs).
    pods = [
        filler("b-0", "n0", 1),
        filler("b-3", "n3", 50, gpu=2),
        trainer("t-0", group="one"),
    ]
    nodes = [node("n0"), node("n3")]
    nodes[1]["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    decision = plan(snapshot(nodes, pods, two_teams()), "team-a/one")
    assert victims(decision) == ["team-b/b-0"]


def test_within_quota_lower_priority_and_newer_equal() -> None:
    quotas = [quota("team-a", min={GPU: "8"}, max={GPU: "8"})]
    pods = [
        filler("low", "n0", 1, namespace="team-a", priority=5),
        trainer("t-0", group="one", priority=10, preemptible=True),
    ]
    decision = plan(snapshot(NODES[:1], pods, quotas), "team-a/one")
    assert victims(decision) == ["team-a/low"]
    assert "lower priority (5 < 10)" in decision.victims[0].reason

    equal = [
        filler("eq", "n0", 1, namespace="team-a", priority=10, created="2026-01-01T12:00:00Z"),
        trainer("t-0", group="one", priority=10, preemptible=True),
    ]
    assert isinstance(refusal(snapshot(NODES[:1], equal, quotas), "team-a/one"), Refusal)
    newer = [
        quota(
            "team-a",
            min={GPU: "8"},
            max={GPU: "8"},
            annotations={keys.WITHIN_QUOTA_ANNOTATION: "LowerOrNewerEqualPriority"},
        )
    ]
    decision = plan(snapshot(NODES[:1], equal, newer), "team-a/one")
    assert victims(decision) == ["team-a/eq"]


def test_quota_room_is_made_by_evicting_own_lower_priority_pods_anywhere() -> None:
    # team-a is at its max through a preemptible pod on n0; n1 is free. Evicting the
    # pod on n0 gives quota room even though the job then runs on n1.
    quotas = [quota("team-a", min={GPU: "8"}, max={GPU: "8"})]
    pods = [
        filler("low", "n0", 1, namespace="team-a", priority=0),
        trainer("t-0", group="one", priority=10, preemptible=True),
    ]
    decision = plan(snapshot(NODES[:2], pods, quotas), "team-a/one")
    assert victims(decision) == ["team-a/low"]


def test_reclaim_never_and_borrow_policies() -> None:
    pods = [*full_cluster(), trainer("t-0"), trainer("t-1")]
    never = two_teams(**{keys.RECLAIM_WITHIN_COHORT_ANNOTATION: "Never"})
    assert isinstance(refusal(snapshot(NODES, pods, never)), Refusal)

    # team-a with min 0 borrows: needs borrowWithinCohort and lower-priority victims.
    def borrowing(**annotations: str) -> list[dict[str, Any]]:
        return [
            quota("team-a", min={GPU: "0"}, max={GPU: "32"}, annotations=annotations),
            quota("team-b", min={GPU: "0"}, max={GPU: "32"}),
        ]

    prioritized = [
        *full_cluster(),
        trainer("t-0", priority=100, preemptible=True),
        trainer("t-1", priority=100, preemptible=True),
    ]
    assert isinstance(refusal(snapshot(NODES, prioritized, borrowing())), Refusal)
    allow = {keys.BORROW_WITHIN_COHORT_ANNOTATION: "LowerPriority"}
    assert len(plan(snapshot(NODES, prioritized, borrowing(**allow))).victims) == 2
    capped = allow | {keys.MAX_PRIORITY_THRESHOLD_ANNOTATION: "-1"}
    assert isinstance(refusal(snapshot(NODES, prioritized, borrowing(**capped))), Refusal)


def test_reclaim_never_pushes_a_quota_below_its_min() -> None:
    # team-b has min 24 and uses 32: only one of its 8-GPU pods may go.
    quotas = [
        quota("team-a", min={GPU: "16"}, max={GPU: "32"}),
        quota("team-b", min={GPU: "24"}, max={GPU: "32"}),
    ]
    pods = [*full_cluster(), trainer("t-0"), trainer("t-1")]
    decision = refusal(snapshot(NODES, pods, quotas))
    assert any("would fall below its min" in reason for reason in decision.reasons)
    one = plan(snapshot(NODES, [*full_cluster(), trainer("t-0")], quotas))
    assert victims(one) == ["team-b/b-3"]


def test_refusals_name_their_reason() -> None:
    base = [*full_cluster()]
    cannot = refusal(snapshot(NODES, [*base, trainer("t-0", can_preempt=None)], two_teams()))
    assert "may not trigger preemption" in cannot.reasons[0]
    never = trainer("t-0", spec={"preemptionPolicy": "Never"})
    assert "may not trigger" in refusal(snapshot(NODES, [*base, never], two_teams())).reasons[0]
    waiting = trainer("t-0", annotations={keys.GANG_MIN_AVAILABLE_ANNOTATION: "3"})
    assert (
        "only 1 of the job's min-available 3"
        in refusal(snapshot(NODES, [*base, waiting], two_teams())).reasons[0]
    )
    spread = trainer("t-0", spec={"topologySpreadConstraints": [{"maxSkew": 1}]})
    assert "cannot simulate" in refusal(snapshot(NODES, [*base, spread], two_teams())).reasons[0]
    too_many = [*base, *(trainer(f"t-{i}") for i in range(3))]  # 24 non-preemptible > min 16
    assert (
        "non-preemptible nvidia.com/gpu 24 would exceed min 16"
        in refusal(snapshot(NODES, too_many, two_teams())).reasons[0]
    )


def test_in_flight_job_is_not_planned_again() -> None:
    snap = snapshot(NODES, [*full_cluster(), trainer("t-0"), trainer("t-1")], two_teams())
    decision = plan(snap)
    snap.add_reservation(decision.reservation(NOW, 300))
    # its pods now hold reserved room; nothing of the job is left to place
    assert "in flight" in refusal(snap).reasons[0]
    assert isinstance(plan_job_preemption(snap, "team-a/train", NOW + 10), Refusal)
    snap.expire_reservations(NOW + 301)
    assert isinstance(plan_job_preemption(snap, "team-a/train", NOW + 301), PreemptionPlan)


def test_reserved_room_and_promised_victims_are_not_reused() -> None:
    pods = [*full_cluster(), trainer("t-0"), trainer("t-1"), trainer("u-0", group="other")]
    quotas = [quota("team-a", min={GPU: "32"}, max={GPU: "32"}), quota("team-b", max={GPU: "32"})]
    snap = snapshot(NODES, pods, quotas)
    first = plan(snap)
    snap.add_reservation(first.reservation(NOW, 300))
    second = plan(snap, "team-a/other")
    assert set(victims(second)).isdisjoint(victims(first))
    assert set(second.placements.values()).isdisjoint(first.placements.values())


def test_planning_is_deterministic() -> None:
    def build() -> ClusterState:
        return snapshot(NODES, [*full_cluster(), trainer("t-0"), trainer("t-1")], two_teams())

    assert plan(build()) == plan(build())


def test_a_running_pod_whose_quota_label_is_refused_counts_in_its_namespace_s_quota() -> None:
    # "lost" names a quota that does not exist: its own job would be refused, but the pod
    # is never charged to nothing (docs/security.md): it counts in team-b, its namespace's
    # quota, as a preemptible pod.  team-b (min 0) borrows all 8 GPUs of n0, so team-a's
    # trainer (8 GPUs, within team-a's min of 16) reclaims them: "lost" is the victim.
    pods = [
        pod("lost", "team-b", gpu=8, node="n0", quota="no-such-quota", preemptible=True),
        trainer("t-0", group="one"),
    ]
    snap = snapshot(NODES[:1], pods, two_teams())
    assert snap.free_on("n0")["nvidia.com/gpu"] == 0
    assert snap.charged_to(snap.pods["team-b/lost"]) == "team-b"
    assert snap.ledger["team-b"].used["nvidia.com/gpu"] == 8000
    decision = plan_job_preemption(snap, "team-a/one", NOW)
    assert isinstance(decision, PreemptionPlan)
    assert [v.pod.key for v in decision.victims] == ["team-b/lost"]
    snap.remove_pod("team-b/lost")
    assert snap.free_on("n0")["nvidia.com/gpu"] == 8000
