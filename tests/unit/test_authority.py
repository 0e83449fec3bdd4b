"""One preemption authority: which pods Muster governs, the preempt verb's answer, and
kube-scheduler's own preemption seen from the cluster (docs/design.md, the last paragraph of
"Job-level preemption")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from base import keys
from extender.core.authority import (
    SchedulerPreemption,
    governing_reason,
    hold_for_scheduler_preemption,
    scheduler_preemption,
)
from extender.core.config import MusterArgs
from extender.core.effects import apply
from extender.core.filter.nodes import filter_nodes
from extender.core.objects import parse_pod
from extender.core.preemption.eligibility import ready_to_plan
from extender.core.preemption.guard import guard_scheduler_preemption
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.reservations import reserved_by_muster
from extender.core.state import ClusterState, Reservation
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOW = 1_800_000_000.0
SCHEDULER_MESSAGE = "default-scheduler: preempting to accommodate a higher priority pod"


def hold_room(snap: ClusterState, job: str, now: float) -> SchedulerPreemption | None:
    """Decide whether to hold room for kube-scheduler's preemption, and apply it."""
    decided = hold_for_scheduler_preemption(snap, job, now)
    if decided is None:
        return None
    apply(snap, decided[1])
    return decided[0]


def preempted(manifest: dict[str, Any], message: str = SCHEDULER_MESSAGE) -> dict[str, Any]:
    """``manifest`` as kube-scheduler leaves a victim: DisruptionTarget, then deleted."""
    manifest["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": message,
        }
    ]
    manifest["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:05Z"
    return manifest


def nominated(manifest: dict[str, Any], node_name: str) -> dict[str, Any]:
    manifest["status"]["nominatedNodeName"] = node_name
    return manifest


# ---- which pods Muster governs ------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "why"),
    [
        (pod("p", "ops", group="g"), "gang ops/g"),
        (pod("p", "ops", quota="team-a"), keys.QUOTA_NAME_LABEL),
        (pod("p", "ops", quota="missing"), keys.QUOTA_NAME_LABEL),
        (pod("p", "ops", preemptible=True), keys.PREEMPTIBLE_LABEL),
        (pod("p", "ops", preemptible=False), keys.PREEMPTIBLE_LABEL),
        (pod("p", "ops", can_preempt=False), keys.CAN_PREEMPT_LABEL),
        (pod("p", "team-a"), "its namespace has quota team-a"),
    ],
)
def test_muster_governs_pods_of_gangs_quotas_and_its_labels(
    manifest: dict[str, Any], why: str
) -> None:
    snap = snapshot([node("n0")], [], [quota("team-a", max={GPU: "8"})])
    reason = governing_reason(snap, parse_pod(manifest))
    assert reason is not None and why in reason


def test_a_plain_pod_outside_every_quota_is_kube_schedulers() -> None:
    snap = snapshot([node("n0")], [], [quota("team-a", max={GPU: "8"})])
    plain = parse_pod(pod("p", "ops", priority=1000))
    assert governing_reason(snap, plain) is None
    # ... unless every pod may trigger Muster's preemption (Koordinator's default) ...
    everyone = snapshot([node("n0")], [], [], MusterArgs(disableDefaultTriggerPreemption=False))
    assert governing_reason(everyone, plain) == "it may trigger Muster's preemption"
    # ... or an ElasticQuota named "default" takes the pods that name no quota.
    with_default = snapshot([node("n0")], [], [quota("default", namespace="x", max={GPU: "8"})])
    assert governing_reason(with_default, plain) is not None


# ---- the preempt verb ----------------------------------------------------------------


def single_preemptor_cluster() -> tuple[Any, Any]:
    """Issue 17's cluster: two nodes, each running one 8-GPU preemptible pod of quota
    team-a (priorities 1 and 50); a new 8-GPU pod of team-a with priority 100."""
    snap = snapshot(
        [node("n0"), node("n1")],
        [
            pod("low", "team-a", gpu=8, node="n0", preemptible=True, priority=1),
            pod("mid", "team-a", gpu=8, node="n1", preemptible=True, priority=50),
        ],
        [quota("team-a", max={GPU: "16"})],
    )
    preemptor = pod("new", "team-a", gpu=8, preemptible=True, can_preempt=True, priority=100)
    snap.upsert_pod(parse_pod(preemptor))
    return snap, parse_pod(preemptor)


def test_a_governed_preemptor_gets_no_victims_and_goes_to_the_postfilter() -> None:
    snap, preemptor = single_preemptor_cluster()
    # kube-scheduler's dry run proposes the priority-1 pod; it would delete it unmarked.
    result = guard_scheduler_preemption(snap, preemptor, {"n0": ["team-a/low"]})
    assert result.victims == {}
    assert result.hand_to_postfilter
    assert result.notes[0].startswith("Muster preempts for team-a/new itself")
    # The PostFilter plans at once (a job of one is complete), and picks the same one
    # victim kube-scheduler would have: withinQuota LowerPriority, lowest priority first.
    assert ready_to_plan(snap, preemptor.job, NOW)
    plan = plan_job_preemption(snap, preemptor.job, NOW)
    assert isinstance(plan, PreemptionPlan)
    assert [v.pod.key for v in plan.victims] == ["team-a/low"]


