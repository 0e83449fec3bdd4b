"""Restarting a Job whose pods are all victims (extender/core/restart.py) and the
evictor's restarter (extender/kube/restarter.py) against a scripted API client.

The rule (docs/quotas-and-preemption.md, "Restarting a victim Job"): a victim's mark says
to restart its Job when the argument is on, its controller is a Job, every other pod of
that Job has finished, is terminating, or is a victim of the same plan, and no
PodDisruptionBudget covers one of them; victims with notice all get the Job's longest, and
the Job is suspended when the first is due or answers.  The scenario: two
nodes of 8 GPUs, team-b's Job ``filler`` runs one 8-GPU pod on each (borrowed: team-b's
``min`` is 0), team-a (``min`` 16) submits a gang of two 8-GPU pods: it reclaims both
nodes, so both filler pods are victims (found by hand: nothing else runs).
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any, cast

import httpx
import pytest

from base import keys
from extender.core.budgets import parse_pod_disruption_budget
from extender.core.config import MusterArgs
from extender.core.objects import parse_pod
from extender.core.preemption.completion import completion_notices
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.state import ClusterState
from extender.kube.client import ApiError, Json, KubeClient
from extender.kube.evictor import Evictor
from extender.kube.restarter import JobRestarter
from tests.builders import hold_plan, leaving, node, pod, quota, record_keys, signed, snapshot

GPU = "nvidia.com/gpu"
NOW = 1_767_268_800.0  # 2026-01-01T12:00:00Z
JOB_UID = "job-uid-1"


#: The label the Job controller puts on its pods, and selects them by.
SELECTED = {"batch.kubernetes.io/controller-uid": JOB_UID}


def filler(name: str, node_name: str | None, *, kind: str = "Job", **extra: Any) -> Any:
    made = pod(name, "team-b", gpu=8, node=node_name, preemptible=True, labels=SELECTED, **extra)
    made["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1" if kind == "Job" else "apps/v1", "kind": kind,
         "name": "filler", "uid": JOB_UID, "controller": True}
    ]  # fmt: skip
    return made


def cluster(*extra: Any, kind: str = "Job", nodes: int = 2, **arguments: Any) -> ClusterState:
    gang = {keys.POD_GROUP_LABEL: "train"}
    size = {"gang.scheduling.koordinator.sh/min-available": "2"}
    return snapshot(
        [node(f"n{i}", gpu=8) for i in range(1, nodes + 1)],
        [
            filler("filler-a", "n1", kind=kind),
            filler("filler-b", "n2", kind=kind),
            *extra,
            *(
                pod(f"train-{i}", "team-a", gpu=8, can_preempt=True, labels=gang, annotations=size)
                for i in range(2)
            ),
        ],
        [
            quota("team-a", min={GPU: "16"}, max={GPU: "16"}),
            quota("team-b", max={GPU: "24"}),
        ],
        MusterArgs(**arguments),
    )


def restarted(state: ClusterState) -> dict[str, bool]:
    plan = plan_job_preemption(state, "team-a/train", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    return {victim.pod.name: victim.restart_job for victim in plan.victims}


NONE = {"filler-a": False, "filler-b": False}


def test_a_job_whose_pods_are_all_victims_is_restarted() -> None:
    assert restarted(cluster()) == {"filler-a": True, "filler-b": True}


def test_a_pod_of_the_job_running_elsewhere_or_waiting_stops_the_restart() -> None:
    # A third node with a third pod of the Job: the gang takes two of the three nodes, and
    # the Job keeps one pod running, which the suspension would delete too.
    victims = restarted(cluster(filler("filler-c", "n3"), nodes=3))
    assert len(victims) == 2 and not any(victims.values()), victims
    # A third pod of the Job waiting to be placed: the suspension would delete it too.
    assert restarted(cluster(filler("filler-c", None))) == NONE
    # A third pod finished (Succeeded): the Job loses nothing else; restarted.
    done = filler("filler-c", None)
    done["status"] = {"phase": "Succeeded"}
    assert restarted(cluster(done)) == {"filler-a": True, "filler-b": True}


def test_the_argument_a_budget_or_another_controller_stops_the_restart() -> None:
    assert restarted(cluster(restartEvictedJobs=False)) == NONE
    assert restarted(cluster(kind="ReplicaSet")) == NONE
    state = cluster()
    state.set_budget(
        parse_pod_disruption_budget(
            {
                "metadata": {"name": "pdb", "namespace": "team-b"},
                "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {}}},
                "status": {"disruptionsAllowed": 2, "expectedPods": 2, "currentHealthy": 2},
            }
        )
    )
    assert restarted(state) == NONE
    # Pods owned by a "Job" without the batch/v1 Job controller's label (another API's
    # Job, such as Volcano's): not restarted.
    other_api = cluster()
    for name, where in (("filler-a", "n1"), ("filler-b", "n2")):
        manifest = filler(name, where)
        del manifest["metadata"]["labels"]["batch.kubernetes.io/controller-uid"]
        other_api.upsert_pod(parse_pod(manifest))
    assert restarted(other_api) == NONE


#: filler-a asks 30 s of notice, filler-b 10 s.
ASKED = {
    "filler-a": {keys.PREEMPTION_NOTICE_ANNOTATION: "30"},
    "filler-b": {keys.PREEMPTION_NOTICE_ANNOTATION: "10"},
}


def declaring(
    state: ClusterState, annotations: dict[str, dict[str, str]], **extra: Any
) -> dict[str, Any]:
    """The fillers (filler-a on n1, filler-b on n2) put in ``state`` again, each with its
    ``annotations`` (``extra``: more pod fields); their manifests, by name."""
    manifests = {}
    for name, where in (("filler-a", "n1"), ("filler-b", "n2")):
        manifest = filler(name, where, **extra)
        manifest["metadata"]["annotations"].update(annotations[name])
        manifests[name] = manifest
        state.upsert_pod(parse_pod(manifest))
    return manifests


def notices_and_restarts(state: ClusterState) -> dict[str, tuple[float, bool]]:
    """Each victim of team-a/train's plan: the notice it gets, and whether its Job restarts."""
    plan = plan_job_preemption(state, "team-a/train", NOW)
    assert isinstance(plan, PreemptionPlan)
    return {v.pod.name: (v.notice_seconds, v.restart_job) for v in plan.victims}


