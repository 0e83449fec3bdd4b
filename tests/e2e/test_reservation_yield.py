"""Room held for a lower-priority job yields to a higher-priority one, live (issue 35,
item 2).

Two nodes of 8 GPUs, both borrowed by team B (min 0).  Both nodes lose their kubelet (the
stand-in stops acting for them), so an evicted borrower stays terminating and the room it
frees stays held, not used.  Team A (min = max = 8 GPUs) submits a-lo (priority 5): it
reclaims one borrower, and its room on that borrower's node is held.  Seconds later a-hi
(priority 50) arrives.  Derived from the rule: a-hi cannot run beside a-lo (team A would
use 16 > its max 8), and nothing of a-lo runs yet, so a-lo's reservation yields: a-hi
holds that room, evicting no one more, and a-lo waits.  Once the victim is gone a-hi runs
on its node; a-lo stays pending (team A is at its max) and the other borrower keeps
running.
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
    _reserved_and_nominated,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e

RESERVATION = "muster.dev/reservation"


def test_a_higher_priority_job_takes_the_room_held_for_a_lower_one(
    cluster: Cluster,
    control_plane: lc.ControlPlane,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    kubelet = control_plane.kubelet
    assert kubelet is not None
    nodes = [cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8}) for i in (0, 1)]
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "8"}}, {"min": {GPU: "0"}, "max": {GPU: "16"}}
    )

    def reserved(name: str) -> bool:
        pod = teams.get(teams.a, name) or {}
        return RESERVATION in (pod.get("metadata", {}).get("annotations") or {})

    try:
        low = _priority_class(cluster, teams.a, 5)
        high = _priority_class(cluster, teams.a, 50)
        for name in ("b-0", "b-1"):
            teams.create(teams.b, name, requests={"cpu": "1", GPU: 8}, labels=PREEMPTIBLE)
            teams.wait(teams.b, name, "Running")
        kubelet.lost_nodes.update(nodes)

        teams.create(
            teams.a, "a-lo", requests={"cpu": "1", GPU: 8}, labels=TRAINER, priority_class=low
        )
        # The reservation annotation and the nomination are two writes: wait for both.
        a_lo_held = lc.wait_until(
            lambda: _reserved_and_nominated(teams.get(teams.a, "a-lo")),
            timeout=60,
            what="a-lo's room held and nominated",
        )
        held = a_lo_held["status"]["nominatedNodeName"]
        on_held = (teams.get(teams.b, "b-0") or {})["spec"]["nodeName"] == held
        victim, other = ("b-0", "b-1") if on_held else ("b-1", "b-0")

        teams.create(
            teams.a, "a-hi", requests={"cpu": "1", GPU: 8}, labels=TRAINER, priority_class=high
        )
        lc.wait_until(
            lambda: (reserved("a-hi") and not reserved("a-lo")) or None,
            timeout=60,
            what="a-lo's room yielded to a-hi",
        )
        kubelet.lost_nodes.clear()
        cluster.rest.request(
            "DELETE",
            f"/api/v1/namespaces/{teams.b}/pods/{victim}",
            {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
        )
        teams.wait(teams.a, "a-hi", "Running", timeout=60)
        assert (teams.get(teams.a, "a-hi") or {})["spec"]["nodeName"] == held
        a_lo = teams.get(teams.a, "a-lo") or {}
        assert a_lo["status"]["phase"] == "Pending" and not a_lo["spec"].get("nodeName")
        kept = teams.get(teams.b, other) or {}
        assert kept["status"]["phase"] == "Running"
        assert not kept["metadata"].get("deletionTimestamp")
    finally:
        kubelet.lost_nodes.clear()
        teams.cleanup()
