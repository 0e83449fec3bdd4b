"""Fair sharing, live through a stock kube-scheduler (issue 35, item 1), with
``fairSharing: true`` (the chart's setting).

Four nodes of one GPU: capacity 4 GPUs.  Team A and team B both have ``min`` 0 and ``max``
4 GPUs, so everything either runs is borrowed; a quota's share is the GPUs it runs over
4, divided by its weight (docs/quotas-and-preemption.md, "Fair sharing").  Only waiting
work that could run once room frees holds others back: a tenant's pod that fits no node
does not, written with the tenant's own namespace-scoped token.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster, make_pod, tenant_client
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    SOFT_EVICTION,
    Teams,
    muster_with_arguments,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e

BORROWER = {**PREEMPTIBLE, "quota.scheduling.koordinator.sh/can-preempt": "true"}
QUOTA = {"min": {GPU: "0"}, "max": {GPU: "4"}}


@pytest.fixture
def muster_fair(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    with muster_with_arguments(control_plane, tmp_path, tokens, {"fairSharing": True}) as muster:
        yield muster


def _teams(cluster: Cluster, weight_a: str) -> Teams:
    for i in range(4):
        cluster.create_node(f"n{i}", {"cpu": "8", "memory": "32Gi", GPU: 1})
    teams = Teams(cluster, QUOTA, QUOTA)
    teams.annotate_quota(teams.a, {"muster.dev/fair-sharing-weight": weight_a})
    return teams


def _gang(
    teams: Teams,
    name: str,
    size: int,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
    **extra: Any,
) -> None:
    """Team A's pods ``name-0``... of one pod group, a GPU each: a gang of ``size``
    (``muster.dev/min-available``) unless ``annotations`` declare otherwise."""
    for i in range(size):
        teams.create(
            teams.a,
            f"{name}-{i}",
            requests={"cpu": "1", GPU: 1},
            labels={**labels, "pod-group.scheduling.sigs.k8s.io": name},
            annotations=annotations or {"muster.dev/min-available": str(size)},
            **extra,
        )


def _running(teams: Teams, namespace: str, name: str) -> bool:
    pod: dict[str, Any] | None = teams.get(namespace, name)
    return pod is not None and pod["status"].get("phase") == "Running"


def test_a_borrower_below_its_share_takes_back_from_one_above_it(
    cluster: Cluster, muster_fair: MusterProcess
) -> None:
    # Team B runs b-0..b-3 (share 4/4 = 1.0), created one after another.  Team A's gang
    # of 2 (share 0) borrows too, so without fair sharing it takes nothing
    # (borrowWithinCohort Never).  With it: after the plan team A's share is 2/4 = 0.5
    # and team B's 0.5, the gap 1.0 -> 0: exactly two of team B's pods go (which two is
    # the least lost work's choice; they start within the second here), two keep running.
    # A third victim would widen the gap again (A 0.5 or more, B 0.25): never more.
    teams = _teams(cluster, "1")
    try:
        for i in range(4):
            teams.create(teams.b, f"b-{i}", requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
            teams.wait(teams.b, f"b-{i}", "Running")
        _gang(teams, "a-train", 2, BORROWER)
        for i in range(2):
            teams.wait(teams.a, f"a-train-{i}", "Running", timeout=90)
        names = [f"b-{i}" for i in range(4)]
        lc.wait_until(
            lambda: sum(teams.get(teams.b, name) is None for name in names) == 2 or None,
            timeout=60,
            what="two of team B's pods evicted",
        )
        assert sum(_running(teams, teams.b, name) for name in names) == 2
    finally:
        teams.cleanup()


def test_a_borrower_takes_back_only_until_the_shares_meet(
    cluster: Cluster, muster_fair: MusterProcess
) -> None:
    # As above (weights 1, team B runs b-0..b-3: share 1.0), but team A's gang is of 3:
    # once admitted team A's share is 3/4 = 0.75.  Victims are checked one by one: the
    # first leaves team B at 3/4 = 0.75, level with team A (allowed); the second would
    # leave it at 2/4 = 0.5, below team A (the gap reversed, and team B could take the room
    # back the same way): spared, reported as "1.000 before, 0.500 after".  One victim is
    # room for one pod of three: no plan, nothing marked, the gang waits
    # (tests/scenarios/fair-share-does-not-cross.yaml, in simulate).  With b-0 and b-1
    # gone, 2 GPUs free, it needs one victim: team B from 2/4 = 0.5 to 0.25, below team
    # A's 0.75 again: still no plan ("0.500 before, 0.250 after").  With b-2 gone too, 3
    # are free: the gang runs and b-3 is never touched.
    teams = _teams(cluster, "1")
    names = [f"b-{i}" for i in range(4)]
    gang = [f"a-train-{i}" for i in range(3)]

    def refused_with(shares: str) -> bool | None:
        reasons = [
            reason
            for name in gang
            for reason in muster_fair.postfilter_reasons(teams.a, name)
            if f"would leave quota {teams.a}'s above it" in reason
        ]
        return any(shares in reason for reason in reasons) or None

    def untouched(name: str) -> bool:
        pod = teams.get(teams.b, name) or {}
        labels = pod.get("metadata", {}).get("labels", {})
        return _running(teams, teams.b, name) and SOFT_EVICTION not in labels

    try:
        for name in names:
            teams.create(teams.b, name, requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
            teams.wait(teams.b, name, "Running")
        _gang(teams, "a-train", 3, BORROWER)
        lc.wait_until(
            lambda: refused_with("1.000 before, 0.500 after"),
            timeout=60,
            what="a second victim refused for reversing the gap",
        )
        assert all(untouched(name) for name in names)
        for name in ("b-0", "b-1"):
            teams.delete_now(teams.b, name)
        lc.wait_until(
            lambda: refused_with("0.500 before, 0.250 after"),
            timeout=60,
            what="one victim refused for reversing the gap",
        )
        assert untouched("b-2") and untouched("b-3")
        assert not any(_running(teams, teams.a, name) for name in gang)
        teams.delete_now(teams.b, "b-2")
        for name in gang:
            teams.wait(teams.a, name, "Running", timeout=90)
        assert untouched("b-3")
    finally:
        teams.cleanup()


def test_a_borrower_waits_while_a_quota_below_its_share_has_work_waiting(
    cluster: Cluster, muster_fair: MusterProcess
) -> None:
    # Team A weighs 2.  Team B runs b-0 and b-1 (share 2/4 = 0.5).  Team A's gang of 3
    # (it may not preempt) does not fit the 2 free GPUs; once admitted its share would
    # be (3/4) / 2 = 0.375.  Team B's b-2 would take team B to 3/4 = 0.75 > 0.375: it
    # waits, and the 2 free GPUs stay free.  When b-0 ends, 3 are free and the gang runs.
    # (First come, first served, b-2 would take a free GPU at once, and after b-0 ended
    # only 2 would be free: the gang would still wait.)
    teams = _teams(cluster, "2")
    try:
        for i in range(2):
            teams.create(teams.b, f"b-{i}", requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
            teams.wait(teams.b, f"b-{i}", "Running")
        _gang(teams, "a-big", 3, PREEMPTIBLE)
        teams.create(teams.b, "b-2", requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)

        def refused_for_fair_share() -> bool | None:
            pod = teams.get(teams.b, "b-2") or {}
            assert not pod.get("spec", {}).get("nodeName"), "b-2 was bound"
            conditions = pod.get("status", {}).get("conditions", [])
            messages = [c.get("message", "") for c in conditions if c.get("type") == "PodScheduled"]
            return any("fair share" in message for message in messages) or None

        lc.wait_until(refused_for_fair_share, timeout=60, what="b-2 held back by fair sharing")
        cluster.rest.request(
            "DELETE", f"/api/v1/namespaces/{teams.b}/pods/b-0", query={"gracePeriodSeconds": 0}
        )
        for i in range(3):
            teams.wait(teams.a, f"a-big-{i}", "Running", timeout=90)
        # The gang fills the 3 GPUs b-1 leaves: b-2 has no room.
        assert not (teams.get(teams.b, "b-2") or {}).get("spec", {}).get("nodeName")
    finally:
        teams.cleanup()


def test_a_borrower_of_higher_priority_is_not_held_back_for_lower_priority_work(
    cluster: Cluster, muster_fair: MusterProcess
) -> None:
    # As above (team A weighs 2, team B runs b-0 and b-1, team A's gang of 3 waits with a
    # share of 0.375 once admitted, team B's b-2 would take team B to 0.75), but b-2 is of
    # priority 500 and the gang of 10.  Fair sharing divides what is borrowed among the
    # jobs of a priority: work of lower priority holds no job back, so b-2 binds at once
    # to a free GPU, where at equal priority it waits (the test above).
    teams = _teams(cluster, "2")
    try:
        low = _priority_class(cluster, teams.a, 10)
        high = _priority_class(cluster, teams.b, 500)
        for i in range(2):
            teams.create(teams.b, f"b-{i}", requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
            teams.wait(teams.b, f"b-{i}", "Running")
        _gang(teams, "a-big", 3, PREEMPTIBLE, priority_class=low)
        lc.wait_until(
            lambda: _unschedulable(teams, "a-big-0") or None,
            timeout=60,
            what="team A's gang seen waiting",
        )
        teams.create(
            teams.b, "b-2", requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE, priority_class=high
        )
        teams.wait(teams.b, "b-2", "Running", timeout=60)
        assert not any(_running(teams, teams.a, f"a-big-{i}") for i in range(3))
    finally:
        teams.cleanup()


def test_a_tenant_s_pods_that_cannot_run_hold_no_one_back(
    cluster: Cluster, muster_fair: MusterProcess
) -> None:
    # Team A weighs 2; team B runs b-0 (share 1/4 = 0.25).  Team A's tenant, with its own
    # token, creates a 1-GPU pod that is pending, its quota admitting it and its share
    # once admitted (1/4) / 2 = 0.125 below what each of team B's next pods b-1, b-2, b-3
    # would take team B to (0.5, 0.75, 1.0): counted as waiting, it would hold each back
    # with GPUs free (as a-big does above).  It does not, and each binds through
    # kube-scheduler, in turn: (1) its node selector matches no node, so it can never
    # run; (2) the same, deleted and re-created (its wait starts again); (3) its required
    # node affinity pins it to b-0's node, which b-3 cannot take (the one free GPU is
    # elsewhere): room b-3 takes is no room it could have had.
    teams = _teams(cluster, "2")
    tenant = tenant_client(cluster, teams.a)
    pods_a = f"/api/v1/namespaces/{teams.a}/pods"
    try:
        teams.create(teams.b, "b-0", requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
        teams.wait(teams.b, "b-0", "Running")
        busy = (teams.get(teams.b, "b-0") or {})["spec"]["nodeName"]
        never = make_pod(
            "a-wait", requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE, node_selector={"x": "y"}
        )
        pinned = make_pod("a-wait", requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [busy]}]}
        pinned["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
        for borrower, waiting in (("b-1", never), ("b-2", never), ("b-3", pinned)):
            if teams.get(teams.a, "a-wait") is not None:
                tenant.request("DELETE", f"{pods_a}/a-wait", query={"gracePeriodSeconds": 0})
                lc.wait_until(
                    lambda: teams.get(teams.a, "a-wait") is None or None,
                    timeout=30,
                    what="a-wait deleted",
                )
            tenant.request("POST", pods_a, waiting)
            lc.wait_until(  # kube-scheduler tried it (and Muster's informer has it)
                lambda: _unschedulable(teams, "a-wait") or None,
                timeout=30,
                what="a-wait unschedulable",
            )
            teams.create(teams.b, borrower, requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
            teams.wait(teams.b, borrower, "Running", timeout=60)
        assert not _running(teams, teams.a, "a-wait")
    finally:
        teams.cleanup()


def _unschedulable(teams: Teams, name: str) -> bool:
    pod: dict[str, Any] = teams.get(teams.a, name) or {}
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)


def test_the_quota_furthest_above_its_share_lends_back_first(
    cluster: Cluster, muster_fair: MusterProcess
) -> None:
    # Six nodes of one GPU.  Team A: min 2; team B: min 1; team C: min 2 (max 6 each).
    # Team A runs a-0..a-3 (borrows 2: share 2/6), then team B b-0 and b-1, started in a
    # later second (borrows 1: share 1/6), all of one priority.  Team C's pod, below its
    # min, reclaims one GPU.  The victim order alone would take b-1 or b-0 (the least work
    # lost: the latest start); with fair sharing, among victims of one priority the quota
    # furthest above its share goes first: one of team A's pods (team A stays at 3, above
    # its min), and both of team B's keep running.
    for i in range(6):
        cluster.create_node(f"n{i}", {"cpu": "8", "memory": "32Gi", GPU: 1})
    teams = Teams(
        cluster, {"min": {GPU: "2"}, "max": {GPU: "6"}}, {"min": {GPU: "1"}, "max": {GPU: "6"}}
    )
    others = Teams(
        cluster,
        {"min": {GPU: "2"}, "max": {GPU: "6"}},
        {"min": {GPU: "0"}, "max": {GPU: "6"}},
        suffix="2",
    )
    team_a = [f"a-{i}" for i in range(4)]
    try:
        for name in team_a:
            teams.create(teams.a, name, requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
            teams.wait(teams.a, name, "Running")
        # Start times are in whole seconds: team B's must be later than team A's.
        started = _start_time(teams, teams.a, "a-3")
        lc.wait_until(lambda: time.time() >= started + 1 or None, timeout=5, what="a new second")
        for name in ("b-0", "b-1"):
            teams.create(teams.b, name, requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
            teams.wait(teams.b, name, "Running")
        assert _start_time(teams, teams.b, "b-0") > started
        others.create(others.a, "c-0", requests={"cpu": "1", GPU: 1}, labels=BORROWER)
        others.wait(others.a, "c-0", "Running", timeout=90)
        assert _running(teams, teams.b, "b-0") and _running(teams, teams.b, "b-1")
        assert sum(_running(teams, teams.a, name) for name in team_a) == 3
    finally:
        others.cleanup()
        teams.cleanup()


def test_the_lender_rank_counts_victims_still_terminating_as_gone(
    cluster: Cluster, muster_fair: MusterProcess
) -> None:
    # Six nodes of one GPU.  Team A (min 1) runs a-0..a-2, borrowing 2; team B (min 0)
    # runs b-0..b-2, started in a later second, borrowing 3; every pod takes 60 s to
    # terminate.  Team C (min 2, nothing running) reclaims one GPU for c-0: among victims
    # of one priority the quota furthest above its share goes first, B (3 borrowed
    # against 2), so one of B's pods.  While that pod still terminates, c-1 reclaims one
    # more: counted as gone, B borrows 2 like A, and equal shares rank by quota name, A's
    # ("…-a") before B's ("…-b"): one of A's pods.  Counted as still running, B would be
    # ahead again; the victim order alone (the latest start first) would also take B's.
    for i in range(6):
        cluster.create_node(f"n{i}", {"cpu": "8", "memory": "32Gi", GPU: 1})
    teams = Teams(
        cluster, {"min": {GPU: "1"}, "max": {GPU: "6"}}, {"min": {GPU: "0"}, "max": {GPU: "6"}}
    )
    others = Teams(
        cluster,
        {"min": {GPU: "2"}, "max": {GPU: "6"}},
        {"min": {GPU: "0"}, "max": {GPU: "6"}},
        suffix="2",
    )
    pods = {teams.a: [f"a-{i}" for i in range(3)], teams.b: [f"b-{i}" for i in range(3)]}

    def leaving() -> list[tuple[str, str]]:
        gone = []
        for namespace, names in pods.items():
            for name in names:
                pod = teams.get(namespace, name)
                meta = (pod or {}).get("metadata", {})
                if pod is None or "deletionTimestamp" in meta or SOFT_EVICTION in meta["labels"]:
                    gone.append((namespace, name))
        return gone

    try:
        for name in pods[teams.a]:
            teams.create(
                teams.a, name, requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE, grace_seconds=60
            )
            teams.wait(teams.a, name, "Running")
        started = _start_time(teams, teams.a, "a-2")
        lc.wait_until(lambda: time.time() >= started + 1 or None, timeout=5, what="a new second")
        for name in pods[teams.b]:
            teams.create(
                teams.b, name, requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE, grace_seconds=60
            )
            teams.wait(teams.b, name, "Running")
        others.create(others.a, "c-0", requests={"cpu": "1", GPU: 1}, labels=BORROWER)
        first = lc.wait_until(lambda: leaving() or None, timeout=60, what="c-0's victim")
        assert len(first) == 1 and first[0][0] == teams.b, first
        others.create(others.a, "c-1", requests={"cpu": "1", GPU: 1}, labels=BORROWER)
        both = lc.wait_until(lambda: _two_or_more(leaving()), timeout=60, what="c-1's victim")
        # The premise: c-0's victim had not left yet when c-1's plan took its own.
        assert teams.get(*first[0]) is not None, "c-0's victim left before c-1's plan"
        second = [victim for victim in both if victim != first[0]]
        assert len(second) == 1 and second[0][0] == teams.a, both
    finally:
        others.cleanup()
        teams.cleanup()


def test_a_borrower_above_its_share_takes_nothing_from_one_below(
    cluster: Cluster, muster_fair: MusterProcess
) -> None:
    # Team A may take lower-priority pods of other borrowers (borrow-within-cohort
    # LowerPriority, set by the admin).  It runs a-0 and a-1 (priority 10: share 2/4 =
    # 0.5); team B runs b-0 (priority 10: share 1/4 = 0.25); one GPU is free.  Team A's
    # gang a-hi of 2 (priority 500) needs one more GPU.  borrowWithinCohort alone would
    # take b-0 (other quotas first, and its priority is no higher than team A's own
    # work), widening the gap from 0.25 to 1.0; with fair sharing, team B is below team
    # A's share, so nothing of it goes: one of team A's own priority-10 pods goes instead.
    teams = _teams(cluster, "1")
    try:
        teams.annotate_quota(teams.a, {"muster.dev/borrow-within-cohort": "LowerPriority"})
        low_a = _priority_class(cluster, teams.a, 10)
        low_b = _priority_class(cluster, teams.b, 10)
        high = _priority_class(cluster, teams.a, 500)
        for namespace, name, priority_class in (
            (teams.a, "a-0", low_a),
            (teams.a, "a-1", low_a),
            (teams.b, "b-0", low_b),
        ):
            teams.create(
                namespace,
                name,
                requests={"cpu": "1", GPU: 1},
                labels=PREEMPTIBLE,
                priority_class=priority_class,
            )
            teams.wait(namespace, name, "Running")
        for i in range(2):
            teams.create(
                teams.a,
                f"a-hi-{i}",
                requests={"cpu": "1", GPU: 1},
                labels={**BORROWER, "pod-group.scheduling.sigs.k8s.io": "a-hi"},
                annotations={"muster.dev/min-available": "2"},
                priority_class=high,
            )
        for i in range(2):
            teams.wait(teams.a, f"a-hi-{i}", "Running", timeout=90)
        assert sum(teams.get(teams.a, name) is None for name in ("a-0", "a-1")) == 1
        assert _running(teams, teams.b, "b-0")
    finally:
        teams.cleanup()


def _two_or_more(victims: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    return victims if len(victims) > 1 else None


def _start_time(teams: Teams, namespace: str, name: str) -> float:
    pod = teams.get(namespace, name) or {}
    stamp = pod["status"]["startTime"]
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_an_elastic_job_running_its_minimum_holds_back_no_plan(
    cluster: Cluster, muster_fair: MusterProcess
) -> None:
    # Four nodes of one GPU, three quotas of min 0 (all use is borrowed).  Team B runs
    # b-0..b-2 (share 3/4 = 0.75).  Team A weighs 4; its elastic job grow (two pods, a
    # minimum of 1) runs grow-0 on the last GPU (share 1/4 / 4 = 0.0625); grow-1 would
    # take it to 2/4 / 4 = 0.125, and evicts no one (it runs its minimum).  Team C's c-0
    # would borrow to 1/4 = 0.25: grow-1 waits with a lower share, but the room a plan
    # frees would not be grow-1's, so c-0 is not held back from one.  It takes one of team
    # B's pods (0.75 to 0.5, still above c-0's 0.25: the gap narrows without reversing).
    # Held back, it would wait and team B keep all three.
    teams = _teams(cluster, "4")
    others = Teams(cluster, QUOTA, QUOTA, suffix="2")
    names = [f"b-{i}" for i in range(3)]
    try:
        for name in names:
            teams.create(teams.b, name, requests={"cpu": "1", GPU: 1}, labels=PREEMPTIBLE)
            teams.wait(teams.b, name, "Running")
        _gang(teams, "grow", 2, BORROWER, {"gang.scheduling.koordinator.sh/min-available": "1"})
        lc.wait_until(
            lambda: sum(_running(teams, teams.a, f"grow-{i}") for i in range(2)) == 1 or None,
            timeout=60,
            what="grow running its minimum",
        )
        others.create(others.a, "c-0", requests={"cpu": "1", GPU: 1}, labels=BORROWER)
        others.wait(others.a, "c-0", "Running", timeout=90)
        assert sum(_running(teams, teams.b, name) for name in names) == 2
        assert sum(_running(teams, teams.a, f"grow-{i}") for i in range(2)) == 1
    finally:
        others.cleanup()
        teams.cleanup()
