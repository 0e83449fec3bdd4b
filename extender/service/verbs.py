"""The extender service's verbs: :class:`Extender`, one method per kube-scheduler verb.

A verb decides with the core under a hold of the state (:meth:`ClusterSource.exclusive`)
and applies the decision's effects in that same hold; outside it, it persists what must be
written on pods (:class:`RoomKeeper`), records the decision (:class:`DecisionLog`) and
hands on the jobs the PostFilter must plan (``on_unschedulable``).  A pod a call names
that the informer has not delivered yet is waited for (:meth:`Extender._await_informer`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from extender.core.binding import BindCheck, bind_refusal, known_pending, unseen
from extender.core.decisions import Decision, DecisionLog
from extender.core.effects import AssumeBound, Effect, HoldRoom, ReleaseRoom, apply
from extender.core.filter.nodes import FilterOutcome, FilterResult
from extender.core.filter.verb import filter_pod
from extender.core.objects import PodInfo
from extender.core.placement.score import score_nodes
from extender.core.preemption.eligibility import postfilter_trigger
from extender.core.preemption.guard import GuardResult, guard_scheduler_preemption
from extender.core.reservations import persisted_pods
from extender.core.state import ClusterState, Reservation
from extender.service.sources import (
    Binder,
    BindError,
    ClusterSource,
    RoomKeeper,
    StateBusy,
)

#: How long a filter or bind call waits for the informer to deliver a pod it does not
#: know yet.
BIND_WAIT_SECONDS = 1.0
#: How many calls may wait so at once (each holds a worker thread meanwhile).
BIND_WAITERS = 8

#: The decision log's note on a filter call for a pod the informer does not know as pending.
NOT_KNOWN_NOTE = (
    "pod {key} (uid {uid}) is not one Muster's informer knows as pending: nothing was held for it"
)

NO_BINDER_ERROR = (
    "muster: this Muster has no Kubernetes API access to bind with; configure "
    "kube-scheduler without bindVerb, or run muster serve with --kubeconfig"
)


class BindResult(NamedTuple):
    """A bind call's answer: ``error`` (empty when bound) and ``outcome``: ``bound``,
    ``refused`` (Muster's own decisions do not allow it) or ``failed``."""

    error: str
    outcome: str


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
        bind_wait_seconds: float = BIND_WAIT_SECONDS,
    ) -> None:
        self.source = source
        self.bind_wait_seconds = bind_wait_seconds
        self._bind_waiters = threading.BoundedSemaphore(BIND_WAITERS)
        self.room_keeper = room_keeper
        self.clock = clock
        self.binder = binder
        self.on_unschedulable = on_unschedulable
        self.log = log if log is not None else DecisionLog()

    def known_pending_pod(
        self, key: str, uid: str, resource_version: str, *, wait: bool = True
    ) -> PodInfo | None:
        """The cluster's own reading of this exact pod version (same UID and
        resourceVersion), if it has one and the pod is pending: it spares parsing the
        copy kube-scheduler sends."""
        if not resource_version:
            return None
        with self.source.exclusive(wait) as state:
            pod = state.pods.get(key)
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
        than waiting for the state (nothing is changed then).

        The answer is computed for any pod (one the informer knows, as the informer read
        it), but only a pod the informer knows as pending (same namespace/name and UID,
        not bound, finished or being deleted) keeps anything beyond this call: for any
        other (one nobody created: anyone who reaches the port can send one) none of the
        decision's effects is applied (no quota hold, no room held or let go, nothing
        persisted on pods, no PostFilter trigger), so such a pod can neither block nor
        release a real pod's room.  A pod the informer has not seen at all is first
        waited for, as :meth:`bind` waits (a new pod kube-scheduler's watch delivered
        first), so a real pod is held as its filter admits it."""
        decided: _Filtered | None = None
        with self.source.exclusive(wait) as state:
            # kube-scheduler's watch may deliver a new pod before Muster's informer: it is
            # waited for (off the event loop), so that its quota is held as its filter
            # admits it, and a burst stops at max.  A pod nobody created is answered after
            # the wait, holding nothing.  (One hold when the informer has the pod.)
            if not (self.source.pods_arrive and unseen(state, pod.key, pod.uid)):
                decided = self._decide(state, pod, nodes)
            elif not wait:
                raise StateBusy  # nothing was changed: a worker thread waits
        if decided is None:
            self._await_informer(pod.key, pod.uid)
            with self.source.exclusive() as state:
                decided = self._decide(state, pod, nodes)
        result, trusted, writes, plan_at_once, pod = decided
        self._persist(writes)
        # plan_at_once stays None for a pod not trusted: nothing is handed on for it.
        note = () if trusted else (NOT_KNOWN_NOTE.format(key=pod.key, uid=pod.uid),)

        def record(outcome: str, reasons: Sequence[str] = ()) -> None:
            self._record(pod, "filter", outcome, (*reasons, *note))

        match result.outcome:
            case FilterOutcome.REJECTED_BY_QUOTA:
                record("rejected by quota", result.quota_failures)
                self._unschedulable(pod.job, "; ".join(result.quota_failures), plan_at_once)
            case FilterOutcome.GANG_WAITING:
                assert result.gang_waiting is not None
                record("gang waits whole", (result.gang_waiting,))
                if result.failed:  # evicting could help
                    self._unschedulable(pod.job, result.gang_waiting, plan_at_once)
            case FilterOutcome.GANG_PLACED:
                record(f"gang placed whole; held to {result.pinned_to}")
            case FilterOutcome.PINNED_TO_RESERVATION:
                record(f"held to its reserved node {result.pinned_to}")
            case FilterOutcome.KEPT_OFF_RESERVED_ROOM:
                reasons = tuple(sorted(set(result.failed.values())))
                record(f"{len(result.passed)} of {len(nodes)} nodes passed", reasons)
                if not result.passed:
                    self._unschedulable(pod.job, "; ".join(reasons), plan_at_once)
            case FilterOutcome.ADMITTED:
                record(f"all {len(nodes)} nodes passed")
        return result

    def _decide(self, state: ClusterState, pod: PodInfo, nodes: Sequence[str]) -> _Filtered:
        """The filter's decision for ``pod``, its effects applied when the pod is trusted
        (see :meth:`filter`); the caller holds ``state``."""
        now = self.clock()
        state.release_quota_holds(now)
        # A pod the informer knows is decided as the informer read it (its records
        # checked, its labels as stored), not as the request body says.
        known = known_pending(state, pod.key, pod.uid)
        subject = known if known is not None else pod
        result = filter_pod(state, subject, nodes, as_extender=True, now=now)
        # Over a fixed snapshot no informer brings pods: the calls are all there is
        # (``muster serve --snapshot``, for trying the protocol), believed as before.
        trusted = known is not None or not self.source.pods_arrive
        writes = _apply(state, result.effects) if trusted else []
        plan_at_once: bool | None = None  # None: not the PostFilter's to plan
        failed = result.quota_failures or not result.passed
        if trusted and failed and self.on_unschedulable is not None:
            plan_at_once = postfilter_trigger(state, subject, now)
        return _Filtered(result, trusted, writes, plan_at_once, subject)

    def prioritize(
        self, pod: PodInfo, nodes: Sequence[str], *, wait: bool = True
    ) -> dict[str, int]:
        with self.source.exclusive(wait) as state:
            return score_nodes(state, pod, nodes)

    def preempt(self, pod: PodInfo, proposed: Mapping[str, Sequence[str]]) -> GuardResult:
        """Answer kube-scheduler's proposed victims (see
        :mod:`extender.core.preemption.guard`); for a pod Muster governs, none, and its
        job goes to the PostFilter: this call is the earliest sign it needs room."""
        plan_at_once: bool | None = None
        now = self.clock()
        with self.source.exclusive() as state:
            result = guard_scheduler_preemption(state, pod, proposed)
            if result.hand_to_postfilter:
                plan_at_once = postfilter_trigger(state, pod, now)
        kept = sum(len(uids) for uids in result.victims.values())
        outcome = f"kept {kept} victims on {len(result.victims)} of {len(proposed)} nodes"
        self._record(pod, "preempt", outcome, result.notes)
        self._unschedulable(pod.job, "kube-scheduler wants to preempt for it", plan_at_once)
        return result

    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindResult:
        """Bind the pod, if Muster's own decisions allow it (:func:`bind_refusal`: one
        hold of the state); its error is the refusal, or why binding failed.  Every call
        is in the decision log.

        kube-scheduler can bind a pod its own watch delivered before Muster's informer
        did: a pod the informer does not know yet is waited for, up to
        ``bind_wait_seconds`` (at most :data:`BIND_WAITERS` calls wait at once; more are
        refused at once), rather than refused and retried after kube-scheduler's
        backoff.  A gang placed by a filter call that raced the informer so (which held
        nothing, see :meth:`filter`) has its room held here, as that call would have."""
        key = f"{namespace}/{name}"
        if self.binder is None:
            result = BindResult(NO_BINDER_ERROR, "failed")
        else:
            check, assumed = self._checked(key, uid, node)
            if check.unseen and self.source.pods_arrive and self._await_informer(key, uid):
                check, assumed = self._checked(key, uid, node)
            pod = check.pod
            result = BindResult(check.refusal, "refused")
            if pod is not None:
                try:
                    self.binder.bind(namespace, name, uid, node)
                    result = BindResult("", "bound")
                except BindError as failure:
                    result = BindResult(str(failure), "failed")
                    self._unassume(pod, assumed)
        outcome = f"bound to {node}" if result.outcome == "bound" else result.outcome
        reasons = (result.error,) if result.error else ()
        self.log.record(key, Decision(self.clock(), "bind", outcome, reasons))
        return result

    def _checked(self, key: str, uid: str, node: str) -> tuple[BindCheck, PodInfo | None]:
        """:func:`bind_refusal` in one hold, with the room it holds applied and persisted;
        and, when it allows the bind, the pod counted as bound there at once, in the same
        hold, as kube-scheduler assumes a pod before it binds it: a decision made while the
        API call is on its way (a plan for room on that node, say) must not see the room
        free.  Returns the check and the pod as assumed bound (``None``: not assumed)."""
        now = self.clock()
        with self.source.exclusive() as state:
            check = bind_refusal(state, key, uid, node, now)
            writes = _apply(state, check.holds)
            assumed = None
            if check.pod is not None:
                apply(state, AssumeBound(check.pod, node))
                assumed = state.pods.get(key)
        self._persist(writes)
        return check, assumed

    def _await_informer(self, key: str, uid: str) -> bool:
        """Wait, up to ``bind_wait_seconds``, for the informer to know pod ``key`` with
        ``uid`` (polling the state, each look a short hold); whether it came.  ``False``
        at once when :data:`BIND_WAITERS` calls wait already, or the pod was deleted."""
        if not self._bind_waiters.acquire(blocking=False):
            return False
        try:
            deadline = time.monotonic() + self.bind_wait_seconds
            pause = 0.002
            while (left := deadline - time.monotonic()) > 0:
                time.sleep(min(pause, left))
                pause = min(2 * pause, 0.05)
                with self.source.exclusive() as state:
                    if state.members.was_removed(uid):
                        return False
                    pod = state.pods.get(key)
                    if pod is not None and pod.uid == uid:
                        return True
            return False
        finally:
            self._bind_waiters.release()

    def _persist(self, writes: Sequence[_Write]) -> None:
        """Write on the pods what :func:`_apply` held or let go (outside the hold)."""
        if self.room_keeper is None:
            return
        for held, written in writes:
            if held is None:
                self.room_keeper.release(written)
            else:
                self.room_keeper.hold(held, written)

    def _unassume(self, pod: PodInfo, assumed: PodInfo | None) -> None:
        """The API refused the bind of ``pod`` counted as bound (``assumed``): it is
        pending again, unless the informer has delivered the pod since (its reading, not
        Muster's assumption, is the truth then)."""
        with self.source.exclusive() as state:
            if assumed is not None and state.pods.get(pod.key) is assumed:
                state.upsert_pod(pod)

    def _record(self, pod: PodInfo, verb: str, outcome: str, reasons: Sequence[str] = ()) -> None:
        self.log.record(pod.key, Decision(self.clock(), verb, outcome, tuple(reasons)))

    def _unschedulable(self, job: str, reason: str, plan_at_once: bool | None) -> None:
        if self.on_unschedulable is not None and plan_at_once is not None:
            self.on_unschedulable(job, reason, plan_at_once)


#: A reservation written on its pods, or (``None``) one let go from them.
_Write = tuple[Reservation | None, list[PodInfo]]


class _Filtered(NamedTuple):
    """A filter decision: its result, whether the pod was trusted (its effects applied),
    what to write on pods, and whether the PostFilter plans for its job at once."""

    result: FilterResult
    trusted: bool
    writes: list[_Write]
    plan_at_once: bool | None
    #: The pod decided for: the informer's reading when it has the pod.
    subject: PodInfo


def _apply(state: ClusterState, effects: Sequence[Effect]) -> list[_Write]:
    """Apply a decision's ``effects``; what the room keeper must write on pods for them."""
    writes: list[_Write] = []
    for effect in effects:
        if isinstance(effect, ReleaseRoom):  # read what was written before it goes
            writes.append((None, persisted_pods(state, effect.job)))
        apply(state, effect)
        if isinstance(effect, HoldRoom):
            reservation = effect.reservation
            pods = [state.pods[key] for key in reservation.placements if key in state.pods]
            writes.append((reservation, pods))
    return writes
