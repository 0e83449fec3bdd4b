"""All-or-nothing gang placement: the filter plans a whole job before any pod of it binds.

kube-scheduler places pods one at a time.  Left alone, it binds two pods of a
three-pod gang that has room for two and strands them, holding their GPUs for a
job that can never run.  Muster's filter therefore decides for the whole job the
first time one of its pods asks:

- A *gang* is a job of a pod group whose min-available is above one.  While fewer
  than min-available of its pods exist, every pod is turned away ("waiting for N
  more pods"): no node helps.
- Otherwise, after the job-level quota check, every unplaced pod of the job is
  placed on copies of the nodes (the preemption planner's
  :class:`~extender.core.preemption.fit.JobFit`, with no victims).  If at least
  min-available pods would then be bound or placed, the placement is reserved for
  the job in the reservation book (the same book a preemption's room is held in, so
  other pods are kept off it and the front door persists it on the pods), and the
  pod is held to its planned node; the job's later pods are held to theirs.
  If not, every pod of the job is turned away with one stable reason ("gang g: 2 of
  3 pods fit; waiting for room for all 3"), and the job goes to the PostFilter,
  which may preempt for the whole job.
- *Repair*: kube-scheduler's own filters may refuse a planned node for reasons
  Muster does not model (host ports, volumes, inter-pod affinity, a node that
  changed).  Then the job's unbound pods are planned again without that node, in
  place of their own reservation.  If no other room fits the job, its reservation
  stays while the job still fits as Muster sees the cluster (kube-scheduler's view
  can lag: a pod it assumed and never bound), and is released, the job waiting
  whole, once it does not.
- *Give up*: a gang that has had fewer than min-available pods bound for its
  timeout (PodGroup ``scheduleTimeoutSeconds``, else ``gangTimeoutSeconds``) is
  given up: the front door soft-evicts its bound pods and releases its room, and
  the filter turns the job away until its backoff ends (KEP-1282's requeue
  strategy: ``backoffBaseSeconds`` doubling per attempt up to ``backoffMaxSeconds``;
  past ``backoffLimitCount`` attempts, for good).

A gang's size and arrival live in :mod:`extender.core.gangsize`, its backoff and status in
:mod:`extender.core.gangstatus`.  Pure: decisions read the state and return effects
(:mod:`extender.core.effects`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from extender.core.effects import Effect, HoldRoom, ReleaseQuotaHold, ReleaseRoom
from extender.core.gangsize import (
    arriving_reason,
    bound_count,
    gang_size,
    is_gang,
    live_pods,
    still_arriving,
    waiting_for_pods,
)
from extender.core.gangstatus import backoff_reason
from extender.core.objects import PodInfo
from extender.core.preemption.fit import JobFit
from extender.core.preemption.shapes import shape_of
from extender.core.scheduling import (
    FilterResult,
    added_pods_admission_failures,
    admission_hold,
    filter_nodes,
)
from extender.core.state import ClusterState, Reservation, node_domains
from extender.core.topology import (
    SliceRequest,
    TopologyRequest,
    fullest_first,
    levels_from,
    scarce_resource,
)

#: How many times a plan is redone when kube-scheduler refuses the node it gave the pod.
_REPLANS = 3


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """Where the job's unplaced pods go (pod key → node), enough for min-available."""

    job: str
    quota: str
    placements: Mapping[str, str]
    refused: frozenset[str]  # nodes kube-scheduler refused to pods of the job

    def reservation(self, now: float, timeout: float, victims: tuple[str, ...] = ()) -> Reservation:
        return Reservation(
            job=self.job,
            quota=self.quota,
            placements=dict(self.placements),
            victims=victims,
            created=now,
            expires=now + timeout,
            refused=self.refused,
        )


@dataclass(frozen=True, slots=True)
class GangWait:
    """The job cannot be placed whole now; ``resolvable``: evicting could help;
    ``fitting``: how many of its pods are bound or would be placed."""

    job: str
    reason: str
    resolvable: bool
    fitting: int = 0


