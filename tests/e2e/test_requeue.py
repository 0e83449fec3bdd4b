"""No requeue waits (issue #14, item 1): room only Muster sees reaches parked pods at once.

kube-scheduler parks a pod Muster's quota check rejected and does not watch
ElasticQuotas: left alone it retries the pod on unrelated Pod or Node events, or
after its five-minute flush.  Muster's leader nudges the parked pods its filter now
admits, so raising a quota's ``max`` binds the waiting job within seconds.
"""

from __future__ import annotations

import time

import pytest
from e2e_support import Cluster, condition
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    Teams,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e


def test_a_pod_parked_for_its_quota_binds_soon_after_the_max_is_raised(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    # Team A may use 8 GPUs (its pods are preemptible: max bounds them); a-0 uses them.
    teams = Teams(
        cluster, {"min": {GPU: "0"}, "max": {GPU: "8"}}, {"min": {GPU: "0"}, "max": {GPU: "0"}}
    )
    try:
        teams.create(teams.a, "a-0", requests={"cpu": "1", GPU: 8}, labels=PREEMPTIBLE)
        teams.wait(teams.a, "a-0", "Running")
        teams.create(teams.a, "p", requests={"cpu": "1", GPU: 8}, labels=PREEMPTIBLE)

        def parked() -> bool | None:
            pod = teams.get(teams.a, "p") or {}
            scheduled = condition(pod, "PodScheduled") or {}
            return "would exceed max" in scheduled.get("message", "") or None

        lc.wait_until(parked, timeout=30, what="p parked for its quota")
        path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{teams.a}/elasticquotas/{teams.a}"
        raised = time.monotonic()
        cluster.rest.request(
            "PATCH",
            path,
            {"spec": {"max": {GPU: "16"}}},
            content_type="application/merge-patch+json",
        )
        # Left alone, kube-scheduler would retry p at its five-minute flush: a tenth of
        # that proves the nudge, with room for a loaded CI machine (a second or two here;
        # the figure is printed).
        lc.wait_until(
            lambda: ((teams.get(teams.a, "p") or {}).get("spec") or {}).get("nodeName"),
            timeout=30.0,
            what="p bound within 30 s of the max raised",
        )
        print(f"bound {time.monotonic() - raised:.2f}s after the max was raised")
    finally:
        teams.cleanup()
