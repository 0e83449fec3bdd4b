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

A committed plan holds its room in memory first (so the very next filter keeps other pods
off it), then is written to the cluster: victims get the soft-eviction label and annotation,
a ``DisruptionTarget`` condition and a ``Preempted`` event (or are evicted at once with
``podShouldBeDeletedWhenPreempted``); the preemptor's pods get the reservation as an
annotation and ``status.nominatedNodeName``, which also makes kube-scheduler retry them.
Reservations that time out are released.  A job found fitting is planned again a few times
(:mod:`extender.kube.rechecks`).

The loop decides, under the state's hold (:meth:`PostFilterLoop._plan`: a
:class:`~extender.kube.issuer.Commitment`, its room held, or a :class:`Refused`);
:class:`~extender.kube.issuer.PlanIssuer` only writes a commitment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from extender.core.decisions import Decision, DecisionLog
from extender.core.effects import AbandonPlan, HoldRoom, ReleaseRoom, apply
from extender.core.gangsize import settles_at
from extender.core.preemption.completion import (
    completion_notices,
    notice_to_deadline,
    unfinished_plans,
)
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.requeue import jobs_to_replan
from extender.core.reservations import persisted_reservation
from extender.core.settling import (
    EndedPlan,
    ended_plan,
    refused_victims,
    settle_reservations,
    yielded_plan,
)
from extender.kube.health import Watched
from extender.kube.issuer import Commitment, PlanIssuer
from extender.kube.rechecks import FitsRechecks
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter

log = logging.getLogger(__name__)

#: Jobs whose last refusal is remembered (so that it is logged once, not every round).
REFUSALS_REMEMBERED = 10_000


