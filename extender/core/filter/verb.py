"""The filter verb for one pod: quota admission, node sorting, and a gang placed whole.

:func:`filter_pod` is what kube-scheduler's ``filter`` call and ``simulate`` run.  It
sorts the nodes (:mod:`.nodes`, with job-level admission from :mod:`.admission`, and
room held for starving jobs kept from later ones: :mod:`.starvation`); for a
pod of a gang it then reads the gang once (:class:`~extender.core.gangsize.GangView`) and
either turns the whole job away (its pods still arriving, in backoff, too few created),
holds the pod to room already placed, or places the job whole (:mod:`.gang`), repairing a
placement kube-scheduler refused.  It returns the effects the front door applies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from base.resources import add_into, fits
from extender.core.effects import Effect, HoldRoom, ReleaseQuotaHold, ReleaseRoom
from extender.core.filter.admission import added_pods_admission_failures, admission_hold
from extender.core.filter.gang import GangPlacement, GangWait, plan_gang_placement
from extender.core.filter.gangstatus import backoff_reason
from extender.core.filter.nodes import FilterResult, filter_nodes
from extender.core.filter.starvation import keep_off_held_room
from extender.core.gangsize import (
    GangView,
    arriving_reason,
    still_arriving,
    view_gang,
    waiting_for_pods,
)
from extender.core.objects import PodInfo
from extender.core.placement.nodefit import static_misfit
from extender.core.state import ClusterState, Reservation


def filter_pod(
    state: ClusterState,
    pod: PodInfo,
    node_names: Sequence[str],
    *,
    as_extender: bool,
    now: float,
) -> FilterResult:
    """The filter for one pod: :func:`~extender.core.filter.nodes.filter_nodes`, and for a
    pod of a gang the whole job's placement (see :mod:`extender.core.filter.gang`).  The
    effects the front door must apply are in ``FilterResult.effects``, with the admission
    hold (:func:`~extender.core.filter.admission.admission_hold`, at most
    ``quotaHoldSeconds``) of every pod admitted whose job holds no reserved room: the live
    filter and ``simulate`` apply the same ones."""
    result = _filter_pod(state, pod, node_names, as_extender=as_extender, now=now)
    if result.quota_failures or not result.passed:
        if pod.group is None and state.quota_held(pod.key):
            # Admitted before, turned away now: it is not about to bind.
            return dataclasses.replace(result, effects=(*result.effects, ReleaseQuotaHold(pod.key)))
        return result
    if pod.job in state.reservations or any(isinstance(e, HoldRoom) for e in result.effects):
        return result  # room reserved for the job charges its quota already
    hold = admission_hold(state, pod, now + state.args.quota_hold_seconds)
    if hold is None:
        return result
    return dataclasses.replace(result, effects=(*result.effects, hold))


def _filter_pod(
    state: ClusterState,
    pod: PodInfo,
    node_names: Sequence[str],
    *,
    as_extender: bool,
    now: float,
) -> FilterResult:
    """The nodes sorted for ``pod``; then, for a pod of a gang, the whole job decided."""
    result = filter_nodes(state, pod, node_names, as_extender=as_extender, now=now)
    result, held = keep_off_held_room(state, pod, result, now)  # room of starving jobs
    if result.quota_failures or pod.group is None:
        return result
    gang = view_gang(state, pod)
    turned = _turned_away_whole(state, pod, gang, node_names, now)
    if turned is not None or gang.size <= 1:
        return turned or result
    # Nodes kube-scheduler (or, in simulate, the node constraints) allow for this pod;
    # the planner itself keeps to room not held for other jobs.
    allowed = [name for name in node_names if name not in result.unresolvable]
    reservation = state.reservations.get(gang.job)
    reserved_node = state.reserved_node(pod.key)
    placed = len(gang.bound) + _reserved_count(state, gang.job)
    if reserved_node is not None and reservation is not None:
        if reserved_node in allowed and placed >= gang.size:
            return result  # held to its reserved node by filter_nodes
        if reserved_node in allowed:
            # Bound pods of the gang are leaving (evicted as another job's victims): the
            # rest must not bind alone.  Plan it whole again, or let its room go.
            reserved_node = None
            refused = reservation.refused
        elif reservation.victims and _room_coming(state, pod, reserved_node):
            # Room freed by eviction: kube-scheduler may not have seen the victims go
            # yet.  Its own delete event retries the pod; the room stays the job's.  (Room
            # a pod that is not leaving took, one kube-scheduler bound there while the plan
            # was made, never comes: the job is planned again without that node.)
            return _turned_away(
                node_names,
                f"gang {gang.job}: waiting for the room reserved on node {reserved_node}",
                resolvable=False,
            )
        else:
            refused = reservation.refused | {reserved_node}
    elif placed >= gang.size:
        return result  # the gang's min-available is placed: this pod is one more
    else:
        refused = reservation.refused if reservation is not None else frozenset()
    decision = plan_gang_placement(state, pod, allowed=allowed, refused=refused | held, gang=gang)
    if held and isinstance(decision, GangWait):
        # Say so: the room it waits for is reserved, and when the hold ends it is nudged.
        decision = dataclasses.replace(
            decision,
            reason=f"{decision.reason}; room on {len(held)} nodes is reserved for a starving job",
        )
    return _decided(state, pod, gang, node_names, decision, reserved_node, now)


def _turned_away_whole(
    state: ClusterState, pod: PodInfo, gang: GangView, node_names: Sequence[str], now: float
) -> FilterResult | None:
    """Every pod of the job turned away before any placement is tried: its pods are still
    arriving, it is in backoff, or fewer than min-available exist; ``None`` otherwise."""
    job = gang.job
    if still_arriving(state, pod, now, declared=gang.declared):
        return _turned_away(node_names, arriving_reason(state, job), resolvable=False)
    if gang.size <= 1:
        return None
    backoff = state.book.backoffs.get(job)
    waiting = backoff_reason(job, backoff, now) if backoff is not None else None
    if waiting is not None:
        return _turned_away(node_names, waiting, resolvable=False)
    created = len(gang.live)
    if created >= gang.size:
        return None
    # A terminating pod is one its controller will replace.
    turned = _turned_away(
        node_names,
        f"{waiting_for_pods(job)}{gang.size - created} more pods "
        f"({created} of min-available {gang.size} exist)",
        resolvable=False,
    )
    reservation = state.reservations.get(job)
    if (
        reservation is not None
        and not reservation.victims
        and not any(state.not_seen_yet(key) for key in reservation.placements)
    ):
        return dataclasses.replace(turned, effects=(ReleaseRoom(job),))
    # Room placed for pods Muster has not seen yet (a filter call for one of them
    # placed the gang before the informer delivered it) stays the job's: they exist.
    # Once they are seen, the gang is complete and its parked pods are nudged.
    return turned


def _decided(
    state: ClusterState,
    pod: PodInfo,
    gang: GangView,
    node_names: Sequence[str],
    decision: GangPlacement | GangWait,
    reserved_node: str | None,
    now: float,
) -> FilterResult:
    """The filter's answer for a gang once its placement is planned: the room held and
    the pod held to its node, or the job turned away (its old room released, unless
    kube-scheduler's refusal may pass)."""
    job = gang.job
    reservation = state.reservations.get(job)
    if isinstance(decision, GangPlacement) and state.counts_as_used(pod):
        # This pod's quota was checked when its room was reserved (or held); pods the plan
        # adds now that its quota has not charged (a gang of undeclared size that grew
        # since) were not: they must fit too, or the reservation would carry them past
        # the quota's max.
        failures = added_pods_admission_failures(state, pod, decision.placements)
        if failures:
            reason = "; ".join(failures)
            return FilterResult(
                unresolvable=dict.fromkeys(node_names, reason), quota_failures=tuple(failures)
            )
    if isinstance(decision, GangWait):
        if reserved_node is not None and reservation is not None:
            kept = _room_kept(state, pod, gang, node_names, reservation, reserved_node)
            if kept is not None:
                return kept
        release: tuple[Effect, ...] = (ReleaseRoom(job),) if reservation is not None else ()
        turned = _turned_away(node_names, decision.reason, resolvable=decision.resolvable)
        return dataclasses.replace(turned, effects=release)
    victims = reservation.victims if reservation is not None else ()
    timeout = state.args.reservation_timeout_seconds
    hold = HoldRoom(decision.reservation(now, timeout, victims))
    node = decision.placements.get(pod.key)
    if node is None:  # min-available is placed without it; nothing of its shape fits
        turned = _turned_away(
            node_names,
            f"gang {job} is placed without pod {pod.name}: no room for it",
            resolvable=True,
        )
        return dataclasses.replace(turned, effects=(hold,))
    held_here = f"gang {job} is placed whole; this pod goes to node {node}"
    return FilterResult(
        passed=[node],
        failed={name: held_here for name in node_names if name != node},
        pinned_to=node,
        effects=(hold,),
        gang_placed=True,
    )


def _room_kept(
    state: ClusterState,
    pod: PodInfo,
    gang: GangView,
    node_names: Sequence[str],
    reservation: Reservation,
    reserved_node: str,
) -> FilterResult | None:
    """kube-scheduler refuses the pod's reserved node and no other room fits: does the job
    still fit whole as Muster sees the cluster?  Then the refusal may pass (its cache can
    hold a pod that is already gone, or assumed and never bound): the room stays
    reserved, the pod is retried on kube-scheduler's next event, and the gang timeout
    ends a refusal that lasts.  ``None``: it does not fit; let the room go."""
    mine = plan_gang_placement(state, pod, refused=reservation.refused, gang=gang)
    if not isinstance(mine, GangPlacement):
        return None
    return _turned_away(
        node_names,
        f"gang {gang.job}: kube-scheduler refuses node {reserved_node} planned for pod "
        f"{pod.name}, and no other room fits the gang; its room stays reserved",
        resolvable=False,
    )


def _room_coming(state: ClusterState, pod: PodInfo, node: str) -> bool:
    """Will ``pod`` fit on ``node``, its reserved node, once the pods on their way out
    (:meth:`~extender.core.state.ClusterState.leaving`) have left?  Never on a node gone,
    or one that no longer takes it (cordoned, tainted since the plan)."""
    if node not in state.nodes or static_misfit(pod, state.nodes[node]) is not None:
        return False
    free = state.free_on(node, for_pod=pod.key)
    for leaving in state.leaving():
        if leaving.node_name == node:
            add_into(free, leaving.requests)
    return fits(pod.requests, free)


def _reserved_count(state: ClusterState, job: str) -> int:
    return sum(1 for key in state.members.job_members(job) if state.reservation_holder(key) == job)


def _turned_away(node_names: Sequence[str], reason: str, *, resolvable: bool) -> FilterResult:
    """Every node fails for the job's reason (``resolvable``: evicting could help, so the
    job goes to the PostFilter)."""
    if resolvable:
        return FilterResult(failed=dict.fromkeys(node_names, reason), gang_waiting=reason)
    return FilterResult(unresolvable=dict.fromkeys(node_names, reason), gang_waiting=reason)
