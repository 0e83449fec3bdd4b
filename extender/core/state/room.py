"""Room held for jobs: the part of :class:`~extender.core.state.ClusterState` that adds,
ends and expires reservations, the vacated room a re-created pod takes over, and the
filter's admission holds.

A mixin of ``ClusterState`` (its indexes live there); every change of what a pod holds
goes through ``ClusterState._count`` under ``_reindexing``, as every other change does.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from extender.core.config import MusterArgs
from extender.core.objects import PodInfo
from extender.core.state.book import Reservation, ReservationBook, Vacancy
from extender.core.state.nodes import NodeUsage
from quota.accounting import QuotaLedger
from quota.tree import QuotaMembershipError

#: How many deleted controllers the state remembers (see :meth:`RoomMixin.forget_owner`).
GONE_OWNERS_REMEMBERED = 10_000


class RoomMixin:
    """Reservations, vacancies and admission holds of :class:`ClusterState`."""

    if TYPE_CHECKING:
        args: MusterArgs
        pods: dict[str, PodInfo]
        book: ReservationBook
        ledger: QuotaLedger
        node_usage: NodeUsage
        room_epoch: int
        _gone_owners: OrderedDict[str, None]
        _owner_sizes: dict[str, int]

        def _reindexing(self, key: str) -> AbstractContextManager[None]: ...
        def _resolve_quota(self, pod: PodInfo) -> str: ...
        def counts_as_used(self, pod: PodInfo) -> bool: ...
        def _hold_min_resources(self, job: str) -> None: ...

    def forget_owner(self, namespace: str, controller: str) -> bool:
        """The controller ``Kind/name`` in ``namespace`` is deleted (or being deleted):
        it re-creates no pod.  The room its deleted pods left for their replacements is
        let go now, and its pods removed later leave none; a reservation left holding
        nothing then ends as its job is gone.  Returns whether any room was let go."""
        key = f"{namespace}/{controller}"
        self._owner_sizes.pop(key, None)
        self._gone_owners[key] = None
        self._gone_owners.move_to_end(key)
        if len(self._gone_owners) > GONE_OWNERS_REMEMBERED:
            self._gone_owners.popitem(last=False)
        gone = sorted(
            holder
            for holder, vacancy in self.book.vacancies.items()
            if vacancy.controller == controller and vacancy.job.startswith(f"{namespace}/")
        )
        self._let_vacancies_go(gone)
        return bool(gone)

    def owner_present(self, namespace: str, controller: str) -> None:
        """The controller ``Kind/name`` exists (again, under a name once deleted)."""
        self._gone_owners.pop(f"{namespace}/{controller}", None)

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
            quota = self._resolve_quota(pod)
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
