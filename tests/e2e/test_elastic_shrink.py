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
    for i in range(8):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "32"}, "max": {GPU: "64"}}, {"min": {GPU: "0"}, "max": {GPU: "64"}}
    )
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


def test_an_elastic_job_running_its_minimum_grows_into_free_room_only(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811 (the fixture imported above)
) -> None:
    # Three 8-GPU nodes; team A (min 24: the whole cluster) and team B (min 0).  B's
    # preemptible b-0 takes a node; then A's Job "grow" of 8-GPU pods, a gang declaring a
    # minimum of 2, runs two pods on the free nodes and is scaled to three.  Derived from
    # the rule: A is below its min (16 of 24), but its job runs its minimum, so its third
    # pod evicts no one: Muster refuses to plan for it, saying why, and b-0 runs on.  Once
    # b-0 is deleted, the third pod binds to its node: the job grew into free room.
    # (The Job grows by its parallelism once two pods run, so that the third pod's first
    # attempt sees them running: a pod tried while the first two were still binding is
    # told their placement is in flight, and kube-scheduler retries it on the next event.)
    for i in range(3):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "24"}, "max": {GPU: "24"}}, {"min": {GPU: "0"}, "max": {GPU: "24"}}
    )
    try:
        teams.create(teams.b, "b-0", requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE)
        teams.wait(teams.b, "b-0", "Running")
        b0_node = (teams.get(teams.b, "b-0") or {})["spec"]["nodeName"]
        template = make_pod(
            "grow",
            requests={"cpu": "4", GPU: 8},
            labels={**TRAINER, GANG_LABEL: "grow"},
            annotations={MIN_AVAILABLE: "2"},
        )
        submit(
            cluster,
            teams.a,
            make_job("grow", template, parallelism=2, completions=3, run_seconds=300),
        )
        lc.wait_until(lambda: running(cluster, teams.a, "grow", 2), timeout=90, what="two pods")
        cluster.rest.request(
            "PATCH",
            f"/apis/batch/v1/namespaces/{teams.a}/jobs/grow",
            {"spec": {"parallelism": 3}},
            content_type="application/merge-patch+json",
        )

        def refused() -> list[str] | None:
            waiting = [
                p["metadata"]["name"]
                for p in cluster.job_pods(teams.a, "grow")
                if not p["spec"].get("nodeName")
            ]
            if len(waiting) != 1:
                return None
            reasons = muster_and_evictor.postfilter_reasons(teams.a, waiting[0])
            return [r for r in reasons if "at least the minimum of 2 it declares" in r] or None

        lc.wait_until(refused, timeout=60, what="the growth refused")
        b0 = teams.get(teams.b, "b-0")
        assert b0 is not None and not b0["metadata"].get("deletionTimestamp")
        assert "scheduling.koordinator.sh/soft-eviction" not in b0["metadata"].get("labels", {})
        assert teams.events(teams.b, "Preempted") == []
        cluster.rest.request("DELETE", f"/api/v1/namespaces/{teams.b}/pods/b-0")
        lc.wait_until(lambda: running(cluster, teams.a, "grow", 3), timeout=90, what="three pods")
        nodes = {p["spec"]["nodeName"] for p in cluster.job_pods(teams.a, "grow")}
        assert b0_node in nodes
    finally:
        teams.cleanup()
