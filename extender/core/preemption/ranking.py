"""How plans compare: the one comparator, and the search it asks for across quotas.

Plans that each free room for the whole job compare by :class:`PlanRank`, the first
difference deciding.  The planner asks for it where it has several plans (one per
topology domain) and, since the walk takes the borrowing quotas' work before the job's
own quota's, for one more plan below the walk's highest victim priority
(:func:`lower_priority_plan`); since it takes lower priority first and the largest
frees the most room, for one more plan sparing the victim job that loses most of the
plan's work, or one whose notice is long (:func:`plan_sparing_one_victim`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from extender.core.notice import longest_notice
from extender.core.objects import PodInfo
from extender.core.preemption.cost import LostWork, evicted_loss, victim_notice, victims_cost
from extender.core.preemption.policy import Preemptor, within_rule
from extender.core.preemption.protection import gangs_in_flight
from extender.core.preemption.search import Found, NotFound
from extender.core.preemption.walk import settled_units
from extender.core.state import ClusterState

#: The highest victim priority of a plan evicting no one (room that yields): below all.
NO_VICTIM = -(2**31) - 1
#: Under ``victimRanking: LostWorkFirst``, the priority step's value of a victim the job
#: outranks: all of them alike, above a plan evicting no one.
OUTRANKED = NO_VICTIM + 1


class PlanRank(NamedTuple):
    """How plans that each free room for the whole job compare: the one comparator,
    each step a field, the first difference decides.

    1. ``broken``: the fewest guarantees (a quota's ``min`` in a resource the job does not
       ask for) and PodDisruptionBudgets broken, and other quotas' gangs in flight taken
       (:mod:`.protection`); a plan breaks one only when none spares it.
    2. ``priority``: the lowest highest victim priority (priority is what admins say a job
       is worth: no lower-priority work is spared by destroying higher-priority work),
       across quotas too: a borrower's job is not taken where the job's own quota's
       lower-priority work would do (:func:`lower_priority_plan`).  Under
       ``victimRanking: LostWorkFirst``, every victim the job outranks counts here as
       :data:`OUTRANKED` (:func:`ranked_priority`): the job may evict any of them, so
       what their eviction destroys decides among them (step 3), then their priority
       (step 4); a victim of the job's priority or above keeps its own.
    3. ``lost``: the least work lost (:mod:`.cost`: accelerator-seconds, then pod-seconds,
       since each victim's last checkpoint or start; for a victim given notice to its
       next save, the margin after it: :func:`~.cost.evicted_loss`).  Before the count:
       a gang that ran an hour unsaved is not taken to spare two pods that started a
       minute ago.  Within one plan the walk already takes, among victims of one
       priority, those whose work began latest first.
    4. ``highest``: the lowest highest victim priority, as it is (under ``PriorityFirst``
       step 2 has decided it already).
    5. ``pods``: the fewest victim pods.
    6. ``wait``: the shortest wait for the job, the longest notice among its victims
       (:func:`~.cost.victim_notice`).  After lost work: a notice is bounded by the cap
       the admins set, and it is time the victims spend saving their work; work lost is
       lost for good.
    7. ``where``: the domain's name, for a stable answer.
    """

    broken: int
    priority: int
    lost: LostWork
    highest: int
    pods: int
    wait: float
    where: str


def plan_rank(
    state: ClusterState, preemptor: Preemptor, found: Found, now: float, where: str = ""
) -> PlanRank:
    """``found``'s :class:`PlanRank` at ``now``, for ``preemptor``."""
    pods = [pod for group in found.kept for pod in group.pods]
    lost, wait = victims_cost(state, pods, now)
    highest = max((pod.priority for pod in pods), default=NO_VICTIM)
    return PlanRank(
        len(found.below_min) + int(found.breaks_budgets) + _in_flight_taken(state, found),
        ranked_priority(state, preemptor, highest),
        lost,
        highest,
        len(pods),
        wait,
        where,
    )


def ranked_priority(state: ClusterState, preemptor: Preemptor, priority: int) -> int:
    """:class:`PlanRank`'s step 2 for a plan whose highest victim priority is
    ``priority``: itself, or under ``victimRanking: LostWorkFirst`` :data:`OUTRANKED`
    when ``preemptor`` outranks it."""
    if state.args.victim_ranking == "LostWorkFirst" and NO_VICTIM < priority < preemptor.priority:
        return OUTRANKED
    return priority


def outranked_cap(state: ClusterState, preemptor: Preemptor, top: int) -> int:
    """The highest victim priority a search for a plan ranking as well as one whose
    highest victim priority is ``top`` may take: ``top``, or under ``LostWorkFirst``
    any priority ``preemptor`` outranks when it outranks ``top``."""
    if ranked_priority(state, preemptor, top) == OUTRANKED:
        return max(top, preemptor.priority - 1)
    return top


def _in_flight_taken(state: ClusterState, found: Found) -> int:
    """How many of other quotas' gangs in flight ``found`` takes."""
    if not found.kept:
        return 0
    in_flight = gangs_in_flight(state)
    return sum(1 for g in found.kept if g.other_quota and g.job in in_flight)


