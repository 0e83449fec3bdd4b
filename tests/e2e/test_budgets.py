"""PodDisruptionBudgets through a stock kube-scheduler (issue #13, rule 7).

Each budget's status (``disruptionsAllowed``) is kept by the real disruption controller
of the control plane's kube-controller-manager; the tests wait until it has counted the
pods a budget covers before they rely on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster, condition
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (tokens is a fixture)
    PREEMPTIBLE,
    TRAINER,
    Teams,
    muster_with_arguments,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e

SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"


def _muster(
    control_plane: lc.ControlPlane, tmp_path: Path, keys: dict[str, Path], policy: str
) -> Any:
    # A short deadline, so a test can wait out a victim its budget refuses.
    arguments = {"pdbPolicy": policy, "victimEvictionDeadlineSeconds": 4}
    return muster_with_arguments(control_plane, tmp_path, keys, arguments)


@pytest.fixture
def muster_best_effort(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
) -> Iterator[MusterProcess]:
    with _muster(control_plane, tmp_path, tokens, "BestEffort") as muster:
        yield muster


@pytest.fixture
def muster_strict(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
) -> Iterator[MusterProcess]:
    with _muster(control_plane, tmp_path, tokens, "Strict") as muster:
        yield muster


def protect(cluster: Cluster, muster: MusterProcess, namespace: str, app: str) -> str:
    """A budget over ``app=<app>`` in ``namespace`` that allows no disruption; returns
    its key once Muster weighs it (and the pod it covers)."""
    path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app, "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
    }
    cluster.rest.request("POST", path, body)

    # The disruption controller counts the one healthy pod the budget covers: with
    # minAvailable 1, it allows 0 disruptions (1 healthy - 1 desired).
    def counted() -> dict[str, Any] | None:
        status: dict[str, Any] = cluster.rest.request("GET", f"{path}/{app}").get("status", {})
        done = status.get("observedGeneration") == 1 and status.get("currentHealthy") == 1
        return status if done else None

    status = lc.wait_until(
        counted, timeout=30, what=f"the disruption controller counting {namespace}/{app}"
    )
    assert status["disruptionsAllowed"] == 0 and status["desiredHealthy"] == 1
    key = f"{namespace}/{app}"
    lc.wait_until(
        lambda: (muster.debug("budgets").get(key) or {}).get("pods") or None,
        timeout=15,
        what=f"Muster weighing the budget {key}",
    )
    return key


def borrowed_nodes(cluster: Cluster, apps: list[str]) -> Teams:
    """One 8-GPU node per app, each borrowed by a preemptible team B pod ``b-<i>`` with that
    ``app`` label, started in this order (the last is the most recently started: the
    planner's first choice).  Team A (min 16, max 32) is within its min: it reclaims."""
    for i in range(len(apps)):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    for i, app in enumerate(apps):
        teams.create(
            teams.b, f"b-{i}", requests={"cpu": "4", GPU: 8}, labels={**PREEMPTIBLE, "app": app}
        )
        teams.wait(teams.b, f"b-{i}", "Running")
    return teams


def submit_trainer(teams: Teams) -> None:
    """Team A's job ``train``: one 8-GPU pod, allowed to preempt."""
    labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
    teams.create(teams.a, "train-0", requests={"cpu": "4", GPU: 8}, labels=labels)


def test_a_budget_protects_the_most_recent_borrower_and_another_is_evicted(
    cluster: Cluster, muster_best_effort: MusterProcess
) -> None:
    # Two 8-GPU nodes, both borrowed by team B; b-1 started last and its budget allows
    # no disruption.  Team A (min 16, using 0) asks for one 8-GPU pod: within its min it
    # reclaims; b-1 would go first, but a plan without it exists: b-0.
    teams = borrowed_nodes(cluster, ["etl", "web"])
    try:
        protect(cluster, muster_best_effort, teams.b, "web")
        submit_trainer(teams)
        teams.wait(teams.a, "train-0", "Running", timeout=60)
        protected = teams.get(teams.b, "b-1") or {}
        assert protected.get("status", {}).get("phase") == "Running"
        assert SOFT_EVICTION not in protected["metadata"].get("labels", {})
        assert teams.get(teams.b, "b-0") is None or (
            SOFT_EVICTION in (teams.get(teams.b, "b-0") or {})["metadata"].get("labels", {})
        )
        preempted = teams.events(teams.b, "Preempted")
        assert [e["involvedObject"]["name"] for e in preempted] == ["b-0"]
    finally:
        teams.cleanup()


def test_strict_with_only_protected_victims_marks_nothing_and_names_the_budget(
    cluster: Cluster, muster_strict: MusterProcess
) -> None:
    teams = borrowed_nodes(cluster, ["web"])
    try:
        key = protect(cluster, muster_strict, teams.b, "web")
        submit_trainer(teams)

        def refused() -> str | None:
            pod = muster_strict.debug(f"pods/{teams.a}/train-0")
            text = str(pod)
            return text if key in text and "Strict" in text else None

        why = lc.wait_until(refused, timeout=30, what="the refusal naming the budget")
        assert "PodDisruptionBudget" in why
        victim = teams.get(teams.b, "b-0") or {}
        assert victim.get("status", {}).get("phase") == "Running"
        assert SOFT_EVICTION not in victim["metadata"].get("labels", {})
        assert condition(victim, "DisruptionTarget") is None
        assert teams.events(teams.b, "Preempted") == []
        pending = teams.get(teams.a, "train-0") or {}
        assert not pending["spec"].get("nodeName")
    finally:
        teams.cleanup()


def test_a_victim_its_budget_refuses_past_the_deadline_ends_the_plan_cleanly(
    cluster: Cluster, muster_best_effort: MusterProcess
) -> None:
    # One 8-GPU node, borrowed by team B's b-0, whose budget allows no disruption: under
    # BestEffort it is the only plan, so Muster marks it; the evictor's evictions are
    # refused (429).  4 s (victimEvictionDeadlineSeconds) after the mark, the plan is
    # abandoned: b-0's mark is taken back (DisruptionTarget False), the preemptor's
    # reservation is released, and the job, planned again without b-0, finds no plan.
    teams = borrowed_nodes(cluster, ["web"])
    try:
        protect(cluster, muster_best_effort, teams.b, "web")
        submit_trainer(teams)
        lc.wait_until(
            lambda: (
                SOFT_EVICTION
                in ((teams.get(teams.b, "b-0") or {}).get("metadata") or {}).get("labels", {})
                or None
            ),
            timeout=30,
            what="b-0 marked (the only plan, breaking its budget)",
        )

        def abandoned() -> dict[str, Any] | None:
            pod = teams.get(teams.b, "b-0") or {}
            target = condition(pod, "DisruptionTarget") or {}
            if target.get("status") == "False" and SOFT_EVICTION not in pod["metadata"].get(
                "labels", {}
            ):
                return pod
            return None

        victim = lc.wait_until(abandoned, timeout=30, what="the mark on b-0 taken back")
        assert victim["status"]["phase"] == "Running"
        assert condition(victim, "DisruptionTarget")["reason"] == "PreemptionAbandoned"
        # The event follows the status patch Muster just made: poll for it.
        lc.wait_until(
            lambda: teams.events(teams.b, "PreemptionAbandoned") or None,
            timeout=15,
            what="the PreemptionAbandoned event on the victim",
        )

        def released() -> dict[str, Any] | None:
            pod = teams.get(teams.a, "train-0") or {}
            annotations = pod["metadata"].get("annotations") or {}
            return pod if "muster.dev/reservation" not in annotations else None

        pending = lc.wait_until(released, timeout=30, what="train-0's reservation released")
        assert not pending["spec"].get("nodeName")

        # Planned again without b-0: no plan, and b-0 is not marked a second time.
        def replanned() -> dict[str, Any] | None:
            decisions = muster_best_effort.debug(f"pods/{teams.a}/train-0")["decisions"]
            outcomes = [d["outcome"] for d in decisions if d["verb"] == "postfilter"]
            after = outcomes[outcomes.index("abandoned") + 1 :] if "abandoned" in outcomes else []
            return decisions[-1] if after else None

        last = lc.wait_until(replanned, timeout=30, what="the job planned again")
        assert not last["outcome"].startswith("preempting"), last
        again = teams.get(teams.b, "b-0") or {}
        assert SOFT_EVICTION not in again["metadata"].get("labels", {})
        assert len(teams.events(teams.b, "Preempted")) == 1
    finally:
        teams.cleanup()
