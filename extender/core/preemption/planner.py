"""Job-level preemption: the PostFilter's decision for one job.

:func:`plan_job_preemption` follows DESIGN.md's steps:

1. *Eligible?*  The job may trigger preemption, is not in flight (its own
   reservation, or kube-scheduler's preemption for it: see
   :mod:`extender.core.authority`), has at least its min-available pods,
   uses only constraints the core models, and its quota could admit it once
   victims are gone.
2. *Candidates* and 3. *order*: :mod:`extender.core.preemption.candidates`.
4. *Simulate*: remove victim groups in order from copies of the nodes and
   the quota ledger until every unplaced pod of the job fits and its quota
   checks hold.  A group that could not help any more (not on a node the
   job can use once node room suffices; not in the job's quota tree once
   the quota holds) is passed over, and so is one whose quota would fall
   below its ``min``.
5. *Minimise*: put groups back in reverse order while the job still fits.
6. *Commit only if the whole job fits*: the result is either a
   :class:`PreemptionPlan` (victims with reasons, pod → node placement) or a
   :class:`Refusal` with reasons.  Applying a plan is the caller's business.

Pure and deterministic: the same snapshot and time give the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from extender.core.authority import nominated_elsewhere, scheduler_preemption
from extender.core.jobs import may_trigger_preemption
from extender.core.objects import PodInfo
from extender.core.preemption.candidates import (
    Preemptor,
    VictimGroup,
    describe,
    find_victim_groups,
)
from extender.core.preemption.fit import JobFit
from extender.core.scheduling import JobDemand, job_demand
from extender.core.state import ClusterState, Reservation, UnknownQuotaError
from quota.admission import (
    job_admission_failures,
    min_violation,
    unevictable_failures,
    would_borrow,
)


@dataclass(frozen=True, slots=True)
class Victim:
    pod: PodInfo
    quota: str
    job: str  # the victim's own job: a gang is evicted whole
    reason: str


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    job: str
    quota: str
    victims: tuple[Victim, ...]
    placements: Mapping[str, str]  # pod key → node

    def reservation(self, now: float, timeout: float) -> Reservation:
        return Reservation(
            job=self.job,
            quota=self.quota,
            placements=dict(self.placements),
            victims=tuple(victim.pod.key for victim in self.victims),
            created=now,
            expires=now + timeout,
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    job: str
    reasons: tuple[str, ...]


def plan_job_preemption(snapshot: ClusterState, job: str, now: float) -> PreemptionPlan | Refusal:
    """Decide whether evicting some running pods lets the *whole* job run, and which."""
    try:
        demand = job_demand(snapshot, job)
    except UnknownQuotaError as error:
        return Refusal(job, (f"pod names quota {error.args[0]!r}, which does not exist",))
    except IndexError:
        return Refusal(job, ("the job has no pods",))
    refusal = _ineligibility(snapshot, demand, now)
    if refusal:
        return Refusal(job, tuple(refusal))

    simulation = _Simulation(snapshot, demand)
    fit = simulation.fit
    wants = _Wants(simulation)
    if wants.nodes_ok and wants.quota_ok:
        return Refusal(job, ("the job fits without evicting anything",))
    preemptor = _preemptor(snapshot, demand)
    removed: list[VictimGroup] = []
    skipped_for_min: list[str] = []
    for group in find_victim_groups(snapshot, preemptor, wants):
        if group.other_quota:
            violation = simulation.min_violation(group)
            if violation is not None:
                skipped_for_min.append(violation)
                continue
        simulation.take(group)
        removed.append(group)
        if wants.satisfied():
            break
    else:
        return Refusal(job, tuple(_why_no_fit(demand, simulation, skipped_for_min)))

    # Minimise: the last group was needed; try to spare each earlier one, newest first.
    kept = [removed[-1]]
    for group in reversed(simulation.spare_idle(removed)):
        simulation.restore(group)
        if fit.fits() and (not simulation.counts_for_job(group.quota) or simulation.admits()):
            continue
        simulation.take(group)
        kept.append(group)
    placements = fit.place()
    if placements is None:  # cannot happen: fits() said yes for this very state
        return Refusal(job, ("internal: the placement that fit could not be rebuilt",))
    kept.sort(key=lambda g: g.order_key)
    victims = tuple(
        Victim(
            pod=pod,
            quota=group.quota,
            job=group.job,
            reason=describe(group, preemptor, snapshot.tree[group.quota].governed),
        )
        for group in kept
        for pod in group.pods
    )
    return PreemptionPlan(job=job, quota=demand.quota, victims=victims, placements=placements)


def _ineligibility(snapshot: ClusterState, demand: JobDemand, now: float) -> list[str]:
    job = demand.job
    if not demand.unplaced:
        return ["every pod of the job is already placed"]
    forbidden = [
        pod.name for pod in demand.unplaced if not may_trigger_preemption(pod, snapshot.args)
    ]
    if forbidden:
        return [
            f"pods may not trigger preemption ({', '.join(forbidden)}): they need the label "
            "quota.scheduling.koordinator.sh/can-preempt=true (or disableDefaultTriggerPreemption"
            " false) and no preemptionPolicy Never"
        ]
    reservation = snapshot.reservations.get(job)
    if reservation is not None and reservation.expires > now:
        return [
            f"a preemption for this job is in flight ({len(reservation.victims)} victims); "
            f"its reservation holds until {reservation.expires - now:.0f}s from now"
        ]
    marked = snapshot.marked_victims(job)
    if marked:
        return [
            f"a preemption for this job is in flight: {len(marked)} victims marked for it "
            f"are still leaving ({', '.join(sorted(marked)[:5])})"
        ]
    foreign = scheduler_preemption(snapshot, job)
    if foreign is not None:
        return [
            "kube-scheduler's own preemption is in flight for this job (it is deleting "
            f"{', '.join(foreign.victims)}); Muster does not preempt for it a second time"
        ]
    missing = pods_missing(snapshot, job)
    if missing:
        needed = snapshot.min_available(job)
        return [f"only {needed - missing} of the job's min-available {needed} pods exist yet"]
    unsupported = sorted({c for pod in demand.unplaced for c in pod.unsupported})
    if unsupported:
        return [
            "the job uses constraints Muster cannot simulate (" + ", ".join(unsupported) + "), "
            "so it will not evict for a placement it cannot check"
        ]
    if demand.quota in snapshot.tree.parents:
        return [f"quota {demand.quota} is a parent quota; pods must use a leaf quota"]
    return unevictable_failures(snapshot.ledger, demand.quota, demand.np_request)


def pods_missing(snapshot: ClusterState, job: str) -> int:
    """How many more of the job's pods must exist before it may preempt (0: enough)."""
    created = sum(1 for key in snapshot.job_members(job) if not snapshot.pods[key].finished)
    return max(0, snapshot.min_available(job) - created)


