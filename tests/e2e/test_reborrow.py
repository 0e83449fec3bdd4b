"""Reborrow backoff, live through a stock kube-scheduler (issue 34, item 3).

With ``reborrowBackoffSeconds: 30``, team B (min 0) borrows both nodes with b-0, then b-1;
team A's train (within its min 8) reclaims one of them.  Once it has gone its
controller's stand-in (the test) creates it again, train runs on its node, and the other
borrower completes, freeing the other node.  Derived from the rule: the re-created pod's
job was taken back once, by a plan made after train was created, so it may not borrow
before that plus 30 s; it waits with the backoff's reason, then binds on the free node
once the backoff ends (Muster nudges the parked pod).  Without the rule it would bind as
soon as the other borrower is gone.
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
        asked = time.time()  # the plan that takes a borrower back is made after this
        teams.create(teams.a, "train", requests={"cpu": "4", GPU: 8}, labels=TRAINER)

        def one_taken() -> tuple[str, str] | None:
            gone = [name for name in ("b-0", "b-1") if teams.get(teams.b, name) is None]
            if len(gone) != 1:
                return None
            return gone[0], "b-1" if gone[0] == "b-0" else "b-0"

        # Both started in the same second or so: which one the plan takes is the walk's
        # order, not this rule's; one goes, the other stays.
        taken, kept = lc.wait_until(one_taken, timeout=60, what="one borrower reclaimed")
        teams.create(teams.b, taken, **borrower)  # its controller would create it again
        teams.wait(teams.a, "train", "Running", timeout=60)
        assert teams.get(teams.b, kept) is not None
        cluster.rest.request("DELETE", f"/api/v1/namespaces/{teams.b}/pods/{kept}")
        lc.wait_until(
            lambda: teams.get(teams.b, kept) is None or None, timeout=60, what=f"{kept} gone"
        )

        def turned_away_for_backoff() -> list[str] | None:
            said = "taken back by another quota 1 time"
            return muster_reborrow.decision_reasons(teams.b, taken, containing=said) or None

        reasons = lc.wait_until(turned_away_for_backoff, timeout=30, what="the backoff's reason")
        assert "reborrowBackoffSeconds" in reasons[0]

        def bound() -> float | None:
            node = ((teams.get(teams.b, taken) or {}).get("spec") or {}).get("nodeName")
            return time.time() if node else None

        bound_at = lc.wait_until(bound, timeout=60, what=f"{taken} bound after its backoff")
        # Not before its backoff could end (the plan came after ``asked``), and once it
        # ends, within the nudge's round and kube-scheduler's retry.
        assert bound_at >= asked + BACKOFF
        teams.wait(teams.b, taken, "Running", timeout=30)
    finally:
        teams.cleanup()
