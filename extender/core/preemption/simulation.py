"""The preemption planner's working state: the job's fit with victims taken out.

:class:`Simulation` holds the job's :class:`~extender.core.placement.fit.JobFit` (node
copies) and a copy of the quota ledger, and takes victim groups out and puts them back;
:class:`Wants` tells the candidate walk which groups could still help.  The planner
(:mod:`extender.core.preemption.planner`) drives both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from extender.core.objects import PodInfo
from extender.core.placement.demand import JobDemand
from extender.core.placement.fit import JobFit
from extender.core.preemption.groups import VictimGroup
from extender.core.preemption.policy import Rule
from extender.core.state import ClusterState
from extender.core.topology import SliceRequest
from quota.admission import job_admission_failures, min_violations, would_borrow


class Wants:
    """What the search still lacks, for the candidate walk to ask (a
    :class:`~extender.core.preemption.candidates.Wanted`).

    Once the node copies hold the whole job, or the quota checks hold, they stay
    so as more groups are removed (``nodes_ok`` and ``quota_ok`` are latched; not
    ``quota_ok`` for a job that must end within its min: taking another quota's pods
    asks that of it).  A
    group that could not help any more is passed over: one not on a node the job
    can use once node room suffices, one not in the job's quota tree once the
    quota holds.
    """

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation
        self.fit = simulation.fit
        self.taken = simulation.taken
        self.nodes_ok = self.fit.fits()
        self.quota_ok = simulation.admits()

    def __call__(self, pods: tuple[PodInfo, ...], quota: str) -> bool:
        """Could evicting these pods still help?  (Never pods outside the domain a
        topology-aware job is planned in.)"""
        within = self.simulation.within
        if within is not None and any(pod.node_name not in within for pod in pods):
            return False
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
        if self.simulation.within_min:  # taking another quota's pods may undo it
            self.quota_ok = self.simulation.admits()
        else:
            self.quota_ok = self.quota_ok or self.simulation.admits()
        return self.nodes_ok and self.quota_ok


class Simulation:
    """The job's fit on an overlay of the state (node copies and a ledger copy), with
    victim groups taken out and put back."""

    def __init__(
        self,
        state: ClusterState,
        demand: JobDemand,
        *,
        within_min: bool = False,
        within: frozenset[str] | None = None,
        slices: SliceRequest | None = None,
        bound: Sequence[PodInfo] = (),
        released: frozenset[str] = frozenset(),
    ) -> None:
        """``within``: the nodes of the one domain a topology-aware job is planned in: its
        pods go there, and its victims come from there only; ``slices``: the job's slices
        (with ``bound``, its pods on nodes already), each to fit in one domain;
        ``released``: reserved pods whose room and quota charge count as free."""
        self.state = state
        self.demand = demand
        self.within_min = within_min
        self.within = within
        self._others_taken = 0  # victim groups of other quotas taken out now
        #: Keys of the pods taken out now (a job's pods shed one by one, then the rest).
        self.taken: set[str] = set()
        outside = () if within is None else frozenset(state.nodes) - within
        self._fit_args = (outside, slices, tuple(bound), released)
        self.fit = self._job_fit(settled=True)
        #: The quota ledger copy of the fit's overlay: victims' usage taken out (those of
        #: earlier plans still leaving too: the overlay is settled).
        self.ledger = self.fit.overlay.ledger
        self._counts: dict[str, bool] = {}
        self._guards: dict[str, tuple[str, ...]] = {}
        self._read: dict[str, bool] = {}
        self._contested = demand.asks

    def fits_now(self) -> Callable[[], bool]:
        """The question "does the job fit on the nodes' room free now, the pods leaving
        still there (a plan counts them gone)?", to ask later, while the state is
        unchanged, on a fit of its own.  A job that fits only once they go is tried again
        by kube-scheduler when they are deleted; one that fits now, though kube-scheduler
        found no room, is most likely kept out by a binding in flight
        (:mod:`extender.kube.rechecks`, its only asker).  Room only: not the quota ledger,
        room held for a starving job, or what kube-scheduler's own plugins refuse."""
        return lambda: self._job_fit(settled=False).fits()

    def _job_fit(self, settled: bool) -> JobFit:
        """A fit of the job on the state's nodes, the pods leaving counted gone
        (``settled``) or still there."""
        outside, slices, bound, released = self._fit_args
        return JobFit(
            self.state,
            self.demand.job,
            self.demand.unplaced,
            excluded=outside,
            settled=settled,
            slices=slices,
            bound=bound,
            released=released,
        )

    def admits(self) -> bool:
        """Do the job's quota checks hold on the ledger copy (and, for a job within its
        min only once its own quota's work is gone, with other quotas' victims taken out,
        does its quota stay within its min)?"""
        demand = self.demand
        if (
            self.within_min
            and self._others_taken
            and would_borrow(self.ledger, demand.quota, demand.request, demand.asks)
        ):
            return False  # it reclaims from other quotas: it must end within its min
        return not job_admission_failures(
            self.ledger, demand.quota, demand.np_request, demand.p_request
        )

    def counts_for_job(self, quota: str) -> bool:
        """Does the usage of ``quota`` enter the job's quota checks?"""
        counts = self._counts.get(quota)
        if counts is None:
            tree = self.state.tree
            own = self.demand.quota
            limited = {a for a in tree.ancestors(own) if tree[a].max}
            counts = quota == own or bool(limited.intersection(tree.ancestors(quota)))
            self._counts[quota] = counts
        return counts

    def guarding(self, quota: str) -> tuple[str, ...]:
        """The quotas whose ``min`` a victim of ``quota`` must not break (those with one)."""
        guards = self._guards.get(quota)
        if guards is None:
            tree = self.state.tree
            path = tree.path_below_common_ancestor(quota, self.demand.quota)
            guards = tuple(name for name in path if any(tree[name].min.values()))
            self._guards[quota] = guards
        return guards

    def min_violations(self, group: VictimGroup) -> tuple[str | None, str | None]:
        """Why evicting ``group`` takes a quota on its path below its ``min`` in a
        resource the job asks for, and why in any resource it governs (``None``: it
        does not)."""
        guards = self.guarding(group.quota)
        if not guards:
            return None, None
        return min_violations(self.ledger, guards, group.requests, self._contested)

    def take(self, group: VictimGroup) -> None:
        self.fit.remove(group.pods)
        self._charge(group, -1)
        self._others_taken += group.other_quota
        self.taken.update(pod.key for pod in group.pods)

    def restore(self, group: VictimGroup) -> None:
        self.fit.restore(group.pods)
        self._charge(group, 1)
        self._others_taken -= group.other_quota
        self.taken.difference_update(pod.key for pod in group.pods)

    def _charge(self, group: VictimGroup, sign: int) -> None:
        """Take the group's pods out of (``sign=-1``) or back into the ledger copy, if
        anything reads its quota's usage (the job's checks, or a ``min`` guard).

        ``group.requests`` is the sum of its pods' requests: one charge is the same
        as one per pod."""
        quota = group.quota
        read = self._read.get(quota)
        if read is None:
            read = self._read[quota] = (
                self.counts_for_job(quota)
                or bool(self.guarding(quota))
                or group.rule is Rule.FAIR_SHARE  # its share is judged (.fairness)
            )
        if read:
            self.fit.overlay.charge(quota, group.requests, sign)

    def spare_idle(self, removed: list[VictimGroup]) -> list[VictimGroup]:
        """Restore at once the groups but the last whose eviction gained the job nothing;
        return the other groups but the last, for the minimisation to try one by one.

        With one pod shape, a group whose nodes hold no more of the job than
        before any eviction, and whose quota the job's checks do not count,
        would be spared by the minimisation whatever else is put back: this
        only saves re-checking them one by one.  (Their quotas' usage is left
        as it is: only the ``min`` checks read it, and they are over; the shares of
        quotas fair sharing takes from are read again, so their groups stay.)
        """
        groups = removed[:-1]
        if len(self.fit.shapes) != 1:
            return groups
        gained = self.fit.gained_nodes()
        counting = {group.quota for group in groups if group.rule is Rule.FAIR_SHARE} | {
            quota for quota in {group.quota for group in groups} if self.counts_for_job(quota)
        }
        # A pod an elastic job shed stays for the minimisation while the rest of its job
        # is evicted too (it goes with it).
        whole = {group.job for group in removed if not group.shed}
        rest = [
            group
            for group in groups
            if group.quota in counting
            or (group.shed and group.job in whole)
            or (
                group.pods[0].node_name in gained
                if len(group.pods) == 1
                else any(pod.node_name in gained for pod in group.pods)
            )
        ]
        if len(rest) < len(groups):
            self.fit.keep_removed(pod for group in (*rest, removed[-1]) for pod in group.pods)
            self._others_taken = sum(group.other_quota for group in (*rest, removed[-1]))
            self.taken.clear()
            self.taken.update(pod.key for group in (*rest, removed[-1]) for pod in group.pods)
        return rest
