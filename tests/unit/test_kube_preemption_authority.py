"""The Kubernetes adapters' side of the one preemption authority: what the pod informer
does with kube-scheduler's own preemptions and unschedulable pods, and when the
PostFilter plans (no API server: the informer's handler is fed events directly)."""

from __future__ import annotations

import copy
import threading
import time
from functools import partial
from typing import Any, cast

import pytest

from base import keys
from base.times import format_time
from extender.core.config import MusterArgs
from extender.core.decisions import DecisionLog
from extender.core.marks import read_mark
from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.reservations import persisted_reservation
from extender.core.settling import settle_reservations
from extender.core.state import Reservation
from extender.kube.client import ApiError, KubeClient
from extender.kube.postfilter import PostFilterLoop
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter, best_effort
from extender.service import StaticSource
from tests.builders import node, pod, quota, record_keys, signed, snapshot
from tests.unit.test_authority import nominated, preempted

GPU = "nvidia.com/gpu"
NOW = 1_800_000_000.0


def unschedulable(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"}
    ]
    return manifest


def live_source(args: MusterArgs | None = None) -> tuple[KubeSource, list[tuple[str, str, bool]]]:
    """A KubeSource fed by hand: quota team-a, nodes n0 and n1 each running one 8-GPU
    preemptible pod of team-a (priorities 1 and 50), as issue 17's cluster."""
    source = KubeSource(
        cast(KubeClient, object()),
        args or MusterArgs(),
        clock=lambda: NOW,
        record_keys=record_keys,
    )
    handed: list[tuple[str, str, bool]] = []
    source.on_unschedulable = lambda job, why, at_once: handed.append((job, why, at_once))
    source._quota_handler("scheduling.x-k8s.io")("ADDED", quota("team-a", max={GPU: "16"}))
    for name in ("n0", "n1"):
        source._on_node("ADDED", node(name))
    source._on_pod("ADDED", victim("low", "n0", 1))
    source._on_pod("ADDED", victim("mid", "n1", 50))
    return source, handed


def victim(name: str, node_name: str, priority: int) -> dict[str, Any]:
    return pod(name, "team-a", gpu=8, node=node_name, preemptible=True, priority=priority)


def preemptor() -> dict[str, Any]:
    return pod("new", "team-a", gpu=8, preemptible=True, can_preempt=True, priority=100)


def test_kube_schedulers_own_preemption_is_counted_held_and_never_planned_again() -> None:
    source, handed = live_source()
    # kube-scheduler (no preemptVerb configured) marks and deletes "low", then records
    # its failure on the preemptor: Unschedulable, nominated to n0.
    source._on_pod("MODIFIED", preempted(victim("low", "n0", 1)))
    assert source.scheduler_preemptions._value.get() == 1
    source._on_pod("MODIFIED", preempted(victim("low", "n0", 1)))  # seen again: once only
    assert source.scheduler_preemptions._value.get() == 1
    source._on_pod("ADDED", unschedulable(nominated(preemptor(), "n0")))
    with source.exclusive() as snap:
        reservation = snap.reservations["team-a/new"]
        assert reservation.placements == {"team-a/new": "n0"}
        assert reservation.victims == ("team-a/low",)
    # The PostFilter is asked (the pod is unschedulable); the room is held already, so it
    # may look at once, and finds the job in flight.
    assert handed == [("team-a/new", "no", True)]
    # Even with the held room gone, the planner finds kube-scheduler's preemption in flight
    # and commits nothing: no second victim (the priority-50 pod on n1).
    with source.exclusive() as snap:
        snap.remove_reservation("team-a/new")
    loop = PostFilterLoop(source, cast(ClusterWriter, None), DecisionLog(), clock=lambda: NOW)
    assert loop.decide("team-a/new", NOW) is None
    assert loop.committed == 0 and loop.refused == 1
    reasons = loop.decisions.for_pod("team-a/new")[-1].reasons
    assert "kube-scheduler's own preemption is in flight" in reasons[0]


