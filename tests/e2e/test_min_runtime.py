"""Minimum runtime, live through a stock kube-scheduler (issue 34, item 3).

With ``minRuntimeSeconds: 15``, team B borrows both nodes with b-0, then b-1; team A's
job, within its min, arrives at once.  Derived from the rule: both borrowers were admitted
less than 15 s ago, so nothing is evicted and the job waits, its refusal naming until when;
once b-0 (admitted first) has run 15 s it is the one reclaimed, not b-1, the newer one the
usual order would take, which is still protected; the job then runs on b-0's node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
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

pytestmark = pytest.mark.e2e

MIN_RUNTIME = 15.0


@pytest.fixture
def muster_min_runtime(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    with muster_with_arguments(
        control_plane, tmp_path, tokens, {"minRuntimeSeconds": MIN_RUNTIME}
    ) as muster:
        yield muster


def test_young_borrowers_are_spared_until_their_minimum_runtime(
    cluster: Cluster, muster_min_runtime: MusterProcess
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
            if name == "b-0":
                # b-1 is admitted a few seconds after b-0 (the scenario, not a wait for
                # something to happen): its minimum runtime ends clearly later.
                b0 = _epoch((teams.get(teams.b, "b-0") or {})["status"]["startTime"])
                lc.wait_until(lambda b0=b0: time.time() >= b0 + 4 or None, timeout=10, what="4 s")
        started = {
            name: _epoch((teams.get(teams.b, name) or {})["status"]["startTime"])
            for name in ("b-0", "b-1")
        }
        node_of_b0 = (teams.get(teams.b, "b-0") or {})["spec"]["nodeName"]
        teams.create(teams.a, "train", requests={"cpu": "4", GPU: 8}, labels=TRAINER)

        def refused_for_runtime() -> list[str] | None:
            reasons = muster_min_runtime.postfilter_reasons(teams.a, "train")
            spared = [r for r in reasons if r.startswith("spared for their minimum runtime")]
            return spared or None

        spared = lc.wait_until(refused_for_runtime, timeout=30, what="a refusal for runtime")
        assert f"{teams.b}/b-0 until" in spared[0] and f"{teams.b}/b-1 until" in spared[0]
        if time.time() < started["b-0"] + MIN_RUNTIME:
            # Still inside b-0's minimum: both borrowers run, the job waits.
            assert all(teams.get(teams.b, n) is not None for n in ("b-0", "b-1"))

        lc.wait_until(
            lambda: teams.get(teams.b, "b-0") is None or None, timeout=90, what="b-0 reclaimed"
        )
        # Not before its minimum runtime (startTime has a resolution of one second).
        assert time.time() >= started["b-0"] + MIN_RUNTIME - 1
        teams.wait(teams.a, "train", "Running", timeout=60)
        train: dict[str, Any] = teams.get(teams.a, "train") or {}
        assert train["spec"]["nodeName"] == node_of_b0
        b1 = teams.get(teams.b, "b-1")
        assert b1 is not None and b1["status"]["phase"] == "Running"
    finally:
        teams.cleanup()
