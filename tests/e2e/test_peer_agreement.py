"""Where Muster decides otherwise than scheduler-plugins (issue 25, item 4), shown live: each
case is played on scheduler-plugins' own scheduler (CapacityScheduling + Coscheduling, its
documented configuration) and on a stock kube-scheduler with Muster, from the same objects,
and each side's outcome is asserted.  The README's "Muster decides otherwise, and why"
lists these cases.  Not part of ``make test`` (the peer takes minutes to build):
``make test-peers``.

Expectations: Muster's from DESIGN.md; scheduler-plugins' from its v0.34.7 source
(CapacityScheduling's PostFilter preempts for one pod whose quota stays within ``min``,
taking pods of quotas above theirs; Coscheduling holds a group's pods at Permit and
rejects them all when the group cannot be completed in time; an ElasticQuota's ``max``
lacking a resource is read as 0 of it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import localcluster as lc
import pytest
from e2e_support import Cluster, delete_namespaced, make_pod
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_peers import peer_plane  # noqa: F401  (the fixture)
from test_preemption_story import muster_and_evictor, tokens  # noqa: F401  (the fixtures)

pytestmark = pytest.mark.peers

GPU = "nvidia.com/gpu"
NODE = {"cpu": "32", "memory": "128Gi", GPU: 8}
QUOTA_API = "/apis/scheduling.x-k8s.io/v1alpha1"
SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"
#: Every pod may be preempted and may preempt, as in the head-to-head: the peers decide by
#: priority and quota alone.
LABELS = {
    "quota.scheduling.koordinator.sh/preemptible": "true",
    "quota.scheduling.koordinator.sh/can-preempt": "true",
}
_SERIAL = itertools.count(1)


@pytest.fixture
def peer_cluster(peer_plane: lc.ControlPlane) -> Iterator[Cluster]:  # noqa: F811
    yield from _cluster(peer_plane, f"agree-{next(_SERIAL)}")


@pytest.fixture
def muster_cluster(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> Iterator[tuple[Cluster, MusterProcess]]:
    yield cluster, muster_and_evictor


def _cluster(plane: lc.ControlPlane, namespace: str) -> Iterator[Cluster]:
    helper = Cluster(plane, namespace)
    plane.create_namespace(namespace)
    try:
        yield helper
    finally:
        helper.cleanup()


def _quota(cluster: Cluster, namespace: str, min_: dict[str, str], max_: dict[str, str]) -> None:
    body = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": namespace, "namespace": namespace},
        "spec": {"min": min_, "max": max_},
    }
    cluster.rest.request("POST", f"{QUOTA_API}/namespaces/{namespace}/elasticquotas", body)


def _pod(cluster: Cluster, namespace: str, body: dict[str, Any]) -> None:
    cluster.rest.request("POST", f"/api/v1/namespaces/{namespace}/pods", body)


def _get(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return cluster.rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    except lc.ApiError as error:
        if error.status == 404:
            return None
        raise


# ---- case 1: a gang that can never run whole


def _gang_that_never_fits(cluster: Cluster) -> tuple[str, str, list[str], list[str]]:
    """Three 8-GPU nodes, all borrowed by team B (min 0) with three low-priority 8-GPU
    pods; then team A (min and max 32 GPUs) submits a PodGroup of four high-priority
    8-GPU pods: 32 GPUs, more than the cluster has. Returns the namespaces and pods."""
    a, b = f"{cluster.namespace}-a", f"{cluster.namespace}-b"
    room = {"cpu": "96", "memory": "384Gi"}
    for namespace in (a, b):
        cluster.plane.create_namespace(namespace)
    _quota(cluster, a, {GPU: "32", **room}, {GPU: "32", **room})
    _quota(cluster, b, {GPU: "0", "cpu": "0", "memory": "0"}, {GPU: "24", **room})
    for i in range(3):
        cluster.create_node(f"n{i}", NODE)
    low, high = _priority_class(cluster, b, 0), _priority_class(cluster, a, 1000)
    borrowers = [f"b-{i}" for i in range(3)]
    for name in borrowers:
        body = make_pod(name, requests={"cpu": "1", GPU: 8}, labels=LABELS, priority_class=low)
        _pod(cluster, b, body)
        lc.wait_until(
            lambda name=name: (
                (_get(cluster, b, name) or {}).get("status", {}).get("phase") == "Running" or None
            ),
            timeout=60,
            what=f"{name} running",
        )
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": a},
        "spec": {"minMember": 4},
    }
    cluster.rest.request("POST", f"{QUOTA_API}/namespaces/{a}/podgroups", group)
    trainers = [f"train-{i}" for i in range(4)]
    for name in trainers:
        labels = {**LABELS, "scheduling.x-k8s.io/pod-group": "train"}
        body = make_pod(name, requests={"cpu": "1", GPU: 8}, labels=labels, priority_class=high)
        _pod(cluster, a, body)
    return a, b, borrowers, trainers


def _cleanup(cluster: Cluster, *namespaces: str) -> None:
    for namespace in namespaces:
        delete_namespaced(cluster.rest, namespace)


def test_scheduler_plugins_evicts_for_a_gang_that_can_never_run_whole(
    peer_cluster: Cluster,
) -> None:
    """CapacityScheduling preempts for each pod of the gang on its own (team A is within
    its min, B above its own), so borrowers are deleted; Coscheduling then holds the pods
    that fit at Permit and never binds them, since the fourth never fits."""
    cluster = peer_cluster
    a, b, borrowers, trainers = _gang_that_never_fits(cluster)
    try:
        lc.wait_until(
            lambda: any(_get(cluster, b, n) is None for n in borrowers) or None,
            timeout=90,
            what="a borrower preempted by scheduler-plugins",
        )
        assert not any(
            (_get(cluster, a, n) or {}).get("spec", {}).get("nodeName") for n in trainers
        )
    finally:
        _cleanup(cluster, a, b)


def test_muster_evicts_nothing_for_a_gang_that_can_never_run_whole(
    muster_cluster: tuple[Cluster, MusterProcess],
) -> None:
    """DESIGN.md, job-level preemption: evict only when the *whole* job then fits; four
    8-GPU pods never fit on three 8-GPU nodes, so the PostFilter refuses and no borrower
    is marked or removed."""
    cluster, muster = muster_cluster
    a, b, borrowers, trainers = _gang_that_never_fits(cluster)
    try:
        lc.wait_until(
            lambda: (
                any(
                    d["verb"] == "postfilter"
                    for d in muster.debug(f"pods/{a}/{trainers[0]}").get("decisions", [])
                )
                or None
            ),
            timeout=60,
            what="Muster's PostFilter decision on the gang",
        )
        for name in borrowers:
            pod = _get(cluster, b, name)
            assert pod is not None and pod["status"]["phase"] == "Running", name
            assert SOFT_EVICTION not in pod["metadata"].get("labels", {}), name
        assert not any(
            (_get(cluster, a, n) or {}).get("spec", {}).get("nodeName") for n in trainers
        )
    finally:
        _cleanup(cluster, a, b)


# ---- case 2: a resource the quota's max does not name


def _pod_asking_what_max_does_not_name(cluster: Cluster) -> tuple[str, str]:
    """One 8-GPU node; a quota naming only GPUs (min and max 16); a pod asking 1 CPU and
    8 GPUs."""
    namespace = f"{cluster.namespace}-q"
    cluster.plane.create_namespace(namespace)
    _quota(cluster, namespace, {GPU: "16"}, {GPU: "16"})
    cluster.create_node("n0", NODE)
    low = _priority_class(cluster, namespace, 0)
    body = make_pod("p", requests={"cpu": "1", GPU: 8}, labels=LABELS, priority_class=low)
    _pod(cluster, namespace, body)
    return namespace, "p"


def test_scheduler_plugins_refuses_a_resource_absent_from_max(peer_cluster: Cluster) -> None:
    """CapacityScheduling reads the CPU absent from ``max`` as a max of 0: the pod stays
    pending with the node free."""
    cluster = peer_cluster
    namespace, name = _pod_asking_what_max_does_not_name(cluster)
    try:

        def verdict() -> dict[str, Any] | None:
            pod = _get(cluster, namespace, name) or {}
            conditions = pod.get("status", {}).get("conditions", [])
            return pod if any(c.get("type") == "PodScheduled" for c in conditions) else None

        pod = lc.wait_until(verdict, timeout=60, what="the scheduler's verdict")
        assert not pod["spec"].get("nodeName")
    finally:
        _cleanup(cluster, namespace)


def test_muster_does_not_limit_a_resource_absent_from_max(
    muster_cluster: tuple[Cluster, MusterProcess],
) -> None:
    """DESIGN.md, quota semantics: a resource absent from ``max`` is not limited by that
    quota; the pod binds."""
    cluster, _ = muster_cluster
    namespace, name = _pod_asking_what_max_does_not_name(cluster)
    try:
        lc.wait_until(
            lambda: (_get(cluster, namespace, name) or {}).get("spec", {}).get("nodeName") or None,
            timeout=60,
            what="the pod bound",
        )
    finally:
        _cleanup(cluster, namespace)