def plan_gang_placement(
    snapshot: ClusterState,
    job: str,
    *,
    first: PodInfo,
    allowed: Collection[str] | None = None,
    refused: frozenset[str] = frozenset(),
) -> GangPlacement | GangWait:
    """Place the job's unbound pods whole: at least min-available bound or placed.

    ``first``: the pod being filtered (placed first of its shape, and only on
    ``allowed`` nodes: those kube-scheduler's own filters passed for it).  The job's
    own reservation, if any, is planned again in its place (its room counts as free).
    A gang with a topology request is placed inside one domain (:func:`_plan_in_a_domain`).
    """
    pods = live_pods(snapshot, job)
    if first.key not in snapshot.pods:
        pods.append(first)
    unplaced = [pod for pod in pods if pod.node_name is None and pod.key != first.key]
    unplaced.insert(0, first)
    own = [pod.key for pod in unplaced if snapshot.reservation_holder(pod.key) == job]
    own += snapshot.book.vacancies_of(job)  # room kept for pods being re-created
    attempt = _Attempt(
        snapshot,
        job,
        first,
        unplaced,
        own,
        needed=gang_size(snapshot, first),
        bound=[pod for pod in pods if pod.node_name is not None and not pod.departing],
    )
    slices = snapshot.slice_request(job, including=first)
    if slices is not None:
        attempt = dataclasses.replace(attempt, slices=slices)
    request = snapshot.topology_request(job, including=first)
    if request is None:
        return attempt.plan(allowed, refused)
    return _plan_in_a_domain(attempt, request, allowed, refused)


@dataclass(frozen=True, slots=True)
class _Attempt:
    """What one gang placement works with: the job's pods and how many must run."""

    snapshot: ClusterState
    job: str
    first: PodInfo
    unplaced: list[PodInfo]
    own: list[str]
    needed: int
    bound: list[PodInfo]
    slices: SliceRequest | None = None  # Kueue's podset slices, each in one domain

    def plan(
        self,
        allowed: Collection[str] | None,
        refused: frozenset[str],
        within: frozenset[str] | None = None,
        where: str = "",
    ) -> GangPlacement | GangWait:
        """Place the unplaced pods, on the nodes of ``within`` only when given (``where``
        names them in the reason)."""
        snapshot, job, first, needed = self.snapshot, self.job, self.first, self.needed
        bound = len(self.bound)
        outside = frozenset() if within is None else frozenset(snapshot.nodes) - within
        quota = snapshot.quota_of(first)
        for _attempt in range(_REPLANS + 1):
            excluded = refused | outside
            fit = JobFit(
                snapshot,
                job,
                self.unplaced,
                excluded=excluded,
                released=self.own,
                slices=self.slices,
                bound=self.bound,
            )
            placements = fit.place(partial=True) or {}
            if bound + len(placements) < needed and len(fit.shapes) > 1:
                # Not all fit in the greedy order: every pod may still, in another (the
                # search the planner uses), or small pods first may reach min-available.
                placements = fit.place() or max(
                    placements, fit.place(partial=True, smallest_first=True) or {}, key=len
                )
            if bound + len(placements) < needed:
                return GangWait(
                    job,
                    f"gang {job}: {where}{bound + len(placements)} of {needed} pods fit"
                    f"{_in_slices(self.slices)}; waiting for room for all {needed}",
                    resolvable=True,
                    fitting=bound + len(placements),
                )
            node = placements.get(first.key)
            if allowed is None or node is None or node in allowed:
                return GangPlacement(job, quota, placements, refused)
            swapped = _swap_onto_allowed(placements, first, self.unplaced, allowed)
            if swapped is not None:
                return GangPlacement(job, quota, swapped, refused)
            refused = refused | {node}
        return GangWait(
            job,
            f"gang {job}: kube-scheduler refuses pod {first.name} every node Muster planned for it",
            resolvable=False,
        )


