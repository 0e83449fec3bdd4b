"""Room in priority order within a quota, live through a stock kube-scheduler (issues 34
and 35).

With ``guaranteeReserveSeconds: 120`` and four 8-GPU nodes: team A (min 0) borrows one
with a-1 (priority 1, saves nothing); team B (min 8; ``withinQuota`` and
``borrowWithinCohort`` ``LowerPriority``) runs b-run (not preemptible), its min; team C
(min 24) runs c-1, created moments ago, so it is owed 16; one node is free.  Played as
users arrive:

1. B's b-hi (priority 50, 8 GPUs, saves nothing) would borrow 8: the free 8 less its 8,
   plus the 8 that A's lower-priority a-1 holds, is 8, below the 16 C is owed: the
   reserve holds it back, though it fits on the free node.
2. B's gang lo (two 8-GPU pods, priority 5, saving every 30 s) borrows 16, as the
   reserve lends to savers; its only plan takes the free node and, by
   ``borrowWithinCohort``, a-1's.  Derived from the rule: b-hi fits on the free node and
   may evict lo's pods (``withinQuota LowerPriority``), so no plan: a-1 is never marked.
3. C's admin ends its reserve (``muster.dev/guarantee-reserve-seconds: 0``): b-hi binds
   to the free node, evicting nothing, and lo, with one node's room it could free, still
   waits.  Without the rule, a-1 would have been evicted for lo, and b-hi would then
   have evicted lo.
"""

from __future__ import annotations

import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_elastic_shrink import CAN_PREEMPT
from test_guarantee_reserve import GPUS, SAVES, muster_reserve  # noqa: F401 (fixture)
from test_jobs import GANG_LABEL, MIN_AVAILABLE
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    TRAINER,
    Teams,
    tokens,
)

import localcluster as lc
from base import keys

pytestmark = pytest.mark.e2e

POLICY = {
    keys.WITHIN_QUOTA_ANNOTATION: "LowerPriority",
    keys.BORROW_WITHIN_COHORT_ANNOTATION: "LowerPriority",
}


@pytest.mark.parametrize("arrival", ["one by one", "burst"])
def test_a_borrower_evicts_no_one_for_room_its_higher_priority_job_takes(
    cluster: Cluster,
    muster_reserve: MusterProcess,  # noqa: F811 (the fixture imported above)
    arrival: str,
) -> None:
    """``one by one``: lo is created once b-hi has been held back; ``burst``: b-hi and
    lo's two pods are created back to back (b-hi first, as its user submitted it)."""
    free = [
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8}) for i in range(4)
    ]
    teams = Teams(
        cluster, {"min": {GPU: "0"}, "max": {GPU: "32"}}, {"min": {GPU: "8"}, "max": {GPU: "32"}}
    )
    owner = Teams(
        cluster,
        {"min": {GPU: "24"}, "max": {GPU: "32"}},
        {"min": {GPU: "0"}, "max": {GPU: "0"}},
        suffix="c",
    )
    try:
        teams.annotate_quota(teams.b, POLICY)
        one, five, fifty = (_priority_class(cluster, teams.a, v) for v in (1, 5, 50))
        teams.create(teams.a, "a-1", requests=GPUS, labels=PREEMPTIBLE, priority_class=one)
        teams.wait(teams.a, "a-1", "Running")
        teams.create(teams.b, "b-run", requests=GPUS, labels=TRAINER)
        teams.wait(teams.b, "b-run", "Running")
        owner.create(owner.a, "c-1", requests=GPUS, labels=TRAINER)
        owner.wait(owner.a, "c-1", "Running")
        for namespace, name in ((teams.a, "a-1"), (teams.b, "b-run"), (owner.a, "c-1")):
            free.remove((teams.get(namespace, name) or {})["spec"]["nodeName"])
        (free_node,) = free
        a1_node = (teams.get(teams.a, "a-1") or {})["spec"]["nodeName"]

        # 1. b-hi: held back by the reserve.
        teams.create(
            teams.b,
            "b-hi",
            requests=GPUS,
            labels={**PREEMPTIBLE, **CAN_PREEMPT},
            priority_class=fifty,
        )

        def held_back() -> list[str] | None:
            said = "guaranteeReserveSeconds"
            return muster_reserve.decision_reasons(teams.b, "b-hi", containing=said) or None

        if arrival == "one by one":
            lc.wait_until(
                held_back, timeout=60, what="b-hi held back", on_timeout=muster_reserve.log
            )

        # 2. lo: no plan, for b-hi would take the room.
        for i in range(2):
            teams.create(
                teams.b,
                f"lo-{i}",
                requests=GPUS,
                labels={**PREEMPTIBLE, **CAN_PREEMPT, GANG_LABEL: "lo"},
                annotations={**SAVES, MIN_AVAILABLE: "2"},
                priority_class=five,
            )
        said = "waits with a higher priority (50)"
        reasons = lc.wait_until(
            lambda: (
                muster_reserve.decision_reasons(teams.b, "lo-0", verb="postfilter", containing=said)
                or muster_reserve.decision_reasons(
                    teams.b, "lo-1", verb="postfilter", containing=said
                )
                or None
            ),
            timeout=60,
            what="lo's postfilter to name b-hi",
            on_timeout=muster_reserve.log,
        )
        assert f"job {teams.b}/b-hi of quota {teams.b}" in reasons[0], reasons
        assert held_back(), "b-hi was not held back by the reserve"
        a1 = teams.get(teams.a, "a-1") or {}
        assert a1["status"]["phase"] == "Running" and not a1["metadata"].get("deletionTimestamp")
        assert keys.SOFT_EVICTION_KEY not in a1["metadata"].get("labels", {})

        # 3. The reserve ends: b-hi takes the free node, and no one is evicted.
        owner.annotate_quota(owner.a, {keys.GUARANTEE_RESERVE_ANNOTATION: "0"})
        teams.wait(teams.b, "b-hi", "Running", timeout=60)
        assert (teams.get(teams.b, "b-hi") or {})["spec"]["nodeName"] == free_node
        a1 = teams.get(teams.a, "a-1") or {}
        assert a1["status"]["phase"] == "Running" and a1["spec"]["nodeName"] == a1_node
        assert keys.SOFT_EVICTION_KEY not in a1["metadata"].get("labels", {})
        assert teams.events(teams.a, "Preempted") == [] and teams.events(teams.b, "Preempted") == []
        for i in range(2):
            lo = teams.get(teams.b, f"lo-{i}") or {}
            assert lo["status"]["phase"] == "Pending" and not lo["spec"].get("nodeName"), lo
    finally:
        teams.cleanup()
        owner.cleanup()
