"""The extender verbs trust only what kube-scheduler would send (issue 32).

Anyone who reaches Muster's port can call its verbs.  ``/filter`` answers for any pod, but a
pod the informer does not know as pending keeps nothing past its call (no quota hold, no
room held or let go, nothing persisted, nothing handed to the PostFilter); ``/bind`` binds
only a pod the informer knows as pending, to a known node its constraints allow, its
reserved node when it has one, and a node Muster's own filter passes for it.

Each test derives its expectation by hand from those rules and the cluster below (noted at
each assertion), and where a phantom could have done harm, checks first that the decision
computed for it does ask for that harm, so the test fails if the rule is not kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient

import extender.service.verbs as service
from base import keys
from extender.cli import kubectl
from extender.core.effects import HoldQuota, HoldRoom, ReleaseQuotaHold, ReleaseRoom
from extender.core.filter.verb import filter_pod
from extender.core.objects import PodInfo, parse_pod
from extender.core.state import ClusterState, Reservation
from extender.http.app import create_app
from extender.service import BIND_WAITERS, BindError, Extender, StaticSource
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOW = 1_800_000_000.0
NODES = ["n1", "n2", "n3"]


def sent(name: str, namespace: str = "team-a", uid: str | None = None, **kwargs: Any) -> Any:
    """A pod as kube-scheduler sends it: with a UID and a resourceVersion."""
    obj = pod(name, namespace, **kwargs)
    obj["metadata"] |= {"uid": uid or f"uid-{name}", "resourceVersion": "7"}
    return obj


def gang_pod(name: str, group: str, size: int, namespace: str = "team-a", **kwargs: Any) -> Any:
    """A pod of 8 GPUs in a gang of ``size``; non-preemptible in team-a (within its min)."""
    preemptible = namespace != "team-a"
    obj = sent(name, namespace, group=group, gpu=8, preemptible=preemptible, **kwargs)
    obj["metadata"]["annotations"] = {keys.GANG_MIN_AVAILABLE_ANNOTATION: str(size)}
    return obj


class Binder:
    """Records binds; raises ``failure`` when set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str]] = []
        self.failure: str | None = None

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        if self.failure is not None:
            raise BindError(self.failure)
        self.calls.append((namespace, name, uid, node))


