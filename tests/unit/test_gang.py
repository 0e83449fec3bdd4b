"""All-or-nothing gang placement at the filter (:mod:`extender.core.filter.gang`).

Every expectation here is worked out by hand from the rules in extender/core/filter/gang.py's module
docstring (and JobFit.place's: shapes largest first, the pod being filtered first of
its shape, nodes fullest-after-placement first, then by name); the comment beside
each says how.  Pods ask for GPUs only, so "fits" is plain GPU arithmetic, and pods in
a namespace with no ElasticQuota fall in the implicit ``default`` quota, which limits
nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from base import keys
from extender.core import gangsize
from extender.core.config import parse_args
from extender.core.effects import AssumeBound, HoldQuota, HoldRoom, ReleaseRoom, apply
from extender.core.filter import gangstatus, verb
from extender.core.filter.nodes import FilterResult, filter_nodes
from extender.core.objects import PodInfo, parse_node, parse_pod
from extender.core.podgroups import PodGroupInfo
from extender.core.state import ClusterState, GangBackoff, Reservation
from tests.builders import node, pod, quota, snapshot

NOW = dt.datetime(2026, 1, 1, 10, 30, tzinfo=dt.UTC).timestamp()
JOB = "team-a/g"
GPU = "nvidia.com/gpu"
TIMEOUT = 300.0  # reservationTimeoutSeconds' default
BOTH_MODES = pytest.mark.parametrize("as_extender", [True, False], ids=["extender", "full"])


def gang_pods(count: int, gpu: int = 8, **kwargs: Any) -> list[dict[str, Any]]:
    """``count`` pending pods g-0.. of the job team-a/g, each asking for ``gpu`` GPUs."""
    return [pod(f"g-{i}", gpu=gpu, group="g", **kwargs) for i in range(count)]


def key(name: str) -> str:
    return f"team-a/{name}"


def filter_one(
    snap: ClusterState,
    name: str,
    nodes: list[str] | None = None,
    *,
    as_extender: bool = True,
    now: float = NOW,
) -> FilterResult:
    """The filter for the pod ``team-a/<name>`` over ``nodes`` (default: every node)."""
    names = sorted(snap.nodes) if nodes is None else nodes
    return verb.filter_pod(snap, snap.pods[key(name)], names, as_extender=as_extender, now=now)


def apply_all(snap: ClusterState, result: FilterResult) -> None:
    for effect in result.effects:
        apply(snap, effect)


# ---- a gang that does not fit whole waits whole --------------------------------------


@BOTH_MODES
def test_a_gang_with_room_for_two_of_three_pods_waits_whole(as_extender: bool) -> None:
    # Three 8-GPU pods, two free 8-GPU nodes: one pod per node, so 2 of the 3 fit and
    # min-available (undeclared: every pod, 3) is not reached.  Every pod is turned away
    # with the same reason; evicting could help, so the nodes are `failed` (resolvable),
    # and nothing is reserved.
    snap = snapshot([node("n1"), node("n2")], gang_pods(3))
    reason = "gang team-a/g: 2 of 3 pods fit; waiting for room for all 3"
    for name in ("g-0", "g-1", "g-2"):
        result = filter_one(snap, name, as_extender=as_extender)
        assert result.passed == []
        assert result.gang_waiting == reason
        assert result.failed == {"n1": reason, "n2": reason}
        assert result.unresolvable == {}
        assert result.effects == ()
        assert not result.gang_placed
    assert snap.reservations == {}


# ---- a gang that fits whole is reserved and its pods held to their nodes -------------


@BOTH_MODES
def test_a_gang_that_fits_is_reserved_whole_and_each_pod_held_to_its_node(
    as_extender: bool,
) -> None:
    snap = snapshot([node("n1"), node("n2"), node("n3")], gang_pods(3))
    # kube-scheduler may ask about any pod first; here g-1.  One 8-GPU pod per node, so
    # the three pods take three distinct nodes.  Every node is equally full after
    # placing (8 of 8), so nodes go by name, and the filtered pod is placed first:
    # g-1 → n1, then g-0 → n2, g-2 → n3.
    first = filter_one(snap, "g-1", as_extender=as_extender)
    planned = {key("g-1"): "n1", key("g-0"): "n2", key("g-2"): "n3"}
    assert len(first.effects) == 1
    hold = first.effects[0]
    assert isinstance(hold, HoldRoom)
    # Found free by the filter: no victims, the default reservation timeout, no refusals.
    assert hold.reservation == Reservation(
        job=JOB,
        quota="default",
        placements=planned,
        victims=(),
        created=NOW,
        expires=NOW + TIMEOUT,
        refused=frozenset(),
    )
    assert len(set(hold.reservation.placements.values())) == 3
    assert first.passed == ["n1"] and first.pinned_to == "n1"
    placed = "gang team-a/g is placed whole; this pod goes to node n1"
    assert first.failed == {"n2": placed, "n3": placed}
    assert first.gang_placed and first.gang_waiting is None

    apply_all(snap, first)
    assert snap.reserved_node(key("g-1")) == "n1"
    # The other two pods: each is held to its planned node (the others hold room
    # reserved for another pod), and nothing more is asked of the state.
    for name in ("g-0", "g-2"):
        result = filter_one(snap, name, as_extender=as_extender)
        assert result.passed == [planned[key(name)]], name
        assert result.effects == () and result.gang_waiting is None and not result.gang_placed

    # A pod of another job asking for 8 GPUs: the only room on each node is held for
    # team-a/g, so every node fails (resolvably) for the reserved room.
    snap.upsert_pod(parse_pod(pod("other", "team-b", gpu=8)))
    other = verb.filter_pod(
        snap, snap.pods["team-b/other"], ["n1", "n2", "n3"], as_extender=as_extender, now=NOW
    )
    assert other.passed == []
    assert set(other.failed) == {"n1", "n2", "n3"}
    for reason in other.failed.values():
        assert "reserved" in reason and JOB in reason
    assert other.effects == () and other.gang_waiting is None


def test_the_held_pods_bind_one_by_one_and_the_reservation_ends_with_the_last() -> None:
    # The room stays held for the pods not bound yet; when every planned pod is bound
    # nothing is reserved any more.
    snap = snapshot([node("n1"), node("n2"), node("n3")], gang_pods(3))
    first = filter_one(snap, "g-0")
    apply_all(snap, first)
    hold = first.effects[0]
    assert isinstance(hold, HoldRoom)
    for pod_key, node_name in sorted(hold.reservation.placements.items()):
        result = verb.filter_pod(
            snap, snap.pods[pod_key], ["n1", "n2", "n3"], as_extender=True, now=NOW
        )
        assert result.passed == [node_name]
        apply(snap, AssumeBound(snap.pods[pod_key], node_name))
    assert snap.reservations == {}
    assert sorted(p.node_name or "" for p in snap.members.job_pods(JOB)) == ["n1", "n2", "n3"]


def test_a_pod_deleted_as_muster_bound_it_is_not_brought_back_as_a_ghost() -> None:
    # Muster's bind verb succeeds, the pod is deleted and the informer removes it, and
    # only then is the bind assumed (from the filter's copy of the pod): the pod must
    # stay gone, or its 8 GPUs on n1 would be held by nothing, for good.
    snap = snapshot([node("n1")], [pod("p", gpu=8)])
    copy = snap.pods[key("p")]
    snap.remove_pod(key("p"))
    apply(snap, AssumeBound(copy, "n1"))
    assert key("p") not in snap.pods
    assert snap.free_on("n1").get("nvidia.com/gpu") == 8_000  # milli-units
    # A pod the informer has not delivered yet is counted bound at once.
    newer = parse_pod(pod("q", gpu=8))
    apply(snap, AssumeBound(newer, "n1"))
    assert snap.pods[key("q")].node_name == "n1"


def test_pods_parked_while_their_gang_was_short_are_nudged_once_it_is_complete() -> None:
    # min-available 3 (the annotation).  g-0 was turned away while alone ("waiting for 2
    # more pods"); while the gang is short, no nudge helps it.  Once g-1 and g-2 exist
    # it is one to nudge; g-1, parked for "2 of 3 pods fit", is not (no pod is missing).
    short = "0/2 nodes are available: 2 gang team-a/g: waiting for 2 more pods (1 of "
    short += "min-available 3 exist)."
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "3"}
    snap = snapshot([node("n1")], gang_pods(1, annotations=annotations))
    parked = {key("g-0"): short}
    assert gangstatus.parked_too_early(snap, parked, NOW) == []
    for other in gang_pods(3, annotations=annotations)[1:]:
        snap.upsert_pod(parse_pod(other))
    parked[key("g-1")] = "0/2 nodes are available: gang team-a/g: 2 of 3 pods fit; ..."
    assert gangstatus.parked_too_early(snap, parked, NOW) == [key("g-0")]


# ---- fewer pods than min-available -----------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "group", "needed"),
    [
        ({}, PodGroupInfo("team-a", "g", min_member=3), 3),
        ({keys.GANG_MIN_AVAILABLE_ANNOTATION: "4"}, None, 4),
    ],
    ids=["podgroup-minMember", "annotation"],
)
@BOTH_MODES
def test_a_gang_with_fewer_pods_than_min_available_waits_for_them(
    annotations: dict[str, str], group: PodGroupInfo | None, needed: int, as_extender: bool
) -> None:
    # Two pods exist, min-available is 3 (PodGroup) or 4 (annotation): no node helps,
    # so every node is unresolvable, with "waiting for N more pods", N = needed - 2.
    snap = snapshot([node("n1"), node("n2"), node("n3")], gang_pods(2, annotations=annotations))
    if group is not None:
        snap.set_pod_group(group)
    reason = (
        f"gang team-a/g: waiting for {needed - 2} more pods (2 of min-available {needed} exist)"
    )
    for name in ("g-0", "g-1"):
        result = filter_one(snap, name, as_extender=as_extender)
        assert result.passed == [] and result.failed == {}
        assert result.unresolvable == {"n1": reason, "n2": reason, "n3": reason}
        assert result.gang_waiting == reason
        assert result.effects == ()


def test_a_pod_not_yet_seen_by_the_informer_counts_as_created() -> None:
    # PodGroup minMember 3, two pods in the state, and kube-scheduler asks about a third
    # Muster has not seen yet: 3 exist, so the gang is planned (3 nodes, 3 pods fit).
    snap = snapshot([node("n1"), node("n2"), node("n3")], gang_pods(2))
    snap.set_pod_group(PodGroupInfo("team-a", "g", min_member=3))
    newcomer = parse_pod(pod("g-2", gpu=8, group="g"))
    result = verb.filter_pod(snap, newcomer, ["n1", "n2", "n3"], as_extender=True, now=NOW)
    assert result.gang_placed and result.passed == ["n1"]
    hold = result.effects[0]
    assert isinstance(hold, HoldRoom)
    assert set(hold.reservation.placements) == {key("g-0"), key("g-1"), key("g-2")}


def test_room_placed_for_a_pod_not_yet_seen_is_kept_while_the_informer_catches_up() -> None:
    # Found by the e2e tier under load (two gangs of two for room for one, trial 3): g-1
    # alone in the state; kube-scheduler asks about g-0 before the informer delivers it:
    # 2 exist, the gang is placed whole (g-0 → n1, g-1 → n2) and g-0 binds.  Then g-1 is
    # asked about while the state still holds only g-1: by the state, 1 of 2 exist.  The
    # rule ("waiting for N more pods") turns g-1 away, but the room placed for g-0, which
    # exists, must stay the job's: released, another gang would take n2 and g-0 would
    # run alone.  Once g-0 is seen (bound), g-1 goes to its reserved node n2.
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "2"}
    snap = snapshot(
        [node("n1"), node("n2")], [pod("g-1", gpu=8, group="g", annotations=annotations)]
    )
    unseen = parse_pod(pod("g-0", gpu=8, group="g", annotations=annotations))
    placed = verb.filter_pod(snap, unseen, ["n1", "n2"], as_extender=True, now=NOW)
    assert placed.gang_placed and placed.passed == ["n1"]
    apply_all(snap, placed)
    waiting = filter_one(snap, "g-1")
    assert waiting.passed == [] and "waiting for 1 more pods" in (waiting.gang_waiting or "")
    assert not any(isinstance(e, ReleaseRoom) for e in waiting.effects), waiting.effects
    apply_all(snap, waiting)
    assert snap.reserved_node(key("g-1")) == "n2"
    snap.upsert_pod(parse_pod(pod("g-0", gpu=8, group="g", node="n1", annotations=annotations)))
    assert filter_one(snap, "g-1").passed == ["n2"]


def test_room_placed_for_a_pod_seen_and_deleted_is_released_when_the_gang_is_short() -> None:
    # The same reservation, but g-0 was seen and then deleted: the gang is short for
    # real, and its room is released as before.
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "2"}
    snap = snapshot([node("n1"), node("n2")], gang_pods(2, annotations=annotations))
    placed = filter_one(snap, "g-0")
    apply_all(snap, placed)
    snap.remove_pod(key("g-0"))
    waiting = filter_one(snap, "g-1")
    assert any(isinstance(e, ReleaseRoom) for e in waiting.effects), waiting.effects


# ---- repair: kube-scheduler refuses a planned node ------------------------------------


def test_a_refused_planned_node_is_replaced_by_another_free_node() -> None:
    # Gang of two 8-GPU pods, three 8-GPU nodes: g-0 → n1, g-1 → n2 (by name).  g-0
    # binds to n1.  kube-scheduler then refuses n2 to g-1 (say a hostPort conflict) and
    # n1 is full, so it asks about n3 alone.  The job is planned again without n2: g-0
    # is bound (1), g-1 fits on n3 (1 more) → 2 of 2: g-1 is placed on n3, in a new
    # reservation that remembers n2 was refused.
    snap = snapshot([node("n1"), node("n2"), node("n3")], gang_pods(2))
    first = filter_one(snap, "g-0")
    apply_all(snap, first)
    assert snap.reserved_node(key("g-1")) == "n2"
    apply(snap, AssumeBound(snap.pods[key("g-0")], "n1"))

    result = filter_one(snap, "g-1", ["n3"])
    assert result.passed == ["n3"] and result.gang_waiting is None
    assert result.effects == (
        HoldRoom(
            Reservation(
                job=JOB,
                quota="default",
                placements={key("g-1"): "n3"},
                victims=(),
                created=NOW,
                expires=NOW + TIMEOUT,
                refused=frozenset({"n2"}),
            )
        ),
    )
    apply_all(snap, result)
    assert snap.reserved_node(key("g-1")) == "n3"


def test_a_repair_replans_every_unbound_pod_of_the_job_off_the_refused_node() -> None:
    # Gang of three 8-GPU pods on four 8-GPU nodes, none bound yet: g-0 → n1, g-1 → n2,
    # g-2 → n3.  kube-scheduler refuses n2 to g-1 and passes the rest.  The job's
    # unbound pods are planned again in place of their own reservation, without n2:
    # three pods on n1, n3, n4, one each.  g-1 goes where the new plan puts it.
    snap = snapshot([node("n1"), node("n2"), node("n3"), node("n4")], gang_pods(3))
    apply_all(snap, filter_one(snap, "g-0"))
    assert snap.reserved_node(key("g-1")) == "n2"

    result = filter_one(snap, "g-1", ["n1", "n3", "n4"])
    assert result.gang_waiting is None and result.gang_placed
    assert len(result.effects) == 1
    hold = result.effects[0]
    assert isinstance(hold, HoldRoom)
    placements = hold.reservation.placements
    assert set(placements) == {key("g-0"), key("g-1"), key("g-2")}
    assert sorted(placements.values()) == ["n1", "n3", "n4"]
    assert "n2" in hold.reservation.refused
    assert result.passed == [placements[key("g-1")]]
    apply_all(snap, result)
    for pod_key, node_name in placements.items():
        assert snap.reserved_node(pod_key) == node_name


@BOTH_MODES
def test_a_refused_planned_node_with_no_other_room_keeps_the_room_while_the_gang_fits(
    as_extender: bool,
) -> None:
    # Gang of two 8-GPU pods, two 8-GPU nodes: g-0 → n1, g-1 → n2.  kube-scheduler
    # refuses n2 to g-1.  Planned again without n2, only n1 is left: 1 of 2 pods fit.
    # As Muster sees the cluster the job still fits whole (n2 is free but for its own
    # room), so the refusal may pass: the room stays reserved and the pod is turned away
    # (unresolvably: no eviction helps), with no effect.
    snap = snapshot([node("n1"), node("n2")], gang_pods(2))
    apply_all(snap, filter_one(snap, "g-0"))
    held = dict(snap.reservations)
    assert snap.reserved_node(key("g-1")) == "n2"

    result = filter_one(snap, "g-1", ["n1"], as_extender=as_extender)
    assert result.passed == [] and result.failed == {}
    reason = result.gang_waiting
    assert reason is not None
    assert "refuses node n2" in reason and "stays reserved" in reason
    assert result.unresolvable == {"n1": reason}
    assert result.effects == ()
    assert dict(snap.reservations) == held


@BOTH_MODES
def test_a_refused_planned_node_that_no_longer_fits_releases_the_gang(as_extender: bool) -> None:
    # As above, but the refusal is real as Muster sees it too: a pod bound to n2 behind
    # the scheduler's back takes its 8 GPUs.  Planned again without n2, 1 of 2 pods fit;
    # as Muster sees the cluster n2 is full, so 1 of 2 again: the job waits whole
    # (resolvably: evicting could help) and its reservation is released.
    snap = snapshot([node("n1"), node("n2")], gang_pods(2))
    apply_all(snap, filter_one(snap, "g-0"))
    assert snap.reserved_node(key("g-1")) == "n2"
    snap.upsert_pod(parse_pod(pod("intruder", "team-b", gpu=8, node="n2")))

    result = filter_one(snap, "g-1", ["n1"], as_extender=as_extender)
    reason = "gang team-a/g: 1 of 2 pods fit; waiting for room for all 2"
    assert result.passed == []
    assert result.gang_waiting == reason
    assert result.failed == {"n1": reason}
    assert result.effects == (ReleaseRoom(JOB),)
    apply_all(snap, result)
    assert snap.reservations == {}
    assert snap.reserved_node(key("g-0")) is None and snap.reserved_node(key("g-1")) is None


def _reserved_after_eviction(occupant: dict[str, Any]) -> ClusterState:
    """Gang of two 8-GPU pods on three 8-GPU nodes, g-0 → n1, g-1 → n2, as a plan that
    evicted team-b/v (gone since) reserved them; g-0 bound to n1; ``occupant`` on n2."""
    snap = snapshot([node("n1"), node("n2"), node("n3")], gang_pods(2))
    placements = {key("g-0"): "n1", key("g-1"): "n2"}
    reservation = Reservation(JOB, "default", placements, ("team-b/v",), NOW - 5, NOW + 300)
    apply(snap, HoldRoom(reservation))
    apply(snap, AssumeBound(snap.pods[key("g-0")], "n1"))
    snap.upsert_pod(parse_pod(occupant))
    return snap


def test_reserved_room_a_pod_took_while_the_plan_was_made_is_planned_again() -> None:
    # kube-scheduler bound team-b/late to n2 while Muster's plan, not seeing it yet,
    # reserved n2 for g-1 (the plan evicted team-b/v elsewhere, so the reservation has
    # victims).  late is no victim and is not leaving: n2's room never comes, so waiting
    # for it would hold g-0 bound alone for good.  kube-scheduler passes n3 only (n1 and
    # n2 are full).  Planned again without n2: g-0 bound (1), g-1 fits on n3 (1 more) →
    # 2 of 2: g-1 is placed on n3, its plan's victims kept, n2 remembered as refused.
    snap = _reserved_after_eviction(pod("late", "team-b", gpu=8, node="n2"))
    result = filter_one(snap, "g-1", ["n3"])
    assert result.passed == ["n3"] and result.gang_waiting is None
    assert result.effects == (
        HoldRoom(
            Reservation(
                job=JOB,
                quota="default",
                placements={key("g-1"): "n3"},
                victims=("team-b/v",),
                created=NOW,
                expires=NOW + TIMEOUT,
                refused=frozenset({"n2"}),
            )
        ),
    )


def test_reserved_room_a_victim_still_leaves_is_waited_for() -> None:
    # The same, but the pod on n2 is terminating (a victim on its way out, as
    # kube-scheduler may still see it): n2's room is coming, so g-1 waits for it and
    # the reservation stays as it is.
    leaving = pod("v2", "team-b", gpu=8, node="n2")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T10:29:55Z"
    snap = _reserved_after_eviction(leaving)
    held = dict(snap.reservations)
    result = filter_one(snap, "g-1", ["n3"])
    assert result.passed == []
    assert result.gang_waiting == "gang team-a/g: waiting for the room reserved on node n2"
    assert result.effects == ()
    assert dict(snap.reservations) == held


def test_reserved_room_on_a_node_cordoned_since_the_plan_is_planned_again() -> None:
    # The same reservation, n2 empty but cordoned after the plan: kube-scheduler will
    # never place g-1 there, so it is planned again without n2, on n3.
    snap = _reserved_after_eviction(pod("elsewhere", "team-b", cpu="1", node="n3"))
    snap.upsert_node(parse_node(node("n2", unschedulable=True)))
    result = filter_one(snap, "g-1", ["n3"])
    assert result.passed == ["n3"] and result.gang_waiting is None
    (hold,) = result.effects
    assert isinstance(hold, HoldRoom)
    assert hold.reservation.placements == {key("g-1"): "n3"}
    assert hold.reservation.refused == frozenset({"n2"})


# ---- backoff after a gang was given up -------------------------------------------------


def stamp(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@BOTH_MODES
def test_a_gang_backing_off_is_turned_away_until_its_retry_time(as_extender: bool) -> None:
    snap = snapshot([node("n1"), node("n2")], gang_pods(2))
    until = stamp("2026-01-01T10:35:00Z")  # five minutes after NOW
    snap.book.backoffs[JOB] = GangBackoff(attempts=2, given_up=NOW - 60, until=until)
    # Before `until`: every node unresolvable, the reason names the retry time (in the
    # RFC 3339 form Kubernetes writes) and the attempt.
    for name in ("g-0", "g-1"):
        result = filter_one(snap, name, as_extender=as_extender)
        assert result.passed == [] and result.failed == {}
        assert set(result.unresolvable) == {"n1", "n2"}
        reason = result.gang_waiting
        assert reason is not None and result.unresolvable["n1"] == reason
        assert "2026-01-01T10:35:00Z" in reason and "attempt 2" in reason
        assert result.effects == ()
    # From `until` on (now == until included: "retried at" that time) it is planned as
    # usual: two pods, two free nodes, g-0 first → n1.
    for now in (until, until + 1):
        result = filter_one(snap, "g-0", as_extender=as_extender, now=now)
        assert result.gang_waiting is None and result.gang_placed
        assert result.passed == ["n1"]
        hold = result.effects[0]
        assert isinstance(hold, HoldRoom)
        assert hold.reservation.placements == {key("g-0"): "n1", key("g-1"): "n2"}


@BOTH_MODES
def test_a_gang_past_its_backoff_limit_is_never_retried(as_extender: bool) -> None:
    snap = snapshot([node("n1"), node("n2")], gang_pods(2))
    snap.book.backoffs[JOB] = GangBackoff(attempts=3, given_up=NOW - 60, until=None)
    for now in (NOW, NOW + 10**9):
        result = filter_one(snap, "g-0", as_extender=as_extender, now=now)
        assert result.passed == [] and result.failed == {}
        assert set(result.unresolvable) == {"n1", "n2"}
        assert result.gang_waiting is not None
        assert "not retried" in result.gang_waiting
        assert result.effects == ()


def test_give_up_doubles_the_backoff_up_to_its_max_and_stops_past_the_limit() -> None:
    # base 10s, max 50s, limit 4: attempt n waits min(50, 10 * 2**(n-1)) from the moment
    # it is given up: 10, 20, 40, 50 (80 capped); the 5th attempt is past the limit.
    args = parse_args({"backoffBaseSeconds": 10, "backoffMaxSeconds": 50, "backoffLimitCount": 4})
    snap = snapshot([node("n1")], gang_pods(2), args=args)
    waits = []
    for attempt in range(1, 6):
        now = NOW + 1000 * attempt
        backoff = gangstatus.give_up(snap, JOB, now)
        assert backoff.attempts == attempt and backoff.given_up == now
        waits.append(None if backoff.until is None else backoff.until - now)
        snap.book.backoffs[JOB] = backoff
    assert waits == [10, 20, 40, 50, None]


def test_give_up_without_a_limit_always_retries() -> None:
    # No backoffLimitCount: the wait doubles from 60s (the default base) and stays at
    # the 3600s default max, never "for good".
    snap = snapshot([node("n1")], gang_pods(2))
    waits = []
    for _ in range(10):
        backoff = gangstatus.give_up(snap, JOB, NOW)
        assert backoff.until is not None
        waits.append(backoff.until - NOW)
        snap.book.backoffs[JOB] = backoff
    assert waits == [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600, 3600]


def test_give_up_with_a_limit_of_zero_gives_up_for_good_at_once() -> None:
    snap = snapshot([node("n1")], gang_pods(2), args=parse_args({"backoffLimitCount": 0}))
    backoff = gangstatus.give_up(snap, JOB, NOW)
    assert backoff == GangBackoff(attempts=1, given_up=NOW, until=None)


# ---- min-available below the job's size -----------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "group"),
    [
        ({}, PodGroupInfo("team-a", "g", min_member=2)),
        ({keys.GANG_MIN_AVAILABLE_ANNOTATION: "2"}, None),
    ],
    ids=["podgroup-minMember", "annotation"],
)
@BOTH_MODES
def test_a_gang_of_three_with_min_available_two_is_placed_with_room_for_two(
    annotations: dict[str, str], group: PodGroupInfo | None, as_extender: bool
) -> None:
    # Three 8-GPU pods, min-available 2, two free 8-GPU nodes: 2 of them fit, which is
    # enough.  g-0 (filtered first) → n1, g-1 → n2; g-2 has no room and is left out.
    snap = snapshot([node("n1"), node("n2")], gang_pods(3, annotations=annotations))
    if group is not None:
        snap.set_pod_group(group)
    result = filter_one(snap, "g-0", as_extender=as_extender)
    assert result.gang_placed and result.passed == ["n1"]
    hold = result.effects[0]
    assert isinstance(hold, HoldRoom)
    assert hold.reservation.placements == {key("g-0"): "n1", key("g-1"): "n2"}
    apply_all(snap, result)
    # The third pod: min-available is reserved, so it is one more pod of the job, filtered
    # like any pod: both nodes' room is held for the other two.
    third = filter_one(snap, "g-2", as_extender=as_extender)
    assert third.passed == [] and third.gang_waiting is None and third.effects == ()
    assert set(third.failed) == {"n1", "n2"}
    assert snap.reserved_node(key("g-2")) is None


def test_a_pod_left_out_of_a_placement_that_reaches_min_available_is_turned_away() -> None:
    # min-available 2 of three pods: two big (8 GPUs) and one small (4 GPUs); two 8-GPU
    # nodes.  The small pod is filtered, but shapes are placed largest first: big-0 → n1,
    # big-1 → n2, and no room is left for the small one.  2 ≥ 2: the placement is
    # reserved (for the two big pods), and the small pod is turned away resolvably.
    pods = [
        pod("g-big0", gpu=8, group="g", annotations={keys.GANG_MIN_AVAILABLE_ANNOTATION: "2"}),
        pod("g-big1", gpu=8, group="g"),
        pod("g-small", gpu=4, group="g"),
    ]
    snap = snapshot([node("n1"), node("n2")], pods)
    result = filter_one(snap, "g-small")
    reason = "gang team-a/g is placed without pod g-small: no room for it"
    assert result.passed == [] and result.gang_waiting == reason
    assert result.failed == {"n1": reason, "n2": reason}
    assert len(result.effects) == 1
    hold = result.effects[0]
    assert isinstance(hold, HoldRoom)
    assert hold.reservation.placements == {key("g-big0"): "n1", key("g-big1"): "n2"}


def test_min_available_is_reached_by_the_pods_that_fit_together() -> None:
    # min-available 2 of three pods: one big (8 GPUs), two small (4 GPUs); one 8-GPU
    # node.  The two small pods together fill n1 and reach min-available 2, so the job
    # can run: they should be reserved on n1 (the big one left out).
    pods = [
        pod("g-big", gpu=8, group="g", annotations={keys.GANG_MIN_AVAILABLE_ANNOTATION: "2"}),
        pod("g-s0", gpu=4, group="g"),
        pod("g-s1", gpu=4, group="g"),
    ]
    snap = snapshot([node("n1")], pods)
    result = filter_one(snap, "g-s0")
    assert result.gang_waiting is None and result.passed == ["n1"]


# ---- pods that are not in a gang -------------------------------------------------------


def build_mixed() -> ClusterState:
    """Two 8-GPU nodes; n1 holds a reservation for another gang's pending pod."""
    snap = snapshot(
        [node("n1"), node("n2"), node("n3", gpu=4)],
        [
            pod("lone", gpu=4),
            pod("big", gpu=8),
            pod("solo-0", gpu=2, group="solo"),  # a pod group of one pod
            pod("m-0", gpu=2, group="m", annotations={keys.GANG_MIN_AVAILABLE_ANNOTATION: "1"}),
            pod("m-1", gpu=2, group="m"),
            pod("r-0", "team-r", gpu=6),
        ],
    )
    snap.add_reservation(
        Reservation("team-r/r-0", "default", {"team-r/r-0": "n1"}, (), NOW, NOW + TIMEOUT)
    )
    return snap


