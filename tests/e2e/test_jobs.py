"""Real workloads on real controllers (issue 24): batch/v1 Jobs submitted by label, their
victims replaced by the Job controller, through a stock kube-scheduler.

The control plane runs kube-controller-manager (Job, disruption, garbage-collector ...
controllers); the kubelet stand-in runs each pod for the time its template asks
(``kubelet.muster.dev/run-seconds``), then the pod succeeds.  Muster and the reference
evictor run on the manifests' ServiceAccounts.

Every story: four 8-GPU nodes; team A (min 32 = max 32 GPUs) and team B (min 0, max 32).
Team B's filler Job runs four preemptible 8-GPU pods, one per node, borrowing all of it.
Team A's training Job is a gang of four 8-GPU pods (pod-group label and min-available 4).
Derived from docs/design.md: team A is within its min (0 + 32 <= 32), so it reclaims from the
borrower; the gang needs every node, so all four filler pods are the victims, the gang
binds whole, and the filler's replacements (the Job controller re-creates evicted pods)
are pending while the gang runs: the room is the gang's, and team B's borrowing cannot
preempt team A's pods (they are not preemptible).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster, condition, make_job, make_pod
from muster_process import MusterProcess
from test_lifecycle import job_pods, muster_without_evictor
from test_muster_extender import GPU
from test_notice import evictor_outcome
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    SOFT_EVICTION,
    TRAINER,
    Teams,
    muster_and_evictor,
    muster_with_arguments,
    tokens,
)

import localcluster as lc
from localcluster.common import parse_time

pytestmark = pytest.mark.e2e

NODES = 4
GANG_LABEL = "pod-group.scheduling.sigs.k8s.io"
MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"
ALL_OR_NOTHING = "muster.dev/all-or-nothing"
#: The recommended Job shape (README): an eviction, which sets DisruptionTarget, is not
#: counted against backoffLimit; the pod is replaced.
IGNORE_DISRUPTIONS = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}


def filler_job(run_seconds: float, **spec: Any) -> dict[str, Any]:
    """Team B's filler: four preemptible 8-GPU pods at once."""
    template = make_pod("filler", requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE)
    return make_job("filler", template, parallelism=NODES, run_seconds=run_seconds, **spec)


def training_job(group: str, run_seconds: float, size: int = NODES) -> dict[str, Any]:
    """Team A's gang: ``size`` 8-GPU pods, all or nothing."""
    template = make_pod(
        "train",
        requests={"cpu": "4", GPU: 8},
        labels={**TRAINER, GANG_LABEL: group},
        annotations={MIN_AVAILABLE: str(size)},
    )
    return make_job(group, template, parallelism=size, run_seconds=run_seconds)


def submit(cluster: Cluster, namespace: str, job: dict[str, Any]) -> None:
    cluster.rest.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job)


def job_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    job = cluster.rest.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    status: dict[str, Any] = job.get("status", {})
    return status


def pods_by_node(cluster: Cluster, namespace: str, job: str) -> dict[str, str | None]:
    """The Job's pods (not being deleted) → the node each is bound to."""
    items = cluster.job_pods(namespace, job)
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName")
        for p in items
        if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") != "Succeeded"
    }


def running(cluster: Cluster, namespace: str, job: str, count: int) -> list[str] | None:
    """The Job's pods once ``count`` of them are Running."""
    items = cluster.job_pods(namespace, job)
    names = [p["metadata"]["name"] for p in items if p["status"].get("phase") == "Running"]
    return names if len(names) == count else None


def describe(cluster: Cluster, namespace: str) -> list[tuple[Any, ...]]:
    """Every pod of ``namespace``: name, phase, node, being deleted (failure reports)."""
    items = cluster.rest.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    return [
        (
            p["metadata"]["name"],
            p["status"].get("phase"),
            p["spec"].get("nodeName"),
            bool(p["metadata"].get("deletionTimestamp")),
        )
        for p in items
    ]