class Keeper:
    """Records what the filter asks to persist on pods."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, Sequence[str]]] = []

    def hold(self, reservation: Reservation, pods: Sequence[PodInfo]) -> None:
        self.writes.append(("hold", [p.key for p in pods]))

    def release(self, pods: Sequence[PodInfo]) -> None:
        self.writes.append(("release", [p.key for p in pods]))


class InformedSource(StaticSource):
    """A snapshot standing for a live cluster's: pods arrive through an informer (here,
    :meth:`Cluster.know`), so a pod it lacks may still come, or be a phantom."""

    pods_arrive = True


class Cluster:
    """Four 8-GPU nodes (n0 full with team B's b-0; n1..n3 free), a cordoned one and a
    tainted one; quota team-a: min = max = 16 GPUs, team-b: max 32.  Muster over it
    through the HTTP app, with a recording binder and room keeper."""

    def __init__(self, bind_wait_seconds: float = 0.0) -> None:
        nodes = [
            *(node(f"n{i}") for i in range(4)),
            node("cordoned", unschedulable=True),
            node("tainted", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        ]
        pods = [pod("b-0", "team-b", gpu=8, node="n0", preemptible=True)]
        quotas = [
            quota("team-a", min={GPU: "16"}, max={GPU: "16"}),
            quota("team-b", max={GPU: "32"}),
        ]
        self.snap: ClusterState = snapshot(nodes, pods, quotas)
        self.binder = Binder()
        self.keeper = Keeper()
        self.handed: list[str] = []
        self.extender = Extender(
            InformedSource(self.snap),
            clock=lambda: NOW,
            binder=self.binder,
            room_keeper=self.keeper,
            on_unschedulable=lambda job, why, at_once: self.handed.append(job),
            bind_wait_seconds=bind_wait_seconds,  # none: the informer has what it will have
        )
        self.client = TestClient(create_app(self.extender, debug_endpoints=True))

    def know(self, *objs: Any) -> None:
        """The informer delivers these pods."""
        with self.extender.source.exclusive() as snap:
            for obj in objs:
                snap.upsert_pod(parse_pod(obj), now=NOW - 60)

    def filter(self, obj: Any, nodes: Sequence[str] = NODES) -> dict[str, Any]:
        response = self.client.post("/filter", json={"Pod": obj, "NodeNames": list(nodes)})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    def bind(self, name: str, node: str, uid: str | None = None, ns: str = "team-a") -> str:
        body = {"PodName": name, "PodNamespace": ns, "PodUID": uid or f"uid-{name}", "Node": node}
        response = self.client.post("/bind", json=body)
        assert response.status_code == 200, response.text
        error: str = response.json()["Error"]
        return error

    def used(self, quota_name: str) -> str:
        answer = self.client.get("/debug/quotas").json()
        return str(answer[quota_name]["used"].get(GPU, "0"))

    def effects(self, obj: Any, nodes: Sequence[str] = NODES) -> tuple[object, ...]:
        """What the filter's decision for ``obj`` asks to change (computed, not applied)."""
        with self.extender.source.exclusive() as snap:
            return filter_pod(snap, parse_pod(obj), nodes, as_extender=True, now=NOW).effects


# ---- /filter: a phantom keeps nothing past its call ------------------------------------


def test_a_phantom_pods_quota_hold_does_not_outlive_its_filter_call() -> None:
    c = Cluster()
    ghost = sent("ghost", gpu=16, preemptible=False)  # never created: the informer has none
    # Its decision asks to hold its 16 GPUs (all of team-a's max) ...
    assert any(isinstance(e, HoldQuota) for e in c.effects(ghost))
    # ... and it gets the answer any pod would: team-a uses 0 of 16, so 16 fits.
    assert c.filter(ghost)["NodeNames"] == NODES
    assert "team-a/ghost" not in c.snap.pods
    assert c.used("team-a") == "0"  # nothing held past the call
    assert c.handed == []
    # A real pod of the same quota: 8 GPUs, admitted (0 + 8 <= 16), where a hold kept for
    # the ghost would have refused it (16 + 8 = 24 > 16).
    real = sent("real", gpu=8, preemptible=False)
    c.know(real)
    answer = c.filter(real)
    assert answer["NodeNames"] == NODES, answer
    assert c.used("team-a") == "8"  # the real pod's own hold
    decisions = c.extender.log.for_pod("team-a/ghost")
    assert decisions[-1].outcome == "all 3 nodes passed"
    assert "is not one Muster's informer knows as pending" in decisions[-1].reasons[-1]
    # And a bind of the ghost is refused: the filter remembered nothing for it.
    assert "knows no such pod" in c.bind("ghost", "n1")
    assert c.binder.calls == []


def test_a_known_pending_pods_quota_hold_still_holds() -> None:
    c = Cluster()
    first, second = sent("first", gpu=16, preemptible=False), sent("second", gpu=8)
    c.know(first, second)
    assert c.filter(first)["NodeNames"] == NODES  # 16 <= max 16
    assert c.used("team-a") == "16"  # held until it is seen bound
    # 16 held + 8 = 24 > max 16: turned away, every node unresolvable, handed on.
    answer = c.filter(second)
    assert answer["NodeNames"] == []
    reason = answer["FailedAndUnresolvableNodes"]["n1"]
    assert f"{GPU} 24 would exceed max 16" in reason
    assert c.handed == ["team-a/second"]


def test_a_phantom_under_a_real_pods_name_cannot_end_its_hold() -> None:
    c = Cluster()
    real = sent("a-0", gpu=8, preemptible=False)
    c.know(real, sent("t-0", "team-b", gpu=8, preemptible=False))
    assert c.filter(real)["NodeNames"] == NODES
    assert c.snap.quota_held("team-a/a-0")
    # Team B's t-0 has n1's 8 GPUs reserved (as a preemption would leave it).
    with c.extender.source.exclusive() as snap:
        placements = {"team-b/t-0": "n1"}
        snap.add_reservation(Reservation("team-b/t-0", "team-b", placements, (), NOW, NOW + 300))
    # The phantom: a-0's name, another UID, asking for n1 only, where the room is t-0's:
    # turned away, and its decision asks to end a-0's hold (a pod turned away is not
    # about to bind) ...
    forged = sent("a-0", uid="forged", gpu=8, preemptible=False)
    assert ReleaseQuotaHold("team-a/a-0") in c.effects(forged, ["n1"])
    answer = c.filter(forged, ["n1"])
    assert "reserved for job team-b/t-0" in answer["FailedNodes"]["n1"]
    # ... which is not applied: the real a-0 keeps its 8 GPUs held.
    assert c.snap.quota_held("team-a/a-0")
    assert c.used("team-a") == "8"


def test_a_phantom_cannot_let_a_gangs_room_go() -> None:
    c = Cluster()
    g0, g1 = gang_pod("g-0", "g", 2), gang_pod("g-1", "g", 2)
    c.know(g0, g1)
    answer = c.filter(g0)
    assert len(answer["NodeNames"]) == 1  # the gang placed whole, g-0 held to its node
    held = dict(c.snap.reservations["team-a/g"].placements)
    assert set(held) == {"team-a/g-0", "team-a/g-1"}
    assert c.keeper.writes == [("hold", ["team-a/g-0", "team-a/g-1"])]
    # A phantom g-0 (forged UID) asking 64 GPUs on a node other than g-0's: no room
    # fits that gang, so its decision lets the gang's room go ...
    elsewhere = [n for n in NODES if n not in held.values()]
    forged = gang_pod("g-0", "g", 2, uid="forged")
    forged["spec"]["containers"][0]["resources"]["requests"][GPU] = "64"
    assert ReleaseRoom("team-a/g") in c.effects(forged, elsewhere)
    c.filter(forged, elsewhere)
    # ... which is not applied: the real gang keeps its room, nothing is written.
    assert dict(c.snap.reservations["team-a/g"].placements) == held
    assert c.keeper.writes == [("hold", ["team-a/g-0", "team-a/g-1"])]
    # The real g-1 still goes to its own node.
    assert c.filter(g1)["NodeNames"] == [held["team-a/g-1"]]


def test_a_phantom_cannot_complete_a_gang_and_hold_its_room() -> None:
    c = Cluster()
    h0, h1 = gang_pod("h-0", "h", 3, "team-b"), gang_pod("h-1", "h", 3, "team-b")
    c.know(h0, h1)
    # With two of three pods, the gang waits for the third (no node helps).  (Team B's
    # pods are preemptible: they may borrow up to its max of 32.)
    assert c.filter(h0)["NodeNames"] == []
    # A phantom third pod: with it the gang is complete and fits (n1..n3 free), so its
    # decision places the gang whole and holds the room ...
    ghost = gang_pod("h-2", "h", 3, "team-b")
    assert any(isinstance(e, HoldRoom) for e in c.effects(ghost))
    assert len(c.filter(ghost)["NodeNames"]) == 1  # answered as for any pod
    # ... but nothing is held or written for the real h-0 and h-1.
    assert "team-b/h" not in c.snap.reservations
    assert c.keeper.writes == []
    assert "team-b/h-2" not in c.snap.pods
    # So the real pods still wait for their third.
    assert c.filter(h0)["NodeNames"] == []


# ---- /bind: only what Muster's own decisions allow ---------------------------------------


def test_a_filtered_pod_binds_and_is_counted_on_its_node_at_once() -> None:
    c = Cluster()
    c.know(sent("a-0", gpu=8, preemptible=False))
    assert c.filter(sent("a-0", gpu=8, preemptible=False))["NodeNames"] == NODES
    assert c.bind("a-0", "n2") == ""
    assert c.binder.calls == [("team-a", "a-0", "uid-a-0", "n2")]
    assert c.snap.pods["team-a/a-0"].node_name == "n2"  # assumed, as kube-scheduler does
    assert c.extender.log.for_pod("team-a/a-0")[-1].outcome == "bound to n2"
    metrics = c.client.get("/metrics").text
    assert 'muster_decisions_total{outcome="bound",verb="bind"} 1.0' in metrics


def test_a_gang_pod_binds_only_to_its_reserved_node() -> None:
    c = Cluster()
    g0, g1 = gang_pod("g-0", "g", 2), gang_pod("g-1", "g", 2)
    c.know(g0, g1)
    c.filter(g0)
    held = c.snap.reservations["team-a/g"].placements
    mine, other = held["team-a/g-0"], held["team-a/g-1"]
    assert mine != other  # 8 GPUs each on 8-GPU nodes
    # g-0 on g-1's node, or on a free node: refused, naming where its room is.
    free = next(n for n in NODES if n not in (mine, other))
    for wrong in (other, free):
        error = c.bind("g-0", wrong)
        assert error == (
            f"muster: refused to bind pod team-a/g-0 to node {wrong}: room for it "
            f"(job team-a/g) is reserved on node {mine}"
        )
    assert c.binder.calls == []
    assert c.extender.log.for_pod("team-a/g-0")[-1].outcome == "refused"
    assert c.bind("g-0", mine) == ""
    assert c.bind("g-1", other) == ""
    assert [call[3] for call in c.binder.calls] == [mine, other]


def test_room_held_for_another_job_is_not_taken_by_a_bind() -> None:
    c = Cluster()
    c.know(sent("t-0", "team-b", gpu=8, preemptible=False), sent("x-0", gpu=8))
    with c.extender.source.exclusive() as snap:
        placements = {"team-b/t-0": "n1"}
        snap.add_reservation(Reservation("team-b/t-0", "team-b", placements, (), NOW, NOW + 300))
    # x-0 (8 GPUs) fits n1 only in the 8 GPUs held for t-0: refused; n3 is free.
    error = c.bind("x-0", "n1")
    assert "Muster's filter: room on this node is reserved for job team-b/t-0" in error
    assert c.bind("x-0", "n3") == ""
    assert c.binder.calls == [("team-a", "x-0", "uid-x-0", "n3")]


def refusals() -> list[Any]:
    """(what the informer has, the bind's name/node/uid, the error's tail), by hand."""
    pending = sent("p", gpu=8, preemptible=False)
    finished = sent("done", gpu=8)
    finished["status"] = {"phase": "Succeeded"}
    deleting = sent("del", gpu=8)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    greedy = sent("greedy", gpu=24, preemptible=False)
    lone = gang_pod("lone-0", "lone", 2)
    picky = sent("picky", gpu=8, spec={"nodeSelector": {"zone": "z1"}})
    return [
        pytest.param([], ("p", "n1", None), "Muster's informer knows no such pod", id="unknown"),
        pytest.param(
            [pending], ("p", "n1", "forged"), "PodUID 'forged' is not the pod's UID", id="uid"
        ),
        pytest.param(
            [sent("run", gpu=8, node="n0")],
            ("run", "n1", None),
            "it is bound to node n0 already",
            id="bound",
        ),
        pytest.param([finished], ("done", "n1", None), "it has succeeded", id="finished"),
        pytest.param([deleting], ("del", "n1", None), "it is being deleted", id="deleting"),
        pytest.param(
            [pending], ("p", "n9", None), "Muster's informer knows no such node", id="node"
        ),
        pytest.param([pending], ("p", "cordoned", None), "node is unschedulable", id="cordon"),
        pytest.param(
            [pending],
            ("p", "tainted", None),
            "node has untolerated taint dedicated=x:NoSchedule",
            id="taint",
        ),
        pytest.param(
            [picky],
            ("picky", "n1", None),
            "node does not match nodeSelector zone=z1",
            id="selector",
        ),
        # 24 GPUs > team-a's max 16 (nothing held for it): the quota's refusal.
        pytest.param(
            [greedy],
            ("greedy", "n1", None),
            f"Muster's filter: quota team-a: non-preemptible {GPU} 24 would exceed min 16",
            id="quota",
        ),
        # A gang of two with one pod: the filter waits for the other.
        pytest.param(
            [lone],
            ("lone-0", "n1", None),
            "Muster's filter: gang team-a/lone: waiting for 1 more pods",
            id="gang",
        ),
    ]


@pytest.mark.parametrize(("known", "call", "tail"), refusals())
def test_a_bind_muster_did_not_decide_is_refused(
    known: list[Any], call: tuple[str, str, str | None], tail: str
) -> None:
    c = Cluster()
    c.know(*known)
    name, node_name, uid = call
    error = c.bind(name, node_name, uid)
    assert error.startswith(f"muster: refused to bind pod team-a/{name} to node {node_name}: ")
    assert tail in error, error
    assert c.binder.calls == []
    (decision,) = c.extender.log.for_pod(f"team-a/{name}")
    assert (decision.verb, decision.outcome, decision.reasons) == ("bind", "refused", (error,))
    metrics = c.client.get("/metrics").text
    assert 'muster_decisions_total{outcome="refused",verb="bind"} 1.0' in metrics
    assert c.client.get("/healthz").status_code == 200  # and it keeps serving


def test_a_pod_is_counted_on_its_node_while_the_api_binds_it() -> None:
    # (Seen on the head-to-head's trace: a plan made while a bind was on its way counted
    # the node free, held it for a gang, and the gang waited 87 s for a pod that was no
    # victim.)  Derived from kube-scheduler's assume-then-bind: from the moment Muster
    # allows the bind, any decision sees the pod on its node, so a plan sees no room on
    # n1 for an 8-GPU pod while a-0 (8 GPUs) is being bound there.
    c = Cluster()
    c.know(sent("a-0", gpu=8, preemptible=False))
    seen: list[tuple[str | None, dict[str, int]]] = []

    class Watching(Binder):
        def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            with c.extender.source.exclusive() as state:
                free = state.node_usage.free_room("n1", state.nodes["n1"].allocatable)
                seen.append((state.pods["team-a/a-0"].node_name, dict(free)))
            super().bind(namespace, name, uid, node)

    c.extender.binder = c.binder = Watching()
    assert c.bind("a-0", "n1") == ""
    assert seen[0][0] == "n1" and seen[0][1].get(GPU, 0) == 0, seen


def test_a_failed_api_bind_is_an_error_and_nothing_is_assumed() -> None:
    c = Cluster()
    c.know(sent("a-0", gpu=8))
    c.binder.failure = 'pods "a-0" is forbidden'
    assert c.bind("a-0", "n1") == 'pods "a-0" is forbidden'
    assert c.snap.pods["team-a/a-0"].node_name is None
    assert c.extender.log.for_pod("team-a/a-0")[-1].outcome == "failed"
    metrics = c.client.get("/metrics").text
    assert 'muster_decisions_total{outcome="failed",verb="bind"} 1.0' in metrics


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"PodName": "p", "PodNamespace": "team-a", "PodUID": "u"}, "Node: Field required"),
        ({"PodName": 5, "PodNamespace": "team-a", "PodUID": "u", "Node": "n1"}, "PodName"),
        ({"PodName": "p", "PodNamespace": None, "PodUID": "u", "Node": "n1"}, "PodNamespace"),
    ],
)
def test_a_malformed_bind_is_a_400_naming_the_field(body: dict[str, Any], message: str) -> None:
    c = Cluster()
    response = c.client.post("/bind", json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert c.binder.calls == []


# ---- /bind: a pod that raced the informer ------------------------------------------------


class InformerCatchesUp:
    """Stands in for :mod:`time` in :mod:`extender.service`: the first pause of a bind
    waiting for the informer is when the informer delivers ``objs``."""

    def __init__(self, cluster: Cluster, *objs: Any) -> None:
        self.cluster, self.objs = cluster, objs
        self.pauses: list[float] = []
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds
        if len(self.pauses) == 1:
            self.cluster.know(*self.objs)


def test_a_bind_waits_for_the_informer_to_deliver_the_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kube-scheduler's watch can deliver a pod before Muster's informer: its bind waits
    (at most bind_wait_seconds) for the informer rather than being refused."""
    c = Cluster(bind_wait_seconds=1.0)
    late = sent("late", gpu=8, preemptible=False)
    clock = InformerCatchesUp(c, late)
    monkeypatch.setattr(service, "time", clock)
    assert c.bind("late", "n1") == ""
    assert clock.pauses == [0.002]  # delivered during the first pause
    assert c.binder.calls == [("team-a", "late", "uid-late", "n1")]
    # A pod that never comes is refused once the wait is over: pauses doubling to 50 ms,
    # 1 s in all.
    clock.pauses.clear()
    assert "knows no such pod" in c.bind("never", "n1")
    assert sum(clock.pauses) == pytest.approx(1.0)
    assert max(clock.pauses) == 0.05


def test_a_filter_waits_for_the_informer_so_a_burst_stops_at_max(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kube-scheduler filters a new pod before Muster's informer has it: the call waits for
    the informer (off the event loop), then holds the pod's quota as any known pod's, so
    the next pod of the burst is refused at max (16 + 8 > 16)."""
    c = Cluster(bind_wait_seconds=1.0)
    first = sent("first", gpu=16, preemptible=False)
    clock = InformerCatchesUp(c, first)
    monkeypatch.setattr(service, "time", clock)
    assert c.filter(first)["NodeNames"] == NODES
    assert clock.pauses == [0.002]  # delivered during the first pause
    assert c.used("team-a") == "16"  # held: the informer had it when the decision applied
    second = sent("second", gpu=8, preemptible=False)
    c.know(second)
    assert c.filter(second)["NodeNames"] == []  # 16 held + 8 > max 16
    # A pod nobody creates waits the whole second, then is answered holding nothing.
    clock.pauses.clear()
    c.filter(sent("ghost", gpu=8, preemptible=False))
    assert sum(clock.pauses) == pytest.approx(1.0)
    assert c.used("team-a") == "16"


def test_a_gang_placed_by_a_filter_that_raced_the_informer_holds_its_room_at_bind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = Cluster(bind_wait_seconds=1.0)
    g0, g1 = gang_pod("g-0", "g", 2), gang_pod("g-1", "g", 2)
    c.know(g1)
    # g-0's filter call comes before the informer has g-0: the gang is complete with it
    # and is placed whole, g-0 held to its node, but nothing is held (g-0 is not known).
    answer = c.filter(g0)
    (pinned,) = answer["NodeNames"]
    assert "team-a/g" not in c.snap.reservations
    # The bind comes as the informer delivers g-0: the placement is decided again and
    # held (g-0 there, g-1 beside it), so g-1 keeps its room while g-0 binds.
    monkeypatch.setattr(service, "time", InformerCatchesUp(c, g0))
    assert c.bind("g-0", pinned) == ""
    placements = c.snap.reservations["team-a/g"].placements
    assert placements["team-a/g-0"] == pinned
    assert placements["team-a/g-1"] not in ("n0", pinned)  # n0 is full (b-0)
    assert c.keeper.writes == [("hold", ["team-a/g-0", "team-a/g-1"])]
    assert c.filter(g1)["NodeNames"] == [placements["team-a/g-1"]]


def test_binds_wait_for_the_informer_only_so_many_at_once_and_never_for_a_deleted_pod() -> None:
    c = Cluster(bind_wait_seconds=30.0)  # a wait would fail the test by its length
    gone = sent("gone", gpu=8)
    c.know(gone)
    with c.extender.source.exclusive() as snap:
        snap.remove_pod("team-a/gone")
    start = time.monotonic()
    assert "knows no such pod" in c.bind("gone", "n1")  # deleted: nothing to wait for
    waiters = c.extender._bind_waiters
    for _ in range(BIND_WAITERS):  # as many binds waiting as may
        assert waiters.acquire(blocking=False)
    try:
        assert "knows no such pod" in c.bind("ghost", "n1")
    finally:
        for _ in range(BIND_WAITERS):
            waiters.release()
    assert time.monotonic() - start < 5


def test_kubectl_muster_says_when_a_muster_does_not_serve_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    c = Cluster()
    off = TestClient(create_app(c.extender))  # as muster serve runs without the flag
    base = "http://muster:8888"
    monkeypatch.setattr(kubectl.httpx, "get", lambda url, timeout: off.get(url.removeprefix(base)))
    for command in (["quotas"], ["jobs"], ["why", "b-0", "-n", "team-b"]):
        assert kubectl.main(["--muster-url", base, *command]) == 2, command
        err = capsys.readouterr().err
        assert "does not serve /debug (start it with --enable-debug-endpoints)" in err
    # A Muster serving /debug answers; a pod it does not know is still exit 1.
    monkeypatch.setattr(
        kubectl.httpx, "get", lambda url, timeout: c.client.get(url.removeprefix(base))
    )
    assert kubectl.main(["--muster-url", base, "why", "b-0", "-n", "team-b"]) == 0
    assert kubectl.main(["--muster-url", base, "why", "nobody", "-n", "team-b"]) == 1
    assert "does not know pod team-b/nobody" in capsys.readouterr().err


class CountingLock:
    """The state's lock, counting how often it is taken."""

    def __init__(self) -> None:
        self.taken = 0
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.taken += 1
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()


def test_a_known_pods_filter_and_bind_check_each_hold_the_state_once() -> None:
    """The happy path: one hold for the filter's decision (the unseen check included), one
    for the bind's checks and one for counting the pod bound."""
    c = Cluster(bind_wait_seconds=1.0)
    obj = sent("a-0", gpu=8, preemptible=False)
    c.know(obj)
    lock = CountingLock()
    c.extender.source._lock = lock  # type: ignore[attr-defined]
    assert c.extender.filter(parse_pod(obj), NODES).passed == NODES
    assert lock.taken == 1
    lock.taken = 0
    assert c.extender.bind("team-a", "a-0", "uid-a-0", "n1").error == ""
    assert lock.taken == 1  # the checks and counting it bound (before the API call)


def test_a_pod_re_created_under_its_name_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The informer still has the deleted pod of that name (another UID): the new one's
    filter waits for it, then holds its quota."""
    c = Cluster(bind_wait_seconds=1.0)
    c.know(sent("w-0", uid="old", gpu=8, preemptible=False))
    new = sent("w-0", uid="new", gpu=8, preemptible=False)
    clock = InformerCatchesUp(c, new)
    monkeypatch.setattr(service, "time", clock)
    assert c.filter(new)["NodeNames"] == NODES
    assert clock.pauses == [0.002]
    assert c.snap.quota_held("team-a/w-0") and c.snap.pods["team-a/w-0"].uid == "new"
