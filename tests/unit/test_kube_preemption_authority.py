"""The Kubernetes adapters' side of the one preemption authority: what the pod informer
does with kube-scheduler's own preemptions and unschedulable pods, and when the
PostFilter plans (no API server: the informer's handler is fed events directly)."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from extender.core.config import MusterArgs
from extender.core.decisions import DecisionLog
from extender.core.preemption.planner import PreemptionPlan
from extender.kube.client import KubeClient
from extender.kube.postfilter import PostFilterLoop
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter
from extender.service import StaticSource
from tests.builders import node, pod, quota, snapshot
from tests.unit.test_authority import nominated, preempted

GPU = "nvidia.com/gpu"
NOW = 1_800_000_000.0


def unschedulable(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"}
    ]
    return manifest


def live_source() -> tuple[KubeSource, list[tuple[str, str, bool]]]:
    """A KubeSource fed by hand: quota team-a, nodes n0 and n1 each running one 8-GPU
    preemptible pod of team-a (priorities 1 and 50), as issue 17's cluster."""
    source = KubeSource(cast(KubeClient, object()), MusterArgs(), clock=lambda: NOW)
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
    with source.reading() as snap:
        reservation = snap.reservations["team-a/new"]
        assert reservation.placements == {"team-a/new": "n0"}
        assert reservation.victims == ("team-a/low",)
    # The PostFilter is asked (the pod is unschedulable); the room is held already, so it
    # may look at once, and finds the job in flight.
    assert handed == [("team-a/new", "no", True)]
    loop = PostFilterLoop(source, cast(ClusterWriter, None), DecisionLog(), clock=lambda: NOW)
    assert loop.decide("team-a/new", NOW) is None  # in flight: no second victim
    assert loop.committed == 0


def test_the_other_order_victim_condition_after_the_nomination_holds_the_room_too() -> None:
    source, handed = live_source()
    source._on_pod("ADDED", unschedulable(nominated(preemptor(), "n0")))
    with source.reading() as snap:
        assert "team-a/new" not in snap.reservations  # no evidence yet
    # A nomination Muster did not make: the PostFilter waits a moment for the evidence.
    assert handed == [("team-a/new", "no", False)]
    source._on_pod("MODIFIED", preempted(victim("low", "n0", 1)))
    with source.reading() as snap:
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
