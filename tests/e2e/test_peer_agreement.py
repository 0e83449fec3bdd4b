"""Where Muster decides otherwise than scheduler-plugins (issue 25, item 4), shown live: each
case is played on scheduler-plugins' own scheduler (CapacityScheduling + Coscheduling, its
documented configuration) and on a stock kube-scheduler with Muster, from the same objects,
and each side's outcome is asserted.  The README's "Muster decides otherwise, and why"
lists these cases.  Not part of ``make test`` (the peer takes minutes to build):
``make test-peers``.

Expectations: Muster's from docs/design.md; scheduler-plugins' from its v0.34.7 source
(CapacityScheduling's PostFilter preempts for one pod whose quota stays within ``min``,
taking pods of quotas above theirs; Coscheduling holds a group's pods at Permit and
rejects them all when the group cannot be completed in time; an ElasticQuota's ``max``
lacking a resource is read as 0 of it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_muster_extender import create_quota
from test_peers import peer_plane  # noqa: F401  (the fixture)
from test_preemption_story import (  # noqa: F401  (muster_and_evictor, tokens: the fixtures)
    SOFT_EVICTION,
    Teams,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.peers

GPU = "nvidia.com/gpu"
NODE = {"cpu": "32", "memory": "128Gi", GPU: 8}
QUOTA_API = "/apis/scheduling.x-k8s.io/v1alpha1"
#: Every pod may be preempted and may preempt, as in the head-to-head: the peers decide by
#: priority and quota alone.
LABELS = {
    "quota.scheduling.koordinator.sh/preemptible": "true",
    "quota.scheduling.koordinator.sh/can-preempt": "true",
}
_SERIAL = itertools.count(1)


@pytest.fixture
def peer_cluster(peer_plane: lc.ControlPlane) -> Iterator[Cluster]:  # noqa: F811
    """A namespace of its own on scheduler-plugins' plane, its pods, quotas and nodes
    removed after."""
    helper = Cluster(peer_plane, f"agree-{next(_SERIAL)}")
    peer_plane.create_namespace(helper.namespace)
    try:
        yield helper
    finally:
        helper.cleanup()


@pytest.fixture
def muster_cluster(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> Iterator[tuple[Cluster, MusterProcess]]:
    yield cluster, muster_and_evictor


# ---- case 1: a gang that can never run whole


def _gang_that_never_fits(cluster: Cluster) -> tuple[Teams, list[str], list[str]]:
    """Three 8-GPU nodes, all borrowed by team B (min 0) with three low-priority 8-GPU
    pods; then team A (min and max 32 GPUs) submits a PodGroup of four high-priority
    8-GPU pods: 32 GPUs, more than the cluster has. Returns the teams and the pods."""
    room = {"cpu": "96", "memory": "384Gi"}
    teams = Teams(
        cluster,
        {"min": {GPU: "32", **room}, "max": {GPU: "32", **room}},
        {"min": {GPU: "0", "cpu": "0", "memory": "0"}, "max": {GPU: "24", **room}},
    )
    for i in range(3):
        cluster.create_node(f"n{i}", NODE)
    low, high = _priority_class(cluster, teams.b, 0), _priority_class(cluster, teams.a, 1000)
    borrowers = [f"b-{i}" for i in range(3)]
    for name in borrowers:
        teams.create(
            teams.b, name, requests={"cpu": "1", GPU: 8}, labels=LABELS, priority_class=low
        )
        teams.wait(teams.b, name, "Running")
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": teams.a},
        "spec": {"minMember": 4},
    }
    cluster.rest.request("POST", f"{QUOTA_API}/namespaces/{teams.a}/podgroups", group)
    trainers = [f"train-{i}" for i in range(4)]
    labels = {**LABELS, "scheduling.x-k8s.io/pod-group": "train"}
    for name in trainers:
        teams.create(
            teams.a, name, requests={"cpu": "1", GPU: 8}, labels=labels, priority_class=high
        )
    return teams, borrowers, trainers


def _none_bound(teams: Teams, trainers: list[str]) -> bool:
    return not any((teams.get(teams.a, n) or {}).get("spec", {}).get("nodeName") for n in trainers)


def test_scheduler_plugins_evicts_for_a_gang_that_can_never_run_whole(
    peer_cluster: Cluster,
) -> None:
    """CapacityScheduling preempts for each pod of the gang on its own (team A is within
    its min, B above its own), so borrowers are deleted; Coscheduling then holds the pods
    that fit at Permit and never binds them, since the fourth never fits."""
    teams, borrowers, trainers = _gang_that_never_fits(peer_cluster)
    try:
        lc.wait_until(
            lambda: any(teams.get(teams.b, n) is None for n in borrowers) or None,
            timeout=90,
            what="a borrower preempted by scheduler-plugins",
        )
        assert _none_bound(teams, trainers)
    finally:
        teams.cleanup()


def test_muster_evicts_nothing_for_a_gang_that_can_never_run_whole(
    muster_cluster: tuple[Cluster, MusterProcess],
) -> None:
    """docs/design.md, job-level preemption: evict only when the *whole* job then fits; four
    8-GPU pods never fit on three 8-GPU nodes, so the PostFilter refuses and no borrower
    is marked or removed."""
    cluster, muster = muster_cluster
    teams, borrowers, trainers = _gang_that_never_fits(cluster)
    try:
        lc.wait_until(
            lambda: (
                any(
                    d["verb"] == "postfilter"
                    for d in muster.debug(f"pods/{teams.a}/{trainers[0]}").get("decisions", [])
                )
                or None
            ),
            timeout=60,
            what="Muster's PostFilter decision on the gang",
        )
        for name in borrowers:
            pod = teams.get(teams.b, name)
            assert pod is not None and pod["status"]["phase"] == "Running", name
            assert SOFT_EVICTION not in pod["metadata"].get("labels", {}), name
        assert _none_bound(teams, trainers)
    finally:
        teams.cleanup()


# ---- case 2: a resource the quota's max does not name


def _pod_asking_what_max_does_not_name(cluster: Cluster) -> str:
    """One 8-GPU node; a quota naming only GPUs (min and max 16); a pod asking 1 CPU and
    8 GPUs. Returns the pod's name (in the cluster's namespace)."""
    create_quota(cluster, "q", cluster.namespace, {"min": {GPU: "16"}, "max": {GPU: "16"}})
    cluster.create_node("n0", NODE)
    low = _priority_class(cluster, cluster.namespace, 0)
    cluster.create_pod("p", requests={"cpu": "1", GPU: 8}, labels=LABELS, priority_class=low)
    return "p"


def test_scheduler_plugins_refuses_a_resource_absent_from_max(peer_cluster: Cluster) -> None:
    """CapacityScheduling reads the CPU absent from ``max`` as a max of 0: the pod stays
    pending with the node free."""
    name = _pod_asking_what_max_does_not_name(peer_cluster)
    pod = peer_cluster.wait_unschedulable(name, timeout=60)
    assert not pod["spec"].get("nodeName")


def test_muster_does_not_limit_a_resource_absent_from_max(
    muster_cluster: tuple[Cluster, MusterProcess],
) -> None:
    """docs/design.md, quota semantics: a resource absent from ``max`` is not limited by that
    quota; the pod binds."""
    cluster, _ = muster_cluster
    name = _pod_asking_what_max_does_not_name(cluster)
    lc.wait_until(
        lambda: (cluster.get_pod(name) or {}).get("spec", {}).get("nodeName") or None,
        timeout=60,
        what="the pod bound",
    )
