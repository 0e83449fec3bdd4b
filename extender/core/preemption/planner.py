"""Job-level preemption: the PostFilter's decision for one job.

:func:`plan_job_preemption` follows docs/design.md's steps:

1. *Eligible?*  The job may trigger preemption, is not in flight (its own
   reservation, or kube-scheduler's preemption for it: see
   :mod:`extender.core.authority`), has at least its min-available pods,
   uses only constraints the core models, and its quota could admit it once
   victims are gone.
   (:mod:`extender.core.preemption.eligibility`)
2. *Candidates* and 3. *order*: :mod:`extender.core.preemption.candidates`.
4. *Simulate*: remove victim groups in order from copies of the nodes and
   the quota ledger until every unplaced pod of the job fits and its quota
   checks hold.  A group that could not help any more (not on a node the
   job can use once node room suffices; not in the job's quota tree once
   the quota holds) is passed over, and so is one whose eviction would take a
   quota on its path below its ``min`` in a resource the job asks for.  One
   that would take a quota below its ``min`` in another resource it governs
   is passed over too, unless no plan exists without such victims: then the
   search runs again allowing them, and their reasons name the resource.
5. *Minimise*: put groups back in reverse order while the job still fits.
   (Steps 4 and 5: :mod:`extender.core.preemption.search`; plans compare by
   :mod:`extender.core.preemption.ranking`.)  With no plan, room held for a
   lower-priority job of the quota and not used yet may yield
   (:mod:`extender.core.preemption.yielding`).  A borrower makes no plan evicting other
   quotas' work for room a waiting higher-priority job of its quota would take
   (:mod:`extender.core.preemption.precedence`).
6. *Commit only if the whole job fits*: the result is either a
   :class:`PreemptionPlan` (victims with reasons, pod → node placement) or a
   :class:`Refusal` with reasons.  Applying a plan is the caller's business.

Pure and deterministic: the same state and time give the same answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from base.times import format_time
from extender.core.budgets import BudgetUse
from extender.core.objects import PodInfo
from extender.core.placement.demand import AdmissionWait, JobDemand, job_demand
from extender.core.placement.fairshare import borrowing_wait
from extender.core.preemption.candidates import describe
from extender.core.preemption.cost import last_save, victim_notice
from extender.core.preemption.eligibility import ineligibility
from extender.core.preemption.fairness import preemptor_share
from extender.core.preemption.plans import find_plan
from extender.core.preemption.policy import (
    Preemptor,
    Rule,
    own_evictable_requests,
    preemptor_of,
)
from extender.core.preemption.precedence import room_taker
from extender.core.preemption.protection import gangs_in_flight
from extender.core.preemption.search import Found, NotFound, evicted_whole, never_fits_now
from extender.core.preemption.yielding import reserved_pods, yield_steps, yieldable_reservations
from extender.core.restart import restarted_jobs
from extender.core.state import (
    ClusterState,
    Overlay,
    Reservation,
)
from quota.accounting import QuotaLedger
from quota.admission import would_borrow
from quota.tree import QuotaMembershipError


@dataclass(frozen=True, slots=True)
class Victim:
    pod: PodInfo
    quota: str
    job: str  # the victim's own job: a gang is evicted whole
    reason: str
    #: The policy that allows it.
    rule: Rule
    #: Seconds it may take to save its work and exit before it is evicted.
    notice_seconds: float = 0.0
    #: Its Job is restarted whole rather than the pod evicted (:mod:`extender.core.restart`).
    restart_job: bool = False


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    job: str
    quota: str
    victims: tuple[Victim, ...]
    placements: Mapping[str, str]  # pod key → node
    #: Reservations of lower-priority jobs of the quota whose room the plan takes
    #: (:mod:`.yielding`): the front door ends them.
    yielded: tuple[Reservation, ...] = ()

    def reservation(self, now: float, timeout: float) -> Reservation:
        # The room is held through the longest notice of its victims, and as long as
        # the reservations it takes were; their victims, still leaving, are its own now.
        notice = max((v.notice_seconds for v in self.victims), default=0.0)
        taken_over = (key for held in self.yielded for key in held.victims)
        victims = dict.fromkeys([*(victim.pod.key for victim in self.victims), *taken_over])
        return Reservation(
            job=self.job,
            quota=self.quota,
            placements=dict(self.placements),
            victims=tuple(victims),
            created=now,
            expires=max([now + timeout + notice, *(r.expires for r in self.yielded)]),
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    job: str
    reasons: tuple[str, ...]
    #: When a plan may exist (a victim's minimum runtime ends), or ``None``.
    retry_at: float | None = None
    #: Does the job fit without evicting anything on the nodes' room free now, no pod
    #: leaving first (as this state sees it)?  Then most likely a binding not seen yet
    #: keeps it out.  Asked while the state is unchanged; a hint about the moment, not the
    #: decision: refusals equal but for it are the same.
    fits_now: Callable[[], bool] = field(default=never_fits_now, compare=False)


def plan_job_preemption(state: ClusterState, job: str, now: float) -> PreemptionPlan | Refusal:
    """Decide whether evicting some running pods lets the *whole* job run, and which."""
    try:
        demand = job_demand(state, job)
    except QuotaMembershipError as error:
        return Refusal(job, (error.reason,))
    except IndexError:
        return Refusal(job, ("the job has no pods",))
    # Earlier plans' victims still leaving (and terminating pods) count as gone for every
    # rule: the plan decides what it would once they are gone.
    settled = Overlay.settled(state)
    ledger = settled.ledger
    refusal = ineligibility(state, demand, now, ledger)
    found: Found | NotFound = NotFound(refusal)
    preemptor: Preemptor | None = None
    held_back = False
    if not refusal:
        preemptor = _preemptor(state, demand, ledger)
        # Borrowing past its quota's fair share while another quota's work waits, or in
        # its reborrow backoff: no plan either (the room it would free is not its to
        # take), and no room yields to it; planned again when that wait ends.
        wait = (
            borrowing_wait(state, demand, now, ledger, evicting=True) if preemptor.borrows else None
        )
        if wait is not None:
            found, held_back = NotFound([wait.reason], retry_at=wait.until), True
        else:
            found = find_plan(state, demand, preemptor, ledger, now)
            wait = _borrowing_after(state, demand, preemptor, found, now)
            if wait is None:
                # Room its quota's higher-priority job would take: no room yields to it.
                wait = room_taker(state, demand, preemptor, found, ledger, now)
            if wait is not None:
                found, held_back = NotFound([wait.reason], retry_at=wait.until), True
    yielded: tuple[Reservation, ...] = ()
    if isinstance(found, NotFound) and not found.fits and not held_back:
        # Room held for a lower-priority job of the quota, not used yet, may yield.
        for step in yield_steps(yieldable_reservations(state, demand)):
            released = reserved_pods(state, step)
            freed = Overlay.settled(state, released)
            if ineligibility(state, demand, now, freed.ledger):
                continue
            freed_preemptor = _preemptor(state, demand, freed.ledger)
            retried = find_plan(state, demand, freed_preemptor, freed.ledger, now, released)
            if not isinstance(retried, Found):
                continue
            if _borrowing_after(state, demand, freed_preemptor, retried, now, released):
                continue
            if room_taker(state, demand, freed_preemptor, retried, freed.ledger, now):
                continue
            found, yielded, preemptor = retried, step, freed_preemptor
            break
    if isinstance(found, NotFound):
        return Refusal(job, tuple(found.reasons), found.retry_at, found.fits_now)
    assert preemptor is not None  # a plan was searched for, so the job was eligible
    spent = [pod for pod in state.leaving() if not pod.terminating]
    victims: list[Victim] = []
    budgets = BudgetUse(state.budgets.values(), spent)
    in_flight = gangs_in_flight(state)
    for group in found.kept:
        reason = describe(group, preemptor, state.tree[group.quota].governed)
        if group.job in found.below_min:
            reason += f"; {found.below_min[group.job]}, and no plan spares it"
        broken = budgets.violations(group.pods)
        if broken:
            reason += f"; breaks {', '.join(broken)}, and no plan spares it"
        if group.other_quota and group.job in in_flight:
            reason += "; its gang is in flight (room held for pods not bound yet), and no "
            reason += "plan spares it"
        budgets.take(group.pods)
        if found.chosen_over:
            reason += f"; {found.chosen_over}"
        if group.shed and not evicted_whole(group.job, found.kept):
            minimum = state.victims.elastic().get(group.job)
            reason += (
                f"; one pod above job {group.job}'s minimum of {minimum}: the job keeps running"
            )
        for pod in group.pods:
            # A time, not seconds lost: the same answer whenever it is asked.
            said = f"{reason}; it loses its work since {format_time(last_save(pod, now))}"
            notice, save = victim_notice(state, pod, now)
            if save is not None:
                saved = format_time(save)
                said = f"{reason}; notice until just after its next save at {saved}: it "
                said += f"loses its work since {saved}"
            elif notice:
                said += f"; {notice:g}s notice to save its work"
            victims.append(Victim(pod, group.quota, group.job, said, group.rule, notice))
    restarted = restarted_jobs(state, ((victim.pod, victim.notice_seconds) for victim in victims))
    if restarted:
        said = "; every pod of its Job goes: the Job is restarted (suspended, then resumed)"
        victims = [
            dataclasses.replace(
                victim,
                reason=victim.reason + _restart_said(restarted[victim.pod.key], victim, said),
                notice_seconds=restarted[victim.pod.key],
                restart_job=True,
            )
            if victim.pod.key in restarted
            else victim
            for victim in victims
        ]
    return PreemptionPlan(job, demand.quota, tuple(victims), found.placements, yielded)


def _restart_said(notice: float, victim: Victim, said: str) -> str:
    """What a restarted victim's reason adds: the restart, and the Job's notice when it is
    longer than the victim's own."""
    if notice > victim.notice_seconds:
        return f"{said} once its pods' notice ends, {notice:g}s (the longest of its Job's)"
    return said


