"""The head-to-head (issue 25): one seeded GPU trace replayed identically on Muster and on
the peers' own schedulers, each on its own fresh local control plane, and one table.

    python -m bench.peers [--systems kube-scheduler,muster,scheduler-plugins,kueue,koordinator]
        [--seed 1] [--seconds 240] [--drain 150] [--nodes 32] [--teams 4] [--load 1.3]
        [--throughput-pods 1000] [--no-trace] [--min-runtime 0] [--reborrow-backoff 0]
        [--guarantee-reserve 60]
        [--max-notice 60]
        [--json peers.json]
        [--add-to peers.json] [--markdown] [--workdir DIR] [--weights 1,1,2,4]
    python -m bench.peers --refigure peers.json --workdir DIR [--markdown]

Systems (each with its documented configuration, on the same Kubernetes release,
``lc.peers.SCHEDULER_PLUGINS_KUBERNETES``: the newest scheduler-plugins builds against):

- ``kube-scheduler``: the stock kube-scheduler alone, its default configuration: no
  quotas, no gangs, its own priority preemption. The baseline (and the denominator of
  the binding rate);
- ``muster``: a stock kube-scheduler with Muster as its extender on the sample
  configuration (filter and preempt, kube-scheduler's MostAllocated packing), Muster's
  default arguments, and ``muster evictor`` acting on the soft-eviction marks;
- ``scheduler-plugins``: scheduler-plugins' kube-scheduler (CapacityScheduling with
  Coscheduling, its chart's configuration, :func:`localcluster.peers.scheduler_plugins_config`);
- ``koordinator``: Koordinator's koord-scheduler in kube-scheduler's place
  (:func:`localcluster.koordinator.koordinator_control_plane`: the module's scheduler
  configuration without the plugins that need koordlet; unschedulable pods retried after
  10 s, see :meth:`Replay.cluster`), with its own
  ``scheduling.sigs.k8s.io`` ElasticQuota per team and the gang in its pod annotations;
- ``kueue``: Kueue's controller manager beside a stock kube-scheduler
  (:func:`localcluster.kueue.start_kueue`: ``waitForPodsReady`` on, its documented way
  to all-or-nothing), one ClusterQueue per team in one cohort (``nominalQuota`` = ``min``,
  ``borrowingLimit`` = ``max - min``, Muster's preemption defaults) and a LocalQueue per
  namespace (:func:`localcluster.kueue_objects.kueue_queues`); each Job is submitted
  suspended to its team's LocalQueue. Kueue is not in the scheduling path: its binding
  rate is kube-scheduler's, and its cost is admission time, inside the completion times.

With ``--weights`` (one positive number per team, in the trace's order of teams; without
it, no system is given a weight) each system that has a fair-sharing weight is given the
team's, in its own form, and the fair-share gap row weighs each team's borrowing by it:

- ``muster``: the quota annotation ``muster.dev/fair-sharing-weight``
  (``base.keys.FAIR_SHARING_WEIGHT_ANNOTATION``), read when its ``fairSharing`` argument
  is on (``--muster-fair-sharing``, on by default);
- ``kueue``: fair sharing turned on in its Configuration (v0.17.0's v1beta2 API has no
  ``enable``: a ``fairSharing`` block turns it on, with ``preemptionStrategies`` Kueue's
  former default, :func:`localcluster.kueue_install.kueue_configuration`) and each
  ClusterQueue's ``spec.fairSharing.weight``; without ``--weights`` Kueue runs without
  fair sharing, its default, as before;
- ``koordinator``: the ElasticQuota annotation
  ``quota.scheduling.koordinator.sh/shared-weight`` (v1.6.0,
  ``apis/extension/elastic_quota.go``), per resource the weight with which its elastic
  quota plugin divides what the other quotas leave unused; absent it is the quota's
  ``max``, so each team's is its ``max`` times its weight
  (:func:`bench.support.weights.koordinator_shared_weight`);
- ``scheduler-plugins`` (CapacityScheduling) and ``kube-scheduler`` alone: none, they
  have no such setting (CapacityScheduling lends first come, first served, up to
  ``max``).

Every system is given the same objects: an ElasticQuota per team (``min`` and ``max`` in
GPUs; CPU and memory split alike, so they never decide) and a PodGroup (``minMember`` =
the job's pods) per job, and the same gang in Koordinator's pod annotations, each read by
the systems that read it. Every job is a batch/v1 Job of
``pods`` pods (``parallelism`` = ``completions``) whose pods run their run time on the
kubelet stand-in and succeed; an evicted pod is replaced by the Job controller (a
``DisruptionTarget`` failure is ignored: the README's recommended Job shape).

Per system: the control plane is started; the **binding rate** is measured first
(:meth:`Replay.binding_rates`: as bench.e2e measures it, in three pairs of the system and
the stock kube-scheduler on the same plane); then the trace
(:mod:`bench.trace`) is submitted at its own times, the pods are watched, and the figures
(:func:`bench.workload.trace_figures`) are taken over the same window on every system:
the trace's ``seconds`` plus ``drain``.

What a run records, under ``--workdir`` (a temporary directory without it): each
system's control plane's files and logs; ``<system>/sightings.jsonl``, every sighting and
submission (what ``--refigure`` reads); and for Muster its log (with each job's refusals),
its evictor's, and ``muster/muster-quotas.jsonl``, its own ``/debug/quotas`` every 2 s of
the trace (what it counted used, beside the GPUs the bench saw held).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import localcluster as lc
from base import keys
from bench.support.cluster_setup import (
    IGNORE_DISRUPTIONS,
    TRIAL_LABEL,
    create_pods,
    delete_pods,
    pod_body,
)
from bench.support.pod_watch import PodWatch, is_bound, is_gone
from bench.support.processes import Evictor, MusterServer
from bench.support.weights import (
    KOORDINATOR_SHARED_WEIGHT,
    koordinator_shared_weight,
    parse_weights,
)
from bench.time_to_mark import SAMPLE_PROFILES
from bench.trace import PRIORITIES, Trace, TraceJob, make_trace
from bench.workload import (
    YOUNG_SECONDS,
    BelowMin,
    GapStretch,
    PodSighting,
    Saves,
    SubmittedJob,
    holds_gpus,
    pod_gpus,
    pod_saves,
    trace_figures,
)

ROOT = Path(__file__).resolve().parents[1]

Json = dict[str, Any]
GPU = "nvidia.com/gpu"
#: Muster's count of the plans that marked (or evicted) victims.
PLANS_METRIC = "muster_time_to_mark_seconds_count"
#: ``--muster-prioritize``: see its help.
PRIORITIZE_CHOICES = ("off", "packing", "apart")
#: What a system's run recorded, in its work directory: submissions, then sightings.
SIGHTINGS = "sightings.jsonl"
#: Muster's own view of its quotas (``/debug/quotas``) every ``QUOTA_VIEW_SECONDS`` of the
#: trace, beside the sightings: what it counted used where the bench counts held GPUs.
QUOTA_VIEW, QUOTA_VIEW_SECONDS = "muster-quotas.jsonl", 2.0
JOB_LABEL = "bench.muster.dev/job"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
PREEMPTIBLE = "quota.scheduling.koordinator.sh/preemptible"
CAN_PREEMPT = "quota.scheduling.koordinator.sh/can-preempt"
#: Kueue's partial admission: the fewest pods a Job may be admitted with.
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
#: The notice Muster's quotas allow (the trace's jobs ask for less).
MAX_NOTICE_SECONDS = 60
#: The chart's ``guaranteeReserveSeconds`` (charts/muster/values.yaml), which the runs keep
#: as every team's ``muster.dev/guarantee-reserve-seconds`` unless told otherwise.
CHART_GUARANTEE_RESERVE = 60.0
#: The chart's ``victimRanking`` (charts/muster/values.yaml), which the runs pass Muster
#: unless told otherwise.
CHART_VICTIM_RANKING = "LostWorkFirst"
QUOTA_API = "/apis/scheduling.x-k8s.io/v1alpha1"
NODE_CPU, NODE_MEMORY_GI = 32, 128
SYSTEMS = ("kube-scheduler", "muster", "scheduler-plugins", "kueue", "koordinator")
#: Pods of the throughput phase (created while the scheduler is stopped, then timed).
THROUGHPUT_PODS = 1000
#: Rounds of the throughput phase; the figure is their median.
THROUGHPUT_ROUNDS = 3


def _job_object(job: TraceJob) -> Json:
    """A trace job as a batch/v1 Job whose pods carry the pod-group label, Muster's
    preemption labels (every job may be preempted and may preempt: the peers decide by
    priority and quota alone), their run time for the kubelet stand-in, and what the job
    declares of its work: its checkpoint interval, its notice (as Muster's annotation, and
    as the grace period the peers' deletions give; the stand-in saves and exits on either),
    its elastic range (Koordinator's gang minimum, Kueue's minimum parallelism; the
    PodGroup's ``minMember`` is written beside the Job)."""
    requests = {"cpu": "1", "memory": "1Gi", GPU: str(job.gpus_per_pod)}
    labels = {
        JOB_LABEL: job.name,
        POD_GROUP_LABEL: job.name,
        PREEMPTIBLE: "true",
        CAN_PREEMPT: "true",
    }
    declared: dict[str, str] = {}
    if job.checkpoint_interval is not None:
        declared[keys.CHECKPOINT_INTERVAL_ANNOTATION] = f"{job.checkpoint_interval:g}"
    if job.notice_seconds is not None:
        declared[keys.PREEMPTION_NOTICE_ANNOTATION] = f"{job.notice_seconds:g}"
        declared[lc.ANSWERS_NOTICE] = "fail"
    job_annotations = {} if job.min_pods is None else {MIN_PARALLELISM: str(job.min_pods)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.name,
            "labels": {JOB_LABEL: job.name},
            "annotations": job_annotations,
        },
        "spec": {
            "parallelism": job.pods,
            "completions": job.pods,
            "backoffLimit": 50,
            "podFailurePolicy": IGNORE_DISRUPTIONS,
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        lc.RUN_SECONDS: str(job.runtime),
                        **lc.koordinator.gang_annotations(job.name, job.runs_with),
                        **declared,
                    },
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": round(job.notice_seconds or 0),
                    "priorityClassName": job.priority_class,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": requests, "limits": {GPU: requests[GPU]}},
                        }
                    ],
                },
            },
        },
    }


