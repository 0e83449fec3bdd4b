"""The leader's chores for gangs: the timeout, the requeue after backoff, PodGroup status.

Every second the leader:

- gives up the gangs that have had fewer than min-available pods bound for their
  timeout (:func:`extender.core.filter.gangstatus.partially_bound`; the clock starts when the
  leader first sees the gang so, and starts again on a new leader: a restart
  never gives a gang up early).  Their bound pods get the soft-eviction mark
  with reason ``GangTimeout``, their room is let go, and the backoff is written
  on their pending pods, which the filter then turns away until it ends;
- nudges the pending pods of gangs whose backoff just ended (a ``muster.dev/requeue``
  annotation: any update makes kube-scheduler retry a parked pod at once), oldest
  first by ``requeuingTimestamp`` (when given up, or when created);
- writes each PodGroup's ``status`` (phase, scheduled, running, succeeded, failed)
  where it changed (:func:`extender.core.filter.gangstatus.gang_status`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from base import keys
from base.times import format_time
from extender.core.effects import BackOff, ReleaseRoom, apply
from extender.core.filter.gangstatus import gang_jobs, gang_status, give_up, partially_bound
from extender.core.objects import PodInfo
from extender.core.reservations import persisted_backoff, persisted_pods, reserved_by_muster
from extender.core.state import ClusterState, GangBackoff
from extender.kube.client import ApiError
from extender.kube.source import KubeSource
from extender.kube.worker import LeaderWorker
from extender.kube.writer import ClusterWriter, best_effort

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GivenUp:
    """A gang given up in memory (its room let go, its backoff held): what is written."""

    job: str
    backoff: GangBackoff
    #: Its pods bound and not leaving: marked for eviction.
    bound: list[PodInfo]
    #: Its pods pending: the backoff is written on them.
    pending: list[PodInfo]
    #: Its pending pods that carried Muster's reservation: it is taken off.
    released: list[PodInfo]
    timeout: float
    needed: int

    @property
    def reason(self) -> str:
        return (
            f"GangTimeout: gang {self.job} had {len(self.bound)} of its min-available "
            f"{self.needed} pods bound for {self.timeout:.0f}s"
        )


class GangKeeper(LeaderWorker):
    def __init__(
        self,
        source: KubeSource,
        writer: ClusterWriter,
        *,
        clock: Callable[[], float] = time.time,
        interval_seconds: float = 1.0,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(
            "gangs",
            source,
            writer,
            interval_seconds=interval_seconds,
            clock=clock,
            is_leader=is_leader,
        )
        self._partial_since: dict[str, float] = {}  # job → when first seen partly bound
        self._nudged: dict[str, float] = {}  # job → the backoff end it was nudged for
        self._status: dict[str, str] = {}  # job → the PodGroup status last written
        self.given_up = 0

    def chores(self) -> Sequence[Callable[[float], object]]:
        return (self.give_up_timed_out, self.nudge_after_backoff, self.write_status)

    def not_leading(self) -> None:
        self._partial_since.clear()  # a new leader's clock starts afresh

    def give_up_timed_out(self, now: float) -> list[str]:
        """Give up the gangs partly bound for longer than their timeout; return them.
        Decided in one hold of the state (:meth:`_timed_out`), then written
        (:meth:`_write_given_up`)."""
        with self.source.exclusive() as state:
            given_up = self._timed_out(state, now)
        for gang in given_up:
            self.given_up += 1
            log.warning("%s; giving it up (attempt %d)", gang.reason, gang.backoff.attempts)
            self._write_given_up(gang)
        return [gang.job for gang in given_up]

    def _timed_out(self, state: ClusterState, now: float) -> list[GivenUp]:
        """The gangs partly bound for longer than their timeout, each given up in
        ``state`` (its room let go, its backoff held); the clock of each partly bound
        gang starts the first time it is seen so."""
        given_up = []
        partly = partially_bound(state, gang_jobs(state))
        for job in list(self._partial_since):
            if job not in partly:
                del self._partial_since[job]
        for job in partly:
            since = self._partial_since.setdefault(job, now)
            if now - since < state.declarations.gang_timeout_seconds(job):
                continue
            backoff = give_up(state, job, now)
            pods = state.members.job_pods(job)
            bound = [p for p in pods if p.node_name is not None and not p.departing]
            pending = [p for p in pods if p.node_name is None and not p.finished]
            released = persisted_pods(state, job)
            apply(state, ReleaseRoom(job))
            apply(state, BackOff(job, backoff))
            timeout = state.declarations.gang_timeout_seconds(job)
            needed = state.declarations.min_available(job)
            given_up.append(GivenUp(job, backoff, bound, pending, released, timeout, needed))
            del self._partial_since[job]
        return given_up

    def _write_given_up(self, gang: GivenUp) -> None:
        """Its bound pods marked for eviction, the backoff on its pending pods, the
        reservation taken off the pods that carried it, and an event."""
        reason, backoff = gang.reason, gang.backoff
        for pod in gang.bound:
            best_effort(
                pod,
                partial(self.writer.mark_victim, preemptor=None, reason=reason, grace_seconds=None),
            )
        written = persisted_backoff(backoff)
        for pod in gang.pending:
            best_effort(pod, partial(self.writer.persist_backoff, backoff=written))
        for pod in gang.released:
            best_effort(
                pod,
                lambda p: self.writer.release_room(
                    p, nominated=p.nominated_node_name == reserved_by_muster(p)
                ),
            )
        if gang.pending or gang.bound:
            first = (gang.pending or gang.bound)[0]
            if backoff.until is None:
                self.writer.event(
                    first,
                    "GangFailed",
                    f"{reason}; given up {backoff.attempts} times, past backoffLimitCount: "
                    "not retried",
                    kind="Warning",
                )
            else:
                self.writer.event(
                    first,
                    "GangTimeout",
                    f"{reason}; bound pods marked for eviction, retried at "
                    f"{format_time(backoff.until)} (attempt {backoff.attempts})",
                    kind="Warning",
                )

    def nudge_after_backoff(self, now: float) -> list[str]:
        """Make kube-scheduler retry the pods of gangs whose backoff ended; return them."""
        with self.source.exclusive() as state:
            ended = []
            by_creation = state.args.requeuing_timestamp == "Creation"
            for job, backoff in state.book.backoffs.items():
                if backoff.until is None or backoff.until > now:
                    continue
                if self._nudged.get(job) == backoff.until:
                    continue
                pods = [
                    p for p in state.members.job_pods(job) if p.node_name is None and not p.finished
                ]
                if not pods:
                    continue
                created = min(p.created for p in pods)
                ended.append((created if by_creation else backoff.given_up, job, backoff, pods))
        ended.sort(key=lambda item: (item[0], item[1]))
        stamp = format_time(now)
        for _order, job, backoff, pods in ended:
            assert backoff.until is not None
            patch = partial(
                self.writer.patch_pod, metadata={"annotations": {keys.REQUEUE_ANNOTATION: stamp}}
            )
            written = [best_effort(pod, patch) for pod in pods]
            if not all(written):
                continue  # a nudge that failed is tried again next round
            self._nudged[job] = backoff.until
            self.writer.event(
                pods[0],
                "GangRetry",
                f"gang {job}: backoff ended, retrying (attempt {backoff.attempts})",
            )
        return [job for _order, job, _backoff, _pods in ended]

    def write_status(self, now: float) -> int:
        """Write the status of every PodGroup whose gang's status changed; return how many.
        A gang placed whole forgets its backoff (its next timeout starts at attempt 1),
        here and on its pods: the annotation read back would restore it."""
        forget: list[PodInfo] = []
        with self.source.exclusive() as state:
            jobs = gang_jobs(state)
            for job in list(state.book.backoffs):
                if job in jobs and gang_status(state, job).phase in ("Scheduled", "Running"):
                    del state.book.backoffs[job]
                    forget.extend(
                        pod
                        for pod in state.members.job_pods(job)
                        if keys.GANG_BACKOFF_ANNOTATION in pod.annotations
                    )
            wanted = []
            for job in sorted(jobs):
                api = self.source.pod_group_api(job)
                if api is None or state.declarations.pod_group(job) is None:
                    continue
                status = gang_status(state, job)
                body: dict[str, object] = {
                    "phase": status.phase,
                    "scheduled": status.scheduled,
                    "running": status.running,
                    "succeeded": status.succeeded,
                    "failed": status.failed,
                }
                wanted.append((job, api, body))
        clear = partial(
            self.writer.patch_pod, metadata={"annotations": {keys.GANG_BACKOFF_ANNOTATION: None}}
        )
        for pod in forget:
            best_effort(pod, clear)
        written = 0
        for job, api, body in wanted:
            fingerprint = json.dumps(body, sort_keys=True)
            if self._status.get(job) == fingerprint:
                continue
            namespace, name = job.split("/", 1)
            path = f"/apis/{api}/v1alpha1/namespaces/{namespace}/podgroups/{name}/status"
            try:
                self.writer.merge_patch(path, {"status": body})
            except ApiError as error:
                if error.status != 404:
                    raise
                continue  # the PodGroup went away meanwhile
            self._status[job] = fingerprint
            written += 1
        return written
