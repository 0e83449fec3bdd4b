"""Topology-aware gangs through a stock kube-scheduler (issue 27).

Nodes are 8-GPU nodes labelled with a rack (and one block); gangs of three 8-GPU pods
declare a rack level with Kueue's pod-template keys, and their size with the
min-available annotation; pods are created one after another while kube-scheduler runs.
Every expectation is derived by hand from the rules (README "Topology-aware gangs").
"""

from __future__ import annotations

from typing import Any

from e2e_support import Cluster
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    SOFT_EVICTION,
    TRAINER,
    Teams,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
NODE = {"cpu": "32", "memory": "128Gi", GPU: 8}


def racked(cluster: Cluster, name: str, rack: str) -> str:
    return cluster.create_node(name, NODE, labels={RACK: rack, BLOCK: "b1"})


def create_gang(teams: Teams, key: str, size: int = 3) -> list[str]:
    names = [f"t-{i}" for i in range(size)]
    annotations = {key: RACK, "gang.scheduling.koordinator.sh/min-available": str(size)}
    labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
    for name in names:
        teams.create(
            teams.a, name, requests={"cpu": "1", GPU: 8}, labels=labels, annotations=annotations
        )
    return names


def nodes_of(teams: Teams, names: list[str]) -> dict[str, str | None]:
    return {
        name: (teams.get(teams.a, name) or {}).get("spec", {}).get("nodeName") for name in names
    }


def quotas() -> tuple[dict[str, Any], dict[str, Any]]:
    return {"min": {GPU: "24"}, "max": {GPU: "24"}}, {"min": {GPU: "0"}, "max": {GPU: "64"}}


