"""The PostFilter's writes: a committed plan issued to the cluster, an ended one taken back.

:class:`~extender.kube.postfilter.PostFilterLoop` decides, under the state's hold (the
plan, its room held in memory), and hands what it decided here as a :class:`Commitment`.
A :class:`PlanIssuer` only writes, through :class:`~extender.kube.writer.ClusterWriter`:
it decides nothing and never holds the state (as Kueue's preemptor has ``GetTargets``,
which decides, and ``IssuePreemptions``, which only writes; kube-scheduler's default
preemption an evaluator and an executor).  It remembers the victims this process has
written, so that none is written twice, and measures the time from a job's last pod to
its victims marked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import httpx
from prometheus_client import Histogram

from extender.core.objects import PodInfo
from extender.core.preemption.completion import Unfinished
from extender.core.preemption.planner import PreemptionPlan, Victim
from extender.core.reservations import reserved_by_muster
from extender.core.settling import EndedPlan
from extender.kube.client import ApiError
from extender.kube.writer import ClusterWriter, best_effort

log = logging.getLogger(__name__)

_T = TypeVar("_T")
#: Concurrent writes for one plan (a gang's victims' marks, its pods' reservations).
WRITERS = 8
#: The longest wait before a victim's failed write is tried again.
RETRY_MAX_SECONDS = 30.0


@dataclass(frozen=True)
class Commitment:
    """A plan the PostFilter committed to: its room is held in memory already; what is
    left is to write it to the cluster."""

    plan: PreemptionPlan
    #: The reservation as written on each preemptor pod (its own node added per pod).
    persisted: dict[str, object]
    preemptor_pods: tuple[PodInfo, ...]
    #: ``podShouldBeDeletedWhenPreempted``: victims are evicted at once, not marked.
    delete_now: bool
    #: When the job's last pod was created (for the time to mark).
    last_created: float
    #: The plans whose room this one takes (lower-priority reservations that yield).
    yielded: tuple[EndedPlan, ...] = ()

    @property
    def job(self) -> str:
        return self.plan.job


class PlanIssuer:
    """Writes what the PostFilter decided; see the module's docstring."""

    def __init__(self, writer: ClusterWriter, *, clock: Callable[[], float] = time.time) -> None:
        self.writer = writer
        self.clock = clock
        #: Victim UIDs this process has marked or evicted (or found gone): never again.
        self.written: set[str] = set()
        #: Victim UID → when its mark's notice runs out (the mark's time plus its notice):
        #: written by this process, or seen; kept while a plan counts on the victim.
        self.deadlines: dict[str, float] = {}
        #: Victim UID → (failed writes, when to try again).
        self._retry_at: dict[str, tuple[int, float]] = {}
        self._writers = ThreadPoolExecutor(WRITERS, thread_name_prefix="postfilter-write")
        #: Served on Muster's /metrics (see serve.py).
        self.time_to_mark = Histogram(
            "muster_time_to_mark_seconds",
            "From the creation of a preempting job's last pod to its victims marked (or "
            "evicted), by the leader's clock; creation times have one-second resolution.",
            buckets=(0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0),
            registry=None,
        )

    def close(self) -> None:
        self._writers.shutdown(wait=False)

    def write_plan(self, commitment: Commitment) -> list[Victim]:
        """The writes Muster itself relies on; returns the victims marked now.

        Victims are marked first (nothing stands between the plan and the marks): a mark
        names its job, and a job is in flight while pods marked for it are present, so a
        Muster restarted half-way never plans it again.  Then the reservation, which also
        names the victims (a restarted Muster finishes marking them, see
        :meth:`PostFilterLoop.complete_in_flight`), and the nominations.  Each step
        writes its pods concurrently.  An eviction leaves no mark: with
        podShouldBeDeletedWhenPreempted the reservation is written first."""
        job, placements = commitment.job, commitment.plan.placements
        if commitment.delete_now:
            self._each(
                lambda pod: self._persist(pod, commitment.persisted, placements[pod.key]),
                commitment.preemptor_pods,
            )
        # Each victim's mark is one patch, all at once; its condition and event follow the
        # plan's other writes (see announce).
        marked: list[Victim] = []

        def mark(victim: Victim) -> None:
            if self.remove(
                victim.pod,
                job,
                victim.reason,
                commitment.delete_now,
                label_only=True,
                notice_seconds=victim.notice_seconds,
                restart_job=victim.restart_job,
            ):
                marked.append(victim)

        self._each(mark, commitment.plan.victims)
        # Creation timestamps have one-second resolution: the figure is within a second.
        self.time_to_mark.observe(max(0.0, self.clock() - commitment.last_created))

        def hold(pod: PodInfo) -> None:
            if not commitment.delete_now:
                self._persist(pod, commitment.persisted, placements[pod.key])
            self._nominate(pod, placements[pod.key])

        self._each(hold, commitment.preemptor_pods)
        return marked

    def announce(self, commitment: Commitment, marked: Sequence[Victim]) -> None:
        """The writes for people and controllers, not for Muster: each victim ``marked``
        gets its ``DisruptionTarget`` condition and ``Preempted`` event, the job's first
        pod a ``Preempting`` event."""
        job = commitment.job
        if not commitment.delete_now:
            record = partial(self.writer.record_disruption, preemptor=job)
            self._each(
                lambda victim: best_effort(victim.pod, partial(record, reason=victim.reason)),
                marked,
            )
        if commitment.preemptor_pods:
            victims = ", ".join(v.pod.key for v in commitment.plan.victims)
            first = commitment.preemptor_pods[0]
            self.writer.event(first, "Preempting", f"Job {job} preempts {victims}")

    def remove(
        self,
        pod: PodInfo,
        job: str,
        reason: str,
        delete_now: bool,
        *,
        label_only: bool = False,
        notice_seconds: float = 0.0,
        restart_job: bool = False,
    ) -> bool:
        """Mark a victim for soft eviction (or evict it at once), once it succeeds; a
        failure is left for :meth:`PostFilterLoop.complete_in_flight` to retry.
        ``label_only``: the mark alone, its condition and event left to the caller;
        ``restart_job``: the mark says to restart the pod's Job whole
        (:mod:`extender.core.restart`).  Returns whether it was written now."""
        if pod.uid in self.written:
            return False
        retry = self._retry_at.get(pod.uid)
        if retry is not None and self.clock() < retry[1]:
            return False  # failed lately: backing off
        try:
            if delete_now:
                self.writer.evict(pod.namespace, pod.name, pod.uid, None)
            elif label_only:
                self.writer.label_victim(
                    pod,
                    preemptor=job,
                    reason=reason,
                    grace_seconds=None,
                    notice_seconds=notice_seconds,
                    restart_job=restart_job,
                )
            else:
                self.writer.mark_victim(
                    pod,
                    preemptor=job,
                    reason=reason,
                    grace_seconds=None,
                    notice_seconds=notice_seconds,
                )
        except ApiError as error:
            if error.status == 422 and not delete_now:
                # The pod cannot take the mark (its owner filled its annotations to the
                # API server's limit, say): no evictor would ever see it, so it goes now.
                log.warning("victim %s cannot be marked (%s): evicting it at once", pod.key, error)
                return self.remove(pod, job, reason, True)
            if error.status not in (404, 409):  # not gone or replaced: try again later
                self._failed(pod, error)
                return False
            self.written.add(pod.uid)  # gone or replaced: nothing more to write
            return False
        except httpx.HTTPError as error:
            self._failed(pod, error)
            return False
        self._retry_at.pop(pod.uid, None)
        self.written.add(pod.uid)
        if not delete_now:
            self.deadlines[pod.uid] = self.clock() + notice_seconds
        return True

    def _failed(self, pod: PodInfo, error: Exception) -> None:
        """A victim's write failed: try it again after a backoff (1 s, doubling to 30 s)."""
        attempts = self._retry_at.get(pod.uid, (0, 0.0))[0] + 1
        delay = min(2.0 ** (attempts - 1), RETRY_MAX_SECONDS)
        self._retry_at[pod.uid] = (attempts, self.clock() + delay)
        log.warning("victim %s: %s (retry %d in %.0fs)", pod.key, error, attempts, delay)

    def remember_deadlines(self, unfinished: Unfinished) -> dict[str, float]:
        """Keep the deadlines of the victims in-flight plans count on (those seen marked
        now, written by another Muster, are added) and forget the others, and what was
        written for them: a victim of a plan ended may be another's, to be marked again;
        returns the deadlines."""
        counted = unfinished.counted
        self.written &= counted
        deadlines = {uid: at for uid, at in self.deadlines.items() if uid in counted}
        self._retry_at = {uid: at for uid, at in self._retry_at.items() if uid in counted}
        for uid, at in unfinished.deadlines.items():
            deadlines.setdefault(uid, at)
        self.deadlines = deadlines
        return deadlines

    def mark_again(
        self, pod: PodInfo, job: str, *, notice_seconds: float, restart_job: bool
    ) -> bool:
        """Write the mark of a victim whose mark someone else took off (its condition and
        event are there already); returns whether it was written."""
        self.written.discard(pod.uid)
        reason = f"marked again for job {job}: its mark was taken off"
        return self.remove(
            pod,
            job,
            reason,
            False,
            label_only=True,
            notice_seconds=notice_seconds,
            restart_job=restart_job,
        )

    def record_disruption(self, pod: PodInfo, job: str, reason: str) -> None:
        """The ``DisruptionTarget`` condition and ``Preempted`` event of a victim marked
        (by a Muster stopped before it recorded them), once."""
        self.written.add(pod.uid)
        best_effort(pod, partial(self.writer.record_disruption, preemptor=job, reason=reason))

    def undo(self, plan: EndedPlan, reason: str) -> None:
        """Take back what was written for ``plan``: the marks of its victims not yet
        leaving first, then the reservation on the job's pods (the update makes
        kube-scheduler retry them), with an event saying ``reason``."""
        for pod in plan.unmark:
            best_effort(pod, partial(self.writer.unmark_victim, reason=reason))
            self.written.discard(pod.uid)
        for pod in plan.release:
            nominated = pod.nominated_node_name == reserved_by_muster(pod)
            best_effort(pod, partial(self.writer.release_room, nominated=nominated))
        if plan.unmark and plan.release:
            event = partial(
                self.writer.event, reason="PreemptionAbandoned", message=reason, kind="Warning"
            )
            best_effort(plan.release[0], event)

    def _each(self, write: Callable[[_T], object], items: Sequence[_T]) -> None:
        """``write`` every item, concurrently (each one a few API calls, so a gang's
        victims are marked in about the time of one); returns when all are done."""
        if len(items) <= 1:
            for item in items:
                write(item)
            return
        for _ in self._writers.map(write, items):
            pass

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