def replaced(
    cluster: Cluster, namespace: str, evicted: list[str], count: int
) -> dict[str, str | None] | None:
    """The filler's pods created after ``evicted`` were → their nodes, once there are
    ``count``."""
    fresh = {
        name: node
        for name, node in pods_by_node(cluster, namespace, "filler").items()
        if name not in evicted
    }
    return fresh if len(fresh) == count else None


@pytest.mark.parametrize("trials", [10])
def test_a_job_gang_preempts_a_job_filler_whose_replacements_wait(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
    trials: int,
) -> None:
    """(a) 10 seeded trials with varied arrival gaps.  The filler Job runs four pods, one
    per node; team A (min 16 = max 16) submits a 2-pod gang.  Derived from docs/design.md:
    team A is within its min, so it reclaims from the borrower; the gang needs two whole
    nodes, so the victims are two filler pods (the most recently started, ties by name
    — start times have a one-second resolution, so the test checks the victims are two
    of those started last), the gang binds whole on their nodes, and the Job controller's
    two replacements (after its back-off: 10 s, then 20 s for a second failure) stay
    unbound while the gang runs: its room and team B's borrowing are both spent."""
    for i in range(NODES):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    for seed in range(trials):
        rng = random.Random(seed)
        group = f"train-{seed}"
        teams = Teams(
            cluster,
            {"min": {GPU: "16"}, "max": {GPU: "16"}},
            {"min": {GPU: "0"}, "max": {GPU: "32"}},
            suffix=f"-t{seed}",
        )
        try:
            submit(cluster, teams.b, filler_job(600, podFailurePolicy=IGNORE_DISRUPTIONS))
            fillers = lc.wait_until(
                lambda teams=teams: running(cluster, teams.b, "filler", NODES),
                timeout=60,
                what=f"trial {seed}: the filler's four pods Running",
            )
            started = {
                n: parse_time(teams.get(teams.b, n)["status"]["startTime"])  # type: ignore[index]
                for n in fillers
            }
            time.sleep(rng.uniform(0.0, 1.5))  # the arrival gap this trial plays, not a wait
            submit(cluster, teams.a, training_job(group, run_seconds=600, size=2))
            lc.wait_until(
                lambda teams=teams, group=group: running(cluster, teams.a, group, 2),
                timeout=90,
                what=f"trial {seed}: the gang Running whole",
            )
            preempted = sorted(
                e["involvedObject"]["name"] for e in teams.events(teams.b, "Preempted")
            )
            assert len(preempted) == 2, (seed, preempted)
            # The victims are among the latest started: none started before a survivor.
            survivors = [n for n in fillers if n not in preempted]
            assert min(started[n] for n in preempted) >= max(started[n] for n in survivors)
            # Nothing of team A was ever a victim.
            assert teams.events(teams.a, "Preempted") == []
            try:
                replacements = lc.wait_until(
                    lambda teams=teams, fillers=fillers: replaced(cluster, teams.b, fillers, 2),
                    timeout=60,
                    what=f"trial {seed}: the filler's two replacements",
                )
            except TimeoutError as error:
                raise AssertionError(f"{error}: {describe(cluster, teams.b)}") from None
            # The Job controller has created them; they stay unbound while the gang runs
            # (checked once more after kube-scheduler has had them for a scheduling cycle).
            lc.wait_until(
                lambda teams=teams, names=list(replacements): (
                    all(condition(teams.get(teams.b, n) or {}, "PodScheduled") for n in names)
                    or None
                ),
                timeout=30,
                what=f"trial {seed}: kube-scheduler's verdict on the replacements",
            )
            again = replaced(cluster, teams.b, fillers, 2) or {}
            assert all(node is None for node in again.values()), (seed, again)
            assert job_status(cluster, teams.b, "filler").get("failed", 0) == 0
        finally:
            teams.cleanup()


