"""What the filter admitted counts at once, for every pod (issue 23, item 0).

kube-scheduler assumes a pod when it passes the filter and binds it a moment later;
Muster's informer sees the binding only then.  A burst of pods filtered back to back
must therefore not all be admitted against the same room: each admitted pod is
charged to its quota (an admission hold) until it is seen bound, deleted, turned away
by a later filter call, or ``quotaHoldSeconds`` pass.
"""

from __future__ import annotations

import dataclasses

from extender.core.effects import apply
from extender.core.filter.verb import filter_pod
from extender.core.objects import PodInfo, parse_pod
from extender.core.state import ClusterState, Reservation
from tests.builders import node, pod, quota, snapshot

NOW = 1_800_000_000.0
NODES = ["n1", "n2"]


def burst_cluster() -> ClusterState:
    # Quota a: max 3 cpu, no min; nodes with 32 cpu each, so only the quota limits.
    return snapshot(
        [node("n1", gpu=0), node("n2", gpu=0)],
        [pod(f"p{i}", "a", cpu="1", preemptible=True) for i in range(5)],
        [quota("a", max={"cpu": "3"})],
    )


def filter_and_apply(snap: ClusterState, candidate: PodInfo, now: float = NOW) -> bool:
    """Filter ``candidate`` as kube-scheduler would, apply the effects, say if it passed."""
    result = filter_pod(snap, candidate, NODES, as_extender=True, now=now)
    for effect in result.effects:
        apply(snap, effect)
    return bool(result.passed) and not result.quota_failures


def test_a_burst_of_lone_pods_is_admitted_only_up_to_max() -> None:
    # docs/design.md, preemptible job: min(min, npRequest) + pUsed + job <= max, here
    # 0 + pUsed + 1 <= 3.  No binding is seen between the calls: each admitted pod must
    # count, so exactly the first three pass and the last two are turned away.
    snap = burst_cluster()
    admitted = [filter_and_apply(snap, snap.pods[f"a/p{i}"]) for i in range(5)]
    assert admitted == [True, True, True, False, False]
    assert snap.ledger["a"].used["cpu"] == 3000


def test_mixed_sizes_stop_at_max() -> None:
    # 5 + 1 + 0.5 cpu against max 6: 5 passes (5 <= 6), 1 passes (6 <= 6), 0.5 would
    # make 6.5 > 6 and is turned away.
    snap = snapshot(
        [node("n1", gpu=0), node("n2", gpu=0)],
        [
            pod("big", "a", cpu="5", preemptible=True),
            pod("one", "a", cpu="1", preemptible=True),
            pod("half", "a", cpu="500m", preemptible=True),
        ],
        [quota("a", max={"cpu": "6"})],
    )
    admitted = [filter_and_apply(snap, snap.pods[f"a/{n}"]) for n in ("big", "one", "half")]
    assert admitted == [True, True, False]


def test_a_pod_the_informer_has_not_delivered_is_held_too() -> None:
    # kube-scheduler may ask about a pod before Muster's informer delivers it: its hold
    # must count all the same.  Three pods known, two only through the filter call.
    snap = burst_cluster()
    early = [parse_pod(pod(f"q{i}", "a", cpu="1", preemptible=True)) for i in range(2)]
    assert all(p.key not in snap.pods for p in early)
    admitted = [filter_and_apply(snap, p) for p in early]
    admitted += [filter_and_apply(snap, snap.pods[f"a/p{i}"]) for i in range(3)]
    assert admitted == [True, True, True, False, False]
    # The informer's copy arriving later changes nothing: still held, still counted once.
    for p in early:
        snap.upsert_pod(p)
    assert snap.ledger["a"].used["cpu"] == 3000


def test_a_hold_ends_when_the_pod_binds_is_deleted_or_times_out() -> None:
    snap = burst_cluster()
    for i in range(3):
        assert filter_and_apply(snap, snap.pods[f"a/p{i}"])
    # Bound: counted as bound now, not twice.
    snap.upsert_pod(dataclasses.replace(snap.pods["a/p0"], node_name="n1"))
    assert snap.ledger["a"].used["cpu"] == 3000
    assert not snap.quota_held("a/p0")
    # Deleted: its room is free for the next pod of the burst.
    snap.remove_pod("a/p1")
    assert filter_and_apply(snap, snap.pods["a/p3"])
    # kube-scheduler gave up on p2 and p3 (never bound): quotaHoldSeconds after they were
    # admitted their holds end, and only the bound p0 is charged.
    later = NOW + snap.args.quota_hold_seconds + 1
    snap.release_quota_holds(later)
    assert not snap.quota_held("a/p2") and not snap.quota_held("a/p3")
    assert snap.ledger["a"].used["cpu"] == 1000


def test_a_held_pod_turned_away_by_a_later_call_lets_its_room_go() -> None:
    # p0 is admitted (held); then every node is refused to it, the whole of each node's
    # cpu being held for another job's reservation, so it is not about to bind: its hold
    # ends, and p3 may have the quota room.
    snap = burst_cluster()
    for i in range(3):
        assert filter_and_apply(snap, snap.pods[f"a/p{i}"])
    assert not filter_and_apply(snap, snap.pods["a/p3"])
    for name in NODES:
        snap.upsert_pod(parse_pod(pod(f"r-{name}", "other", cpu="32")))
        snap.add_reservation(
            Reservation(f"other/r-{name}", "default", {f"other/r-{name}": name}, (), NOW, NOW + 300)
        )
    assert not filter_and_apply(snap, snap.pods["a/p0"])
    assert not snap.quota_held("a/p0")
    assert filter_and_apply(snap, snap.pods["a/p3"], NOW) is False  # nodes still held
    assert snap.ledger["a"].used["cpu"] == 2000  # p1 and p2; p0's room went back
