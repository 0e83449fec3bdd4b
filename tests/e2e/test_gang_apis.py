"""Gangs declared through the ecosystem's APIs, through a stock kube-scheduler (issue 26).

Pods created one after another while kube-scheduler runs, as the frameworks that write
these objects create them.  Other gang keys (Volcano's annotation, Kueue's pod-group
label) are played in ``test_jobs.py``'s undeclared-size Job story.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import localcluster as lc
import pytest
from e2e_support import Cluster, condition
from muster_process import MusterProcess
from test_muster_extender import GPU, QUOTA_API
from test_preemption_story import (  # noqa: F401 (fixtures)
    SOFT_EVICTION,
    TRAINER,
    Teams,
    fill_with_borrowers,
    muster_and_evictor,
    tokens,
)

PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups"
SPARK_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # what the Spark operator writes


def refused_with(pod: dict[str, Any] | None, text: str) -> bool:
    """kube-scheduler marked the pod unschedulable with a reason containing ``text``."""
    cond = condition(pod or {}, "PodScheduled") or {}
    return cond.get("status") == "False" and text in cond.get("message", "")


def set_quota(cluster: Cluster, namespace: str, gpus: int) -> None:
    cluster.rest.request(
        "PATCH",
        f"{QUOTA_API}/namespaces/{namespace}/elasticquotas/{namespace}",
        {"spec": {"min": {GPU: str(gpus)}, "max": {GPU: str(gpus)}}},
        content_type="application/merge-patch+json",
    )


def test_a_spark_style_pod_group_is_admitted_for_its_min_resources_and_keeps_them(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """The Spark operator's shape: a PodGroup with ``minMember: 1`` and the application's
    24 GPUs in ``minResources``; a driver (no GPU) first; its three 8-GPU executors later,
    one by one.  Four 8-GPU nodes; team B borrows three of them (three preemptible 8-GPU
    pods; B has min 0); team A's quota is min = max = 16 GPUs.

    Derived from the rule (README "Gangs declared by minResources": the job is charged
    max(used, minResources) from its first admitted pod):
    1. the driver asks for 0 GPUs but its job for 24: 0 + 24 > max 16, refused by quota;
    2. A's quota raised to 24: 24 ≤ 24, the driver binds (Muster nudges it), and A is
       charged 24 while its pods use none;
    3. another 8-GPU job of team A is refused: 24 + 8 > 24;
    4. each executor is covered by the hold and admitted; one fits the free node, the
       other two need room: A is within its min (24 ≤ 24), so it reclaims from borrower B,
       two of B's pods are marked, and all three executors run; the other job still
       waits, and A is charged 24 throughout."""
    for i in range(4):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "16"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    try:
        fill_with_borrowers(teams, 3)
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "spark", "namespace": teams.a},
            "spec": {"minMember": 1, "minResources": {GPU: "24", "cpu": "4"}},
        }
        cluster.rest.request("POST", PODGROUPS.format(namespace=teams.a), group)
        spark = {**TRAINER, SPARK_GROUP_LABEL: "spark"}
        teams.create(teams.a, "driver", requests={"cpu": "1"}, labels=spark)
        lc.wait_until(
            lambda: refused_with(teams.get(teams.a, "driver"), "would exceed max 16"),
            timeout=30,
            what="the driver refused for its job's 24 GPUs",
        )
        assert not (teams.get(teams.a, "driver") or {})["spec"].get("nodeName")

        set_quota(cluster, teams.a, 24)
        teams.wait(teams.a, "driver", "Running")
        quota = muster_and_evictor.debug("quotas").get(teams.a) or {}
        assert quota.get("used", {}).get(GPU) == "24", quota

        teams.create(teams.a, "other", requests={"cpu": "1", GPU: 8}, labels=TRAINER)
        lc.wait_until(
            lambda: refused_with(teams.get(teams.a, "other"), "would exceed"),
            timeout=30,
            what="team A's other job refused: the driver's hold is the room",
        )
        for i in range(3):
            teams.create(teams.a, f"exec-{i}", requests={"cpu": "1", GPU: 8}, labels=spark)
            teams.wait(teams.a, f"exec-{i}", "Running", timeout=90)
        nodes = {(teams.get(teams.a, f"exec-{i}") or {})["spec"]["nodeName"] for i in range(3)}
        assert len(nodes) == 3, nodes
        pods = cluster.rest.request("GET", f"/api/v1/namespaces/{teams.b}/pods")["items"]
        marked = [p for p in pods if SOFT_EVICTION in (p["metadata"].get("labels") or {})]
        gone = 3 - len([p for p in pods if p["metadata"]["name"].startswith("b-")])
        assert len(marked) + gone == 2, [p["metadata"]["name"] for p in pods]
        other = teams.get(teams.a, "other") or {}
        assert not other["spec"].get("nodeName"), other["spec"]
        quota = muster_and_evictor.debug("quotas").get(teams.a) or {}
        assert quota.get("used", {}).get(GPU) == "24", quota
    finally:
        teams.cleanup()


VOLCANO_PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups"


def volcano_gang(cluster: Cluster, namespace: str) -> dict[str, dict[str, str]]:
    """A Volcano PodGroup declaring three workers (``minMember: 1`` but ``minTaskMember``
    worker: 3, so the gang is the larger, 3), its pods naming it by annotation."""
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "vc", "namespace": namespace},
        "spec": {"minMember": 1, "minTaskMember": {"worker": 3}},
    }
    cluster.rest.request("POST", VOLCANO_PODGROUPS.format(namespace=namespace), group)
    return {"labels": {}, "annotations": {"scheduling.k8s.io/group-name": "vc"}}


def kueue_gang(cluster: Cluster, namespace: str) -> dict[str, dict[str, str]]:
    """Kueue's plain-pod group: its name in a label, its size in an annotation."""
    return {
        "labels": {"kueue.x-k8s.io/pod-group-name": "kq"},
        "annotations": {"kueue.x-k8s.io/pod-group-total-count": "3"},
    }


