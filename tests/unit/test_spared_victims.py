"""Victims a job no longer needs keep running (issue 35, item 3: reclaim that costs
little; issue 34: preemption that destroys the least work).

A victim with notice keeps running until its notice ends.  If meanwhile a lone pod's job
finds room without it (another job ended), evicting it would destroy its work for nothing.
Derived by hand from the rules (:func:`extender.core.filter.admission.
may_go_without_victims`, :func:`extender.core.settling.spared_victims`): a lone pod
whose victims all still run may bind where there is room, if its job would be admitted
now with the victims kept and its reserved room let go; once none of the job's pods waits
to bind and it holds no reservation, every victim marked for it that is not leaving and
that no reservation counts on is spared.  A gang waits for its victims whole.
"""

from __future__ import annotations

import json
from typing import Any

from base import keys
from extender.core.binding import bind_refusal
from extender.core.filter import verb
from extender.core.objects import parse_pod
from extender.core.settling import SPARED, settle_reservations
from extender.core.state import ClusterState, Reservation
from tests.builders import node, pod, quota, snapshot

T0 = 1_800_000_000.0
GPU = "nvidia.com/gpu"
TIMEOUT = 300.0
JOB = "team-a/train"


def victim(name: str, namespace: str = "team-b", *, terminating: bool = False) -> dict[str, Any]:
    """A pod of 8 GPUs on n0 (team-b's by default), marked for JOB (its notice still
    running)."""
    made = pod(name, namespace, gpu=8, node="n0", preemptible=True)
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


def test_a_victim_another_reservation_took_over_stays_marked() -> None:
    # train's t-0 is bound (on n1) and holds no reservation, but b-0, marked for train,
    # is a victim another job's reservation counts on (it took b-0 over when train's room
    # yielded to it): that job still needs it, so it is not spared.
    snap = snapshot(
        [node("n0"), node("n1")],
        [victim("b-0"), trainer("t-0", "n1"), pod("o-0", gpu=8, group="other")],
    )
    snap.add_reservation(
        Reservation("team-a/other", "default", {"team-a/o-0": "n0"}, ("team-b/b-0",), T0, T0 + 300)
    )
    assert spared(snap) == []


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


def test_a_gang_waits_for_its_victims_whole_even_when_room_frees() -> None:
    # c-0 ends: n1's 8 GPUs are free, and kube-scheduler passes n1 for t-0.  But a gang
    # waits for its victims whole (a pod of it binding alone would strand the rest): t-0
    # fails n1 with the wait for its victims, and nothing is spared.
    snap = gang_in_flight()
    snap.remove_pod("team-c/c-0")
    result = verb.filter_pod(snap, snap.pods["team-a/t-0"], ["n1"], as_extender=True, now=T0 + 5)
    assert result.passed == []
    assert result.failed == {"n1": LEAVING}
    assert spared(snap, T0 + 5) == []


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
    # b-0 is team-a's own (a within-quota victim) and team-a's max is 8: admitted now
    # with b-0 kept (8) and its reserved room let go, t-0 (8) would take team-a to 16 > 8,
    # so it may not bind elsewhere: it waits until b-0 has left.
    own = victim("b-0", "team-a")
    snap = snapshot(
        [node("n0"), node("n1")],
        [own, trainer("t-0")],
        [quota("team-a", min={GPU: "8"}, max={GPU: "8"})],
    )
    reserve(snap, {"team-a/t-0": "n0"}, ("team-a/b-0",))
    result = verb.filter_pod(snap, snap.pods["team-a/t-0"], ["n1"], as_extender=True, now=T0 + 5)
    assert result.passed == []
    assert result.failed == {"n1": LEAVING}


def test_room_held_for_the_quotas_non_preemptible_pods_is_not_taken() -> None:
    # team-a (min 8, max 16) runs b-0 (8, preemptible, its own victim, marked for train)
    # and has np-0 (8, not preemptible) pending; train's t-0 (8, preemptible) is reserved
    # on n0.  Admitted now with b-0 kept: room up to min (8) stays held for np-0, plus
    # preemptible used 8 (b-0) plus t-0's 8 = 24 > max 16.  So t-0 waits for b-0 to go,
    # though n1 is free.
    own = victim("b-0", "team-a")
    snap = snapshot(
        [node("n0"), node("n1")],
        [own, pod("np-0", gpu=8), pod("t-0", gpu=8, group="train", preemptible=True)],
        [quota("team-a", min={GPU: "8"}, max={GPU: "16"})],
    )
    reserve(snap, {"team-a/t-0": "n0"}, ("team-a/b-0",))
    result = verb.filter_pod(snap, snap.pods["team-a/t-0"], ["n1"], as_extender=True, now=T0 + 5)
    assert result.passed == [] and result.failed == {"n1": LEAVING}


def test_a_bind_off_the_reserved_node_needs_room_there() -> None:
    # The bind verb (anyone reaching the port may call it) lets t-0 go off its reserved
    # node only as the filter does, and only to room free on that node: n1 holds c-0 (8
    # of 8 GPUs), so a bind of t-0 there is refused; once c-0 is gone it is allowed.
    snap = lone_pod_in_flight()
    snap.upsert_pod(parse_pod(pod("c-0", "team-c", gpu=8, node="n1")))
    t0 = snap.pods["team-a/t-0"]
    refused = bind_refusal(snap, t0.key, t0.uid, "n1", T0 + 5)
    assert refused.pod is None and "is reserved on node n0" in refused.refusal
    snap.remove_pod("team-c/c-0")
    assert bind_refusal(snap, t0.key, t0.uid, "n1", T0 + 5).pod is not None
