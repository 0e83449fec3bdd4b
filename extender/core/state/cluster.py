"""The cluster as the core sees it: :class:`ClusterState`, a façade over small indexes.

Fed one object at a time (by the informers, by ``simulate`` from manifests, by tests),
it keeps what decisions read without walking the whole cluster: the objects (nodes,
pods, the quota tree, pod groups, disruption budgets); per job its pods, the pods
marked for it, per node the pods nominated to it; and the indexes of their own modules: node usage
(:mod:`.nodes`), the quota ledger (:mod:`quota.accounting`), victim units
(:mod:`.victims`), reservations and admission holds (:mod:`.book`).

Every change to a pod reaches every index through one path, :meth:`ClusterState._count`
(the old version out, the new one in).  A pod *counts as used* when it is bound, or
pending with a reservation or an admission hold: its requests are charged to its quota,
and reserved room is held on its node.  Decisions read a state and never change it; the
front doors apply the effects they return (:mod:`extender.core.effects`).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager

from base import keys
from base.errors import ManifestError
from base.resources import Resources
from extender.core.budgets import DisruptionBudget
from extender.core.config import MusterArgs
from extender.core.jobs import PodGroupInfo, is_preemptible, min_available_annotation
from extender.core.objects import NodeInfo, PodInfo
from extender.core.state.book import Reservation, ReservationBook, Vacancy
from extender.core.state.nodes import NodeUsage
from extender.core.state.victims import VictimIndex
from quota.accounting import QuotaLedger
from quota.tree import QuotaSpec, QuotaTree

#: Node facts the planner memoises (which nodes could ever hold a pod shape), by key;
#: cleared whenever a node changes.
NodeMemo = dict[tuple[object, ...], frozenset[str]]

#: How many removed pods' UIDs the state remembers (see :meth:`ClusterState.was_removed`).
REMOVED_PODS_REMEMBERED = 10_000


class UnknownQuotaError(LookupError):
    """A pod names a quota that does not exist."""


class ClusterState:
    """Nodes, pods, quotas, pod groups and reservations, with the indexes decisions need."""

    def __init__(self, args: MusterArgs | None = None, quotas: Iterable[QuotaSpec] = ()) -> None:
        self.args = args if args is not None else MusterArgs()
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.tree = QuotaTree(quotas)
        self.ledger = QuotaLedger(self.tree)
        #: Per node: requested, reserved and preemptible totals (read-only outside).
        self.node_usage = NodeUsage()
        self.victims = VictimIndex()
        self.book = ReservationBook()
        #: Memo for planners: facts derived from nodes only.
        self.node_memo: NodeMemo = {}
        self._pod_groups: dict[str, PodGroupInfo] = {}  # by job ("ns/group")
        self._removed: OrderedDict[str, None] = OrderedDict()  # UIDs of removed pods
        #: Controllers seen deleted, ``namespace/Kind/name``: their pods do not come back.
        self._gone_owners: OrderedDict[str, None] = OrderedDict()
        #: Counts changes that free room only Muster sees (quotas replaced, reservations
        #: and admission holds let go): what makes parked pods worth a nudge.
        self.room_epoch = 0
        #: PodDisruptionBudgets, by ``namespace/name``.
        self.budgets: dict[str, DisruptionBudget] = {}
        self._jobs: dict[str, set[str]] = {}
        self._pod_quota: dict[str, str] = {}
        self._unknown_quota: dict[str, str] = {}
        self._marked_for: dict[str, set[str]] = {}  # job → pods whose marks name it
        self._nominated: dict[str, set[str]] = {}  # node → pending pods nominated to it
        self._departing: set[str] = set()  # bound pods on their way out (see leaving())
        self._joined: dict[str, float] = {}  # pod-group job → when its newest pod was seen

    # ---- feeding -------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> None:
        """Add or replace a node.  The same node again (a status update: heartbeat,
        conditions, images) changes nothing and keeps every memo: at 5,000 nodes such
        updates come several times a second, and each would otherwise make the next plan
        recompute every node's eligibility."""
        if self.nodes.get(node.name) == node:
            return
        self.nodes[node.name] = node
        self.node_usage.add_node(node.name)
        self.node_memo.clear()

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.node_usage.remove_node(name)
        self.node_memo.clear()

    def upsert_pod(self, pod: PodInfo, now: float | None = None) -> None:
        """Add or replace a pod.  ``now``: when it is seen (live); a new pod of a pod group
        marks when its job last grew (:meth:`last_joined`), else its creation time does."""
        old = self.pods.get(pod.key)
        if old is not None:
            self._unindex(old)
        elif pod.group is not None:
            seen = now if now is not None else pod.created
            self._joined[pod.job] = max(seen, self._joined.get(pod.job, seen))
        self.pods[pod.key] = pod
        if old is None and pod.node_name is None and not pod.finished:
            # A reservation made before this pod reached the state (the filter can place a
            # pod the informer has not delivered yet) holds its room from now on.
            reservation = self.book.reservations.get(pod.job)
            node = reservation.placements.get(pod.key) if reservation is not None else None
            if node is not None and self.book.reserved(pod.key) is None:
                self.book.reserve(pod.key, pod.job, node)
            elif node is None and reservation is not None:
                self._fill_vacancy(pod, reservation)
        if pod.node_name is not None or pod.finished:
            # Bound or done: it no longer holds reserved room or admission quota.
            if self.book.reserved(pod.key) is not None:
                self._drop_reserved_pod(pod.key)
            self.book.unhold(pod.key)
        self._index(pod)

    def remove_pod(self, key: str, now: float | None = None) -> None:
        """Forget a pod.  With ``now`` (a deletion seen live), a pending pod holding
        reserved room that a controller owns leaves a
        :class:`~extender.core.state.book.Vacancy`: the room stays its job's for
        ``vacatedRoomSeconds``, for the pod the controller creates in its place
        (:meth:`upsert_pod` gives it the room)."""
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        self._removed[pod.uid] = None
        if len(self._removed) > REMOVED_PODS_REMEMBERED:
            self._removed.popitem(last=False)
        quota = self._pod_quota.get(key)
        self._unindex(pod)
        reserved = self.book.reserved(key)
        if reserved is not None:
            # Only a pod a controller owns comes back: a bare pod's room goes with it.
            replaced = (
                pod.controller is not None
                and pod.node_name is None
                and f"{pod.namespace}/{pod.controller}" not in self._gone_owners
            )
            if now is not None and quota is not None and replaced:
                until = now + self.args.vacated_room_seconds
                vacancy = Vacancy(
                    pod.job,
                    reserved[1],
                    quota,
                    pod.requests,
                    self.preemptible(pod),
                    until,
                    pod.controller or "",
                    key,
                )
                self.book.unreserve(key)
                self._hold_vacancy(vacancy)
            else:
                self._drop_reserved_pod(key)
        self.book.unhold(key)
        if pod.job not in self._jobs:
            self._joined.pop(pod.job, None)
        if pod.job not in self._jobs and not self.book.vacancies_of(pod.job):
            # Its job's last pod, and no room kept for a replacement: nothing remains.
            self.book.released.pop(pod.job, None)
            self.book.refused_victims.pop(pod.job, None)
        # A pod that is gone leaves its job's reservation: one re-created under its name
        # is a new pod, not reserved by the old one's placement.
        reservation = self.book.reservations.get(pod.job)
        if reservation is not None and key in reservation.placements:
            placements = {k: n for k, n in reservation.placements.items() if k != key}
            self.book.reservations[pod.job] = dataclasses.replace(
                reservation, placements=placements
            )

    def was_removed(self, uid: str) -> bool:
        """Was a pod with this UID removed (one of the last few thousand)?  A pod bound
        just as it was deleted must not come back from a copy of it held elsewhere."""
        return uid in self._removed

    def set_quotas(self, quotas: Iterable[QuotaSpec]) -> None:
        """Replace every quota (raises :class:`quota.tree.QuotaTreeError` on a bad tree)."""
        tree = QuotaTree(quotas)
        self.room_epoch += 1
        for pod in self.pods.values():
            self._unindex(pod)
        vacancies = list(self.book.vacancies.values())
        for vacancy in vacancies:
            self._release_vacancy(vacancy.holder)
        self.tree = tree
        self.ledger = QuotaLedger(tree)
        self.victims = VictimIndex()
        for pod in self.pods.values():
            self._index(pod)
        for vacancy in vacancies:  # charged again, unless its quota is gone
            if vacancy.quota in tree:
                self._hold_vacancy(vacancy)
            else:
                self._forget_if_empty(vacancy.job)

    def set_pod_group(self, group: PodGroupInfo) -> None:
        """Record a PodGroup (its ``minMember`` and schedule timeout)."""
        self._pod_groups[group.job] = group

    def forget_pod_group(self, namespace: str, name: str) -> None:
        """The PodGroup is gone (or unreadable): its pods are a job of all of them."""
        self._pod_groups.pop(f"{namespace}/{name}", None)

    def forget_owner(self, namespace: str, controller: str) -> bool:
        """The controller ``Kind/name`` in ``namespace`` is deleted (or being deleted):
        it re-creates no pod.  The room its deleted pods left for their replacements is
        let go now, and its pods removed later leave none; a reservation left holding
        nothing then ends as its job is gone.  Returns whether any room was let go."""
        key = f"{namespace}/{controller}"
        self._gone_owners[key] = None
        self._gone_owners.move_to_end(key)
        if len(self._gone_owners) > REMOVED_PODS_REMEMBERED:
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

    def set_budget(self, budget: DisruptionBudget) -> None:
        """Record a PodDisruptionBudget (its selector and ``disruptionsAllowed``)."""
        self.budgets[budget.key] = budget

    def forget_budget(self, namespace: str, name: str) -> None:
        self.budgets.pop(f"{namespace}/{name}", None)

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

    # ---- reading: pods, jobs, quotas -----------------------------------------------

    @property
    def reservations(self) -> Mapping[str, Reservation]:
        """Every in-flight job's reservation, by job."""
        return self.book.reservations

    def quota_of(self, pod: PodInfo) -> str:
        """The pod's quota; raises :class:`UnknownQuotaError` if it names a missing one."""
        unknown = self._unknown_quota.get(pod.key)
        if unknown is not None:
            raise UnknownQuotaError(unknown)
        quota = self._pod_quota.get(pod.key)
        return quota if quota is not None else self._resolve_quota(pod)

    def quota_name(self, pod: PodInfo) -> str | None:
        """The pod's quota, or ``None`` if it names one that does not exist."""
        try:
            return self.quota_of(pod)
        except UnknownQuotaError:
            return None

    def preemptible(self, pod: PodInfo) -> bool:
        return is_preemptible(pod, self.args)

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

    def quota_held(self, pod_key: str) -> bool:
        return self.book.is_held(pod_key)

    def marked_victims(self, job: str) -> Collection[str]:
        """Keys of the pods still present whose soft-eviction mark names ``job``: its
        victims on their way out (the job is in flight while there are any)."""
        return self._marked_for.get(job, ())

    def marked_pods(self, job: str) -> list[PodInfo]:
        """The pods of :meth:`marked_victims`, by key."""
        return [self.pods[key] for key in sorted(self._marked_for.get(job, ()))]

    def jobs_with_marked_victims(self) -> Collection[str]:
        """The jobs some present pod's soft-eviction mark names."""
        return self._marked_for.keys()

    def leaving(self) -> list[PodInfo]:
        """The bound pods in flight out of the cluster, by key: marked for soft eviction,
        terminating, preempted by kube-scheduler, or promised as victims to a job's
        reservation.  A plan counts them as gone for every rule it keeps (quota usage,
        guarantees, budgets, node room: :meth:`Overlay.settled
        <extender.core.state.overlay.Overlay>`), so two plans in a row decide what they
        would after the first one's victims left."""
        keys_ = set(self._departing)
        for key in self.book.promised_victims():
            pod = self.pods.get(key)
            if pod is not None and pod.node_name is not None and not pod.finished:
                keys_.add(key)
        return [self.pods[key] for key in sorted(keys_)]

    def nominated_to(self, node: str) -> Collection[str]:
        """Keys of the pending pods whose ``status.nominatedNodeName`` is ``node``."""
        return self._nominated.get(node, ())

    def reserved_node(self, pod_key: str) -> str | None:
        reserved = self.book.reserved(pod_key)
        return reserved[1] if reserved is not None else None

    def reservation_holder(self, pod_key: str) -> str | None:
        """The job a reserved pod belongs to."""
        reserved = self.book.reserved(pod_key)
        return reserved[0] if reserved is not None else None

    def job_pods(self, job: str) -> list[PodInfo]:
        """The job's pods, in a stable order (by name)."""
        return [self.pods[key] for key in sorted(self._jobs.get(job, ()))]

    def job_members(self, job: str) -> Collection[str]:
        """The keys of the job's pods, unordered (cheaper than :meth:`job_pods`)."""
        return self._jobs.get(job, ())

    def min_available(self, job: str) -> int:
        """How many of the job's pods must run together (default: all of them)."""
        declared = self.declared_min_available(job)
        return declared if declared is not None else len(self._jobs.get(job, ()))

    def declared_min_available(self, job: str) -> int | None:
        """The job's size as declared (PodGroup ``minMember``, else the min-available
        annotation); ``None`` when it is not, and only the pods seen so far tell."""
        group = self._pod_groups.get(job)
        if group is not None and group.min_member is not None:
            return group.min_member
        for pod in self.job_pods(job):
            try:
                declared = min_available_annotation(pod)
            except ManifestError:
                continue  # not a number: ignored here (simulate rejects it outright)
            if declared is not None:
                return declared
        return None

    def last_joined(self, job: str) -> float | None:
        """When the newest pod of a pod-group job was first seen (live), or created."""
        return self._joined.get(job)

    def joined(self) -> Mapping[str, float]:
        """:meth:`last_joined` of every pod-group job."""
        return self._joined

    def pod_group(self, job: str) -> PodGroupInfo | None:
        """The job's PodGroup, if it has one."""
        return self._pod_groups.get(job)

    def gang_timeout_seconds(self, job: str) -> float:
        """How long the job may have fewer than min-available pods bound: its PodGroup's
        ``scheduleTimeoutSeconds``, else ``gangTimeoutSeconds``."""
        group = self._pod_groups.get(job)
        if group is not None and group.schedule_timeout_seconds is not None:
            return float(group.schedule_timeout_seconds)
        return self.args.gang_timeout_seconds

    # ---- reading: nodes and victims ------------------------------------------------

    def pods_on(self, node: str) -> Iterator[PodInfo]:
        for key in self.node_usage.pods_on(node):
            yield self.pods[key]

    def requested_on(self, node: str) -> Mapping[str, int]:
        return self.node_usage.requested.get(node, {})

    def reserved_on(self, node: str) -> Mapping[str, Mapping[str, int]]:
        """Room held on ``node`` for pending pods of in-flight jobs, by pod key."""
        return self.node_usage.reserved.get(node, {})

    def nodes_with_reserved_room(self) -> Collection[str]:
        """The nodes holding room for some reserved pod (usually few or none)."""
        return self.node_usage.reserved.keys()

    def free_on(self, node: str, for_pod: str | None = None) -> Resources:
        """Allocatable minus requested minus room held for pods other than ``for_pod``."""
        return self.node_usage.free_on(node, self.nodes[node].allocatable, for_pod)

    def preemptible_on(self, node: str) -> Mapping[str, int]:
        """Requests of the preemptible pods bound to ``node``: the most eviction could free."""
        return self.node_usage.preemptible.get(node, {})

    def has_untallied_pods(self) -> bool:
        """Are there running pods :meth:`preemptible_on` leaves out though a victim gang
        could take them along?  Those that name a quota that does not exist (they do
        count in :meth:`free_on`)."""
        return any(
            self.pods[key].node_name is not None and not self.pods[key].finished
            for key in self._unknown_quota
        )

    # ---- the one path into the indexes ---------------------------------------------

    def _resolve_quota(self, pod: PodInfo) -> str:
        named = pod.labels.get(keys.QUOTA_NAME_LABEL)
        if named:
            if named not in self.tree:
                raise UnknownQuotaError(named)
            return named
        return self.tree.quota_in_namespace(pod.namespace) or keys.DEFAULT_QUOTA

    def _index(self, pod: PodInfo) -> None:
        self._count(pod, 1)
        if pod.job in self.victims or (
            pod.node_name is not None
            and not pod.finished
            and pod.key in self._pod_quota
            and self.preemptible(pod)
        ):
            self._reindex_unit(pod.job)

    def _unindex(self, pod: PodInfo) -> None:
        self._count(pod, -1)
        if pod.job in self.victims:  # one of its pods, or a pod beside them, went
            self._reindex_unit(pod.job)

    def _count(self, pod: PodInfo, sign: int) -> None:
        """Add the pod to every index (``sign=-1``: take it out of every index)."""
        key = pod.key
        live = not pod.finished
        _member(self._jobs, pod.job, key, sign)
        if pod.marked_for is not None and live:
            _member(self._marked_for, pod.marked_for, key, sign)
        if pod.nominated_node_name is not None and pod.node_name is None and live:
            _member(self._nominated, pod.nominated_node_name, key, sign)
        if pod.departing and pod.node_name is not None and live:
            if sign > 0:
                self._departing.add(key)
            else:
                self._departing.discard(key)
        if sign > 0:
            try:
                self._pod_quota[key] = self._resolve_quota(pod)
            except UnknownQuotaError as error:
                self._unknown_quota[key] = str(error.args[0])
        quota = self._pod_quota.pop(key, None) if sign < 0 else self._pod_quota.get(key)
        if quota is None:
            # No quota to charge, but a running pod still takes room on its node.
            if sign < 0:
                self._unknown_quota.pop(key, None)
            if pod.node_name is not None and live:
                self.node_usage.bind(pod.node_name, key, pod.requests, preemptible=False, sign=sign)
            return
        if not live:
            return
        preemptible = self.preemptible(pod)
        used = self.counts_as_used(pod)
        self.ledger.charge(quota, pod.requests, preemptible=preemptible, used=used, sign=sign)
        if pod.node_name is not None:
            self.node_usage.bind(
                pod.node_name, key, pod.requests, preemptible=preemptible, sign=sign
            )
            return
        reserved = self.book.reserved(key)
        if reserved is not None:
            if sign > 0:
                self.node_usage.hold(reserved[1], key, pod.requests)
            else:
                self.node_usage.release(reserved[1], key)

    @contextmanager
    def _reindexing(self, key: str) -> Iterator[None]:
        """Take the pod out of the indexes while its reservation or hold changes, and put
        it back after (a pod not in the state has no index entries to keep)."""
        pod = self.pods.get(key)
        if pod is not None:
            self._unindex(pod)
        yield
        if pod is not None:
            self._index(pod)

    def _reindex_unit(self, job: str) -> None:
        """Recompute the job's victim unit: after any change to the job's pods."""
        members = sorted(
            key
            for key in self._jobs.get(job, ())
            if key in self._pod_quota
            and self.pods[key].node_name is not None
            and not self.pods[key].finished
            and self.preemptible(self.pods[key])
        )
        quota = self._pod_quota[members[0]] if members else ""
        whole = len(members) == len(self._jobs.get(job, ()))
        self.victims.update(job, quota, [self.pods[key] for key in members], whole)

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

    def _release_vacancy(self, holder: str) -> Vacancy:
        vacancy = self.book.vacancies.pop(holder)
        self.book.unreserve(holder)
        self.node_usage.release(vacancy.node, holder)
        self.ledger.charge(
            vacancy.quota, vacancy.requests, preemptible=vacancy.preemptible, used=True, sign=-1
        )
        return vacancy

    def _fill_vacancy(self, pod: PodInfo, reservation: Reservation) -> None:
        """A new pending pod of a job with vacated room takes a vacancy of its shape, quota
        and controller (its own name's first: a StatefulSet re-creates a pod under it)."""
        vacated = self.book.vacancies_of(pod.job)
        if not vacated:
            return
        try:
            quota = self._resolve_quota(pod)
        except UnknownQuotaError:
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


def _member(index: dict[str, set[str]], at: str, key: str, sign: int) -> None:
    """Add ``key`` to (``sign=1``) or take it from (``-1``) the set at ``index[at]``."""
    if sign > 0:
        index.setdefault(at, set()).add(key)
        return
    members = index.get(at)
    if members is not None:
        members.discard(key)
        if not members:
            del index[at]