def _borrowing_after(
    state: ClusterState,
    demand: JobDemand,
    preemptor: Preemptor,
    found: Found | NotFound,
    now: float,
    released: Collection[str] = (),
) -> AdmissionWait | None:
    """Why a plan that leaves its job borrowing may not be made: the borrowing rules
    (:func:`~extender.core.placement.fairshare.borrowing_wait`: reborrow backoff,
    guarantee reserve, fair sharing), judged on the ledger once the plan's victims are
    gone.  Only for a job :func:`_preemptor` found within its ``min`` by its own
    lower-priority work: a plan taking only part of that work leaves it borrowing all
    the same, and it may not borrow by evicting what admission would not have lent it."""
    if not isinstance(found, Found) or not preemptor.within_min_by_own_work:
        return None
    after = Overlay.settled(state, released)
    for group in found.kept:
        after.charge(group.quota, group.requests, -1)
    if not would_borrow(after.ledger, demand.quota, demand.request, demand.asks):
        return None
    return borrowing_wait(state, demand, now, after.ledger, evicting=True)


def _preemptor(state: ClusterState, demand: JobDemand, ledger: QuotaLedger) -> Preemptor:
    """The job as the policies see it.  Whether it borrows is judged on the settled
    ``ledger``, after its own quota's pods it may evict are gone: a job that fits its
    ``min`` once its own lower-priority work is evicted reclaims from borrowers; it does
    not borrow."""
    preemptor = preemptor_of(state, demand.job, demand.quota, demand.unplaced, demand.asks)
    if not would_borrow(ledger, demand.quota, demand.request, demand.asks):
        return preemptor
    request = dict(demand.request)
    for name, amount in own_evictable_requests(state, preemptor).items():
        request[name] = request.get(name, 0) - amount
    borrows = would_borrow(ledger, demand.quota, request, demand.asks)
    return dataclasses.replace(
        preemptor,
        borrows=borrows,
        within_min_by_own_work=not borrows,
        fair_share=preemptor_share(state, demand, ledger) if borrows else None,
    )