@dataclasses.dataclass(frozen=True)
class QuotaSettings:
    """The admins' settings on every team's quota that Muster alone reads (each an
    annotation; the defaults are the runs' before the setting had a flag, but for the
    guarantee reserve: the chart's)."""

    #: ``muster.dev/max-preemption-notice-seconds``: the longest notice a victim gets.
    max_notice: float = MAX_NOTICE_SECONDS
    #: ``muster.dev/min-runtime-seconds`` (0: none, Muster's default).
    min_runtime: float = 0.0
    #: ``muster.dev/reborrow-backoff-seconds`` (0: none, Muster's default).
    reborrow_backoff: float = 0.0
    #: ``muster.dev/guarantee-reserve-seconds``: the chart's ``guaranteeReserveSeconds``
    #: (:data:`CHART_GUARANTEE_RESERVE`) unless set; 0: none (the argument's default).
    guarantee_reserve: float = CHART_GUARANTEE_RESERVE

    def annotations(self) -> dict[str, str]:
        settings = {keys.MAX_PREEMPTION_NOTICE_ANNOTATION: f"{self.max_notice:g}"}
        if self.min_runtime > 0:
            settings[keys.MIN_RUNTIME_ANNOTATION] = f"{self.min_runtime:g}"
        if self.reborrow_backoff > 0:
            settings[keys.REBORROW_BACKOFF_ANNOTATION] = f"{self.reborrow_backoff:g}"
        settings[keys.GUARANTEE_RESERVE_ANNOTATION] = f"{self.guarantee_reserve:g}"
        return settings

    def recorded(self) -> Json:
        """The results' keys for these settings: ``min_runtime_seconds`` always; the
        others only when not their default, absent as in the runs from before them."""
        found: Json = {"min_runtime_seconds": self.min_runtime}
        if self.max_notice != MAX_NOTICE_SECONDS:
            found["max_notice_seconds"] = self.max_notice
        if self.reborrow_backoff > 0:
            found["reborrow_backoff_seconds"] = self.reborrow_backoff
        # Always: the runs from before it had none, and ran without a reserve.
        found["guarantee_reserve_seconds"] = self.guarantee_reserve
        return found


