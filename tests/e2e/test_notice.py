"""Notice before eviction, live through a stock kube-scheduler (issue 34, item 2).

Muster runs with ``maxPreemptionNoticeSeconds: 60``; team B borrows the one 8-GPU node,
team A (min 8) reclaims it.  Derived from the rule: the victim is marked as ever (label,
signed annotation carrying its notice, ``DisruptionTarget``, event); then

- a job that saves its work and exits (the kubelet stand-in plays one: it exits, then
  writes ``muster.dev/checkpointed``) is not evicted at all, and team A's job runs long
  before its 60 s of notice would have run out (a job that writes the annotation before
  it exits is evicted at once instead: ``tests/unit/test_notice.py``);
- a job that ignores its 8 s of notice is evicted when the notice runs out, not before;
- a second job arriving while the first plan's victim is on notice takes another victim,
  and each victim is marked once;
- a lone pod whose victim is on notice takes room that frees elsewhere meanwhile, and
  the victim, no longer needed, is spared: its mark is taken back and it keeps running.
"""

from __future__ import annotations

import math
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


def _two_nodes_team_a_owns(cluster: Cluster) -> Teams:
    """Two 8-GPU nodes; team A's quota is both (min = max = 16), team B's nothing (min 0,
    max 16: all it uses it borrows)."""
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    return Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "16"}}, {"min": {GPU: "0"}, "max": {GPU: "16"}}
    )


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


def mark_notice(teams: Teams, name: str) -> float:
    """The notice team B's marked pod ``name`` is given, as its mark says."""
    pod = teams.get(teams.b, name)
    assert pod is not None
    return read_mark(pod["metadata"]["annotations"][SOFT_EVICTION]).notice_seconds


