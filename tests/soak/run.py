"""The soak driver: a plan (:mod:`tests.soak.plan`) played on the real control plane,
with faults, the invariants (:mod:`tests.soak.invariants`) checked all along.

``run_soak(seed, seconds)`` starts etcd, kube-apiserver (with an audit log of
evictions), kube-scheduler and the kubelet emulator (``localcluster``), applies
``manifests/rbac.yaml``, runs two ``muster serve`` replicas (leader election on the
Lease; kube-scheduler calls the first) and ``muster evictor`` on their ServiceAccounts'
tokens, and then, on the main thread, plays the plan's agenda: submit each job (its
PodDisruptionBudget first), delete each job ``runtime`` seconds after all its pods are
bound (its work is done) or ``PATIENCE_SECONDS`` after it was submitted if it is still
not bound (its user gave up), and inject each fault.  Two background threads watch the
soak's pods into the ``Observer`` and, every ``SCAN_SECONDS``, scan it and read the
quotas.  Each budget's ``status.disruptionsAllowed`` is kept by the control plane's real
disruption controller (kube-controller-manager).

When the stream ends, the cluster is left to settle (no terminating pod, no mark left
on a running pod, no reservation without a pending pod) for up to ``SETTLE_SECONDS``,
the end state is checked, and the figures are returned.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

import localcluster as lc
from bench.workload import (
    YOUNG_SECONDS,
    GpuSeconds,
    completed_jobs,
    holds_gpus,
    job_completion_figures,
    percentile,
    pod_gpus,
    pod_saves,
)
from extender.kube.informer import object_key
from localcluster.processes import wait_port_released
from tests.soak.invariants import (
    Observer,
    Violation,
    double_evictions,
    end_state_violations,
    evictions_in_audit,
    jobs_left_suspended,
)
from tests.soak.plan import GPU, PRIORITY_CLASSES, FaultPlan, JobPlan, SoakPlan, make_plan

ROOT = Path(__file__).resolve().parents[2]
MUSTER = [sys.executable, "-m", "extender.cli.main"]
QUOTA_API = "/apis/scheduling.x-k8s.io/v1alpha1"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/muster-system/leases/muster"
JOB_LABEL = "soak.muster.dev/job"
GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
PREEMPTIBLE_LABEL = "quota.scheduling.koordinator.sh/preemptible"
CAN_PREEMPT_LABEL = "quota.scheduling.koordinator.sh/can-preempt"
QUOTA_PARENT_LABEL = "quota.scheduling.koordinator.sh/parent"
QUOTA_IS_PARENT_LABEL = "quota.scheduling.koordinator.sh/is-parent"

#: Muster's arguments in the soak: shorter timeouts than the defaults, so that plans
#: end, gangs are given up and retried within a soak of a few minutes.
MUSTER_ARGS = {
    "reservationTimeoutSeconds": 60,
    "victimEvictionDeadlineSeconds": 30,
    "quotaHoldSeconds": 30,
    "gangTimeoutSeconds": 60,
    "backoffBaseSeconds": 5,
    "backoffMaxSeconds": 30,
}
SCHEDULER_CONFIG = {"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 5}
#: Only evictions reach the audit log: the "evicted twice" invariant reads it.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create"],
            "resources": [{"group": "", "resources": ["pods/eviction"]}],
        },
        {"level": "None"},
    ],
}
PATIENCE_SECONDS = 150.0
SCAN_SECONDS = 2.0
SETTLE_SECONDS = 150.0
#: A quota's bounds edited this recently may have admitted room before the edit: a bind
#: over a lowered ``max`` within it is counted, not a violation (reservation timeout +
#: margin).
EDIT_GRACE_SECONDS = MUSTER_ARGS["reservationTimeoutSeconds"] + 10.0


@dataclass
class SoakResult:
    seed: int
    seconds: float
    figures: dict[str, Any]
    violations: list[Violation]
    workdir: Path
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations

    def report(self) -> str:
        lines = [f"soak seed={self.seed} seconds={self.seconds:g} workdir={self.workdir}"]
        lines += [f"  {name}: {value}" for name, value in self.figures.items()]
        lines += [f"  note: {note}" for note in self.notes]
        if self.violations:
            lines.append(
                f"FAILED: {len(self.violations)} violation(s); replay with SOAK_SEED={self.seed}"
            )
            lines += [f"  {v}" for v in self.violations]
        else:
            lines.append("PASSED: no invariant violated")
        return "\n".join(lines)


class Soak:
    """One run: the control plane, the Muster replicas, the evictor and the observer."""

    def __init__(self, plan: SoakPlan, workdir: Path, say: Callable[[str], None]) -> None:
        self.plan = plan
        self.workdir = workdir
        self.say = say
        self.plane = lc.ControlPlane(
            workdir=workdir / "k8s",
            keep_workdir=True,
            scheduler_config=SCHEDULER_CONFIG,
            audit_policy=AUDIT_POLICY,
        )
        self.t0 = 0.0
        self.lock = threading.Lock()
        self.observer = Observer(partial_grace=20.0, edit_grace=EDIT_GRACE_SECONDS)
        self.replicas: list[lc.ServiceProcess] = []
        self.evictor: lc.ServiceProcess | None = None
        self.keys: dict[str, Path] = {}
        self.submitted: dict[str, float] = {}  # job → when submitted
        self.bound: dict[str, float] = {}  # job → when all its pods were first bound
        self._bound_pods: dict[str, set[str]] = {}  # job → its pods seen bound so far
        self.gpu_seconds = GpuSeconds()
        self.deleted: dict[str, str] = {}  # job → "finished" | "cancelled"
        self.faults: Counter[str] = Counter()
        self.notes: list[str] = []
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watcher: lc.Watcher | None = None
        self._log = (workdir / "pods.jsonl").open("a")
        self._log_lock = threading.Lock()

    def now(self) -> float:
        return time.time() - self.t0

    # ---- setting up

    def start(self) -> None:
        self.plane.start()
        self.keys = self.plane.muster_kubeconfigs()
        args = self.workdir / "muster-args.yaml"
        args.write_text(yaml.safe_dump(MUSTER_ARGS))
        for i in range(2):
            self.replicas.append(self._muster(i, None))
        self.evictor = self._start_evictor()
        self.plane.restart_scheduler(lc.ExtenderConfig(self.replicas[0].url, bind=True))
        rest = self.plane.rest
        for name, value in PRIORITY_CLASSES.items():
            body = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            rest.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
        nodes = [
            self.plane.create_node(
                f"soak-n{i}", {"cpu": "64", "memory": "256Gi", GPU: self.plan.gpus_per_node}
            )
            for i in range(self.plan.nodes)
        ]
        self.observer = Observer(nodes=nodes, partial_grace=20.0, edit_grace=EDIT_GRACE_SECONDS)
        for quota in self.plan.quotas:
            self.plane.create_namespace(quota.namespace)
            labels = {QUOTA_IS_PARENT_LABEL: "true"} if quota.is_parent else {}
            if quota.parent:
                labels[QUOTA_PARENT_LABEL] = quota.parent
            body = {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "ElasticQuota",
                "metadata": {"name": quota.name, "namespace": quota.namespace, "labels": labels},
                "spec": {"min": {GPU: str(quota.min_gpus)}, "max": {GPU: str(quota.max_gpus)}},
            }
            rest.request("POST", f"{QUOTA_API}/namespaces/{quota.namespace}/elasticquotas", body)
        self._read_quotas()
        self._watcher = lc.Watcher(
            rest,
            "/api/v1/pods",
            self._on_pod,
            on_list=self._on_list,
            on_error=lambda message: self._note_error("pod watch", message),
            label_selector=JOB_LABEL,
            name="soak-watch",
        )
        self._watcher.start()
        lc.wait_until(self._watcher.synced.is_set, timeout=30, what="the soak's pod watch")
        self.t0 = time.time()
        thread = threading.Thread(target=self._scan_loop, name="soak-scan", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _muster(self, index: int, port: int | None) -> lc.ServiceProcess:
        argv = [
            *MUSTER,
            "serve",
            "--kubeconfig",
            str(self.keys["muster"]),
            "--config",
            str(self.workdir / "muster-args.yaml"),
            "--enable-debug-endpoints",  # the invariants read /debug (on 127.0.0.1)
            "--records-key-dir",
            str(lc.records_key_dir(self.workdir)),
        ]
        process = lc.ServiceProcess(
            f"muster-{index}",
            lambda port: [*argv, "--port", str(port)],
            self.workdir / f"muster-{index}.log",
            port=port,
            cwd=ROOT,
            ready_timeout=60.0,
        )
        process.start()
        return process

    def _start_evictor(self) -> lc.ServiceProcess:
        evictor = lc.ServiceProcess(
            "muster evictor",
            lambda port: [
                *MUSTER,
                "evictor",
                "--kubeconfig",
                str(self.keys["muster-evictor"]),
                "--records-key-dir",
                str(lc.records_key_dir(self.workdir)),
            ],
            self.workdir / "evictor.log",
            cwd=ROOT,
            ready_path=None,
        )
        evictor.start()
        return evictor

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.stop()
        for thread in self._threads:
            thread.join(10)
        for process in [*self.replicas, *([self.evictor] if self.evictor else [])]:
            with contextlib.suppress(Exception):
                process.stop()
        self.plane.stop()
        self._log.close()

    # ---- watching

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        self._record(kind, obj)
        with self.lock:
            before = len(self.observer.violations)
            self.observer.pod_event(kind, obj, self.now())
            if len(self.observer.violations) > before:
                threading.Thread(target=self._evidence, args=(self.now(),), daemon=True).start()
            self._account(kind, obj)

    def _on_list(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            self._record("SYNC", item)
        with self.lock:
            self.observer.relist(items, self.now())
            listed = {object_key(item) for item in items}
            for key in [k for k in self.gpu_seconds.holding if k not in listed]:
                self.gpu_seconds.observe(key, 0, False, self.now())
            for item in items:
                self._account("SYNC", item)

    def _account(self, kind: str, obj: dict[str, Any]) -> None:
        """GPU-seconds held, and whether the pod's job has had all its pods bound."""
        key = object_key(obj)
        holds = kind != "DELETED" and holds_gpus(obj)
        succeeded = (obj.get("status") or {}).get("phase") == "Succeeded"
        saves = pod_saves(obj, self.t0)
        self.gpu_seconds.observe(
            key, pod_gpus(obj, GPU), holds, self.now(), succeeded=succeeded, saves=saves
        )
        job = obj["metadata"]["labels"][JOB_LABEL]
        if kind != "DELETED" and (obj.get("spec") or {}).get("nodeName"):
            self._bound_pods.setdefault(job, set()).add(key)
            self._note_bound(job)

    def _record(self, kind: str, obj: dict[str, Any]) -> None:
        """One line per pod version in ``pods.jsonl``: the evidence behind a violation."""
        metadata = obj.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        line = {
            "at": round(self.now(), 3),
            "event": kind,
            "pod": object_key(obj),
            "rv": metadata.get("resourceVersion"),
            "node": (obj.get("spec") or {}).get("nodeName"),
            "phase": (obj.get("status") or {}).get("phase"),
            "deleting": metadata.get("deletionTimestamp"),
            "mark": annotations.get("scheduling.koordinator.sh/soft-eviction")
            if "scheduling.koordinator.sh/soft-eviction" in (metadata.get("labels") or {})
            else None,
            "reservation": annotations.get("muster.dev/reservation"),
        }
        with self._log_lock:
            self._log.write(json.dumps(line) + "\n")

    def _evidence(self, at: float) -> None:
        """What each replica thinks of the quotas right after a violation, kept in
        ``evidence.jsonl`` beside the pod log."""
        views = {
            f"muster-{i}": {"quotas": self._debug(i, "quotas"), "pid": replica.pid}
            for i, replica in enumerate(self.replicas)
        }
        line = json.dumps({"at": round(at, 3), "leader": self.leader(), "replicas": views})
        with self._log_lock, (self.workdir / "evidence.jsonl").open("a") as handle:
            handle.write(line + "\n")

    def _note_bound(self, job: str) -> None:
        if job in self.bound or job not in self.submitted:
            return
        if len(self._bound_pods.get(job, ())) >= self._job(job).pods:
            self.bound[job] = self.now()

    def _note_error(self, where: str, message: str) -> None:
        self.errors[where] += 1

    def _scan_loop(self) -> None:
        while not self._stop.wait(SCAN_SECONDS):
            try:
                self._read_quotas()
                with self.lock:
                    self.observer.scan(self.now())
            except Exception as error:  # the API is down during its restart; go on
                self._note_error("scan", repr(error))

    def _read_quotas(self) -> None:
        items = self.plane.rest.request("GET", f"{QUOTA_API}/elasticquotas")["items"]
        with self.lock:
            self.observer.set_quotas(items, self.now())

    # ---- the agenda

    def _job(self, name: str) -> JobPlan:
        return self._jobs_by_name[name]

    def play(self) -> None:
        """Submit, finish and cancel jobs and inject faults at their times, until the end."""
        self._jobs_by_name = {job.name: job for job in self.plan.jobs}
        agenda: list[tuple[float, int, str, Any]] = []
        serial = 0
        for job in self.plan.jobs:
            agenda.append((job.at, serial := serial + 1, "submit", job))
        for fault in self.plan.faults:
            agenda.append((fault.at, serial := serial + 1, "fault", fault))
        heapq.heapify(agenda)
        scheduled_finish: set[str] = set()
        while True:
            now = self.now()
            if now >= self.plan.seconds:
                break
            with self.lock:
                bound = dict(self.bound)
            for name, at in bound.items():
                if name not in scheduled_finish and self._job(name).burst:
                    scheduled_finish.add(name)
                    heapq.heappush(
                        agenda, (at + self._job(name).runtime, serial := serial + 1, "finish", name)
                    )
            for name, at in list(self.submitted.items()):
                if name not in bound and name not in self.deleted and now - at > PATIENCE_SECONDS:
                    self._delete_job(name, "cancelled")
            while agenda and agenda[0][0] <= now:
                _, _, what, item = heapq.heappop(agenda)
                try:
                    if what == "submit":
                        self._submit(item)
                    elif what == "finish" and item not in self.deleted:
                        self._delete_job(item, "finished")
                    elif what == "fault":
                        self._fault(item)
                except lc.ApiError as error:
                    self._note_error(what, repr(error))
                    if what == "submit":
                        self.notes.append(f"{item.name}: not submitted: {error}")
            time.sleep(0.2)  # the agenda's tick; every wait for a condition polls with a deadline

    def _submit(self, job: JobPlan) -> None:
        rest = self.plane.rest
        ns = job.quota
        if job.pdb_min_available is not None:
            body = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": job.name, "namespace": ns},
                "spec": {
                    "minAvailable": job.pdb_min_available,
                    "selector": {"matchLabels": {JOB_LABEL: job.name}},
                },
            }
            rest.request("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", body)
        self.submitted[job.name] = self.now()
        if job.burst:  # single pods created back to back, deleted by the soak when done
            for i in range(job.pods):
                rest.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(job, i))
        else:  # a gang: a Job whose pods run for the job's run time and succeed
            rest.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", _job_object(job))

    def _delete_job(self, name: str, why: str) -> None:
        job = self._job(name)
        self.deleted[name] = why
        rest = self.plane.rest
        with contextlib.suppress(lc.ApiError):
            if job.burst:
                rest.request(
                    "DELETE",
                    f"/api/v1/namespaces/{job.quota}/pods",
                    query={"labelSelector": f"{JOB_LABEL}={name}"},
                )
            else:  # the garbage collector deletes its pods
                rest.request(
                    "DELETE",
                    f"/apis/batch/v1/namespaces/{job.quota}/jobs/{name}",
                    query={"propagationPolicy": "Background"},
                )
        if job.pdb_min_available is not None:
            with contextlib.suppress(lc.ApiError):
                rest.request(
                    "DELETE", f"/apis/policy/v1/namespaces/{job.quota}/poddisruptionbudgets/{name}"
                )

    def _fault(self, fault: FaultPlan) -> None:
        at = self.now()
        if fault.kind == "kill-leader":
            index = self.leader()
            if index is None:
                self.notes.append(f"{at:.1f}s kill-leader: no leader found, nothing killed")
                return
            old = self.replicas[index]
            pid = old.pid
            old.kill()
            wait_port_released(old.port)
            self.faults[fault.kind] += 1
            self.say(f"[{at:6.1f}s] fault: kill -9 of the leader muster-{index} (pid {pid})")
            self.replicas[index] = self._muster(index, old.port)
        elif fault.kind == "kill-evictor":
            assert self.evictor is not None
            self.evictor.kill()
            self.faults[fault.kind] += 1
            self.say(f"[{at:6.1f}s] fault: kill -9 of the evictor")
            self.evictor = self._start_evictor()
        elif fault.kind == "restart-apiserver":
            self.faults[fault.kind] += 1
            self.say(f"[{at:6.1f}s] fault: kube-apiserver restart")
            self.plane.restart_apiserver()
        elif fault.kind == "edit-quota":
            quota = self.plan.quota(fault.quota)
            path = f"{QUOTA_API}/namespaces/{quota.namespace}/elasticquotas/{quota.name}"
            patch = {"spec": {fault.field: {GPU: str(fault.gpus)}}}
            with self.lock:
                self.observer.note_edit(quota.name, at)
            self.plane.rest.request(
                "PATCH", path, patch, content_type="application/merge-patch+json"
            )
            self._read_quotas()
            self.faults[fault.kind] += 1
            self.say(f"[{at:6.1f}s] fault: quota {quota.name} {fault.field} := {fault.gpus} GPUs")

    def leader(self) -> int | None:
        """The index of the replica holding the Lease (identity ``<host>-<pid>``)."""
        try:
            lease = self.plane.rest.request("GET", LEASE)
        except lc.ApiError:
            return None
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        for index, replica in enumerate(self.replicas):
            if replica.running and holder == f"{socket.gethostname()}-{replica.pid}":
                return index
        return None

    # ---- the end

    def settle(self) -> bool:
        """Wait (polling, up to SETTLE_SECONDS) for no terminating pod, no mark on a running
        pod and no reservation without a pending pod; True if it settled."""

        def settled() -> bool:
            with self.lock:
                pods = list(self.observer.state.pods.values())
            if any(p.terminating or (p.soft_evicted and p.node_name) for p in pods):
                return False
            leader = self.leader()
            if leader is None:
                return False
            jobs = self._debug(leader, "jobs") or {}
            pending = {p.job for p in pods if p.node_name is None}
            return all(
                entry.get("reservation") is None or job in pending for job, entry in jobs.items()
            )

        try:
            lc.wait_until(
                settled, timeout=SETTLE_SECONDS, interval=2.0, what="the cluster to settle"
            )
        except Exception:
            return False
        return True

    def _debug(self, index: int, path: str) -> Any:
        try:
            response = httpx.get(f"{self.replicas[index].url}/debug/{path}", timeout=10)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def finish(self) -> SoakResult:
        self.say(f"[{self.now():6.1f}s] stream over; settling (up to {SETTLE_SECONDS:.0f}s)")
        settled = self.settle()
        at = self.now()
        if not settled:
            self.notes.append(
                f"did not settle within {SETTLE_SECONDS:.0f}s (end state checked anyway)"
            )
        pods = self.plane.rest.request("GET", "/api/v1/pods", query={"labelSelector": JOB_LABEL})[
            "items"
        ]
        leader = self.leader()
        jobs = (self._debug(leader, "jobs") if leader is not None else None) or {}

        def explain(key: str) -> dict[str, Any] | None:
            """The replica's answer with the most decisions (the leader plans, the one
            kube-scheduler calls filters)."""
            answers = [self._debug(i, f"pods/{key}") or {} for i in range(len(self.replicas))]
            return max(answers, key=lambda a: len(a.get("decisions") or []))

        with self.lock:
            self.observer.scan(at)
            violations = list(self.observer.violations)
            figures = self.observer.figures
        violations += end_state_violations(pods, explain, jobs, at)
        evicted = evictions_in_audit(self.plane.audit_log.read_text(errors="replace").splitlines())
        violations += double_evictions(evicted, at)
        waits = [self.bound[j] - self.submitted[j] for j in self.bound]
        job_objects = self.plane.rest.request(
            "GET", "/apis/batch/v1/jobs", query={"labelSelector": JOB_LABEL}
        )["items"]
        violations += jobs_left_suspended(job_objects, at)
        done = completed_jobs(job_objects, {j.name: j.priority_class for j in self.plan.jobs})
        capacity = self.plan.nodes * self.plan.gpus_per_node * self.plan.seconds
        pending_jobs = sorted(
            {p["metadata"]["labels"][JOB_LABEL] for p in pods if not p["spec"].get("nodeName")}
        )
        preemptors = Counter(job for history in figures.marks.values() for job in history)
        p50, p99 = percentile(waits, 0.5), percentile(waits, 0.99)
        result = {
            "jobs submitted": len(self.submitted),
            "pods submitted": sum(self._job(j).pods for j in self.submitted),
            "jobs bound": len(self.bound),
            "jobs cancelled while pending": sum(
                1 for w in self.deleted.values() if w == "cancelled"
            ),
            "jobs pending at the end": len(pending_jobs),
            "preempting jobs (marks naming them)": len(preemptors),
            "victims marked (pods)": len(figures.marks),
            "pods marked again after a plan was abandoned": figures.remarked,
            "other marks (gang given up)": figures.other_marks,
            "victims evicted (audit log)": sum(evicted.values()),
            "faults injected": dict(sorted(self.faults.items())),
            "binds over a max edited < grace ago": figures.over_max_after_edit,
            "bursts submitted (pods)": (
                sum(1 for j in self.submitted if self._job(j).burst),
                sum(self._job(j).pods for j in self.submitted if self._job(j).burst),
            ),
            "reclaim marks checked against min": figures.reclaims_checked,
            "reclaim marks within an edit's grace": figures.below_min_after_edit,
            "time to bound p50 (s)": None if p50 is None else round(p50, 2),
            "time to bound p99 (s)": None if p99 is None else round(p99, 2),
            "jobs submitted as batch/v1 Jobs": sum(
                1 for j in self.submitted if not self._job(j).burst
            ),
            **job_completion_figures(done, sum(evicted.values())),
            "GPU-seconds allocated / capacity (stream)": round(
                self.gpu_seconds.total(self.plan.seconds) / capacity, 3
            ),
            "GPU-seconds of work lost to eviction": round(self.gpu_seconds.lost_gpu_seconds, 1),
            f"evicted pods that had run < {YOUNG_SECONDS:.0f} s": self.gpu_seconds.young_evictions,
            "settled": settled,
            "harness errors (API down during faults)": dict(self.errors),
        }
        return SoakResult(
            self.plan.seed, self.plan.seconds, result, violations, self.workdir, self.notes
        )


