"""``victimRanking: LostWorkFirst``, live through a stock kube-scheduler (issue 34, item 1).

Two 8-GPU nodes; team A's quota is both (min = max = 16).  It runs sweep (priority 0,
saving nothing), then eval (priority 100) a second later at least, one 8-GPU pod each.
serve (priority 1000, 8 GPUs) arrives: the quota is full, so only team A's own
lower-priority work can make room (withinQuota LowerPriority), and either pod does.
Derived from the rule: both are below serve's priority, so under LostWorkFirst they rank
as one priority and the one losing less goes: eval, which started later (8 GPUs times
fewer seconds).  Under the default PriorityFirst sweep would go (priority 0 < 100; the
unit tests show both).  So eval is evicted, serve runs on its node, sweep keeps running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_muster_extender import GPU
from test_notice import _two_nodes_team_a_owns
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    TRAINER,
    _epoch,
    muster_with_arguments,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e


@pytest.fixture
def muster_lost_work_first(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    with muster_with_arguments(
        control_plane, tmp_path, tokens, {"victimRanking": "LostWorkFirst"}
    ) as muster:
        yield muster


def test_among_outranked_victims_the_one_losing_less_goes(
    cluster: Cluster, muster_lost_work_first: MusterProcess
) -> None:
    teams = _two_nodes_team_a_owns(cluster)
    try:
        low = _priority_class(cluster, teams.a, 0)
        normal = _priority_class(cluster, teams.a, 100)
        high = _priority_class(cluster, teams.a, 1000)
        requests = {"cpu": "4", GPU: 8}
        teams.create(teams.a, "sweep", requests=requests, labels=PREEMPTIBLE, priority_class=low)
        teams.wait(teams.a, "sweep", "Running")
        # Start times have a resolution of a second: eval starts a second later at least.
        started = _epoch((teams.get(teams.a, "sweep") or {})["status"]["startTime"])
        lc.wait_until(lambda: time.time() >= started + 1 or None, timeout=5, what="a second")
        teams.create(teams.a, "eval", requests=requests, labels=PREEMPTIBLE, priority_class=normal)
        teams.wait(teams.a, "eval", "Running")
        eval_node = (teams.get(teams.a, "eval") or {})["spec"]["nodeName"]
        teams.create(teams.a, "serve", requests=requests, labels=TRAINER, priority_class=high)
        lc.wait_until(
            lambda: teams.get(teams.a, "eval") is None or None, timeout=60, what="eval evicted"
        )
        teams.wait(teams.a, "serve", "Running", timeout=60)
        assert (teams.get(teams.a, "serve") or {})["spec"]["nodeName"] == eval_node
        sweep = teams.get(teams.a, "sweep")
        assert sweep is not None and sweep["status"]["phase"] == "Running"
        assert not sweep["metadata"].get("deletionTimestamp")
    finally:
        teams.cleanup()