@pytest.mark.parametrize("declare", [volcano_gang, kueue_gang], ids=["volcano", "kueue"])
def test_a_gang_declared_by_another_api_waits_for_its_size_then_preempts_whole(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
    declare: Callable[[Cluster, str], dict[str, dict[str, str]]],
) -> None:
    """A gang of three 8-GPU pods declared only through Volcano's PodGroup (or only
    Kueue's pod-group keys), its pods created one by one; four 8-GPU nodes, team B
    borrowing three (min 0), team A min = max = 24.

    Derived from the rules: the gang's size is declared (3), so its first pod waits for
    the other two rather than binding alone ("waiting for 2 more pods"); once all three
    exist, the job (24 ≤ min 24) reclaims from borrower B for the whole gang: one node is
    free, so exactly two of B's pods are the victims, and all three pods run, one per
    node."""
    for i in range(4):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "24"}, "max": {GPU: "24"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    try:
        fill_with_borrowers(teams, 3)
        keys = declare(cluster, teams.a)
        member = {
            "requests": {"cpu": "1", GPU: 8},
            "labels": {**TRAINER, **keys["labels"]},
            "annotations": keys["annotations"],
        }
        teams.create(teams.a, "w-0", **member)
        lc.wait_until(
            lambda: refused_with(teams.get(teams.a, "w-0"), "waiting for 2 more pods"),
            timeout=30,
            what="the first pod waiting for its gang",
        )
        assert not (teams.get(teams.a, "w-0") or {})["spec"].get("nodeName")
        for i in (1, 2):
            teams.create(teams.a, f"w-{i}", **member)
        for i in range(3):
            teams.wait(teams.a, f"w-{i}", "Running", timeout=90)
        nodes = {(teams.get(teams.a, f"w-{i}") or {})["spec"]["nodeName"] for i in range(3)}
        assert len(nodes) == 3, nodes
        pods = cluster.rest.request("GET", f"/api/v1/namespaces/{teams.b}/pods")["items"]
        marked = [p for p in pods if SOFT_EVICTION in (p["metadata"].get("labels") or {})]
        assert len(marked) + 3 - len(pods) == 2, [p["metadata"]["name"] for p in pods]
    finally:
        teams.cleanup()
