"""The local control plane itself: scheduling, the kubelet emulator, CRDs, restarts.

These run against the real kube-scheduler and kube-apiserver without Muster; they
check the harness the Muster e2e tests are built on.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from e2e_support import Cluster, condition
from kubernetes import client as k8s

import localcluster as lc

pytestmark = pytest.mark.e2e

GROUPS = ("scheduling.sigs.k8s.io", "scheduling.x-k8s.io")


def as_dict(obj: object) -> dict[str, Any]:
    """Custom-object calls return plain JSON dicts (typed ``object`` by the client)."""
    assert isinstance(obj, dict)
    return obj


def pod_names(pods: k8s.V1PodList) -> set[str]:
    return {p.metadata.name for p in pods.items if p.metadata and p.metadata.name}


def test_scheduler_binds_and_kubelet_emulator_runs_pod(cluster: Cluster) -> None:
    nodes = {
        cluster.create_node("small", {"cpu": "2", "memory": "4Gi"}),
        cluster.create_node("gpu", {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}),
    }
    cluster.create_pod("web", requests={"cpu": "500m", "memory": "256Mi"})
    cluster.create_pod("trainer", requests={"cpu": "1", "nvidia.com/gpu": 2})

    web = cluster.wait_running("web")
    trainer = cluster.wait_running("trainer")

    assert web["spec"]["nodeName"] in nodes
    assert trainer["spec"]["nodeName"] == f"{cluster.namespace}-gpu"
    for pod in (web, trainer):
        status = pod["status"]
        assert status["startTime"]
        assert status["podIP"]
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
            cond = condition(pod, kind)
            assert cond is not None and cond["status"] == "True", kind
        [container] = status["containerStatuses"]
        assert container["ready"] is True
        assert "running" in container["state"]


def test_pod_too_big_for_every_node_stays_pending(cluster: Cluster) -> None:
    cluster.create_node("n1", {"cpu": "4", "memory": "8Gi"})
    cluster.create_pod("huge", requests={"cpu": "1000", "memory": "1Ti"})

    pod = cluster.wait_unschedulable("huge")

    cond = condition(pod, "PodScheduled")
    assert cond is not None
    assert "Insufficient cpu" in cond["message"], cond
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")


def test_deleting_running_pod_completes_via_emulator(
    cluster: Cluster, control_plane: lc.ControlPlane
) -> None:
    cluster.create_node("n1", {"cpu": "4", "memory": "8Gi"})
    cluster.create_pod("victim", requests={"cpu": "1"}, grace_seconds=2)
    cluster.wait_running("victim")
    assert control_plane.kubelet is not None
    deleted_before = control_plane.kubelet.pods_deleted

    answer = cluster.delete_pod("victim")

    # kube-apiserver deletes a pod bound to a node gracefully: it only sets the
    # deletion timestamp and leaves the rest to the kubelet (here, the emulator).
    assert answer["metadata"]["deletionTimestamp"]
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 2
    assert cluster.get_pod("victim") is not None
    cluster.wait_gone("victim", timeout=20)
    assert control_plane.kubelet.pods_deleted > deleted_before

    # A pod that was never bound is removed at once, without the kubelet.
    cluster.create_pod("never-bound", requests={"cpu": "1000"})
    cluster.wait_unschedulable("never-bound")
    cluster.delete_pod("never-bound")
    assert cluster.get_pod("never-bound") is None


def test_a_pod_that_answers_notice_saves_and_exits_when_marked_or_deleted(
    cluster: Cluster, control_plane: lc.ControlPlane
) -> None:
    # The stand-in plays a job that saves its work and exits on notice ("fail": a Job's
    # pod, which must be replaced rather than counted done).  Marked for soft eviction,
    # it exits Failed and writes when it saved; deleted with 60 s of grace (the notice a
    # peer's preemption gives), it saves and is gone long before the grace runs out.
    cluster.create_node("n1", {"cpu": "4", "memory": "8Gi"})
    notes = {lc.ANSWERS_NOTICE: "fail"}
    for name in ("marked", "deleted"):
        cluster.create_pod(name, requests={"cpu": "1"}, grace_seconds=60, annotations=notes)
        cluster.wait_running(name)
    cluster.rest.request(
        "PATCH",
        cluster.pods_path("marked"),
        {"metadata": {"labels": {"scheduling.koordinator.sh/soft-eviction": "true"}}},
        content_type="application/merge-patch+json",
    )
    marked = cluster.wait_pod(
        "marked",
        lambda p: "muster.dev/checkpointed" in p["metadata"].get("annotations", {}),
        timeout=20,
        what="a checkpoint time",
    )
    assert marked["status"]["phase"] == "Failed"
    cluster.delete_pod("deleted")
    cluster.wait_gone("deleted", timeout=20)  # a third of its grace


@pytest.mark.parametrize("group", GROUPS)
def test_crds_accept_elastic_quota_and_pod_group(
    cluster: Cluster, control_plane: lc.ControlPlane, group: str
) -> None:
    api = control_plane.custom_objects()
    ns = cluster.namespace
    quota = {
        "apiVersion": f"{group}/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": "team-a",
            "labels": {"quota.scheduling.koordinator.sh/parent": "root"},
        },
        "spec": {"min": {"cpu": 2, "memory": "4Gi"}, "max": {"cpu": "8", "nvidia.com/gpu": 4}},
    }
    created = as_dict(
        api.create_namespaced_custom_object(group, "v1alpha1", ns, "elasticquotas", quota)
    )
    assert created["spec"]["min"] == {"cpu": 2, "memory": "4Gi"}
    assert created["spec"]["max"]["nvidia.com/gpu"] == 4

    api.patch_namespaced_custom_object_status(
        group, "v1alpha1", ns, "elasticquotas", "team-a", {"status": {"used": {"cpu": "1500m"}}}
    )
    stored = as_dict(
        api.get_namespaced_custom_object(group, "v1alpha1", ns, "elasticquotas", "team-a")
    )
    assert stored["status"]["used"] == {"cpu": "1500m"}
    assert stored["spec"] == created["spec"]

    bad = {**quota, "metadata": {"name": "bad"}, "spec": {"min": {"cpu": "lots"}}}
    with pytest.raises(lc.ApiError) as rejected:
        control_plane.rest.request(
            "POST", f"/apis/{group}/v1alpha1/namespaces/{ns}/elasticquotas", bad
        )
    assert rejected.value.status == 422

    group_obj = {
        "apiVersion": f"{group}/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "gang-1"},
        "spec": {"minMember": 3, "scheduleTimeoutSeconds": 60},
    }
    api.create_namespaced_custom_object(group, "v1alpha1", ns, "podgroups", group_obj)
    api.patch_namespaced_custom_object_status(
        group, "v1alpha1", ns, "podgroups", "gang-1", {"status": {"phase": "Pending"}}
    )
    stored = as_dict(api.get_namespaced_custom_object(group, "v1alpha1", ns, "podgroups", "gang-1"))
    assert stored["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 60}
    assert stored["status"]["phase"] == "Pending"


def test_service_account_kubeconfig_is_least_privilege(
    cluster: Cluster, control_plane: lc.ControlPlane
) -> None:
    path = control_plane.service_account_kubeconfig(cluster.namespace, "reader")
    user = f"system:serviceaccount:{cluster.namespace}:reader"
    sa_api = control_plane.new_api_client(path)
    core = k8s.CoreV1Api(sa_api)
    with pytest.raises(k8s.ApiException) as forbidden:
        core.list_namespaced_pod(cluster.namespace)
    assert forbidden.value.status == 403

    rest = control_plane.rest
    rest.request(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{cluster.namespace}/roles",
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rest.request(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{cluster.namespace}/rolebindings",
        {
            "metadata": {"name": "pod-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "reader", "namespace": cluster.namespace}
            ],
        },
    )
    # RBAC changes reach the authorizer through an informer: poll, do not sleep.
    lc.wait_until(
        lambda: core.list_namespaced_pod(cluster.namespace) is not None,
        timeout=10,
        what=f"{user} to be allowed to list pods",
    )
    with pytest.raises(k8s.ApiException) as still_forbidden:
        core.list_namespaced_pod("default")
    assert still_forbidden.value.status == 403
    sa_api.close()  # type: ignore[no-untyped-call]


class _StubExtender(BaseHTTPRequestHandler):
    """Accepts every node and scores them 0; records the verbs it was called with."""

    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        verb = self.path.rsplit("/", 1)[-1]
        self.calls.append((verb, args))
        answer: Any
        if verb == "filter":
            answer = {
                "Nodes": None,
                "NodeNames": args["NodeNames"],
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": "",
            }
        elif verb == "prioritize":
            answer = [{"Host": name, "Score": 0} for name in args["NodeNames"]]
        else:
            self.send_error(404)
            return
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stub_extender() -> Iterator[str]:
    _StubExtender.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StubExtender)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/scheduler"
    server.shutdown()
    server.server_close()


def test_scheduler_restarts_with_an_extender(
    cluster: Cluster, control_plane: lc.ControlPlane, stub_extender: str
) -> None:
    node = cluster.create_node("n1", {"cpu": "4", "memory": "8Gi"})
    with control_plane.using_extender(lc.ExtenderConfig(stub_extender, preempt_verb=None)):
        assert control_plane.scheduler_configuration()["extenders"][0]["urlPrefix"] == (
            stub_extender
        )
        cluster.create_pod("via-extender", requests={"cpu": "1"})
        pod = cluster.wait_running("via-extender")

    assert pod["spec"]["nodeName"] == node
    verbs = [verb for verb, _ in _StubExtender.calls]
    assert "filter" in verbs
    filter_args = next(args for verb, args in _StubExtender.calls if verb == "filter")
    # nodeCacheCapable: true → node names only, and the pod as ordinary JSON.
    assert filter_args["Nodes"] is None
    assert node in filter_args["NodeNames"]
    assert filter_args["Pod"]["metadata"]["name"] == "via-extender"
    assert "extenders" not in control_plane.scheduler_configuration()


def test_apiserver_restart_clients_reconnect(
    cluster: Cluster, control_plane: lc.ControlPlane
) -> None:
    cluster.create_node("n1", {"cpu": "4", "memory": "8Gi"})
    cluster.create_pod("before", requests={"cpu": "1"})
    cluster.wait_running("before")
    core = control_plane.core_v1()
    assert pod_names(core.list_namespaced_pod(cluster.namespace)) == {"before"}
    old_pid = control_plane.pids["kube-apiserver"]

    started = time.monotonic()
    control_plane.restart_apiserver()
    assert time.monotonic() - started < 60

    assert control_plane.pids["kube-apiserver"] != old_pid
    # The same client object reconnects; etcd kept the data.
    assert pod_names(core.list_namespaced_pod(cluster.namespace)) == {"before"}
    # kube-scheduler and the kubelet emulator reconnected too: a new pod binds and runs.
    cluster.create_pod("after", requests={"cpu": "1"})
    after = cluster.wait_running("after", timeout=60)
    assert after["status"]["startTime"]
    control_plane.check_alive()