def test_the_other_order_victim_condition_after_the_nomination_holds_the_room_too() -> None:
    source, handed = live_source()
    source._on_pod("ADDED", unschedulable(nominated(preemptor(), "n0")))
    with source.exclusive() as snap:
        assert "team-a/new" not in snap.reservations  # no evidence yet
    # A nomination Muster did not make: the PostFilter waits a moment for the evidence.
    assert handed == [("team-a/new", "no", False)]
    source._on_pod("MODIFIED", preempted(victim("low", "n0", 1)))
    with source.exclusive() as snap:
        assert snap.reserved_node("team-a/new") == "n0"


def test_a_pod_outside_muster_preempted_by_kube_scheduler_is_not_counted() -> None:
    source, handed = live_source()
    source._on_pod("ADDED", pod("x", "ops", gpu=8, node="n0", priority=0))
    source._on_pod("MODIFIED", preempted(pod("x", "ops", gpu=8, node="n0", priority=0)))
    assert source.scheduler_preemptions._value.get() == 0
    # ... and an unschedulable pod outside Muster is not the PostFilter's either.
    source._on_pod("ADDED", unschedulable(pod("y", "ops", gpu=8, priority=0)))
    assert handed == []


def test_an_unschedulable_governed_job_is_planned_at_once() -> None:
    source, handed = live_source()
    source._on_pod("ADDED", unschedulable(preemptor()))
    assert handed == [("team-a/new", "no", True)]


class RecordingLoop(PostFilterLoop):
    """A PostFilter loop that records which jobs it decides, and when."""

    def __init__(self, debounce_seconds: float) -> None:
        snap = snapshot([node("n0")], [], [])
        super().__init__(
            StaticSource(snap),
            cast(ClusterWriter, None),
            DecisionLog(),
            debounce_seconds=debounce_seconds,
        )
        self.decided: list[str] = []
        self.event = threading.Event()

    def decide(self, job: str, now: float) -> PreemptionPlan | None:
        self.decided.append(job)
        self.event.set()
        return None


def test_an_at_once_request_is_decided_while_an_earlier_debounced_one_waits() -> None:
    loop = RecordingLoop(debounce_seconds=60.0).start()
    try:
        loop.request("ns/growing", "rejected")  # a gang still growing: waits 60 s
        loop.request("ns/complete", "rejected", at_once=True)
        assert loop.event.wait(10), "the at-once job was not decided"
        assert loop.decided == ["ns/complete"]
        # Asking again at once for the growing job brings it forward.
        loop.event.clear()
        loop.request("ns/growing", "complete now", at_once=True)
        assert loop.event.wait(10)
        assert loop.decided == ["ns/complete", "ns/growing"]
    finally:
        loop.stop()


def test_a_debounced_request_is_decided_after_its_quiet_period() -> None:
    loop = RecordingLoop(debounce_seconds=0.2).start()
    try:
        asked = time.monotonic()
        loop.request("ns/growing", "rejected")
        assert loop.event.wait(10)
        assert time.monotonic() - asked >= 0.2
        assert loop.decided == ["ns/growing"]
    finally:
        loop.stop()


def recording_loop(source: KubeSource, client: RecordingClient) -> PostFilterLoop:
    """A PostFilter loop over ``source`` whose writes ``client`` records."""
    writer = ClusterWriter(cast(KubeClient, client), record_keys=record_keys)
    return PostFilterLoop(source, writer, DecisionLog(), clock=lambda: NOW)


