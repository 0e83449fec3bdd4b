"""A plan is finished or undone, never left half; in flight survives timers (issue #14,
items 2 and 3): :func:`extender.core.settling.settle_reservations`.

Derived by hand from the rule: at its timeout a reservation is extended by 30 s while a
victim marked for its job is terminating (at most 600 s past the timeout); otherwise
the plan ends, and so it does at once when its job has no pods left.  An ended plan
takes back the marks of its victims not yet leaving and clears the reservation Muster
wrote on its job's pods.
"""

from __future__ import annotations

import json
from typing import Any

from base import keys
from extender.core.objects import parse_pod
from extender.core.settling import settle_reservations
from extender.core.state import ClusterState, Reservation
from tests.builders import node, pod, snapshot

T0 = 1_800_000_000.0
JOB = "team-a/train"
TIMEOUT = 300.0


def victim(name: str, node_name: str, *, terminating: bool = False) -> dict[str, Any]:
    made = pod(name, "team-b", gpu=8, node=node_name, preemptible=True)
    made["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    made["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = json.dumps({"preemptor": JOB})
    if terminating:
        made["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    return made


def preemptor() -> dict[str, Any]:
    written = {"job": JOB, "node": "n0", "created": T0, "expires": T0 + TIMEOUT, "victims": []}
    annotations = {keys.RESERVATION_ANNOTATION: json.dumps(written)}
    return pod("t-0", gpu=8, group="train", can_preempt=True, annotations=annotations)


def state(*victims: dict[str, Any]) -> ClusterState:
    snap = snapshot([node("n0"), node("n1")], [*victims, preemptor()])
    keys_ = tuple(f"team-b/{v['metadata']['name']}" for v in victims)
    snap.add_reservation(
        Reservation(JOB, "default", {f"{JOB.split('/')[0]}/t-0": "n0"}, keys_, T0, T0 + TIMEOUT)
    )
    return snap


def test_nothing_changes_before_the_timeout() -> None:
    assert settle_reservations(state(victim("b-0", "n0")), T0 + 299) == ([], [])


def test_a_victim_still_terminating_extends_the_reservation_by_the_margin() -> None:
    snap = state(victim("b-0", "n0", terminating=True))
    extended, ended = settle_reservations(snap, T0 + 300)
    assert ended == []
    assert [(r.job, r.expires) for r in extended] == [(JOB, T0 + 330)]
    # ... but not past 600 s beyond the timeout: then the plan ends (nothing to unmark:
    # the victim is leaving already).
    extended, ended = settle_reservations(snap, T0 + 300 + 600)
    assert extended == [] and [(p.job, p.unmark) for p in ended] == [(JOB, ())]


def test_a_timed_out_plan_takes_back_the_marks_of_victims_not_yet_leaving() -> None:
    # b-0 was never evicted, b-1 is terminating: only b-0's mark is taken back; since a
    # victim is terminating the reservation would be extended, so b-1 is gone here.
    snap = state(victim("b-0", "n0"))
    extended, ended = settle_reservations(snap, T0 + 300)
    assert extended == []
    (plan,) = ended
    assert plan.why == "its reservation timed out"
    assert [p.key for p in plan.unmark] == ["team-b/b-0"]
    assert [p.key for p in plan.release] == ["team-a/t-0"]


def test_a_plan_whose_job_is_gone_ends_at_once() -> None:
    snap = state(victim("b-0", "n0"))
    snap.remove_pod("team-a/t-0")
    extended, ended = settle_reservations(snap, T0 + 10)
    assert extended == []
    assert [(p.job, p.why, [v.key for v in p.unmark]) for p in ended] == [
        (JOB, "the job is gone", ["team-b/b-0"])
    ]
    # Once the mark is taken back (the informer sees b-0 unmarked), nothing is left.
    snap.upsert_pod(parse_pod(pod("b-0", "team-b", gpu=8, node="n0", preemptible=True)))
    assert settle_reservations(snap, T0 + 10) == ([], [])


def test_a_released_reservation_left_on_pods_is_cleared() -> None:
    # The reservation ended in memory (as on every replica) but its copy stayed on t-0
    # (its clearing lost): the leader clears it, and nothing else.
    snap = state()
    snap.expire_reservations(T0 + 300)
    extended, ended = settle_reservations(snap, T0 + 301)
    assert extended == []
    assert [(p.job, p.why, p.unmark, [r.key for r in p.release]) for p in ended] == [
        (JOB, "its reservation was released", (), ["team-a/t-0"])
    ]


def test_marks_older_than_any_reservation_for_a_job_holding_none_are_taken_back() -> None:
    # b-0 was marked for the job at T0; the job holds no reservation (a leader stopped
    # between a plan's end and its undo).  Until the reservation timeout (300 s) has
    # passed since the mark nothing is done; after it, the mark is taken back.
    marked = victim("b-0", "n0")
    mark = {"preemptor": JOB, "timestamp": "2027-01-15T08:00:00Z"}
    marked["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = json.dumps(mark)
    snap = snapshot([node("n0"), node("n1")], [marked, preemptor()])
    at = snap.pods["team-b/b-0"].marked_at
    assert at is not None and JOB not in snap.reservations
    assert settle_reservations(snap, at + TIMEOUT - 1) == ([], [])
    extended, ended = settle_reservations(snap, at + TIMEOUT + 1)
    assert extended == []
    assert [(p.why, [v.key for v in p.unmark]) for p in ended] == [
        ("its reservation ended", ["team-b/b-0"])
    ]
