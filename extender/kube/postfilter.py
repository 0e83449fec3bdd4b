"""The PostFilter loop: job-level preemption acting on the live cluster.

kube-scheduler cannot be made to preempt for quota reasons, and does not
even call an extender when its own filters reject every node, so Muster runs
its PostFilter itself.  Jobs Muster governs come in from the filter's quota
and reservation rejections, from the ``preempt`` verb (kube-scheduler wants to
preempt for the pod, and is given no victims: Muster is the one authority),
and from pods whose ``PodScheduled`` condition turns ``False/Unschedulable``
(the pod informer) (all through :meth:`PostFilterLoop.request`).  A job that cannot
grow any more (see :func:`~extender.core.preemption.eligibility.ready_to_plan`) is planned at
once; any other after a short quiet period (a gang of undeclared size is planned only once
its pods stopped arriving, ``gangSettleSeconds``: the planner refuses it until then).

A committed plan holds its room in memory first (so the very next filter
keeps other pods off it), then is written to the cluster: victims get the
soft-eviction label and annotation, a ``DisruptionTarget`` condition and a
``Preempted`` event (or are evicted at once with
``podShouldBeDeletedWhenPreempted``); the preemptor's pods get the
reservation as an annotation and ``status.nominatedNodeName``, which also
makes kube-scheduler retry them.  Reservations that time out are released.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

import httpx
from prometheus_client import Histogram

from extender.core.decisions import Decision, DecisionLog
from extender.core.effects import AbandonPlan, HoldRoom, ReleaseRoom, apply
from extender.core.gangsize import settles_at
from extender.core.objects import PodInfo
from extender.core.preemption.candidates import victim_refusal
from extender.core.preemption.planner import PreemptionPlan, Victim, plan_job_preemption
from extender.core.reservations import (
    EndedPlan,
    ended_plan,
    persisted_reservation,
    refused_victims,
    reserved_by_muster,
    settle_reservations,
)
from extender.kube.client import ApiError
from extender.kube.health import Watched
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter, best_effort

log = logging.getLogger(__name__)

_T = TypeVar("_T")
#: Concurrent writes for one plan (a gang's victims' marks, its pods' reservations).
WRITERS = 8


class PostFilterLoop(Watched):
    def __init__(
        self,
        source: KubeSource,
        writer: ClusterWriter,
        decisions: DecisionLog,
        *,
        clock: Callable[[], float] = time.time,
        debounce_seconds: float = 0.5,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.source = source
        self.writer = writer
        self.decisions = decisions
        self.clock = clock
        self.debounce_seconds = debounce_seconds
        self.is_leader = is_leader
        self._due: dict[str, float] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.name = "postfilter"
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._init_health()
        self.committed = 0
        self.refused = 0
        self._written: set[str] = set()  # victim UIDs this process has marked or evicted
        self._refused_logged: set[str] = set()  # victim UIDs the rules refused, logged once
        self._writers = ThreadPoolExecutor(WRITERS, thread_name_prefix="postfilter-write")
        #: Served on Muster's /metrics (see serve.py).
        self.time_to_mark = Histogram(
            "muster_time_to_mark_seconds",
            "From the creation of a preempting job's last pod to its victims marked (or "
            "evicted), by the leader's clock; creation times have one-second resolution.",
            buckets=(0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0),
            registry=None,
        )

    def start(self) -> PostFilterLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self._stop.set()
        self._wake.set()
        self._thread.join(5)
        self._writers.shutdown(wait=False)

    def _each(self, write: Callable[[_T], object], items: Sequence[_T]) -> None:
        """``write`` every item, concurrently (each one a few API calls, so a gang's
        victims are marked in about the time of one); returns when all are done."""
        if len(items) <= 1:
            for item in items:
                write(item)
            return
        for _ in self._writers.map(write, items):
            pass

    def request(self, job: str, reason: str = "", at_once: bool = False) -> None:
        """Ask for a preemption decision about ``job``: at once (``ready_to_plan``: a lone
        pod, or a gang of declared size, complete), or after ``debounce_seconds``."""
        due = self.clock() + (0.0 if at_once else self.debounce_seconds)
        with self._lock:
            self._due[job] = min(due, self._due.get(job, due))
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(0.5)
            self._wake.clear()
            if not self.source.ready():
                continue
            try:
                self._round()
            except Exception as error:  # a bug in one round must not end the loop
                self.round_failed(error, self.clock())
            else:
                self.round_succeeded()

    def _round(self) -> None:
        now = self.clock()
        # Every replica ends its reservations on time (followers answer the filter too);
        # only the leader writes to the cluster.
        ended = self._settle(now)
        if not self.is_leader():
            return
        for plan in ended:
            self._undo(plan, now)
        self.complete_in_flight()
        self.abandon_refused(now)
        with self._lock:
            due = sorted(job for job, at in self._due.items() if at <= now)
            for job in due:
                del self._due[job]
        for job in due:
            try:
                self.decide(job, now)
            except Exception:  # one job's failure must not stop the others
                log.exception("postfilter: deciding %s failed", job)
        with self._lock:
            if self._due and min(self._due.values()) <= self.clock():
                self._wake.set()

    def _remove(
        self, pod: PodInfo, job: str, reason: str, delete_now: bool, *, label_only: bool = False
    ) -> bool:
        """Mark a victim for soft eviction (or evict it at once), once it succeeds; a
        failure is left for :meth:`complete_in_flight` to retry.  ``label_only``: the mark
        alone, its condition and event left to the caller.  Returns whether it was
        written now."""
        if pod.uid in self._written:
            return False
        try:
            if delete_now:
                self.writer.evict(pod.namespace, pod.name, pod.uid, None)
            elif label_only:
                self.writer.label_victim(pod, preemptor=job, reason=reason, grace_seconds=None)
            else:
                self.writer.mark_victim(pod, preemptor=job, reason=reason, grace_seconds=None)
        except ApiError as error:
            if error.status not in (404, 409):  # not gone or replaced: try again later
                log.warning("victim %s: %s (will retry)", pod.key, error)
                return False
            self._written.add(pod.uid)  # gone or replaced: nothing more to write
            return False
        except httpx.HTTPError as error:
            log.warning("victim %s: %s (will retry)", pod.key, error)
            return False
        self._written.add(pod.uid)
        return True

    def complete_in_flight(self) -> int:
        """Mark the victims of in-flight reservations that are still unmarked (a Muster
        that died between writing a reservation and marking its victims), and record the
        disruption of those marked without it; return how many were marked."""
        with self.source.exclusive() as snapshot:
            delete_now = snapshot.args.pod_should_be_deleted_when_preempted
            unmarked = [
                (snapshot.pods[key], reservation.job)
                for reservation in snapshot.reservations.values()
                for key in reservation.victims
                if key in snapshot.pods
                and snapshot.pods[key].uid not in self._written
                and not snapshot.pods[key].departing  # marked, evicted, or kube-scheduler's
                and snapshot.pods[key].node_name is not None
            ]
            unrecorded = [
                (pod, reservation.job)
                for reservation in snapshot.reservations.values()
                for key in reservation.victims
                if (pod := snapshot.pods.get(key)) is not None
                and pod.uid not in self._written
                and pod.node_name is not None
                and not pod.finished
                and not pod.terminating
                and pod.marked_for == reservation.job
                and pod.preempted_by is None  # no DisruptionTarget yet
            ]
            # Each victim checked against the rules again, whatever record named it.
            refused = [
                (pod, job, why)
                for pod, job in unmarked
                if (why := victim_refusal(snapshot, job, pod)) is not None
            ]
        for pod, job, why in refused:
            if pod.uid not in self._refused_logged:
                self._refused_logged.add(pod.uid)
                log.warning("not marking %s for job %s: %s", pod.key, job, why)
        refused_keys = {pod.key for pod, _, _ in refused}
        unmarked = [(pod, job) for pod, job in unmarked if pod.key not in refused_keys]
        for pod, job in unmarked:
            self._remove(pod, job, f"completing the preemption for job {job}", delete_now)
        # A Muster stopped between a plan's marks and their conditions: the victims it
        # marked (signed, so believed) get their DisruptionTarget and Preempted event now.
        # A victim this process marked gets them from the plan itself (decide).
        for pod, job in unrecorded:
            self._written.add(pod.uid)
            reason = f"completing the preemption for job {job}"
            best_effort(pod, partial(self.writer.record_disruption, preemptor=job, reason=reason))
        return len(unmarked)

    def abandon_refused(self, now: float) -> list[str]:
        """Abandon the plans a PodDisruptionBudget stalls: a victim still refused
        ``victimEvictionDeadlineSeconds`` after it was marked (see
        :func:`extender.core.budgets.refused_victims`).  They are undone as any plan
        ended without its job binding, and the job is planned again without the refused
        victims; return the jobs."""
        with self.source.exclusive() as snapshot:
            deadline = snapshot.args.victim_eviction_deadline_seconds
            ended = []
            for job, refused in refused_victims(snapshot, now).items():
                names = ", ".join(pod.key for pod in refused)
                why = (
                    f"a PodDisruptionBudget still refuses the eviction of {names} "
                    f"{deadline:.0f}s after it was marked"
                )
                ended.append(ended_plan(snapshot, job, why))
                apply(snapshot, AbandonPlan(job, frozenset(pod.key for pod in refused)))
        for plan in ended:
            self._undo(plan, now)
        return [plan.job for plan in ended]

    def _settle(self, now: float) -> list[EndedPlan]:
        """Extend the reservations whose victims are still terminating, end the others
        whose time is up or whose job is gone (see
        :func:`extender.core.reservations.settle_reservations`); return the plans ended."""
        with self.source.exclusive() as snapshot:
            snapshot.expire_vacancies(now)
            extended, ended = settle_reservations(snapshot, now)
            for reservation in extended:
                apply(snapshot, HoldRoom(reservation))
            for plan in ended:
                apply(snapshot, ReleaseRoom(plan.job))
        return ended

    def _undo(self, plan: EndedPlan, now: float) -> None:
        """Take back what Muster wrote for a plan that ended without its job binding: the
        marks of its victims not yet leaving first, then the reservation on the job's
        pods (the update makes kube-scheduler retry them), with events."""
        reason = f"preemption for job {plan.job} abandoned: {plan.why}"
        if plan.unmark or plan.release:
            log.warning("%s; undoing what was written for it", reason)
        for pod in plan.unmark:
            best_effort(pod, partial(self.writer.unmark_victim, reason=reason))
            self._written.discard(pod.uid)
        for pod in plan.release:
            nominated = pod.nominated_node_name == reserved_by_muster(pod)
            best_effort(pod, partial(self.writer.release_room, nominated=nominated))
        if plan.unmark and plan.release:
            event = partial(
                self.writer.event, reason="PreemptionAbandoned", message=reason, kind="Warning"
            )
            best_effort(plan.release[0], event)
        if plan.release:
            record = Decision(now, "postfilter", "abandoned", (reason,))
            self.decisions.record(plan.release[0].key, record)

    def _persist(self, pod: PodInfo, persisted: dict[str, object], node: str) -> None:
        """Write the reservation on a preemptor pod (its own node added)."""
        try:
            self.writer.persist_reservation(pod, persisted | {"node": node})
        except (ApiError, httpx.HTTPError) as error:
            log.warning("reservation of %s: %s", pod.key, error)

    def _nominate(self, pod: PodInfo, node: str) -> None:
        try:
            self.writer.nominate(pod, node)
        except (ApiError, httpx.HTTPError) as error:
            log.warning("nominating %s for %s: %s", node, pod.key, error)

    def decide(self, job: str, now: float) -> PreemptionPlan | None:
        """Plan for ``job``; on a plan, hold its room and write it to the cluster."""
        if not self.is_leader():
            return None  # lost the Lease since the loop looked: the new leader decides
        with self.source.exclusive() as snapshot:
            if job in snapshot.reservations:
                return None  # in flight: its room is held, its pods are being retried
            decision = plan_job_preemption(snapshot, job, now)
            if not isinstance(decision, PreemptionPlan):
                pending = [p.key for p in snapshot.job_pods(job) if p.node_name is None]
                # A gang still arriving is planned once it settles: nothing else may ask
                # again (when kube-scheduler's own filters reject every node, its pods'
                # messages are not Muster's, and no nudge comes).
                settled = settles_at(snapshot, job, now)
            else:
                timeout = snapshot.args.reservation_timeout_seconds
                reservation = decision.reservation(now, timeout)
                apply(snapshot, HoldRoom(reservation))
                delete_now = snapshot.args.pod_should_be_deleted_when_preempted
                preemptor_pods = [snapshot.pods[key] for key in decision.placements]
                last_created = max(p.created for p in snapshot.job_pods(job))
        if not isinstance(decision, PreemptionPlan):
            if settled is not None:
                with self._lock:
                    self._due[job] = min(settled, self._due.get(job, settled))
            self.refused += 1
            for key in pending:
                self.decisions.record(
                    key, Decision(now, "postfilter", "no preemption", decision.reasons)
                )
            return None
        self.committed += 1
        log.info("preempting for %s: %d victims", job, len(decision.victims))
        # Victims are marked first (nothing stands between the plan and the marks): a
        # mark names its job, and a job is in flight while pods marked for it are present,
        # so a Muster restarted half-way never plans it again.  Then the reservation,
        # which also names the victims (a restarted Muster finishes marking them, see
        # complete_in_flight), and the nominations; then each victim's DisruptionTarget
        # condition and event.  Each step writes its pods concurrently.  An eviction
        # leaves no mark: with podShouldBeDeletedWhenPreempted the reservation is written
        # first.
        persisted = persisted_reservation(reservation)
        placements = decision.placements
        if delete_now:
            self._each(
                lambda pod: self._persist(pod, persisted, placements[pod.key]), preemptor_pods
            )
        # Each victim's mark is one patch, all at once; its condition and event follow the
        # plan's other writes (they are for people and controllers, not for Muster).
        marked: list[Victim] = []

        def mark(victim: Victim) -> None:
            if self._remove(victim.pod, job, victim.reason, delete_now, label_only=True):
                marked.append(victim)

        self._each(mark, decision.victims)
        # Creation timestamps have one-second resolution: the figure is within a second.
        self.time_to_mark.observe(max(0.0, self.clock() - last_created))

        def hold(pod: PodInfo) -> None:
            if not delete_now:
                self._persist(pod, persisted, placements[pod.key])
            self._nominate(pod, placements[pod.key])

        self._each(hold, preemptor_pods)
        for pod in preemptor_pods:
            self.decisions.record(
                pod.key,
                Decision(
                    now,
                    "postfilter",
                    f"preempting: {len(decision.victims)} victims, room held on "
                    f"{placements[pod.key]}",
                    tuple(f"{v.pod.key}: {v.reason}" for v in decision.victims),
                ),
            )
        if not delete_now:
            record = partial(self.writer.record_disruption, preemptor=job)
            self._each(
                lambda victim: best_effort(victim.pod, partial(record, reason=victim.reason)),
                marked,
            )
        if preemptor_pods:
            victims = ", ".join(v.pod.key for v in decision.victims)
            self.writer.event(preemptor_pods[0], "Preempting", f"Job {job} preempts {victims}")
        return decision