@dataclass(frozen=True)
class Refused:
    """The planner found no plan for a job: why, for its pending pods' decision log."""

    job: str
    reasons: tuple[str, ...]
    #: The job's pending pods (keys): each gets the refusal in its decision log.
    pending: tuple[str, ...]
    #: When to plan it again (a gang arriving settles, a victim's minimum runtime ends).
    settles: float | None
    #: The job fits as Muster sees it, on room free now (:mod:`extender.kube.rechecks`).
    fits_now: bool = False
    #: The state's count of bound pods that left, when refused (:mod:`.rechecks`).
    freed: int = 0


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
        self.decisions = decisions
        self.clock = clock
        self.debounce_seconds = debounce_seconds
        self.is_leader = is_leader
        self._due: dict[str, float] = {}
        #: Victims spared, by UID: when their marks were last taken back (not again each
        #: round until the informer sees it).
        self._spared: dict[str, float] = {}
        #: Victims marked again (their marks taken off), by UID: the version of the pod
        #: that lacked the mark (not again until the informer shows another).
        self._marked_again: dict[str, str] = {}
        self._rechecks = FitsRechecks()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.name = "postfilter"
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._init_health()
        self.committed = 0
        self.refused = 0
        self._refused_logged: set[str] = set()  # victim UIDs the rules refused, logged once
        #: Each job's last refusal, as logged: a refusal is logged when its reasons change,
        #: not on every round that asks again.
        self._refusal_logged: dict[str, tuple[str, ...]] = {}
        #: Writes what this loop decides (and nothing else).
        self.issuer = PlanIssuer(writer, clock=clock)
        #: Served on Muster's /metrics (see serve.py).
        self.time_to_mark = self.issuer.time_to_mark

    def start(self) -> PostFilterLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self._stop.set()
        self._wake.set()
        self._thread.join(5)
        self.issuer.close()

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
        with self.source.exclusive() as state:
            freed = state.freed  # bound pods that left: a recheck since is not made
        with self._lock:
            due = sorted(job for job, at in self._due.items() if at <= now)
            for job in due:
                del self._due[job]
            due += [job for job in self._rechecks.due(now, freed) if job not in due]
        for job in due:
            try:
                self.decide(job, now)
            except Exception:  # one job's failure must not stop the others
                log.exception("postfilter: deciding %s failed", job)
        with self._lock:
            if min([*self._due.values(), self._rechecks.next_due()]) <= self.clock():
                self._wake.set()

    def complete_in_flight(self) -> int:
        """Mark the victims of in-flight reservations that are still unmarked (a Muster
        that died between writing a reservation and marking its victims), and record the
        disruption of those marked without it; mark again the victims whose marks someone
        else took off, to the deadlines their marks had
        (:mod:`extender.core.preemption.completion`); return how many were marked for the
        first time."""
        with self.source.exclusive() as state:
            now = self.clock()
            unfinished = unfinished_plans(state, self.issuer.written, self.issuer.deadlines.keys())
            deadlines = self.issuer.remember_deadlines(unfinished)
            to_mark = unfinished.unmarked + unfinished.stripped
            notices, restarted = completion_notices(state, to_mark, now)
            for pod, job in unfinished.stripped:  # (stripped: its deadline remembered)
                deadline = deadlines[pod.uid]
                notices[pod.key] = notice_to_deadline(state, pod, job, deadline, now)
        for pod, job, why in unfinished.refused:
            if pod.uid not in self._refused_logged:
                self._refused_logged.add(pod.uid)
                log.warning("not marking %s for job %s: %s", pod.key, job, why)
        for pod, job in unfinished.unmarked:
            reason = f"completing the preemption for job {job}"
            self.issuer.remove(
                pod,
                job,
                reason,
                unfinished.delete_now,
                notice_seconds=notices[pod.key],
                restart_job=pod.key in restarted,
            )
        stripped = {pod.uid for pod, _ in unfinished.stripped}
        self._marked_again = {u: v for u, v in self._marked_again.items() if u in stripped}
        for pod, job in unfinished.stripped:
            if self._marked_again.get(pod.uid) == pod.resource_version:
                continue  # written, not seen back yet
            log.warning("%s lost its mark, and job %s waits for it: marked again", pod.key, job)
            notice, restart = notices[pod.key], pod.key in restarted
            if self.issuer.mark_again(pod, job, notice_seconds=notice, restart_job=restart):
                self._marked_again[pod.uid] = pod.resource_version
        # A Muster stopped between a plan's marks and their conditions: the victims it
        # marked (signed, so believed) get their DisruptionTarget and Preempted event now.
        # A victim this process marked gets them from the plan itself (decide).
        for pod, job in unfinished.unrecorded:
            reason = f"completing the preemption for job {job}"
            self.issuer.record_disruption(pod, job, reason)
        return len(unfinished.unmarked)

    def abandon_refused(self, now: float) -> list[str]:
        """Abandon the plans a PodDisruptionBudget stalls: a victim still refused
        ``victimEvictionDeadlineSeconds`` after it was marked (see
        :func:`extender.core.settling.refused_victims`).  They are undone as any plan
        ended without its job binding, and the job is planned again without the refused
        victims; return the jobs."""
        with self.source.exclusive() as state:
            deadline = state.args.victim_eviction_deadline_seconds
            ended = []
            for job, refused in refused_victims(state, now).items():
                names = ", ".join(pod.key for pod in refused)
                why = (
                    f"a PodDisruptionBudget still refuses the eviction of {names} "
                    f"{deadline:.0f}s after it was marked"
                )
                ended.append(ended_plan(state, job, why))
                apply(state, AbandonPlan(job, frozenset(pod.key for pod in refused)))
        for plan in ended:
            self._undo(plan, now)
        return [plan.job for plan in ended]

    def _settle(self, now: float) -> list[EndedPlan]:
        """Count pods terminating for too long as staying
        (:meth:`~extender.core.state.cluster.ClusterState.expire_departures`); extend the
        reservations whose victims are still terminating, end the others
        whose time is up or whose job is gone (see
        :func:`extender.core.settling.settle_reservations`); return the plans ended."""
        replan: list[str] = []
        parked = self.source.parked()
        with self.source.exclusive() as state:
            state.expire_vacancies(now)
            stuck = state.expire_departures(now)
            for key in stuck:
                log.warning(
                    "%s is still terminating %gs past its deletion deadline: its room counts "
                    "as taken (stuckTerminatingSeconds)",
                    key,
                    state.args.stuck_terminating_seconds,
                )
            if stuck:  # plans that counted on their room are made again
                replan = jobs_to_replan(state, parked)
            extended, ended = settle_reservations(state, now)
            for reservation in extended:
                apply(state, HoldRoom(reservation))
            for plan in ended:
                if not plan.room_kept:
                    apply(state, ReleaseRoom(plan.job))
        for job in replan:
            self.request(job)
        return ended

    def _undo(self, plan: EndedPlan, now: float) -> None:
        """Take back what Muster wrote for a plan that ended without its job binding
        (:meth:`PlanIssuer.undo`), and say so in the job's decision log."""
        if plan.room_kept:
            self._spared = {uid: at for uid, at in self._spared.items() if now - at < 60}
            # Not again within 2 s (the informer shows the unmark by then; a failed one is
            # tried again before the evictor's 5 s delay on a spared pod's siblings ends).
            fresh = tuple(p for p in plan.unmark if now - self._spared.get(p.uid, -60.0) >= 2)
            if not fresh:
                return
            self._spared.update((p.uid, now) for p in fresh)
            plan = replace(plan, unmark=fresh)
            reason = f"victims of job {plan.job} spared: {plan.why}"
        else:
            reason = f"preemption for job {plan.job} abandoned: {plan.why}"
        if plan.room_kept:
            log.info("%s; taking their marks back", reason)
        elif plan.unmark or plan.release:
            log.warning("%s; undoing what was written for it", reason)
        self.issuer.undo(plan, reason)
        if plan.release:
            record = Decision(now, "postfilter", "abandoned", (reason,))
            self.decisions.record(plan.release[0].key, record)

    def decide(self, job: str, now: float) -> PreemptionPlan | None:
        """Plan for ``job`` (:meth:`_plan`, which decides and holds the plan's room); on a
        plan, write it to the cluster (:meth:`_commit`: the issuer's writes)."""
        if not self.is_leader():
            return None  # lost the Lease since the loop looked: the new leader decides
        decided = self._plan(job, now)
        if isinstance(decided, Refused):
            self._refuse(decided, now)
            return None
        if decided is None:
            return None
        self._rechecks.forget(job)
        self._commit(decided, now)
        for plan in decided.yielded:  # their pods go back to the queue
            self._undo(plan, now)
        return decided.plan

    def _plan(self, job: str, now: float) -> Commitment | Refused | None:
        """The decision, in one hold of the state: a plan (its room held in memory, so
        the very next filter keeps other pods off it), a refusal, or ``None`` for a job
        in flight already (its room is held, its pods are being retried)."""
        with self.source.exclusive() as state:
            if job in state.reservations:
                return None
            decision = plan_job_preemption(state, job, now)
            if not isinstance(decision, PreemptionPlan):
                pending = (p.key for p in state.members.job_pods(job) if p.node_name is None)
                # A gang still arriving is planned once it settles: nothing else may ask
                # again (when kube-scheduler's own filters reject every node, its pods'
                # messages are not Muster's, and no nudge comes).
                settled = settles_at(state, job, now)
                # A victim spared for its minimum runtime may be taken once it ends.
                again = [t for t in (settled, decision.retry_at) if t is not None]
                retry = min(again, default=None)
                fits_now = decision.fits_now()  # asked here, the state unchanged
                return Refused(job, decision.reasons, tuple(pending), retry, fits_now, state.freed)
            yielded = tuple(
                yielded_plan(state, held.job, decision.job) for held in decision.yielded
            )
            for plan in yielded:
                apply(state, ReleaseRoom(plan.job))
            reservation = decision.reservation(now, state.args.reservation_timeout_seconds)
            apply(state, HoldRoom(reservation))
            return Commitment(
                plan=decision,
                persisted=persisted_reservation(reservation),
                preemptor_pods=tuple(state.pods[key] for key in decision.placements),
                delete_now=state.args.pod_should_be_deleted_when_preempted,
                last_created=max(p.created for p in state.members.job_pods(job)),
                yielded=yielded,
            )

    def _refuse(self, refused: Refused, now: float) -> None:
        """No plan: ask again when a gang still arriving settles, a spared victim's
        minimum runtime ends, or (a job that fits as Muster sees it) a binding in flight
        has landed; count and log it."""
        with self._lock:
            self._rechecks.after_refusal(refused.job, now, refused.fits_now, refused.freed)
            if (at := refused.settles) is not None:
                self._due[refused.job] = min(at, self._due.get(refused.job, at))
        self.refused += 1
        if self._refusal_logged.get(refused.job) != refused.reasons:
            if len(self._refusal_logged) >= REFUSALS_REMEMBERED:
                self._refusal_logged.clear()
            self._refusal_logged[refused.job] = refused.reasons
            log.info("no preemption for %s: %s", refused.job, "; ".join(refused.reasons))
        for key in refused.pending:
            self.decisions.record(
                key, Decision(now, "postfilter", "no preemption", refused.reasons)
            )

    def _commit(self, commitment: Commitment, now: float) -> None:
        """Write a committed plan: what Muster relies on first (marks, reservation,
        nominations), the decision log, then what people and controllers read
        (conditions, events)."""
        plan = commitment.plan
        self.committed += 1
        self._refusal_logged.pop(plan.job, None)
        log.info(
            "preempting for %s: %d victims (%s)",
            plan.job,
            len(plan.victims),
            ", ".join(f"{victim.pod.key} {victim.rule.value}" for victim in plan.victims),
        )
        marked = self.issuer.write_plan(commitment)
        for pod in commitment.preemptor_pods:
            self.decisions.record(
                pod.key,
                Decision(
                    now,
                    "postfilter",
                    f"preempting: {len(plan.victims)} victims, room held on "
                    f"{plan.placements[pod.key]}",
                    tuple(f"{v.pod.key}: {v.reason}" for v in plan.victims),
                ),
            )
        self.issuer.announce(commitment, marked)
