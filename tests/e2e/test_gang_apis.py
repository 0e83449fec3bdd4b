"""Gangs declared through the ecosystem's APIs, through a stock kube-scheduler (issue 26).

Pods created one after another while kube-scheduler runs, as the frameworks that write
these objects create them.  Other gang keys (Volcano's annotation, Kueue's pod-group
label) are played in ``test_jobs.py``'s undeclared-size Job story.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster, condition, make_pod, sample_scheduler_config
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_muster_extender import GPU, QUOTA_API
from test_preemption_story import (  # noqa: F401 (fixtures)
    SOFT_EVICTION,
    TRAINER,
    Teams,
    fill_with_borrowers,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

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


#: Kubernetes' own gang API per minor release: the API version to serve, and how a gang
#: of ``size`` named ``name`` is declared (the object) and joined (the pod's field).
NATIVE_API = {35: "v1alpha1", 36: "v1alpha2", 37: "v1beta1"}


def native_declaration(
    minor: int, name: str, size: int, priority_class: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the object, the pod ``spec`` fields) declaring a gang of ``size`` named ``name``:
    a PodGroup and ``schedulingGroup`` from 1.36 (its ``priorityClassName`` the pods': a
    group cycle refuses pods whose priority is not their group's), a Workload and
    ``workloadRef`` in 1.35 (field names from k8s.io/api v0.35.8, v0.36.3, v0.37.2)."""
    version = NATIVE_API[min(minor, 37)]
    gang = {"gang": {"minCount": size}}
    if minor <= 35:
        workload = {
            "apiVersion": f"scheduling.k8s.io/{version}",
            "kind": "Workload",
            "metadata": {"name": name},
            "spec": {"podGroups": [{"name": "workers", "policy": gang}]},
        }
        return workload, {"workloadRef": {"name": name, "podGroup": "workers"}}
    group = {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": gang, "priorityClassName": priority_class},
    }
    return group, {"schedulingGroup": {"podGroupName": name}}


def recommended_scheduler_config(url: str, minor: int) -> tuple[lc.ExtenderConfig, Any]:
    """The chart's kube-scheduler configuration for a release with ``GenericWorkload`` on:
    manifests/scheduler-config.yaml (``GangScheduling`` off), and from 1.37 also what
    ``schedulerConfig.genericWorkload: true`` adds (DefaultPreemption off at
    ``podGroupPostFilter``; tests/packaging checks the chart renders exactly this)."""
    extender, config = sample_scheduler_config(url)
    if minor >= 37:
        for profile in config["profiles"]:
            profile["plugins"]["podGroupPostFilter"] = {"disabled": [{"name": "DefaultPreemption"}]}
    return extender, config


@pytest.fixture(scope="module")
def gated_plane(
    k8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[lc.ControlPlane, int]]:
    """A control plane of its own with Kubernetes' gang API on: the ``GenericWorkload``
    gate in every component and its API version served; and the release's minor."""
    minor = lc.kubernetes_minor(k8s_bin_dir)
    version = NATIVE_API[min(minor, 37)]
    plane = lc.ControlPlane(
        bin_dir=k8s_bin_dir,
        workdir=tmp_path_factory.mktemp("k8s-generic-workload"),
        feature_gates={"GenericWorkload": True},
        runtime_config=(f"scheduling.k8s.io/{version}=true",),
    )
    try:
        plane.start()
        yield plane, minor
    finally:
        plane.stop()


