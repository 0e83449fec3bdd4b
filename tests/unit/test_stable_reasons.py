"""Rejection reasons are the same from attempt to attempt while nothing in the cluster
changes (issue #14, item 1): kube-scheduler rewrites a pod's ``PodScheduled`` condition
when the message changes, and that update would itself requeue the pod, in a loop.

Each case asks twice, 37 s apart, about an unchanged cluster, and expects the very same
answer; each case is one where an answer could embed the time (a countdown, seconds
left, a timestamp of the attempt).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from extender.core.filter.verb import filter_pod
from extender.core.objects import parse_pod
from extender.core.preemption.planner import Refusal, plan_job_preemption
from extender.core.state import ClusterState, GangBackoff, Reservation
from tests.builders import node, pod, quota, snapshot

NOW = dt.datetime(2026, 1, 1, 10, 30, tzinfo=dt.UTC).timestamp()
LATER = NOW + 37
GPU = "nvidia.com/gpu"


def gang(count: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [pod(f"g-{i}", gpu=8, group="g", **kwargs) for i in range(count)]


def over_quota() -> tuple[ClusterState, str]:
    snap = snapshot(
        [node("n0")], [pod("p", gpu=8)], [quota("a", namespace="team-a", max={GPU: "4"})]
    )
    return snap, "team-a/p"


def room_reserved_for_another_job() -> tuple[ClusterState, str]:
    snap = snapshot([node("n0")], [pod("held", gpu=8, group="x"), pod("p", gpu=8)])
    reservation = Reservation("team-a/x", "default", {"team-a/held": "n0"}, (), NOW, NOW + 300)
    snap.add_reservation(reservation)
    return snap, "team-a/p"


def gang_short_of_pods() -> tuple[ClusterState, str]:
    pods = gang(1)
    pods[0]["metadata"]["annotations"]["gang.scheduling.koordinator.sh/min-available"] = "3"
    return snapshot([node("n0"), node("n1"), node("n2")], pods), "team-a/g-0"


def gang_backing_off() -> tuple[ClusterState, str]:
    snap = snapshot([node("n0"), node("n1")], gang(2))
    snap.book.backoffs["team-a/g"] = GangBackoff(1, NOW - 10, NOW + 600)
    return snap, "team-a/g-0"


def gang_that_does_not_fit_whole() -> tuple[ClusterState, str]:
    return snapshot([node("n0"), node("n1")], gang(3)), "team-a/g-0"


CASES = [
    over_quota,
    room_reserved_for_another_job,
    gang_short_of_pods,
    gang_backing_off,
    gang_that_does_not_fit_whole,
]


@pytest.mark.parametrize("as_extender", [True, False], ids=["extender", "full"])
@pytest.mark.parametrize("case", CASES, ids=[case.__name__ for case in CASES])
def test_the_filter_answers_alike_at_every_attempt(case: Any, as_extender: bool) -> None:
    snap, key = case()
    target = snap.pods[key]
    names = sorted(snap.nodes)
    first = filter_pod(snap, target, names, as_extender=as_extender, now=NOW)
    again = filter_pod(snap, target, names, as_extender=as_extender, now=LATER)
    assert first.failed or first.unresolvable  # a rejection, whose reasons are compared
    assert (first.failed, first.unresolvable) == (again.failed, again.unresolvable)


def test_the_planners_in_flight_refusal_answers_alike_at_every_attempt() -> None:
    # A job holding a reservation is in flight: the refusal names when the reservation
    # ends, not how many seconds are left.
    preemptor = pod("t-0", gpu=8, group="train", can_preempt=True)
    snap = snapshot([node("n0")], [preemptor])
    snap.add_reservation(
        Reservation("team-a/train", "default", {"team-a/t-0": "n0"}, (), NOW, NOW + 300)
    )
    first = plan_job_preemption(snap, "team-a/train", NOW)
    again = plan_job_preemption(snap, "team-a/train", LATER)
    assert isinstance(first, Refusal) and first == again
    # NOW is 10:30:00; the reservation ends 300 s later.
    assert "in flight" in first.reasons[0] and "2026-01-01T10:35:00Z" in first.reasons[0]


def test_a_pod_seen_twice_as_a_new_version_is_answered_alike() -> None:
    # The informer's update between attempts (a new resourceVersion, nothing else)
    # changes nothing in the answer.
    snap, key = gang_that_does_not_fit_whole()
    target = snap.pods[key]
    first = filter_pod(snap, target, sorted(snap.nodes), as_extender=True, now=NOW)
    snap.upsert_pod(dataclasses.replace(parse_pod(pod("g-0", gpu=8, group="g")), uid=target.uid))
    again = filter_pod(snap, snap.pods[key], sorted(snap.nodes), as_extender=True, now=LATER)
    assert (first.failed, first.unresolvable) == (again.failed, again.unresolvable)
