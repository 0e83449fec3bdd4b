"""All-or-nothing gang placement through a stock kube-scheduler (issue #12).

Each story is played on the real control plane: Muster as kube-scheduler's
extender, the reference evictor, the harness playing the kubelet.  kube-scheduler
still places pods one at a time with its own queue, retries and filters; the
tests check that a gang nevertheless binds whole or not at all.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster, condition, make_pod
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import muster_with_arguments, tokens  # noqa: F401 (a fixture)

import localcluster as lc

pytestmark = pytest.mark.e2e

GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"
SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups"
GPU_NODE = {"cpu": "32", "memory": "128Gi", GPU: 8}


@pytest.fixture
def muster_gangs(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
) -> Iterator[MusterProcess]:
    """Muster with short gang timeouts and backoffs (so a test can wait them out), the
    evictor, and kube-scheduler with the harness's settings and every verb."""
    arguments = {"gangTimeoutSeconds": 4, "backoffBaseSeconds": 6}
    with muster_with_arguments(control_plane, tmp_path, tokens, arguments) as muster:
        yield muster


def gang_pod(name: str, group: str, *, gpus: int = 8, **extra: Any) -> dict[str, Any]:
    pod = make_pod(name, requests={"cpu": "1", GPU: gpus}, labels={GROUP_LABEL: group})
    pod["metadata"]["annotations"] = {MIN_AVAILABLE: str(extra.pop("min_available", 3))}
    pod["spec"].update(extra)
    return pod


def bound_nodes(cluster: Cluster, names: list[str]) -> dict[str, str | None]:
    return {name: (cluster.get_pod(name) or {}).get("spec", {}).get("nodeName") for name in names}


def rejected_for_the_gang(pod: dict[str, Any], text: str) -> bool:
    """kube-scheduler marked the pod unschedulable with Muster's gang reason."""
    cond = condition(pod, "PodScheduled")
    return bool(cond and cond["status"] == "False" and text in cond.get("message", ""))


def test_a_gang_with_room_for_two_of_three_waits_whole_then_binds_whole(
    cluster: Cluster, muster_gangs: MusterProcess
) -> None:
    """(a) Two free 8-GPU nodes, a gang of three 8-GPU pods: none binds.  A third node
    is added: all three bind, within 5 s of the node's creation."""
    cluster.create_node("n0", GPU_NODE)
    cluster.create_node("n1", GPU_NODE)
    names = [f"g-{i}" for i in range(3)]
    for name in names:
        cluster.rest.request("POST", cluster.pods_path(), gang_pod(name, "g"))
    gang = f"{cluster.namespace}/g"
    for name in names:
        # Each pod's own filter answer names the gang; the pods of a gang that cannot be
        # placed whole all wait, on no node.
        cluster.wait_pod(
            name,
            lambda p: rejected_for_the_gang(p, f"gang {gang}: 2 of 3 pods fit"),
            what="the gang's reason",
        )
    assert bound_nodes(cluster, names) == dict.fromkeys(names)
    added = time.monotonic()
    cluster.create_node("n2", GPU_NODE)
    lc.wait_until(
        lambda: all(bound_nodes(cluster, names).values()),
        timeout=5.0,
        what="all three pods bound within 5 s of the node",
    )
    took = time.monotonic() - added
    nodes = bound_nodes(cluster, names)
    assert len(set(nodes.values())) == 3, nodes  # one 8-GPU pod per 8-GPU node
    print(f"gang bound whole {took:.2f}s after the node was added")


