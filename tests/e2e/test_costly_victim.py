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
