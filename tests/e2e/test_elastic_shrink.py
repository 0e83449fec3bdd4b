"""Elastic shrink, live with the Job controller and a stock kube-scheduler (issue 34,
item 4).

Eight 8-GPU nodes; team A (min 32, max 64) and team B (min 0: it borrows all it runs).
Team B's indexed Job runs eight preemptible 8-GPU pods, a gang declaring a minimum of 4
(min-available 4), with the recommended failure policy (an eviction is not a failure).
Team A's training gang needs four nodes.  Derived from the rule: team B's job gives up its
pods above its minimum before anything else, highest indexes first: indexes 4 to 7 are
evicted, 0 to 3 keep running (the same pods: the job is not restarted), the gang runs on
the freed nodes, and once it finishes the Job controller's replacements for 4 to 7 bind:
the job grows back to eight.
"""

from __future__ import annotations

from typing import Any

import pytest
from e2e_support import Cluster, make_job, make_pod
from muster_process import MusterProcess
from test_decisions_follow import _priority_class
from test_jobs import (
    GANG_LABEL,
    IGNORE_DISRUPTIONS,
    MIN_AVAILABLE,
    running,
    submit,
    training_job,
)
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    TRAINER,
    Teams,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e

INDEX = "batch.kubernetes.io/job-completion-index"
SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"
CAN_PREEMPT = {"quota.scheduling.koordinator.sh/can-preempt": "true"}


def _gpu_teams(cluster: Cluster, *, nodes: int, a_min: int, a_max: int, b_max: int) -> Teams:
    """``nodes`` 8-GPU nodes; team A's quota of ``a_min``..``a_max`` GPUs, team B's of
    0..``b_max``."""
    for i in range(nodes):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    return Teams(
        cluster,
        {"min": {GPU: str(a_min)}, "max": {GPU: str(a_max)}},
        {"min": {GPU: "0"}, "max": {GPU: str(b_max)}},
    )


def elastic_job() -> dict[str, Any]:
    template = make_pod(
        "elastic",
        requests={"cpu": "4", GPU: 8},
        labels={**PREEMPTIBLE, GANG_LABEL: "elastic"},
        annotations={MIN_AVAILABLE: "4"},
    )
    return make_job(
        "elastic",
        template,
        parallelism=8,
        completionMode="Indexed",
        podFailurePolicy=IGNORE_DISRUPTIONS,
    )


def running_by_index(cluster: Cluster, namespace: str) -> dict[int, str]:
    """The elastic Job's running pods (not leaving): completion index → UID."""
    return {
        int(p["metadata"]["annotations"][INDEX]): p["metadata"]["uid"]
        for p in cluster.job_pods(namespace, "elastic")
        if p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and "scheduling.koordinator.sh/soft-eviction" not in p["metadata"].get("labels", {})
    }


