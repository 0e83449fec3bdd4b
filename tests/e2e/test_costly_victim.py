"""A costly lower-priority victim spared, live through a stock kube-scheduler (issue 34,
item 1: the plan losing the least work).

Four 8-GPU nodes.  Team B (min 8, max 32) borrows all of them: first its gang old, two
4-GPU pods on n0 (priority 0, saving nothing), then its elastic job train, three 8-GPU
pods on n1, n2, n3 started a second apart at least (priority 100, a minimum of 1 pod).
Team A (min 16) reclaims with big, a gang of two 8-GPU pods: each needs a whole node.
Derived from the rule: the walk, lower priority first, would evict old (freeing n0) and
train's newest pod (n3), three pods; old started first, so it loses at least as much as
train-2, half the plan's work or more, and the search sparing it finds train shedding its
two newest pods (n2, n3): two victims at the same highest priority, which ranks better.
So train-1 and train-2 go, old and train-0 keep running, and big runs on n2 and n3.

A second test spares a gang at the plan's own priority: its eviction alone would lose
more than five younger or smaller pods together.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_jobs import GANG_LABEL, MIN_AVAILABLE
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    TRAINER,
    Teams,
    _epoch,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e

HOSTNAME = "kubernetes.io/hostname"


def test_a_costly_low_priority_gang_is_spared_for_an_elastic_jobs_newest_pods(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    nodes = [
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8}) for i in range(4)
    ]
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "32"}}, {"min": {GPU: "8"}, "max": {GPU: "32"}}
    )
    try:
        normal = _priority_class(cluster, teams.b, 100)

        def member(team: str, name: str, gpus: int, minimum: int, **kwargs: Any) -> None:
            """A pod of the gang ``name`` names (its prefix), of ``minimum`` pods."""
            role = TRAINER if team == teams.a else PREEMPTIBLE
            teams.create(
                team,
                name,
                requests={"cpu": "4", GPU: gpus},
                labels={**role, GANG_LABEL: name.rsplit("-", 1)[0]},
                annotations={MIN_AVAILABLE: str(minimum)},
                **kwargs,
            )

        for i in range(2):
            member(teams.b, f"old-{i}", 4, 2, node_selector={HOSTNAME: nodes[0]})
        for i in range(2):
            teams.wait(teams.b, f"old-{i}", "Running")
        for i in range(3):  # one after another: train-2 is the newest
            member(
                teams.b,
                f"train-{i}",
                8,
                1,
                priority_class=normal,
                node_selector={HOSTNAME: nodes[i + 1]},
            )
            teams.wait(teams.b, f"train-{i}", "Running")
            # Start times have a resolution of a second, and the newest start sheds first:
            # the next pod starts a second later at least.
            started = _epoch((teams.get(teams.b, f"train-{i}") or {})["status"]["startTime"])
            lc.wait_until(
                lambda started=started: time.time() >= started + 1 or None,
                timeout=5,
                what="the next second",
            )
        for i in range(2):
            member(teams.a, f"big-{i}", 8, 2)
        for i in range(2):
            teams.wait(teams.a, f"big-{i}", "Running", timeout=90)
        big = [teams.get(teams.a, f"big-{i}") or {} for i in range(2)]
        placed = sorted(pod["spec"]["nodeName"] for pod in big)
        assert placed == sorted(nodes[2:])
        for name in ("train-1", "train-2"):
            lc.wait_until(
                lambda name=name: teams.get(teams.b, name) is None or None,
                timeout=60,
                what=f"{name} evicted",
            )
        for name in ("old-0", "old-1", "train-0"):
            kept = teams.get(teams.b, name)
            assert kept is not None and kept["status"]["phase"] == "Running", name
            assert not kept["metadata"].get("deletionTimestamp"), name
    finally:
        teams.cleanup()


def test_a_gang_that_would_lose_most_is_spared_for_more_victims_losing_less(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    # Two 8-GPU nodes; every victim of priority 0, saving nothing.  Team B (min 0, max 16)
    # borrows both: four 1-GPU pods s-0..s-3 on n1 (started at t0), then its gang old, two
    # 4-GPU pods on n0 (t1, a second or two later), then mid, one 4-GPU pod on n1 (t2, six
    # seconds after t1 or more).  Team A (min 8) reclaims with big, one 8-GPU pod: a whole
    # node.  Derived from the rule (scenario costly-gang-spared-at-its-priority.yaml):
    # the walk takes the latest started first, mid (n1 half free), then old (n0 free), and
    # puts mid back: plan A, old, losing 8 x (T - t1) GPU-s at the decision time T.
    # Sparing old: mid and the four s pods free n1, plan B, losing 4 x (T - t2) +
    # 4 x (T - t0), less than A's whenever t1 - t0 < t2 - t1 (checked below from the start
    # times): less work lost ranks first, so B's five pods go and old keeps running.
    nodes = [
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8}) for i in range(2)
    ]
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "16"}}, {"min": {GPU: "0"}, "max": {GPU: "16"}}
    )

    def started(name: str) -> float:
        return _epoch((teams.get(teams.b, name) or {})["status"]["startTime"])

    def running(names: list[str], node: str, gpus: int, **labels: str) -> float:
        for name in names:
            teams.create(
                teams.b,
                name,
                requests={"cpu": "1", GPU: gpus},
                labels={**PREEMPTIBLE, **labels},
                node_selector={HOSTNAME: node},
            )
        for name in names:
            teams.wait(teams.b, name, "Running")
        return max(started(name) for name in names)

    def second_after(at: float, seconds: float) -> None:
        lc.wait_until(
            lambda: time.time() >= at + seconds or None,
            timeout=seconds + 5,
            what=f"{seconds:g} s after {at}",
        )

    small = [f"s-{i}" for i in range(4)]
    try:
        t0 = running(small, nodes[1], 1)
        second_after(t0, 1)
        t1 = running(["old-0", "old-1"], nodes[0], 4, **{GANG_LABEL: "old"})
        second_after(t1, 6)
        t2 = running(["mid"], nodes[1], 4)
        t0 = min(started(name) for name in small)  # the earliest: the most each can lose
        assert t1 - t0 < t2 - t1, (t0, t1, t2)  # the arithmetic above holds

        teams.create(teams.a, "big", requests={"cpu": "1", GPU: 8}, labels=TRAINER)
        teams.wait(teams.a, "big", "Running", timeout=90)
        assert (teams.get(teams.a, "big") or {})["spec"]["nodeName"] == nodes[1]
        for name in ["mid", *small]:
            lc.wait_until(
                lambda name=name: teams.get(teams.b, name) is None or None,
                timeout=60,
                what=f"{name} evicted",
            )
        for name in ("old-0", "old-1"):
            kept = teams.get(teams.b, name)
            assert kept is not None and kept["status"]["phase"] == "Running", name
            assert not kept["metadata"].get("deletionTimestamp"), name
        preempted = sorted(e["involvedObject"]["name"] for e in teams.events(teams.b, "Preempted"))
        assert preempted == sorted(["mid", *small])
    finally:
        teams.cleanup()
