"""The search for victims: remove victim groups in order until the whole job fits, then
spare every group not needed.

:func:`search_victims` is the planner's steps 4 and 5 (see :mod:`.planner`): it walks the
candidates (:mod:`.candidates`) on copies of the nodes and the quota ledger
(:class:`~.simulation.Simulation`), passing over a group that could not help, that would
take a quota below its ``min``, that a PodDisruptionBudget protects, or that is spared for
a while (:mod:`.protection`), and minimises
what it found (:func:`_minimised`).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from base.times import format_time
from extender.core.budgets import BudgetUse
from extender.core.objects import PodInfo
from extender.core.placement.demand import JobDemand
from extender.core.preemption.candidates import find_victim_groups
from extender.core.preemption.deferral import Deferral
from extender.core.preemption.fairness import gap_widens
from extender.core.preemption.groups import VictimGroup
from extender.core.preemption.policy import Preemptor, Rule
from extender.core.preemption.protection import gangs_in_flight, min_runtimes, protected_until
from extender.core.preemption.simulation import Simulation, Wants
from extender.core.state import ClusterState
from quota.accounting import QuotaLedger
from quota.admission import job_admission_failures


class JobLayout:
    """The job's slices (Kueue's podset slices), if it asks for them, and its pods on
    nodes already, which fix its domain and may hold incomplete slices; ``released``:
    reserved pods of other jobs whose held room yields to it (:mod:`.yielding`)."""

    def __init__(
        self, state: ClusterState, job: str, released: frozenset[str] = frozenset()
    ) -> None:
        self.released = released
        self.slices = state.declarations.slice_request(job)
        self.bound = tuple(
            pod
            for pod in state.members.job_pods(job)
            if pod.node_name is not None and not pod.finished and not pod.departing
        )


#: The refusal of a job that needs no preemption.
FITS_ALREADY = "the job fits without evicting anything"


@dataclass(frozen=True, slots=True)
class Found:
    kept: list[VictimGroup]  # in preemption order
    placements: Mapping[str, str]
    below_min: Mapping[str, str]  # victim job → the min it takes a quota below
    #: Found only by a search allowing victims a PodDisruptionBudget protects.
    breaks_budgets: bool = False
    #: Why this plan and not the walk's first (which step of the ranking decided), or "".
    chosen_over: str = ""


def never_fits_now() -> bool:
    """The fits-now answer of a decision that did not find the job fitting."""
    return False


@dataclass(frozen=True, slots=True)
class NotFound:
    reasons: list[str]
    guaranteed_skipped: bool = False  # victims spared for a min in a resource not contested
    budget_skipped: bool = False  # victims spared for a PodDisruptionBudget
    fits: bool = False  # nothing need be evicted
    #: ... and does it fit on room free now, with no pod leaving first (then nothing but a
    #: binding Muster has not seen yet can keep it unschedulable)?  Asked only by whoever
    #: wants it, while the state is unchanged (:meth:`Simulation.fits_now`).
    fits_now: Callable[[], bool] = field(default=never_fits_now, compare=False)
    #: The earliest end of a minimum runtime that spared a victim: a plan may exist then.
    retry_at: float | None = None
    in_flight_skipped: bool = False  # victims spared as a gang in flight


class Pacing(enum.Enum):
    """How a walk meets victim units: holding units back until their node could gain,
    over the nodes that could gain by a horizon (:meth:`.Deferral.horizon`) or over
    every node, or every unit at its place."""

    HORIZON = "horizon"
    HELD = "held"
    IN_ORDER = "in order"


def search_victims(
    state: ClusterState,
    demand: JobDemand,
    preemptor: Preemptor,
    ledger: QuotaLedger,
    spent: Sequence[PodInfo],
    *,
    spare_guaranteed: bool,
    spare_budgets: bool,
    spare_in_flight: bool = True,
    within: frozenset[str] | None = None,
    layout: JobLayout,
    now: float,
    priority_cap: int | None = None,
    spared: frozenset[str] = frozenset(),
) -> Found | NotFound:
    """Walk the allowed victim groups (of priority ``priority_cap`` or lower, if given,
    and of no job in ``spared``) in order until the whole job fits, then spare
    every group not needed.  Never a group that takes a quota below its ``min`` in a
    resource the job asks for; with ``spare_guaranteed``, none that takes one below its
    ``min`` in any resource it governs; with ``spare_budgets`` (always, under pdbPolicy
    Strict), none whose eviction, with the victims taken before it and those of plans in
    flight not evicted yet (``spent``), a PodDisruptionBudget does not allow; never a
    group of another quota admitted less than its minimum runtime before ``now``; with
    ``spare_in_flight``, none of another quota's gang in flight (:mod:`.protection`).
    ``ledger``: the settled quota usage the candidates' borrowing is judged on."""
    walk = functools.partial(
        _walk,
        state,
        demand,
        preemptor,
        ledger,
        spent,
        spare_guaranteed=spare_guaranteed,
        spare_budgets=spare_budgets,
        spare_in_flight=spare_in_flight,
        within=within,
        layout=layout,
        now=now,
        priority_cap=priority_cap,
        spared=spared,
    )
    found = walk(pacing=Pacing.HORIZON)
    while isinstance(found, Pacing):  # a walk that cannot vouch for its answer
        found = walk(pacing=found)
    return found