def test_a_gang_pod_gets_no_victims_even_outside_every_quota() -> None:
    snap = snapshot(
        [node("n0")], [pod("x", "ops", gpu=8, node="n0", priority=0)], [quota("team-a")]
    )
    gang_pod = parse_pod(pod("g-0", "ops", gpu=8, group="g", priority=100))
    result = guard_scheduler_preemption(snap, gang_pod, {"n0": ["ops/x"]})
    assert result.victims == {} and result.hand_to_postfilter


def test_an_ungoverned_preemptor_keeps_only_ungoverned_victims_where_they_make_room() -> None:
    # ops has no quota: its pods are kube-scheduler's.  n0 runs two ungoverned 4-GPU pods;
    # n1 one ungoverned 4-GPU pod beside a preemptible 4-GPU pod of team-a; n2 an
    # ungoverned pod beside 4 GPUs held for team-a's in-flight job.
    snap = snapshot(
        [node("n0"), node("n1"), node("n2")],
        [
            pod("x-0", "ops", gpu=4, node="n0", priority=0),
            pod("x-1", "ops", gpu=4, node="n0", priority=0),
            pod("x-2", "ops", gpu=4, node="n1", priority=0),
            pod("b-0", "team-a", gpu=4, node="n1", preemptible=True, priority=0),
            pod("x-3", "ops", gpu=4, node="n2", priority=0),
            pod("a-held", "team-a", gpu=4, priority=0),
            preempted(pod("gone", "ops", gpu=4, node="n2", priority=0)),
        ],
        [quota("team-a", max={GPU: "16"})],
    )
    snap.add_reservation(
        Reservation("team-a/a-held", "team-a", {"team-a/a-held": "n2"}, (), NOW, NOW + 300)
    )
    system = parse_pod(pod("critical", "kube-system", gpu=8, priority=2_000_000_000))
    assert governing_reason(snap, system) is None
    proposed = {
        "n0": ["ops/x-0", "ops/x-1"],  # both ungoverned: kept, and they free 8 GPUs
        "n1": ["ops/x-2", "team-a/b-0"],  # b-0 is Muster's: dropped; x-2 alone frees 4
        "n2": ["ops/x-3", "ops/gone"],  # gone is on its way out; x-3 frees 4 of 4 held
        "n9": ["ops/x-0"],  # a node Muster does not know
    }
    result = guard_scheduler_preemption(snap, system, proposed)
    assert result.victims == {"n0": ["ops/x-0", "ops/x-1"]}
    assert not result.hand_to_postfilter
    notes = "\n".join(result.notes)
    assert "n1: victim team-a/b-0 dropped: Muster governs it" in notes
    assert "n1: the victims left do not make room" in notes
    assert "n2: victim ops/gone dropped: already on its way out" in notes
    assert "n2: the victims left do not make room" in notes
    assert "n9: unknown node" in notes


# ---- kube-scheduler's own preemption, seen from the cluster ---------------------------


def test_a_job_kube_scheduler_preempts_for_is_in_flight_and_keeps_its_room() -> None:
    # Issue 17's race: kube-scheduler deleted the priority-1 pod on n0 and nominated n0
    # for the new pod.  Without that evidence Muster would plan (see the first guard
    # test); with it, the job is in flight: no second victim (the priority-50 pod on n1).
    snap, _ = single_preemptor_cluster()
    snap.upsert_pod(
        parse_pod(preempted(pod("low", "team-a", gpu=8, node="n0", preemptible=True, priority=1)))
    )
    new = pod("new", "team-a", gpu=8, preemptible=True, can_preempt=True, priority=100)
    snap.upsert_pod(parse_pod(nominated(new, "n0")))
    found = scheduler_preemption(snap, "team-a/new")
    assert found is not None
    assert found.placements == {"team-a/new": "n0"} and found.victims == ("team-a/low",)
    refusal = plan_job_preemption(snap, "team-a/new", NOW)
    assert isinstance(refusal, Refusal)
    assert "kube-scheduler's own preemption is in flight" in refusal.reasons[0]
    # The room it frees is held for the job: another pod is kept off n0 ...
    held = hold_room(snap, "team-a/new", NOW)
    assert held == found and hold_room(snap, "team-a/new", NOW) is None
    assert snap.reserved_node("team-a/new") == "n0"
    other = parse_pod(pod("other", "ops", gpu=8, priority=0))
    # kube-scheduler may see the victim gone before Muster does: it asks about n0 for
    # another pod while this state still counts the victim there.  n0's room is held.
    early = filter_nodes(snap, other, ["n0"], as_extender=True)
    assert early.passed == [] and "reserved for job team-a/new" in early.failed["n0"]
    snap.remove_pod("team-a/low")  # the victim is gone: n0 is free, and held
    outcome = filter_nodes(snap, other, ["n0"], as_extender=True)
    assert outcome.passed == [] and "n0" in outcome.failed
    # ... and the job's own pod is held to it.
    mine = filter_nodes(snap, snap.pods["team-a/new"], ["n0", "n1"], as_extender=True)
    assert mine.pinned_to == "n0"