def _plan_in_a_domain(
    attempt: _Attempt,
    request: TopologyRequest,
    allowed: Collection[str] | None,
    refused: frozenset[str],
) -> GangPlacement | GangWait:
    """Place a gang inside one domain of its level (:mod:`extender.core.topology`): the
    fullest domain that holds it whole, so large domains stay free for large gangs (a
    domain holding pods of the gang already bound is the only one).  A preferred level
    that no domain holds tries the next coarser level, then anywhere."""
    snapshot, job = attempt.snapshot, attempt.job
    scarce = scarce_resource(attempt.first)
    best: tuple[int, str] | None = None  # the most pods one domain holds, and where
    for level in levels_from(request, snapshot.topology_levels(request.level)):
        # The gang's bound pods fix its domain.
        domains = node_domains(snapshot, level, {pod.node_name or "" for pod in attempt.bound})
        free = {
            name: snapshot.free_on(name).get(scarce, 0)
            for names in domains.values()
            for name in names
        }
        for value, names in fullest_first(domains, free):
            where = f"{level}={value}"
            decision = attempt.plan(allowed, refused, names, where=f"in {where}, ")
            if isinstance(decision, GangPlacement):
                return decision
            if best is None or decision.fitting > best[0]:
                best = (decision.fitting, where)
    if not request.required:
        return attempt.plan(allowed, refused)
    if best is None:
        return GangWait(
            job,
            f"gang {job}: no node has the label {request.level} its required topology names",
            resolvable=False,
        )
    return GangWait(
        job,
        f"gang {job}: no {request.level} domain holds all {attempt.needed} pods (the most: "
        f"{best[0]} in {best[1]}); waiting for room in one",
        resolvable=True,
        fitting=best[0],
    )


def _in_slices(slices: SliceRequest | None) -> str:
    if slices is None:
        return ""
    return f" in slices of {slices.size}, each inside one {slices.level} domain"


def _swap_onto_allowed(
    placements: Mapping[str, str], first: PodInfo, pods: Sequence[PodInfo], allowed: Collection[str]
) -> dict[str, str] | None:
    """The placement with ``first`` traded with a pod of its own shape whose node
    kube-scheduler allows for ``first``; ``None`` if there is none."""
    shape = shape_of(first)
    for pod in pods:
        node = placements.get(pod.key)
        if node is not None and node in allowed and pod.key != first.key and shape_of(pod) == shape:
            swapped = dict(placements)
            swapped[pod.key], swapped[first.key] = placements[first.key], node
            return swapped
    return None


def filter_pod(
    snapshot: ClusterState,
    pod: PodInfo,
    node_names: Sequence[str],
    *,
    as_extender: bool,
    now: float,
) -> FilterResult:
    """The filter for one pod: :func:`~extender.core.scheduling.filter_nodes`, and for a
    pod of a gang the whole job's placement (see the module docstring).  The effects
    the front door must apply are in ``FilterResult.effects``, with the admission hold
    (:func:`~extender.core.scheduling.admission_hold`, at most ``quotaHoldSeconds``) of
    every pod admitted whose job holds no reserved room: the live filter and
    ``simulate`` apply the same ones."""
    result = _filter_pod(snapshot, pod, node_names, as_extender=as_extender, now=now)
    if result.quota_failures or not result.passed:
        if pod.group is None and snapshot.quota_held(pod.key):
            # Admitted before, turned away now: it is not about to bind.
            return dataclasses.replace(result, effects=(*result.effects, ReleaseQuotaHold(pod.key)))
        return result
    if pod.job in snapshot.reservations or any(isinstance(e, HoldRoom) for e in result.effects):
        return result  # room reserved for the job charges its quota already
    hold = admission_hold(snapshot, pod, now + snapshot.args.quota_hold_seconds)
    if hold is None:
        return result
    return dataclasses.replace(result, effects=(*result.effects, hold))


