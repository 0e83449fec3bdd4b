"""Gangs in flight, live through a stock kube-scheduler: spared by another quota's plan,
and planned again when room reserved for them was taken behind the plan.

The first test:

Three 8-GPU nodes. Team A: min 8, max 24; team B: min 0, max 24 (all it runs it
borrows). Team B runs b-old (one 8-GPU pod); seconds later its gang g arrives: two 8-GPU
pods, min-available 2, the second held by a scheduling gate (as an operator holds a pod
it has not finished setting up). Both exist, so Muster places g whole on the two free
nodes and holds them; g-0 binds, g-1, gated, is not tried: g is in flight, one of its
two pods bound, room held for the other. Team A's job train (8 GPUs, within A's min)
then arrives: no node is free (one is held for g-1), so it must reclaim from team B.

Derived from the rules (docs/quotas-and-preemption.md, "A gang in flight"): team B's
units are b-old and g, both of priority 0.  The victim order alone would take g, whose
work began last; but g is a gang in flight, and a plan taking b-old spares it.  So b-old
is marked and evicted, train runs on b-old's node, and g-0 is never marked; once its gate
is lifted, g-1 binds on the node held for it and g runs whole.  Before this rule, g-0 was
the victim and g lost its room.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from e2e_support import Cluster, make_pod
from muster_process import MusterProcess
from test_jobs import GANG_LABEL, MIN_AVAILABLE
from test_muster_extender import GPU
from test_notice import NOTICE, marked_at, muster_with_notice  # noqa: F401 (fixture)
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    SOFT_EVICTION,
    TRAINER,
    Teams,
    _epoch,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e

GATE = "e2e.muster.dev/not-ready"
NOT_PREEMPTIBLE = {"quota.scheduling.koordinator.sh/preemptible": "false"}


def _node(teams: Teams, namespace: str, name: str) -> str | None:
    pod: dict[str, Any] = teams.get(namespace, name) or {}
    return pod.get("spec", {}).get("nodeName")


def test_a_gang_in_flight_is_spared_by_a_reclaim_that_has_another_victim(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    for i in range(3):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "24"}}, {"min": {GPU: "0"}, "max": {GPU: "24"}}
    )
    try:
        gpus = {"cpu": "4", GPU: 8}
        teams.create(teams.b, "b-old", requests=gpus, labels=PREEMPTIBLE)
        teams.wait(teams.b, "b-old", "Running")
        old_node = _node(teams, teams.b, "b-old")
        # g starts a few seconds after b-old (the scenario, not a wait for something to
        # happen): startTime has a resolution of one second, and on a tie the victim
        # order goes by job name, which would take b-old first whatever the rule.
        started = _epoch((teams.get(teams.b, "b-old") or {})["status"]["startTime"])
        lc.wait_until(lambda: time.time() >= started + 3 or None, timeout=10, what="3 s")
        gang = {"labels": {**PREEMPTIBLE, GANG_LABEL: "g"}, "annotations": {MIN_AVAILABLE: "2"}}
        teams.create(teams.b, "g-1", requests=gpus, scheduling_gates=[GATE], **gang)
        teams.create(teams.b, "g-0", requests=gpus, **gang)
        teams.wait(teams.b, "g-0", "Running")
        g0_node = _node(teams, teams.b, "g-0")
        assert g0_node != old_node
        g0_started = _epoch((teams.get(teams.b, "g-0") or {})["status"]["startTime"])
        assert g0_started > started  # so by the victim order alone, g goes first

        teams.create(teams.a, "train", requests=gpus, labels=TRAINER)
        lc.wait_until(
            lambda: teams.get(teams.b, "b-old") is None or None,
            timeout=30,
            what="b-old reclaimed",
        )
        teams.wait(teams.a, "train", "Running", timeout=30)
        assert _node(teams, teams.a, "train") == old_node
        g0: dict[str, Any] = teams.get(teams.b, "g-0") or {}
        assert g0["status"]["phase"] == "Running"
        assert SOFT_EVICTION not in g0["metadata"].get("annotations", {})
        preempted = sorted(e["involvedObject"]["name"] for e in teams.events(teams.b, "Preempted"))
        assert preempted == ["b-old"]

        # The room held for g-1 is still g's: with its gate lifted it binds there.
        cluster.rest.request(
            "PATCH",
            f"/api/v1/namespaces/{teams.b}/pods/g-1",
            {"spec": {"schedulingGates": []}},
            content_type="application/merge-patch+json",
        )
        teams.wait(teams.b, "g-1", "Running", timeout=30)
        assert _node(teams, teams.b, "g-1") not in (old_node, g0_node)
    finally:
        teams.cleanup()


def test_reserved_room_a_pod_took_behind_the_plan_is_planned_again(
    cluster: Cluster,
    muster_with_notice: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    # Three 8-GPU nodes.  Team A: min 16, max 32 (its gang g of two 8-GPU pods is within
    # it); team B: min 0, max 32.  Team B runs y, then seconds later v (both preemptible,
    # v with 15 s of notice it ignores); one node is free.  g's plan
    # (docs/quotas-and-preemption.md, "Job-level preemption"): the free node and v's
    # (v's work began last), v marked.  While v is on notice, a pod placed behind the
    # scheduler's back (nodeName set; kube-scheduler binding a pod it filtered while the
    # plan was made plays out the same) takes the free node, and y finishes (deleted), so
    # its node is free.  Derived (docs/gangs.md, "Repair"): once v has gone, g's pod
    # reserved on the taken node cannot fit there and never will (late is no victim), so
    # g is planned again without that node: on v's node and y's, with no other victim.
    # Before, that pod waited for the taken room until the gang timed out (300 s).
    capacity = {"cpu": "32", "memory": "128Gi", GPU: 8}
    nodes = [cluster.create_node(f"n{i}", capacity) for i in range(3)]
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    try:
        gpus = {"cpu": "4", GPU: 8}
        teams.create(teams.b, "y", requests=gpus, labels=PREEMPTIBLE)
        teams.wait(teams.b, "y", "Running")
        started = _epoch((teams.get(teams.b, "y") or {})["status"]["startTime"])
        lc.wait_until(lambda: time.time() >= started + 3 or None, timeout=10, what="3 s")
        teams.create(teams.b, "v", requests=gpus, labels=PREEMPTIBLE, annotations={NOTICE: "15"})
        teams.wait(teams.b, "v", "Running")
        y_node, v_node = _node(teams, teams.b, "y"), _node(teams, teams.b, "v")
        free = next(name for name in nodes if name not in (y_node, v_node))
        gang = {"labels": {**TRAINER, GANG_LABEL: "g"}, "annotations": {MIN_AVAILABLE: "2"}}
        for name in ("g-0", "g-1"):
            teams.create(teams.a, name, requests=gpus, **gang)
        notice_ends = marked_at(teams, "v") + 15
        late = make_pod("late", requests=gpus, labels=NOT_PREEMPTIBLE)
        late["spec"]["nodeName"] = free
        cluster.rest.request("POST", f"/api/v1/namespaces/{teams.b}/pods", late)
        teams.wait(teams.b, "late", "Running")
        cluster.rest.request(
            "DELETE", f"/api/v1/namespaces/{teams.b}/pods/y", query={"gracePeriodSeconds": 0}
        )
        lc.wait_until(lambda: teams.get(teams.b, "y") is None or None, timeout=30, what="y gone")
        # All of this while v was still on notice, so g had bound nothing yet.
        assert time.time() < notice_ends

        for name in ("g-0", "g-1"):
            teams.wait(teams.a, name, "Running", timeout=60)
        placed = sorted(_node(teams, teams.a, n) or "" for n in ("g-0", "g-1"))
        assert placed == sorted([v_node or "", y_node or ""])
        assert teams.get(teams.b, "v") is None
        assert _node(teams, teams.b, "late") == free
        preempted = sorted(e["involvedObject"]["name"] for e in teams.events(teams.b, "Preempted"))
        assert preempted == ["v"]
    finally:
        teams.cleanup()
