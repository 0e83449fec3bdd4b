"""kube-scheduler with Muster as its extender, on the real control plane.

Muster serves over a fixed snapshot of the cluster each test builds (the
Kubernetes adapter that watches the live cluster is a later step), so these
tests check the protocol and the quota decisions end to end: kube-scheduler
calls Muster's filter and prioritize with node names, pods bind, and a pod
Muster rejects carries Muster's reason in its ``PodScheduled`` condition.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_support import Cluster, condition, delete_namespaced
from muster_process import MusterProcess

import localcluster as lc

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
QUOTA_API = "/apis/scheduling.x-k8s.io/v1alpha1"

StartMuster = Callable[[list[dict[str, Any]]], MusterProcess]


@pytest.fixture
def muster(control_plane: lc.ControlPlane, tmp_path: Path) -> Iterator[StartMuster]:
    """Start Muster over a snapshot and make it kube-scheduler's extender for the test."""
    started: list[MusterProcess] = []
    contexts: list[Any] = []

    def start(snapshot: list[dict[str, Any]]) -> MusterProcess:
        process = MusterProcess(tmp_path, snapshot=snapshot)
        started.append(process)
        context = control_plane.using_extender(lc.ExtenderConfig(process.url))
        context.__enter__()
        contexts.append(context)
        return process

    yield start
    for context in reversed(contexts):
        context.__exit__(None, None, None)
    for process in started:
        process.stop()


def create_quota(
    cluster: Cluster, name: str, namespace: str, spec: dict[str, Any]
) -> dict[str, Any]:
    body = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return cluster.rest.request("POST", f"{QUOTA_API}/namespaces/{namespace}/elasticquotas", body)


def nodes_of(cluster: Cluster) -> list[dict[str, Any]]:
    return [cluster.rest.request("GET", f"/api/v1/nodes/{name}") for name in cluster.nodes]


def test_scheduler_calls_muster_and_pods_bind(cluster: Cluster, muster: StartMuster) -> None:
    for name in ("a", "b"):
        cluster.create_node(name, {"cpu": "16", "memory": "64Gi", GPU: 8})
    quota = create_quota(
        cluster, "team", cluster.namespace, {"min": {GPU: "16"}, "max": {GPU: "16"}}
    )
    process = muster([*nodes_of(cluster), quota])
    labels = {"quota.scheduling.koordinator.sh/preemptible": "false"}
    for i in range(3):
        cluster.create_pod(f"w-{i}", requests={"cpu": "1", GPU: 4}, labels=labels)
    for i in range(3):
        pod = cluster.wait_running(f"w-{i}")
        assert pod["spec"]["nodeName"] in cluster.nodes
    assert process.metric("muster_extender_requests_total", verb="filter", code="200") >= 3
    assert process.metric("muster_extender_requests_total", verb="prioritize", code="200") >= 3
    decisions = process.debug(f"pods/{cluster.namespace}/w-0")["decisions"]
    assert decisions[0]["verb"] == "filter"
    assert decisions[0]["outcome"] == "all 2 nodes passed"


def test_quota_rejection_shows_musters_reason(cluster: Cluster, muster: StartMuster) -> None:
    cluster.create_node("big", {"cpu": "64", "memory": "256Gi", GPU: 32})
    quota = create_quota(
        cluster, "small", cluster.namespace, {"min": {GPU: "8"}, "max": {GPU: "8"}}
    )
    process = muster([*nodes_of(cluster), quota])
    labels = {"quota.scheduling.koordinator.sh/preemptible": "false"}
    cluster.create_pod("greedy", requests={GPU: 16}, labels=labels)
    pod = cluster.wait_unschedulable("greedy")
    message = condition(pod, "PodScheduled")["message"]  # type: ignore[index]
    assert f"quota small: non-preemptible {GPU} 16 would exceed min 8" in message
    assert process.metric("muster_decisions_total", verb="filter", outcome="rejected_quota") >= 1
    # a pod that fits the quota still binds
    cluster.create_pod("modest", requests={GPU: 8}, labels=labels)
    cluster.wait_running("modest")


#: A scenario's own files beside it (NAME.args.yaml) are not scenarios; a scenario pinned
#: to a time (NAME.now) decides at that time, which a live cluster's clock is not.
SCENARIOS = sorted(
    p
    for p in (ROOT / "tests" / "scenarios").glob("*.yaml")
    if not p.name.endswith(".args.yaml") and not p.with_suffix(".now").exists()
)
#: Scenarios whose pods a controller owns (a Job in the dump) are played by their real
#: controller in tests/e2e/test_jobs.py instead: here the pods would be created without
#: it, and the garbage collector deletes pods whose owner does not exist.
#: Scenarios whose gangs are declared by an object (a PodGroup, a Workload) are played on
#: those objects' real APIs in tests/e2e/test_gang_apis.py instead: this test creates
#: nodes, quotas, priority classes and pods only, and Kubernetes' own gang API is served
#: only with a feature gate this control plane leaves off.
HAND_MADE = [
    p
    for p in SCENARIOS
    if "ownerReferences" not in p.read_text()
    and not re.search(r"^kind: (PodGroup|Workload)$", p.read_text(), re.MULTILINE)
]


