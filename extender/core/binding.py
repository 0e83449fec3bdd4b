"""Binding, checked against Muster's own decisions, and the pods a call names.

kube-scheduler's calls name pods by namespace, name and UID; the informer's reading of a
pod is what Muster believes of it (:func:`known_pending`), and a pod it has not seen may
still be on its way (:func:`unseen`).  :func:`bind_refusal` decides whether a bind may go
ahead: the front door (``extender/service.py``) waits, binds and applies.
"""

from __future__ import annotations

from typing import NamedTuple

from base.resources import shortfall
from extender.core.effects import Effect, HoldRoom
from extender.core.filter.admission import may_go_without_victims
from extender.core.filter.verb import filter_pod
from extender.core.objects import PodInfo
from extender.core.placement.nodefit import static_misfit
from extender.core.state import ClusterState


def unseen(state: ClusterState, key: str, uid: str) -> bool:
    """Has the informer not delivered pod ``key`` with ``uid`` (nor seen it removed)?"""
    pod = state.pods.get(key)
    return (pod is None or pod.uid != uid) and not state.members.was_removed(uid)


def known_pending(state: ClusterState, key: str, uid: str) -> PodInfo | None:
    """The informer's reading of pod ``key`` if it is the pod with ``uid`` and pending:
    not bound, not finished, not being deleted (what kube-scheduler schedules)."""
    pod = state.pods.get(key)
    if pod is None or pod.uid != uid or pod.node_name is not None:
        return None
    if pod.finished or pod.terminating:
        return None
    return pod


class BindCheck(NamedTuple):
    """What :func:`bind_refusal` found: the ``pod`` to bind (``None`` if refused), the
    ``refusal``, the room to hold for its gang (``holds``), and whether the informer
    has not seen the pod (``unseen``: no pod of that name and UID, nor one removed)."""

    pod: PodInfo | None
    refusal: str
    holds: tuple[Effect, ...] = ()
    unseen: bool = False


def bind_refusal(state: ClusterState, key: str, uid: str, node: str, now: float) -> BindCheck:
    """May pod ``key`` (with ``uid``) be bound to ``node``?  With the informer's reading
    of the pod when it may, else why not.

    Only when the pod is one the informer knows (name and UID) as pending, the node is
    one it knows and the pod's node constraints allow (:func:`static_misfit`), a pod with
    room reserved goes to its reserved node (elsewhere only a lone pod whose victim still
    runs, to room free there: :func:`may_go_without_victims`), and the node passes
    Muster's own filter for the pod (:func:`filter_pod` on that one node: quota admission,
    room held for other jobs, a gang placed whole).  kube-scheduler sends a bind only for a
    pod it has just filtered, so none of these should refuse it: a refusal is a caller
    that is not kube-scheduler, or a state that changed since the filter (kube-scheduler
    then tries the pod again).  When the filter places the pod's gang whole only now (its filter
    call raced the informer, and held nothing), ``holds`` holds that placement."""
    refused = f"muster: refused to bind pod {key} to node {node}: "
    pod = state.pods.get(key)
    if pod is None or pod.uid != uid:
        missing = unseen(state, key, uid)
        if pod is None:
            return BindCheck(None, refused + "Muster's informer knows no such pod", (), missing)
        return BindCheck(None, refused + f"PodUID {uid!r} is not the pod's UID", (), missing)
    if pod.node_name is not None:
        return BindCheck(None, refused + f"it is bound to node {pod.node_name} already")
    if pod.finished or pod.terminating:
        ended = f"it has {pod.phase.lower()}" if pod.finished else "it is being deleted"
        return BindCheck(None, refused + ended)
    known = state.nodes.get(node)
    if known is None:
        return BindCheck(None, refused + "Muster's informer knows no such node")
    misfit = static_misfit(pod, known)
    if misfit is not None:
        return BindCheck(None, refused + misfit)
    reserved = state.reserved_node(key)
    if reserved is not None and reserved != node:
        # Elsewhere only as the filter allows a lone pod whose victim still runs, to
        # room that is free there as Muster sees the node.
        job = state.reservation_holder(key)
        if not may_go_without_victims(state, pod, now) or shortfall(
            pod.requests, state.free_on(node, for_pod=key)
        ):
            return BindCheck(
                None, refused + f"room for it (job {job}) is reserved on node {reserved}"
            )
    result = filter_pod(state, pod, [node], as_extender=True, now=now)
    if node not in result.passed:
        why = result.unresolvable.get(node) or result.failed.get(node) or "it does not pass"
        return BindCheck(None, refused + f"Muster's filter: {why}")
    return BindCheck(pod, "", tuple(e for e in result.effects if isinstance(e, HoldRoom)))
