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
  :class:`~extender.core.placement.fit.JobFit`, with no victims).  If at least
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

This module plans the placement; :mod:`.verb` decides, per filter call, whether to plan,
hold a pod to its room, repair, or turn the job away.  A gang's size and arrival live in
:mod:`extender.core.gangsize`, its backoff and status in :mod:`.gangstatus`.  Pure:
decisions read the state and return effects (:mod:`extender.core.effects`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from extender.core.gangsize import GangView, view_gang
from extender.core.objects import PodInfo
from extender.core.placement.domains import node_domains
from extender.core.placement.fit import JobFit
from extender.core.placement.shapes import shape_of
from extender.core.state import ClusterState, Reservation
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
    state: ClusterState,
    first: PodInfo,
    *,
    allowed: Collection[str] | None = None,
    refused: frozenset[str] = frozenset(),
    gang: GangView | None = None,
) -> GangPlacement | GangWait:
    """Place the unbound pods of ``first``'s job whole: at least min-available bound or placed.

    ``first``: the pod being filtered (placed first of its shape, and only on
    ``allowed`` nodes: those kube-scheduler's own filters passed for it).  The job's
    own reservation, if any, is planned again in its place (its room counts as free).
    ``gang``: the job as the filter call read it (read here when not given).  A gang
    with a topology request is placed inside one domain (:func:`_plan_in_a_domain`).
    """
    gang = gang if gang is not None else view_gang(state, first)
    job = gang.job
    unplaced = [pod for pod in gang.live if pod.node_name is None and pod.key != first.key]
    unplaced.insert(0, first)
    own = [pod.key for pod in unplaced if state.reservation_holder(pod.key) == job]
    own += state.book.vacancies_of(job)  # room kept for pods being re-created
    attempt = _Attempt(state, job, first, unplaced, own, needed=gang.size, bound=gang.bound)
    slices = state.declarations.slice_request(job, including=first)
    if slices is not None:
        attempt = dataclasses.replace(attempt, slices=slices)
    request = state.declarations.topology_request(job, including=first)
    if request is None:
        return attempt.plan(allowed, refused)
    return _plan_in_a_domain(attempt, request, allowed, refused)


@dataclass(frozen=True, slots=True)
class _Attempt:
    """What one gang placement works with: the job's pods and how many must run."""

    state: ClusterState
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
        state, job, first, needed = self.state, self.job, self.first, self.needed
        bound = len(self.bound)
        outside = frozenset() if within is None else frozenset(state.nodes) - within
        quota = state.quota_of(first)
        for _attempt in range(_REPLANS + 1):
            excluded = refused | outside
            fit = JobFit(
                state,
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
    state, job = attempt.state, attempt.job
    scarce = scarce_resource(attempt.first)
    best: tuple[int, str] | None = None  # the most pods one domain holds, and where
    for level in levels_from(request, state.declarations.topology_levels(request.level)):
        # The gang's bound pods fix its domain.
        domains = node_domains(state, level, {pod.node_name or "" for pod in attempt.bound})
        free = {
            name: state.free_on(name).get(scarce, 0) for names in domains.values() for name in names
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