def evicted_at(teams: Teams, name: str) -> float:
    """When team B's pod ``name`` was first seen being deleted (or gone)."""

    def leaving() -> float | None:
        pod = teams.get(teams.b, name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return time.time()
        return None

    return lc.wait_until(leaving, timeout=60, what=f"{name} evicted")


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
        evicted = evicted_at(teams, "b-0")
        assert evicted >= at + 8 - 1  # not before its notice ran out (1 s: the stamps)
        teams.wait(teams.a, "train", "Running", timeout=60)
        assert evictor_outcome(muster_with_notice, "evicted") == 1
    finally:
        teams.cleanup()


def test_a_victim_that_saves_at_an_interval_is_given_notice_to_its_next_save(
    cluster: Cluster, muster_with_notice: MusterProcess
) -> None:
    """b-0 declares no notice but saves every 15 s from its start (``muster.dev/
    checkpoint-interval-seconds``), and the cap is 60 s.  Marked at M, 5 s or more into an
    interval (so it has more than the 2 s margin of work to save), it gets notice until 2 s
    after its next save: S + k·15 + 2 - M, where S is its start and k the first multiple
    with S + k·15 > M (the stamps have one-second resolution: ±1 s); it is evicted when
    that runs out, not before, and the trainer then runs."""
    cluster.create_node("n0", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(cluster, *QUOTAS)
    try:
        notes = {"muster.dev/checkpoint-interval-seconds": "15"}
        teams.create(teams.b, "b-0", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=notes)
        teams.wait(teams.b, "b-0", "Running")
        started = _epoch(teams.get(teams.b, "b-0")["status"]["startTime"])  # type: ignore[index]
        # Arrive 5 s into an interval: well past the 2 s margin, well before the next save.
        lc.wait_until(
            lambda: (
                ((time.time() - started) % 15 >= 5 or None) if time.time() > started + 5 else None
            ),
            timeout=20,
            what="5 s into an interval",
        )
        teams.create(teams.a, "train", requests={GPU: 8}, labels=TRAINER)
        at = marked_at(teams, "b-0")
        notice = mark_notice(teams, "b-0")
        following = started + (math.floor((at - started) / 15) + 1) * 15
        assert abs(notice - (following + 2 - at)) <= 1.0, (notice, at - started)
        evicted = evicted_at(teams, "b-0")
        assert evicted >= at + notice - 1  # not before its notice ran out (the stamps)
        teams.wait(teams.a, "train", "Running", timeout=60)
    finally:
        teams.cleanup()


def test_a_victim_bound_but_not_yet_started_counts_its_saves_from_its_binding(
    cluster: Cluster, control_plane: lc.ControlPlane, muster_with_notice: MusterProcess
) -> None:
    """b-0 saves every 40 s from its start, and team B's notice cap is 30 s.  It is created
    at C while no node exists, and bound at B, 15 s or more later, to a node whose kubelet
    does not answer (the stand-in leaves its pods unstarted: no ``startTime``, as while a
    kubelet is slow to report).  Team A's train then reclaims the node at M, a few seconds
    after B.  Derived from the rule: its work began at its binding, so its next save is at
    B + 40, and notice to it would be B + 42 - M, over the cap: no notice, evicted at once.
    Counted from its creation instead, it would save at C + 40 and get C + 42 - M, about
    25 s, within the cap: notice for a save its pod never makes."""
    kubelet = control_plane.kubelet
    assert kubelet is not None
    teams = Teams(cluster, *QUOTAS)
    lost = f"{cluster.namespace}-n0"[:63].rstrip("-")  # the name create_node gives it
    kubelet.lost_nodes.add(lost)
    try:
        teams.annotate_quota(teams.b, {"muster.dev/max-preemption-notice-seconds": "30"})
        every = {"muster.dev/checkpoint-interval-seconds": "40"}
        teams.create(teams.b, "b-0", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=every)
        created = _epoch((teams.get(teams.b, "b-0") or {})["metadata"]["creationTimestamp"])
        lc.wait_until(lambda: time.time() >= created + 15 or None, timeout=30, what="C + 15 s")
        assert cluster.create_node("n0", {"cpu": "32", "memory": "128Gi", GPU: 8}) == lost

        def binding() -> str | None:
            pod = teams.get(teams.b, "b-0") or {}
            for condition in pod.get("status", {}).get("conditions", []):
                if condition["type"] == "PodScheduled" and condition["status"] == "True":
                    return str(condition["lastTransitionTime"])
            return None

        bound = lc.wait_until(binding, timeout=30, what="b-0 bound")
        assert _epoch(bound) >= created + 15
        assert "startTime" not in (teams.get(teams.b, "b-0") or {})["status"]
        lc.wait_until(
            lambda: (
                muster_with_notice.debug(f"pods/{teams.b}/b-0").get("workStarted") == bound or None
            ),
            timeout=30,
            what="Muster to count b-0's work from its binding",
        )
        teams.create(teams.a, "train", requests={GPU: 8}, labels=TRAINER)
        at = marked_at(teams, "b-0")
        assert at - _epoch(bound) < 10  # so B + 42 - M is over the 30 s cap
        assert mark_notice(teams, "b-0") == 0
        assert evicted_at(teams, "b-0") < at + 15  # C + 42 - M would be about 25 s
    finally:
        kubelet.lost_nodes.discard(lost)
        teams.force_delete(teams.b, "b-0")
        teams.cleanup()


def test_of_two_savers_the_one_about_to_save_goes(
    cluster: Cluster, muster_with_notice: MusterProcess
) -> None:
    """Two 8-GPU nodes that team B borrows with b-old, then b-new, each saving every 20 s
    from its start (S0, then S1 = S0 + d, d of 10 to 13 s), the cap 60 s.  Team A (min 16)
    sends train (8 GPUs) at M, 16 s into b-old's interval: b-old saves next at M + 4, its
    notice 6 s; b-new is 16 - d (3 to 6) s into its own, more than the 2 s margin, its
    notice 20 - (16 - d) + 2 = 6 + d (16 to 19) s.  The walk takes the latest start,
    b-new; its notice is over 10 s, so the planner searches again sparing it: b-old, one
    victim too, each losing only the 2 s margin after its save: the shorter wait decides.
    Derived so: b-old is marked with about 6 s of notice and evicted, train runs on its
    node, and b-new is never marked."""
    teams = _two_nodes_team_a_owns(cluster)
    try:
        every = {"muster.dev/checkpoint-interval-seconds": "20"}

        def started(name: str) -> float:
            return _epoch((teams.get(teams.b, name) or {})["status"]["startTime"])

        teams.create(teams.b, "b-old", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=every)
        teams.wait(teams.b, "b-old", "Running")
        s0 = started("b-old")
        lc.wait_until(lambda: time.time() >= s0 + 10 or None, timeout=20, what="S0 + 10 s")
        teams.create(teams.b, "b-new", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=every)
        teams.wait(teams.b, "b-new", "Running")
        d = started("b-new") - s0
        assert 10 <= d <= 13, d  # else the arithmetic above does not hold: a slow machine
        old_node = (teams.get(teams.b, "b-old") or {})["spec"]["nodeName"]
        lc.wait_until(
            lambda: (
                (16 <= (time.time() - s0) % 20 <= 16.8 or None)
                if time.time() > s0 + d + 3
                else None
            ),
            timeout=30,
            what="16 s into b-old's interval",
        )
        teams.create(teams.a, "train", requests={GPU: 8}, labels=TRAINER)
        at = marked_at(teams, "b-old")
        notice = mark_notice(teams, "b-old")
        assert notice <= 8, (notice, at - s0)  # 6 s, give or take the stamps and the trip
        evicted_at(teams, "b-old")
        teams.wait(teams.a, "train", "Running", timeout=60)
        assert (teams.get(teams.a, "train") or {})["spec"]["nodeName"] == old_node
        b_new = teams.get(teams.b, "b-new") or {}
        assert SOFT_EVICTION not in b_new["metadata"].get("annotations", {})
        assert b_new["status"]["phase"] == "Running"
    finally:
        teams.cleanup()


def test_a_job_arriving_while_a_victim_is_on_notice_takes_another_victim(
    cluster: Cluster, muster_with_notice: MusterProcess
) -> None:
    # Two 8-GPU nodes, both borrowed by team B's pods, each asking 10 s of notice and
    # ignoring it.  Team A (min 16) sends one 8-GPU job, then a second while the first's
    # victim is still on notice.  Derived from the rules: the victim on notice is already
    # leaving for the first job (its room is reserved for it), so the second job's plan
    # must take the other pod, not the same one again nor wait on it; each victim is
    # marked once, and both of A's jobs run, one per node.
    teams = _two_nodes_team_a_owns(cluster)
    try:
        notes = {NOTICE: "10"}
        for i in range(2):
            teams.create(
                teams.b, f"b-{i}", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=notes
            )
        for i in range(2):
            teams.wait(teams.b, f"b-{i}", "Running")

        def marked() -> list[str]:
            return [
                name
                for name in ("b-0", "b-1")
                if SOFT_EVICTION
                in ((teams.get(teams.b, name) or {}).get("metadata") or {}).get("annotations", {})
            ]

        teams.create(teams.a, "train-0", requests={GPU: 8}, labels=TRAINER)
        first = lc.wait_until(lambda: marked() or None, timeout=30, what="a first victim")
        assert len(first) == 1
        at = marked_at(teams, first[0])
        teams.create(teams.a, "train-1", requests={GPU: 8}, labels=TRAINER)
        # The first victim is still on notice when the second job arrives.
        on_notice = teams.get(teams.b, first[0])
        assert on_notice is not None and not on_notice["metadata"].get("deletionTimestamp")
        assert time.time() < at + 10
        both = lc.wait_until(
            lambda: (len(m := marked()) == 2 and m) or None, timeout=30, what="a second victim"
        )
        assert sorted(both) == ["b-0", "b-1"]
        for name in ("train-0", "train-1"):
            teams.wait(teams.a, name, "Running", timeout=60)
        nodes = {(teams.get(teams.a, n) or {})["spec"]["nodeName"] for n in ("train-0", "train-1")}
        assert len(nodes) == 2  # one per node
        preempted = sorted(e["involvedObject"]["name"] for e in teams.events(teams.b, "Preempted"))
        assert preempted == ["b-0", "b-1"]  # each victim marked once
        assert evictor_outcome(muster_with_notice, "evicted") == 2
    finally:
        teams.cleanup()


def test_a_victim_on_notice_is_spared_when_its_job_finds_room_elsewhere(
    cluster: Cluster, muster_with_notice: MusterProcess
) -> None:
    # Two 8-GPU nodes.  Team A (min 16) runs a-0 on one; team B borrows the other with
    # b-0, asking 20 s of notice and ignoring it.  A's train (one 8-GPU pod) arrives:
    # within A's min, it reclaims b-0 (a-0, of its own quota and equal priority, is no
    # victim), and b-0 gets its 20 s.  Then a-0 ends (deleted): its node is free, and
    # train, admitted now with b-0 kept, fits team A's quota (8 of 16).  Derived from the
    # rule: train binds there, and b-0, no longer needed, is spared: its mark is taken
    # back and it is still running after its notice would have run out; the evictor
    # evicts nothing.
    teams = _two_nodes_team_a_owns(cluster)
    try:
        teams.create(teams.a, "a-0", requests={GPU: 8}, labels=TRAINER)
        teams.wait(teams.a, "a-0", "Running")
        freed = (teams.get(teams.a, "a-0") or {})["spec"]["nodeName"]
        notes = {NOTICE: "20"}
        teams.create(teams.b, "b-0", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=notes)
        teams.wait(teams.b, "b-0", "Running")
        teams.create(teams.a, "train", requests={GPU: 8}, labels=TRAINER)
        at = marked_at(teams, "b-0")
        cluster.rest.request("DELETE", f"/api/v1/namespaces/{teams.a}/pods/a-0")
        teams.wait(teams.a, "train", "Running", timeout=15)
        assert (teams.get(teams.a, "train") or {})["spec"]["nodeName"] == freed
        lc.wait_until(
            lambda: (
                (
                    (p := teams.get(teams.b, "b-0")) is not None
                    and SOFT_EVICTION not in p["metadata"].get("labels", {})
                )
                or None
            ),
            timeout=15,
            what="b-0's mark taken back",
        )
        assert time.time() < at + 20  # spared before its notice ran out
        # Past the notice it would have had (and a margin): still running, never evicted.
        lc.wait_until(lambda: time.time() > at + 24 or None, timeout=30, what="its notice over")
        b0 = teams.get(teams.b, "b-0")
        assert b0 is not None and b0["status"]["phase"] == "Running"
        assert not b0["metadata"].get("deletionTimestamp")
        assert evictor_outcome(muster_with_notice, "evicted") == 0
    finally:
        teams.cleanup()
