"""The planner's rules at the edges (issue #13): quota-tree paths, guarantees in every
resource, "within min" after the job's own lower-priority work, stop policies on parents.

Every expectation is derived by hand from docs/design.md and the rule it tests (the comment
beside each says how).  Nodes have 8 GPUs and 32 CPUs; every pod asks for 8 GPUs, so
one pod fills a node, and evicting one frees exactly one node.  Victims are ordered
other quotas first, lower priority first, most recently started first.
"""

from __future__ import annotations

import json
from typing import Any

from base import keys
from extender.core.effects import apply
from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.reservations import restored_effects
from extender.core.state import ClusterState
from quota.admission import job_admission_failures, reclaimable
from tests.builders import node, pod, quota, snapshot

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"
JOB = "team-a/train"


def trainer(name: str, **kwargs: Any) -> dict[str, Any]:
    """A pending pod of the job team-a/train, 8 GPUs, allowed to preempt."""
    kwargs.setdefault("gpu", 8)
    return pod(name, "team-a", group="train", can_preempt=True, preemptible=False, **kwargs)


def running(
    name: str, namespace: str, node_name: str, minute: int, **kwargs: Any
) -> dict[str, Any]:
    """A preemptible pod running on ``node_name`` since 10:``minute``."""
    kwargs.setdefault("gpu", 8)
    started = f"2026-01-01T10:{minute:02d}:00Z"
    return pod(
        name,
        namespace,
        node=node_name,
        preemptible=True,
        created=started,
        started=started,
        **kwargs,
    )


def decide(snap: ClusterState) -> PreemptionPlan | Refusal:
    return plan_job_preemption(snap, JOB, NOW)


def victims(decision: PreemptionPlan | Refusal) -> list[str]:
    assert isinstance(decision, PreemptionPlan), decision
    return sorted(victim.pod.key for victim in decision.victims)


# ---- rule 1: reclaim only across a borrowing path ---------------------------------------


def shielded_tree() -> list[dict[str, Any]]:
    """Parent P (min 24) holds A (min 0) and B (min 24, unused); team-a and team-c are
    top-level.  A borrows B's unused min inside P, and P (16 used < 24) is within its own."""
    return [
        quota("p", is_parent=True, namespace="p", min={GPU: "24"}, max={GPU: "32"}),
        quota("team-x", parent="p", min={GPU: "0"}, max={GPU: "32"}),
        quota("team-y", parent="p", min={GPU: "24"}, max={GPU: "32"}),
        quota("team-a", min={GPU: "16"}, max={GPU: "32"}),
        quota("team-c", min={GPU: "0"}, max={GPU: "32"}),
    ]


def test_a_parent_within_its_min_shields_the_borrowers_inside_it() -> None:
    # team-a (min 16, using 0) asks for 16: within its min, so reclaimWithinCohort (Any).
    # team-x's pods started last, so the order would take them first, but their path up
    # to the root shared with team-a is [team-x, p]: team-x uses 16 > 0, p uses 16, not
    # above its min 24, so p shields them.  team-c (path [team-c], 16 > 0) is reclaimed:
    # both of its pods, one node each.
    pods = [
        running("x-0", "team-x", "n0", 30),
        running("x-1", "team-x", "n1", 35),
        running("c-0", "team-c", "n2", 0),
        running("c-1", "team-c", "n3", 5),
        trainer("t-0"),
        trainer("t-1"),
    ]
    snap = snapshot([node(f"n{i}") for i in range(4)], pods, shielded_tree())
    assert victims(decide(snap)) == ["team-c/c-0", "team-c/c-1"]
    assert not reclaimable(snap.ledger, "team-x", "team-a", {GPU})
    assert reclaimable(snap.ledger, "team-c", "team-a", {GPU})


def test_only_shielded_borrowers_means_no_plan() -> None:
    # Without team-c, only team-x's pods hold the room, and p shields them: refused.
    pods = [
        running("x-0", "team-x", "n0", 30),
        running("x-1", "team-x", "n1", 35),
        trainer("t-0"),
    ]
    snap = snapshot([node("n0"), node("n1")], pods, shielded_tree())
    assert isinstance(decide(snap), Refusal)


def test_inside_the_parent_a_sibling_reclaims_its_own_min() -> None:
    # team-y (min 24, using 0) shares p with team-x: the path from team-x up to (not
    # including) p is [team-x], which borrows (16 > 0), so team-y reclaims from it.
    pods = [
        running("x-0", "team-x", "n0", 30),
        running("x-1", "team-x", "n1", 35),
        pod("y-0", "team-y", gpu=8, group="y", can_preempt=True, preemptible=False),
    ]
    snap = snapshot([node("n0"), node("n1")], pods, shielded_tree())
    decision = plan_job_preemption(snap, "team-y/y", NOW)
    # One node is needed; the most recently started borrower goes: x-1 (10:35).
    assert victims(decision) == ["team-x/x-1"]


