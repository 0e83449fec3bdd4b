"""The extender service: the decisions behind each kube-scheduler verb.

This is the seam between the front doors and the core.  The HTTP app
(:mod:`extender.http`) turns wire JSON into calls here; the cluster comes
from a :class:`ClusterSource` (the Kubernetes adapter's informers, or a fixed
snapshot read from manifests); binding goes through an optional
:class:`Binder`.  Every decision is written to a :class:`DecisionLog`, and
the jobs Muster governs that cannot be placed (rejected for quota or
reservation reasons, or proposed for kube-scheduler's own preemption) are
handed on through ``on_unschedulable`` (the PostFilter loop's trigger).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from extender.core.authority import governing_reason
from extender.core.decisions import Decision, DecisionLog
from extender.core.effects import AssumeBound, HoldRoom, ReleaseRoom, apply
from extender.core.gang import filter_pod
from extender.core.objects import PodInfo
from extender.core.preemption.guard import GuardResult, guard_scheduler_preemption
from extender.core.preemption.planner import ready_to_plan
from extender.core.reservations import persisted_pods
from extender.core.scheduling import (
    FilterOutcome,
    FilterResult,
    score_nodes,
)
from extender.core.state import ClusterState, Reservation


class StateBusy(Exception):
    """The state is held (an informer update, or a long decision) and the caller asked
    not to wait: the HTTP front door then moves the request off its event loop."""


class ClusterSource(Protocol):
    """Where the service reads the cluster from."""

    def ready(self) -> bool:
        """Has the first full sync happened?"""
        ...

    def problems(self) -> list[str]:
        """What is wrong with the source's background work now (empty: nothing)."""
        ...

    def lasting_problems(self) -> list[str]:
        """The problems that have lasted long enough that a restart should cure them."""
        ...

    def exclusive(self, wait: bool = True) -> AbstractContextManager[ClusterState]:
        """The cluster state, held exclusively: the informers' updates, each decision with
        the effects it returns (applied before letting go, so nothing comes between),
        and the debug views all take this one hold; with ``wait`` false,
        :class:`StateBusy` if someone else has it."""
        ...


class _Lock(Protocol):
    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...


@contextmanager
def holding(lock: _Lock, snapshot: ClusterState, wait: bool) -> Iterator[ClusterState]:
    """``snapshot`` under ``lock``; :class:`StateBusy` if ``wait`` is false and the
    lock is taken.  (The one implementation of :meth:`ClusterSource.reading`.)"""
    if not lock.acquire(blocking=wait):
        raise StateBusy
    try:
        yield snapshot
    finally:
        lock.release()


class StaticSource:
    """A fixed snapshot (``muster serve --snapshot``, tests)."""

    def __init__(self, snapshot: ClusterState) -> None:
        self._snapshot = snapshot
        self._lock = threading.Lock()

    def ready(self) -> bool:
        return True

    def problems(self) -> list[str]:
        return []

    def lasting_problems(self) -> list[str]:
        return []

    def exclusive(self, wait: bool = True) -> AbstractContextManager[ClusterState]:
        return holding(self._lock, self._snapshot, wait)


class RoomKeeper(Protocol):
    """Persists the room the filter holds for gangs it places whole (on the pods, so
    every replica and a restarted Muster hold it too), in the order decided."""

    def hold(self, reservation: Reservation, pods: Sequence[PodInfo]) -> None:
        """Write ``reservation`` on ``pods`` (its pending pods), each with its node."""
        ...

    def release(self, pods: Sequence[PodInfo]) -> None:
        """Drop the reservation written on ``pods``: the gang waits whole again."""
        ...


class BindError(RuntimeError):
    """Binding failed; the message says why."""


class Binder(Protocol):
    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pod's Binding (raises :class:`BindError`)."""
        ...


#: How many recently filtered pods are remembered for binding.
RECENT_PODS = 10_000

NO_BINDER_ERROR = (
    "muster: this Muster has no Kubernetes API access to bind with; configure "
    "kube-scheduler without bindVerb, or run muster serve with --kubeconfig"
)