def _job_object(job: JobPlan) -> dict[str, Any]:
    """A gang as a batch/v1 Job: ``pods`` pods at once (its ``parallelism``, which Muster
    reads as the gang's size), each running ``runtime`` seconds on the kubelet stand-in;
    an eviction is not a failure (the recommended Job shape, README)."""
    template = _pod(job, 0)
    metadata = {k: v for k, v in template["metadata"].items() if k != "name"}
    metadata["annotations"] = {lc.RUN_SECONDS: str(job.runtime)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "labels": {JOB_LABEL: job.name}},
        "spec": {
            "parallelism": job.pods,
            "completions": job.pods,
            "backoffLimit": 6,
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
            },
            "template": {
                "metadata": metadata,
                "spec": {**template["spec"], "restartPolicy": "Never"},
            },
        },
    }


def _pod(job: JobPlan, index: int) -> dict[str, Any]:
    gpus = str(job.gpus(index))
    requests = {"cpu": "1", "memory": "1Gi", GPU: gpus}
    labels = {
        JOB_LABEL: job.name,
        PREEMPTIBLE_LABEL: str(job.preemptible).lower(),
        CAN_PREEMPT_LABEL: str(job.can_preempt).lower(),
    }
    if not job.burst:  # a burst's pods are single pods: each a job of its own to Muster
        labels[GROUP_LABEL] = job.name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{job.name}-{index}", "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": job.grace_seconds,
            "priorityClassName": job.priority_class,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": requests, "limits": {GPU: gpus}},
                }
            ],
        },
    }