@pytest.fixture
def muster_evicting_pods(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
) -> Iterator[MusterProcess]:
    """Muster and the evictor with ``restartEvictedJobs: false``: a Job whose pods all go
    has them evicted one by one, through the Eviction API."""
    with muster_with_arguments(
        control_plane, tmp_path, tokens, {"restartEvictedJobs": False}
    ) as muster:
        yield muster


def test_an_evicted_job_with_the_recommended_failure_policy_completes(
    cluster: Cluster,
    muster_evicting_pods: MusterProcess,
) -> None:
    """(b) The filler Job has ``podFailurePolicy`` Ignore on ``DisruptionTarget`` and
    ``backoffLimit: 0``: its four pods, evicted one by one (``restartEvictedJobs: false``),
    do not count as failures (``status.failed`` stays 0); its replacements run once the gang
    (10 s) completes, and the filler Job completes with four successes (each filler pod runs
    20 s: long enough that the gang evicts the first four before they finish)."""
    for i in range(NODES):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "32"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    try:
        filler = filler_job(20, podFailurePolicy=IGNORE_DISRUPTIONS, backoffLimit=0)
        submit(cluster, teams.b, filler)
        lc.wait_until(
            lambda: running(cluster, teams.b, "filler", NODES),
            timeout=60,
            what="the filler's four pods Running",
        )
        submit(cluster, teams.a, training_job("train", run_seconds=10))
        lc.wait_until(
            lambda: running(cluster, teams.a, "train", NODES), timeout=90, what="gang Running"
        )
        assert job_status(cluster, teams.b, "filler").get("failed", 0) == 0

        def complete(name: str, namespace: str) -> dict[str, Any] | None:
            status = job_status(cluster, namespace, name)
            done = any(
                c["type"] == "Complete" and c["status"] == "True"
                for c in status.get("conditions", [])
            )
            return status if done else None

        trained = lc.wait_until(
            lambda: complete("train", teams.a), timeout=90, what="the gang's Job complete"
        )
        assert trained.get("succeeded") == NODES
        filled = lc.wait_until(
            lambda: complete("filler", teams.b), timeout=120, what="the filler Job complete"
        )
        assert filled.get("succeeded") == NODES and filled.get("failed", 0) == 0, filled
        assert evictor_outcome(muster_evicting_pods, "evicted") == NODES
        # The pods that completed the filler are the replacements, and each started only
        # once the gang had ended (start times have a resolution of one second).
        assert len(teams.events(teams.b, "Preempted")) == NODES
        items = cluster.job_pods(teams.b, "filler")
        done = [p for p in items if p["status"].get("phase") == "Succeeded"]
        assert len(done) == NODES
        ended = parse_time(trained["completionTime"])
        assert all(parse_time(p["status"]["startTime"]) >= ended - 1 for p in done), done
    finally:
        teams.cleanup()


def _filler_reclaimed_whole(
    cluster: Cluster, teams: Teams, filler: dict[str, Any]
) -> tuple[list[str], float]:
    """Team B's ``filler`` submitted and running on every node, then team A's gang
    submitted, which reclaims them all: the filler's pods, and when all four were seen
    marked."""
    submit(cluster, teams.b, filler)
    fillers = lc.wait_until(
        lambda: running(cluster, teams.b, "filler", NODES),
        timeout=60,
        what="the filler's four pods Running",
    )
    submit(cluster, teams.a, training_job("train", run_seconds=600))
    lc.wait_until(
        lambda: len(teams.events(teams.b, "Preempted")) == NODES or None,
        timeout=60,
        what="the four filler pods marked",
    )
    return fillers, time.time()


