"""One job's plan: the search's passes, the domain a topology job is planned in, and
the plans the ranking asks for after the walk's.

:func:`find_plan` is what the planner (:mod:`.planner`) asks once the job is eligible:
the walk (:func:`~.search.search_victims`) again with less spared while nothing is found
(guarantees in a resource the job does not ask for, PodDisruptionBudgets, other quotas'
gangs in flight), in each domain of a required topology level, the cheapest domain's
plan kept; then, where the walk's order can miss the comparator
(:class:`~.ranking.PlanRank`), one more plan below its highest victim priority
(:func:`~.ranking.lower_priority_plan`), and one sparing the victim job that loses most
of the plan's work, or whose notice is long (:func:`~.ranking.plan_sparing_one_victim`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from extender.core.objects import PodInfo
from extender.core.placement.demand import JobDemand
from extender.core.placement.domains import node_domains
from extender.core.preemption.domains import DomainBounds
from extender.core.preemption.policy import Preemptor
from extender.core.preemption.ranking import (
    PlanRank,
    lower_priority_plan,
    plan_rank,
    plan_sparing_one_victim,
    ranked_priority,
)
from extender.core.preemption.search import (
    Found,
    JobLayout,
    NotFound,
    earliest,
    merged_refusal,
    search_victims,
)
from extender.core.state import ClusterState
from quota.accounting import QuotaLedger


def find_plan(
    state: ClusterState,
    demand: JobDemand,
    preemptor: Preemptor,
    ledger: QuotaLedger,
    now: float,
    released: frozenset[str] = frozenset(),
) -> Found | NotFound:
    """The plan's victims, on the settled ``ledger`` (with the room of the reserved pods
    ``released`` free): in the cheapest domain for a job requiring one."""
    spent = [pod for pod in state.leaving() if not pod.terminating]
    request = state.declarations.topology_request(demand.job)
    layout = JobLayout(state, demand.job, released)
    if request is None or not request.required:
        # A preferred level never causes an eviction a required one would not: the plan
        # is made as for a job without topology (slices, which are required, kept).
        return _plan(state, demand, preemptor, ledger, spent, layout=layout, now=now)
    return _plan_in_cheapest_domain(
        state, demand, preemptor, ledger, spent, request.level, layout, now
    )


def _plan(
    state: ClusterState,
    demand: JobDemand,
    preemptor: Preemptor,
    ledger: QuotaLedger,
    spent: Sequence[PodInfo],
    within: frozenset[str] | None = None,
    *,
    layout: JobLayout,
    now: float,
) -> Found | NotFound:
    """The plan's search (:func:`~extender.core.preemption.search.search_victims`), again
    allowing what it spares when nothing is found without: victims that break a guarantee
    in a resource the job does not ask for, or a PodDisruptionBudget (under pdbPolicy
    BestEffort), budgets first; and only when no plan is found even so, another quota's
    gang in flight (:mod:`~extender.core.preemption.protection`), the same passes again.
    Then again below the found plan's highest victim priority while that ranks better
    (:func:`~extender.core.preemption.ranking.lower_priority_plan`), and once sparing the
    victim job that loses most of the plan's work, or one whose notice is long
    (:func:`~extender.core.preemption.ranking.plan_sparing_one_victim`), a plan found so
    asked below its priority again.
    ``within``: the nodes of the one domain the job is planned in."""
    best_effort = state.args.pdb_policy == "BestEffort"

    def search(
        spare_guaranteed: bool,
        spare_budgets: bool,
        spare_in_flight: bool,
        cap: int | None,
        spared: frozenset[str] = frozenset(),
    ) -> Found | NotFound:
        found = search_victims(
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
            priority_cap=cap,
            spared=spared,
        )
        if isinstance(found, Found) and not spare_budgets:
            return dataclasses.replace(found, breaks_budgets=True)
        return found

    def passes(spare_in_flight: bool) -> tuple[Found | NotFound, tuple[bool, bool, bool]]:
        spares = (True, True, spare_in_flight)
        found = search(*spares, None)
        for spare_guaranteed, spare_budgets in ((True, False), (False, True), (False, False)):
            if isinstance(found, Found):
                break
            if (not spare_budgets and not (best_effort and found.budget_skipped)) or (
                not spare_guaranteed and not found.guaranteed_skipped
            ):
                continue
            spares = (spare_guaranteed, spare_budgets, spare_in_flight)
            found = merged_refusal(search(*spares, None), found)
        return found, spares

    found, spares = passes(spare_in_flight=True)
    if isinstance(found, NotFound) and found.in_flight_skipped:
        retried, spares = passes(spare_in_flight=False)
        found = merged_refusal(retried, found)
    if isinstance(found, NotFound):
        return found

    def below(cap: int) -> Found | NotFound:
        return search(*spares, cap)

    found = lower_priority_plan(state, preemptor, found, below, now)
    sparing = plan_sparing_one_victim(
        state, preemptor, found, lambda spared, cap: search(*spares, cap, spared), now
    )
    if sparing is found:
        return found
    return lower_priority_plan(state, preemptor, sparing, below, now)


def _plan_in_cheapest_domain(
    state: ClusterState,
    demand: JobDemand,
    preemptor: Preemptor,
    ledger: QuotaLedger,
    spent: Sequence[PodInfo],
    level: str,
    layout: JobLayout,
    now: float,
) -> Found | NotFound:
    """For a job that must stay inside one domain of ``level``: the plan of each domain
    (victims from that domain only), and the cheapest of them by :class:`PlanRank`.  A
    domain holding pods of the job already bound is the only one; a domain that holds the
    job as it is ends the search (no preemption).  Domains are planned cheapest bound
    first, until no domain left has a bound below the best plan's highest victim priority;
    at that priority, each domain whose count bound is below the best plan's count, then
    ``TIED_DOMAINS`` more, for the one losing the least work.  (No bound on lost work or
    wait is kept: a domain past those may rank better by them, and is not planned.)"""
    domains = node_domains(state, level, {pod.node_name or "" for pod in layout.bound})
    if not domains:
        return NotFound([f"no node has the label {level} its required topology names"])
    reasons: list[str] = []
    retry_at: float | None = None
    bounds = DomainBounds(state, demand, domains, layout.released)
    ranked: list[tuple[tuple[int, int, int], str, frozenset[str]]] = []
    for value in sorted(domains):
        bound = bounds.of(value)
        if isinstance(bound, str):
            reasons.append(f"{level}={value}: {bound}")
        else:
            priority, count = bound
            ranked.append(
                ((0, ranked_priority(state, preemptor, priority), count), value, domains[value])
            )
    # Cheapest first by a bound no plan of the domain can beat: once the best plan found
    # has a lower highest victim priority than the next domain's bound, no domain left can
    # do better.  At the same priority the bound says nothing of lost work (which ranks
    # before the count, and more victims may lose less), so a domain is still planned
    # while its count bound is below the best plan's count, and TIED_DOMAINS past that.
    ranked.sort()
    best: tuple[PlanRank, Found] | None = None
    ties = 0
    for floor, value, names in ranked:
        if best is not None:
            head = (best[0].broken, best[0].priority)
            if head < floor[:2]:
                break
            if head == floor[:2] and floor[2] >= best[0].pods:
                if ties >= TIED_DOMAINS:
                    break
                ties += 1
        found = _plan(state, demand, preemptor, ledger, spent, names, layout=layout, now=now)
        if isinstance(found, NotFound):
            if found.fits:  # a domain holds the job as it is: nothing is to be evicted
                return found
            reasons.append(f"{level}={value}: {'; '.join(found.reasons)}")
            retry_at = earliest(retry_at, found.retry_at)
            continue
        rank = plan_rank(state, preemptor, found, now, value)
        if best is None or rank < best[0]:
            best = (rank, found)
    if best is None:
        return NotFound(
            [f"no {level} domain holds the whole job, even after evictions", *reasons],
            retry_at=retry_at,
        )
    return best[1]


#: Domains at the best plan's priority, their count bound not below its count, still
#: planned for less lost work.
TIED_DOMAINS = 1
