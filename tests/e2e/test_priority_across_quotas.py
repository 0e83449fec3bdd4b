"""Priority before quota, live through a stock kube-scheduler (issue 35, item 2).

Two nodes of 4 GPUs.  Team B (min 4, max 8) runs b-serve (4 GPUs, priority 1000), which
fills one node; team A (min 4, max 8) runs a-sweep (2 GPUs, priority 10) on the other,
and team B's b-extra (2 GPUs, priority 1000) fills it: team B uses 6 > its min 4, so it
borrows 2.  Team A's a-train (2 GPUs, priority 500) arrives: with it team A uses 4, its
min, so it may reclaim from team B, and evict its own lower-priority work.  Derived from
the rule: evicting b-extra or a-sweep frees the 2 GPUs, both keep every guarantee; the
plan whose highest victim priority is lower (a-sweep, 10 < 1000) wins, although the walk
takes other quotas first.  So a-sweep goes, a-train runs where it ran, b-extra stays.
"""

from __future__ import annotations

import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    TRAINER,
    Teams,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e


def test_own_low_priority_work_goes_before_a_borrowers_high_priority_job(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 4})
    quota = {"min": {GPU: "4"}, "max": {GPU: "8"}}
    teams = Teams(cluster, quota, quota)
    try:
        sweep = _priority_class(cluster, teams.a, 10)
        train = _priority_class(cluster, teams.a, 500)
        serve = _priority_class(cluster, teams.b, 1000)
        steps = (
            (teams.b, "b-serve", 4, serve),  # fills one node
            (teams.a, "a-sweep", 2, sweep),  # then only the other has room
            (teams.b, "b-extra", 2, serve),  # and fills it
        )
        for namespace, name, gpus, priority_class in steps:
            teams.create(
                namespace,
                name,
                requests={"cpu": "1", GPU: gpus},
                labels=PREEMPTIBLE,
                priority_class=priority_class,
            )
            teams.wait(namespace, name, "Running")
        shared = (teams.get(teams.a, "a-sweep") or {})["spec"]["nodeName"]
        assert (teams.get(teams.b, "b-extra") or {})["spec"]["nodeName"] == shared
        teams.create(
            teams.a, "a-train", requests={"cpu": "1", GPU: 2}, labels=TRAINER, priority_class=train
        )
        lc.wait_until(
            lambda: teams.get(teams.a, "a-sweep") is None or None,
            timeout=60,
            what="a-sweep evicted",
        )
        teams.wait(teams.a, "a-train", "Running", timeout=60)
        assert (teams.get(teams.a, "a-train") or {})["spec"]["nodeName"] == shared
        for name in ("b-serve", "b-extra"):
            still = teams.get(teams.b, name)
            assert still is not None and still["status"]["phase"] == "Running", name
    finally:
        teams.cleanup()