def _filter_pod(
    snapshot: ClusterState,
    pod: PodInfo,
    node_names: Sequence[str],
    *,
    as_extender: bool,
    now: float,
) -> FilterResult:
    result = filter_nodes(snapshot, pod, node_names, as_extender=as_extender)
    if result.quota_failures:
        return result
    if still_arriving(snapshot, pod, now):
        return _turned_away(node_names, arriving_reason(snapshot, pod.job), resolvable=False)
    if not is_gang(snapshot, pod):
        return result
    job = pod.job
    backoff = snapshot.book.backoffs.get(job)
    waiting = backoff_reason(job, backoff, now) if backoff is not None else None
    if waiting is not None:
        return _turned_away(node_names, waiting, resolvable=False)
    needed = gang_size(snapshot, pod)
    reservation = snapshot.reservations.get(job)
    created = len(live_pods(snapshot, job)) + (0 if pod.key in snapshot.pods else 1)
    if created < needed:  # a terminating pod is one its controller will replace
        turned = _turned_away(
            node_names,
            f"{waiting_for_pods(job)}{needed - created} more pods "
            f"({created} of min-available {needed} exist)",
            resolvable=False,
        )
        if (
            reservation is not None
            and not reservation.victims
            and not any(snapshot.not_seen_yet(key) for key in reservation.placements)
        ):
            return dataclasses.replace(turned, effects=(ReleaseRoom(job),))
        # Room placed for pods Muster has not seen yet (a filter call for one of them
        # placed the gang before the informer delivered it) stays the job's: they exist.
        # Once they are seen, the gang is complete and its parked pods are nudged.
        return turned
    # Nodes kube-scheduler (or, in simulate, the node constraints) allow for this pod;
    # the planner itself keeps to room not held for other jobs.
    allowed = [name for name in node_names if name not in result.unresolvable]
    reserved_node = snapshot.reserved_node(pod.key)
    placed = bound_count(snapshot, job) + _reserved_count(snapshot, job)
    if reserved_node is not None and reservation is not None:
        if reserved_node in allowed and placed >= needed:
            return result  # held to its reserved node by filter_nodes
        if reserved_node in allowed:
            # Bound pods of the gang are leaving (evicted as another job's victims): the
            # rest must not bind alone.  Plan it whole again, or let its room go.
            reserved_node = None
            refused = reservation.refused
        elif reservation.victims:
            # Room freed by eviction: kube-scheduler may not have seen the victims go
            # yet.  Its own delete event retries the pod; the room stays the job's.
            return _turned_away(
                node_names,
                f"gang {job}: waiting for the room reserved on node {reserved_node}",
                resolvable=False,
            )
        else:
            refused = reservation.refused | {reserved_node}
    elif placed >= needed:
        return result  # the gang's min-available is placed: this pod is one more
    else:
        refused = reservation.refused if reservation is not None else frozenset()
    decision = plan_gang_placement(snapshot, job, first=pod, allowed=allowed, refused=refused)
    if isinstance(decision, GangPlacement) and snapshot.counts_as_used(pod):
        # This pod's quota was checked when its room was reserved (or held); pods the plan
        # adds now that its quota has not charged (a gang of undeclared size that grew
        # since) were not: they must fit too, or the reservation would carry them past
        # the quota's max.
        failures = added_pods_admission_failures(snapshot, pod, decision.placements)
        if failures:
            reason = "; ".join(failures)
            return FilterResult(
                unresolvable=dict.fromkeys(node_names, reason), quota_failures=tuple(failures)
            )
    if isinstance(decision, GangWait) and reserved_node is not None and reservation is not None:
        # No other room: does the job still fit whole as Muster sees the cluster?  Then
        # kube-scheduler's refusal may pass (its cache can hold a pod that is already
        # gone, or assumed and never bound): the room stays reserved, the pod is retried
        # on kube-scheduler's next event, and the gang timeout ends a refusal that lasts.
        mine = plan_gang_placement(snapshot, job, first=pod, refused=reservation.refused)
        if isinstance(mine, GangPlacement):
            return _turned_away(
                node_names,
                f"gang {job}: kube-scheduler refuses node {reserved_node} planned for pod "
                f"{pod.name}, and no other room fits the gang; its room stays reserved",
                resolvable=False,
            )
    if isinstance(decision, GangWait):
        release: tuple[Effect, ...] = (ReleaseRoom(job),) if reservation is not None else ()
        turned = _turned_away(node_names, decision.reason, resolvable=decision.resolvable)
        return dataclasses.replace(turned, effects=release)
    victims = reservation.victims if reservation is not None else ()
    timeout = snapshot.args.reservation_timeout_seconds
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


def _reserved_count(snapshot: ClusterState, job: str) -> int:
    return sum(1 for key in snapshot.job_members(job) if snapshot.reservation_holder(key) == job)


def _turned_away(node_names: Sequence[str], reason: str, *, resolvable: bool) -> FilterResult:
    """Every node fails for the job's reason (``resolvable``: evicting could help, so the
    job goes to the PostFilter)."""
    if resolvable:
        return FilterResult(failed=dict.fromkeys(node_names, reason), gang_waiting=reason)
    return FilterResult(unresolvable=dict.fromkeys(node_names, reason), gang_waiting=reason)
