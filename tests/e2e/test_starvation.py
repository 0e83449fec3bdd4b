"""No starvation, live through a stock kube-scheduler (issue 35, item 4).

Three nodes of 2 GPUs (6 GPUs).  Team B runs a stream of 1-GPU pods, each running 6 s
(the kubelet stand-in's ``run-seconds``; the first six 1..6 s, so GPUs free one at a
time, about 1 s apart): the test keeps one more of them pending than there are GPUs
free, creating fresh ones as GPUs free, so any GPU that frees is taken within a moment.
Team A's gang ``train``, 2 pods of 2 GPUs (two whole nodes), is created once the stream
fills the cluster.  Both quotas guarantee 6 GPUs: every pod is admitted.

Derived from the rule (docs/quotas-and-preemption.md, "No starvation"):

- Without it (``starvationSeconds`` 0, the default) the gang needs two nodes with both
  GPUs free at once; GPUs free one at a time, and a stream pod takes each at once: the
  gang does not run (watched while 20 stream pods end, about 20 s).
- With ``starvationSeconds`` 4 and ``starvationHoldSeconds`` 90: 4 s after its pods
  were created the gang starves, and two nodes are held for it: the stream's pods, all
  created after it, of its priority and smaller, are kept off them.  Their pods end
  within 6 s, so the gang runs about 10 s after it was created, long before the hold's
  bound (94 s); the stream goes on on the third node.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    Teams,
    muster_with_arguments,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e

RUN = 6  # seconds each stream pod runs
QUOTA = {"min": {GPU: "6"}, "max": {GPU: "6"}}
GANG = ("train-0", "train-1")


@pytest.fixture
def muster_starvation(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    arguments = {"starvationSeconds": 4, "starvationHoldSeconds": 90}
    with muster_with_arguments(control_plane, tmp_path, tokens, arguments) as muster:
        yield muster


@pytest.fixture
def muster_without(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    with muster_with_arguments(control_plane, tmp_path, tokens, {}) as muster:
        yield muster


class Stream:
    """Team B's 1-GPU pods: one more pending than GPUs free, each running ``RUN`` s."""

    def __init__(self, cluster: Cluster, teams: Teams) -> None:
        self.cluster, self.teams = cluster, teams
        self.made = 0
        self.ended = 0

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{namespace}/pods"
        items: list[dict[str, Any]] = self.cluster.rest.request("GET", path)["items"]
        return items

    def top_up(self) -> None:
        used = 0
        pending = 0
        ended = 0
        for namespace in (self.teams.a, self.teams.b):
            for pod in self.pods(namespace):
                phase = pod.get("status", {}).get("phase")
                if phase in ("Succeeded", "Failed"):
                    ended += namespace == self.teams.b
                elif pod["spec"].get("nodeName"):
                    requests = pod["spec"]["containers"][0]["resources"]["requests"]
                    used += int(requests.get(GPU, "0"))
                elif namespace == self.teams.b:
                    pending += 1
        self.ended = ended
        for _ in range(6 - used + 1 - pending):
            self.teams.create(
                self.teams.b,
                f"s-{self.made}",
                requests={"cpu": "100m", GPU: 1},
                # The first six run 1..6 s, so GPUs free one at a time, about 1 s
                # apart; their successors run RUN s each and keep that spacing.
                annotations={lc.RUN_SECONDS: str(min(self.made + 1, RUN))},
            )
            self.made += 1

    def gang_running(self) -> bool:
        return all(
            (self.teams.get(self.teams.a, name) or {}).get("status", {}).get("phase") == "Running"
            for name in GANG
        )


def _start(cluster: Cluster) -> tuple[Teams, Stream]:
    for i in range(3):
        cluster.create_node(f"n{i}", {"cpu": "8", "memory": "32Gi", GPU: 2})
    teams = Teams(cluster, QUOTA, QUOTA)
    stream = Stream(cluster, teams)
    stream.top_up()
    # The stream fills the cluster (6 GPUs bound), then the gang is created.
    lc.wait_until(
        lambda: (stream.top_up(), stream.made >= 7 and _bound(stream) == 6)[1] or None,
        timeout=60,
        what="the stream filling the cluster",
    )
    for name in GANG:
        teams.create(
            teams.a,
            name,
            requests={"cpu": "100m", GPU: 2},
            labels={"pod-group.scheduling.sigs.k8s.io": "train"},
            annotations={"muster.dev/min-available": "2"},
        )
    return teams, stream


def _bound(stream: Stream) -> int:
    return sum(
        1
        for pod in stream.pods(stream.teams.b)
        if pod["spec"].get("nodeName")
        and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
    )


def test_a_starving_gang_runs_under_a_stream_of_small_pods(
    cluster: Cluster, muster_starvation: MusterProcess
) -> None:
    teams, stream = _start(cluster)
    try:

        def placed() -> bool | None:
            stream.top_up()
            return stream.gang_running() or None

        # Within the hold's bound: starvationSeconds + starvationHoldSeconds = 94 s.
        lc.wait_until(placed, timeout=90, what="the starving gang running")
        # The stream went on beside it, on the node not held.
        lc.wait_until(
            lambda: (stream.top_up(), _bound(stream) >= 1)[1] or None,
            timeout=30,
            what="a stream pod running beside the gang",
        )
    finally:
        teams.cleanup()


def test_without_the_rule_the_gang_starves(cluster: Cluster, muster_without: MusterProcess) -> None:
    teams, stream = _start(cluster)
    try:
        ended_before = stream.ended
        ran: list[bool] = []

        def stream_went_on_or_gang_ran() -> bool | None:
            stream.top_up()
            if stream.gang_running():
                ran.append(True)
                return True
            return stream.ended - ended_before >= 20 or None

        # 6 GPUs, 6 s each: 20 stream pods end in about 20 s; allow 60.
        lc.wait_until(stream_went_on_or_gang_ran, timeout=60, what="20 stream pods ended")
        assert not ran, "the gang ran without the rule"
        assert not stream.gang_running()
    finally:
        teams.cleanup()