def test_a_job_whose_pods_are_all_victims_is_restarted_without_the_failure_backoff(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """The filler Job runs four pods, one per node; team A (min = max 32) submits a
    4-pod gang, which reclaims every node: all four filler pods are victims of one plan,
    so their marks say to restart the Job (restartEvictedJobs, on by default), and the
    evictor suspends it, then resumes it once its pods are gone.  Evicted one by one,
    the Job controller would re-create them only after its failure backoff, 10 s doubled
    per pod failed since the Job's last success: 10 · 2³ = 80 s for four (kubernetes
    #130881: pods its podFailurePolicy ignores count too).  Restarted, its four
    replacements exist within 20 s of the marks, then wait unbound while the gang runs,
    and the Job is left resumed, without Muster's record."""
    for i in range(NODES):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "32"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    try:
        filler = filler_job(600, podFailurePolicy=IGNORE_DISRUPTIONS)
        fillers, marked = _filler_reclaimed_whole(cluster, teams, filler)
        try:
            replacements = lc.wait_until(
                lambda: replaced(cluster, teams.b, fillers, NODES),
                timeout=20,
                what="the filler's four replacements",
            )
        except TimeoutError as error:
            raise AssertionError(f"{error}: {describe(cluster, teams.b)}") from None
        assert time.time() - marked < 20
        lc.wait_until(
            lambda: running(cluster, teams.a, "train", NODES), timeout=90, what="gang Running"
        )
        assert all(node is None for node in replacements.values()), replacements
        job = cluster.rest.request("GET", f"/apis/batch/v1/namespaces/{teams.b}/jobs/filler")
        assert not job["spec"].get("suspend"), job["spec"]
        assert "muster.dev/restarting" not in job["metadata"].get("labels", {})
        assert "muster.dev/restarting" not in job["metadata"].get("annotations", {})
        assert evictor_outcome(muster_and_evictor, "job-restarted") == NODES
        assert evictor_outcome(muster_and_evictor, "evicted") == 0
    finally:
        teams.cleanup()


def test_a_job_whose_victims_have_notice_is_restarted_when_it_ends(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """As above, but the filler's pods ask 8 s of notice to save their work (team B's
    quota allows up to 60): each keeps running through its notice (the stand-in's pod
    ignores it), then the evictor suspends the Job, all four pods go at once, and the
    Job, resumed, re-creates them: 8 s after the marks at the earliest (the notice; the
    marks are written within a second), within 8 + 20 s, with no pod evicted."""
    for i in range(NODES):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "32"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    try:
        teams.annotate_quota(teams.b, {"muster.dev/max-preemption-notice-seconds": "60"})
        filler = filler_job(600, podFailurePolicy=IGNORE_DISRUPTIONS)
        filler["spec"]["template"]["metadata"].setdefault("annotations", {})[
            "muster.dev/preemption-notice-seconds"
        ] = "8"
        fillers, marked = _filler_reclaimed_whole(cluster, teams, filler)
        try:
            lc.wait_until(
                lambda: replaced(cluster, teams.b, fillers, NODES),
                timeout=28,
                what="the filler's four replacements",
            )
        except TimeoutError as error:
            raise AssertionError(f"{error}: {describe(cluster, teams.b)}") from None
        waited = time.time() - marked
        assert 6 <= waited < 28, waited
        lc.wait_until(
            lambda: running(cluster, teams.a, "train", NODES), timeout=90, what="gang Running"
        )
        # (A pod whose mark the evictor saw only after the Job's suspension is not counted.)
        assert evictor_outcome(muster_and_evictor, "job-restarted") >= 1
        assert evictor_outcome(muster_and_evictor, "evicted") == 0
    finally:
        teams.cleanup()


def test_a_job_whose_victim_saves_and_exits_is_restarted_once(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """One 8-GPU node.  Team B's filler Job runs one pod that asks 8 s of notice and
    answers it: marked, it saves its work and exits (the stand-in's pod ends ``Failed``,
    then writes ``muster.dev/checkpointed``).  Team A's 1-pod gang reclaims the node.
    The evictor restarts the filler's Job for the exit: suspended, then resumed, and the
    Job controller re-creates the pod (after its failure backoff: the exit was a
    failure).  The exited pod is not deleted by the suspension: it stays, holding
    nothing, until the evictor's 30 s of patience with pods still there after their
    Job's suspension run out, and is evicted then.  Derived from the rule (one restart
    for one plan's victims): the Job is restarted once, so its replacement is never
    deleted, whatever happens to the exited pod meanwhile (its checkpointed write, its
    eviction)."""
    cluster.create_node("n0", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "32"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    try:
        teams.annotate_quota(teams.b, {"muster.dev/max-preemption-notice-seconds": "60"})
        template = make_pod(
            "filler",
            requests={"cpu": "4", GPU: 8},
            labels=PREEMPTIBLE,
            annotations={"muster.dev/preemption-notice-seconds": "8", lc.ANSWERS_NOTICE: "fail"},
        )
        submit(
            cluster,
            teams.b,
            make_job("filler", template, run_seconds=600, podFailurePolicy=IGNORE_DISRUPTIONS),
        )
        (first,) = lc.wait_until(
            lambda: running(cluster, teams.b, "filler", 1), timeout=60, what="the filler Running"
        )
        submit(cluster, teams.a, training_job("train", run_seconds=600, size=1))

        def exited() -> float | None:
            pod = teams.get(teams.b, first)
            return time.time() if pod and pod["status"].get("phase") == "Failed" else None

        exited_at = lc.wait_until(exited, timeout=60, what="the filler's pod to exit on notice")

        def replacement() -> tuple[str, str] | None:
            fresh = [
                p["metadata"]
                for p in cluster.job_pods(teams.b, "filler")
                if p["metadata"]["name"] != first and not p["metadata"].get("deletionTimestamp")
            ]
            return (fresh[0]["name"], fresh[0]["uid"]) if fresh else None

        name, uid = lc.wait_until(replacement, timeout=90, what="the filler's replacement")
        lc.wait_until(
            lambda: running(cluster, teams.a, "train", 1), timeout=60, what="the gang Running"
        )
        # Watched past the patience (30 s from the suspension, which followed the exit)
        # and the exited pod's eviction: the replacement stays, the Job stays resumed.
        while time.time() < exited_at + 36 or teams.get(teams.b, first) is not None:
            pod = teams.get(teams.b, name)
            assert pod is not None and pod["metadata"]["uid"] == uid, describe(cluster, teams.b)
            assert not pod["metadata"].get("deletionTimestamp"), describe(cluster, teams.b)
            assert time.time() < exited_at + 60, describe(cluster, teams.b)
            time.sleep(0.5)  # (a window watched, not a wait for something to happen)
        job = cluster.rest.request("GET", f"/apis/batch/v1/namespaces/{teams.b}/jobs/filler")
        assert not job["spec"].get("suspend"), job["spec"]
        assert evictor_outcome(muster_and_evictor, "job-restarted") == 1
        assert evictor_outcome(muster_and_evictor, "evicted") == 1  # the exited pod
    finally:
        teams.cleanup()


def test_deleting_the_preemptor_job_releases_its_room_and_takes_back_its_marks(
    cluster: Cluster,
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
) -> None:
    """(d) Garbage collection.  Two nodes, the filler Job on both (60 s grace period);
    team A (min 16 = max 16) submits a 2-pod gang Job, so both filler pods are marked (no
    evictor runs: the test plays one, for one victim only).  One victim starts
    terminating; then the gang's Job is deleted and the garbage collector deletes its
    pods.  Derived from docs/design.md (a plan whose job is gone is undone): Muster releases
    the job's reservation, takes back the mark of the victim not yet leaving (label gone,
    ``DisruptionTarget`` False), and the terminating one goes on terminating."""
    with muster_without_evictor(control_plane, tmp_path, tokens, 300) as muster:
        for i in range(2):
            cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
        teams = Teams(
            cluster,
            {"min": {GPU: "16"}, "max": {GPU: "16"}},
            {"min": {GPU: "0"}, "max": {GPU: "32"}},
        )
        try:
            template = make_pod(
                "filler", requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE, grace_seconds=60
            )
            submit(cluster, teams.b, make_job("filler", template, parallelism=2))
            fillers = lc.wait_until(
                lambda: running(cluster, teams.b, "filler", 2), timeout=60, what="filler Running"
            )
            submit(cluster, teams.a, training_job("train", run_seconds=600, size=2))

            def marked() -> list[str] | None:
                pods = [teams.get(teams.b, n) or {} for n in fillers]
                return (
                    fillers if all(SOFT_EVICTION in p["metadata"]["labels"] for p in pods) else None
                )

            lc.wait_until(marked, timeout=30, what="both filler pods marked for the gang")
            job = f"{teams.a}/train"
            lc.wait_until(
                lambda: (muster.debug("jobs").get(job) or {}).get("reservation") or None,
                timeout=15,
                what="the gang's reservation",
            )
            leaving, kept = sorted(fillers)
            cluster.rest.request("DELETE", f"/api/v1/namespaces/{teams.b}/pods/{leaving}")
            cluster.rest.request(
                "DELETE",
                f"/apis/batch/v1/namespaces/{teams.a}/jobs/train",
                query={"propagationPolicy": "Background"},
            )
            lc.wait_until(
                lambda: not job_pods(cluster, teams.a, "train") or None,
                timeout=30,
                what="the garbage collector deleting the gang's pods",
            )
            try:
                lc.wait_until(
                    lambda: (
                        (muster.debug("jobs").get(job) or {}).get("reservation") is None or None
                    ),
                    timeout=30,
                    what="the gang's reservation released",
                )
            except TimeoutError as error:
                seen = muster.debug("jobs").get(job)
                raise AssertionError(f"{error}: {seen}; {describe(cluster, teams.a)}") from None

            def taken_back() -> dict[str, Any] | None:
                pod = teams.get(teams.b, kept) or {}
                target = condition(pod, "DisruptionTarget") or {}
                unmarked = SOFT_EVICTION not in (pod.get("metadata", {}).get("labels") or {})
                return pod if unmarked and target.get("status") == "False" else None

            pod = lc.wait_until(taken_back, timeout=30, what=f"{kept}'s mark taken back")
            assert pod["status"]["phase"] == "Running" and not pod["metadata"].get(
                "deletionTimestamp"
            )
            still = teams.get(teams.b, leaving) or {}
            assert still.get("metadata", {}).get("deletionTimestamp"), still
        finally:
            teams.cleanup()


@pytest.mark.parametrize(
    ("gang_label", "gang_annotation"),
    [
        ({GANG_LABEL: "train"}, {}),
        ({ALL_OR_NOTHING: "true"}, {}),
        ({}, {"scheduling.k8s.io/group-name": "train"}),  # Volcano's
        ({"kueue.x-k8s.io/pod-group-name": "train"}, {}),  # Kueue's plain-pod group
    ],
    ids=["pod-group", "all-or-nothing", "volcano", "kueue"],
)
def test_a_job_gang_of_undeclared_size_takes_its_size_from_the_job(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
    gang_label: dict[str, str],
    gang_annotation: dict[str, str],
) -> None:
    """A Job of four 8-GPU pods with the pod-group label (or Volcano's annotation, or
    Kueue's label; or, with no pod-group name, the all-or-nothing label: the gang is named
    after the Job) and nothing else (no PodGroup,
    no min-available annotation), on three free 8-GPU nodes.  Derived from the rule (a
    Job owning a pod group's pods declares its size: ``parallelism`` 4): the gang is
    four, three fit, so no pod binds (never in part); once a fourth node appears, all four
    bind."""
    for i in range(3):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "32"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    try:
        template = make_pod(
            "train",
            requests={"cpu": "4", GPU: 8},
            labels={**TRAINER, **gang_label},
            annotations=gang_annotation,
        )
        submit(cluster, teams.a, make_job("train", template, parallelism=NODES, run_seconds=600))

        def all_refused() -> dict[str, str | None] | None:
            items = cluster.job_pods(teams.a, "train")
            refused = [p for p in items if (condition(p, "PodScheduled") or {}).get("status")]
            if len(items) == NODES and len(refused) == NODES:
                return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}
            return None

        seen = lc.wait_until(all_refused, timeout=60, what="kube-scheduler's verdict on all four")
        assert all(node is None for node in seen.values()), seen
        job = muster_and_evictor.debug("jobs").get(f"{teams.a}/train") or {}
        assert job.get("minAvailable") == NODES, job
        cluster.create_node("n3", {"cpu": "32", "memory": "128Gi", GPU: 8})
        lc.wait_until(
            lambda: running(cluster, teams.a, "train", NODES), timeout=60, what="all four Running"
        )
        nodes = pods_by_node(cluster, teams.a, "train")
        assert sorted(node or "" for node in nodes.values()) == sorted(cluster.nodes), nodes
    finally:
        teams.cleanup()


def test_a_plain_jobs_pods_are_independent_under_one_quota(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """A Job of five 8-GPU pods, no gang label, five free nodes, quota max 24 GPUs, each
    pod running 8 s.  Derived from the rule (a plain Job's pods are each a job of their
    own, checked against the quota as they come): three run at once (3 x 8 = 24 <= 24;
    a fourth would make 32), never more, and the other two run as the first finish, so
    the Job completes (5 succeeded, none failed).  Gang admission would have refused all
    five (40 > 24) for ever."""
    for i in range(5):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "0"}, "max": {GPU: "24"}}, {"min": {GPU: "0"}, "max": {GPU: "8"}}
    )
    try:
        template = make_pod("sweep", requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE)
        submit(cluster, teams.a, make_job("sweep", template, parallelism=5, run_seconds=8))
        most = 0

        def completed() -> dict[str, Any] | None:
            nonlocal most
            items = cluster.job_pods(teams.a, "sweep")
            holding = [
                p
                for p in items
                if p["spec"].get("nodeName") and p["status"].get("phase") != "Succeeded"
            ]
            most = max(most, len(holding))
            status = job_status(cluster, teams.a, "sweep")
            return status if status.get("succeeded") == 5 else None

        status = lc.wait_until(completed, timeout=120, interval=0.05, what="the Job completes")
        assert most == 3, most
        assert not status.get("failed"), status
    finally:
        teams.cleanup()


def test_a_gangs_last_pod_runs_when_the_job_has_fewer_to_go_than_its_minimum(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    """An elastic Job gang declaring a minimum of 2 (the min-available annotation), 2 pods
    at a time, 3 completions, each pod running 3 s, on two free 8-GPU nodes.  Derived from
    the rule (a gang's minimum is never more than its controller still runs): the first
    two pods run together and succeed; the Job controller then creates min(2, 3 - 2) = 1
    pod, whose gang minimum is 1, so it binds alone and the Job completes (3 succeeded).
    Held to the declared 2, it would wait for a second pod that never comes."""
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "16"}}, {"min": {GPU: "0"}, "max": {GPU: "8"}}
    )
    try:
        template = make_pod(
            "elastic",
            requests={"cpu": "4", GPU: 8},
            labels={**TRAINER, GANG_LABEL: "elastic"},
            annotations={MIN_AVAILABLE: "2"},
        )
        job = make_job("elastic", template, parallelism=2, completions=3, run_seconds=3)
        submit(cluster, teams.a, job)

        def completed() -> dict[str, Any] | None:
            status = job_status(cluster, teams.a, "elastic")
            return status if status.get("succeeded") == 3 else None

        try:
            status = lc.wait_until(completed, timeout=90, what="the Job's three completions")
        except TimeoutError as error:
            found = muster_and_evictor.debug("jobs").get(f"{teams.a}/elastic")
            raise AssertionError(f"{error}: {describe(cluster, teams.a)}; {found}") from None
        assert not status.get("failed"), status
        assert len(cluster.job_pods(teams.a, "elastic")) == 3
    finally:
        teams.cleanup()


