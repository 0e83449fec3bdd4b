"""Room held for jobs: the part of :class:`~extender.core.state.ClusterState` that adds,
ends and expires reservations, hands the vacated room of a deleted pod to its
replacement, holds admitted jobs' quota, and says where a job's room is (the pods on
their way out, a job's topology domain).

A mixin: these are the state's own changes, kept in a file of their own.  It reads the
state's parts (declared below) and changes what a pod holds only through
``ClusterState._count`` under ``_reindexing``, as every other change does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from extender.core.config import MusterArgs
from extender.core.objects import NodeInfo, PodInfo
from extender.core.state.book import Reservation, ReservationBook, Vacancy
from extender.core.state.declarations import JobDeclarations
from extender.core.state.directory import PodDirectory
from extender.core.state.membership import resolve_quota
from extender.core.state.nodes import NodeUsage
from extender.core.topology import TopologyRequest, shared_domain
from quota.accounting import QuotaLedger
from quota.tree import QuotaMembershipError, QuotaTree


class RoomMixin:
    """Reservations, vacancies and admission holds of :class:`ClusterState`."""

    if TYPE_CHECKING:
        args: MusterArgs
        pods: dict[str, PodInfo]
        nodes: dict[str, NodeInfo]
        book: ReservationBook
        ledger: QuotaLedger
        tree: QuotaTree
        node_usage: NodeUsage
        room_epoch: int
        declarations: JobDeclarations
        members: PodDirectory

        def _reindexing(self, key: str) -> AbstractContextManager[None]: ...
        def counts_as_used(self, pod: PodInfo) -> bool: ...
        def preemptible(self, pod: PodInfo) -> bool: ...
        def _hold_min_resources(self, job: str) -> None: ...

    def forget_owner(self, namespace: str, controller: str) -> bool:
        """The controller ``Kind/name`` in ``namespace`` is deleted (or being deleted):
        it re-creates no pod.  The room its deleted pods left for their replacements is
        let go now, and its pods removed later leave none; a reservation left holding
        nothing then ends as its job is gone.  Returns whether any room was let go."""
        self.declarations.mark_owner_gone(namespace, controller)
        gone = sorted(
            holder
            for holder, vacancy in self.book.vacancies.items()
            if vacancy.controller == controller and vacancy.job.startswith(f"{namespace}/")
        )
        self._let_vacancies_go(gone)
        return bool(gone)

    def leaving(self) -> list[PodInfo]:
        """The bound pods in flight out of the cluster, by key: marked for soft eviction,
        terminating, preempted by kube-scheduler, or promised as victims to a job's
        reservation.  A plan counts them as gone for every rule it keeps (quota usage,
        guarantees, budgets, node room: :meth:`Overlay.settled
        <extender.core.state.overlay.Overlay>`), so two plans in a row decide what they
        would after the first one's victims left."""
        keys_ = set(self.members.departing)
        stuck = self.members.stuck  # stuck terminating: they stay
        for key in self.book.promised_victims():
            pod = self.pods.get(key)
            if pod is not None and pod.node_name is not None and not pod.finished:
                keys_.add(key)
        keys_ -= stuck
        return [self.pods[key] for key in sorted(keys_)]

    def topology_placement(self, job: str) -> tuple[TopologyRequest, str | None] | None:
        """The job's topology request and the domain its bound and reserved pods are in
        (``None`` while they are in none, or in several); ``None`` for a job without one."""
        request = self.declarations.topology_request(job)
        if request is None:
            return None
        names = {p.node_name for p in self.members.job_pods(job) if p.node_name is not None}
        reservation = self.book.reservations.get(job)
        if reservation is not None:
            names.update(reservation.placements.values())
        known = [self.nodes[name] for name in sorted(names) if name in self.nodes]
        return request, shared_domain(known, request.level) if known else None

    def add_reservation(self, reservation: Reservation) -> None:
        """Hold room for a job's pending pods on the nodes the plan chose (a reserved pod's
        admission hold, if any, ends: the reservation charges its quota now)."""
        old = self.book.reservations.get(reservation.job)
        # The same room held longer (settling extends it): room kept for pods being
        # re-created stays; a new plan (placements changed) counted it as the job's own.
        same_room = old is not None and old.placements == reservation.placements
        vacancies = [self.book.vacancies[h] for h in self.book.vacancies_of(reservation.job)]
        self._drop_reservation(reservation.job)
        self.book.reservations[reservation.job] = reservation
        if same_room:
            for vacancy in vacancies:
                self._hold_vacancy(vacancy)
        for pod_key, node in reservation.placements.items():
            pod = self.pods.get(pod_key)
            if pod is None or pod.node_name is not None:
                continue
            with self._reindexing(pod_key):
                self.book.reserve(pod_key, reservation.job, node)
                self.book.unhold(pod_key)

    def remove_reservation(self, job: str) -> Reservation | None:
        """Let the job's reservation go (ended, released): a persisted copy of it read back
        later is stale (see :attr:`ReservationBook.released`)."""
        reservation = self._drop_reservation(job)
        if reservation is not None:
            released = self.book.released.get(job, reservation.created)
            self.book.released[job] = max(released, reservation.created)
        return reservation

    def _drop_reservation(self, job: str) -> Reservation | None:
        reservation = self.book.reservations.pop(job, None)
        if reservation is None:
            return None
        self.room_epoch += 1
        for pod_key in reservation.placements:
            reserved = self.book.reserved(pod_key)
            if reserved is not None and reserved[0] == job:
                with self._reindexing(pod_key):
                    self.book.unreserve(pod_key)
        for vacated in self.book.vacancies_of(job):
            self._release_vacancy(vacated)
        return reservation

    def expire_vacancies(self, now: float) -> list[str]:
        """Let go the vacated room no new pod took in time; return the vacated keys.  A
        reservation left holding nothing ends with it."""
        expired = sorted(key for key, v in self.book.vacancies.items() if v.until <= now)
        self._let_vacancies_go(expired)
        return expired

    def _let_vacancies_go(self, holders: Iterable[str]) -> None:
        """Release vacated room; a reservation left holding nothing ends with it."""
        for holder in holders:
            job = self._release_vacancy(holder).job
            self.room_epoch += 1
            if job in self.book.reservations and not self.book.holds_room(job):
                self.remove_reservation(job)  # with its tombstone

    def expire_reservations(self, now: float) -> list[Reservation]:
        """End the reservations whose time is up; return them."""
        expired = [r for r in self.book.reservations.values() if r.expires <= now]
        for reservation in expired:
            self.remove_reservation(reservation.job)
        return expired

    def hold_quota(self, job: str, pod_keys: Iterable[str], until: float) -> None:
        """Charge these pending pods of an admitted job to its quota until ``until``, so a
        job admitted whole cannot lose the rest of its room to a job admitted meanwhile."""
        self.book.extend_hold(job, until)
        for key in pod_keys:
            pod = self.pods.get(key)
            if pod is None or self.book.is_held(key) or self.counts_as_used(pod):
                continue
            with self._reindexing(key):
                self.book.hold(key, job)

    def release_quota_hold(self, key: str) -> None:
        """End one pod's admission hold (turned away since it was admitted)."""
        if self.book.is_held(key):
            self.room_epoch += 1
            with self._reindexing(key):
                self.book.unhold(key)

    def release_quota_holds(self, now: float) -> list[str]:
        """End the holds whose time is up; return their jobs."""
        ended = self.book.end_holds(now)
        if ended:
            self.room_epoch += 1
        for _job, held in ended:
            for key in held:
                with self._reindexing(key):
                    self.book.unhold(key)
        return [job for job, _held in ended]

    def _take_reserved_room(self, pod: PodInfo) -> None:
        """A new pending pod: a reservation made before it reached the state (the filter
        can place a pod the informer has not delivered yet) holds its room from now on,
        or it takes a vacancy its job kept for a re-created pod."""
        reservation = self.book.reservations.get(pod.job)
        if reservation is None:
            return
        node = reservation.placements.get(pod.key)
        if node is not None and self.book.reserved(pod.key) is None:
            self.book.reserve(pod.key, pod.job, node)
        elif node is None:
            self._fill_vacancy(pod, reservation)

    def _leave_reserved_room(
        self, pod: PodInfo, node: str, quota: str | None, now: float | None
    ) -> None:
        """A pod holding room reserved on ``node`` is removed.  Seen deleted live
        (``now``), a pending pod a controller owns leaves a
        :class:`~extender.core.state.book.Vacancy` for the pod the controller creates in
        its place; a bare pod's room goes with it."""
        replaced = (
            pod.controller is not None
            and pod.node_name is None
            and not self.declarations.owner_gone(pod.namespace, pod.controller)
        )
        if now is None or quota is None or not replaced:
            self._drop_reserved_pod(pod.key)
            return
        vacancy = Vacancy(
            pod.job,
            node,
            quota,
            pod.requests,
            self.preemptible(pod),
            now + self.args.vacated_room_seconds,
            pod.controller or "",
            pod.key,
        )
        self.book.unreserve(pod.key)
        self._hold_vacancy(vacancy)

    def expire_departures(self, now: float) -> list[str]:
        """Count as staying the terminating pods past their deletion deadline by more than
        ``stuckTerminatingSeconds`` (a finalizer can hold a pod for ever); return their
        keys.  Their room is no longer free for a plan, and a job whose victims they were
        no longer waits on them (its pods reserved there are planned again at their next
        filter call, with them staying; else its reservation ends in its time)."""
        stuck = self.members.overdue(now, self.args.stuck_terminating_seconds)
        for key in stuck:
            with self._reindexing(key):
                self.members.stuck.add(key)
        if stuck:
            self.room_epoch += 1
        return stuck

    def _drop_reserved_pod(self, key: str) -> None:
        """A reserved pod bound or went away: it no longer holds reserved room."""
        self._forget_if_empty(self.book.unreserve(key))

    def _forget_if_empty(self, job: str) -> None:
        """A reservation no pod or vacancy holds room for any more is done."""
        if job in self.book.reservations and not self.book.holds_room(job):
            del self.book.reservations[job]

    def _hold_vacancy(self, vacancy: Vacancy) -> None:
        """Keep a deleted pod's reserved room under the vacancy's own holder key: on its
        node, and charged to its quota as used, as the pod was."""
        holder = vacancy.holder
        self.book.vacancies[holder] = vacancy
        self.book.reserve(holder, vacancy.job, vacancy.node)
        self.node_usage.hold(vacancy.node, holder, vacancy.requests)
        self.ledger.charge(
            vacancy.quota, vacancy.requests, preemptible=vacancy.preemptible, used=True, sign=1
        )
        self._hold_min_resources(vacancy.job)  # the vacancy is the job's use

    def _release_vacancy(self, holder: str) -> Vacancy:
        vacancy = self.book.vacancies.pop(holder)
        self.book.unreserve(holder)
        self.node_usage.release(vacancy.node, holder)
        self.ledger.charge(
            vacancy.quota, vacancy.requests, preemptible=vacancy.preemptible, used=True, sign=-1
        )
        self._hold_min_resources(vacancy.job)
        return vacancy

    def _fill_vacancy(self, pod: PodInfo, reservation: Reservation) -> None:
        """A new pending pod of a job with vacated room takes a vacancy of its shape, quota
        and controller (its own name's first: a StatefulSet re-creates a pod under it)."""
        vacated = self.book.vacancies_of(pod.job)
        if not vacated:
            return
        try:
            quota = resolve_quota(pod, self.tree)
        except QuotaMembershipError:
            return
        vacancies = sorted(
            (self.book.vacancies[holder] for holder in vacated),
            key=lambda v: (v.pod_key != pod.key, v.pod_key),
        )
        for vacancy in vacancies:
            if (
                vacancy.quota == quota
                and vacancy.controller == pod.controller
                and dict(vacancy.requests) == dict(pod.requests)
            ):
                self._release_vacancy(vacancy.holder)
                placements = {**reservation.placements, pod.key: vacancy.node}
                self.book.reservations[pod.job] = dataclasses.replace(
                    reservation, placements=placements
                )
                self.book.reserve(pod.key, pod.job, vacancy.node)
                self.room_epoch += 1  # a pod parked before this may fit now
                return
