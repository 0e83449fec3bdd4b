"""Borrowed pods placed apart from guaranteed ones, live (issue 35, item 3).

kube-scheduler runs the sample configuration (its own MostAllocated packing) with Muster's
prioritize verb on.  Three nodes of 8 GPUs; team B (min 0) runs b-0 (4 GPUs): it borrows.
Then team A (min 8) submits a-0 (4 GPUs): within its min.  Derived from the rule: packing
alone (kube-scheduler's and Muster's) puts a-0 beside b-0, on the fullest node; with
``borrowedApart`` Muster scores that node 0 and an empty one 5 (of 10), which outweighs
kube-scheduler's preference for the fuller node, so a-0 goes to another node and a
reclaim of b-0 would free its node whole.  Without it, a-0 lands beside b-0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2e_support import Cluster, sample_scheduler_config
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    Teams,
    muster_with_evictor,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e


@pytest.fixture(params=[True, False], ids=["apart", "packing-alone"])
def muster_prioritizing(
    request: pytest.FixtureRequest,
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[tuple[MusterProcess, bool]]:
    apart: bool = request.param
    config = tmp_path / "muster-args.yaml"
    config.write_text(yaml.safe_dump({"borrowedApart": apart}))

    def scheduler(url: str) -> tuple[lc.ExtenderConfig, dict[str, object]]:
        extender, profiles = sample_scheduler_config(url)
        return dataclasses.replace(extender, prioritize_verb="prioritize", weight=1), profiles

    with muster_with_evictor(
        control_plane, tmp_path, tokens, scheduler, extra_args=("--config", str(config))
    ) as muster:
        yield muster, apart


def test_a_guaranteed_pod_is_placed_apart_from_a_borrowed_one(
    cluster: Cluster, muster_prioritizing: tuple[MusterProcess, bool]
) -> None:
    _muster, apart = muster_prioritizing
    for i in range(3):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "24"}}, {"min": {GPU: "0"}, "max": {GPU: "24"}}
    )
    try:
        teams.create(teams.b, "b-0", requests={"cpu": "1", GPU: 4}, labels=PREEMPTIBLE)
        teams.wait(teams.b, "b-0", "Running")
        teams.create(teams.a, "a-0", requests={"cpu": "1", GPU: 4}, labels=PREEMPTIBLE)
        teams.wait(teams.a, "a-0", "Running")
        borrowed = (teams.get(teams.b, "b-0") or {})["spec"]["nodeName"]
        guaranteed = (teams.get(teams.a, "a-0") or {})["spec"]["nodeName"]
        assert (guaranteed != borrowed) is apart, (borrowed, guaranteed)
    finally:
        teams.cleanup()