def test_two_gangs_competing_for_room_for_one(
    cluster: Cluster, muster_gangs: MusterProcess
) -> None:
    """(b) Two free 8-GPU nodes, two gangs of two 8-GPU pods, their four pods created in
    a seeded random order: exactly one gang binds whole, the other not at all."""
    cluster.create_node("n0", GPU_NODE)
    cluster.create_node("n1", GPU_NODE)
    trials = 20
    winners = []
    for seed in range(trials):
        rng = random.Random(seed)
        pods = [(f"{gang}{seed}-{i}", f"{gang}{seed}") for gang in ("x", "y") for i in range(2)]
        rng.shuffle(pods)
        for name, group in pods:
            cluster.rest.request(
                "POST", cluster.pods_path(), gang_pod(name, group, min_available=2)
            )
        names = [name for name, _group in pods]

        def settled(names: list[str] = names) -> dict[str, str | None] | None:
            nodes = bound_nodes(cluster, names)
            bound = [name for name, node in nodes.items() if node]
            # The loser's pods are turned away by Muster ("0 of 2 pods fit") or, once the
            # winner holds both nodes, by kube-scheduler's own fit check.
            waiting = [
                name
                for name in names
                if name not in bound and rejected_for_the_gang(cluster.get_pod(name) or {}, "")
            ]
            return nodes if len(bound) == 2 and len(waiting) == 2 else None

        nodes = lc.wait_until(settled, timeout=30, what=f"trial {seed}: one gang bound")
        by_gang: dict[str, int] = {}
        for (_name, group), node in zip(pods, (nodes[n] for n in names), strict=True):
            by_gang[group] = by_gang.get(group, 0) + (1 if node else 0)
        if sorted(by_gang.values()) != [0, 2]:
            for name in names:  # what Muster decided, for the failure report
                print(json.dumps(muster_gangs.debug(f"pods/{cluster.namespace}/{name}")))
        assert sorted(by_gang.values()) == [0, 2], (seed, nodes)
        winners.append(max(by_gang, key=lambda group: by_gang[group]))
        for name in names:
            cluster.delete_pod(name, grace_seconds=0)
        for name in names:
            cluster.wait_gone(name)
    assert len(winners) == trials
    print("winners:", winners)


def test_a_node_kube_scheduler_refuses_is_repaired(
    cluster: Cluster, muster_gangs: MusterProcess
) -> None:
    """(c) Four free 8-GPU nodes; n0 already runs a pod on host port 7070, which Muster
    does not model.  A gang of three 8-GPU pods on host port 7070: kube-scheduler's own
    NodePorts filter refuses n0 to every pod of it, Muster re-plans around n0, and the
    gang binds whole on n1..n3."""
    blocked = cluster.create_node("n0", GPU_NODE)
    for name in ("n1", "n2", "n3"):
        cluster.create_node(name, GPU_NODE)
    port = {"containerPort": 7070, "hostPort": 7070}
    holder = make_pod("port-holder", requests={"cpu": "1"})
    holder["spec"]["nodeName"] = blocked
    holder["spec"]["containers"][0]["ports"] = [port]
    cluster.rest.request("POST", cluster.pods_path(), holder)
    cluster.wait_running("port-holder")
    names = [f"h-{i}" for i in range(3)]
    for name in names:
        pod = gang_pod(name, "h")
        pod["spec"]["containers"][0]["ports"] = [port]
        cluster.rest.request("POST", cluster.pods_path(), pod)
    lc.wait_until(
        lambda: all(bound_nodes(cluster, names).values()), timeout=60, what="the gang bound"
    )
    nodes = bound_nodes(cluster, names)
    assert blocked not in nodes.values(), nodes
    assert len(set(nodes.values())) == 3, nodes