class RecordingClient:
    """A stand-in for the API client: records every request, answers ``{}``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path, body))
        return {}


def test_a_drain_mark_names_no_job_and_a_preemption_mark_names_its_job() -> None:
    client = RecordingClient()
    writer = ClusterWriter(cast(KubeClient, client), clock=lambda: NOW, record_keys=record_keys)
    manifest = victim("low", "n0", 1)
    for preemptor in ("team-a/new", None):
        client.calls.clear()
        writer.mark_victim(
            parse_pod(manifest), preemptor=preemptor, reason="why", grace_seconds=None
        )
        method, _path, body = client.calls[0]
        assert method == "PATCH"
        marked = {**manifest, "metadata": {**manifest["metadata"]}}
        for part in ("labels", "annotations"):
            marked["metadata"][part] = {**manifest["metadata"][part], **body["metadata"][part]}
        assert parse_pod(marked).marked_for == preemptor


class VictimGoneClient(RecordingClient):
    """The evictor was faster: the victim is gone once its mark is written, so every
    write to the pod itself answers 404 (an Event is a separate object and is created)."""

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path, body))
        if "/pods/" in path:
            raise ApiError(404, "pods not found")
        return {}


def test_a_victim_evicted_before_its_condition_is_written_still_gets_its_preempted_event() -> None:
    # record_disruption runs after the mark; the evictor may have removed the victim in
    # between (a CI run saw one of two victims without its event). The event must be
    # posted anyway, and the condition's 404 is nothing to retry.
    client = VictimGoneClient()
    writer = ClusterWriter(cast(KubeClient, client), clock=lambda: NOW, record_keys=record_keys)
    gone = parse_pod(victim("low", "n0", 1))
    assert not best_effort(gone, partial(writer.record_disruption, preemptor="a/j", reason="r"))
    events = [body for method, path, body in client.calls if path.endswith("/events")]
    assert [(e["reason"], e["involvedObject"]["name"]) for e in events] == [("Preempted", "low")]
    assert "preempted by job a/j: r" in events[0]["message"]


def test_an_expired_reservation_releases_muster_s_nomination_and_nothing_else() -> None:
    source, _ = live_source()
    client = RecordingClient()
    loop = recording_loop(source, client)
    source._on_pod("ADDED", preemptor())
    with source.exclusive() as snap:
        plan = plan_job_preemption(snap, "team-a/new", NOW)
        assert isinstance(plan, PreemptionPlan)
        reservation = plan.reservation(NOW, 300)
        snap.add_reservation(reservation)
    # What decide() writes: the annotation, then the nomination (as the informer sees it).
    held = nominated(preemptor(), "n0")
    note = signed(
        keys.RESERVATION_ANNOTATION,
        "team-a/new",
        persisted_reservation(reservation) | {"node": "n0"},
    )
    held["metadata"]["annotations"][keys.RESERVATION_ANNOTATION] = note
    source._on_pod("MODIFIED", held)
    # A room held for kube-scheduler's own preemption of another job, never written.
    source._on_pod("ADDED", preempted(victim("mid", "n1", 50)))
    other = pod("other", "team-a", gpu=8, preemptible=True, can_preempt=True, priority=99)
    source._on_pod("ADDED", nominated(other, "n1"))
    with source.exclusive() as snap:
        assert set(snap.reservations) == {"team-a/new", "team-a/other"}
    for ended in loop._settle(NOW + 301):
        loop._undo(ended, NOW + 301)
    patched = [(path, body) for method, path, body in client.calls if method == "PATCH"]
    assert patched == [
        (
            "/api/v1/namespaces/team-a/pods/new",
            {"metadata": {"uid": "team-a/new", "annotations": {keys.RESERVATION_ANNOTATION: None}}},
        ),
        (
            "/api/v1/namespaces/team-a/pods/new/status",
            {"metadata": {"uid": "team-a/new"}, "status": {"nominatedNodeName": None}},
        ),
    ]


def test_completing_in_flight_plans_leaves_kube_scheduler_s_victims_alone() -> None:
    source, _ = live_source()
    client = RecordingClient()
    loop = recording_loop(source, client)
    source._on_pod("MODIFIED", preempted(victim("low", "n0", 1)))
    source._on_pod("ADDED", nominated(preemptor(), "n0"))
    with source.exclusive() as snap:
        assert snap.reservations["team-a/new"].victims == ("team-a/low",)
    assert loop.complete_in_flight() == 0
    assert client.calls == []


def test_pod_priorities_follow_priority_class_changes() -> None:
    """The informer's view of the PriorityClasses is built once per change, not per pod
    event: a class added, changed, made the default or deleted shows in the next pod."""
    source, _ = live_source()

    def priority_of(name: str, class_name: str | None) -> int:
        manifest = pod(name, "team-a", gpu=1)
        manifest["spec"].pop("priority", None)
        if class_name is not None:
            manifest["spec"]["priorityClassName"] = class_name
        source._on_pod("ADDED", manifest)
        return source.state.pods[f"team-a/{name}"].priority

    def priority_class(kind: str, value: int, default: bool = False) -> None:
        obj = {"metadata": {"name": "gold"}, "value": value, "globalDefault": default}
        source._on_priority(kind, obj)

    priority_class("ADDED", 1000)
    assert (priority_of("p1", "gold"), priority_of("p2", None)) == (1000, 0)
    priority_class("MODIFIED", 2000, default=True)
    assert (priority_of("p3", "gold"), priority_of("p4", None)) == (2000, 2000)
    priority_class("DELETED", 2000, default=True)
    assert priority_of("p5", None) == 0


def test_a_gang_still_arriving_is_planned_again_once_it_settles() -> None:
    # An undeclared gang's first pod, which kube-scheduler's own filters rejected (its
    # message is kube-scheduler's, so no nudge of Muster's will come): the PostFilter,
    # asked at once, refuses while the gang may still grow (gangSettleSeconds, 1 s) and
    # asks itself again for the moment it settles: 1 s after the pod was seen (NOW).
    source, handed = live_source()
    gang_pod = pod("g-0", "team-a", gpu=8, group="g", preemptible=True, can_preempt=True)
    gang_pod["spec"]["priority"] = 100
    source._on_pod("ADDED", unschedulable(gang_pod))
    assert handed == [("team-a/g", "no", False)]  # not at once: still arriving
    loop = PostFilterLoop(source, cast(ClusterWriter, None), DecisionLog(), clock=lambda: NOW)
    assert loop.decide("team-a/g", NOW + 0.5) is None
    assert loop._due == {"team-a/g": NOW + 1.0}
    with source.exclusive() as snap:
        settled = plan_job_preemption(snap, "team-a/g", NOW + 1.0)
    assert isinstance(settled, PreemptionPlan)
    assert [v.pod.key for v in settled.victims] == ["team-a/low"]


@pytest.mark.parametrize(
    ("planned", "notice"),
    [
        # Planned at NOW: "low" started 50 s before and saves every 30 s, so its last
        # save was 20 s ago and its next is 10 s away: notice until 2 s after it, 12 s
        # (within the 60 s cap), not the 0 s it declares.
        (NOW, 12.0),
        # Planned 5 s earlier: then too the next save was NOW + 10, the deadline NOW + 12.
        (NOW - 5, 12.0),
        # Planned 25 s earlier, before its first save (NOW - 20): its notice ran to 2 s
        # after that save, NOW - 18, passed: none left.  Worked out afresh at NOW it
        # would run to NOW + 12, past what the plan's reservation was made to cover.
        (NOW - 25, 0.0),
    ],
)
def test_completing_an_in_flight_plan_keeps_the_plan_s_notice_deadline(
    planned: float, notice: float
) -> None:
    # A Muster stopped between a reservation and its marks: the next one marks the victim
    # with what is left of the notice the planner gave it.
    source, _ = live_source(MusterArgs(maxPreemptionNoticeSeconds=60))
    client = RecordingClient()
    loop = recording_loop(source, client)
    low = pod(
        "low",
        "team-a",
        gpu=8,
        node="n0",
        preemptible=True,
        priority=1,
        started=format_time(NOW - 50),
        annotations={keys.CHECKPOINT_INTERVAL_ANNOTATION: "30"},
    )
    source._on_pod("MODIFIED", low)
    held = nominated(preemptor(), "n0")
    note = {"job": "team-a/new", "node": "n0", "created": planned, "expires": NOW + 300}
    held["metadata"]["annotations"][keys.RESERVATION_ANNOTATION] = signed(
        keys.RESERVATION_ANNOTATION, "team-a/new", note | {"victims": ["team-a/low"]}
    )
    source._on_pod("ADDED", held)
    assert loop.complete_in_flight() == 1
    marks = [
        body["metadata"]["annotations"][keys.SOFT_EVICTION_KEY]
        for method, path, body in client.calls
        if method == "PATCH"
        and path.endswith("/pods/low")
        and keys.SOFT_EVICTION_KEY in (body.get("metadata", {}).get("annotations") or {})
    ]
    assert len(marks) == 1
    assert read_mark(marks[0]).notice_seconds == notice


def test_a_restarted_muster_records_the_disruption_of_victims_marked_before_it_stopped() -> None:
    # A Muster killed between a plan's marks and their conditions: the restarted one sees
    # the victim marked (Muster's signed mark) for the job of a reservation it rebuilt,
    # without DisruptionTarget, and writes the condition and the Preempted event, once.
    # It writes no mark: the victim has one.
    source, _ = live_source()
    client = RecordingClient()
    loop = recording_loop(source, client)
    held = nominated(preemptor(), "n0")
    note = {"job": "team-a/new", "node": "n0", "created": NOW, "expires": NOW + 300}
    held["metadata"]["annotations"][keys.RESERVATION_ANNOTATION] = signed(
        keys.RESERVATION_ANNOTATION, "team-a/new", note | {"victims": ["team-a/low"]}
    )
    source._on_pod("ADDED", held)
    marked = victim("low", "n0", 1)
    mark = {"initiator": "muster", "preemptor": "team-a/new", "timestamp": "2026-01-01T10:00:00Z"}
    marked["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    marked["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = signed(
        keys.SOFT_EVICTION_KEY, "team-a/low", mark
    )
    source._on_pod("MODIFIED", marked)
    with source.exclusive() as snap:
        assert snap.reservations["team-a/new"].victims == ("team-a/low",)
    assert loop.complete_in_flight() == 0  # nothing left to mark
    assert loop.complete_in_flight() == 0  # and recorded once
    writes = [(method, path) for method, path, _ in client.calls]
    assert writes == [
        ("POST", "/api/v1/namespaces/team-a/events"),
        ("PATCH", "/api/v1/namespaces/team-a/pods/low/status"),
    ]


class EventsOnceClient(RecordingClient):
    """An API server as far as named events go: a second event of one name is a 409."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path, body))
        name = (body or {}).get("metadata", {}).get("name") if path.endswith("/events") else None
        if name is not None:
            if name in self.names:
                raise ApiError(409, f'events "{name}" already exists')
            self.names.add(name)
        return {}