def _quota_object(
    team: str,
    min_gpus: int,
    max_gpus: int,
    teams: int,
    nodes: int,
    settings: QuotaSettings = QuotaSettings(),
    weight: float | None = None,
) -> Json:
    """A team's ElasticQuota: GPUs as the trace says; CPU and memory split as GPUs are,
    so they never decide (scheduler-plugins reads a resource absent from ``max`` as 0);
    the admins' ``settings`` Muster alone reads, and the fair-sharing ``weight`` if one
    is given."""
    cpu, memory = nodes * NODE_CPU, nodes * NODE_MEMORY_GI
    annotations = settings.annotations()
    if weight is not None:
        annotations[keys.FAIR_SHARING_WEIGHT_ANNOTATION] = f"{weight:g}"
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": team,
            "namespace": team,
            "annotations": annotations,
        },
        "spec": {
            "min": {GPU: str(min_gpus), "cpu": str(cpu // teams), "memory": f"{memory // teams}Gi"},
            "max": {GPU: str(max_gpus), "cpu": str(cpu), "memory": f"{memory}Gi"},
        },
    }


class Replay:
    """One system, one trace: the control plane, the submissions and the pod watch."""

    def __init__(
        self,
        trace: Trace,
        system: str,
        workdir: Path,
        say: Callable[[str], None],
        settings: QuotaSettings = QuotaSettings(),
        prioritize: str = "off",
        fair_sharing: bool = True,
        weights: Mapping[str, float] | None = None,
        restart_jobs: bool = True,
        victim_ranking: str = CHART_VICTIM_RANKING,
    ):
        self.trace = trace
        self.settings = settings
        self.restart_jobs = restart_jobs
        self.victim_ranking = victim_ranking
        self.weights = weights
        self.prioritize = prioritize
        self.fair_sharing = fair_sharing
        self.muster: MusterServer | None = None
        self.system = system
        self.workdir = workdir
        self.say = say
        self.t0 = 0.0
        self.sightings: list[PodSighting] = []
        self.submitted: dict[str, SubmittedJob] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.time() - self.t0

    @contextlib.contextmanager
    def cluster(self) -> Iterator[lc.ControlPlane]:
        """The system's control plane, started and ready for the trace."""
        bin_dir = lc.ensure_binaries(version=lc.peers.SCHEDULER_PLUGINS_KUBERNETES)
        workdir = self.workdir / self.system
        k8s = workdir / "k8s"
        plane: lc.ControlPlane
        if self.system == "scheduler-plugins":
            plane = lc.ControlPlane(
                bin_dir=bin_dir,
                workdir=k8s,
                scheduler_binary=lc.ensure_peer("scheduler-plugins") / "kube-scheduler",
                scheduler_config=lc.peers.scheduler_plugins_config(),
                scheduler_rbac=lc.peers.scheduler_plugins_rbac(),
            )
        elif self.system == "koordinator":
            # koord-scheduler v1.6.0's Coscheduling may run PreEnqueue on a gang's last pod
            # before its gang cache has counted it, and nothing requeues that pod until
            # kube-scheduler's sweep of unschedulable pods (5 min by default): with the
            # sweep at 10 s the table measures its decisions, not that race.
            plane = lc.koordinator.koordinator_control_plane(
                bin_dir=bin_dir, workdir=k8s, max_unschedulable_seconds=10
            )
        elif self.system in ("kube-scheduler", "muster", "kueue"):
            plane = lc.ControlPlane(bin_dir=bin_dir, workdir=k8s)
        else:
            raise ValueError(f"unknown system {self.system!r} (known: {', '.join(SYSTEMS)})")
        with contextlib.ExitStack() as stack:
            stack.callback(plane.stop)
            plane.start()
            if self.system == "muster":
                # The chart's arguments: fair sharing on unless --muster-fair-sharing off, victims
                # ranked LostWorkFirst unless --muster-victim-ranking says otherwise;
                # with the prioritize verb on, borrowed pods kept apart or not.
                config = workdir / "muster-args.yaml"
                lines = [
                    f"fairSharing: {str(self.fair_sharing).lower()}",
                    f"restartEvictedJobs: {str(self.restart_jobs).lower()}",
                    f"victimRanking: {self.victim_ranking}",
                ]
                if self.prioritize != "off":
                    lines.append(f"borrowedApart: {str(self.prioritize == 'apart').lower()}")
                config.write_text("\n".join(lines) + "\n")
                muster = MusterServer(plane.kubeconfig, workdir / "muster.log", ROOT, config=config)
                self.muster = muster
                stack.callback(muster.stop)
                evictor = Evictor(plane.kubeconfig, workdir / "evictor.log", ROOT)
                stack.callback(evictor.stop)
                verb = None if self.prioritize == "off" else "prioritize"
                plane.restart_scheduler(
                    lc.ExtenderConfig(muster.url, prioritize_verb=verb, preempt_verb="preempt"),
                    scheduler_config=SAMPLE_PROFILES,
                )
            elif self.system == "kueue":
                kueue = lc.kueue.start_kueue(
                    plane, workdir=workdir / "kueue", fair_sharing=self.weights is not None
                )
                stack.callback(kueue.stop)
            self._prepare(plane)
            yield plane

    def _prepare(self, plane: lc.ControlPlane) -> None:
        rest = plane.rest
        for name, (value, _) in PRIORITIES.items():
            body = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            rest.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
        for i in range(self.trace.nodes):
            plane.create_node(
                f"gpu-{i:03d}",
                {
                    "cpu": str(NODE_CPU),
                    "memory": f"{NODE_MEMORY_GI}Gi",
                    GPU: self.trace.gpus_per_node,
                },
            )
        for team in self.trace.teams:
            plane.create_namespace(team.name)
            quota = _quota_object(
                team.name,
                team.min_gpus,
                team.max_gpus,
                len(self.trace.teams),
                self.trace.nodes,
                self.settings,
                self._weight(team.name),
            )
            if self.system == "koordinator":  # its own API group, and its namespaces key
                spec = quota["spec"]
                quota = lc.koordinator.elastic_quota(
                    team.name, team.name, min=spec["min"], max=spec["max"]
                )
                if self.weights is not None:
                    shared = koordinator_shared_weight(spec["max"], self.weights[team.name])
                    quota["metadata"]["annotations"][KOORDINATOR_SHARED_WEIGHT] = shared
            api = quota["apiVersion"]
            rest.request("POST", f"/apis/{api}/namespaces/{team.name}/elasticquotas", quota)
        if self.system == "kueue":
            queues = lc.kueue_objects.kueue_queues(
                lc.kueue_objects.TeamQuota(
                    team.name, team.min_gpus, team.max_gpus, weight=self._weight(team.name)
                )
                for team in self.trace.teams
            )
            lc.kueue_objects.create_kueue_objects(plane, queues)
            lc.kueue_objects.wait_queues_active(plane, queues)

    def _weight(self, team: str) -> float | None:
        return None if self.weights is None else self.weights[team]

    def _submit(self, plane: lc.ControlPlane, job: TraceJob) -> None:
        rest = plane.rest
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": job.name, "namespace": job.team},
            "spec": {"minMember": job.runs_with},
        }
        body = _job_object(job)
        if self.system == "kueue":  # Kueue admits the Job whole, then unsuspends it
            body = lc.kueue_objects.kueue_job(body, queue=job.team)
        try:
            if self.system != "koordinator":  # its plane serves no scheduling.x-k8s.io
                rest.request("POST", f"{QUOTA_API}/namespaces/{job.team}/podgroups", group)
            rest.request("POST", f"/apis/batch/v1/namespaces/{job.team}/jobs", body)
        except lc.ApiError as error:
            self.errors.append(f"{job.name}: {error}")
            return
        with self._lock:
            self.submitted[job.name] = SubmittedJob(
                job.team,
                job.pods,
                job.gpus_per_pod,
                job.priority_class,
                self.now(),
                job.min_pods,
                job.runtime,
            )

    def _on_pod(self, kind: str, pod: Json) -> None:
        metadata = pod.get("metadata") or {}
        job = (metadata.get("labels") or {}).get(JOB_LABEL)
        if job is None:
            return
        sighting = PodSighting(
            at=self.now(),
            key=f"{metadata.get('namespace')}/{metadata.get('name')}",
            job=job,
            gpus=pod_gpus(pod, GPU),
            holds=kind != "DELETED" and holds_gpus(pod),
            succeeded=(pod.get("status") or {}).get("phase") == "Succeeded",
            gone=kind == "DELETED",
            saves=pod_saves(pod, self.t0),
        )
        with self._lock:
            self.sightings.append(sighting)

    def _on_list(self, items: list[Json]) -> None:
        for item in items:
            self._on_pod("SYNC", item)

    def throughput(self, plane: lc.ControlPlane, pods: int, trial: str) -> float:
        """kube-scheduler's sustained binding rate on this system, pods per second, as
        bench.e2e measures it: ``pods`` pods (100m CPU, 128Mi, no GPU, no gang) spread over
        the teams' namespaces are created while the scheduler is stopped, then the scheduler
        is started; ``(pods - 1) / (last binding - first binding)``. The kubelet stand-in
        is paused meanwhile (pods stay bound and Pending), and the pods are deleted after."""
        namespaces = [team.name for team in self.trace.teams]
        watch = PodWatch(plane.rest).start()
        try:
            if plane.kubelet is not None:
                plane.kubelet.stop()
            plane.stop_scheduler()
            bodies = [
                (
                    namespaces[i % len(namespaces)],
                    pod_body(
                        f"{trial}-{i}", {"cpu": "100m", "memory": "128Mi"}, {TRIAL_LABEL: trial}
                    ),
                )
                for i in range(pods)
            ]
            keys, _ = create_pods(plane.rest, bodies, 8)
            watch.wait(keys, lambda r: True, timeout=60, what="throughput pods seen")
            plane.start_scheduler()
            records = watch.wait(keys, is_bound, timeout=300, what="throughput pods bound")
            bound = sorted(r.bound_at for r in records if r.bound_at is not None)
            delete_pods(plane.rest, namespaces, f"{TRIAL_LABEL}={trial}")
            watch.wait(keys, is_gone, timeout=120, what="throughput pods gone")
        finally:
            watch.stop()
            if plane.kubelet is not None and not plane.kubelet.running:
                plane.kubelet.start()
        return (len(bound) - 1) / (bound[-1] - bound[0])

    def binding_rates(self, plane: lc.ControlPlane, pods: int) -> Json:
        """The system's binding rate against the stock kube-scheduler's on the same plane
        (:meth:`~localcluster.scheduler.SchedulerMixin.using_stock_scheduler`), in
        ``THROUGHPUT_ROUNDS`` pairs, which goes first alternating: the medians, and the
        median of the pairs' ratios (one pair is measured within a minute of itself, so
        the ratio is what survives a noisy machine). ``kube-scheduler`` is its own pair."""
        own: list[float] = []
        alone: list[float] = []
        for n in range(THROUGHPUT_ROUNDS):
            if self.system == "kube-scheduler":
                own.append(self.throughput(plane, pods, f"tp{n}"))
                continue
            pair = []
            for stock in (n % 2 == 1, n % 2 == 0):
                if stock:
                    with plane.using_stock_scheduler():
                        pair.append(("alone", self.throughput(plane, pods, f"tpa{n}")))
                else:
                    pair.append(("own", self.throughput(plane, pods, f"tp{n}")))
            rates = dict(pair)
            own.append(rates["own"])
            alone.append(rates["alone"])
        ratios = [mine / stock for mine, stock in zip(own, alone, strict=False)]
        result: Json = {
            "pods_per_second": round(statistics.median(own), 1),
            "rounds": [round(rate, 1) for rate in own],
            "alone_rounds": [round(rate, 1) for rate in alone],
            "ratio_to_alone": round(statistics.median(ratios), 3) if ratios else 1.0,
        }
        self.say(f"{self.system}: binding {json.dumps(result)}")
        return result

    @contextlib.contextmanager
    def _quota_views(self, horizon: float) -> Iterator[None]:
        """For Muster, record its ``/debug/quotas`` every :data:`QUOTA_VIEW_SECONDS` into
        :data:`QUOTA_VIEW` while the trace plays (for a second look, not for a figure)."""
        muster = self.muster
        if muster is None:
            yield
            return
        stop = threading.Event()
        path = self.workdir / self.system / QUOTA_VIEW

        def record() -> None:
            with path.open("w") as out:
                while not stop.wait(QUOTA_VIEW_SECONDS):
                    at = time.time() - self.t0
                    try:
                        view = muster.debug("quotas")
                    except Exception as error:  # a missed look is not the run's failure
                        view = {"error": str(error)}
                    out.write(json.dumps({"at": round(at, 2), "quotas": view}) + "\n")

        thread = threading.Thread(target=record, name="bench-peers-quotas", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(15)

    def run(self, drain: float, throughput_pods: int, trace: bool = True) -> Json:
        """Measure the binding rate and play the trace; return the system's figures."""
        started = time.time()
        with self.cluster() as plane:
            ready = time.time() - started
            binding = self.binding_rates(plane, throughput_pods) if throughput_pods else None
            if not trace:
                return {"binding": binding}
            watcher = lc.Watcher(
                plane.rest,
                "/api/v1/pods",
                self._on_pod,
                on_list=self._on_list,
                label_selector=JOB_LABEL,
                name="bench-peers-watch",
            )
            watcher.start()
            try:
                lc.wait_until(watcher.synced.is_set, timeout=30, what="the pod watch")
                self.t0 = time.time()
                self.say(
                    f"{self.system}: ready in {ready:.0f}s; playing {len(self.trace.jobs)} jobs"
                )
                horizon = self.trace.seconds + drain
                with self._quota_views(horizon):
                    for job in self.trace.jobs:
                        # The trace's own clock: each job is sent at its time, not on a
                        # signal.
                        time.sleep(max(0.0, self.t0 + job.at - time.time()))
                        self._submit(plane, job)
                    time.sleep(max(0.0, self.t0 + horizon - time.time()))
                # Muster's plans that marked (or evicted) victims, from its own count.
                plans = self.muster.counter(PLANS_METRIC) if self.muster is not None else None
            finally:
                watcher.stop()
        with self._lock:
            sightings, submitted = list(self.sightings), dict(self.submitted)
        # What the figures are made of, for a second look (--refigure): every sighting
        # and submission.
        with (self.workdir / self.system / SIGHTINGS).open("w") as out:
            for name, job in submitted.items():
                out.write(json.dumps({"job": name, **dataclasses.asdict(job)}) + "\n")
            for sighting in sightings:
                out.write(json.dumps(dataclasses.asdict(sighting)) + "\n")
        figures = trace_figures(
            sightings,
            submitted,
            {team.name: team.min_gpus for team in self.trace.teams},
            self.trace.capacity,
            horizon,
            weights=self.weights,
        )
        figures["trace_started_at"] = round(self.t0, 3)  # epoch seconds, to read logs by
        figures["submit_errors"] = self.errors
        figures["binding"] = binding
        if plans is not None:
            figures["preemption_plans"] = int(plans)
            figures["evicted_pods_per_plan"] = (
                round(figures["evicted_pods"] / plans, 2) if plans else None
            )
        return figures


def play(
    trace: Trace,
    systems: list[str],
    drain: float,
    workdir: Path,
    say: Callable[[str], None],
    throughput_pods: int = THROUGHPUT_PODS,
    trace_too: bool = True,
    settings: QuotaSettings = QuotaSettings(),
    prioritize: str = "off",
    fair_sharing: bool = True,
    weights: Mapping[str, float] | None = None,
    restart_jobs: bool = True,
    victim_ranking: str = CHART_VICTIM_RANKING,
) -> Json:
    """Every system on the trace, one after another; the figures per system
    (``weights``: each team's fair-sharing weight, see the module docstring)."""
    results: Json = {
        "seed": trace.seed,
        **settings.recorded(),
        "muster_prioritize": prioritize,
        "muster_fair_sharing": fair_sharing,
        "muster_restart_jobs": restart_jobs,
        "muster_victim_ranking": victim_ranking,
        "kubernetes": lc.peers.SCHEDULER_PLUGINS_KUBERNETES,
        "trace": {
            "seconds": trace.seconds,
            "drain": drain,
            "nodes": trace.nodes,
            "gpus_per_node": trace.gpus_per_node,
            "jobs": len(trace.jobs),
            "pods": sum(job.pods for job in trace.jobs),
            "teams": [
                {"name": t.name, "min": t.min_gpus, "max": t.max_gpus, "starts": t.starts}
                for t in trace.teams
            ],
        },
        "systems": {},
    }
    if weights is not None:
        results["weights"] = dict(weights)
    for system in systems:
        began = time.time()
        replay = Replay(
            trace,
            system,
            workdir,
            say,
            settings,
            prioritize,
            fair_sharing,
            weights=weights,
            restart_jobs=restart_jobs,
            victim_ranking=victim_ranking,
        )
        figures = replay.run(drain, throughput_pods, trace_too)
        figures["wall_seconds"] = round(time.time() - began, 1)
        results["systems"][system] = figures
        say(f"{system}: {json.dumps(_without_series(figures))}")
    return results


def markdown_table(results: Json) -> str:
    """The comparison table, one column per system."""
    systems = results["systems"]
    names = list(systems)
    classes = sorted({c for f in systems.values() for c in f.get("job_completion_seconds", {})})

    trace = results.get("trace") or {}
    gpu_window = (
        trace.get("nodes", 0)
        * trace.get("gpus_per_node", 0)
        * (trace.get("seconds", 0) + trace.get("drain", 0))
    ) or 1

    def rate(figures: Json) -> str:
        binding = figures.get("binding")
        if not binding:
            return "-"
        return f"{binding['pods_per_second']:.0f} ({binding['ratio_to_alone']:.2f})"

    def completion(figures: Json, name: str) -> str:
        row = figures["job_completion_seconds"].get(name)
        if not row:
            return "-"
        floor = f"; floor {row['p95_floor']:.1f}" if "p95_floor" in row else ""
        return f"{row['p50']:.0f} / {row['p95']:.0f} ({row['count']}{floor})"

    rows: list[tuple[str, Callable[[Json], str]]] = [
        ("GPU allocation (GPU-s held / capacity)", lambda f: f"{f['gpu_allocation']:.3f}"),
        ("GPU-s held by gangs not fully running", lambda f: f"{f['partial_gang_gpu_seconds']:.0f}"),
        (
            "GPU allocation to gangs running whole (the rest waits, doing nothing)",
            lambda f: f"{f['gpu_allocation'] - f['partial_gang_gpu_seconds'] / gpu_window:.3f}",
        ),
        (
            "team-seconds below `min` with work that fits in it",
            lambda f: f"{sum(f['seconds_below_min_with_pending_work'].values()):.0f}",
        ),
        (
            "of which with no pod to place (its controller has not made one)",
            lambda f: (
                f"{sum(f['seconds_below_min_with_no_pod_to_place'].values()):.0f}"
                if "seconds_below_min_with_no_pod_to_place" in f
                else "-"
            ),
        ),
        *(
            (
                f"completion p50 / p95 s (jobs; floor: p95 at their runtimes), {name}",
                lambda f, n=name: completion(f, n),
            )
            for name in classes
        ),
        ("jobs completed / submitted", lambda f: f"{f['jobs_completed']} / {f['jobs_submitted']}"),
        (
            "evicted pods per completed job",
            lambda f: (
                "-"
                if f["evictions_per_completed_job"] is None
                else f"{f['evictions_per_completed_job']:.3f}"
            ),
        ),
        ("jobs pending at the end (nothing running)", lambda f: str(f["pending_at_end"])),
        (
            "GPU-s of work lost to eviction (each victim since its last save)",
            lambda f: f"{f['gpu_seconds_lost_to_eviction']:.0f}",
        ),
        (
            f"evicted pods that had run < {YOUNG_SECONDS:.0f} s",
            lambda f: str(f["evictions_younger_than_60s"]),
        ),
        (
            "fair-share gap, GPUs: mean / worst (the most-borrowing team over a team waiting "
            "at or above its `min`"
            + (", each team's borrowing ÷ its weight)" if results.get("weights") else ")"),
            lambda f: (
                f"{f['fair_share_gap_gpus']['mean']:.1f} / {f['fair_share_gap_gpus']['worst']:.0f}"
            ),
        ),
        (
            "Muster's preemption plans (evicted pods per plan)",
            lambda f: (
                f"{f['preemption_plans']} ({f['evicted_pods_per_plan']})"
                if f.get("evicted_pods_per_plan") is not None
                else "-"
            ),
        ),
        ("binding rate, pods/s (÷ the stock kube-scheduler's on the same plane)", rate),
    ]

    def cell_of(cell: Callable[[Json], str], figures: Json) -> str:
        try:
            return cell(figures)
        except KeyError:  # a system measured for its binding rate only (--no-trace)
            return "-"

    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, cell in rows:
        values = [cell_of(cell, systems[n]) for n in names]
        if all(value == "-" for value in values):
            continue  # measured on no system (a trace without the binding rates)
        lines.append(f"| {label} | {' | '.join(values)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="comma-separated: " + ", ".join(SYSTEMS)
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=240.0, help="the trace's arrival window")
    parser.add_argument("--drain", type=float, default=150.0, help="watched after the last arrival")
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--teams", type=int, default=4)
    parser.add_argument("--load", type=float, default=1.3)
    parser.add_argument(
        "--throughput-pods",
        type=int,
        default=THROUGHPUT_PODS,
        help="pods of the throughput phase before the trace (0: skip it)",
    )
    parser.add_argument(
        "--no-trace", action="store_true", help="measure the binding rates only, no trace"
    )
    parser.add_argument(
        "--min-runtime",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the teams' quotas' muster.dev/min-runtime-seconds, read by Muster alone "
        "(default 0: none, Muster's default)",
    )
    parser.add_argument(
        "--max-notice",
        type=float,
        default=MAX_NOTICE_SECONDS,
        metavar="SECONDS",
        help="the teams' quotas' muster.dev/max-preemption-notice-seconds, read by Muster "
        f"alone (default {MAX_NOTICE_SECONDS}; 0: victims evicted at once, no notice)",
    )
    parser.add_argument(
        "--reborrow-backoff",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the teams' quotas' muster.dev/reborrow-backoff-seconds, read by Muster alone "
        "(default 0: none, Muster's default)",
    )
    parser.add_argument(
        "--guarantee-reserve",
        type=float,
        default=CHART_GUARANTEE_RESERVE,
        metavar="SECONDS",
        help="the teams' quotas' muster.dev/guarantee-reserve-seconds, read by Muster alone "
        f"(default {CHART_GUARANTEE_RESERVE:g}, the chart's guaranteeReserveSeconds; 0: none)",
    )
    parser.add_argument(
        "--muster-prioritize",
        choices=PRIORITIZE_CHOICES,
        default="off",
        help="Muster's prioritize verb: off (the sample configuration: kube-scheduler's own "
        "MostAllocated packs), packing (on, borrowedApart false), apart (on, borrowed pods "
        "kept apart from guaranteed ones, Muster's default)",
    )
    parser.add_argument(
        "--muster-fair-sharing",
        choices=("on", "off"),
        default="on",
        help="Muster's fairSharing argument: on (the chart's setting, the default) or off "
        "(first come, first served borrowing, Muster's own default)",
    )
    parser.add_argument(
        "--muster-restart-jobs",
        choices=("on", "off"),
        default="on",
        help="Muster's restartEvictedJobs argument: on (its default: a Job whose pods are all "
        "victims is suspended, then resumed) or off (its pods evicted one by one)",
    )
    parser.add_argument(
        "--muster-victim-ranking",
        choices=("PriorityFirst", "LostWorkFirst"),
        default=CHART_VICTIM_RANKING,
        help="Muster's victimRanking argument: LostWorkFirst (the chart's setting, the "
        "default: among victims the job outranks, the least work lost decides before "
        "priority) or PriorityFirst (Muster's own default)",
    )
    parser.add_argument(
        "--weights",
        metavar="W1,W2,...",
        help="the teams' fair-sharing weights, one positive number per team (default: none, "
        "all alike); given to Muster, Kueue (its fair sharing turned on) and Koordinator, "
        "and the fair-share gap is weighted by them",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--add-to",
        type=Path,
        help="an earlier --json of the same trace: add (or replace) these systems' columns",
    )
    parser.add_argument(
        "--refigure",
        type=Path,
        metavar="JSON",
        help="play nothing: compute the figures of an earlier --json again from the sightings "
        "its run recorded under --workdir, write them back, and print them",
    )
    parser.add_argument("--markdown", action="store_true", help="print the table in Markdown")
    parser.add_argument("--workdir", type=Path, help="keep the control planes' files here")
    options = parser.parse_args(argv)
    if options.refigure is not None:
        if options.workdir is None:
            parser.error("--refigure needs the --workdir its run kept")
        try:
            results = refigure(json.loads(options.refigure.read_text()), options.workdir)
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"--refigure: {error}", file=sys.stderr)
            return 2
        options.refigure.write_text(json.dumps(results, indent=1))
        _print_results(results, options.markdown)
        return 0
    systems = [s.strip() for s in options.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if not systems or unknown:
        given = ", ".join(unknown) or "(none given)"
        parser.error(f"--systems: unknown {given}; known: {', '.join(SYSTEMS)}")
    try:
        trace = make_trace(
            options.seed,
            seconds=options.seconds,
            nodes=options.nodes,
            teams=options.teams,
            load=options.load,
        )
    except ValueError as error:
        parser.error(str(error))
    weights = None
    if options.weights is not None:
        try:
            listed = parse_weights(options.weights, options.teams)
        except ValueError as error:
            parser.error(str(error))
        weights = {team.name: w for team, w in zip(trace.teams, listed, strict=True)}
    for flag, value in (
        ("--min-runtime", options.min_runtime),
        ("--reborrow-backoff", options.reborrow_backoff),
        ("--guarantee-reserve", options.guarantee_reserve),
        ("--max-notice", options.max_notice),
    ):
        if not 0 <= value < float("inf"):
            parser.error(f"{flag}: {value:g} is not a number of seconds >= 0")
    settings = QuotaSettings(
        max_notice=options.max_notice,
        min_runtime=options.min_runtime,
        reborrow_backoff=options.reborrow_backoff,
        guarantee_reserve=options.guarantee_reserve,
    )
    if options.no_trace and not options.throughput_pods:
        parser.error("--no-trace with --throughput-pods 0 measures nothing")
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="muster-peers-"))
    say = lambda message: print(f"peers: {message}", file=sys.stderr, flush=True)  # noqa: E731
    results = play(
        trace,
        systems,
        options.drain,
        workdir,
        say,
        options.throughput_pods,
        trace_too=not options.no_trace,
        settings=settings,
        prioritize=options.muster_prioritize,
        fair_sharing=options.muster_fair_sharing == "on",
        weights=weights,
        restart_jobs=options.muster_restart_jobs == "on",
        victim_ranking=options.muster_victim_ranking,
    )
    if options.add_to is not None:
        earlier = json.loads(options.add_to.read_text())
        if {k: earlier.get(k) for k in ("seed", "trace")} != {
            k: results[k] for k in ("seed", "trace")
        }:
            print(f"--add-to: {options.add_to} is of another trace", file=sys.stderr)
            return 2
        for name, figures in results["systems"].items():  # a --no-trace run adds its rate
            earlier["systems"].setdefault(name, {}).update(figures)
        results = earlier
        options.add_to.write_text(json.dumps(results, indent=1))
    if options.json:
        options.json.write_text(json.dumps(results, indent=1))
    _print_results(results, options.markdown)
    return 0