def test_gang_timeout_evicts_the_bound_part_and_retries_after_backoff(
    cluster: Cluster, muster_gangs: MusterProcess
) -> None:
    """(d) A PodGroup of three (scheduleTimeoutSeconds 8) with one pod bound outside the
    scheduler and no room for the other two: after 8 s the bound pod is soft-evicted
    with reason GangTimeout (the evictor deletes it) and the gang backs off for
    backoffBaseSeconds (6 s).  Room for all three appears at once, and the pod is
    re-created, as a controller would: nothing binds before the backoff ends; then
    the whole gang binds, and the PodGroup's status says Running."""
    n0 = cluster.create_node("n0", GPU_NODE)
    groups = PODGROUPS.format(namespace=cluster.namespace)
    cluster.rest.request(
        "POST",
        groups,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "t", "namespace": cluster.namespace},
            "spec": {"minMember": 3, "scheduleTimeoutSeconds": 8},
        },
    )
    # Every version of t-0, from a watch: the evictor may delete it faster than a poll
    # would see its mark.
    marks: list[dict[str, Any]] = []

    def keep_mark(_kind: str, obj: dict[str, Any]) -> None:
        annotations = obj["metadata"].get("annotations") or {}
        if obj["metadata"]["name"] == "t-0" and SOFT_EVICTION in annotations:
            marks.append(json.loads(annotations[SOFT_EVICTION]))

    watch = lc.Watcher(cluster.rest, cluster.pods_path(), keep_mark, name="t-0 marks")
    watch.start()
    first = make_pod("t-0", requests={"cpu": "1", GPU: 8}, labels={GROUP_LABEL: "t"})
    first["spec"]["nodeName"] = n0
    cluster.rest.request("POST", cluster.pods_path(), first)
    for name in ("t-1", "t-2"):
        pod = make_pod(name, requests={"cpu": "1", GPU: 8}, labels={GROUP_LABEL: "t"})
        cluster.rest.request("POST", cluster.pods_path(), pod)
    # While 1 of 3 is bound (the 8 s before the timeout), the PodGroup says so.
    status = lc.wait_until(
        lambda: (
            cluster.rest.request("GET", f"{groups}/t").get("status", {}).get("phase")
            == "Scheduling"
            or None
        ),
        timeout=15,
        what="PodGroup phase Scheduling (1 of 3 bound)",
        on_timeout=muster_gangs.log,
    )
    assert status
    cluster.wait_running("t-0")
    # The timeout gives the gang up: t-0 is marked with reason GangTimeout, and the
    # evictor deletes it.
    try:
        mark = lc.wait_until(lambda: marks[0] if marks else None, timeout=20, what="the mark")
    finally:
        watch.stop()
    assert mark["reason"].startswith("GangTimeout"), mark
    assert mark["preemptor"] is None
    cluster.wait_gone("t-0")
    backoff = json.loads(
        cluster.wait_pod(
            "t-1",
            lambda p: "muster.dev/gang-backoff" in p["metadata"].get("annotations", {}),
            what="the backoff written on the pending pods",
        )["metadata"]["annotations"]["muster.dev/gang-backoff"]
    )
    assert backoff["attempts"] == 1
    assert backoff["until"] - backoff["givenUp"] == pytest.approx(6.0)
    # Room for the whole gang, and t-0 back: only the backoff holds it now.
    for name in ("n1", "n2"):
        cluster.create_node(name, GPU_NODE)
    again = make_pod("t-0", requests={"cpu": "1", GPU: 8}, labels={GROUP_LABEL: "t"})
    cluster.rest.request("POST", cluster.pods_path(), again)
    names = ["t-0", "t-1", "t-2"]
    cluster.wait_pod(
        "t-0",
        lambda p: rejected_for_the_gang(p, "it is retried at"),
        what="the backoff reason",
    )
    lc.wait_until(
        lambda: all(bound_nodes(cluster, names).values()),
        timeout=30,
        what="the gang bound after its backoff",
    )
    for name in names:
        pod = cluster.get_pod(name) or {}
        scheduled = condition(pod, "PodScheduled") or {}
        bound_at = _epoch(scheduled["lastTransitionTime"])
        # Condition times have one-second resolution.
        assert bound_at >= int(backoff["until"]), (name, bound_at, backoff)
    lc.wait_until(
        lambda: (
            cluster.rest.request("GET", f"{groups}/t").get("status", {}).get("phase") == "Running"
            or None
        ),
        timeout=20,
        what="PodGroup phase Running",
    )
    reasons = {
        e["reason"]
        for e in cluster.rest.request("GET", f"/api/v1/namespaces/{cluster.namespace}/events")[
            "items"
        ]
    }
    assert {"GangTimeout", "GangRetry"} <= reasons, reasons
    # Placed whole, the gang forgets its backoff, on its pods too (read back, the
    # annotation would restore it, and its next timeout would not start at attempt 1).
    lc.wait_until(
        lambda: (
            not any(
                "muster.dev/gang-backoff"
                in ((cluster.get_pod(n) or {})["metadata"].get("annotations") or {})
                for n in names
            )
            or None
        ),
        timeout=20,
        what="the backoff annotation cleared",
    )


def _epoch(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