def ready_to_plan(snapshot: ClusterState, job: str) -> bool:
    """Should the PostFilter plan for ``job`` at once rather than after a short quiet
    period?  Yes when waiting could gather nothing: a pod of no gang, or a gang whose
    declared size (PodGroup ``minMember`` or the min-available annotation) its pods
    reach; and no pod of it carries a nomination Muster did not make
    (kube-scheduler's own preemption, whose victims may reach Muster a moment after the
    nomination).  A gang of undeclared size may still be growing: it waits."""
    members = snapshot.job_members(job)
    if not members:
        return False
    gang = any(snapshot.pods[key].group is not None for key in members)
    if gang and snapshot.declared_min_available(job) is None:
        return False
    return pods_missing(snapshot, job) == 0 and not nominated_elsewhere(snapshot, job)


def _preemptor(snapshot: ClusterState, demand: JobDemand) -> Preemptor:
    request = demand.request
    return Preemptor(
        job=demand.job,
        quota=demand.quota,
        priority=max(pod.priority for pod in demand.unplaced),
        created=min(pod.created for pod in snapshot.job_pods(demand.job)),
        borrows=would_borrow(snapshot.ledger, demand.quota, request, demand.asks),
        contested=demand.asks,
    )


class _Wants:
    """What the search still lacks, for the candidate walk to ask (a
    :class:`~extender.core.preemption.candidates.Wanted`).

    Once the node copies hold the whole job, or the quota checks hold, they stay
    so as more groups are removed (``nodes_ok`` and ``quota_ok`` are latched).  A
    group that could not help any more is passed over: one not on a node the job
    can use once node room suffices, one not in the job's quota tree once the
    quota holds.
    """

    def __init__(self, simulation: _Simulation) -> None:
        self.simulation = simulation
        self.fit = simulation.fit
        self.nodes_ok = self.fit.fits()
        self.quota_ok = simulation.admits()

    def __call__(self, pods: tuple[PodInfo, ...], quota: str) -> bool:
        """Could evicting these pods still help?"""
        return (not self.nodes_ok and self.fit.frees_what_is_missing(pods)) or (
            not self.quota_ok and self.simulation.counts_for_job(quota)
        )

    def lacking(self, quotas: AbstractSet[str]) -> Mapping[str, AbstractSet[str]] | None:
        """Only groups with a pod on a useful node, asking for a resource that node may
        lack, can help; unless the quota checks still fail and one of ``quotas`` counts
        in them."""
        if not self.quota_ok and any(self.simulation.counts_for_job(q) for q in quotas):
            return None
        return {} if self.nodes_ok else self.fit.lacking

    def satisfied(self) -> bool:
        """After a removal: does the whole job fit now, with its quota checks holding?"""
        self.nodes_ok = self.nodes_ok or self.fit.fits()
        self.quota_ok = self.quota_ok or self.simulation.admits()
        return self.nodes_ok and self.quota_ok


