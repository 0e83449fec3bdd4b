"""The preemption lifecycle under faults (issue #14).  A plan is finished or undone, never
left half: no operator evicts the victims Muster marks (none runs), so the plan's
reservation times out, and Muster takes the victim's mark back and clears the reservation
it wrote on the job's pods, with events, instead of leaving both behind.  Reservations
follow the job, not a pod's name: a preemptor pod deleted and re-created keeps the room."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_support import Cluster, condition, make_job, make_pod
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import PREEMPTIBLE, TRAINER, Teams, tokens  # noqa: F401

import localcluster as lc

pytestmark = pytest.mark.e2e

SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"


@contextlib.contextmanager
def muster_without_evictor(
    control_plane: lc.ControlPlane, tmp_path: Path, kubeconfigs: dict[str, Path], timeout: float
) -> Iterator[MusterProcess]:
    """Muster with this reservation timeout, every verb, and no evictor."""
    config = tmp_path / "muster-args.yaml"
    config.write_text(yaml.safe_dump({"reservationTimeoutSeconds": timeout}))
    muster = MusterProcess(
        tmp_path, kubeconfig=kubeconfigs["muster"], extra_args=("--config", str(config))
    )
    try:
        extender = lc.ExtenderConfig(muster.url, bind=True)
        with control_plane.using_extender(
            extender, scheduler_config=control_plane.scheduler_overrides
        ):
            yield muster
    finally:
        muster.stop()


@pytest.fixture
def muster_without_operator(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
) -> Iterator[MusterProcess]:
    """Muster with a 4 s reservation timeout, every verb, and no evictor."""
    with muster_without_evictor(control_plane, tmp_path, tokens, 4) as muster:
        yield muster


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


def test_a_re_created_preemptor_pod_keeps_its_jobs_room(
    cluster: Cluster,
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
) -> None:
    """The Job ``train`` (one 8-GPU pod) preempts b-0 for n0's 8 GPUs; before b-0 goes,
    its pod is deleted and the real Job controller creates another (same job, shape and
    owner), and team B's c-0 (8 GPUs) waits for room too.  Derived from the rule: the
    reservation passes to the new pod (Muster's /debug/jobs says so before b-0 goes), no
    second victim is marked, and when b-0 goes the new pod binds to n0 while c-0 stays
    pending."""
    with muster_without_evictor(control_plane, tmp_path, tokens, 120) as muster:
        n0 = cluster.create_node("n0", {"cpu": "32", "memory": "128Gi", GPU: 8})
        teams = Teams(
            cluster,
            {"min": {GPU: "16"}, "max": {GPU: "32"}},
            {"min": {GPU: "0"}, "max": {GPU: "32"}},
        )
        try:
            teams.create(teams.b, "b-0", requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE)
            teams.wait(teams.b, "b-0", "Running")
            labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
            shape = {"cpu": "4", GPU: 8}
            template = make_pod("train", requests=shape, labels=labels)
            cluster.rest.request(
                "POST", f"/apis/batch/v1/namespaces/{teams.a}/jobs", make_job("train", template)
            )
            first = lc.wait_until(
                lambda: job_pods(cluster, teams.a, "train") or None,
                timeout=30,
                what="the Job controller creating train's pod",
            )[0]
            lc.wait_until(
                lambda: (
                    SOFT_EVICTION in (teams.get(teams.b, "b-0") or {})["metadata"]["labels"] or None
                ),
                timeout=30,
                what=f"b-0 marked for {first}",
            )
            job = f"{teams.a}/train"
            cluster.rest.request("DELETE", f"/api/v1/namespaces/{teams.a}/pods/{first}")
            teams.create(teams.b, "c-0", requests=shape)
            # The Job controller counts the deleted pod as failed and creates another
            # after its back-off (10 s for a first failure).
            second = lc.wait_until(
                lambda: [p for p in job_pods(cluster, teams.a, "train") if p != first] or None,
                timeout=60,
                what="the Job controller replacing train's pod",
            )[0]

            seen: list[Any] = []

            def reserved_for_the_new_pod() -> dict[str, Any] | None:
                seen[:] = [muster.debug("jobs").get(job)]
                reservation = (seen[0] or {}).get("reservation")
                placements = (reservation or {}).get("placements", {})
                return reservation if placements == {f"{teams.a}/{second}": n0} else None

            try:
                held = lc.wait_until(reserved_for_the_new_pod, timeout=15, what="reserved")
            except TimeoutError as error:
                raise AssertionError(f"{error}; Muster's last view of the job: {seen}") from None
            assert held["victims"] == [f"{teams.b}/b-0"] and held["vacated"] == {}
            # b-0 leaves (as an evictor would make it).
            cluster.rest.request(
                "DELETE",
                f"/api/v1/namespaces/{teams.b}/pods/b-0",
                query={"gracePeriodSeconds": 0},
            )
            teams.wait(teams.a, second, "Running", timeout=30)
            assert (teams.get(teams.a, second) or {})["spec"]["nodeName"] == n0
            c_0 = teams.get(teams.b, "c-0") or {}
            assert not c_0["spec"].get("nodeName")
            # One victim only: nothing else of team B was marked for the job.
            assert SOFT_EVICTION not in (c_0["metadata"].get("labels") or {})
        finally:
            teams.cleanup()


def job_pods(cluster: Cluster, namespace: str, job: str) -> list[str]:
    """The names of the Job's pods that are not being deleted, oldest first."""
    alive = [
        p for p in cluster.job_pods(namespace, job) if not p["metadata"].get("deletionTimestamp")
    ]
    alive.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
    return [p["metadata"]["name"] for p in alive]
