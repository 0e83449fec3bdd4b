"""What decisions ask to change, as values; the front doors apply them.

A decision reads a :class:`~extender.core.state.ClusterState` and returns its outcome
with the effects it asks for; the front door applies them with :func:`apply` while it
still holds the state (the same exclusive hold as the decision, so nothing comes
between them).  Decisions themselves never change the state.

- :class:`HoldQuota`: the filter admitted a pod (and its job, whole): the pod and its
  job's pending pods keep their quota until they are seen bound, as kube-scheduler
  binds them one at a time and Muster sees each binding only later.
- :class:`ReleaseQuotaHold`: a held pod of no gang was turned away by a later filter
  call: its hold ends.
- :class:`HoldRoom`: a plan freed room for a job (the PostFilter's, ``simulate``'s), or
  kube-scheduler is preempting for it (seen by the informer): hold it for the job, and
  count the other quotas' jobs it takes back (:mod:`~extender.core.placement.reborrow`).
- :class:`ReleaseRoom`: a gang's placement no longer fits whole: its room is let go.
- :class:`BackOff`: a gang was given up (too few pods bound for too long): it backs off.
- :class:`AssumeBound`: a pod was just bound (by Muster's ``bind``, or in
  ``simulate``); count it there before the informer says so.
- :class:`AbandonPlan`: a plan's victims are refused eviction past their deadline: its
  room is let go and the job's next plans leave those victims alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from extender.core.objects import PodInfo
from extender.core.placement.reborrow import record_taken_back
from extender.core.state import ClusterState, GangBackoff, Reservation


@dataclass(frozen=True, slots=True)
class HoldQuota:
    job: str
    pods: tuple[str, ...]  # pending pod keys
    until: float
    #: Pods the state has not seen yet (kube-scheduler asked before the informer
    #: delivered them): added as pending, so their hold charges the quota at once.
    unseen: tuple[PodInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class ReleaseQuotaHold:
    """A held pod was turned away by a later filter call: it is not about to bind."""

    pod: str


@dataclass(frozen=True, slots=True)
class HoldRoom:
    reservation: Reservation


@dataclass(frozen=True, slots=True)
class ReleaseRoom:
    job: str


@dataclass(frozen=True, slots=True)
class BackOff:
    job: str
    backoff: GangBackoff


@dataclass(frozen=True, slots=True)
class AssumeBound:
    pod: PodInfo
    node: str
    started: float | None = None  # simulate: the pod runs from then on


@dataclass(frozen=True, slots=True)
class AbandonPlan:
    """A plan stalled on victims whose eviction is refused: its room is let go, and the
    job's next plans do not count on those victims."""

    job: str
    refused: frozenset[str]


Effect = HoldQuota | ReleaseQuotaHold | HoldRoom | ReleaseRoom | BackOff | AssumeBound | AbandonPlan


def apply(state: ClusterState, effect: Effect) -> None:
    """Apply one decision's effect to the state (the caller holds it exclusively)."""
    match effect:
        case HoldQuota(job=job, pods=pods, until=until, unseen=unseen):
            for pod in unseen:
                if pod.key not in state.pods and not state.members.was_removed(pod.uid):
                    state.upsert_pod(pod)  # the informer's copy replaces it when it comes
            state.hold_quota(job, pods, until)
        case ReleaseQuotaHold(pod=key):
            state.release_quota_hold(key)
        case HoldRoom(reservation=reservation):
            record_taken_back(state, reservation)  # before its victims go
            state.add_reservation(reservation)
        case ReleaseRoom(job=job):
            state.remove_reservation(job)
        case BackOff(job=job, backoff=backoff):
            known = state.book.backoffs.get(job)
            if known is None or known.given_up < backoff.given_up:
                state.book.backoffs[job] = backoff
        case AbandonPlan(job=job, refused=refused):
            state.remove_reservation(job)
            state.book.refused_victims.setdefault(job, set()).update(refused)
        case AssumeBound(pod=pod, node=node, started=started):
            current = state.pods.get(pod.key)
            if current is None:
                if state.members.was_removed(pod.uid):
                    return  # deleted meanwhile: never bring it back as a ghost
                current = pod  # bound before the informer delivered it
            if current.node_name is not None:
                return  # the informer was first
            if started is None:
                state.upsert_pod(dataclasses.replace(current, node_name=node))
            else:
                state.upsert_pod(
                    dataclasses.replace(current, node_name=node, started=started, phase="Running")
                )