def test_muster_marks_and_higher_priority_victims_are_not_kube_schedulers_preemption() -> None:
    snap, _ = single_preemptor_cluster()
    muster_mark = preempted(
        pod("low", "team-a", gpu=8, node="n0", preemptible=True, priority=1),
        "muster: preempted by job team-a/other: ...",
    )
    snap.upsert_pod(parse_pod(muster_mark))
    assert snap.pods["team-a/low"].preempted_by == "muster"
    new = pod("new", "team-a", gpu=8, preemptible=True, can_preempt=True, priority=100)
    snap.upsert_pod(parse_pod(nominated(new, "n0")))
    assert scheduler_preemption(snap, "team-a/new") is None
    # a pod of higher priority than the nominated one is not preempted for it
    snap.upsert_pod(
        parse_pod(preempted(pod("low", "team-a", gpu=8, node="n0", preemptible=True, priority=200)))
    )
    assert scheduler_preemption(snap, "team-a/new") is None
    # a nomination Muster did not make delays planning, and so does a growing gang
    assert not ready_to_plan(snap, "team-a/new", NOW)


def test_a_growing_gang_is_not_planned_at_once() -> None:
    snap = snapshot([node("n0")], [], [quota("team-a", max={GPU: "16"})])
    # Undeclared size: with only its first pod seen, the gang looks complete ("all of
    # its pods" is one); planning it at once would plan for one pod of two.  It is
    # planned once no pod has joined it for gangSettleSeconds (1 s by default).
    snap.upsert_pod(parse_pod(pod("u-0", group="u", gpu=8)), now=NOW)
    assert snap.declarations.min_available("team-a/u") == 1
    assert not ready_to_plan(snap, "team-a/u", NOW + 0.5)
    snap.upsert_pod(parse_pod(pod("u-1", group="u", gpu=8)), now=NOW + 0.5)
    assert not ready_to_plan(snap, "team-a/u", NOW + 1.2)
    assert ready_to_plan(snap, "team-a/u", NOW + 1.5)
    # Declared size (the annotation, as a PodGroup's minMember would): at once when met.
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "2"}
    snap.upsert_pod(parse_pod(pod("g-0", group="g", gpu=8, annotations=annotations)))
    assert not ready_to_plan(snap, "team-a/g", NOW)
    snap.upsert_pod(parse_pod(pod("g-1", group="g", gpu=8, annotations=annotations)))
    assert ready_to_plan(snap, "team-a/g", NOW)


def test_preempted_by_reads_the_disruption_target_condition() -> None:
    victim = pod("v", "ops", gpu=1, node="n0")
    assert parse_pod(victim).preempted_by is None
    assert parse_pod(preempted(pod("v", "ops", node="n0"))).preempted_by == "default-scheduler"
    cleared = preempted(pod("v", "ops", node="n0"))
    cleared["status"]["conditions"][0]["status"] = "False"
    assert parse_pod(cleared).preempted_by is None
    odd = preempted(pod("v", "ops", node="n0"), "no component named")
    assert parse_pod(odd).preempted_by == "unknown"
    assert parse_pod(odd).departing


