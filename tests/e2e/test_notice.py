"""Notice before eviction, live through a stock kube-scheduler (issue 34, item 2).

Muster runs with ``maxPreemptionNoticeSeconds: 60``; team B borrows the one 8-GPU node,
team A (min 8) reclaims it.  Derived from the rule: the victim is marked as ever (label,
signed annotation carrying its notice, ``DisruptionTarget``, event); then

- a job that saves its work and exits (the kubelet stand-in plays one: it exits, then
  writes ``muster.dev/checkpointed``) is not evicted at all, and team A's job runs long
  before its 60 s of notice would have run out (a job that writes the annotation before
  it exits is evicted at once instead: ``tests/unit/test_notice.py``);
- a job that ignores its 8 s of notice is evicted when the notice runs out, not before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_support import Cluster
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    SOFT_EVICTION,
    TRAINER,
    Teams,
    _epoch,
    muster_with_arguments,
    tokens,
)

import localcluster as lc
from extender.core.marks import read_mark

pytestmark = pytest.mark.e2e

NOTICE = "muster.dev/preemption-notice-seconds"
CHECKPOINTED = "muster.dev/checkpointed"
QUOTAS = ({"min": {GPU: "8"}, "max": {GPU: "8"}}, {"min": {GPU: "0"}, "max": {GPU: "8"}})


@pytest.fixture
def muster_with_notice(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    with muster_with_arguments(
        control_plane, tmp_path, tokens, {"maxPreemptionNoticeSeconds": 60}
    ) as muster:
        yield muster


def evictor_outcome(muster: MusterProcess, outcome: str) -> float:
    assert muster.evictor_metrics_url is not None
    for line in httpx.get(muster.evictor_metrics_url, timeout=5).text.splitlines():
        if line.startswith(f'muster_evictor_evictions_total{{outcome="{outcome}"}}'):
            return float(line.split()[-1])
    return 0.0


def marked_at(teams: Teams, name: str) -> float:
    """When the victim's mark was written, and with how much notice."""
    pod = lc.wait_until(
        lambda: (
            (
                (p := teams.get(teams.b, name))
                and SOFT_EVICTION in p["metadata"].get("annotations", {})
                and p
            )
            or None
        ),
        timeout=30,
        what=f"{name} marked",
    )
    mark = read_mark(pod["metadata"]["annotations"][SOFT_EVICTION])
    assert mark.timestamp is not None
    return mark.timestamp


def test_a_job_that_saves_its_work_on_notice_exits_and_is_not_evicted(
    cluster: Cluster, muster_with_notice: MusterProcess
) -> None:
    cluster.create_node("n0", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(cluster, *QUOTAS)
    try:
        notes = {NOTICE: "60", lc.ANSWERS_NOTICE: "true"}
        teams.create(teams.b, "b-0", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=notes)
        teams.wait(teams.b, "b-0", "Running")
        teams.create(teams.a, "train", requests={GPU: 8}, labels=TRAINER)
        at = marked_at(teams, "b-0")
        teams.wait(teams.a, "train", "Running", timeout=45)
        assert time.time() < at + 60  # it did not wait out the notice
        b0 = lc.wait_until(
            lambda: (
                (
                    (p := teams.get(teams.b, "b-0"))
                    and CHECKPOINTED in p["metadata"].get("annotations", {})
                    and p
                )
                or None
            ),
            timeout=30,
            what="b-0 to say it saved its work",
        )
        assert b0["status"]["phase"] == "Succeeded"  # it exited by itself...
        assert _epoch(b0["metadata"]["annotations"][CHECKPOINTED]) >= at - 1  # ...saved
        lc.wait_until(
            lambda: evictor_outcome(muster_with_notice, "exited") == 1 or None,
            timeout=30,
            what="the evictor to see it exit",
        )
        assert evictor_outcome(muster_with_notice, "evicted") == 0
        assert [e["involvedObject"]["name"] for e in teams.events(teams.b, "Preempted")] == ["b-0"]
    finally:
        teams.cleanup()


def test_a_job_that_ignores_its_notice_is_evicted_when_it_runs_out(
    cluster: Cluster, muster_with_notice: MusterProcess
) -> None:
    cluster.create_node("n0", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(cluster, *QUOTAS)
    try:
        notes = {NOTICE: "8"}
        teams.create(teams.b, "b-0", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=notes)
        teams.wait(teams.b, "b-0", "Running")
        teams.create(teams.a, "train", requests={GPU: 8}, labels=TRAINER)
        at = marked_at(teams, "b-0")

        def leaving() -> float | None:
            pod = teams.get(teams.b, "b-0")
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                return time.time()
            return None

        evicted = lc.wait_until(leaving, timeout=60, what="b-0 evicted")
        assert evicted >= at + 8 - 1  # not before its notice ran out (1 s: the stamps)
        teams.wait(teams.a, "train", "Running", timeout=60)
        assert evictor_outcome(muster_with_notice, "evicted") == 1
    finally:
        teams.cleanup()