class Extender:
    def __init__(
        self,
        source: ClusterSource,
        *,
        clock: Callable[[], float] = time.time,
        binder: Binder | None = None,
        on_unschedulable: Callable[[str, str, bool], None] | None = None,
        log: DecisionLog | None = None,
        room_keeper: RoomKeeper | None = None,
    ) -> None:
        self.source = source
        self.room_keeper = room_keeper
        self.clock = clock
        self.binder = binder
        self.on_unschedulable = on_unschedulable
        self.log = log if log is not None else DecisionLog()
        # Pods seen in filter calls, so a pod Muster binds can be counted at once.
        self._recent: OrderedDict[str, PodInfo] = OrderedDict()
        self._recent_lock = threading.Lock()

    def known_pending_pod(
        self, key: str, uid: str, resource_version: str, *, wait: bool = True
    ) -> PodInfo | None:
        """The cluster's own reading of this exact pod version (same UID and
        resourceVersion), if it has one and the pod is pending: it spares parsing the
        copy kube-scheduler sends."""
        if not resource_version:
            return None
        with self.source.exclusive(wait) as snapshot:
            pod = snapshot.pods.get(key)
        if (
            pod is None
            or pod.uid != uid
            or pod.resource_version != resource_version
            or pod.node_name is not None
        ):
            return None
        return pod

    def filter(self, pod: PodInfo, nodes: Sequence[str], *, wait: bool = True) -> FilterResult:
        """Filter ``nodes`` for ``pod``; with ``wait`` false, :class:`StateBusy` rather
        than waiting for the snapshot (nothing is changed then)."""
        now = self.clock()
        plan_at_once: bool | None = None  # None: not the PostFilter's to plan
        with self.source.exclusive(wait) as snapshot:
            snapshot.release_quota_holds(now)
            result = filter_pod(snapshot, pod, nodes, as_extender=True, now=now)
            writes: list[tuple[Reservation | None, list[PodInfo]]] = []
            for effect in result.effects:
                if isinstance(effect, ReleaseRoom):  # read what was written before it goes
                    writes.append((None, persisted_pods(snapshot, effect.job)))
                apply(snapshot, effect)
                if isinstance(effect, HoldRoom):
                    reservation = effect.reservation
                    pods = [snapshot.pods.get(key, pod) for key in reservation.placements]
                    writes.append((reservation, pods))
            if (result.quota_failures or not result.passed) and self.on_unschedulable is not None:
                plan_at_once = postfilter_trigger(snapshot, pod, now)
        if self.room_keeper is not None:
            for held, written in writes:
                if held is None:
                    self.room_keeper.release(written)
                else:
                    self.room_keeper.hold(held, written)
        with self._recent_lock:
            self._recent[pod.key] = pod
            self._recent.move_to_end(pod.key)
            while len(self._recent) > RECENT_PODS:
                self._recent.popitem(last=False)
        match result.outcome:
            case FilterOutcome.REJECTED_BY_QUOTA:
                self._record(pod, "filter", "rejected by quota", result.quota_failures)
                self._unschedulable(pod.job, "; ".join(result.quota_failures), plan_at_once)
            case FilterOutcome.GANG_WAITING:
                assert result.gang_waiting is not None
                self._record(pod, "filter", "gang waits whole", (result.gang_waiting,))
                if result.failed:  # evicting could help
                    self._unschedulable(pod.job, result.gang_waiting, plan_at_once)
            case FilterOutcome.GANG_PLACED:
                self._record(pod, "filter", f"gang placed whole; held to {result.pinned_to}")
            case FilterOutcome.PINNED_TO_RESERVATION:
                self._record(pod, "filter", f"held to its reserved node {result.pinned_to}")
            case FilterOutcome.KEPT_OFF_RESERVED_ROOM:
                reasons = tuple(sorted(set(result.failed.values())))
                outcome = f"{len(result.passed)} of {len(nodes)} nodes passed"
                self._record(pod, "filter", outcome, reasons)
                if not result.passed:
                    self._unschedulable(pod.job, "; ".join(reasons), plan_at_once)
            case FilterOutcome.ADMITTED:
                self._record(pod, "filter", f"all {len(nodes)} nodes passed")
        return result

    def prioritize(
        self, pod: PodInfo, nodes: Sequence[str], *, wait: bool = True
    ) -> dict[str, int]:
        with self.source.exclusive(wait) as snapshot:
            return score_nodes(snapshot, pod, nodes)

    def preempt(self, pod: PodInfo, proposed: Mapping[str, Sequence[str]]) -> GuardResult:
        """Answer kube-scheduler's proposed victims (see
        :mod:`extender.core.preemption.guard`); for a pod Muster governs, none, and its
        job goes to the PostFilter: this call is the earliest sign it needs room."""
        plan_at_once: bool | None = None
        now = self.clock()
        with self.source.exclusive() as snapshot:
            result = guard_scheduler_preemption(snapshot, pod, proposed)
            if result.hand_to_postfilter:
                plan_at_once = postfilter_trigger(snapshot, pod, now)
        kept = sum(len(uids) for uids in result.victims.values())
        outcome = f"kept {kept} victims on {len(result.victims)} of {len(proposed)} nodes"
        self._record(pod, "preempt", outcome, result.notes)
        self._unschedulable(pod.job, "kube-scheduler wants to preempt for it", plan_at_once)
        return result

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Bind the pod; returns an error message, or ``""`` on success."""
        key = f"{namespace}/{name}"
        if self.binder is None:
            error = NO_BINDER_ERROR
        else:
            try:
                self.binder.bind(namespace, name, uid, node)
                error = ""
                self._assume_bound(key, node)
            except BindError as failure:
                error = str(failure)
        self.log.record(
            key,
            Decision(
                self.clock(),
                "bind",
                f"bound to {node}" if not error else "failed",
                (error,) if error else (),
            ),
        )
        return error

    def _assume_bound(self, key: str, node: str) -> None:
        """Count a pod Muster just bound as running there before its informer says so,
        as kube-scheduler assumes pods: a decision in between must not see the room free."""
        with self.source.exclusive() as snapshot:
            with self._recent_lock:
                recent = self._recent.get(key)
            pod = snapshot.pods.get(key) or recent
            if pod is not None:
                apply(snapshot, AssumeBound(pod, node))

    def _record(self, pod: PodInfo, verb: str, outcome: str, reasons: Sequence[str] = ()) -> None:
        self.log.record(pod.key, Decision(self.clock(), verb, outcome, tuple(reasons)))

    def _unschedulable(self, job: str, reason: str, plan_at_once: bool | None) -> None:
        if self.on_unschedulable is not None and plan_at_once is not None:
            self.on_unschedulable(job, reason, plan_at_once)


def postfilter_trigger(snapshot: ClusterState, pod: PodInfo, now: float) -> bool | None:
    """For a pod that cannot be placed: ``None`` when its job is not Muster's to preempt
    for (kube-scheduler governs it), else whether the PostFilter should plan for the job
    at once (see :func:`extender.core.preemption.planner.ready_to_plan`)."""
    if governing_reason(snapshot, pod) is None:
        return None
    return ready_to_plan(snapshot, pod.job, now)