def protected_fillers(cluster: Cluster, teams: Teams, apps: list[str]) -> dict[str, str]:
    """One Job per app in team B, one 8-GPU preemptible pod each, started in this order
    (one node each), each Job's pods under a budget ``minAvailable: 1`` kept by the real
    disruption controller (which then allows 0 disruptions); returns app → its pod."""
    pods = {}
    for app in apps:
        template = make_pod(app, requests={"cpu": "4", GPU: 8}, labels={**PREEMPTIBLE, "app": app})
        submit(cluster, teams.b, make_job(app, template, run_seconds=600))
        pods[app] = lc.wait_until(
            lambda app=app: (running(cluster, teams.b, app, 1) or [None])[0],
            timeout=60,
            what=f"{app}'s pod Running",
        )
        path = f"/apis/policy/v1/namespaces/{teams.b}/poddisruptionbudgets"
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": app, "namespace": teams.b},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        }
        cluster.rest.request("POST", path, budget)
        lc.wait_until(
            lambda app=app, path=path: (
                cluster.rest.request("GET", f"{path}/{app}").get("status", {}).get("currentHealthy")
                == 1
                or None
            ),
            timeout=30,
            what=f"the disruption controller counting {app}'s budget",
        )
    return pods


@pytest.mark.parametrize("policy", ["BestEffort", "Strict"])
def test_a_budget_on_a_job_filler_kept_by_the_disruption_controller_decides_the_victims(
    cluster: Cluster,
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
    policy: str,
) -> None:
    """(c) Two 8-GPU nodes borrowed by team B's Jobs ``etl`` then ``web`` (one pod each);
    ``web`` has a budget the disruption controller keeps at 0 disruptions allowed, ``etl``
    none.  Team A (min 16) asks for one 8-GPU pod.  Derived from docs/design.md: web's pod
    started last and would go first, but a plan without it exists (etl's pod), so etl's
    is the victim and web's is spared, under BestEffort (a plan free of budgets is
    preferred) and Strict (a protected pod is never a victim) alike.  (Strict with only
    protected victims marking nothing: tests/e2e/test_budgets.py, on the same real
    disruption controller.)"""
    arguments = {"pdbPolicy": policy, "victimEvictionDeadlineSeconds": 600}
    with muster_with_arguments(control_plane, tmp_path, tokens, arguments) as muster:
        for i in range(2):
            cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
        teams = Teams(
            cluster,
            {"min": {GPU: "16"}, "max": {GPU: "32"}},
            {"min": {GPU: "0"}, "max": {GPU: "32"}},
        )
        try:
            pods = protected_fillers(cluster, teams, ["etl"])
            pods.update(protected_fillers(cluster, teams, ["web"]))
            # etl's budget is deleted: only web's protects (the helper made both).
            cluster.rest.request(
                "DELETE", f"/apis/policy/v1/namespaces/{teams.b}/poddisruptionbudgets/etl"
            )
            lc.wait_until(
                lambda: (muster.debug("budgets").get(f"{teams.b}/etl") is None) or None,
                timeout=15,
                what="Muster forgetting etl's budget",
            )
            template = make_pod("train", requests={"cpu": "4", GPU: 8}, labels=TRAINER)
            submit(cluster, teams.a, make_job("train", template, run_seconds=600))
            lc.wait_until(
                lambda: running(cluster, teams.a, "train", 1), timeout=60, what="train Running"
            )
            preempted = [e["involvedObject"]["name"] for e in teams.events(teams.b, "Preempted")]
            assert preempted == [pods["etl"]], preempted
            spared = teams.get(teams.b, pods["web"]) or {}
            assert spared.get("status", {}).get("phase") == "Running"
            assert SOFT_EVICTION not in spared["metadata"].get("labels", {})
        finally:
            teams.cleanup()