def test_a_job_is_in_flight_while_pods_marked_for_it_are_present() -> None:
    # docs/design.md: "in flight: a job whose victims were marked but are not gone yet" --
    # read from the marks themselves, so a Muster that died between marking the victims
    # and writing the reservation does not plan the job a second time.
    def marked(preemptor: str | None) -> dict[str, Any]:
        manifest = pod("low", "team-a", gpu=8, node="n0", preemptible=True, priority=1)
        manifest["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
        mark = {"initiator": "muster", "preemptor": preemptor, "reason": "r"}
        manifest["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = json.dumps(mark)
        return manifest

    snap, _ = single_preemptor_cluster()
    snap.upsert_pod(parse_pod(marked("team-a/new")))
    assert snap.pods["team-a/low"].marked_for == "team-a/new"
    refusal = plan_job_preemption(snap, "team-a/new", NOW)
    assert isinstance(refusal, Refusal) and "team-a/low" in refusal.reasons[0]
    # A mark for another job, or a drain's (no preemptor), does not hold this one back.
    # docs/design.md: pods already marked for another job "are gone for every rule here": the
    # marked pod is no candidate, and its 8 GPUs on n0 count as free (no reservation
    # holds them here), so the job fits once it is gone and nothing more is evicted.
    for other in ("team-a/someone-else", None):
        snap.upsert_pod(parse_pod(marked(other)))
        decided = plan_job_preemption(snap, "team-a/new", NOW)
        assert isinstance(decided, Refusal), decided
        assert decided.reasons == ("the job fits without evicting anything",)
    # Once the marked victim is gone, the job may be planned again.
    snap.upsert_pod(parse_pod(marked("team-a/new")))
    snap.remove_pod("team-a/low")
    assert snap.members.marked_victims("team-a/new") == ()
    again = plan_job_preemption(snap, "team-a/new", NOW)
    assert isinstance(again, Refusal)
    assert again.reasons == ("the job fits without evicting anything",)


def test_a_nomination_muster_made_is_not_kube_schedulers_and_room_is_held_once() -> None:
    # The review's case: team-a/new still carries Muster's nomination to n0 (its
    # reservation annotation names n0) when kube-scheduler preempts ops/x on n0 for the
    # ungoverned kube-system/critical.  ops/x is critical's victim, not team-a/new's.
    snap = snapshot(
        [node("n0")],
        [preempted(pod("x", "ops", gpu=8, node="n0", priority=0))],
        [quota("team-a", max={GPU: "16"})],
    )
    reservation = {"job": "team-a/new", "node": "n0", "expires": NOW + 300, "victims": []}
    mine = pod("new", "team-a", gpu=8, preemptible=True, can_preempt=True, priority=100)
    mine["metadata"]["annotations"][keys.RESERVATION_ANNOTATION] = json.dumps(reservation)
    snap.upsert_pod(parse_pod(nominated(mine, "n0")))
    critical = nominated(pod("critical", "kube-system", gpu=8, priority=2_000_000_000), "n0")
    snap.upsert_pod(parse_pod(critical))
    assert sorted(snap.members.nominated_to("n0")) == ["kube-system/critical", "team-a/new"]
    assert scheduler_preemption(snap, "team-a/new") is None
    assert hold_room(snap, "team-a/new", NOW) is None
    # critical's own preemption is found, but the room is kube-scheduler's to hold:
    # Muster governs neither critical nor x.
    assert scheduler_preemption(snap, "kube-system/critical") is not None
    assert hold_room(snap, "kube-system/critical", NOW) is None
    assert snap.reservations == {}


def test_a_victim_is_held_for_one_job_only() -> None:
    snap, _ = single_preemptor_cluster()
    snap.upsert_pod(
        parse_pod(preempted(pod("low", "team-a", gpu=8, node="n0", preemptible=True, priority=1)))
    )
    for name in ("new", "newer"):
        manifest = pod(name, "team-a", gpu=8, preemptible=True, can_preempt=True, priority=100)
        snap.upsert_pod(parse_pod(nominated(manifest, "n0")))
    assert hold_room(snap, "team-a/new", NOW) is not None
    assert hold_room(snap, "team-a/newer", NOW) is None
    assert list(snap.reservations) == ["team-a/new"]


def test_marks_and_reservations_that_are_not_json_objects_are_ignored() -> None:
    manifest = pod("v", "team-a", gpu=1, node="n0", preemptible=True)
    manifest["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    for text in ("[" * 50_000, "[1, 2]", "not json", '{"preemptor": 7}'):
        manifest["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = text
        manifest["metadata"]["annotations"][keys.RESERVATION_ANNOTATION] = text
        parsed = parse_pod(manifest)
        assert parsed.soft_evicted and parsed.marked_for is None
        assert reserved_by_muster(parsed) is None


def test_the_marked_index_follows_quota_changes_and_finished_pods() -> None:
    snap, _ = single_preemptor_cluster()
    manifest = pod("low", "team-a", gpu=8, node="n0", preemptible=True, priority=1)
    manifest["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    mark = json.dumps({"preemptor": "team-a/new"})
    manifest["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = mark
    snap.upsert_pod(parse_pod(manifest))
    snap.set_quotas(snap.tree.specs.values())  # every pod re-indexed
    assert list(snap.members.marked_victims("team-a/new")) == ["team-a/low"]
    manifest["status"]["phase"] = "Succeeded"
    snap.upsert_pod(parse_pod(manifest))
    assert snap.members.marked_victims("team-a/new") == ()


def test_with_every_pod_preemptible_every_pod_is_musters() -> None:
    snap = snapshot([node("n0")], [], [], MusterArgs(disableDefaultPreemptible=False))
    reason = governing_reason(snap, parse_pod(pod("p", "kube-system")))
    assert reason is not None and "disableDefaultPreemptible" in reason
