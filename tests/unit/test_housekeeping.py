"""The leader's ElasticQuota status (extender/kube/housekeeping.py): written through the
status subresource alone (Muster's ClusterRole has no patch on the quota itself), the
non-preemptible part in ``status.nonPreemptibleUsed``, and a resource no longer used
removed, not left behind by the merge patch (no API server: the source is fed by hand)."""

from __future__ import annotations

from typing import Any, cast

from base import keys
from extender.core.config import MusterArgs
from extender.kube.client import Json, KubeClient
from extender.kube.housekeeping import Housekeeper
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter
from tests.builders import node, pod, quota, record_keys

GPU = "nvidia.com/gpu"
PATH = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/elasticquotas/team-a"


class FakeClient:
    """Answers a GET of the quota with ``stored``; records every request."""

    def __init__(self, stored: Json) -> None:
        self.stored = stored
        self.requests: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, **_options: Any) -> Json:
        self.requests.append((method, path, body))
        return self.stored if method == "GET" else {}


def keeper(stored: Json) -> tuple[KubeSource, Housekeeper, FakeClient]:
    """Quota team-a, one node, and a Housekeeper writing through a fake client."""
    client = FakeClient(stored)
    source = KubeSource(
        cast(KubeClient, object()), MusterArgs(), clock=lambda: 0.0, record_keys=record_keys
    )
    source._quota_handler("scheduling.x-k8s.io")("ADDED", quota("team-a", max={GPU: "16"}))
    source._on_node("ADDED", node("n0"))
    writer = ClusterWriter(cast(KubeClient, client), record_keys=record_keys)
    return source, Housekeeper(source, writer), client


def patches(client: FakeClient) -> list[tuple[str, Any]]:
    return [(path, body) for method, path, body in client.requests if method == "PATCH"]


def test_used_and_non_preemptible_used_go_to_the_status_subresource_only() -> None:
    source, housekeeper, client = keeper({"metadata": {"name": "team-a"}})
    source._on_pod("ADDED", pod("np", gpu=2, node="n0", preemptible=False))
    source._on_pod("ADDED", pod("p", gpu=4, node="n0", preemptible=True))
    assert housekeeper.write_quota_status() == 1
    assert patches(client) == [
        (
            f"{PATH}/status",
            {
                "status": {
                    "used": {GPU: "6", "pods": "2"},
                    "nonPreemptibleUsed": {GPU: "2", "pods": "1"},
                }
            },
        )
    ]
    # Unchanged usage is not written again; nothing ever patches the quota object itself.
    assert housekeeper.write_quota_status() == 0
    assert [path for path, _ in patches(client)] == [f"{PATH}/status"]


def test_a_resource_no_longer_used_is_removed_from_the_status() -> None:
    """A merge patch keeps keys it does not name: the leader names a resource it wrote (or
    found there when it started) and no longer reports, with null."""
    stored = {"status": {"used": {GPU: "8", "cpu": "1"}, "nonPreemptibleUsed": {GPU: "8"}}}
    source, housekeeper, client = keeper(stored)
    source._on_pod("ADDED", pod("p", gpu=4, node="n0", preemptible=True))
    housekeeper.write_quota_status()
    assert patches(client)[-1][1] == {
        "status": {"used": {GPU: "4", "cpu": None, "pods": "1"}, "nonPreemptibleUsed": {GPU: None}}
    }
    # The stored status is read once, when the leader first writes a quota.
    source._on_pod("DELETED", pod("p", gpu=4, node="n0", preemptible=True))
    housekeeper.write_quota_status()
    assert patches(client)[-1][1] == {
        "status": {"used": {GPU: None, "pods": None}, "nonPreemptibleUsed": {}}
    }
    assert [method for method, _, _ in client.requests].count("GET") == 1