def test_a_required_rack_gang_waits_rather_than_spread_then_binds_in_one_rack(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """(a) Racks r1 and r2 with two free nodes each: four free nodes, no rack holding
    three, so the gang waits and none of its pods binds.  A third node joins r2: the
    gang binds whole there."""
    nodes = {racked(cluster, f"a{i}", "r1") for i in range(2)}
    r2 = {racked(cluster, f"b{i}", "r2") for i in range(2)}
    nodes |= r2
    teams = Teams(cluster, *quotas())
    try:
        names = create_gang(teams, REQUIRED)

        def refused() -> bool:
            return all(
                "domain holds all 3 pods"
                in str((teams.get(teams.a, name) or {}).get("status", {}).get("conditions"))
                for name in names
            )

        lc.wait_until(refused, timeout=30, what="every pod refused: no rack holds the gang")
        assert not any(nodes_of(teams, names).values()), nodes_of(teams, names)
        r2.add(racked(cluster, "b2", "r2"))
        lc.wait_until(
            lambda: all(nodes_of(teams, names).values()), timeout=60, what="the gang bound"
        )
        assert set(nodes_of(teams, names).values()) == r2, nodes_of(teams, names)
    finally:
        teams.cleanup()


def test_a_required_rack_gang_preempts_in_the_cheapest_rack_only(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """(b) Rack r1: a0 free, a1 and a2 running team-B borrowers of priority 10; rack r2:
    b0..b2 running borrowers of priority 1.  r1 would need two priority-10 victims, r2
    three of priority 1: the cheapest (lowest highest victim priority) is r2, so exactly
    its three borrowers are marked, the gang binds in r2, and r1's pods keep running."""
    r1 = [racked(cluster, f"a{i}", "r1") for i in range(3)]
    r2 = [racked(cluster, f"b{i}", "r2") for i in range(3)]
    teams = Teams(cluster, *quotas())
    try:
        high, low = _priority_class(cluster, teams.b, 10), _priority_class(cluster, teams.b, 1)
        placed = {}
        for name, node, cls in (
            ("hi-1", r1[1], high),
            ("hi-2", r1[2], high),
            *((f"lo-{i}", r2[i], low) for i in range(3)),
        ):
            teams.create(
                teams.b,
                name,
                requests={"cpu": "1", GPU: 8},
                labels=PREEMPTIBLE,
                priority_class=cls,
                node_selector={"kubernetes.io/hostname": node},
            )
            teams.wait(teams.b, name, "Running")
            placed[name] = node
        names = create_gang(teams, REQUIRED)
        lc.wait_until(
            lambda: all(nodes_of(teams, names).values()), timeout=90, what="the gang bound"
        )
        assert set(nodes_of(teams, names).values()) == set(r2), nodes_of(teams, names)
        for name in ("hi-1", "hi-2"):
            pod = teams.get(teams.b, name) or {}
            assert pod.get("status", {}).get("phase") == "Running", pod
            assert SOFT_EVICTION not in pod["metadata"].get("labels", {}), name
        for i in range(3):  # r2's borrowers: evicted (gone, or on their way out)
            pod = teams.get(teams.b, f"lo-{i}")
            assert pod is None or pod["metadata"].get("deletionTimestamp"), pod
    finally:
        teams.cleanup()


def test_a_preferred_rack_gang_spreads_over_racks_without_eviction(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """(c) Rack r1 with two free nodes, rack r2 with one free node and one running a
    team-B borrower of priority 1: no rack holds three free, so a gang that only prefers
    a rack spreads over r1 and r2's free nodes, and the borrower is never marked (a
    preference causes no eviction)."""
    r1 = [racked(cluster, f"a{i}", "r1") for i in range(2)]
    r2 = [racked(cluster, f"b{i}", "r2") for i in range(2)]
    teams = Teams(cluster, *quotas())
    try:
        teams.create(
            teams.b,
            "lo",
            requests={"cpu": "1", GPU: 8},
            labels=PREEMPTIBLE,
            node_selector={"kubernetes.io/hostname": r2[1]},
        )
        teams.wait(teams.b, "lo", "Running")
        names = create_gang(teams, PREFERRED)
        lc.wait_until(
            lambda: all(nodes_of(teams, names).values()), timeout=60, what="the gang bound"
        )
        assert set(nodes_of(teams, names).values()) == {*r1, r2[0]}, nodes_of(teams, names)
        lo = teams.get(teams.b, "lo") or {}
        assert SOFT_EVICTION not in lo["metadata"].get("labels", {})
        assert lo["status"]["phase"] == "Running"
    finally:
        teams.cleanup()


def test_a_sliced_gang_waits_for_whole_slices_then_binds_one_per_rack_pair(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """(d) Kueue's slices: a gang of four 8-GPU pods in slices of two, each slice inside
    one rack. Racks r1 (a0, a1), r2 (b0, b1), r3 (c0); a1 runs team B's non-preemptible
    pod (never a victim). Four nodes are free, enough for the gang unsliced, but only r2
    holds a whole slice (r1 and r3 one pod each): the gang waits, none of it bound. The
    pod on a1 deleted, r1 holds a slice too: the gang binds on a0, a1, b0, b1 (c0, a
    rack of one node, takes no pod)."""
    r1 = [racked(cluster, f"a{i}", "r1") for i in range(2)]
    r2 = [racked(cluster, f"b{i}", "r2") for i in range(2)]
    racked(cluster, "c0", "r3")
    teams = Teams(
        cluster, {"min": {GPU: "32"}, "max": {GPU: "32"}}, {"min": {GPU: "8"}, "max": {GPU: "64"}}
    )
    try:
        teams.create(
            teams.b,
            "keeper",
            requests={"cpu": "1", GPU: 8},
            labels={"quota.scheduling.koordinator.sh/preemptible": "false"},
            node_selector={"kubernetes.io/hostname": r1[1]},
        )
        teams.wait(teams.b, "keeper", "Running")
        names = [f"t-{i}" for i in range(4)]
        annotations = {
            "kueue.x-k8s.io/podset-slice-required-topology": RACK,
            "kueue.x-k8s.io/podset-slice-size": "2",
            "gang.scheduling.koordinator.sh/min-available": "4",
        }
        labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
        for name in names:
            teams.create(
                teams.a, name, requests={"cpu": "1", GPU: 8}, labels=labels, annotations=annotations
            )

        def refused() -> bool:
            return all(
                "in slices of 2"
                in str((teams.get(teams.a, name) or {}).get("status", {}).get("conditions"))
                for name in names
            )

        lc.wait_until(refused, timeout=30, what="every pod refused: one whole slice fits")
        assert not any(nodes_of(teams, names).values()), nodes_of(teams, names)
        teams.cluster.rest.request(
            "DELETE", f"/api/v1/namespaces/{teams.b}/pods/keeper", {"gracePeriodSeconds": 0}
        )
        lc.wait_until(
            lambda: all(nodes_of(teams, names).values()), timeout=60, what="the gang bound"
        )
        assert set(nodes_of(teams, names).values()) == {*r1, *r2}, nodes_of(teams, names)
    finally:
        teams.cleanup()