def test_victims_with_notice_keep_it_and_their_job_is_restarted_once_it_ends() -> None:
    # Declared notice: filler-a asks 30 s, filler-b 10 s (the cap, 60 s, allows both).  The
    # suspension deletes both at once, so both get the Job's longest, 30 s, and the Job is
    # restarted (the evictor suspends it when the first is due).
    noticed = cluster(maxPreemptionNoticeSeconds=60)
    declaring(noticed, ASKED)
    assert notices_and_restarts(noticed) == {"filler-a": (30.0, True), "filler-b": (30.0, True)}
    plan = plan_job_preemption(noticed, "team-a/train", NOW)
    assert isinstance(plan, PreemptionPlan)
    assert "the longest of its Job's" in next(
        v.reason for v in plan.victims if v.pod.name == "filler-b"
    )
    # Notice to their next save: the pods started at 11:59:30 and save every 60 s, so at
    # NOW (12:00:00) they last saved 30 s ago and save next at 12:00:30; with a cap of 60
    # s they get 32 s of notice (to 2 s after that save), and their Job is restarted then.
    saving = cluster(maxPreemptionNoticeSeconds=60)
    every_minute = {keys.CHECKPOINT_INTERVAL_ANNOTATION: "60"}
    declaring(
        saving,
        {"filler-a": every_minute, "filler-b": every_minute},
        started="2026-01-01T11:59:30Z",
    )
    assert notices_and_restarts(saving) == {"filler-a": (32.0, True), "filler-b": (32.0, True)}


@pytest.mark.parametrize("first_marked", [False, True])
def test_completing_a_plan_restarts_the_job_with_the_notice_its_plan_gave(
    first_marked: bool,
) -> None:
    # A Muster stopped between the reservation (made at NOW) and the marks; the next one
    # completes it at NOW + 4.  filler-a asked 30 s of notice, filler-b 10 s: the plan
    # gave both the Job's longest, 30 s, to NOW + 30: 26 s are left.  Whether filler-a was
    # marked before the stop or not, it is the plan's victim: filler-b's Job is restarted.
    state = cluster(maxPreemptionNoticeSeconds=60)
    manifests = declaring(state, ASKED)
    plan = plan_job_preemption(state, "team-a/train", NOW)
    assert isinstance(plan, PreemptionPlan)
    hold_plan(state, plan, NOW)
    unmarked = ["filler-b"]
    if first_marked:
        state.upsert_pod(parse_pod(leaving(manifests["filler-a"], "team-a/train", "marked")))
    else:
        unmarked.insert(0, "filler-a")
    pods = [(state.pods[f"team-b/{name}"], "team-a/train") for name in unmarked]
    notices, restarted = completion_notices(state, pods, NOW + 4)
    assert notices == {f"team-b/{name}": 26.0 for name in unmarked}
    assert restarted == {f"team-b/{name}" for name in unmarked}


# ---- the evictor's restarter, against a scripted client --------------------------------


class JobsClient:
    """One Job, ``team-b/filler``: GET answers it, PATCH merges into it (checking the UID
    precondition), LIST answers every Job."""

    def __init__(self, job: dict[str, Any], *, refuse: int | None = None) -> None:
        self.job = job
        self.refuse = refuse
        self.patches: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        if self.refuse is not None:
            raise ApiError(self.refuse, "scripted")
        if method == "GET" and path == "/apis/batch/v1/jobs":
            return {"items": [self.job]}
        assert path == "/apis/batch/v1/namespaces/team-b/jobs/filler", path
        if method == "GET":
            return json.loads(json.dumps(self.job))
        assert method == "PATCH"
        if body["metadata"]["uid"] != self.job["metadata"]["uid"]:
            raise ApiError(409, "uid precondition")
        self.patches.append(body)
        for part in ("labels", "annotations"):
            merged = {**self.job["metadata"].get(part, {}), **body["metadata"][part]}
            self.job["metadata"][part] = {k: v for k, v in merged.items() if v is not None}
        self.job["spec"].update(body.get("spec", {}))
        return self.job


def job(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "filler", "namespace": "team-b", "uid": JOB_UID},
        "spec": {"parallelism": 2, "selector": {"matchLabels": SELECTED}, **spec},
        "status": {"active": 2},
    }