def test_a_pod_relabelled_after_admission_is_recorded_as_staying_preemptible() -> None:
    # A running pod admitted preemptible, whose owner relabels it preemptible: "false",
    # stays preemptible (tests/unit/test_trust_boundary.py).  The leader records that on
    # the pod, once, as a condition in its status (which tenants cannot write); a Muster
    # started afresh (a restart, another replica) reads the pod preemptible from it, as
    # its label alone would not say.
    source, housekeeper, client = keeper({})
    source._on_pod("ADDED", pod("p", gpu=4, node="n0", preemptible=True))
    assert housekeeper.record_kept_preemptible() == 0  # its label says so: nothing to record
    relabelled = pod("p", gpu=4, node="n0", preemptible=False)
    source._on_pod("MODIFIED", relabelled)
    assert housekeeper.record_kept_preemptible() == 1
    ((path, body),) = patches(client)
    assert path == "/api/v1/namespaces/team-a/pods/p/status"
    (condition,) = body["status"]["conditions"]
    assert (condition["type"], condition["status"]) == ("muster.dev/AdmittedPreemptible", "True")
    assert housekeeper.record_kept_preemptible() == 0  # once
    assert len(patches(client)) == 1
    # A fresh Muster sees the pod as it now is: labelled "false", with the condition.
    relabelled["status"]["conditions"] = [condition]
    fresh, _, _ = keeper({})
    fresh._on_pod("ADDED", relabelled)
    with fresh.exclusive() as state:
        assert state.preemptible(state.pods["team-a/p"])
    # Without it, it would take the label at its word.
    relabelled["status"]["conditions"] = []
    bare, _, _ = keeper({})
    bare._on_pod("ADDED", relabelled)
    with bare.exclusive() as state:
        assert not state.preemptible(state.pods["team-a/p"])


def test_a_pod_relabelled_before_it_is_counted_is_not_recorded() -> None:
    # Pending and unreserved, a pod is admitted as its label says when it is admitted: a
    # relabel then is its owner's choice, checked against min like any (nothing to keep).
    source, housekeeper, client = keeper({})
    source._on_pod("ADDED", pod("p", gpu=4, preemptible=True))
    source._on_pod("MODIFIED", pod("p", gpu=4, preemptible=False))
    assert housekeeper.record_kept_preemptible() == 0
    assert patches(client) == []


def test_a_drained_pod_whose_owner_takes_its_mark_off_is_marked_again() -> None:
    # A HoldAndDrain quota's running pod is marked; its owner takes the mark off (Muster's
    # DisruptionTarget stays: pod status).  It is marked again, once per time it is taken
    # off (not again while the informer has not shown the new mark).
    client = FakeClient({})
    source = KubeSource(
        cast(KubeClient, object()), MusterArgs(), clock=lambda: 0.0, record_keys=record_keys
    )
    stopped = quota(
        "team-a", max={GPU: "16"}, annotations={keys.STOP_POLICY_ANNOTATION: "HoldAndDrain"}
    )
    source._quota_handler("scheduling.x-k8s.io")("ADDED", stopped)
    source._on_node("ADDED", node("n0"))
    running = pod("w", gpu=8, node="n0", preemptible=True)
    running["metadata"]["resourceVersion"] = "1"
    source._on_pod("ADDED", running)
    housekeeper = Housekeeper(
        source, ClusterWriter(cast(KubeClient, client), record_keys=record_keys)
    )

    def marks() -> int:
        return sum(
            1
            for method, path, body in client.requests
            if method == "PATCH"
            and keys.SOFT_EVICTION_KEY in (body.get("metadata", {}).get("labels") or {})
        )

    assert housekeeper.drain_stopped_quotas() == 1
    assert housekeeper.drain_stopped_quotas() == 0  # the informer has not shown it yet
    assert marks() == 1
    stripped = pod("w", gpu=8, node="n0", preemptible=True)
    stripped["metadata"]["resourceVersion"] = "3"
    stripped["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "muster: drained: quota team-a has stop-policy HoldAndDrain",
        }
    ]
    source._on_pod("MODIFIED", stripped)
    with source.exclusive() as state:
        assert not state.pods["team-a/w"].departing
    assert housekeeper.drain_stopped_quotas() == 1
    assert marks() == 2
