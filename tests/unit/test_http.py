"""The HTTP extender: wire contract as kube-scheduler v1.35 speaks it, and bad input."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.http.app import create_app
from extender.http.verbs import _pod
from extender.service import Extender, StaticSource
from tests.builders import json_values, node, pod, quota, snapshot

GPU = "nvidia.com/gpu"


def scheduler_pod(name: str, namespace: str = "team-a", **kwargs: Any) -> dict[str, Any]:
    """A pod as kube-scheduler v1.35 embeds it: full metadata, defaulted spec, status."""
    obj = pod(name, namespace, **kwargs)
    obj["metadata"] |= {
        "uid": f"uid-{name}",
        "resourceVersion": "123",
        "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        "ownerReferences": None,
    }
    obj["spec"] |= {
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
    }
    obj["status"] = obj["status"] or {"phase": "Pending", "qosClass": "BestEffort"}
    del obj["apiVersion"], obj["kind"]  # kube-scheduler's embedded objects often lack them
    return obj


def cluster(
    **extender_kwargs: Any,
) -> tuple[TestClient, Extender, list[tuple[str, str, bool]]]:
    pods = [
        pod("b-0", "team-b", gpu=8, node="n0", preemptible=True),
        pod("b-1", "team-b", gpu=8, node="n1", preemptible=False),
        pod("r-0", "team-b", gpu=4, node="n2", preemptible=True, started="2026-01-01T11:00:00Z"),
        # Outside every quota: kube-scheduler's own pods, to preempt among themselves.
        pod("x-0", "ops", gpu=4, node="ops-0"),
        pod("x-1", "ops", gpu=4, node="ops-0"),
    ]
    quotas = [
        quota("team-a", min={GPU: "16"}, max={GPU: "16"}),
        quota("team-b", max={GPU: "32"}),
    ]
    snap = snapshot([*(node(f"n{i}") for i in range(4)), node("ops-0")], pods, quotas)
    handed: list[tuple[str, str, bool]] = []
    extender = Extender(
        StaticSource(snap),
        clock=lambda: 1_800_000_000.0,
        on_unschedulable=lambda job, why, at_once: handed.append((job, why, at_once)),
        **extender_kwargs,
    )
    app = create_app(extender, max_body_bytes=256 * 1024, debug_endpoints=True)
    return TestClient(app), extender, handed


FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def test_filter_node_names_mode_answers_in_node_names() -> None:
    client, _, _ = cluster()
    body = {"Pod": scheduler_pod("a-0", gpu=8), "Nodes": None, "NodeNames": ["n0", "n3", "new"]}
    response = client.post("/filter", json=body)
    assert response.status_code == 200
    result = response.json()
    assert set(result) == FILTER_KEYS
    # a node Muster has not seen yet holds no reservation: it passes
    assert result["NodeNames"] == ["n0", "n3", "new"]
    assert result["Nodes"] is None
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}
    assert result["Error"] == ""


def test_filter_full_nodes_mode_answers_in_nodes() -> None:
    client, _, _ = cluster()
    nodes = [node("n0"), node("n3")]
    body = {"Pod": scheduler_pod("a-0", gpu=8), "Nodes": {"items": nodes}, "NodeNames": None}
    result = client.post("/filter", json=body).json()
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["n0", "n3"]
    assert result["Nodes"]["items"][0] == nodes[0]


def test_quota_rejection_is_unresolvable_with_the_reason_and_hands_the_job_on() -> None:
    client, extender, handed = cluster()
    pods = [scheduler_pod("a-0", gpu=8, group="big", preemptible=False)]
    extra = [pod(f"a-{i}", gpu=8, group="big", preemptible=False) for i in (1, 2)]
    with extender.source.exclusive() as snap:
        for item in [pods[0], *extra]:
            snap.upsert_pod(parse_pod(item), now=extender.clock())  # seen just now
    result = client.post("/filter", json={"Pod": pods[0], "NodeNames": ["n0", "n3"]}).json()
    reason = (
        "quota team-a: non-preemptible nvidia.com/gpu 24 would exceed min 16; "
        "quota team-a: nvidia.com/gpu 24 would exceed max 16"
    )
    assert result["NodeNames"] == []
    assert result["FailedAndUnresolvableNodes"] == {"n0": reason, "n3": reason}
    # A gang of undeclared size (no PodGroup, no min-available) whose pods joined just now
    # may still be growing: handed on, to be planned once it settles, not at once.
    assert handed == [("team-a/big", reason, False)]
    explained = client.get("/debug/pods/team-a/a-0").json()
    assert explained["decisions"][-1]["outcome"] == "rejected by quota"


def test_room_reserved_for_another_job_fails_the_node() -> None:
    client, extender, _ = cluster()
    with extender.source.exclusive() as snap:
        snap.upsert_pod(parse_pod(pod("b-3", "team-b", gpu=8, node="n3", preemptible=True)))
        snap.upsert_pod(
            parse_pod(pod("t-0", gpu=8, group="t", preemptible=False, can_preempt=True))
        )
        decision = plan_job_preemption(snap, "team-a/t", 1_800_000_000.0)
        assert isinstance(decision, PreemptionPlan)
        for victim in decision.victims:
            snap.remove_pod(victim.pod.key)
        snap.add_reservation(decision.reservation(1_800_000_000.0, 300))
        reserved = decision.placements["team-a/t-0"]
    other = scheduler_pod("x-0", "team-b", gpu=4, preemptible=True)
    assert reserved == "n2"  # r-0 started last, so it alone was evicted
    result = client.post("/filter", json={"Pod": other, "NodeNames": [reserved, "n3"]}).json()
    # n3 is full too, but plain resource fit is kube-scheduler's call, not the extender's
    assert result["NodeNames"] == ["n3"], result
    assert "reserved for job team-a/t" in result["FailedNodes"][reserved]
    # the job's own pod is steered to its reserved node
    own = scheduler_pod("t-0", gpu=8, group="t", preemptible=False, can_preempt=True)
    scores = client.post("/prioritize", json={"Pod": own, "NodeNames": [reserved, "n0"]}).json()
    assert {"Host": reserved, "Score": 10} in scores


def test_prioritize_is_a_bare_array_of_integer_scores() -> None:
    client, _, _ = cluster()
    # A team-b pod: n2 runs its own quota's pods only (see test_borrowed_apart.py).
    response = client.post(
        "/prioritize",
        json={"Pod": scheduler_pod("b-9", "team-b", gpu=4), "NodeNames": ["n2", "n3", "zz"]},
    )
    assert response.status_code == 200
    scores = json.loads(response.text)
    assert isinstance(scores, list)
    assert [s["Host"] for s in scores] == ["n2", "n3", "zz"]
    assert all(set(s) == {"Host", "Score"} and type(s["Score"]) is int for s in scores)
    assert all(0 <= s["Score"] <= 10 for s in scores)
    by_host = {s["Host"]: s["Score"] for s in scores}
    assert by_host["n2"] > by_host["n3"]  # packing: the half-full node first


def test_go_decoder_key_rules_null_fields_and_unknown_keys() -> None:
    client, _, _ = cluster()
    body = {"pod": scheduler_pod("a-0", gpu=1), "nodes": None, "nodenames": ["n3"], "Extra": 1}
    result = client.post("/filter", json=body).json()
    assert result["NodeNames"] == ["n3"]


def test_preempt_gives_no_victims_for_a_pod_muster_governs_and_plans_its_job_at_once() -> None:
    client, extender, handed = cluster()
    preemptor = scheduler_pod("a-0", gpu=8, can_preempt=True, preemptible=False)
    with extender.source.exclusive() as snap:  # as the informer has it: a job of one, complete
        snap.upsert_pod(parse_pod(preemptor))
    body = {
        "Pod": preemptor,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "n0": {"Pods": [{"UID": "team-b/b-0"}], "NumPDBViolations": 0},
            "ops-0": {"Pods": [{"UID": "ops/x-0"}, {"UID": "ops/x-1"}], "NumPDBViolations": 0},
        },
    }
    response = client.post("/preempt", json=body)
    assert response.status_code == 200
    # Muster is its only preemption authority: kube-scheduler deletes nothing for it.
    assert response.json() == {"NodeNameToMetaVictims": {}}
    assert handed == [("team-a/a-0", "kube-scheduler wants to preempt for it", True)]
    explained = client.get("/debug/pods/team-a/a-0").json()
    assert "Muster preempts for team-a/a-0 itself" in explained["decisions"][-1]["reasons"][0]


def test_preempt_for_a_pod_outside_muster_keeps_only_victims_outside_muster() -> None:
    client, _, handed = cluster()
    preemptor = scheduler_pod("critical", "kube-system", gpu=8)
    body = {
        "Pod": preemptor,
        "NodeNameToMetaVictims": {
            "n0": {"Pods": [{"UID": "team-b/b-0"}], "NumPDBViolations": 0},  # Muster's
            "ops-0": {"Pods": [{"UID": "ops/x-0"}, {"UID": "ops/x-1"}], "NumPDBViolations": 1},
            "n2": {"Pods": [{"UID": "ghost"}], "NumPDBViolations": 0},  # unknown
        },
    }
    assert client.post("/preempt", json=body).json() == {
        "NodeNameToMetaVictims": {
            "ops-0": {"Pods": [{"UID": "ops/x-0"}, {"UID": "ops/x-1"}], "NumPDBViolations": 1}
        }
    }
    assert handed == []


def test_preempt_with_full_victim_objects_and_gang_pods() -> None:
    client, extender, handed = cluster()
    victims = []
    for name in ("x-0", "x-1"):
        victim = scheduler_pod(name, "ops", gpu=4, node="ops-0")
        victim["metadata"]["uid"] = f"ops/{name}"
        victims.append(victim)
    preemptor = scheduler_pod("critical", "kube-system", gpu=8)
    body = {
        "Pod": preemptor,
        "NodeNameToVictims": {"ops-0": {"Pods": victims, "NumPDBViolations": 0}},
    }
    result = client.post("/preempt", json=body).json()
    assert result["NodeNameToMetaVictims"] == {
        "ops-0": {"Pods": [{"UID": "ops/x-0"}, {"UID": "ops/x-1"}], "NumPDBViolations": 0}
    }
    # A gang pod is Muster's wherever it runs; with one of its two pods created, the
    # PostFilter waits a moment for the rest rather than planning at once.
    gang_pod = scheduler_pod("g-0", "ops", gpu=8, group="g")
    gang_pod["metadata"]["annotations"] = {"gang.scheduling.koordinator.sh/min-available": "2"}
    with extender.source.exclusive() as snap:  # as the informer has it
        snap.upsert_pod(parse_pod(gang_pod))
    body["Pod"] = gang_pod
    assert client.post("/preempt", json=body).json() == {"NodeNameToMetaVictims": {}}
    assert handed == [("ops/g", "kube-scheduler wants to preempt for it", False)]


def test_bind_without_api_access_is_a_clear_error() -> None:
    client, _, _ = cluster()
    body = {"PodName": "a-0", "PodNamespace": "team-a", "PodUID": "u", "Node": "n3"}
    response = client.post("/bind", json=body)
    assert response.status_code == 200
    assert "no Kubernetes API access" in response.json()["Error"]


def test_bind_through_a_binder() -> None:
    calls = []

    class Recorder:
        def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
            calls.append((namespace, name, uid, node))

    client, extender, _ = cluster(binder=Recorder())
    with extender.source.exclusive() as snap:  # as the informer has it
        snap.upsert_pod(parse_pod(scheduler_pod("a-0", gpu=4)))
    body = {"PodName": "a-0", "PodNamespace": "team-a", "PodUID": "uid-a-0", "Node": "n3"}
    assert client.post("/bind", json=body).json() == {"Error": ""}
    assert calls == [("team-a", "a-0", "uid-a-0", "n3")]
    # Counted on n3 at once, before the informer says it is bound.
    with extender.source.exclusive() as snap:
        assert snap.pods["team-a/a-0"].node_name == "n3"


@pytest.mark.parametrize(
    ("path", "content", "status", "message"),
    [
        ("/filter", b'{"Pod": ', 400, "malformed JSON"),
        ("/filter", b"", 400, "empty request body"),
        ("/filter", b"[1, 2]", 400, "(body): Input should be an object"),
        ("/filter", b'{"NodeNames": ["n1"]}', 400, "Pod: required"),
        ("/filter", b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "n1"}', 400, "NodeNames"),
        (
            "/filter",
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", '
            b'"resources": {"requests": {"cpu": "lots"}}}]}}, "NodeNames": []}',
            400,
            "Pod.spec.containers[0].resources.requests.cpu: 'lots' is not a quantity",
        ),
        ("/filter", b'{"Pod": {"metadata": {}}, "NodeNames": []}', 400, "Pod.metadata.name"),
        (
            "/filter",
            b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{}]}}',
            400,
            "Nodes.items[0].metadata.name: required",
        ),
        ("/prioritize", b'{"Pod": null}', 400, "Pod: required"),
        (
            "/preempt",
            b'{"Pod": {"metadata": {"name": "p"}}, "NodeNameToMetaVictims": {"n": '
            b'{"Pods": [{"UID": 5}]}}}',
            400,
            "UID",
        ),
        ("/bind", b'{"PodName": "p"}', 400, "PodNamespace: Field required"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_problem(
    path: str, content: bytes, status: int, message: str
) -> None:
    client, _, _ = cluster()
    response = client.post(path, content=content)
    assert response.status_code == status
    assert message in response.json()["error"]
    assert client.get("/healthz").status_code == 200


def test_oversized_body_is_413_and_the_server_keeps_serving() -> None:
    client, _, _ = cluster()
    names = [f"node-{i:07d}" for i in range(30_000)]  # ~480 KiB > the 256 KiB limit here
    response = client.post("/filter", json={"Pod": scheduler_pod("a-0"), "NodeNames": names})
    assert response.status_code == 413
    assert "request body over" in response.json()["error"]

    def chunks() -> Any:
        for _ in range(64):
            yield b" " * 8192

    streamed = client.post("/filter", content=chunks())
    assert streamed.status_code == 413
    ok = client.post("/filter", json={"Pod": scheduler_pod("a-0"), "NodeNames": ["n3"]})
    assert ok.status_code == 200


def test_health_readiness_metrics_and_debug() -> None:
    client, _, _ = cluster()
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    client.post("/filter", json={"Pod": scheduler_pod("a-0", gpu=1), "NodeNames": ["n3"]})
    client.post("/filter", content=b"{")
    metrics = client.get("/metrics").text
    assert 'muster_extender_requests_total{code="200",verb="filter"} 1.0' in metrics
    assert 'muster_extender_requests_total{code="400",verb="filter"} 1.0' in metrics
    assert 'muster_decisions_total{outcome="admitted",verb="filter"} 1.0' in metrics
    assert 'muster_quota_used{quota="team-b",resource="nvidia.com/gpu"} 20.0' in metrics
    assert 'muster_quota_max{quota="team-a",resource="nvidia.com/gpu"} 16.0' in metrics
    quotas = client.get("/debug/quotas").json()
    assert quotas["team-b"]["used"]["nvidia.com/gpu"] == "20"
    assert quotas["team-b"]["nonPreemptibleUsed"]["nvidia.com/gpu"] == "8"
    assert client.get("/debug/pods/team-a/nobody").status_code == 404
    assert client.get("/debug/jobs").status_code == 200


def test_debug_endpoints_are_404_unless_enabled() -> None:
    """``create_app`` serves ``/debug/`` only when asked (``muster serve
    --enable-debug-endpoints``): off, each path, known or not, is a 404 that says why,
    and everything else is served as before."""
    _client, extender, _ = cluster()
    client = TestClient(create_app(extender))
    for path in ("/debug/quotas", "/debug/jobs", "/debug/budgets", "/debug/pods/team-b/b-0"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json() == {
            "error": f"{path}: the debug endpoints are off "
            "(muster serve --enable-debug-endpoints serves them)"
        }
    assert client.post("/debug/jobs").status_code == 404
    assert client.get("/readyz").status_code == 200
    body = {"Pod": scheduler_pod("a-0", gpu=1), "NodeNames": ["n3"]}
    assert client.post("/filter", json=body).json()["NodeNames"] == ["n3"]
    # On, the same paths answer (the cluster() client is built with them on).
    on, _, _ = cluster()
    assert on.get("/debug/pods/team-b/b-0").status_code == 200


JSON = json_values(width=4, leaves=20)
KEYS = st.sampled_from(
    [
        "Pod",
        "Nodes",
        "NodeNames",
        "NodeNameToMetaVictims",
        "NodeNameToVictims",
        "PodName",
        "PodNamespace",
        "PodUID",
        "Node",
        "metadata",
        "spec",
        "containers",
        "items",
    ]
)
SHAPED = st.dictionaries(KEYS, JSON | st.dictionaries(KEYS, JSON, max_size=3), max_size=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(["/filter", "/prioritize", "/preempt", "/bind"]), body=SHAPED | JSON)
def test_fuzzed_requests_never_get_a_5xx(path: str, body: Any) -> None:
    client, _, _ = FUZZ_CLIENT
    response = client.post(path, content=json.dumps(body).encode())
    assert response.status_code < 500, response.text
    assert response.status_code in (200, 400)


FUZZ_CLIENT = cluster()


def test_preempt_never_hands_kube_scheduler_a_pod_of_a_gang() -> None:
    client, extender, _ = cluster()
    with extender.source.exclusive() as snap:
        for i, node_name in enumerate(("n2", "n3")):
            snap.upsert_pod(
                parse_pod(
                    pod(f"g-{i}", "team-b", gpu=4, node=node_name, group="g", preemptible=True)
                )
            )
    # A preemptor outside Muster: kube-scheduler's to preempt for, but not with a victim
    # Muster governs (a gang goes whole, and only by Muster's mark).
    preemptor = scheduler_pod("critical", "kube-system", gpu=4)
    meta = {"n2": {"Pods": [{"UID": "team-b/g-0"}], "NumPDBViolations": 0}}
    body = {"Pod": preemptor, "NodeNameToMetaVictims": meta}
    assert client.post("/preempt", json=body).json() == {"NodeNameToMetaVictims": {}}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"priorityClassName": ["x"]}, "Pod.spec.priorityClassName: expected a string"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "k", "operator": "In", "values": 5}]}
                            ]
                        }
                    }
                }
            },
            "values: expected a list",
        ),
        (
            {"containers": [{"name": "c", "resources": {"requests": {"cpu": "9" * 5000}}}]},
            "too long to be a quantity",
        ),
    ],
)
def test_odd_pod_fields_are_400s(spec: dict[str, Any], message: str) -> None:
    client, _, _ = cluster()
    body = {"Pod": {"metadata": {"name": "p"}, "spec": spec}, "NodeNames": ["n0"]}
    response = client.post("/filter", json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_a_gang_placed_whole_keeps_its_quota_and_room_while_its_pods_bind() -> None:
    """Two gangs filtered in turn before any binding is seen: the second must not take the
    room the first was placed with (else both end up half-placed)."""
    snap = snapshot(
        [node("n0"), node("n1")],
        [
            pod(f"{job}-{i}", "q", gpu=1, group=job, preemptible=True)
            for job in ("x", "y")
            for i in range(2)
        ],
        [quota("q", max={GPU: "2"})],
    )
    start = 1_800_000_000.0
    extender = Extender(StaticSource(snap), clock=lambda: start)

    def filtered(name: str) -> list[str]:
        return extender.filter(
            parse_pod(pod(name, "q", gpu=1, group=name[0], preemptible=True)), ["n0", "n1"]
        ).passed

    # x's first pod places the whole gang: both pods fit on either node, and the
    # placement packs the fullest node first, ties by name: n0 for both.
    assert filtered("x-0") == ["n0"]
    assert filtered("y-0") == []  # x's reserved pods hold both GPUs of the quota
    assert filtered("x-1") == ["n0"]
    # If x never binds, its placement ends with the reservation timeout: y is placed.
    later = start + snap.args.reservation_timeout_seconds + 1
    snap.expire_reservations(later)
    extender.clock = lambda: later
    assert filtered("y-0") == ["n0"]


def test_the_informers_reading_of_the_same_pod_version_is_used() -> None:
    """kube-scheduler sends the pod object Muster's informers already parsed: the same UID
    and resourceVersion is the same object, so that reading is used; any other version,
    another pod under the same name, or a bound pod is parsed from the request."""
    _client, extender, _ = cluster()
    sent = scheduler_pod("p", "team-a", gpu=8)
    informed = parse_pod(sent)
    with extender.source.exclusive() as snap:
        snap.upsert_pod(informed)
    assert extender.known_pending_pod("team-a/p", "uid-p", "123") is informed
    assert _pod(sent, extender, True) is informed
    newer = json.loads(json.dumps(sent))
    newer["metadata"]["resourceVersion"] = "124"
    newer["spec"]["containers"][0]["resources"] = {"requests": {GPU: "2"}}
    assert _pod(newer, extender, True).requests == {GPU: 2000, "pods": 1000}
    assert extender.known_pending_pod("team-a/p", "uid-other", "123") is None
    assert extender.known_pending_pod("team-a/p", "uid-p", "") is None
    with extender.source.exclusive() as snap:
        snap.upsert_pod(dataclasses.replace(informed, node_name="n3"))
    assert extender.known_pending_pod("team-a/p", "uid-p", "123") is None


class _RecordingLock:
    """A lock that records how it was asked for: to see where a verb waited."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[bool] = []  # the ``blocking`` argument of each acquire

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.calls.append(blocking)
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()