def test_a_parent_above_its_min_lets_its_borrowers_be_reclaimed() -> None:
    # Same tree, but p's min is 8: p uses 16 > 8, so the path [team-x, p] borrows at
    # every level.  x-1 started last: it goes first; taking it leaves p at 8, not below.
    tree = shielded_tree()
    tree[0] = quota("p", is_parent=True, namespace="p", min={GPU: "8"}, max={GPU: "32"})
    tree[2] = quota("team-y", parent="p", min={GPU: "8"}, max={GPU: "32"})
    pods = [
        running("x-0", "team-x", "n0", 30),
        running("x-1", "team-x", "n1", 35),
        trainer("t-0"),
    ]
    snap = snapshot([node("n0"), node("n1")], pods, tree)
    assert victims(decide(snap)) == ["team-x/x-1"]


# ---- rule 2: a guarantee holds in every resource ---------------------------------------


def guaranteed_cpu() -> list[dict[str, Any]]:
    """team-b is guaranteed 8 CPUs and no GPUs: its GPU pods borrow."""
    return [
        quota("team-a", min={GPU: "16"}, max={GPU: "32"}),
        quota("team-b", min={GPU: "0", "cpu": "8"}, max={GPU: "32", "cpu": "64"}),
    ]


def test_a_victim_taking_its_quota_below_min_in_another_resource_is_spared_if_it_can_be() -> None:
    # b-0 (8 GPUs, 8 CPUs) started last, so it would go first; but team-b uses exactly
    # its min of 8 CPUs, all b-0's: evicting it takes team-b below min in cpu, which the
    # job (GPUs only) does not ask for.  A plan without it exists: b-1.
    pods = [
        running("b-0", "team-b", "n0", 30, cpu="8"),
        running("b-1", "team-b", "n1", 5),
        trainer("t-0"),
    ]
    snap = snapshot([node("n0"), node("n1")], pods, guaranteed_cpu())
    assert victims(decide(snap)) == ["team-b/b-1"]


def test_it_is_chosen_when_no_plan_spares_it_and_the_reason_names_the_resource() -> None:
    # Only b-0 can free a node: it is chosen, and its reason says the cpu min breaks.
    pods = [running("b-0", "team-b", "n0", 30, cpu="8"), trainer("t-0")]
    decision = decide(snapshot([node("n0")], pods, guaranteed_cpu()))
    assert victims(decision) == ["team-b/b-0"]
    assert isinstance(decision, PreemptionPlan)
    (victim,) = decision.victims
    assert "below its min cpu 8" in victim.reason, victim.reason


def test_below_min_in_a_contested_resource_never() -> None:
    # team-b is guaranteed 12 GPUs and uses 16: it borrows 4, but either of its 8-GPU pods
    # would take it to 8 < 12, in the resource the job asks for: never a victim.
    quotas = [
        quota("team-a", min={GPU: "16"}, max={GPU: "32"}),
        quota("team-b", min={GPU: "12"}, max={GPU: "32"}),
    ]
    pods = [running("b-0", "team-b", "n0", 30), running("b-1", "team-b", "n1", 5)]
    decision = decide(snapshot([node("n0"), node("n1")], [*pods, trainer("t-0")], quotas))
    assert isinstance(decision, Refusal)
    assert any(f"below its min {GPU} 12" in reason for reason in decision.reasons), decision


# ---- rule 3: "within min" after the job's own lower-priority work ----------------------


def own_work_cluster(a_low_priority: int) -> ClusterState:
    """team-a (min 16) runs a-low (8 GPUs, this priority) on n0; team-b (min 0) borrows
    n1 (b-1, 10:10) and n2 (b-2, 10:20); team-a's job asks 2 x 8 GPUs at priority 100."""
    quotas = [
        quota("team-a", min={GPU: "16"}, max={GPU: "32"}),
        quota("team-b", min={GPU: "0"}, max={GPU: "32"}),
    ]
    pods = [
        running("a-low", "team-a", "n0", 0, priority=a_low_priority),
        running("b-1", "team-b", "n1", 10),
        running("b-2", "team-b", "n2", 20),
        trainer("t-0", priority=100),
        trainer("t-1", priority=100),
    ]
    return snapshot([node(f"n{i}") for i in range(3)], pods, quotas)


