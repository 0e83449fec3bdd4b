"""scheduler-plugins' own scheduler, built and run here like kube-scheduler is (issue 25,
item 1): the peer Muster is compared with, shown to work on the local control plane
before any comparison is trusted.  Not part of ``make test`` (the peer takes minutes to
build): ``make test-peers``.

Expectations from scheduler-plugins' documented behaviour (v0.34.7): Coscheduling holds a
PodGroup's pods at Permit until ``minMember`` of them can be placed, and binds none of
them otherwise; CapacityScheduling refuses a pod that would take its ElasticQuota past
``max``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import localcluster as lc
import pytest
from e2e_support import Cluster, make_pod

pytestmark = pytest.mark.peers

GPU = "nvidia.com/gpu"
NODE = {"cpu": "32", "memory": "128Gi", GPU: 8}


@pytest.fixture(scope="module")
def peer_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lc.ControlPlane]:
    """The v1.35 control plane with scheduler-plugins' kube-scheduler in kube-scheduler's
    place, on its documented configuration."""
    plane = lc.ControlPlane(
        bin_dir=lc.ensure_binaries(version=lc.peers.SCHEDULER_PLUGINS_KUBERNETES),
        workdir=tmp_path_factory.mktemp("peer"),
        scheduler_binary=lc.ensure_peer("scheduler-plugins") / "kube-scheduler",
        scheduler_config=lc.peers.scheduler_plugins_config(),
        scheduler_rbac=lc.peers.scheduler_plugins_rbac(),
    )
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


def bound(cluster: Cluster, names: list[str]) -> dict[str, str | None]:
    return {n: (cluster.get_pod(n) or {}).get("spec", {}).get("nodeName") for n in names}


def test_coscheduling_binds_a_pod_group_whole_or_not_at_all(
    peer_plane: lc.ControlPlane, tmp_path: Path
) -> None:
    """Three 8-GPU nodes, one taken by a lone 8-GPU pod; a PodGroup of three 8-GPU pods:
    Coscheduling binds none of them (two could run).  The lone pod deleted: all three
    bind, one per node."""
    cluster = Cluster(peer_plane, "cosched")
    peer_plane.create_namespace("cosched")
    try:
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "cosched"},
            "spec": {"minMember": 3},
        }
        peer_plane.rest.request(
            "POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/cosched/podgroups", group
        )
        for i in range(3):
            cluster.create_node(f"n{i}", NODE)
        cluster.create_pod("lone", requests={"cpu": "1", GPU: 8})
        cluster.wait_running("lone", timeout=60)
        names = [f"g-{i}" for i in range(3)]
        for name in names:
            pod = make_pod(
                name, requests={"cpu": "1", GPU: 8}, labels={"scheduling.x-k8s.io/pod-group": "g"}
            )
            peer_plane.rest.request("POST", cluster.pods_path(), pod)
        lc.wait_until(
            lambda: all(
                "PodScheduled" in str((cluster.get_pod(n) or {}).get("status")) for n in names
            ),
            timeout=60,
            what="the scheduler's verdict on every pod",
        )
        assert not any(bound(cluster, names).values()), bound(cluster, names)
        cluster.delete_pod("lone", grace_seconds=0)
        lc.wait_until(
            lambda: all(bound(cluster, names).values()), timeout=120, what="all three bound"
        )
        assert len(set(bound(cluster, names).values())) == 3
    finally:
        cluster.cleanup()


def test_capacity_scheduling_stops_a_quota_at_its_max(
    peer_plane: lc.ControlPlane, tmp_path: Path
) -> None:
    """An ElasticQuota of max 16 GPUs and three free 8-GPU nodes: of three 8-GPU pods
    created one by one, two bind and the third stays pending."""
    cluster = Cluster(peer_plane, "capacity")
    peer_plane.create_namespace("capacity")
    try:
        quota = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "q", "namespace": "capacity"},
            # scheduler-plugins counts a resource absent from max as a max of 0: name cpu
            # and memory with room to spare, so GPUs alone decide.
            "spec": {
                "min": {GPU: "16", "cpu": "64", "memory": "1Ti"},
                "max": {GPU: "16", "cpu": "64", "memory": "1Ti"},
            },
        }
        peer_plane.rest.request(
            "POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/capacity/elasticquotas", quota
        )
        for i in range(3):
            cluster.create_node(f"n{i}", NODE)
        names = [f"p-{i}" for i in range(3)]
        for name in names[:2]:
            cluster.create_pod(name, requests={"cpu": "1", GPU: 8})
            cluster.wait_running(name, timeout=60)
        cluster.create_pod(names[2], requests={"cpu": "1", GPU: 8})
        cluster.wait_unschedulable(names[2], timeout=60)
        assert bound(cluster, names)[names[2]] is None
    finally:
        cluster.cleanup()