@pytest.mark.parametrize("name", ["lone", "big", "solo-0", "m-0", "m-1"])
@BOTH_MODES
def test_a_pod_in_no_gang_is_filtered_exactly_as_filter_nodes_does(
    name: str, as_extender: bool
) -> None:
    # No pod-group label, a pod group of one, or min-available 1: not a gang, so the
    # gang rules add nothing.  Every pod that passes gets its job's admission hold
    # (quotaHoldSeconds, 60 s by default; issue 23: what the filter admitted counts at
    # once, for every pod) over the job's pending pods: a lone pod's job and solo-0's
    # are just the pod itself; m-0's and m-1's is both of them.
    snap = build_mixed()
    candidate: PodInfo = snap.pods[key(name)]
    assert not gangsize.is_gang(snap, candidate)
    names = ["n1", "n2", "n3", "gone"]
    result = verb.filter_pod(snap, candidate, names, as_extender=as_extender, now=NOW)
    held = {
        "lone": HoldQuota(candidate.job, (key("lone"),), NOW + 60),
        "big": HoldQuota(candidate.job, (key("big"),), NOW + 60),
        "solo-0": HoldQuota("team-a/solo", (key("solo-0"),), NOW + 60),
        "m-0": HoldQuota("team-a/m", (key("m-0"), key("m-1")), NOW + 60),
        "m-1": HoldQuota("team-a/m", (key("m-0"), key("m-1")), NOW + 60),
    }
    expected = filter_nodes(snap, candidate, names, as_extender=as_extender)
    hold = (held[name],) if expected.passed and not expected.quota_failures else ()
    assert result == dataclasses.replace(expected, effects=hold)
    assert result.gang_waiting is None and not result.gang_placed


