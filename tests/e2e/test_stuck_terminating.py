"""A pod on its way out for too long counts as staying, live (issue 34, item 5).

A node loses its kubelet (the harness's kubelet stand-in stops acting for it), and a
borrowing pod there is deleted: it stays terminating, its GPUs held, for as long as the
node is gone.  kube-scheduler still counts them.  Derived from the rule: until
``stuckTerminatingSeconds`` past its deletion deadline, Muster counts the pod as leaving,
sees room for team A's job without evicting anything, and evicts nothing; after, it counts
the pod as staying, and reclaims from the other borrower instead, whose node the job
then takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    TRAINER,
    Teams,
    muster_with_arguments,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e


@pytest.fixture
def muster_stuck_after_one_second(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    with muster_with_arguments(
        control_plane, tmp_path, tokens, {"stuckTerminatingSeconds": 1}
    ) as muster:
        yield muster


def test_a_pod_terminating_on_a_lost_node_stops_holding_up_a_reclaim(
    cluster: Cluster,
    control_plane: lc.ControlPlane,
    muster_stuck_after_one_second: MusterProcess,
) -> None:
    kubelet = control_plane.kubelet
    assert kubelet is not None
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "16"}}, {"min": {GPU: "0"}, "max": {GPU: "16"}}
    )
    stuck = None
    try:
        for name in ("b-0", "b-1"):
            teams.create(teams.b, name, requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE)
            teams.wait(teams.b, name, "Running")
        stuck_pod = teams.get(teams.b, "b-0") or {}
        lost = stuck_pod["spec"]["nodeName"]
        kubelet.lost_nodes.add(lost)
        stuck = "b-0"
        cluster.rest.request(
            "DELETE",
            f"/api/v1/namespaces/{teams.b}/pods/b-0",
            {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 1},
        )
        teams.create(teams.a, "train", requests={"cpu": "4", GPU: 8}, labels=TRAINER)

        # b-1 is reclaimed once b-0 counts as staying, and the job takes its node.
        lc.wait_until(
            lambda: teams.get(teams.b, "b-1") is None or None, timeout=90, what="b-1 evicted"
        )
        teams.wait(teams.a, "train", "Running", timeout=60)
        train = teams.get(teams.a, "train") or {}
        assert train["spec"]["nodeName"] != lost
        # b-0 is still there, terminating, on the lost node: nothing evicted it again.
        held = teams.get(teams.b, "b-0") or {}
        assert held["metadata"].get("deletionTimestamp")
        assert held["spec"]["nodeName"] == lost
    finally:
        kubelet.lost_nodes.clear()
        if stuck is not None:
            teams.force_delete(teams.b, stuck)
        teams.cleanup()