def _walk_again(deferral: Deferral) -> Pacing:
    """How to walk again after a walk paced by ``deferral`` could not vouch for its
    answer: holding units back over every node after a horizon, else every unit at its
    place."""
    return Pacing.HELD if deferral.horizon_used else Pacing.IN_ORDER


def _walk(
    state: ClusterState,
    demand: JobDemand,
    preemptor: Preemptor,
    ledger: QuotaLedger,
    spent: Sequence[PodInfo],
    *,
    spare_guaranteed: bool,
    spare_budgets: bool,
    spare_in_flight: bool,
    within: frozenset[str] | None,
    layout: JobLayout,
    now: float,
    priority_cap: int | None,
    spared: frozenset[str],
    pacing: Pacing,
) -> Found | NotFound | Pacing:
    """:func:`search_victims`'s walk, paced by ``pacing`` where holding units back may
    apply (:mod:`.deferral`); when it held units back and cannot tell its answer is
    the one the walk without would give, the pacing to walk again with."""
    simulation = Simulation(
        state,
        demand,
        within_min=preemptor.within_min_by_own_work,
        within=within,
        slices=layout.slices,
        bound=layout.bound,
        released=layout.released,
    )
    fit = simulation.fit
    wants = Wants(simulation)
    if wants.nodes_ok and wants.quota_ok:
        placements = fit.place() if layout.released else None
        if placements is not None:  # the room that yields is enough: no one is evicted
            return Found([], placements, {})
        return NotFound([FITS_ALREADY], fits=True, fits_now=simulation.fits_now())
    spare_budgets = spare_budgets or state.args.pdb_policy == "Strict"
    deferral = None
    if pacing is not Pacing.IN_ORDER and Deferral.applies(
        state,
        fit,
        budgets=spare_budgets and bool(state.budgets),
        within_min=simulation.within_min,
        quota_ok=wants.quota_ok,
    ):
        deferral = Deferral(state, fit, simulation.counts_for_job, horizon=pacing is Pacing.HORIZON)
    budgets = BudgetUse(state.budgets.values(), spent)
    removed: list[VictimGroup] = []
    skipped_for_min: list[str] = []
    skipped_for_budgets: list[str] = []
    skipped_for_runtime: list[str] = []
    skipped_in_flight = False
    skipped_for_fairness: list[str] = []
    runtimes = min_runtimes(state)
    in_flight = gangs_in_flight(state) if spare_in_flight else frozenset()
    protected: list[float] = []  # when each victim spared for its minimum runtime is not
    below_min: dict[str, str] = {}
    guaranteed_skipped = False
    refused = state.book.refused_victims.get(demand.job, ())
    for group in find_victim_groups(
        state,
        preemptor,
        wants,
        ledger,
        priority_cap,
        deferral,
    ):
        if refused and any(pod.key in refused for pod in group.pods):
            continue  # an earlier plan stalled on it: its eviction is refused
        if group.job in spared:
            continue  # the planner searches again without it (:mod:`.ranking`)
        if group.other_quota:
            runtime = runtimes.get(group.quota, 0.0)
            until = protected_until(state, group, runtime) if runtime > 0 else 0.0
            if until > now:
                protected.append(until)
                skipped_for_runtime.append(
                    f"{group.job} until {format_time(until)} (quota {group.quota})"
                )
                continue
            if group.job in in_flight:
                # Spared: the planner searches again with it allowed if nothing is found.
                skipped_in_flight = True
                continue
            violation, guaranteed = simulation.min_violations(group)
            if violation is not None:
                skipped_for_min.append(violation)
                continue
            if guaranteed is not None:
                if spare_guaranteed:
                    skipped_for_min.append(guaranteed)
                    guaranteed_skipped = True
                    continue
                below_min[group.job] = guaranteed
        if group.rule is Rule.FAIR_SHARE:
            # With fair sharing, a borrower takes from another quota only while the gap
            # between their shares narrows (and only victims of its priority or lower).
            widens = gap_widens(
                state, demand, preemptor, ledger, simulation.ledger, [group], taken=False
            )
            if widens is not None:
                skipped_for_fairness.append(widens)
                continue
        if spare_budgets and state.budgets:
            broken = budgets.violations(group.pods)
            if broken:
                skipped_for_budgets.extend(broken)
                continue
            budgets.take(group.pods)
        simulation.take(group)
        removed.append(group)
        if wants.satisfied():
            break
    else:
        if deferral is not None and (skipped_for_min or deferral.cut_short):
            # The units met out of order may have met other min checks; or the walk met
            # only the units up to its horizon.
            return _walk_again(deferral)
        reasons = _why_no_fit(demand, simulation, skipped_for_min)
        if skipped_for_fairness:
            reasons.append("spared by fair sharing: " + skipped_for_fairness[0])
        if skipped_for_runtime:
            reasons.append(
                "spared for their minimum runtime: " + "; ".join(sorted(skipped_for_runtime))
            )
        if skipped_for_budgets:
            policy = state.args.pdb_policy
            reasons.append(
                f"spared for their PodDisruptionBudgets (pdbPolicy {policy}): "
                + "; ".join(sorted(set(skipped_for_budgets)))
            )
        retry_at = min(protected) if protected else None
        return NotFound(
            reasons,
            guaranteed_skipped,
            bool(skipped_for_budgets),
            retry_at=retry_at,
            in_flight_skipped=skipped_in_flight,
        )

    if deferral is not None:
        if (
            skipped_for_min
            or below_min
            or not deferral.keeps_guarantees(simulation.ledger, removed, simulation.guarding)
        ):
            return _walk_again(deferral)
        removed.sort(key=lambda group: group.position)
    kept = _minimised(simulation, removed)
    if preemptor.fair_share is not None:
        # The gap was checked group by group as they were taken; the plan kept (own
        # quota's groups may have gone back) is checked whole.
        widens = gap_widens(state, demand, preemptor, ledger, simulation.ledger, kept, taken=True)
        if widens is not None:
            return NotFound(
                [f"spared by fair sharing: {widens}"], in_flight_skipped=skipped_in_flight
            )
    placements = fit.place()
    if placements is None:  # cannot happen: fits() said yes for this very state
        return NotFound(["internal: the placement that fit could not be rebuilt"])
    kept.sort(key=lambda g: g.order_key)
    jobs = {group.job for group in kept}
    return Found(kept, placements, {j: why for j, why in below_min.items() if j in jobs})