def victim(uid: str = JOB_UID) -> dict[str, Any]:
    made = filler("filler-a", "n1")
    made["metadata"]["ownerReferences"][0]["uid"] = uid
    return cast(dict[str, Any], made)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def restarter(client: JobsClient, clock: Clock | None = None) -> JobRestarter:
    return JobRestarter(cast(KubeClient, client), record_keys=record_keys, clock=clock or Clock())


def test_the_restarter_suspends_then_resumes_once_the_pods_are_gone() -> None:
    client, clock = JobsClient(job()), Clock()
    restarting = restarter(client, clock)
    assert restarting.restart(victim())
    assert client.job["spec"]["suspend"] is True
    assert client.job["metadata"]["labels"] == {keys.RESTARTING_KEY: "true"}
    # The second pod of the same Job: suspended already, nothing patched again.
    assert restarting.restart(victim()) and len(client.patches) == 1
    # Its pods are still active, then terminating: not resumed yet (tried again after 1 s,
    # then 2 s: the backoff doubles).
    assert restarting.resume_due() == 0 and client.job["spec"]["suspend"] is True
    client.job["status"] = {"active": 0, "terminating": 2}
    clock.now += 1
    assert restarting.resume_due() == 0 and client.job["spec"]["suspend"] is True
    client.job["status"] = {"active": 0, "terminating": 0}
    clock.now += 1
    assert restarting.resume_due() == 0  # (not due: 2 s after the last try)
    clock.now += 1
    assert restarting.resume_due() == 1
    assert client.job["spec"]["suspend"] is False
    assert keys.RESTARTING_KEY not in client.job["metadata"]["labels"]
    assert keys.RESTARTING_KEY not in client.job["metadata"]["annotations"]
    assert restarting.suspended() == {}


def test_a_job_resumed_by_someone_else_is_let_go_without_its_record() -> None:
    client = JobsClient(job())
    restarting = restarter(client)
    assert restarting.restart(victim())
    client.job["spec"]["suspend"] = False  # its owner resumed it
    assert restarting.resume_due() == 0
    assert client.job["spec"]["suspend"] is False  # left as its owner set it
    assert keys.RESTARTING_KEY not in client.job["metadata"]["labels"]
    assert keys.RESTARTING_KEY not in client.job["metadata"]["annotations"]
    # Suspended by its owner later, it is not Muster's to resume: no record, no entry.
    client.job["spec"]["suspend"] = True
    assert restarter(client).recover() == 0 and restarting.suspended() == {}


def test_a_suspension_whose_answer_was_lost_is_resumed_all_the_same() -> None:
    client = JobsClient(job())

    class LostAnswer(JobsClient):
        def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
            answer = client.request(method, path, body, **kw)
            if method == "PATCH" and body.get("spec", {}).get("suspend"):
                raise httpx.ReadTimeout("answer lost")
            return answer

    restarting = restarter(LostAnswer(job()))
    assert not restarting.restart(victim())  # the pod is evicted, to be sure
    assert client.job["spec"]["suspend"] is True  # yet the patch took
    client.job["status"] = {"active": 0}
    restarting.client = cast(KubeClient, client)
    assert restarting.resume_due() == 1 and client.job["spec"]["suspend"] is False


@pytest.mark.parametrize(
    "case",
    [
        "another Job of that name",
        "suspended already",
        "managed by another controller",
        "run by a JobSet",
        "queued by Kueue",
        "403",
        "a pod the Job does not select",
        "an owner name that is a path",
    ],
)
def test_the_restarter_leaves_a_job_it_may_not_restart_to_eviction(case: str) -> None:
    made_job = job()
    if case == "suspended already":
        made_job["spec"]["suspend"] = True
    if case == "managed by another controller":
        made_job["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    if case == "run by a JobSet":
        made_job["metadata"]["ownerReferences"] = [
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js",
             "uid": "js-uid", "controller": True}
        ]  # fmt: skip
    if case == "queued by Kueue":
        made_job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-b"}
    client = JobsClient(made_job, refuse=403 if case == "403" else None)
    pod_uid = "another-uid" if case == "another Job of that name" else JOB_UID
    made = victim(pod_uid)
    if case == "a pod the Job does not select":  # an owner reference its writer forged
        made["metadata"]["labels"] = {}
    if case == "an owner name that is a path":  # would reach another namespace's Job
        made["metadata"]["ownerReferences"][0]["name"] = "../../other/jobs/filler"
    assert not restarter(client).restart(made)
    assert client.patches == []


def test_a_restarted_evictor_resumes_only_the_jobs_muster_suspended() -> None:
    client = JobsClient(job())
    assert restarter(client).restart(victim())
    client.job["status"] = {"active": 0}
    again = restarter(client)  # a new evictor: it finds the record, believes it, resumes
    assert again.recover() == 1 and again.resume_due() == 1
    assert client.job["spec"]["suspend"] is False
    # A tenant's own label and a record copied from another Job's UID are not believed.
    forged = job(suspend=True)
    copied = (
        restarter(JobsClient(job()))
        .record_keys()
        .sign(keys.RESTARTING_KEY, "another-uid", {"timestamp": "2026-01-01T12:00:00Z"})
    )
    forged["metadata"]["labels"] = {keys.RESTARTING_KEY: "true"}
    forged["metadata"]["annotations"] = {keys.RESTARTING_KEY: json.dumps(copied)}
    tenant = JobsClient(forged)
    assert restarter(tenant).recover() == 0 and tenant.patches == []