def _print_results(results: Json, markdown: bool) -> None:
    if markdown:
        print(markdown_table(results))
    else:
        systems = {name: _without_series(f) for name, f in results["systems"].items()}
        print(json.dumps(systems, indent=1))


def refigure(results: Json, workdir: Path) -> Json:
    """``results`` with each system's trace figures computed again, by the current
    :func:`~bench.workload.trace_figures`, from what its run recorded in ``workdir``
    (``<system>/sightings.jsonl``): a figure defined since the run, or corrected, without
    playing the trace again.  Systems measured for their binding rate only are kept."""
    for system, figures in results["systems"].items():
        if "gpu_allocation" not in figures:
            continue
        jobs, seen = recorded_run(workdir, system)
        figures.update(recorded_figures(results, jobs, seen))
    return results


def recorded_figures(
    results: Json,
    jobs: Mapping[str, SubmittedJob],
    seen: list[PodSighting],
    below_min: list[BelowMin] | None = None,
    gaps: list[GapStretch] | None = None,
) -> Json:
    """:func:`~bench.workload.trace_figures` of a recorded run (:func:`recorded_run`), on
    the trace and weights ``results`` says it played (``below_min``, ``gaps``: as there)."""
    trace = results["trace"]
    return trace_figures(
        seen,
        jobs,
        {team["name"]: team["min"] for team in trace["teams"]},
        trace["nodes"] * trace["gpus_per_node"],
        trace["seconds"] + trace["drain"],
        weights=results.get("weights"),
        below_min=below_min,
        gaps=gaps,
    )


def recorded_run(workdir: Path, system: str) -> tuple[dict[str, SubmittedJob], list[PodSighting]]:
    """What ``system``'s run recorded in ``workdir`` (``<system>/sightings.jsonl``): the
    jobs submitted, by name, and every sighting of their pods."""
    recorded = workdir / system / SIGHTINGS
    if not recorded.is_file():
        raise FileNotFoundError(f"{recorded}: no sightings recorded for {system}")
    jobs: dict[str, SubmittedJob] = {}
    seen: list[PodSighting] = []
    with recorded.open() as lines:
        for line in lines:
            row = json.loads(line)
            if "job" in row and "team" in row:
                name = row.pop("job")
                jobs[name] = SubmittedJob(**row)
            else:
                seen.append(PodSighting(**{**row, "saves": Saves(**row["saves"])}))
    return jobs, seen


def _without_series(figures: Json) -> Json:
    return {k: v for k, v in figures.items() if k != "allocated_gpus_series"}


if __name__ == "__main__":
    sys.exit(main())