class _Simulation:
    """The job's fit on an overlay of the state (node copies and a ledger copy), with
    victim groups taken out and put back."""

    def __init__(self, snapshot: ClusterState, demand: JobDemand) -> None:
        self.snapshot = snapshot
        self.demand = demand
        self.fit = JobFit(snapshot, demand.job, demand.unplaced)
        #: The quota ledger copy of the fit's overlay: victims' usage taken out.
        self.ledger = self.fit.overlay.ledger
        self._counts: dict[str, bool] = {}
        self._guards: dict[str, tuple[str, ...]] = {}
        self._read: dict[str, bool] = {}
        self._contested = demand.asks

    def admits(self) -> bool:
        """Do the job's quota checks hold on the ledger copy?"""
        demand = self.demand
        return not job_admission_failures(
            self.ledger, demand.quota, demand.np_request, demand.p_request
        )

    def counts_for_job(self, quota: str) -> bool:
        """Does the usage of ``quota`` enter the job's quota checks?"""
        counts = self._counts.get(quota)
        if counts is None:
            tree = self.snapshot.tree
            own = self.demand.quota
            limited = {a for a in tree.ancestors(own) if tree[a].max}
            counts = quota == own or bool(limited.intersection(tree.ancestors(quota)))
            self._counts[quota] = counts
        return counts

    def _guarding(self, quota: str) -> tuple[str, ...]:
        """The quotas whose ``min`` a victim of ``quota`` must not break (those with one)."""
        guards = self._guards.get(quota)
        if guards is None:
            tree = self.snapshot.tree
            path = tree.path_below_common_ancestor(quota, self.demand.quota)
            guards = tuple(name for name in path if any(tree[name].min.values()))
            self._guards[quota] = guards
        return guards

    def min_violation(self, group: VictimGroup) -> str | None:
        guards = self._guarding(group.quota)
        if not guards:
            return None
        return min_violation(self.ledger, guards, group.requests, self._contested)

    def take(self, group: VictimGroup) -> None:
        self.fit.remove(group.pods)
        self._charge(group, -1)

    def restore(self, group: VictimGroup) -> None:
        self.fit.restore(group.pods)
        self._charge(group, 1)

    def _charge(self, group: VictimGroup, sign: int) -> None:
        """Take the group's pods out of (``sign=-1``) or back into the ledger copy, if
        anything reads its quota's usage (the job's checks, or a ``min`` guard).

        ``group.requests`` is the sum of its pods' requests: one charge is the same
        as one per pod."""
        quota = group.quota
        read = self._read.get(quota)
        if read is None:
            read = self._read[quota] = self.counts_for_job(quota) or bool(self._guarding(quota))
        if read:
            self.fit.overlay.charge(quota, group.requests, sign)

    def spare_idle(self, removed: list[VictimGroup]) -> list[VictimGroup]:
        """Restore at once the groups but the last whose eviction gained the job nothing;
        return the other groups but the last, for the minimisation to try one by one.

        With one pod shape, a group whose nodes hold no more of the job than
        before any eviction, and whose quota the job's checks do not count,
        would be spared by the minimisation whatever else is put back: this
        only saves re-checking them one by one.  (Their quotas' usage is left
        as it is: only the ``min`` checks read it, and they are over.)
        """
        groups = removed[:-1]
        if len(self.fit.shapes) != 1:
            return groups
        gained = self.fit.gained_nodes()
        counting = {group.quota for group in groups if self.counts_for_job(group.quota)}
        rest = [
            group
            for group in groups
            if group.quota in counting
            or (
                group.pods[0].node_name in gained
                if len(group.pods) == 1
                else any(pod.node_name in gained for pod in group.pods)
            )
        ]
        if len(rest) < len(groups):
            self.fit.keep_removed(pod for group in (*rest, removed[-1]) for pod in group.pods)
        return rest


def _why_no_fit(
    demand: JobDemand, simulation: _Simulation, skipped_for_min: list[str]
) -> list[str]:
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