def test_an_elastic_job_shrinks_to_its_minimum_and_grows_back(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    teams = _gpu_teams(cluster, nodes=8, a_min=32, a_max=64, b_max=64)
    try:
        submit(cluster, teams.b, elastic_job())
        before = lc.wait_until(
            lambda: ((r := running_by_index(cluster, teams.b)) and len(r) == 8 and r) or None,
            timeout=90,
            what="the elastic Job's eight pods running",
        )
        submit(cluster, teams.a, training_job("train", run_seconds=20))
        lc.wait_until(
            lambda: (
                (
                    sum(
                        p["status"].get("phase") == "Running"
                        for p in cluster.job_pods(teams.a, "train")
                    )
                    == 4
                )
                or None
            ),
            timeout=90,
            what="the training gang running",
        )
        during = running_by_index(cluster, teams.b)
        # Indexes 0-3 kept running, the very same pods: the job was not restarted.
        assert during == {i: before[i] for i in range(4)}
        preempted = sorted(e["involvedObject"]["name"] for e in teams.events(teams.b, "Preempted"))
        assert len(preempted) == 4
        # Once the gang is done, the replacements of 4-7 bind: eight running again.
        after = lc.wait_until(
            lambda: ((r := running_by_index(cluster, teams.b)) and len(r) == 8 and r) or None,
            timeout=120,
            what="the elastic Job grown back to eight",
        )
        assert {i: after[i] for i in range(4)} == {i: before[i] for i in range(4)}
        assert all(after[i] != before[i] for i in range(4, 8))  # new pods for 4-7
    finally:
        teams.cleanup()


def _grow_job(cluster: Cluster, namespace: str, labels: dict[str, str], **pod: Any) -> None:
    """Submit Job "grow" (8-GPU pods, a gang declaring a minimum of 2 of 3), let it run two
    pods, then scale it to three.  (It grows by its parallelism once two pods run, so that
    the third pod's first attempt sees them running: a pod tried while the first two were
    still binding is told their placement is in flight, and kube-scheduler retries it only
    on its next event.)"""
    template = make_pod(
        "grow",
        requests={"cpu": "4", GPU: 8},
        labels={**labels, GANG_LABEL: "grow"},
        annotations={MIN_AVAILABLE: "2"},
        **pod,
    )
    job = make_job("grow", template, parallelism=2, completions=3, run_seconds=300)
    submit(cluster, namespace, job)
    lc.wait_until(lambda: running(cluster, namespace, "grow", 2), timeout=90, what="two pods")
    cluster.rest.request(
        "PATCH",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/grow",
        {"spec": {"parallelism": 3}},
        content_type="application/merge-patch+json",
    )


def _waiting_pod(cluster: Cluster, namespace: str) -> str | None:
    waiting = [
        p["metadata"]["name"]
        for p in cluster.job_pods(namespace, "grow")
        if not p["spec"].get("nodeName")
    ]
    return waiting[0] if len(waiting) == 1 else None


def test_an_elastic_job_running_its_minimum_grows_into_free_room_only(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    # Three 8-GPU nodes; team A has min 8, max 24.  A's low-priority (10) preemptible
    # pod "lo" takes a node; then A's Job "grow" (priority 500), a gang declaring a
    # minimum of 2, runs two pods on the free nodes and is scaled to three.  Derived from
    # the rule: the third pod fits A's max only once lo goes (24 + 8 > 24; 24 without
    # lo), and withinQuota LowerPriority would let it take lo; but its job runs its
    # minimum and the pod would keep A past its min (24 > 8), so it evicts no one: Muster
    # refuses to plan for it, saying why, and lo runs on.  Once lo is deleted, the third
    # pod binds to its node: the job grew into free room.
    teams = _gpu_teams(cluster, nodes=3, a_min=8, a_max=24, b_max=24)
    try:
        low = _priority_class(cluster, teams.a, 10)
        high = _priority_class(cluster, teams.a, 500)
        teams.create(
            teams.a, "lo", requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE, priority_class=low
        )
        teams.wait(teams.a, "lo", "Running")
        lo_node = (teams.get(teams.a, "lo") or {})["spec"]["nodeName"]
        _grow_job(cluster, teams.a, {**PREEMPTIBLE, **CAN_PREEMPT}, priority_class=high)

        def refused() -> list[str] | None:
            waiting = _waiting_pod(cluster, teams.a)
            if waiting is None:
                return None
            reasons = muster_and_evictor.postfilter_reasons(teams.a, waiting)
            wanted = f"would take quota {teams.a} past its min"
            return [r for r in reasons if "at least the minimum of 2" in r and wanted in r] or None

        lc.wait_until(refused, timeout=60, what="the growth refused")
        lo = teams.get(teams.a, "lo")
        assert lo is not None and not lo["metadata"].get("deletionTimestamp")
        assert SOFT_EVICTION not in lo["metadata"].get("labels", {})
        assert teams.events(teams.a, "Preempted") == []
        cluster.rest.request("DELETE", f"/api/v1/namespaces/{teams.a}/pods/lo")
        lc.wait_until(lambda: running(cluster, teams.a, "grow", 3), timeout=90, what="three pods")
        nodes = {p["spec"]["nodeName"] for p in cluster.job_pods(teams.a, "grow")}
        assert lo_node in nodes
    finally:
        teams.cleanup()


def test_within_its_quotas_min_an_elastic_job_reclaims_for_its_pods(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    # The same job where its quota's min covers it: team A (min 24: the whole cluster),
    # team B (min 0) borrowing a node with b-0.  Derived from the rule: grow runs its
    # minimum (2), but A is below its min and stays within it with the third pod (16 + 8
    # ≤ 24), so that pod reclaims A's guarantee as any pod: b-0 is marked and goes, and
    # the third pod binds to its node.
    teams = _gpu_teams(cluster, nodes=3, a_min=24, a_max=24, b_max=24)
    try:
        teams.create(teams.b, "b-0", requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE)
        teams.wait(teams.b, "b-0", "Running")
        b0_node = (teams.get(teams.b, "b-0") or {})["spec"]["nodeName"]
        _grow_job(cluster, teams.a, TRAINER)
        lc.wait_until(lambda: running(cluster, teams.a, "grow", 3), timeout=90, what="three pods")
        nodes = {p["spec"]["nodeName"] for p in cluster.job_pods(teams.a, "grow")}
        assert b0_node in nodes
        b0 = teams.get(teams.b, "b-0")
        assert b0 is None or SOFT_EVICTION in b0["metadata"].get("labels", {})
    finally:
        teams.cleanup()
