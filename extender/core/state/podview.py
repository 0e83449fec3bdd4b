"""What decisions read of pods and jobs: the part of
:class:`~extender.core.state.ClusterState` that answers for a pod or a job: the quota a
pod counts in, whether it may be a victim and whether it *counts as used*, what a job
uses of its quota, and the room a pod's reservation holds.

A mixin of reads only, over the state's parts (declared below): the quota a pod is
charged to is :class:`~extender.core.state.membership.QuotaMembership`'s, reservations
and admission holds the :class:`~extender.core.state.book.ReservationBook`'s.
:meth:`PodViewMixin.counts_as_used` is also what ``ClusterState._count`` charges by.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from base.resources import Resources, add_into
from extender.core.objects import PodInfo
from extender.core.state.book import Reservation, ReservationBook
from extender.core.state.directory import PodDirectory
from extender.core.state.membership import QuotaMembership
from quota.tree import QuotaMembershipError, QuotaTree


class PodViewMixin:
    """Per-pod and per-job reads of :class:`ClusterState`: quotas, use, reservations."""

    if TYPE_CHECKING:
        pods: dict[str, PodInfo]
        members: PodDirectory
        membership: QuotaMembership
        tree: QuotaTree
        book: ReservationBook

    @property
    def reservations(self) -> Mapping[str, Reservation]:
        """Every in-flight job's reservation, by job."""
        return self.book.reservations

    def quota_of(self, pod: PodInfo) -> str:
        """The pod's quota; raises :class:`QuotaMembershipError` if its label names one it
        may not use (missing, or not admitting its namespace): its job is refused."""
        return self.membership.quota_of(pod, self.tree)

    def charged_to(self, pod: PodInfo) -> str | None:
        """The quota the pod is counted in (its own, or for a pod whose quota label is
        refused, its namespace's); ``None`` for a pod the state does not hold."""
        return self.membership.charged_to(pod.key)

    def quota_name(self, pod: PodInfo) -> str | None:
        """The pod's quota, or ``None`` if its label names one it may not use."""
        try:
            return self.quota_of(pod)
        except QuotaMembershipError:
            return None

    def preemptible(self, pod: PodInfo) -> bool:
        """May the pod be a victim?  Its label (or the default); a pod admitted preemptible
        stays so (:meth:`QuotaMembership.preemptible
        <extender.core.state.membership.QuotaMembership.preemptible>`)."""
        return self.membership.preemptible(pod)

    def counts_as_used(self, pod: PodInfo) -> bool:
        """Bound to a node and not finished, or pending with a reservation, or pending in
        a job whose admission holds its quota (:meth:`hold_quota`)."""
        if pod.finished:
            return False
        return (
            pod.node_name is not None
            or self.book.reserved(pod.key) is not None
            or self.book.is_held(pod.key)
        )

    def job_used(self, job: str, gone: Collection[str] = ()) -> Resources:
        """What the job uses of its quota: the requests of its pods charged to one that
        :meth:`counts_as_used` (but those keyed in ``gone``), and the room kept for pods
        being re-created (vacancies)."""
        used: Resources = {}
        for key in self.counted_pods(job, gone):
            add_into(used, self.pods[key].requests)
        for holder in self.book.vacancies_of(job):
            add_into(used, self.book.vacancies[holder].requests)
        return used

    def counted_pods(self, job: str, gone: Collection[str] = ()) -> list[str]:
        """The keys of the job's pods charged to a quota as used, but ``gone``, in order."""
        return sorted(
            key
            for key in self.members.job_members(job)
            if key not in gone
            and self.membership.charged_to(key) is not None
            and self.counts_as_used(self.pods[key])
        )

    def quota_held(self, pod_key: str) -> bool:
        return self.book.is_held(pod_key)

    def reserved_node(self, pod_key: str) -> str | None:
        reserved = self.book.reserved(pod_key)
        return reserved[1] if reserved is not None else None

    def reservation_holder(self, pod_key: str) -> str | None:
        """The job a reserved pod belongs to."""
        reserved = self.book.reserved(pod_key)
        return reserved[0] if reserved is not None else None