def test_a_native_gang_with_the_gate_on_is_placed_and_preempted_by_muster_alone(
    gated_plane: tuple[lc.ControlPlane, int], tmp_path: Path
) -> None:
    """Kubernetes' own gang API, ``GenericWorkload`` on (kube-scheduler then schedules a
    pod group's pods in a group cycle), kube-scheduler on Muster's recommended
    configuration (manifests/scheduler-config.yaml: the in-tree ``GangScheduling`` plugin
    off; from 1.37 its group preemption too), Muster with no evictor.  A gang of three
    8-GPU pods of priority 1000 declared only by the native object (a PodGroup
    ``minCount: 3``; a Workload in 1.35), created one by one; four 8-GPU nodes, team B
    borrowing three with pods of priority 0 (so kube-scheduler's own preemption, were it
    to act, would find victims), team A min = max = 24.

    Derived from the rules and the one-authority design (README "Kubernetes' gang API"):
    the first pod waits for its two siblings; then Muster plans for the whole gang and
    marks exactly two of B's pods; nothing else evicts anything: with no evictor, every
    pod of B is still there, unmarked pods untouched, until the test deletes the marked
    two (as an evictor would); then the gang binds whole, one pod per node, and B's third
    pod still runs."""
    plane, minor = gated_plane
    kubeconfigs = plane.muster_kubeconfigs()
    namespace = "gw"
    plane.create_namespace(namespace)
    cluster = Cluster(plane, namespace)
    muster = MusterProcess(tmp_path, kubeconfig=kubeconfigs["muster"])
    extender, config = recommended_scheduler_config(muster.url, minor)
    try:
        with plane.using_extender(extender, scheduler_config=config):
            for i in range(4):
                cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
            teams = Teams(
                cluster,
                {"min": {GPU: "24"}, "max": {GPU: "24"}},
                {"min": {GPU: "0"}, "max": {GPU: "32"}},
            )
            fill_with_borrowers(teams, 3)
            high = _priority_class(cluster, teams.a, 1000)
            declaration, spec = native_declaration(minor, "ng", 3, high)
            kind = declaration["kind"].lower() + "s"
            declaration["metadata"]["namespace"] = teams.a
            plane.rest.request(
                "POST",
                f"/apis/{declaration['apiVersion']}/namespaces/{teams.a}/{kind}",
                declaration,
            )

            def create(name: str) -> None:
                pod = make_pod(
                    name, requests={"cpu": "1", GPU: 8}, labels=TRAINER, priority_class=high
                )
                pod["spec"].update(spec)
                plane.rest.request("POST", f"/api/v1/namespaces/{teams.a}/pods", pod)

            create("w-0")
            lc.wait_until(
                lambda: refused_with(teams.get(teams.a, "w-0"), "waiting for 2 more pods"),
                timeout=30,
                what="the first pod waiting for its gang",
            )
            create("w-1")
            create("w-2")

            def b_pods() -> list[dict[str, Any]]:
                items: list[dict[str, Any]] = plane.rest.request(
                    "GET", f"/api/v1/namespaces/{teams.b}/pods"
                )["items"]
                return items

            def marked() -> list[str] | None:
                labels = [
                    (p["metadata"]["name"], p["metadata"].get("labels") or {}) for p in b_pods()
                ]
                names = [name for name, keys in labels if SOFT_EVICTION in keys]
                return names if len(names) == 2 else None

            victims = lc.wait_until(marked, timeout=60, what="two of B's pods marked")
            # Nothing evicted them, or the third: every pod of B is there, none deleted.
            pods = b_pods()
            assert len(pods) == 3, [p["metadata"]["name"] for p in pods]
            assert not [p for p in pods if p["metadata"].get("deletionTimestamp")], pods
            for name in victims:
                plane.rest.request(
                    "DELETE",
                    f"/api/v1/namespaces/{teams.b}/pods/{name}",
                    query={"gracePeriodSeconds": 0},
                )
            for i in range(3):
                teams.wait(teams.a, f"w-{i}", "Running", timeout=90)
            nodes = {(teams.get(teams.a, f"w-{i}") or {})["spec"]["nodeName"] for i in range(3)}
            assert len(nodes) == 3, nodes
            (kept,) = {"b-0", "b-1", "b-2"} - set(victims)
            survivor = teams.get(teams.b, kept) or {}
            assert survivor.get("status", {}).get("phase") == "Running", survivor
            assert not survivor["metadata"].get("deletionTimestamp"), survivor["metadata"]
    finally:
        muster.stop()