@BOTH_MODES
def test_a_gang_its_quota_rejects_gets_the_quota_reason_not_a_gang_one(as_extender: bool) -> None:
    # team-a's max is 16 GPUs; the gang asks 3 x 8 = 24: the job-level quota check comes
    # first, every node is unresolvable for it, and no gang rule is applied.
    snap = snapshot(
        [node("n1"), node("n2"), node("n3")],
        gang_pods(3),
        [quota("team-a", min={"nvidia.com/gpu": "16"}, max={"nvidia.com/gpu": "16"})],
    )
    result = filter_one(snap, "g-0", as_extender=as_extender)
    assert result.quota_failures
    assert set(result.unresolvable) == {"n1", "n2", "n3"}
    assert result.gang_waiting is None and result.effects == () and result.passed == []


def test_a_mixed_shape_gang_the_greedy_order_misses_is_placed_by_the_search() -> None:
    # n0: 4 GPUs, 16 CPUs; n1: 8 GPUs, 16 CPUs.  The gang: (1 GPU, 1 CPU) twice,
    # (2 GPUs, 16 CPUs), (3 GPUs, 3 CPUs).  The 16-CPU pod fits only on a node with all
    # 16 CPUs free, so it must have n0 alone; the rest (5 GPUs, 5 CPUs) fit n1.  Largest
    # first puts the 3-GPU pod on n0 and strands the 16-CPU one: found by review, the
    # filter then waited forever while the planner said the job fits.
    shapes = [(1, "1"), (2, "16"), (3, "3"), (1, "1")]
    pods = [pod(f"g-{i}", gpu=g, cpu=c, group="g") for i, (g, c) in enumerate(shapes)]
    snap = snapshot([node("n0", gpu=4, cpu="16"), node("n1", gpu=8, cpu="16")], pods)
    result = verb.filter_pod(snap, snap.pods[key("g-0")], ["n0", "n1"], as_extender=True, now=NOW)
    assert result.gang_placed, result
    (hold,) = [e for e in result.effects if isinstance(e, HoldRoom)]
    assert hold.reservation.placements[key("g-1")] == "n0"
    assert {hold.reservation.placements[key(f"g-{i}")] for i in (0, 2, 3)} == {"n1"}


