"""Muster watching the real cluster (``serve --kubeconfig``) as kube-scheduler's extender.

Its informers see every pod of a job, so quota admission is job-level for
real: a gang over its quota's ``min`` is rejected whole, with Muster's reason
on every pod.  Muster binds through the API when kube-scheduler delegates
binding, and keeps deciding correctly across a kube-apiserver restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Cluster, condition
from muster_process import MusterProcess
from test_muster_extender import GPU, create_quota

import localcluster as lc

pytestmark = pytest.mark.e2e

NON_PREEMPTIBLE = {"quota.scheduling.koordinator.sh/preemptible": "false"}


@pytest.fixture
def live_muster(control_plane: lc.ControlPlane, tmp_path: Path) -> Iterator[MusterProcess]:
    # The leader's Lease lives in muster-system, as the chart installs it: without it no
    # replica leads, and parked pods are never nudged (the leader's work).  Made here, so
    # the test does not depend on an earlier one on the same plane having made it.
    control_plane.create_namespace("muster-system")
    process = MusterProcess(tmp_path, kubeconfig=control_plane.kubeconfig)
    try:
        with control_plane.using_extender(lc.ExtenderConfig(process.url, bind=True)):
            yield process
    finally:
        process.stop()


def in_snapshot(muster: MusterProcess, namespace: str, name: str) -> bool:
    return "job" in muster.debug(f"pods/{namespace}/{name}")


def test_gang_over_min_is_rejected_whole(cluster: Cluster, live_muster: MusterProcess) -> None:
    for name in ("a", "b", "c"):
        cluster.create_node(name, {"cpu": "16", "memory": "64Gi", GPU: 8})
    # Quota names are cluster-wide; a test's namespace makes a unique one.
    team = cluster.namespace
    create_quota(cluster, team, cluster.namespace, {"min": {GPU: "16"}, "max": {GPU: "32"}})
    labels = {**NON_PREEMPTIBLE, "pod-group.scheduling.sigs.k8s.io": "train"}
    # Muster learns of the gang's pods through its informers before they are scheduled:
    # create them unschedulable by the scheduler first (a gate), then release them.
    names = [f"train-{i}" for i in range(3)]
    for name in names:
        pod = cluster.create_pod(name, requests={GPU: 8}, labels=labels, scheduling_gates=["wait"])
        assert pod["spec"]["schedulingGates"]
    lc.wait_until(
        lambda: all(in_snapshot(live_muster, cluster.namespace, n) for n in names) or None,
        timeout=20,
        what="Muster to see the gang",
    )
    for name in names:
        cluster.rest.request(
            "PATCH",
            cluster.pods_path(name),
            {"spec": {"schedulingGates": None}},
            content_type="application/merge-patch+json",
        )
    for name in names:
        pod = cluster.wait_unschedulable(name)
        message = condition(pod, "PodScheduled")["message"]  # type: ignore[index]
        assert f"quota {team}: non-preemptible {GPU} 24 would exceed min 16" in message
    # One pod fewer fits the min: deleting one lets the other two run. kube-scheduler does
    # not retry pods an extender rejected when an unscheduled pod goes away, so touch them
    # (an update requeues a pod).
    cluster.delete_pod("train-2", grace_seconds=0)
    lc.wait_until(
        lambda: not in_snapshot(live_muster, cluster.namespace, "train-2") or None,
        timeout=20,
        what="Muster to see train-2 gone",
    )
    for name in names[:2]:
        cluster.rest.request(
            "PATCH",
            cluster.pods_path(name),
            {"metadata": {"labels": {"retry": "1"}}},
            content_type="application/merge-patch+json",
        )
    cluster.wait_running("train-0", timeout=60)
    cluster.wait_running("train-1", timeout=60)
    assert live_muster.metric("muster_decisions_total", verb="bind", outcome="bound") >= 2


def test_muster_recovers_from_an_apiserver_restart(
    cluster: Cluster, live_muster: MusterProcess, control_plane: lc.ControlPlane
) -> None:
    cluster.create_node("a", {"cpu": "16", "memory": "64Gi", GPU: 16})
    team = cluster.namespace
    create_quota(cluster, team, cluster.namespace, {"min": {GPU: "8"}, "max": {GPU: "8"}})
    cluster.create_pod("before", requests={GPU: 4}, labels=NON_PREEMPTIBLE)
    cluster.wait_running("before")
    control_plane.restart_apiserver()
    # Muster's informers reconnect by themselves and keep the quota's usage right:
    # 4 + 4 fits the min of 8, one more pod of 4 does not.
    cluster.create_pod("after", requests={GPU: 4}, labels=NON_PREEMPTIBLE)
    cluster.wait_running("after", timeout=60)
    lc.wait_until(
        lambda: live_muster.debug(f"pods/{cluster.namespace}/after").get("node") or None,
        timeout=30,
        what="Muster to see 'after' bound",
    )
    cluster.create_pod("over", requests={GPU: 4}, labels=NON_PREEMPTIBLE)
    pod = cluster.wait_unschedulable("over", timeout=60)
    assert "would exceed min 8" in condition(pod, "PodScheduled")["message"]  # type: ignore[index]
    quotas = live_muster.debug("quotas")
    assert quotas[team]["used"][GPU] == "8"
