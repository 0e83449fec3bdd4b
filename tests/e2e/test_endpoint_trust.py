"""Muster's endpoints refuse what kube-scheduler would not send (issue 32), on the real
control plane: Muster watching it (``serve --kubeconfig``, without
``--enable-debug-endpoints``) as kube-scheduler's extender with the bind verb.

Anyone who reaches Muster's port can call it.  A ``/bind`` for a pod the informer does not
know, or to a node other than the one reserved for the pod, is refused, while
kube-scheduler's own binds go through; a ``/filter`` for a pod nobody created holds nothing
that could turn a real pod away; ``/debug`` is not served.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import Cluster, make_pod
from muster_process import MusterProcess
from test_muster_extender import GPU, create_quota

import localcluster as lc

pytestmark = pytest.mark.e2e

NON_PREEMPTIBLE = {"quota.scheduling.koordinator.sh/preemptible": "false"}
MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"


@pytest.fixture
def muster(control_plane: lc.ControlPlane, tmp_path: Path) -> Iterator[MusterProcess]:
    """A live Muster as a default install runs it: no /debug; kube-scheduler binds
    through it."""
    process = MusterProcess(tmp_path, kubeconfig=control_plane.kubeconfig, debug_endpoints=False)
    try:
        with control_plane.using_extender(lc.ExtenderConfig(process.url, bind=True)):
            yield process
    finally:
        process.stop()


def bind(muster: MusterProcess, namespace: str, name: str, uid: str, node: str) -> str:
    """POST /bind as a caller who is not kube-scheduler; the answer's ``Error``."""
    body = {"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node}
    response = httpx.post(f"{muster.url}/bind", json=body, timeout=10)
    assert response.status_code == 200, response.text
    error: str = response.json()["Error"]
    return error


def wait_quota_known(muster: MusterProcess, quota: str) -> None:
    lc.wait_until(
        lambda: muster.metric("muster_quota_max", quota=quota, resource=GPU) or None,
        timeout=30,
        what=f"Muster to see quota {quota}",
    )


def test_debug_is_not_served_without_the_flag(cluster: Cluster, muster: MusterProcess) -> None:
    for path in ("/debug/quotas", "/debug/jobs", f"/debug/pods/{cluster.namespace}/any"):
        response = httpx.get(f"{muster.url}{path}", timeout=10)
        assert response.status_code == 404, path
        assert "--enable-debug-endpoints" in response.json()["error"]
    assert httpx.get(f"{muster.url}/readyz", timeout=10).status_code == 200


def test_a_bind_for_an_unknown_pod_or_off_its_reserved_node_is_refused(
    cluster: Cluster, muster: MusterProcess
) -> None:
    nodes = [cluster.create_node(name, {"cpu": "16", "memory": "64Gi", GPU: 8}) for name in "abc"]
    team = cluster.namespace
    create_quota(cluster, team, team, {"min": {GPU: "16"}, "max": {GPU: "16"}})
    wait_quota_known(muster, team)
    # An unknown pod (never created): refused, and nothing is created.
    error = bind(muster, team, "ghost", str(uuid.uuid4()), nodes[0])
    assert error == (
        f"muster: refused to bind pod {team}/ghost to node {nodes[0]}: "
        "Muster's informer knows no such pod"
    )
    assert cluster.get_pod("ghost") is None
    # A gang of two (8 GPUs each, one per node): g-1 is gated, so once kube-scheduler
    # filters g-0 the gang is placed whole and g-1's room stays reserved while g-0 binds.
    labels = {**NON_PREEMPTIBLE, "pod-group.scheduling.sigs.k8s.io": "g"}
    gang: dict[str, Any] = {
        "requests": {GPU: 8},
        "labels": labels,
        "annotations": {MIN_AVAILABLE: "2"},
    }
    g1 = cluster.create_pod("g-1", scheduling_gates=["wait"], **gang)
    # Muster has seen g-1 (its job waits, with nothing reserved or held for it yet).
    lc.wait_until(
        lambda: muster.metric("muster_jobs_waiting", quota=team) == 1 or None,
        timeout=30,
        what="Muster to see g-1",
    )
    cluster.create_pod("g-0", **gang)
    g0_node = cluster.wait_running("g-0")["spec"]["nodeName"]  # bound through Muster's /bind
    uid = g1["metadata"]["uid"]
    refused = muster.metric("muster_decisions_total", verb="bind", outcome="refused")
    # g-1 bound by someone else onto g-0's node (full), with a wrong UID, then its real one:
    # refused, each naming why.
    error = bind(muster, team, "g-1", "not-its-uid", g0_node)
    assert error.endswith("PodUID 'not-its-uid' is not the pod's UID"), error
    error = bind(muster, team, "g-1", uid, g0_node)
    prefix = f"muster: refused to bind pod {team}/g-1 to node {g0_node}: room for it (job "
    assert error.startswith(prefix), error
    reserved = error.rsplit(" ", 1)[-1]  # "... is reserved on node <name>"
    assert reserved in nodes and reserved != g0_node
    # ... and onto the third node, free and fitting: refused too (its room is elsewhere).
    (free,) = set(nodes) - {g0_node, reserved}
    error = bind(muster, team, "g-1", uid, free)
    assert error.endswith(f"room for it (job {team}/g) is reserved on node {reserved}"), error
    assert (cluster.get_pod("g-1") or {})["spec"].get("nodeName") is None
    assert muster.metric("muster_decisions_total", verb="bind", outcome="refused") == refused + 3
    # Released, g-1 is bound by kube-scheduler through Muster, on its reserved node.
    cluster.rest.request(
        "PATCH",
        cluster.pods_path("g-1"),
        {"spec": {"schedulingGates": None}},
        content_type="application/merge-patch+json",
    )
    assert cluster.wait_running("g-1")["spec"]["nodeName"] == reserved
    assert muster.metric("muster_decisions_total", verb="bind", outcome="bound") == 2


def test_a_phantom_filter_does_not_block_a_real_pod(
    cluster: Cluster, muster: MusterProcess
) -> None:
    (node,) = [cluster.create_node("a", {"cpu": "16", "memory": "64Gi", GPU: 8})]
    team = cluster.namespace
    create_quota(cluster, team, team, {"min": {GPU: "8"}, "max": {GPU: "8"}})
    wait_quota_known(muster, team)
    # A pod nobody created, asking for the quota's whole 8 GPUs, sent to /filter as
    # kube-scheduler would send it: answered as any pod is (8 <= max 8: admitted).
    phantom = make_pod("phantom", requests={GPU: 8}, labels=NON_PREEMPTIBLE)
    phantom["metadata"] |= {"namespace": team, "uid": str(uuid.uuid4()), "resourceVersion": "1"}
    response = httpx.post(
        f"{muster.url}/filter", json={"Pod": phantom, "NodeNames": [node]}, timeout=10
    )
    assert response.status_code == 200, response.text
    assert response.json()["NodeNames"] == [node]
    # Had Muster held the phantom's 8 GPUs (for quotaHoldSeconds, 60 s), the real pod
    # (8 + 8 > max 8) would be turned away and parked past this 30 s deadline.
    cluster.create_pod("real", requests={GPU: 8}, labels=NON_PREEMPTIBLE)
    assert cluster.wait_running("real", timeout=30)["spec"]["nodeName"] == node
    # The phantom is not bound either: the filter call left nothing for /bind.
    error = bind(muster, team, "phantom", phantom["metadata"]["uid"], node)
    assert error.endswith("Muster's informer knows no such pod"), error