# ---- a gang of undeclared size that grows is checked against its quota whole -----------


def test_pods_a_growing_gang_adds_to_its_reservation_must_fit_the_quota() -> None:
    # Found by the soak: a gang of undeclared size (min-available: every pod that exists)
    # was placed when two of its pods existed; two more arrived, and the filter of a pod
    # already reserved re-planned the gang for all four, reserving the two new ones with
    # no quota check: the parent went past its max when they bound.
    # Here team-a's leaf (max 16 GPUs) is under org (max 6); preemptible pods ask for 2
    # GPUs (so admission is: used + job <= max on the way up).
    # g-0 and g-1: 4 GPUs, within org's 6, placed and reserved.  Then g-2 and g-3 (4
    # more) would make 8 > 6: the filter of g-1 (reserved) turns the job away naming
    # org's max, and reserves nothing more.
    quotas = [
        quota("org", max={GPU: "6"}, is_parent=True),
        quota("team-a", namespace="team-a", parent="org", max={GPU: "16"}),
    ]
    snap = snapshot([node("n1"), node("n2")], gang_pods(2, gpu=2, preemptible=True), quotas)
    first = filter_one(snap, "g-0")
    assert first.gang_placed
    apply_all(snap, first)
    assert snap.reserved_node(key("g-1")) is not None
    for name in ("g-2", "g-3"):
        snap.upsert_pod(parse_pod(pod(name, gpu=2, group="g", preemptible=True)))
    again = filter_one(snap, "g-1")
    assert again.passed == [] and again.quota_failures
    assert "org" in again.quota_failures[0]
    assert not any(isinstance(effect, HoldRoom) for effect in again.effects)
    assert snap.reserved_node(key("g-2")) is None


