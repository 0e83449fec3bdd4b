"""Victims a job no longer needs keep running (issue 35, item 3: reclaim that costs
little; issue 34: preemption that destroys the least work).

A victim with notice keeps running until its notice ends.  If meanwhile the job finds
room without it (another job ended: a lone pod binds elsewhere, a gang is placed whole on
the freed room), evicting it would destroy its work for nothing.  Derived by hand from
the rule (:func:`extender.core.reservations.spared_victims`, the filter's gang branch in
:mod:`extender.core.filter.verb`): once none of the job's pods waits to bind, every
victim marked for it and not yet leaving is spared; while it holds a reservation, those
its reservation does not count on are; a victim already terminating never is.
"""

from __future__ import annotations

import json
from typing import Any

from base import keys
from extender.core.effects import HoldRoom, apply
from extender.core.filter import verb
from extender.core.objects import parse_pod
from extender.core.reservations import SPARED, settle_reservations
from extender.core.state import ClusterState, Reservation
from tests.builders import node, pod, quota, snapshot

T0 = 1_800_000_000.0
GPU = "nvidia.com/gpu"
TIMEOUT = 300.0
JOB = "team-a/train"


def victim(name: str, *, terminating: bool = False) -> dict[str, Any]:
    """A team-b pod of 8 GPUs on n0, marked for JOB (its notice still running)."""
    made = pod(name, "team-b", gpu=8, node="n0", preemptible=True)
    made["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    made["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = json.dumps({"preemptor": JOB})
    if terminating:
        made["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    return made


def trainer(name: str, node_name: str | None = None, gpu: int = 8) -> dict[str, Any]:
    return pod(name, gpu=gpu, group="train", node=node_name, can_preempt=True)


def reserve(snap: ClusterState, placements: dict[str, str], victims: tuple[str, ...]) -> None:
    snap.add_reservation(Reservation(JOB, "default", placements, victims, T0, T0 + TIMEOUT))


def spared(snap: ClusterState, now: float = T0 + 1) -> list[tuple[str, list[str], bool]]:
    """The plans settle_reservations ends at ``now``: why, whose marks go, room kept."""
    extended, ended = settle_reservations(snap, now)
    assert extended == []
    return [(plan.why, [p.key for p in plan.unmark], plan.room_kept) for plan in ended]


def test_a_job_bound_elsewhere_spares_its_victims_at_once() -> None:
    # train's one pod was reserved on n0, where b-0 has notice; n1 freed meanwhile and
    # t-0 bound there (its reservation went with the bind).  No pod of train waits: b-0,
    # not yet leaving, is spared (its mark taken back); b-1, terminating, is leaving and
    # stays so.  Long before any timeout (1 s after the plan), and the room is not touched.
    snap = snapshot(
        [node("n0"), node("n1")],
        [victim("b-0"), victim("b-1", terminating=True), trainer("t-0", "n1")],
    )
    assert JOB not in snap.reservations
    assert spared(snap) == [(SPARED, ["team-b/b-0"], True)]


def test_a_job_still_waiting_to_bind_keeps_its_victims_marked() -> None:
    # t-0 is pending and the job holds no reservation (a plan ended, its undo not yet
    # seen): the victims are not the job's to spare; the reservation-timeout rule (tested
    # in test_lifecycle.py) takes their marks back later.
    snap = snapshot([node("n0"), node("n1")], [victim("b-0"), trainer("t-0")])
    assert spared(snap) == []


def test_victims_the_reservation_counts_on_stay_marked() -> None:
    snap = snapshot([node("n0"), node("n1")], [victim("b-0"), trainer("t-0")])
    reserve(snap, {"team-a/t-0": "n0"}, ("team-b/b-0",))
    assert spared(snap) == []


def test_victims_a_new_reservation_does_not_count_on_are_spared_and_the_room_kept() -> None:
    # The gang was placed again on freed room (n1): its reservation counts on no victim.
    # b-0 is spared; the reservation stays (room_kept: the front door does not release it).
    snap = snapshot([node("n0"), node("n1")], [victim("b-0"), trainer("t-0")])
    reserve(snap, {"team-a/t-0": "n1"}, ())
    assert spared(snap) == [(SPARED, ["team-b/b-0"], True)]
    assert JOB in snap.reservations


def gang_in_flight() -> ClusterState:
    """A gang of two 4-GPU pods reserved on n0 (8 GPUs), where its victim b-0 (8 GPUs)
    has notice; n1 (8 GPUs) runs c-0 (8 GPUs) of team-c."""
    snap = snapshot(
        [node("n0"), node("n1")],
        [
            victim("b-0"),
            pod("c-0", "team-c", gpu=8, node="n1"),
            trainer("t-0", gpu=4),
            trainer("t-1", gpu=4),
        ],
    )
    reserve(snap, {"team-a/t-0": "n0", "team-a/t-1": "n0"}, ("team-b/b-0",))
    return snap


def test_a_gang_with_victims_on_notice_waits_for_its_room_while_none_frees() -> None:
    # kube-scheduler passes no node for t-0 (n0 holds b-0 until its notice ends, n1 is
    # full): the gang waits for the room reserved for it, as before.
    snap = gang_in_flight()
    result = verb.filter_pod(snap, snap.pods["team-a/t-0"], [], as_extender=True, now=T0 + 5)
    assert result.passed == []
    assert result.gang_waiting == "gang team-a/train: waiting for the room reserved on node n0"
    assert result.effects == ()


def test_a_gang_with_victims_on_notice_takes_room_that_freed_and_spares_them() -> None:
    # c-0 ends: n1's 8 GPUs are free, and kube-scheduler passes n1 for t-0.  Both 4-GPU
    # pods fit there: the gang is placed whole on n1 (t-0 held to it), its reservation
    # counting on no victim; the next settle spares b-0, whose notice has not ended.
    snap = gang_in_flight()
    snap.remove_pod("team-c/c-0")
    result = verb.filter_pod(snap, snap.pods["team-a/t-0"], ["n1"], as_extender=True, now=T0 + 5)
    assert result.passed == ["n1"] and result.gang_placed
    (hold,) = result.effects
    assert isinstance(hold, HoldRoom)
    assert hold.reservation.placements == {"team-a/t-0": "n1", "team-a/t-1": "n1"}
    assert hold.reservation.victims == ()
    apply(snap, hold)
    assert spared(snap, T0 + 5) == [(SPARED, ["team-b/b-0"], True)]


def test_a_gang_whose_victims_are_all_leaving_keeps_its_room() -> None:
    # b-0 is terminating: the reserved room is on its way, so the gang waits for it even
    # with n1 free (moving would waste an eviction already made).
    snap = snapshot(
        [node("n0"), node("n1")],
        [victim("b-0", terminating=True), trainer("t-0", gpu=4), trainer("t-1", gpu=4)],
    )
    reserve(snap, {"team-a/t-0": "n0", "team-a/t-1": "n0"}, ("team-b/b-0",))
    result = verb.filter_pod(snap, snap.pods["team-a/t-0"], ["n1"], as_extender=True, now=T0 + 5)
    assert result.passed == []
    assert result.failed == {"n1": LEAVING}


LEAVING = (
    "quota room reserved for job team-a/train is not free yet: its preemption's victims "
    "are still there"
)


def lone_pod_in_flight(quotas: list[dict[str, Any]] | None = None) -> ClusterState:
    """train's one pod t-0 (8 GPUs; a gang of one is a lone pod) reserved on n0, where its
    victim b-0 has notice; n1 (8 GPUs) free."""
    snap = snapshot(
        [node("n0"), node("n1")],
        [victim("b-0"), trainer("t-0")],
        quotas or [],
    )
    reserve(snap, {"team-a/t-0": "n0"}, ("team-b/b-0",))
    return snap


def test_a_lone_pod_whose_victim_has_notice_may_bind_where_room_freed() -> None:
    # kube-scheduler passes n1 (free) and not n0 (b-0 still there): t-0 passes n1; once
    # it is bound there, the next settle spares b-0.
    snap = lone_pod_in_flight()
    result = verb.filter_pod(snap, snap.pods["team-a/t-0"], ["n1"], as_extender=True, now=T0 + 5)
    assert result.passed == ["n1"]
    snap.upsert_pod(parse_pod(trainer("t-0", "n1")))
    assert spared(snap, T0 + 6) == [(SPARED, ["team-b/b-0"], True)]


def test_a_job_whose_quota_is_at_max_with_its_victims_kept_waits_for_them() -> None:
    # b-0 is team-a's own (a within-quota victim) and team-a's max is 8: with b-0 kept
    # and t-0's reserved 8 counted, team-a uses 16 > 8, so t-0 may not bind elsewhere:
    # it waits until b-0 has left (the quota check's message).
    own = pod("b-0", gpu=8, node="n0", preemptible=True)
    own["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    own["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = json.dumps({"preemptor": JOB})
    snap = snapshot(
        [node("n0"), node("n1")],
        [own, trainer("t-0")],
        [quota("team-a", min={GPU: "8"}, max={GPU: "8"})],
    )
    reserve(snap, {"team-a/t-0": "n0"}, ("team-a/b-0",))
    result = verb.filter_pod(snap, snap.pods["team-a/t-0"], ["n1"], as_extender=True, now=T0 + 5)
    assert result.passed == []
    assert result.failed == {
        "n1": "quota room reserved for job team-a/train is not free yet: quota team-a is "
        "over its max until pods on their way out have left"
    }
