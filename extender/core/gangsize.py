"""How many pods a gang has, and whether they are still arriving.

A gang's size is declared (PodGroup ``minMember``, else the min-available annotation) or,
undeclared, the pods that exist, trusted only once none has joined for
``gangSettleSeconds`` (:func:`still_arriving`).  The filter, the planner and the
PostFilter loop all ask here; :mod:`extender.core.filter.gang` places gangs whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from base import keys
from base.errors import ManifestError
from extender.core.jobs import capped_by_owner, min_available_annotation
from extender.core.objects import PodInfo
from extender.core.state import ClusterState


@dataclass(frozen=True, slots=True)
class GangView:
    """What one filter call reads of ``pod``'s job, gathered once (:func:`view_gang`)."""

    job: str
    #: min-available, counting the pod asked about (:func:`gang_size`).
    size: int
    #: Whether anything declares the size (:func:`declared_size`).
    declared: bool
    #: The job's pods neither finished nor terminating, the pod asked about among them
    #: even when the state has not seen it yet.
    live: tuple[PodInfo, ...]

    @property
    def bound(self) -> list[PodInfo]:
        """Its live pods bound to a node and staying (not marked, preempted or terminating)."""
        return [pod for pod in self.live if pod.node_name is not None and not pod.departing]


def view_gang(state: ClusterState, pod: PodInfo) -> GangView:
    """``pod``'s job as the filter sees it, read once per call."""
    declared = declared_size(state, pod)
    live = live_pods(state, pod.job)
    if pod.key not in state.pods:
        live.append(pod)
    size = declared if declared is not None else _pods_that_exist(state, pod)
    return GangView(pod.job, size, declared is not None, tuple(live))


def gang_size(state: ClusterState, pod: PodInfo) -> int:
    """The min-available of ``pod``'s job, counting ``pod`` itself: kube-scheduler can
    ask about a pod before Muster's informer has seen it (its own annotation may be the
    only declaration, or it may be one pod more of a job of all its pods).  Undeclared,
    it is the pods that exist, which the filter trusts only once they stopped arriving
    (:func:`still_arriving`)."""
    declared = declared_size(state, pod)
    return declared if declared is not None else _pods_that_exist(state, pod)


def _pods_that_exist(state: ClusterState, pod: PodInfo) -> int:
    members = state.members.job_members(pod.job)
    return len(members) + (0 if pod.key in members else 1)


def declared_size(state: ClusterState, pod: PodInfo) -> int | None:
    """The size of ``pod``'s job as declared, in order: its PodGroup's ``minMember``, a
    min-available annotation (of the job's pods, or of ``pod`` itself, which the state
    may not have seen yet), the size of the controller that owns its pods (a Job's
    ``parallelism``, capped by the completions still to go); ``None``: undeclared."""
    declared = state.declarations.declared_min_available(pod.job)
    if declared is not None:
        return declared
    owner = state.declarations.owner_size(pod)
    try:
        declared = min_available_annotation(pod)
    except ManifestError:
        declared = None
    return owner if declared is None else capped_by_owner(declared, owner)


def size_declared(state: ClusterState, pod: PodInfo) -> bool:
    """Does anything (:func:`declared_size`) say how many pods ``pod``'s job has?"""
    return declared_size(state, pod) is not None


def still_arriving(
    state: ClusterState, pod: PodInfo, now: float, *, declared: bool | None = None
) -> bool:
    """Is ``pod``'s job a pod group of undeclared size whose pods may still be arriving?

    Without a declared size, a gang is the pods that exist, and kube-scheduler asks about
    the first one before its siblings are created (a Job controller creates them one
    after another): so until no pod has joined it for ``gangSettleSeconds``, and while
    nothing of it is bound, reserved or held, the job is not decided.  A pod the state
    has not seen yet has just joined.  ``declared``: :func:`size_declared`, when the caller
    knows it already."""
    if declared is None:
        declared = pod.group is not None and size_declared(state, pod)
    if pod.group is None or declared:
        return False
    settle = state.args.gang_settle_seconds
    if pod.key in state.pods:
        joined = state.members.last_joined(pod.job)
        if joined is None or now - joined >= settle:
            return False
    elif settle <= 0:
        return False
    job = pod.job
    if job in state.reservations or bound_count(state, job):
        return False  # placed already: pods joining later are checked as they come
    return not any(state.quota_held(key) for key in state.members.job_members(job))


def job_still_arriving(state: ClusterState, pods: Iterable[PodInfo], now: float) -> bool:
    """:func:`still_arriving` for any of ``pods``, all of one job and all in the state.
    Whether a size is declared is then the job's (the declarations read every pod of
    it), so it is worked out once: n pods cost n, not n²."""
    grouped = [pod for pod in pods if pod.group is not None]
    if not grouped:
        return False
    declared = size_declared(state, grouped[0])
    return any(still_arriving(state, pod, now, declared=declared) for pod in grouped)


def settles_at(state: ClusterState, job: str, now: float) -> float | None:
    """When ``job``, a gang of undeclared size still arriving, will have had no pod join
    it for ``gangSettleSeconds`` (if none joins meanwhile); ``None`` if it is not one."""
    members = [state.pods[key] for key in state.members.job_members(job)]
    if not job_still_arriving(state, members, now):
        return None
    joined = state.members.last_joined(job)
    return (now if joined is None else joined) + state.args.gang_settle_seconds


def arriving_reason(state: ClusterState, job: str) -> str:
    """Why the pods of a gang of undeclared size wait (one stable sentence per job)."""
    return (
        f"{waiting_for_pods(job)}its pods to stop arriving: its size is not declared "
        f"(PodGroup minMember, annotation {keys.GANG_MIN_AVAILABLE_ANNOTATION}, or the "
        f"parallelism of a Job owning its pods), so it "
        f"is the pods that exist once none has joined for "
        f"{state.args.gang_settle_seconds:g}s"
    )


def settled_gangs(state: ClusterState, now: float) -> int:
    """How many pod-group jobs have had no pod join for ``gangSettleSeconds``: a count
    that grows as gangs of undeclared size settle (the leader's cue to nudge)."""
    settle = state.args.gang_settle_seconds
    return sum(1 for joined in state.members.joined().values() if now - joined >= settle)


def is_gang(state: ClusterState, pod: PodInfo) -> bool:
    """Is ``pod`` part of a job whose pods must be placed together?"""
    return pod.group is not None and gang_size(state, pod) > 1


def live_pods(state: ClusterState, job: str) -> list[PodInfo]:
    """The job's pods that are neither finished nor on their way out."""
    return [pod for pod in state.members.job_pods(job) if not pod.finished and not pod.terminating]


def bound_count(state: ClusterState, job: str) -> int:
    """How many of the job's pods are bound to a node and staying (not marked, preempted
    or terminating: a gang whose bound pods are evicted as victims must be placed again)."""
    return sum(
        1
        for key in state.members.job_members(job)
        if (pod := state.pods[key]).node_name is not None and not pod.finished and not pod.departing
    )


def waiting_for_pods(job: str) -> str:
    return f"gang {job}: waiting for "