def test_pods_a_growing_gang_adds_within_the_quota_are_placed() -> None:
    # The same with org's max at 8: all four fit (8 GPUs), so the gang is placed whole.
    quotas = [
        quota("org", max={GPU: "8"}, is_parent=True),
        quota("team-a", namespace="team-a", parent="org", max={GPU: "16"}),
    ]
    snap = snapshot([node("n1"), node("n2")], gang_pods(2, gpu=2, preemptible=True), quotas)
    apply_all(snap, filter_one(snap, "g-0"))
    for name in ("g-2", "g-3"):
        snap.upsert_pod(parse_pod(pod(name, gpu=2, group="g", preemptible=True)))
    again = filter_one(snap, "g-1")
    assert again.gang_placed and again.passed


def test_a_held_pod_filtered_again_does_not_extend_its_hold_to_pods_created_since() -> None:
    # g-0 and g-1 (2 GPUs each, preemptible; min-available 1 each: an elastic job) are
    # admitted and held; then g-2 arrives.  Filtering g-0 again extends the hold over
    # g-0 and g-1 only: g-2 was never checked against the quota, so it is not held (its
    # own filter checks it).
    pods = gang_pods(2, gpu=2, preemptible=True)
    for made in pods:
        made["metadata"]["annotations"]["gang.scheduling.koordinator.sh/min-available"] = "1"
    snap = snapshot([node("n1"), node("n2")], pods)
    apply_all(snap, filter_one(snap, "g-0"))
    assert snap.quota_held(key("g-0")) and snap.quota_held(key("g-1"))
    late = pod("g-2", gpu=2, group="g", preemptible=True)
    late["metadata"]["annotations"]["gang.scheduling.koordinator.sh/min-available"] = "1"
    snap.upsert_pod(parse_pod(late))
    apply_all(snap, filter_one(snap, "g-0"))
    assert not snap.quota_held(key("g-2"))