class JobsAndEvictions(JobsClient):
    """:class:`JobsClient` that also takes evictions (recorded by pod name)."""

    def __init__(self, job: dict[str, Any], *, refuse: int | None = None) -> None:
        super().__init__(job)
        self.refuse_jobs = refuse
        self.evicted: list[str] = []

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        if path.endswith("/eviction"):
            self.evicted.append(path.split("/")[-2])
            return {}
        if self.refuse_jobs is not None:
            raise ApiError(self.refuse_jobs, "scripted")
        return super().request(method, path, body, **kwargs)


def marked_for_restart(
    name: str,
    uid: str,
    *,
    restart: bool = True,
    notice: float = 0,
    preemptor: str = "team-a/train",
    at: str = "2026-01-01T12:00:00Z",
) -> dict[str, Any]:
    made = filler(name, "n1")
    mark: dict[str, Any] = {"preemptor": preemptor, "timestamp": at}
    if restart:
        mark["restartJob"] = True
    if notice:
        mark["noticeSeconds"] = notice
    made["metadata"]["uid"] = uid
    made["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    made["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = signed(
        keys.SOFT_EVICTION_KEY, uid, mark
    )
    return cast(dict[str, Any], made)


def test_the_evictor_restarts_the_job_of_a_mark_that_says_so_else_evicts() -> None:
    client = JobsAndEvictions(job())
    made = Evictor(cast(KubeClient, client), clock=lambda: NOW, record_keys=record_keys)
    made._on_pod("ADDED", marked_for_restart("filler-a", "u-a"))
    made._on_pod("ADDED", marked_for_restart("filler-b", "u-b"))
    assert client.evicted == [] and client.job["spec"]["suspend"] is True
    assert len(client.patches) == 1
    # A mark without restartJob: evicted as ever.
    made._on_pod("ADDED", marked_for_restart("lone", "u-c", restart=False))
    assert client.evicted == ["lone"]
    # The Job may not be read (no RBAC for Jobs): its pods are evicted instead.
    refused = JobsAndEvictions(job(), refuse=403)
    other = Evictor(cast(KubeClient, refused), clock=lambda: NOW, record_keys=record_keys)
    other._on_pod("ADDED", marked_for_restart("filler-a", "u-a"))
    assert refused.evicted == ["filler-a"]


def test_the_evictor_restarts_a_noticed_job_once_every_pod_is_due_answered_or_exited() -> None:
    # Both pods marked at NOW (12:00:00) with the Job's 30 s of notice: nothing happens
    # before 12:00:30; then the Job is suspended once, with no pod evicted.
    client = JobsAndEvictions(job())
    now = [NOW]
    made = Evictor(cast(KubeClient, client), clock=lambda: now[0], record_keys=record_keys)
    for name, uid in (("filler-a", "u-a"), ("filler-b", "u-b")):
        made._on_pod("ADDED", marked_for_restart(name, uid, notice=30))
    assert client.patches == [] and "suspend" not in client.job["spec"]
    now[0] += 29
    made.retry_due()
    assert client.patches == []
    now[0] += 1
    made.retry_due()
    assert client.job["spec"]["suspend"] is True and len(client.patches) == 1
    assert client.evicted == []
    # filler-a answers at 12:00:05 (it saved); filler-b has not: one pod's answer does not
    # cut the other's notice short.  filler-b exits at 12:00:08 (it saved and stopped):
    # every pod is ready, and the Job is suspended then, nothing evicted.
    answering = JobsAndEvictions(job())
    now[0] = NOW + 5
    other = Evictor(cast(KubeClient, answering), clock=lambda: now[0], record_keys=record_keys)
    other._on_pod("ADDED", marked_for_restart("filler-b", "u-b", notice=30))
    saved = marked_for_restart("filler-a", "u-a", notice=30)
    saved["metadata"]["annotations"][keys.CHECKPOINTED_ANNOTATION] = "2026-01-01T12:00:05Z"
    other._on_pod("MODIFIED", saved)
    assert "suspend" not in answering.job["spec"]
    now[0] = NOW + 8
    done = marked_for_restart("filler-b", "u-b", notice=30)
    done["status"]["phase"] = "Failed"
    other._on_pod("MODIFIED", done)
    assert answering.job["spec"]["suspend"] is True and answering.evicted == []


def test_a_victim_that_exited_restarts_its_job_once() -> None:
    # (Seen on the head-to-head's trace.)  filler-a, marked at 12:00:00 with 30 s of
    # notice, exits at 12:00:08: the Job is suspended then (one patch), and resumed once
    # its pods are gone.  An exited pod is not deleted by the suspension (the Job
    # controller deletes active pods only), so it stays, and the API still changes it:
    # its own checkpointed write, then, once the evictor evicts it as still there 30 s
    # (restart_patience_seconds) after the suspension, the eviction API's condition.
    # Derived from the rule: the Job is restarted once for one plan's victims, so none
    # of those events suspends it again (which would delete the replacement pod it runs
    # by then); the exited pod is evicted once, at 12:00:38.
    client = JobsAndEvictions(job())
    now = [NOW + 8]
    made = Evictor(cast(KubeClient, client), clock=lambda: now[0], record_keys=record_keys)
    exited = marked_for_restart("filler-a", "u-a", notice=30)
    exited["status"]["phase"] = "Failed"
    made._on_pod("MODIFIED", exited)
    assert client.job["spec"]["suspend"] is True and len(client.patches) == 1
    client.job["status"] = {"active": 0, "terminating": 0}
    now[0] += 1
    assert made.restarter.resume_due() == 1 and client.job["spec"]["suspend"] is False
    patches = len(client.patches)
    saved = copy.deepcopy(exited)
    saved["metadata"]["annotations"][keys.CHECKPOINTED_ANNOTATION] = "2026-01-01T12:00:09Z"
    made._on_pod("MODIFIED", saved)
    now[0] = NOW + 37
    made.retry_due()
    assert client.evicted == []
    now[0] = NOW + 38
    made.retry_due()
    assert client.evicted == ["filler-a"]
    evicting = copy.deepcopy(saved)
    evicting["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
    made._on_pod("MODIFIED", evicting)
    now[0] = NOW + 60
    made.retry_due()
    assert client.job["spec"]["suspend"] is False and len(client.patches) == patches
    assert client.evicted == ["filler-a"]


def test_a_ready_pod_waiting_for_a_sibling_that_goes_restarts_its_job() -> None:
    # filler-a answered; filler-b, still on notice, is deleted (by hand, say): filler-a
    # waited for it alone, so the Job is suspended then.
    client = JobsAndEvictions(job())
    made = Evictor(cast(KubeClient, client), clock=lambda: NOW + 5, record_keys=record_keys)
    waiting = marked_for_restart("filler-b", "u-b", notice=30)
    made._on_pod("ADDED", waiting)
    saved = marked_for_restart("filler-a", "u-a", notice=30)
    saved["metadata"]["annotations"][keys.CHECKPOINTED_ANNOTATION] = "2026-01-01T12:00:05Z"
    made._on_pod("ADDED", saved)
    assert "suspend" not in client.job["spec"]
    made._on_pod("DELETED", waiting)
    assert client.job["spec"]["suspend"] is True and client.evicted == []


def test_simulate_says_which_victims_jobs_are_restarted() -> None:
    plan = plan_job_preemption(cluster(), "team-a/train", NOW)
    assert isinstance(plan, PreemptionPlan)
    assert all("the Job is restarted" in victim.reason for victim in plan.victims)
    plan = plan_job_preemption(cluster(restartEvictedJobs=False), "team-a/train", NOW)
    assert isinstance(plan, PreemptionPlan)
    assert not any("restarted" in victim.reason for victim in plan.victims)


def test_a_pod_still_there_after_its_job_s_suspension_is_evicted_after_all() -> None:
    # The Job is suspended for filler-a, but filler-a is not deleted (the Job controller
    # down, say): 30 s (restart_patience_seconds) after, the evictor evicts it itself.
    client = JobsAndEvictions(job())
    now = [NOW]
    made = Evictor(cast(KubeClient, client), clock=lambda: now[0], record_keys=record_keys)
    made._on_pod("ADDED", marked_for_restart("filler-a", "u-a"))
    assert client.evicted == [] and client.job["spec"]["suspend"] is True
    now[0] += 29
    made.retry_due()
    assert client.evicted == []
    now[0] += 1
    made.retry_due()
    assert client.evicted == ["filler-a"]
    # A pod that left meanwhile is not: deleted at 10 s, nothing more at 30 s.
    second = JobsAndEvictions(job())
    now[0] = NOW
    other = Evictor(cast(KubeClient, second), clock=lambda: now[0], record_keys=record_keys)
    pod_obj = marked_for_restart("filler-a", "u-a")
    other._on_pod("ADDED", pod_obj)
    now[0] += 10
    other._on_pod("DELETED", pod_obj)
    now[0] += 20
    other.retry_due()
    assert second.evicted == []


def _unmarked(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` once Muster took its mark back (a spare): how the label watch delivers it,
    as DELETED."""
    made = copy.deepcopy(obj)
    del made["metadata"]["labels"][keys.SOFT_EVICTION_KEY]
    del made["metadata"]["annotations"][keys.SOFT_EVICTION_KEY]
    return made


def test_a_spared_victim_keeps_its_job_from_being_restarted() -> None:
    # filler-a and filler-b (one Job, restart marks, 30 s notice) marked at 12:00:00;
    # filler-b answered at 12:00:05 (it waits for its sibling).  At 12:00:06 Muster spares
    # filler-a (its preemptor found room elsewhere): the watch sees it unmarked.  Derived
    # from the rule: a spared pod runs on, so its Job is not suspended; filler-b, still
    # marked and ready, is evicted alone (not restarted), when its turn comes.
    client = JobsAndEvictions(job())
    made = Evictor(cast(KubeClient, client), clock=lambda: NOW + 6, record_keys=record_keys)
    a = marked_for_restart("filler-a", "u-a", notice=30)
    b = marked_for_restart("filler-b", "u-b", notice=30)
    b["metadata"]["annotations"][keys.CHECKPOINTED_ANNOTATION] = "2026-01-01T12:00:05Z"
    made._on_pod("ADDED", a)
    made._on_pod("MODIFIED", b)
    made._on_pod("DELETED", _unmarked(a))
    assert "suspend" not in client.job["spec"]
    made._on_pod("MODIFIED", b)
    assert "suspend" not in client.job["spec"]
    assert client.evicted == ["filler-b"]


def _b_waits_for_a(client: JobsAndEvictions, now: list[float]) -> tuple[Evictor, Json]:
    """filler-a and filler-b, one Job's pods, marked at 12:00:00 to restart it with 30 s
    of notice; filler-b answered at 12:00:05 and waits for its sibling.  The evictor, on
    ``client`` and the clock ``now``, and filler-a."""
    made = Evictor(cast(KubeClient, client), clock=lambda: now[0], record_keys=record_keys)
    a = marked_for_restart("filler-a", "u-a", notice=30)
    b = marked_for_restart("filler-b", "u-b", notice=30)
    b["metadata"]["annotations"][keys.CHECKPOINTED_ANNOTATION] = "2026-01-01T12:00:05Z"
    made._on_pod("ADDED", a)
    made._on_pod("ADDED", b)
    return made, a


@pytest.mark.parametrize("also_spared", [False, True])
def test_a_spared_victim_s_ready_sibling_is_evicted_shortly_unless_spared_too(
    also_spared: bool,
) -> None:
    # As above, without a further event on filler-b: ready and marked, it waited only for
    # filler-a; once filler-a is spared (no restart now), nothing else would bring it up.
    # It is evicted 5 s later (SPARED_SIBLING_DELAY_SECONDS), not at once: Muster takes
    # back the marks of a plan's victims one after another, and when filler-b's comes
    # back too (also spared), it is not evicted at all.
    client = JobsAndEvictions(job())
    now = [NOW + 6]
    made, a = _b_waits_for_a(client, now)
    made._on_pod("DELETED", _unmarked(a))
    assert client.evicted == []
    if also_spared:
        made._on_pod("DELETED", _unmarked(marked_for_restart("filler-b", "u-b", notice=30)))
    now[0] = NOW + 10
    made.retry_due()
    assert client.evicted == []
    now[0] = NOW + 11
    made.retry_due()
    assert client.evicted == ([] if also_spared else ["filler-b"])
    assert "suspend" not in client.job["spec"]


def _with_muster_s_condition(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "muster: preempted by job team-a/train: a reason",
        }
    ]
    return obj


def test_a_victim_whose_owner_takes_its_mark_off_still_restarts_its_job_on_time() -> None:
    # filler-a and filler-b (one Job, restart marks, 30 s notice, marked at 12:00:00);
    # filler-b answers at 12:00:05 and waits for its sibling.  At 12:00:06 the owner takes
    # filler-a's mark off: it keeps Muster's DisruptionTarget, so it is no spare (Muster
    # turns that False before it takes a mark back).  Muster marks it again at 12:00:07
    # with what is left to its deadline, 23 s.  Derived from the rule: nothing happens
    # before 12:00:30; then the Job is restarted whole, as without the strip, and no pod
    # is evicted one by one.
    client = JobsAndEvictions(job())
    now = [NOW + 5]
    made, a = _b_waits_for_a(client, now)
    now[0] = NOW + 6
    made._on_pod("DELETED", _with_muster_s_condition(_unmarked(a)))
    now[0] = NOW + 7
    again = marked_for_restart("filler-a", "u-a", notice=23, at="2026-01-01T12:00:07Z")
    made._on_pod("ADDED", _with_muster_s_condition(again))
    for second in range(8, 30):
        now[0] = NOW + second
        made.retry_due()
    assert "suspend" not in client.job["spec"] and client.evicted == []
    now[0] = NOW + 30
    made.retry_due()
    assert client.job["spec"].get("suspend") is True
    assert client.evicted == []


def test_a_victim_whose_mark_is_taken_off_and_never_put_back_does_not_hold_its_job() -> None:
    # filler-b (answered) waits for filler-a; the owner takes filler-a's mark off and
    # Muster never puts it back (the pod exited, say: a label watch shows nothing more of
    # it).  After 10 s (STRIPPED_PATIENCE_SECONDS) filler-a is forgotten as gone, and the
    # Job, its other noticed pod ready, is restarted: it does not wait out the plan.
    client = JobsAndEvictions(job())
    now = [NOW + 5]
    made, a = _b_waits_for_a(client, now)
    made._on_pod("DELETED", _with_muster_s_condition(_unmarked(a)))
    for second in range(6, 15):
        now[0] = NOW + second
        made.retry_due()
    assert "suspend" not in client.job["spec"]
    now[0] = NOW + 15
    made.retry_due()
    assert client.job["spec"].get("suspend") is True
    assert client.evicted == []


@pytest.mark.parametrize(
    ("spared_at", "marked_at", "preemptor"),
    [
        # A later plan of the same preemptor, marking at 12:00:10, after the spare.
        (6.0, 10.0, "team-a/train"),
        # Another plan (another preemptor) marking in the spare's second, stamped
        # 12:00:10 (whole seconds) where the evictor saw the spare at 12:00:10.3: another
        # plan by its preemptor, whatever the two clocks say.
        (10.3, 10.6, "team-a/other"),
    ],
)
def test_another_plan_s_restart_mark_restarts_a_job_one_of_whose_victims_was_spared(
    spared_at: float, marked_at: float, preemptor: str
) -> None:
    # filler-a and filler-b were marked at 12:00:00 to restart their Job, and spared (the
    # Job kept: no restart for that plan's marks).  Another plan marks both to restart
    # the Job, with no notice: it is restarted, not evicted pod by pod.
    client = JobsAndEvictions(job())
    now = [NOW + 1]
    made = Evictor(cast(KubeClient, client), clock=lambda: now[0], record_keys=record_keys)
    for name, uid in (("filler-a", "u-a"), ("filler-b", "u-b")):
        made._on_pod("ADDED", marked_for_restart(name, uid, notice=30))
    now[0] = NOW + spared_at
    for name, uid in (("filler-a", "u-a"), ("filler-b", "u-b")):
        made._on_pod("DELETED", _unmarked(marked_for_restart(name, uid, notice=30)))
    now[0] = NOW + marked_at
    for name, uid in (("filler-a", "u-a2"), ("filler-b", "u-b2")):
        made._on_pod(
            "ADDED", marked_for_restart(name, uid, preemptor=preemptor, at="2026-01-01T12:00:10Z")
        )
    assert client.job["spec"].get("suspend") is True
    assert client.evicted == []


def _mark_taken_back(obj: dict[str, Any], at: str = "2026-01-01T12:00:06Z") -> dict[str, Any]:
    """``obj`` after the first write of Muster's unmark: its ``DisruptionTarget`` turned
    False at ``at``, its mark still on (the label watch delivers it as MODIFIED)."""
    made = copy.deepcopy(obj)
    made["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "False",
            "reason": keys.PREEMPTION_ABANDONED,
            "message": "muster: the job has room without them",
            "lastTransitionTime": at,
        }
    ]
    return made


def test_a_victim_whose_mark_muster_is_taking_back_is_not_evicted() -> None:
    # Muster spares both victims (filler-b answered, waiting for filler-a), unmarking each
    # as it does: the condition False first (an update of a pod still marked, and ready),
    # then the mark.  Derived from the rule (a spared pod runs on): neither is evicted,
    # whatever the order the watch shows the writes in.
    client = JobsAndEvictions(job())
    now = [NOW + 6]
    made, a = _b_waits_for_a(client, now)
    b = marked_for_restart("filler-b", "u-b", notice=30)
    b["metadata"]["annotations"][keys.CHECKPOINTED_ANNOTATION] = "2026-01-01T12:00:05Z"
    for victim_pod in (a, b):
        made._on_pod("MODIFIED", _mark_taken_back(victim_pod))
        made._on_pod("DELETED", _mark_taken_back(_unmarked(victim_pod)))
    for second in range(7, 60):
        now[0] = NOW + second
        made.retry_due()
    assert client.evicted == [] and "suspend" not in client.job["spec"]


def test_a_spared_plan_s_marks_stamped_a_second_apart_are_one_plan() -> None:
    # One plan marked filler-b at 12:00:01 and filler-a at 12:00:00 (written at once,
    # across a second's turn); filler-a is spared, filler-b stays marked.  One plan: the
    # Job is kept (filler-a runs on) and filler-b, due at 12:00:31, is evicted alone.
    client = JobsAndEvictions(job())
    now = [NOW + 1]
    made = Evictor(cast(KubeClient, client), clock=lambda: now[0], record_keys=record_keys)
    made._on_pod(
        "ADDED", marked_for_restart("filler-b", "u-b", notice=30, at="2026-01-01T12:00:01Z")
    )
    a = marked_for_restart("filler-a", "u-a", notice=30)
    made._on_pod("ADDED", a)
    now[0] = NOW + 10
    made._on_pod("DELETED", _mark_taken_back(_unmarked(a), "2026-01-01T12:00:10Z"))
    for second in range(11, 40):
        now[0] = NOW + second
        made.retry_due()
    assert "suspend" not in client.job["spec"]
    assert client.evicted == ["filler-b"]


@pytest.mark.parametrize("how", ["deleted", "its mark taken off and never put back"])
def test_a_job_that_cannot_be_restarted_has_its_ready_pods_evicted(how: str) -> None:
    # The Job may not be restarted (a 403: no write on Jobs, say).  filler-b answered and
    # waits for filler-a; filler-a goes.  The Job's restart fails, so filler-b, ready and
    # marked, is evicted instead: it does not hold its preemptor's room.
    client = JobsAndEvictions(job(), refuse=403)
    now = [NOW + 5]
    made, a = _b_waits_for_a(client, now)
    now[0] = NOW + 6
    gone = a if how == "deleted" else _with_muster_s_condition(_unmarked(a))
    made._on_pod("DELETED", gone)
    for second in range(7, 20):
        now[0] = NOW + second
        made.retry_due()
    assert client.evicted == ["filler-b"]


def _suspensions(client: JobsClient) -> int:
    return sum(1 for patch in client.patches if (patch.get("spec") or {}).get("suspend"))


def test_an_evictor_started_after_a_job_s_restart_does_not_restart_it_again() -> None:
    # (Found by review.)  filler-a exited on notice (marked 12:00:00); its Job was
    # suspended, then resumed at 12:00:20 (the Job controller sets status.startTime when
    # it resumes a Job), and runs a replacement.  A new evictor (an upgrade, a crash)
    # lists the exited pod, still marked, as ADDED.  Derived from the rule (one restart
    # per plan): the Job started after the mark was restarted for it already, so it is
    # not suspended again, and the exited pod, holding nothing, is not evicted.
    client = JobsAndEvictions(job())
    client.job["status"] = {"active": 1, "startTime": "2026-01-01T12:00:20Z"}
    made = Evictor(cast(KubeClient, client), clock=lambda: NOW + 120, record_keys=record_keys)
    exited = marked_for_restart("filler-a", "u-a", notice=30)
    exited["status"]["phase"] = "Failed"
    made._on_pod("ADDED", exited)
    assert client.patches == [] and not client.job["spec"].get("suspend")
    assert client.evicted == []
    # A Job started in the mark's own second started before it: restarted as ever.
    fresh = JobsAndEvictions(job())
    fresh.job["status"] = {"active": 1, "startTime": "2026-01-01T12:00:00Z"}
    other = Evictor(cast(KubeClient, fresh), clock=lambda: NOW + 120, record_keys=record_keys)
    other._on_pod("ADDED", exited)
    assert fresh.job["spec"]["suspend"] is True


def test_an_exited_victim_whose_job_was_not_restarted_does_not_restart_it_later() -> None:
    # (Found by review.)  filler-a exits on notice at 12:00:08, filler-b is due at
    # 12:00:30; the answer to the suspension is lost (the patch took), so the restart
    # counts as failed: filler-b, running, is evicted; filler-a, exited, needs nothing.
    # The Job is resumed once its pods are gone.  A later change to filler-a (its
    # checkpointed write at 12:00:40) must not suspend the Job a second time: filler-a
    # was acted on when the restart failed.
    client = JobsAndEvictions(job())

    class LosingTheAnswer(JobsAndEvictions):
        lose = True

        def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
            answer = client.request(method, path, body, **kwargs)
            if self.lose and method == "PATCH" and (body.get("spec") or {}).get("suspend"):
                self.lose = False
                raise httpx.ReadTimeout("the answer was lost")
            return answer

    now = [NOW + 8]
    made = Evictor(
        cast(KubeClient, LosingTheAnswer(job())), clock=lambda: now[0], record_keys=record_keys
    )
    exited = marked_for_restart("filler-a", "u-a", notice=30)
    exited["status"]["phase"] = "Failed"
    made._on_pod("ADDED", marked_for_restart("filler-b", "u-b", notice=30))
    made._on_pod("MODIFIED", exited)
    now[0] = NOW + 30
    made.retry_due()
    assert _suspensions(client) == 1 and client.evicted == ["filler-b"]
    client.job["status"] = {"active": 0, "terminating": 0}
    now[0] = NOW + 32
    assert made.restarter.resume_due() == 1
    later = copy.deepcopy(exited)
    later["metadata"]["annotations"][keys.CHECKPOINTED_ANNOTATION] = "2026-01-01T12:00:40Z"
    now[0] = NOW + 40
    made._on_pod("MODIFIED", later)
    assert _suspensions(client) == 1 and client.job["spec"]["suspend"] is False


def test_a_pod_refused_eviction_after_its_job_was_not_restarted_is_evicted_once_marked_again() -> (
    None
):
    # (Found by review.)  filler-a is due at 12:00:30; its Job may not be restarted (no
    # RBAC for Jobs: 403), so it is evicted instead, and the eviction is refused (503):
    # it waits for a retry.  At 12:00:31 its owner takes the mark off (the retry is
    # dropped), and at 12:00:32 Muster marks it again, its notice over.  Derived from the
    # rule (a victim whose Job is not restarted is evicted): filler-a is evicted once
    # the API takes it.
    class Refusing(JobsAndEvictions):
        refusing = True

        def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
            if path.endswith("/eviction") and self.refusing:
                raise ApiError(503, "scripted")
            return super().request(method, path, body, **kwargs)

    client = Refusing(job(), refuse=403)
    now = [NOW]
    made = Evictor(cast(KubeClient, client), clock=lambda: now[0], record_keys=record_keys)
    marked = marked_for_restart("filler-a", "u-a", notice=30)
    made._on_pod("ADDED", marked)
    now[0] = NOW + 30
    made.retry_due()
    assert client.evicted == []
    now[0] = NOW + 31
    made._on_pod("DELETED", _with_muster_s_condition(_unmarked(marked)))
    now[0] = NOW + 32
    again = marked_for_restart("filler-a", "u-a", at="2026-01-01T12:00:32Z")
    made._on_pod("ADDED", _with_muster_s_condition(again))
    client.refusing = False
    for second in range(33, 120):
        now[0] = NOW + second
        made.retry_due()
    assert client.evicted == ["filler-a"]


def test_two_threads_restarting_one_job_at_once_both_count_it_restarted() -> None:
    # The evictor's watch and retry threads may restart the same Job together (seen in
    # CI: the second read the Job the first had just suspended, refused it as suspended
    # already, and evicted its pod).  The first thread's read is held until the second
    # thread reads too, or for 1 s if it cannot (restarts go one at a time).  By the
    # rule both answer True (the Job is suspended for both pods) with one patch; without
    # one-at-a-time, the second reads and patches beside the first, and either answers
    # False (it read the Job suspended) or patches a second time.
    client = JobsClient(job())
    restarting = restarter(client)
    first_reading, second_read = threading.Event(), threading.Event()
    answer = client.request

    def request(method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        if method == "GET" and not first_reading.is_set():
            first_reading.set()
            second_read.wait(timeout=1)
        elif method == "GET":
            second_read.set()
        return answer(method, path, body, **kw)

    client.request = request  # type: ignore[method-assign]
    results: list[bool] = []
    first = threading.Thread(target=lambda: results.append(restarting.restart(victim())))
    first.start()
    assert first_reading.wait(timeout=5)
    second = threading.Thread(target=lambda: results.append(restarting.restart(victim())))
    second.start()
    first.join(timeout=10)
    second.join(timeout=10)
    assert results == [True, True]
    assert len(client.patches) == 1