def lower_priority_plan(
    state: ClusterState,
    preemptor: Preemptor,
    found: Found,
    search_below: Callable[[int], Found | NotFound],
    now: float,
) -> Found:
    """:class:`PlanRank`'s step 2 across quotas.  The walk takes the borrowing quotas'
    work before the job's own quota's, so its plan may evict another quota's job of
    higher priority than own work that would also do.  While the plan's highest-priority
    victim is another quota's and the job's own quota runs work of lower priority it may
    evict, search again for victims below that priority only (the same guarantees and
    budgets spared), and keep what ranks better."""
    policy = state.tree[preemptor.quota].policy
    if within_rule(preemptor, policy) is None:
        return found
    lowest: int | None = None
    while found.kept:
        top = max(group.priority for group in found.kept)
        if not any(group.other_quota and group.priority == top for group in found.kept):
            return found
        if lowest is None:  # read once, and only here: it settles every pod leaving
            lowest = lowest_own_priority(state, preemptor.quota)
        if lowest is None or lowest >= top:
            return found
        lower = search_below(top - 1)
        if isinstance(lower, NotFound):
            return found
        if not plan_rank(state, preemptor, lower, now) < plan_rank(state, preemptor, found, now):
            return found
        spared = sorted({group.job for group in found.kept if group.priority == top})
        found = dataclasses.replace(
            lower,
            chosen_over=found.chosen_over
            or (
                f"chosen over evicting {', '.join(spared)} (priority {top}): "
                "lower-priority victims first"
            ),
        )
    return found


def lowest_own_priority(state: ClusterState, quota: str) -> int | None:
    """The lowest priority of ``quota``'s victim units as a plan sees them: a unit some
    of whose pods are leaving is keyed by the pods that stay (:func:`settled_units`), so
    the search below a borrower's priority runs whether or not they have gone yet;
    ``None`` if the quota has none."""
    settled = settled_units(state, promised=state.book.promised_victims())
    lowest = next(
        (entry[0] for entry in state.victims.units(quota) if entry[2] not in settled), None
    )
    for entry in settled.values():
        if entry is not None and entry[3] == quota and (lowest is None or entry[0] < lowest):
            lowest = entry[0]
    return lowest


#: A victim's notice longer than this is worth a second search for a plan waiting less:
#: the job waits through it (below its quota's ``min``, if it reclaims one).
LONG_NOTICE_SECONDS = 10.0


def plan_sparing_one_victim(
    state: ClusterState,
    preemptor: Preemptor,
    found: Found,
    search_sparing: Callable[[frozenset[str], int], Found | NotFound],
    now: float,
) -> Found:
    """:class:`PlanRank`'s steps 3 to 6 where the walk's order misses them.  The walk
    takes lower priority first, among victims of one priority those whose unsaved work
    began latest, and then puts back what the job no longer needs, latest taken first;
    so a plan may evict a job that is most of the plan's lost work (a gang that ran long
    and saves nothing: it frees the most room at once, so the cheaper victims taken
    before it are put back), or make the job wait long on one victim's notice where
    another's would end sooner (a victim that has just saved gets notice to its next
    save).  Search once more, at the plan's highest priority or lower (under
    ``LostWorkFirst``, at any priority the job outranks, when it outranks that), sparing the victim
    job (:func:`spared_for`) losing at least half the plan's work, else the one with the
    longest notice when it is over :data:`LONG_NOTICE_SECONDS`, and keep what ranks
    better.  The second walk is not bounded first: where the spared job was the only
    candidate it finds nothing, at up to the first walk's time again (docs/benchmarks.md,
    the planner at 15,000 nodes)."""
    spare = spared_for(state, found, now)
    if spare is None:
        return found
    job, why = spare
    top = max(group.priority for group in found.kept)
    retried = search_sparing(frozenset({job}), outranked_cap(state, preemptor, top))
    if isinstance(retried, NotFound):
        return found
    before = plan_rank(state, preemptor, found, now)
    after = plan_rank(state, preemptor, retried, now)
    if not after < before:
        return found
    step = next(
        said
        for said, differs in (
            ("lower-priority victims", after.priority != before.priority),
            ("less work lost", after.lost != before.lost),
            ("lower-priority victims", after.highest != before.highest),
            ("fewer victims", after.pods != before.pods),
            ("a shorter wait for the victims' notice", True),
        )
        if differs
    )
    return dataclasses.replace(
        retried, chosen_over=found.chosen_over or f"chosen over evicting {job} ({why}): {step}"
    )


def spared_for(state: ClusterState, found: Found, now: float) -> tuple[str, str] | None:
    """The victim job :func:`plan_sparing_one_victim` searches again without, and why,
    or ``None``."""
    if not found.kept:
        return None
    pods: dict[str, list[PodInfo]] = {}
    for group in found.kept:
        pods.setdefault(group.job, []).extend(group.pods)
    losses = {job: evicted_loss(state, of, now) for job, of in pods.items()}
    costliest = max(sorted(losses), key=losses.__getitem__)
    cost = losses[costliest]
    total = LostWork(*(sum(part) for part in zip(*losses.values(), strict=True)))
    if cost > LostWork(0.0, 0.0) and LostWork(2 * cost[0], 2 * cost[1]) >= total:
        priority = max(group.priority for group in found.kept if group.job == costliest)
        return costliest, f"priority {priority}, which would lose most of the plan's work"
    if longest_notice(state) <= LONG_NOTICE_SECONDS:  # no victim's notice can be long
        return None
    notices = {job: max(victim_notice(state, p, now)[0] for p in of) for job, of in pods.items()}
    longest = max(sorted(notices), key=notices.__getitem__)
    if notices[longest] > LONG_NOTICE_SECONDS:
        return longest, "whose notice the job would wait longest for"
    return None
