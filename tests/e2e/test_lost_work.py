"""Lost work picks the victim, live through a stock kube-scheduler (issue 34, item 1).

Team B borrows both nodes with b-0, then b-1 (one priority).  Then b-0's job saves its
work: it writes ``muster.dev/last-checkpoint`` with the time, after b-1 started.  Team A
(min 8) reclaims 8 GPUs.  Derived from the rule: by start alone the newer, b-1, would go;
by lost work b-0, whose unsaved work began last, loses less, and goes; the job runs on
b-0's node and b-1 keeps running.
"""

from __future__ import annotations

import datetime as dt

import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
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

LAST_CHECKPOINT = "muster.dev/last-checkpoint"


def test_the_victim_that_just_saved_its_work_goes(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "16"}}, {"min": {GPU: "0"}, "max": {GPU: "16"}}
    )
    try:
        for name in ("b-0", "b-1"):
            teams.create(teams.b, name, requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE)
            teams.wait(teams.b, name, "Running")
        b1 = teams.get(teams.b, "b-1") or {}
        # b-0 saves its work one second after b-1 started (the time is the job's claim).
        saved = _epoch(b1["status"]["startTime"]) + 1
        stamp = dt.datetime.fromtimestamp(saved, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        cluster.rest.request(
            "PATCH",
            f"/api/v1/namespaces/{teams.b}/pods/b-0",
            {"metadata": {"annotations": {LAST_CHECKPOINT: stamp}}},
            content_type="application/merge-patch+json",
        )
        node_of_b0 = (teams.get(teams.b, "b-0") or {})["spec"]["nodeName"]
        # Muster's informer must have read the checkpoint before the job arrives.
        lc.wait_until(
            lambda: (
                muster_and_evictor.debug(f"pods/{teams.b}/b-0").get("workStarted") == stamp or None
            ),
            timeout=30,
            what="Muster to see b-0's checkpoint",
        )
        teams.create(teams.a, "train", requests={"cpu": "4", GPU: 8}, labels=TRAINER)
        lc.wait_until(
            lambda: teams.get(teams.b, "b-0") is None or None, timeout=60, what="b-0 evicted"
        )
        teams.wait(teams.a, "train", "Running", timeout=60)
        assert (teams.get(teams.a, "train") or {})["spec"]["nodeName"] == node_of_b0
        b1_now = teams.get(teams.b, "b-1")
        assert b1_now is not None and b1_now["status"]["phase"] == "Running"
    finally:
        teams.cleanup()
