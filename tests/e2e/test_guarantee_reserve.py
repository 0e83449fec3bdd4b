"""The guarantee reserve, live through a stock kube-scheduler (issue 34: fewer never-saving
borrowers taken back).

With ``guaranteeReserveSeconds: 120`` and three 8-GPU nodes: team A (min 8, max 24) runs
a-0 on one node, its whole min; team B (min 16, max 24) ran b-0, which has gone, so B owes
16 GPUs and its newest pod was created moments ago.  Derived from the rule: two nodes are
free (16 GPUs); A's a-never (8 GPUs, no checkpoint interval) would leave 8 free, less than
the 16 B is owed, so it waits with the reserve's reason; A's a-saver (8 GPUs, a checkpoint
every 30 s, a claim its tenant writes with its own namespace-scoped token) borrows one of
them.  Then B's b-1 (8 GPUs, within its min) takes the last free node at once, and no one
is marked or evicted; a-never still waits (B owes 8, and 0 are free).  Without the rule
a-never would have taken a node, and b-1 would have had to take it back.  Last, B's b-2
takes B to its min and reclaims a-saver: claiming to save buys a tenant room, never
protection.

Played as users arrive, a second test bursts B's work in while an earlier plan's victim
still terminates, and A's never-saving job arrives in the same breath as B's next one.  A
third shows that a job may not borrow by preemption what admission would not lend it: by
evicting its own quota's saving borrower.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Cluster, make_pod, tenant_client
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_elastic_shrink import CAN_PREEMPT
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    TRAINER,
    Teams,
    _epoch,
    muster_with_arguments,
    tokens,
)

import localcluster as lc
from base import keys

pytestmark = pytest.mark.e2e

RESERVE = 120.0


@pytest.fixture
def muster_reserve(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    with muster_with_arguments(
        control_plane, tmp_path, tokens, {"guaranteeReserveSeconds": RESERVE}
    ) as muster:
        yield muster


#: One 8-GPU pod's requests, and a job's declaration that it saves every 30 s.
GPUS = {"cpu": "1", GPU: 8}
SAVES = {keys.CHECKPOINT_INTERVAL_ANNOTATION: "30"}


def three_nodes_two_teams(cluster: Cluster) -> Teams:
    """Three 8-GPU nodes; A with a min of 8, B with a min of 16, each a max of 24."""
    for i in range(3):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    return Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "24"}}, {"min": {GPU: "16"}, "max": {GPU: "24"}}
    )


def test_a_guarantee_owed_lately_is_lent_to_a_job_that_saves_not_one_that_does_not(
    cluster: Cluster, muster_reserve: MusterProcess
) -> None:
    teams = three_nodes_two_teams(cluster)
    try:
        teams.create(teams.a, "a-0", requests=GPUS, labels=PREEMPTIBLE)
        teams.wait(teams.a, "a-0", "Running")
        teams.create(teams.b, "b-0", requests=GPUS, labels=TRAINER)
        teams.wait(teams.b, "b-0", "Running")
        teams.delete_now(teams.b, "b-0")

        teams.create(teams.a, "a-never", requests=GPUS, labels=PREEMPTIBLE)

        def turned_away() -> list[str] | None:
            said = "guaranteeReserveSeconds"
            return muster_reserve.decision_reasons(teams.a, "a-never", containing=said) or None

        reasons = lc.wait_until(turned_away, timeout=30, what="the reserve's reason")
        assert f"owed to quota {teams.b}" in reasons[0]

        # a-saver starts seconds after a-0 (start times have a resolution of a second), so
        # it is the borrower whose unsaved work began latest: the one a reclaim takes.
        started = _epoch((teams.get(teams.a, "a-0") or {})["status"]["startTime"])
        lc.wait_until(lambda: time.time() > started + 2 or None, timeout=10, what="2 s to pass")
        # The interval is the tenant's own claim, written with its namespace-scoped token.
        saver = make_pod("a-saver", requests=GPUS, labels=PREEMPTIBLE, annotations=SAVES)
        tenant_client(cluster, teams.a).request("POST", f"/api/v1/namespaces/{teams.a}/pods", saver)
        teams.wait(teams.a, "a-saver", "Running", timeout=60)

        teams.create(teams.b, "b-1", requests=GPUS, labels=TRAINER)
        teams.wait(teams.b, "b-1", "Running", timeout=60)
        for name in ("a-0", "a-saver"):
            running = teams.get(teams.a, name) or {}
            assert running["status"]["phase"] == "Running", name
            assert not running["metadata"].get("deletionTimestamp"), name
            assert keys.SOFT_EVICTION_KEY not in running["metadata"].get("labels", {}), name
        never = teams.get(teams.a, "a-never") or {}
        assert never["status"]["phase"] == "Pending" and not never["spec"].get("nodeName")

        # The claim buys room, not protection: B's b-2 takes B to its min of 16 and
        # reclaims from A, beyond its min by 8: a-saver, the later started (the least work
        # lost), evicted at once (no notice is allowed: the default cap, 0).
        teams.create(teams.b, "b-2", requests=GPUS, labels=TRAINER)
        teams.wait(teams.b, "b-2", "Running", timeout=60)
        preempted = [e["involvedObject"]["name"] for e in teams.events(teams.a, "Preempted")]
        assert preempted == ["a-saver"]
    finally:
        teams.cleanup()


def test_the_reserve_holds_through_a_burst_while_a_victim_still_terminates(
    cluster: Cluster, muster_reserve: MusterProcess
) -> None:
    # Five 8-GPU nodes.  Team A (min 8, max 40) runs a-0..a-3, its min and three nodes
    # borrowed, which save nothing and take 20 s to terminate; team B (min 24,
    # max 40) has created nothing, so nothing of A's is reserved for it.  Derived from the
    # rule, step by step:
    # 1. B creates b-0 and b-1 together.  One node is free, so one of them takes it and
    #    the other reclaims one of A's pods (A is 24 above its min; which one, the start
    #    times decide, a second apart at best): one victim, terminating for 20 s, its room
    #    held for B.
    # 2. While it terminates, another of A's pods completes, freeing a node, and
    #    A's a-never (8 GPUs, no checkpoint interval) and B's b-2 are created together.
    #    B owes 24 - 16 = 8 (its held room counts as used), and a-never would leave
    #    at most 8 - 8 = 0 free (the terminating victim still counts as used, so Muster
    #    counts less): it waits, whichever the scheduler tries first, and b-2 takes
    #    the free node within B's min.  Without the reserve, a-never could take the node
    #    first and b-2 would have to reclaim a second pod of A's.
    for i in range(5):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "40"}}, {"min": {GPU: "24"}, "max": {GPU: "40"}}
    )
    running = [f"a-{i}" for i in range(4)]
    try:
        for name in running:
            teams.create(teams.a, name, requests=GPUS, labels=PREEMPTIBLE, grace_seconds=20)
            teams.wait(teams.a, name, "Running")

        for name in ("b-0", "b-1"):
            teams.create(teams.b, name, requests=GPUS, labels=TRAINER)

        def terminating() -> list[str] | None:
            pods = {name: teams.get(teams.a, name) or {} for name in running}
            return [n for n, p in pods.items() if p["metadata"].get("deletionTimestamp")] or None

        (victim,) = lc.wait_until(
            terminating,
            timeout=60,
            what="one of A's pods terminating",
            on_timeout=muster_reserve.log,
        )
        done = next(name for name in running if name != victim)
        teams.delete_now(teams.a, done)
        teams.create(teams.a, "a-never", requests=GPUS, labels=PREEMPTIBLE)
        teams.create(teams.b, "b-2", requests=GPUS, labels=TRAINER)
        # The burst came while the first plan's victim still terminates.
        assert (teams.get(teams.a, victim) or {})["metadata"].get("deletionTimestamp")

        teams.wait(teams.b, "b-2", "Running", timeout=60)
        reasons = muster_reserve.decision_reasons(
            teams.a, "a-never", containing="guaranteeReserveSeconds"
        )
        assert reasons and f"owed to quota {teams.b}" in reasons[0], reasons
        for name in ("b-0", "b-1"):
            teams.wait(teams.b, name, "Running", timeout=60)
        never = teams.get(teams.a, "a-never") or {}
        assert never["status"]["phase"] == "Pending" and not never["spec"].get("nodeName")
        # One reclaim for the whole burst: the first victim, and no one else of A's.
        preempted = [e["involvedObject"]["name"] for e in teams.events(teams.a, "Preempted")]
        assert preempted == [victim], preempted
        for name in running:
            if name not in (victim, done):
                assert (teams.get(teams.a, name) or {})["status"]["phase"] == "Running", name
    finally:
        teams.cleanup()


def test_a_job_does_not_take_owed_room_by_evicting_its_own_quotas_saver(
    cluster: Cluster, muster_reserve: MusterProcess
) -> None:
    # Three 8-GPU nodes.  A (min 8, max 24) runs a-0 (priority 100), its min; B (min 16,
    # max 24) runs b-0, created moments ago: B owes 8 and is within its reserve.  A's
    # a-saver (priority 10, a checkpoint every 30 s) borrows the last node, as a job that
    # saves may.  Then A's a-hi (priority 500, saves nothing, may preempt): no node is
    # free.  Derived from the rules: a-hi is within A's min only once a-0 and a-saver both
    # go (24 - 16 = 8), so its plan may take A's own work, and the cheapest takes a-saver
    # alone (the lowest priority).  That leaves a-hi borrowing: once a-saver is gone, free
    # room is 24 - (8 + 8) - a-hi's 8 = 0, with no borrower of lower priority left, below
    # the 8 B is owed.  Admission would not lend a-hi that node, so there is no plan
    # either: the postfilter gives the reserve's reason, and a-saver keeps running.
    teams = three_nodes_two_teams(cluster)
    try:
        low, mid, high = (_priority_class(cluster, teams.a, v) for v in (10, 100, 500))
        teams.create(teams.a, "a-0", requests=GPUS, labels=PREEMPTIBLE, priority_class=mid)
        teams.wait(teams.a, "a-0", "Running")
        teams.create(teams.b, "b-0", requests=GPUS, labels=TRAINER)
        teams.wait(teams.b, "b-0", "Running")
        teams.create(
            teams.a,
            "a-saver",
            requests=GPUS,
            labels=PREEMPTIBLE,
            annotations=SAVES,
            priority_class=low,
        )
        teams.wait(teams.a, "a-saver", "Running")
        teams.create(
            teams.a,
            "a-hi",
            requests=GPUS,
            labels={**PREEMPTIBLE, **CAN_PREEMPT},
            priority_class=high,
        )

        def refused() -> list[str] | None:
            said = "guaranteeReserveSeconds"
            return (
                muster_reserve.decision_reasons(teams.a, "a-hi", verb="postfilter", containing=said)
                or None
            )

        reasons = lc.wait_until(
            refused,
            timeout=60,
            what="the postfilter's reserve reason",
            on_timeout=muster_reserve.log,
        )
        assert f"owed to quota {teams.b}" in reasons[0], reasons
        saver = teams.get(teams.a, "a-saver") or {}
        assert saver["status"]["phase"] == "Running"
        assert not saver["metadata"].get("deletionTimestamp")
        assert keys.SOFT_EVICTION_KEY not in saver["metadata"].get("labels", {})
        assert teams.events(teams.a, "Preempted") == []
        hi = teams.get(teams.a, "a-hi") or {}
        assert hi["status"]["phase"] == "Pending" and not hi["spec"].get("nodeName")
    finally:
        teams.cleanup()