def test_a_victim_s_preempted_event_is_posted_once_whoever_completes_the_record() -> None:
    # A Muster stopped between a victim's Preempted event and its DisruptionTarget leaves
    # the record for the next one to complete (PostFilterLoop.complete_in_flight): both
    # post the event under the same name, so the API server keeps one (the kill -9 e2e
    # test saw two). Another preemptor's event for the same pod is another event.
    client = EventsOnceClient()
    writer = ClusterWriter(cast(KubeClient, client), clock=lambda: NOW, record_keys=record_keys)
    pod = parse_pod(victim("low", "n0", 1))
    for _ in range(2):
        writer.record_disruption(pod, preemptor="a/j", reason="r")
    writer.record_disruption(pod, preemptor="a/k", reason="r")
    events = [body for method, path, body in client.calls if path.endswith("/events")]
    names = [e["metadata"]["name"] for e in events]
    assert len(names) == 3 and names[0] == names[1] != names[2]
    assert all(name.startswith("low.preempted.") for name in names)
    assert client.names == {names[0], names[2]}


def muster_s_disruption(manifest: dict[str, Any], status: str = "True") -> dict[str, Any]:
    """``manifest`` with the ``DisruptionTarget`` Muster writes after a victim's mark
    (pod status: a tenant cannot write it)."""
    manifest["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": status,
            "reason": "PreemptionByScheduler",
            "message": "muster: preempted by job team-a/new: a reason",
        }
    ]
    return manifest


