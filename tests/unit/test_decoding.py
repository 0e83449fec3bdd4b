"""The informers' decoders: what ``json.loads`` gives, less the pods' and nodes' managed fields."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from extender.kube.client import stream_lines
from extender.kube.decoding import LEAN, WHOLE, decode_lean_event, decode_lean_page

STAMP = "2026-11-27T01:00:00Z"


def pod(name: str) -> dict[str, Any]:
    """A pod as kube-apiserver sends it: defaulted, bound, with managed fields."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": "job-",
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "resourceVersion": "1234",
            "generation": 1,
            "creationTimestamp": STAMP,
            "deletionTimestamp": STAMP,
            "deletionGracePeriodSeconds": 30,
            "labels": {"app": "x", "pod-group.scheduling.sigs.k8s.io": "g"},
            "annotations": {"muster.io/reservation": '{"a": [1, 2.5, null, true]}'},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "j",
                    "uid": "u",
                    "controller": True,
                }
            ],
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": STAMP,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "pause",
                    "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "8"}},
                }
            ],
            "nodeName": "node-1",
            "priority": -5,
            "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 300}],
            "overhead": None,
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True", "message": "é ✓"}],
        },
    }


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("managedFields", None)
    return obj


def test_the_whole_decoder_gives_what_json_loads_gives() -> None:
    page = {"kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": [pod("a")]}
    data = json.dumps(page).encode()
    assert WHOLE.page(data) == json.loads(data)
    assert WHOLE.event(data) == json.loads(data)


def test_a_lean_page_is_the_page_less_each_objects_managed_fields() -> None:
    node = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": "n", "resourceVersion": "3", "managedFields": [{"manager": "k"}]},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "32"}, "capacity": {"cpu": "32"}},
    }
    page = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "9", "continue": "token", "remainingItemCount": 3},
        "items": [pod("a"), pod("b"), node, {"metadata": {"name": "bare"}}],
    }
    decoded = decode_lean_page(json.dumps(page).encode())
    assert decoded == {**page, "items": [without_managed_fields(o) for o in page["items"]]}
    assert list(decoded["items"][0]) == ["kind", "apiVersion", "metadata", "spec", "status"]
    assert LEAN.page is decode_lean_page


@pytest.mark.parametrize("items", [[], None])
def test_an_empty_lean_page(items: list[Any] | None) -> None:
    page = {"metadata": {"resourceVersion": "9"}, "items": items}
    assert decode_lean_page(json.dumps(page).encode()) == page


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED"])
def test_a_lean_event_is_the_event_less_the_objects_managed_fields(kind: str) -> None:
    event = {"type": kind, "object": pod("a")}
    assert decode_lean_event(json.dumps(event).encode()) == {
        "type": kind,
        "object": without_managed_fields(pod("a")),
    }


def test_bookmarks_and_errors_decode_as_json_loads_decodes_them() -> None:
    bookmark = {
        "type": "BOOKMARK",
        "object": {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "resourceVersion": "12",
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        },
    }
    error = {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "too old resource version: 1 (2)",
            "reason": "Expired",
            "details": {"causes": [{"message": "x"}]},
            "code": 410,
        },
    }
    for event in (bookmark, error):
        assert decode_lean_event(json.dumps(event).encode()) == event


def test_a_watch_stream_split_anywhere_decodes_event_by_event() -> None:
    events = [{"type": "ADDED", "object": pod(f"p{i}")} for i in range(3)]
    stream = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    chunks = [stream[i : i + 97] for i in range(0, len(stream), 97)]
    decoded = [decode_lean_event(line) for line in stream_lines(chunks) if line.strip()]
    assert decoded == [{**e, "object": without_managed_fields(e["object"])} for e in events]


def test_malformed_json_is_a_value_error() -> None:
    # The informer backs off and retries on a ValueError, as it did with json.loads.
    for decode in (WHOLE.page, LEAN.page, LEAN.event):
        with pytest.raises(ValueError):
            decode(b'{"items": [')
    with pytest.raises(ValueError):
        LEAN.page(b'{"items": [{"metadata": 5}]}')


def test_the_client_decodes_a_success_with_the_decoder_named_and_an_error_with_json() -> None:
    import httpx
    from kubernetes import client as k8s_client

    from extender.kube.client import ApiError, KubeClient

    configuration = k8s_client.Configuration()
    configuration.host = "http://apiserver"
    configuration.verify_ssl = False
    kube = KubeClient(configuration)
    page = {"metadata": {"resourceVersion": "9"}, "items": [pod("a")]}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") == "true":
            lines = json.dumps({"type": "ADDED", "object": pod("a")}) + "\n"
            return httpx.Response(200, content=lines.encode())
        if request.url.path == "/api/v1/pods":
            return httpx.Response(200, json=page)
        return httpx.Response(404, json={"kind": "Status", "message": "no", "reason": "NotFound"})

    kube._http = httpx.Client(base_url="http://apiserver", transport=httpx.MockTransport(answer))
    try:
        assert kube.request("GET", "/api/v1/pods", decode=LEAN.page) == {
            **page,
            "items": [without_managed_fields(pod("a"))],
        }
        assert kube.request("GET", "/api/v1/pods") == page
        with pytest.raises(ApiError) as raised:
            kube.request("GET", "/api/v1/nodes", decode=LEAN.page)
        assert raised.value.status == 404 and raised.value.reason == "NotFound"
        with kube.watch("/api/v1/pods", {}, read_timeout=5, decode=LEAN.event) as events:
            assert list(events) == [{"type": "ADDED", "object": without_managed_fields(pod("a"))}]
    finally:
        kube.close()


def test_the_parsers_make_the_same_pods_and_nodes_of_a_lean_page() -> None:
    # bench.memory's cluster (pods of gangs, priorities, owners, pending and running), each
    # object given managed fields: the core's parsers read nothing of what LEAN leaves out.
    from bench.memory import PRIORITIES, snapshot_items
    from extender.core.objects import parse_node, parse_pod
    from extender.core.priorities import PriorityClasses

    classes = PriorityClasses(values=PRIORITIES)
    objects = [o for o in snapshot_items(nodes=40, pods=400) if o["kind"] in ("Pod", "Node")]
    for obj in objects:
        obj["metadata"]["managedFields"] = pod("x")["metadata"]["managedFields"]
    data = json.dumps({"metadata": {}, "items": objects}).encode()
    whole, lean = json.loads(data)["items"], decode_lean_page(data)["items"]
    assert len(lean) == len(objects) == 440
    for before, after in zip(whole, lean, strict=True):
        if before["kind"] == "Pod":
            assert parse_pod(after, classes) == parse_pod(before, classes)
        else:
            assert parse_node(after) == parse_node(before)