def renamed(obj: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A scenario object moved into this test's namespaces and nodes."""
    obj = copy.deepcopy(obj)
    metadata = obj.setdefault("metadata", {})
    metadata.pop("creationTimestamp", None)
    if obj["kind"] == "Node":
        metadata["name"] = f"{prefix}-{metadata['name']}"
    if "namespace" in metadata:
        metadata["namespace"] = f"{prefix}-{metadata['namespace']}"
    if obj["kind"] == "Pod":
        spec = obj["spec"]
        if spec.get("nodeName"):
            spec["nodeName"] = f"{prefix}-{spec['nodeName']}"
        for container in spec["containers"]:
            container.setdefault("image", "registry.k8s.io/pause:3.10")
            requests = container.get("resources", {}).get("requests", {})
            extended = {k: v for k, v in requests.items() if "/" in k}
            if extended:
                container["resources"]["limits"] = extended
        obj.pop("status", None)
    return obj


def scenario_objects(path: Path) -> list[dict[str, Any]]:
    objects = []
    for document in yaml.safe_load_all(path.read_text()):
        if document is None:
            continue
        objects.extend(document["items"] if document.get("kind") == "List" else [document])
    return objects


@pytest.mark.parametrize("scenario", HAND_MADE, ids=lambda p: p.stem)
def test_scenario_clusters_build_for_real(
    cluster: Cluster, muster: StartMuster, scenario: Path
) -> None:
    """Each scenario's cluster is created on the real API server: nodes, quotas, priority
    classes, running pods on their nodes; its pending pods stay pending where the scenario
    needs preemption (the PostFilter that acts on a live cluster is a later step)."""
    prefix = cluster.namespace
    objects = [renamed(o, prefix) for o in scenario_objects(scenario)]
    plane = cluster.plane
    for namespace in sorted(
        {o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]}
    ):
        plane.create_namespace(namespace)
    stored = []
    for obj in objects:
        kind = obj["kind"]
        if kind == "Node":
            status = obj.get("status", {}).get("allocatable", {})
            spec = obj.get("spec", {})
            cluster.create_node(
                obj["metadata"]["name"].removeprefix(f"{prefix}-"),
                status,
                labels=obj["metadata"].get("labels"),
                unschedulable=spec.get("unschedulable", False),
            )
            stored.append(cluster.rest.request("GET", f"/api/v1/nodes/{obj['metadata']['name']}"))
        elif kind == "ElasticQuota":
            group = obj["apiVersion"].split("/")[0]
            namespace = obj["metadata"]["namespace"]
            stored.append(
                cluster.rest.request(
                    "POST", f"/apis/{obj['apiVersion']}/namespaces/{namespace}/elasticquotas", obj
                )
            )
            assert group in ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io")
        elif kind == "PriorityClass":
            obj["metadata"]["name"] = f"{prefix}-{obj['metadata']['name']}"[:63]
            stored.append(
                cluster.rest.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", obj)
            )
    classes = {
        o["metadata"]["name"].removeprefix(f"{prefix}-")
        for o in objects
        if o["kind"] == "PriorityClass"
    }
    pods = [o for o in objects if o["kind"] == "Pod"]
    for obj in pods:
        name = obj["spec"].get("priorityClassName")
        if name in classes:
            obj["spec"]["priorityClassName"] = f"{prefix}-{name}"[:63]
    # Muster sees the same cluster: nodes, quotas, the running pods.
    running = [o for o in pods if o["spec"].get("nodeName")]
    muster([*stored, *running])
    for obj in pods:
        namespace = obj["metadata"]["namespace"]
        cluster.rest.request("POST", f"/api/v1/namespaces/{namespace}/pods", obj)
    for obj in running:
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        pod = lc.wait_until(
            lambda namespace=namespace, name=name: (
                _phase(cluster, namespace, name) == "Running" or None
            ),
            timeout=30,
            what=f"{namespace}/{name} Running",
        )
        assert pod
    expected = scenario.with_suffix("").with_suffix(".expected.json")
    story = json.loads(expected.read_text())
    for key in story.get("pending", []):
        namespace, name = key.split("/")
        lc.wait_until(
            lambda namespace=namespace, name=name: (
                _unschedulable(cluster, f"{prefix}-{namespace}", name) or None
            ),
            timeout=30,
            what=f"{key} Unschedulable",
        )
    for namespace in {o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]}:
        delete_namespaced(cluster.rest, namespace)
    for obj in stored:
        if obj["kind"] == "PriorityClass":
            cluster.rest.request(
                "DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{obj['metadata']['name']}"
            )


def _phase(cluster: Cluster, namespace: str, name: str) -> str | None:
    pod = cluster.rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return pod.get("status", {}).get("phase")


def _unschedulable(cluster: Cluster, namespace: str, name: str) -> bool:
    pod = cluster.rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    cond = condition(pod, "PodScheduled")
    return bool(cond and cond["status"] == "False" and cond["reason"] == "Unschedulable")
