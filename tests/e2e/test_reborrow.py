"""Reborrow backoff, live through a stock kube-scheduler (issue 34, item 3).

With ``reborrowBackoffSeconds: 30``, team B (min 0) borrows both nodes with b-0, then b-1;
team A's train (within its min 8) reclaims, taking b-1, the newer borrower.  Once b-1 has
gone its controller's stand-in (the test) creates it again, train runs on its node, and
b-0 completes, freeing the other node.  Derived from the rule: b-1 was taken back once by
a plan made after train was created, so it may not borrow before that plus 30 s; it waits
with the backoff's reason, then binds on the free node once the backoff ends (Muster
nudges the parked pod).  Without the rule it would bind as soon as b-0 is gone.
"""

from __future__ import annotations

import time
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
    fill_with_borrowers,
    muster_with_arguments,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e

BACKOFF = 30.0


@pytest.fixture
def muster_reborrow(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    with muster_with_arguments(
        control_plane, tmp_path, tokens, {"reborrowBackoffSeconds": BACKOFF}
    ) as muster:
        yield muster


def test_a_borrower_taken_back_waits_out_its_backoff_then_borrows_again(
    cluster: Cluster, muster_reborrow: MusterProcess
) -> None:
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "16"}}, {"min": {GPU: "0"}, "max": {GPU: "16"}}
    )
    borrower = {"requests": {"cpu": "4", GPU: 8}, "labels": PREEMPTIBLE}
    try:
        fill_with_borrowers(teams, 2)
        asked = time.time()  # the plan that takes b-1 back is made after this
        teams.create(teams.a, "train", requests={"cpu": "4", GPU: 8}, labels=TRAINER)
        lc.wait_until(
            lambda: teams.get(teams.b, "b-1") is None or None, timeout=60, what="b-1 reclaimed"
        )
        assert teams.get(teams.b, "b-0") is not None  # the older borrower stays
        teams.create(teams.b, "b-1", **borrower)  # its controller would create it again
        teams.wait(teams.a, "train", "Running", timeout=60)
        cluster.rest.request("DELETE", f"/api/v1/namespaces/{teams.b}/pods/b-0")
        lc.wait_until(
            lambda: teams.get(teams.b, "b-0") is None or None, timeout=60, what="b-0 gone"
        )

        def turned_away_for_backoff() -> list[str] | None:
            explained = muster_reborrow.debug(f"pods/{teams.b}/b-1")
            reasons = [
                reason
                for decision in explained.get("decisions", [])
                for reason in decision.get("reasons", [])
                if "taken back by another quota 1 time" in reason
            ]
            return reasons or None

        reasons = lc.wait_until(turned_away_for_backoff, timeout=30, what="the backoff's reason")
        assert "reborrowBackoffSeconds" in reasons[0]

        def bound() -> float | None:
            node = ((teams.get(teams.b, "b-1") or {}).get("spec") or {}).get("nodeName")
            return time.time() if node else None

        bound_at = lc.wait_until(bound, timeout=60, what="b-1 bound after its backoff")
        # Not before its backoff could end (the plan came after ``asked``), and once it
        # ends, within the nudge's round and kube-scheduler's retry.
        assert bound_at >= asked + BACKOFF
        teams.wait(teams.b, "b-1", "Running", timeout=30)
    finally:
        teams.cleanup()