def reserved_with_victim(source: KubeSource, created: float) -> None:
    """team-a/new holds n0 from a plan made at ``created``, counting on "low" leaving."""
    held = nominated(preemptor(), "n0")
    note = {"job": "team-a/new", "node": "n0", "created": created, "expires": NOW + 300}
    held["metadata"]["annotations"][keys.RESERVATION_ANNOTATION] = signed(
        keys.RESERVATION_ANNOTATION, "team-a/new", note | {"victims": ["team-a/low"]}
    )
    source._on_pod("ADDED", held)


def marks_written(client: RecordingClient) -> list[str]:
    """The soft-eviction marks written on "low", in order."""
    return [
        body["metadata"]["annotations"][keys.SOFT_EVICTION_KEY]
        for method, path, body in client.calls
        if method == "PATCH"
        and path.endswith("/pods/low")
        and keys.SOFT_EVICTION_KEY in (body.get("metadata", {}).get("annotations") or {})
    ]


def muster_s_mark(
    manifest: dict[str, Any], at: float, notice: float, preemptor: str = "team-a/new"
) -> dict[str, Any]:
    """``manifest`` with Muster's mark for ``preemptor``, written at ``at`` with
    ``notice`` seconds of notice: its label and signed annotation."""
    mark = {
        "initiator": "muster",
        "preemptor": preemptor,
        "timestamp": format_time(at),
        "noticeSeconds": notice,
    }
    manifest["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    manifest["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = signed(
        keys.SOFT_EVICTION_KEY, f"team-a/{manifest['metadata']['name']}", mark
    )
    return manifest


def marked_by_muster(manifest: dict[str, Any], at: float, notice: float) -> dict[str, Any]:
    """``manifest`` marked by Muster for team-a/new: :func:`muster_s_mark` and its
    ``DisruptionTarget``."""
    return muster_s_disruption(muster_s_mark(manifest, at, notice))


def test_a_victim_whose_owner_takes_its_mark_off_is_marked_again_to_the_same_deadline() -> None:
    # Muster marked "low" for team-a/new's plan at NOW - 10 with 30 s of notice: due at
    # NOW + 20.  Its owner takes the label and annotation off and, in the same patch,
    # declares an hour of notice (the cap is 3,600 s); the DisruptionTarget stays (pod
    # status).  Without a mark no evictor evicts it, and the plan would wait out its
    # reservation.  It is marked again with what is left to its mark's deadline, 20 s:
    # what the owner declares after its mark cannot lengthen it.
    source, _ = live_source(MusterArgs(maxPreemptionNoticeSeconds=3600))
    client = RecordingClient()
    loop = recording_loop(source, client)
    reserved_with_victim(source, created=NOW - 10)
    source._on_pod("MODIFIED", marked_by_muster(victim("low", "n0", 1), NOW - 10, 30))
    assert loop.complete_in_flight() == 0  # marked: nothing to write
    assert client.calls == []
    stripped = muster_s_disruption(victim("low", "n0", 1))
    stripped["metadata"]["annotations"][keys.PREEMPTION_NOTICE_ANNOTATION] = "3600"
    stripped["metadata"]["resourceVersion"] = "7"
    source._on_pod("MODIFIED", stripped)
    with source.exclusive() as snap:
        assert not snap.pods["team-a/low"].departing  # a mark taken off is no departure
    assert loop.complete_in_flight() == 0  # none marked for the first time
    (mark,) = marks_written(client)
    assert read_mark(mark).preemptor == "team-a/new"
    assert read_mark(mark).notice_seconds == 20.0
    assert [p for m, p, _ in client.calls] == ["/api/v1/namespaces/team-a/pods/low"]  # no event
    loop.complete_in_flight()  # the informer has not shown the new mark yet: not again
    assert len(marks_written(client)) == 1
    stripped["metadata"]["resourceVersion"] = "9"  # taken off again
    source._on_pod("MODIFIED", stripped)
    loop.complete_in_flight()
    assert len(marks_written(client)) == 2
    assert read_mark(marks_written(client)[1]).notice_seconds == 20.0


@pytest.mark.parametrize(
    ("seen", "notice"),
    [
        # Never seen marked (a Muster restarted since, or Muster's condition left from an
        # earlier plan): no stripped victim, but one never marked, given what is left of
        # the notice its plan gave it: planned at NOW - 10 with its 400 s, 390 s.
        (None, 390.0),
        # Marked at NOW - 10 with 400 s: due at NOW + 390, past the plan's reservation
        # (it expires at NOW + 300): 300 s, no longer than the room is held.
        ((NOW - 10, 400.0), 300.0),
    ],
)
def test_a_victim_marked_again_gets_the_notice_muster_can_vouch_for(
    seen: tuple[float, float] | None, notice: float
) -> None:
    source, _ = live_source(MusterArgs(maxPreemptionNoticeSeconds=3600))
    client = RecordingClient()
    loop = recording_loop(source, client)
    reserved_with_victim(source, created=NOW - 10)
    low = victim("low", "n0", 1)
    low["metadata"]["annotations"][keys.PREEMPTION_NOTICE_ANNOTATION] = "400"
    if seen is not None:
        source._on_pod("MODIFIED", marked_by_muster(copy.deepcopy(low), *seen))
        loop.complete_in_flight()
    source._on_pod("MODIFIED", muster_s_disruption(low))
    loop.complete_in_flight()
    (mark,) = marks_written(client)
    assert read_mark(mark).notice_seconds == notice


@pytest.mark.parametrize("status", ["True", "False"])
def test_a_victim_no_reservation_counts_on_is_not_marked_again(status: str) -> None:
    # "low" has Muster's DisruptionTarget (True: its plan ended and its mark was taken
    # back by Muster, the condition not yet turned; False: turned) but no mark, and no
    # reservation names it: nothing is written.  Named by one, but with the condition
    # turned False, it is a victim never marked: the rules are asked, as for any.
    source, _ = live_source()
    client = RecordingClient()
    loop = recording_loop(source, client)
    source._on_pod("MODIFIED", muster_s_disruption(victim("low", "n0", 1), status))
    assert loop.complete_in_flight() == 0
    assert client.calls == []


class RefusingClient(RecordingClient):
    """Answers a metadata patch of "low" with ``status`` (an eviction is recorded)."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status

    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        self.calls.append((method, path, body))
        if method == "PATCH" and path.endswith("/pods/low"):
            raise ApiError(self.status, "scripted")
        return {}


def test_a_victim_that_cannot_take_a_mark_is_evicted_at_once() -> None:
    # Its owner filled "low"'s annotations to the API server's limit: the mark's patch is
    # a 422, for good.  Left so, no evictor would ever see it, and the plan would wait
    # out its reservation, then choose it again.  It is evicted at once instead (through
    # the Eviction API: budgets still hold), once.
    source, _ = live_source()
    client = RefusingClient(422)
    loop = recording_loop(source, client)
    reserved_with_victim(source, created=NOW - 10)
    loop.complete_in_flight()
    loop.complete_in_flight()
    evictions = [path for method, path, _ in client.calls if path.endswith("/eviction")]
    assert evictions == ["/api/v1/namespaces/team-a/pods/low/eviction"]


def test_a_victim_write_that_fails_is_tried_again_after_a_backoff() -> None:
    # A 500 on the mark: tried again 1 s later, then 2 s, not every half-second round.
    now = [NOW]
    source, _ = live_source()
    client = RefusingClient(500)
    writer = ClusterWriter(cast(KubeClient, client), record_keys=record_keys)
    writer.attempts = 1
    loop = PostFilterLoop(source, writer, DecisionLog(), clock=lambda: now[0])
    reserved_with_victim(source, created=NOW - 10)
    tried = []
    for tick in range(8):  # 0 to 3.5 s, a round every 0.5 s
        now[0] = NOW + tick / 2
        before = len(client.calls)
        loop.complete_in_flight()
        if len(client.calls) > before:
            tried.append(tick / 2)
    assert tried == [0.0, 1.0, 3.0]


def test_muster_s_condition_left_without_a_mark_or_a_plan_is_no_departure() -> None:
    # "low" carries Muster's DisruptionTarget but no mark, and no reservation names it (a
    # plan ended while its mark was off, or the condition's patch was lost).  Counted as
    # leaving, its room would look free for ever and it would never be a victim again:
    # another job that needs n0 would be told it fits without evicting anything.  It is a
    # running pod like any: the job's plan evicts it.
    source, _ = live_source()
    source._on_pod("MODIFIED", muster_s_disruption(victim("low", "n0", 1)))
    source._on_pod(
        "ADDED", pod("other", "team-a", gpu=8, preemptible=True, can_preempt=True, priority=100)
    )
    with source.exclusive() as state:
        assert "team-a/low" not in {p.key for p in state.leaving()}
        decision = plan_job_preemption(state, "team-a/other", NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert [v.pod.key for v in decision.victims] == ["team-a/low"]


def test_a_mark_is_taken_back_by_turning_its_condition_false_first() -> None:
    # So that Muster's DisruptionTarget=True on a pod without its mark always means
    # someone else took the mark off (see the evictor): the condition, then the mark.
    client = RecordingClient()
    writer = ClusterWriter(cast(KubeClient, client), clock=lambda: NOW, record_keys=record_keys)
    writer.unmark_victim(parse_pod(victim("low", "n0", 1)), "spared")
    patches = [(path, body) for method, path, body in client.calls if method == "PATCH"]
    assert [path for path, _ in patches] == [
        "/api/v1/namespaces/team-a/pods/low/status",
        "/api/v1/namespaces/team-a/pods/low",
    ]
    assert patches[0][1]["status"]["conditions"][0]["status"] == "False"


def test_an_ended_plan_leaves_the_marks_another_reservation_counts_on() -> None:
    # Job team-a/a marked "low"; its room yielded to team-a/b, whose reservation took the
    # victim over.  Then a's pods go: its plan ends, but "low" keeps its mark, for b.
    source, _ = live_source()
    source._on_pod("MODIFIED", muster_s_mark(victim("low", "n0", 1), NOW - 20, 0, "team-a/a"))
    source._on_pod("ADDED", pod("b", "team-a", gpu=8, preemptible=True, can_preempt=True))
    with source.exclusive() as state:
        assert state.pods["team-a/low"].marked_for == "team-a/a"
        taken_over = Reservation(
            job="team-a/b",
            quota="team-a",
            placements={"team-a/b": "n0"},
            victims=("team-a/low",),
            created=NOW - 5,
            expires=NOW + 300,
        )
        state.add_reservation(taken_over)
        _extended, ended = settle_reservations(state, NOW)
    assert [(plan.job, plan.unmark) for plan in ended] == [("team-a/a", ())]


def test_an_ended_plan_takes_back_the_marks_it_took_over() -> None:
    # team-a/a's plan marked "low" (60 s of notice, at NOW - 20); its room yielded to
    # team-a/b, whose reservation took "low" over.  b's reservation ends (timed out):
    # "low" no plan counts on any more keeps no mark (a's plan is over too: it yielded),
    # or it would be evicted at NOW + 40 for nothing.
    source, _ = live_source()
    source._on_pod("MODIFIED", muster_s_mark(victim("low", "n0", 1), NOW - 20, 60, "team-a/a"))
    for name in ("a", "b"):
        source._on_pod("ADDED", pod(name, "team-a", gpu=8, preemptible=True, can_preempt=True))
    with source.exclusive() as state:
        taker = Reservation(
            job="team-a/b",
            quota="team-a",
            placements={"team-a/b": "n0"},
            victims=("team-a/low",),
            created=NOW - 300,
            expires=NOW - 1,
        )
        state.add_reservation(taker)
        _extended, ended = settle_reservations(state, NOW)
    assert [(plan.job, [p.key for p in plan.unmark]) for plan in ended] == [
        ("team-a/b", ["team-a/low"])
    ]