def test_a_job_within_min_once_its_own_lower_priority_work_is_gone_reclaims() -> None:
    # Counting a-low (priority 0), team-a would use 24 > 16 (borrowing, and
    # borrowWithinCohort is Never); without it, 16 <= 16: the job is within its min, so it
    # reclaims from team-b's borrowers, and its plan must leave team-a within its min, so
    # a-low goes too.  Walk (other quotas first, most recent first): b-2, b-1, then a-low
    # (team-a at 16: within its min).  Minimise, newest first: b-1 back (n0 and n2 hold
    # the job), b-2 back (only n0 free: no).  Victims: a-low and b-2.
    assert victims(decide(own_work_cluster(0))) == ["team-a/a-low", "team-b/b-2"]


def test_own_work_of_equal_priority_does_not_count_as_gone() -> None:
    # The same, but a-low has the job's priority: withinQuota LowerPriority may not evict
    # it, so the job borrows (24 > 16), borrowWithinCohort is Never: refused.
    assert isinstance(decide(own_work_cluster(100)), Refusal)


# ---- rule 6: a stop policy on a parent applies to its subtree --------------------------


def test_a_parent_on_hold_admits_nothing_below_it() -> None:
    quotas = [
        quota(
            "p",
            is_parent=True,
            namespace="p",
            max={GPU: "32"},
            annotations={keys.STOP_POLICY_ANNOTATION: "Hold"},
        ),
        quota("team-a", parent="p", max={GPU: "32"}),
    ]
    snap = snapshot([node("n0")], [trainer("t-0")], quotas)
    failures = job_admission_failures(snap.ledger, "team-a", {GPU: 8_000}, {})
    assert failures == ["quota team-a's ancestor p is stopped (stop-policy Hold)"]
    assert snap.tree.stop_policy("team-a") == (snap.tree["p"].policy.stop_policy, "p")


# ---- rule 5: in flight is a fact of the cluster -----------------------------------------


def test_a_job_whose_pods_carry_its_reservation_is_in_flight_after_the_timer() -> None:
    # A dump taken mid-preemption: team-a's pods carry the reservation Muster wrote (for
    # n0 and n1, its time up 10 s ago), team-b's borrowers are not marked yet.  The time
    # being up does not end it: until the annotation is cleared (the leader releases
    # it), the job is in flight and gets no second plan.  Cleared, it is planned again.
    written = {
        "job": JOB,
        "created": NOW - 310,
        "expires": NOW - 10,
        "victims": ["team-b/b-0", "team-b/b-1"],
    }

    def reserved(name: str, node_name: str) -> dict[str, Any]:
        annotation = json.dumps({**written, "node": node_name})
        return trainer(name, annotations={keys.RESERVATION_ANNOTATION: annotation})

    quotas = [
        quota("team-a", min={GPU: "16"}, max={GPU: "32"}),
        quota("team-b", min={GPU: "0"}, max={GPU: "32"}),
    ]
    borrowers = [running("b-0", "team-b", "n0", 0), running("b-1", "team-b", "n1", 5)]
    pods = [*borrowers, reserved("t-0", "n0"), reserved("t-1", "n1")]
    snap = snapshot([node("n0"), node("n1")], pods, quotas)
    for pod_key in (f"team-a/t-{i}" for i in range(2)):  # as the informer and simulate do
        for effect in restored_effects(snap, snap.pods[pod_key]):
            apply(snap, effect)
    snap.expire_reservations(NOW)
    assert snap.reservations == {}
    decision = decide(snap)
    assert isinstance(decision, Refusal)
    assert "in flight" in decision.reasons[0], decision
    for name in ("t-0", "t-1"):  # the leader clears what it wrote
        snap.upsert_pod(parse_pod(trainer(name)))
    assert victims(decide(snap)) == ["team-b/b-0", "team-b/b-1"]


def test_a_job_that_reclaims_thanks_to_its_own_work_does_not_end_up_borrowing() -> None:
    # One 16-GPU node: team-a's a-low (priority 0) and team-b's borrower b-hi (priority
    # 100), 8 GPUs each.  team-a (min 8) asks 8 more at priority 10: only without a-low is
    # it within its min, so a plan must leave team-a within it.  The walk takes b-hi
    # first (other quotas first; reclaim Any ignores priority) but team-a would still use
    # 16 > 8; then a-low.  Minimise: b-hi back (a-low's room holds the job).  Only a-low.
    quotas = [
        quota("team-a", min={GPU: "8"}, max={GPU: "16"}),
        quota("team-b", min={GPU: "0"}, max={GPU: "16"}),
    ]
    pods = [
        running("a-low", "team-a", "n0", 0, priority=0),
        running("b-hi", "team-b", "n0", 5, priority=100),
        trainer("t-0", priority=10),
    ]
    snap = snapshot([node("n0", gpu=16)], pods, quotas)
    assert victims(decide(snap)) == ["team-a/a-low"]
