"""The preemption lifecycle under faults (issue #14): a plan is finished or undone, never
left half.  Here no operator evicts the victims Muster marks (none runs), so the plan's
reservation times out: Muster takes the victim's mark back and clears the reservation
it wrote on the job's pods, with events, instead of leaving both behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import localcluster as lc
import pytest
import yaml
from e2e_support import Cluster, condition
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import PREEMPTIBLE, TRAINER, Teams, tokens  # noqa: F401

pytestmark = pytest.mark.e2e

SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"


@pytest.fixture
def muster_without_operator(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
) -> Iterator[MusterProcess]:
    """Muster with a 4 s reservation timeout, every verb, and no evictor."""
    config = tmp_path / "muster-args.yaml"
    config.write_text(yaml.safe_dump({"reservationTimeoutSeconds": 4}))
    muster = MusterProcess(
        tmp_path, kubeconfig=tokens["muster"], extra_args=("--config", str(config))
    )
    try:
        extender = lc.ExtenderConfig(muster.url, bind=True)
        with control_plane.using_extender(
            extender, scheduler_config=control_plane.scheduler_overrides
        ):
            yield muster
    finally:
        muster.stop()


def test_a_plan_that_times_out_takes_back_its_marks_and_its_reservation(
    cluster: Cluster, muster_without_operator: MusterProcess
) -> None:
    cluster.create_node("n0", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    # Every version of b-0 from a watch: the mark, then the mark taken back.
    versions: list[dict[str, Any]] = []
    watch = lc.Watcher(
        cluster.rest,
        f"/api/v1/namespaces/{teams.b}/pods",
        lambda _kind, obj: versions.append(obj),
        name="b-0",
    )
    try:
        teams.create(teams.b, "b-0", requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE)
        teams.wait(teams.b, "b-0", "Running")
        watch.start()
        labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
        teams.create(teams.a, "train-0", requests={"cpu": "4", GPU: 8}, labels=labels)

        def unmarked_after_a_mark() -> dict[str, Any] | None:
            seen = list(versions)
            first = next(
                (i for i, v in enumerate(seen) if SOFT_EVICTION in v["metadata"]["labels"]), None
            )
            if first is None:
                return None
            for later in seen[first + 1 :]:
                target = condition(later, "DisruptionTarget") or {}
                labels_now = later["metadata"].get("labels") or {}
                if SOFT_EVICTION not in labels_now and target.get("status") == "False":
                    return later
            return None

        taken_back = lc.wait_until(unmarked_after_a_mark, timeout=30, what="b-0 unmarked")
        assert condition(taken_back, "DisruptionTarget")["reason"] == "PreemptionAbandoned"
        assert "timed out" in condition(taken_back, "DisruptionTarget")["message"]
        assert taken_back["status"]["phase"] == "Running"
        # The events follow the patches Muster just made: poll for them.
        for namespace, whose in ((teams.b, "the victim"), (teams.a, "the job")):
            lc.wait_until(
                lambda ns=namespace: teams.events(ns, "PreemptionAbandoned") or None,
                timeout=15,
                what=f"the PreemptionAbandoned event on {whose}",
            )
    finally:
        watch.stop()
        teams.cleanup()