def test_a_busy_snapshot_moves_the_verb_off_the_event_loop() -> None:
    client, extender, _ = cluster()
    lock = _RecordingLock()
    extender.source._lock = lock  # type: ignore[attr-defined]
    body = {"Pod": scheduler_pod("a-0", gpu=1), "NodeNames": ["n3"]}
    assert client.post("/filter", json=body).status_code == 200
    assert lock.calls and not any(lock.calls)  # answered inline, never waiting
    lock.calls.clear()
    answers: list[Any] = []
    lock._lock.acquire()  # an informer applying a relist, say
    try:
        worker = threading.Thread(target=lambda: answers.append(client.post("/filter", json=body)))
        worker.start()
        # The inline attempt found the snapshot busy; a worker thread now waits for it...
        deadline = time.monotonic() + 10
        while True not in lock.calls:
            assert time.monotonic() < deadline, "the filter never moved to a worker thread"
            time.sleep(0.005)
        # ...while the event loop keeps answering.
        assert client.get("/healthz").json() == {"status": "ok"}
        assert answers == []
    finally:
        lock._lock.release()
    worker.join(timeout=30)
    assert answers[0].status_code == 200
    assert answers[0].json()["NodeNames"] == ["n3"]


def test_verb_paths_tolerate_slashes_and_a_bug_is_a_json_500() -> None:
    client, extender, _ = cluster()
    body = {"Pod": scheduler_pod("a-0", gpu=1), "NodeNames": ["n3"]}
    for path in ("http://testserver//filter", "/filter/"):
        assert client.post(path, json=body).json()["NodeNames"] == ["n3"]

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    working = extender.prioritize
    extender.prioritize = broken  # type: ignore[method-assign]
    failed = client.post("/prioritize", json=body)
    assert failed.status_code == 500
    assert failed.json() == {"error": "internal error: RuntimeError"}
    extender.prioritize = working  # type: ignore[method-assign]
    assert client.post("/prioritize", json=body).status_code == 200
    metrics = client.get("/metrics").text
    assert 'muster_extender_requests_total{code="500",verb="prioritize"} 1.0' in metrics