@contextlib.contextmanager
def _soak(plan: SoakPlan, workdir: Path, say: Callable[[str], None]) -> Iterator[Soak]:
    soak = Soak(plan, workdir, say)
    try:
        soak.start()
        yield soak
    finally:
        soak.stop()


def run_soak(
    seed: int, seconds: float, workdir: Path, say: Callable[[str], None] = print
) -> SoakResult:
    """Play the plan of ``seed`` for ``seconds`` seconds; return the figures and violations."""
    plan = make_plan(seed, seconds)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "plan.json").write_text(json.dumps(_plan_document(plan), indent=1))
    say(
        f"soak: seed {seed}, {seconds:g}s, {len(plan.jobs)} jobs, "
        f"{len(plan.faults)} faults, quotas "
        + ", ".join(f"{q.name}[{q.min_gpus}..{q.max_gpus}]" for q in plan.quotas)
    )
    with _soak(plan, workdir, say) as soak:
        soak.play()
        return soak.finish()


def _plan_document(plan: SoakPlan) -> dict[str, Any]:
    return {
        "seed": plan.seed,
        "seconds": plan.seconds,
        "quotas": [q.__repr__() for q in plan.quotas],
        "jobs": [j.__repr__() for j in plan.jobs],
        "faults": [f.__repr__() for f in plan.faults],
    }