def _minimised(simulation: Simulation, removed: list[VictimGroup]) -> list[VictimGroup]:
    """The groups of ``removed`` the job still needs: the last one was; each earlier one
    is put back, newest first, and kept only if the job no longer fits without it (a pod
    an elastic job shed is kept while the rest of its job goes: :func:`evicted_whole`)."""
    fit = simulation.fit
    kept = [removed[-1]]
    for group in reversed(simulation.spare_idle(removed)):
        if group.shed and evicted_whole(group.job, kept):
            kept.append(group)  # the rest of its job goes: its pods shed first go too
            continue
        simulation.restore(group)
        if fit.fits() and (not simulation.counts_for_job(group.quota) or simulation.admits()):
            continue
        simulation.take(group)
        kept.append(group)
    if simulation.within_min:
        # Sparing another quota's group can lift the within-min requirement, and so let
        # an own group kept before it go back too: try again until nothing changes.
        spared = True
        while spared:
            spared = False
            for group in list(kept):
                if group.shed and evicted_whole(group.job, kept):
                    continue
                simulation.restore(group)
                if fit.fits() and simulation.admits():
                    kept.remove(group)
                    spared = True
                else:
                    simulation.take(group)
    return kept


def evicted_whole(job: str, groups: list[VictimGroup]) -> bool:
    """Does one of ``groups`` evict what is left of ``job`` (a group not of pods shed one by
    one)?  Then the pods of ``job`` shed before it go too: sparing one would leave the
    job running below the minimum it declares."""
    return any(group.job == job and not group.shed for group in groups)


def _why_no_fit(demand: JobDemand, simulation: Simulation, skipped_for_min: list[str]) -> list[str]:
    fit = simulation.fit
    reasons = []
    if not fit.nodes_suffice():
        placed_max = sum(min(shape.total, len(shape.pods)) for shape in fit.shapes)
        reasons.append(
            f"the whole job would not fit even after evicting every allowed victim: room for "
            f"{placed_max} of its {len(demand.unplaced)} unplaced pods"
        )
    elif not fit.fits():
        reasons.append("the job's pods could not all be placed at once on the freed room")
    reasons.extend(
        job_admission_failures(simulation.ledger, demand.quota, demand.np_request, demand.p_request)
    )
    if skipped_for_min:
        reasons.append(f"spared to keep quotas at their min: {skipped_for_min[0]}")
    return reasons or ["no allowed victims"]


def merged_refusal(retried: Found | NotFound, first: NotFound) -> Found | NotFound:
    """A search retried with less spared: its plan, or its refusal with what was skipped
    in either search (it still counts) and the earlier time to ask again."""
    if isinstance(retried, Found):
        return retried
    return NotFound(
        retried.reasons,
        retried.guaranteed_skipped or first.guaranteed_skipped,
        retried.budget_skipped or first.budget_skipped,
        retry_at=earliest(retried.retry_at, first.retry_at),
        in_flight_skipped=retried.in_flight_skipped or first.in_flight_skipped,
    )


def earliest(first: float | None, second: float | None) -> float | None:
    """The earlier of two optional times."""
    if first is None or second is None:
        return first if second is None else second
    return min(first, second)
