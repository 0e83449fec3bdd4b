"""The cluster as the core sees it: nodes, pods, quotas, gangs, reservations.

A :class:`Snapshot` is fed one object at a time (by the Kubernetes informers,
by ``simulate`` from manifests, by tests directly) and keeps the indexes and
running totals decisions need, so that no decision walks the whole cluster:

- per node: requested resources of its pods, the pods on it, and the room
  held for each in-flight job;
- per quota: usage (:class:`quota.accounting.QuotaLedger`) and its running
  preemptible pods (the only possible victims), grouped in *victim units* (a
  pod, or a gang's pods) kept sorted in preemption order, per quota and for
  all quotas together;
- per job: its pods, and its min-available.

Decisions (filter, score, plan) read a snapshot and never change it; the
adapters apply their outcomes.  A pod *counts as used* when it is bound to a
node, or pending with a reservation: reserved room is charged to its quota
and held on its node until the pod binds or the reservation ends.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from base import keys
from base.errors import ManifestError
from base.resources import Resources, add_into, subtract
from extender.core.config import MusterArgs
from extender.core.jobs import is_preemptible, min_available_annotation
from extender.core.objects import NodeInfo, PodInfo
from quota.accounting import QuotaLedger
from quota.tree import QuotaSpec, QuotaTree


@dataclass(frozen=True, slots=True)
class Reservation:
    """Room held for a job whose victims were marked: pod → node, until it binds."""

    job: str
    quota: str
    placements: Mapping[str, str]  # pod key → node name
    victims: tuple[str, ...]  # pod keys
    created: float
    expires: float


#: Where a victim unit's pods run and what they ask for: ``(node, resources)`` when the
#: unit is all of its job's pods and they run on one node (a lone pod, usually), with the
#: resources they request a positive amount of; else :data:`SCATTERED`.
UnitPlace = tuple[str, frozenset[str]]
SCATTERED: UnitPlace = ("", frozenset())

#: A victim unit in preemption order: ``(highest priority, -latest start, job, quota,
#: place)``.
UnitEntry = tuple[int, float, str, str, UnitPlace]


class UnknownQuotaError(LookupError):
    """A pod names a quota that does not exist."""


class Snapshot:
    """Nodes, pods, quotas, pod groups and reservations, with the indexes decisions need."""

    def __init__(self, args: MusterArgs | None = None, quotas: Iterable[QuotaSpec] = ()) -> None:
        self.args = args if args is not None else MusterArgs()
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.reservations: dict[str, Reservation] = {}
        self.tree = QuotaTree(quotas)
        self.ledger = QuotaLedger(self.tree)
        self._pod_groups: dict[str, int] = {}  # "ns/group" → minMember
        self._node_requested: dict[str, Resources] = {}
        self._node_pods: dict[str, set[str]] = {}
        self._node_reserved: dict[str, dict[str, Resources]] = {}  # node → pod key → room
        self._jobs: dict[str, set[str]] = {}
        self._marked_for: dict[str, set[str]] = {}  # job → pods whose marks name it
        self._nominated: dict[str, set[str]] = {}  # node → pending pods nominated to it
        self._pod_quota: dict[str, str] = {}
        self._unknown_quota: dict[str, str] = {}
        self._victims: dict[str, set[str]] = {}  # quota → running preemptible pod keys
        self._node_preemptible: dict[str, Resources] = {}  # node → their requests
        self._node_victims: dict[str, dict[str, str]] = {}  # node → preemptible pod → quota
        # Victim units (a running preemptible pod, or the running preemptible pods of a
        # gang), per quota and all together, sorted by (highest priority, -latest start,
        # job, quota); a job has at most one unit.
        self._units: dict[str, list[UnitEntry]] = {}
        self._all_units: list[UnitEntry] = []
        self._unit_of: dict[str, UnitEntry] = {}  # job → its entry
        self._unit_pods: dict[str, tuple[PodInfo, ...]] = {}  # job → the unit's pods
        # The resource sets of the units' places → (that set, shared by them; how many).
        self._unit_resources: dict[frozenset[str], tuple[frozenset[str], int]] = {}
        self._reserved_pod: dict[str, tuple[str, str]] = {}  # pod key → (job, node)
        self._held_pod: dict[str, str] = {}  # pod key → job whose admission holds quota
        self._held_until: dict[str, float] = {}  # job → when its hold ends
        #: Memo for planners: facts derived from nodes only; cleared when nodes change.
        self.node_cache: dict[object, object] = {}

    # ---- feeding -------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> None:
        self.nodes[node.name] = node
        self._node_requested.setdefault(node.name, {})
        self._node_pods.setdefault(node.name, set())
        self.node_cache.clear()

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.node_cache.clear()

    def upsert_pod(self, pod: PodInfo) -> None:
        old = self.pods.get(pod.key)
        if old is not None:
            self._unindex(old)
        self.pods[pod.key] = pod
        reserved = self._reserved_pod.get(pod.key)
        if reserved is not None and (pod.node_name is not None or pod.finished):
            self._drop_reserved_pod(pod.key)
        if pod.node_name is not None or pod.finished:
            self._held_pod.pop(pod.key, None)
        self._index(pod)

    def remove_pod(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        self._unindex(pod)
        if key in self._reserved_pod:
            self._drop_reserved_pod(key)
        self._held_pod.pop(key, None)
        # A pod that is gone leaves its job's reservation: one re-created under its name
        # is a new pod, not reserved by the old one's placement.
        reservation = self.reservations.get(pod.job)
        if reservation is not None and key in reservation.placements:
            placements = {k: n for k, n in reservation.placements.items() if k != key}
            self.reservations[pod.job] = dataclasses.replace(reservation, placements=placements)

    def set_quotas(self, quotas: Iterable[QuotaSpec]) -> None:
        """Replace every quota (raises :class:`quota.tree.QuotaTreeError` on a bad tree)."""
        tree = QuotaTree(quotas)
        for pod in self.pods.values():
            self._unindex(pod)
        self.tree = tree
        self.ledger = QuotaLedger(tree)
        self._victims = {}
        self._node_preemptible = {}
        self._node_victims = {}
        self._units = {}
        self._all_units = []
        self._unit_of = {}
        self._unit_pods = {}
        self._unit_resources = {}
        for pod in self.pods.values():
            self._index(pod)

    def set_pod_group(self, namespace: str, name: str, min_member: int | None) -> None:
        """Record a PodGroup's ``minMember`` (``None`` forgets the group)."""
        key = f"{namespace}/{name}"
        if min_member is None:
            self._pod_groups.pop(key, None)
        else:
            self._pod_groups[key] = min_member

    def add_reservation(self, reservation: Reservation) -> None:
        """Hold room for a job's pending pods on the nodes the plan chose (a reserved pod's
        admission hold, if any, ends: the reservation charges its quota now)."""
        self.remove_reservation(reservation.job)
        self.reservations[reservation.job] = reservation
        for pod_key, node in reservation.placements.items():
            pod = self.pods.get(pod_key)
            if pod is None or pod.node_name is not None:
                continue
            with self._reindexing(pod_key):
                self._reserved_pod[pod_key] = (reservation.job, node)
                self._held_pod.pop(pod_key, None)

    def remove_reservation(self, job: str) -> Reservation | None:
        reservation = self.reservations.pop(job, None)
        if reservation is None:
            return None
        for pod_key in reservation.placements:
            if self._reserved_pod.get(pod_key, ("", ""))[0] == job:
                with self._reindexing(pod_key):
                    del self._reserved_pod[pod_key]
        return reservation

    def expire_reservations(self, now: float) -> list[Reservation]:
        """End the reservations whose time is up; return them."""
        expired = [r for r in self.reservations.values() if r.expires <= now]
        for reservation in expired:
            self.remove_reservation(reservation.job)
        return expired

    # ---- reading -------------------------------------------------------------------

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
            pod.node_name is not None or pod.key in self._reserved_pod or pod.key in self._held_pod
        )

    def quota_held(self, pod_key: str) -> bool:
        return pod_key in self._held_pod

    def quota_holds(self) -> dict[str, tuple[float, frozenset[str]]]:
        """Every admission hold: job → (when it ends, the pending pods it charges)."""
        held: dict[str, set[str]] = {}
        for key, job in self._held_pod.items():
            held.setdefault(job, set()).add(key)
        return {
            job: (until, frozenset(held.get(job, ()))) for job, until in self._held_until.items()
        }

    def hold_quota(self, job: str, pod_keys: Iterable[str], until: float) -> None:
        """Charge these pending pods of an admitted job to its quota until ``until``, so a
        job admitted whole cannot lose the rest of its room to a job admitted meanwhile."""
        self._held_until[job] = max(until, self._held_until.get(job, until))
        for key in pod_keys:
            pod = self.pods.get(key)
            if pod is None or key in self._held_pod or self.counts_as_used(pod):
                continue
            with self._reindexing(key):
                self._held_pod[key] = job

    def release_quota_holds(self, now: float) -> list[str]:
        """End the holds whose time is up; return their jobs."""
        ended = [job for job, until in self._held_until.items() if until <= now]
        for job in ended:
            del self._held_until[job]
            for key in [k for k, holder in self._held_pod.items() if holder == job]:
                with self._reindexing(key):
                    del self._held_pod[key]
        return ended

    def marked_victims(self, job: str) -> Collection[str]:
        """Keys of the pods still present whose soft-eviction mark names ``job``: its
        victims on their way out (the job is in flight while there are any)."""
        return self._marked_for.get(job, ())

    def nominated_to(self, node: str) -> Collection[str]:
        """Keys of the pending pods whose ``status.nominatedNodeName`` is ``node``."""
        return self._nominated.get(node, ())

    def promised_victims(self) -> set[str]:
        """Keys of the victims of every in-flight reservation (no one else's victims)."""
        return {key for reservation in self.reservations.values() for key in reservation.victims}

    def reserved_node(self, pod_key: str) -> str | None:
        reserved = self._reserved_pod.get(pod_key)
        return reserved[1] if reserved is not None else None

    def job_pods(self, job: str) -> list[PodInfo]:
        """The job's pods, in a stable order (by name)."""
        return [self.pods[key] for key in sorted(self._jobs.get(job, ()))]

    def job_members(self, job: str) -> Collection[str]:
        """The keys of the job's pods, unordered (cheaper than :meth:`job_pods`)."""
        return self._jobs.get(job, ())

    def min_available(self, job: str) -> int:
        """How many of the job's pods must run together (default: all of them)."""
        pods = self.job_pods(job)
        if job in self._pod_groups:
            return self._pod_groups[job]
        for pod in pods:
            try:
                declared = min_available_annotation(pod)
            except ManifestError:
                continue  # not a number: ignored here (simulate rejects it outright)
            if declared is not None:
                return declared
        return len(pods)

    def pods_on(self, node: str) -> Iterator[PodInfo]:
        for key in self._node_pods.get(node, ()):
            yield self.pods[key]

    def requested_on(self, node: str) -> Mapping[str, int]:
        return self._node_requested.get(node, {})

    def reserved_on(self, node: str) -> Mapping[str, Mapping[str, int]]:
        """Room held on ``node`` for pending pods of in-flight jobs, by pod key."""
        return self._node_reserved.get(node, {})

    def nodes_with_reserved_room(self) -> Collection[str]:
        """The nodes holding room for some reserved pod (usually few or none)."""
        return self._node_reserved.keys()

    def reservation_holder(self, pod_key: str) -> str | None:
        """The job a reserved pod belongs to."""
        reserved = self._reserved_pod.get(pod_key)
        return reserved[0] if reserved is not None else None

    def free_on(self, node: str, for_pod: str | None = None) -> Resources:
        """Allocatable minus requested minus room held for pods other than ``for_pod``."""
        free = subtract(self.nodes[node].allocatable, self._node_requested.get(node, {}))
        for holder, room in self._node_reserved.get(node, {}).items():
            if holder != for_pod:
                add_into(free, room, -1)
        return free

    def preemptible_on(self, node: str) -> Mapping[str, int]:
        """Requests of the preemptible pods bound to ``node``: the most eviction could free."""
        return self._node_preemptible.get(node, {})

    def preemptible_pods_on(self, node: str) -> Mapping[str, str]:
        """The bound, preemptible pods of ``node``: pod key → quota."""
        return self._node_victims.get(node, {})

    def victim_units(self, quota: str | None = None) -> Sequence[UnitEntry]:
        """The quota's victim units (every quota's with ``None``), lowest priority then
        most recently started first: ``(highest priority, -latest start, job, quota,
        place)`` over the running preemptible pods of each job (one pod, or a gang's);
        see :data:`UnitPlace`.

        A job has one unit, so the list of all quotas is in the order a merge of the
        per-quota lists gives.
        """
        if quota is None:
            return self._all_units
        return self._units.get(quota, ())

    def victim_unit_pods(self) -> Mapping[str, tuple[PodInfo, ...]]:
        """Job → the pods of its victim unit (running, preemptible), by key."""
        return self._unit_pods

    def victim_unit_resources(self) -> Collection[frozenset[str]]:
        """The resource sets in the places of the victim units (see :data:`UnitPlace`)."""
        return self._unit_resources.keys()

    def node_totals(
        self,
    ) -> tuple[
        Mapping[str, Mapping[str, int]],
        Mapping[str, Mapping[str, Mapping[str, int]]],
        Mapping[str, Mapping[str, int]],
    ]:
        """The running totals behind :meth:`free_on` and :meth:`preemptible_on`, for a
        decision that reads every node: node → requested resources, node → room held
        by reserved pod, node → requests of preemptible pods (read-only)."""
        return self._node_requested, self._node_reserved, self._node_preemptible

    def running_preemptible(self, quota: str) -> Iterable[str]:
        """Keys of the quota's bound, preemptible pods (candidates before policy)."""
        return self._victims.get(quota, ())

    def has_untallied_pods(self) -> bool:
        """Are there running pods :meth:`preemptible_on` leaves out though a victim gang
        could take them along?  Those that name a quota that does not exist (they do
        count in :meth:`free_on`)."""
        return any(
            self.pods[key].node_name is not None and not self.pods[key].finished
            for key in self._unknown_quota
        )

    def pod_counts(self) -> tuple[int, int]:
        """(bound pods, pending pods), for reports."""
        bound = sum(1 for pod in self.pods.values() if pod.node_name and not pod.finished)
        return bound, len(self.pods) - bound

    # ---- indexes -------------------------------------------------------------------

    def _resolve_quota(self, pod: PodInfo) -> str:
        named = pod.labels.get(keys.QUOTA_NAME_LABEL)
        if named:
            if named not in self.tree:
                raise UnknownQuotaError(named)
            return named
        return self.tree.quota_in_namespace(pod.namespace) or keys.DEFAULT_QUOTA

    def _index(self, pod: PodInfo) -> None:
        self._add(pod)
        job = pod.job
        if job in self._unit_of or (
            pod.node_name is not None
            and not pod.finished
            and pod.key in self._pod_quota
            and self.preemptible(pod)
        ):
            self._reindex_unit(job)

    def _unindex(self, pod: PodInfo) -> None:
        self._remove(pod)
        if pod.job in self._unit_of:  # one of its pods, or a pod beside them, went
            self._reindex_unit(pod.job)

    def _add(self, pod: PodInfo) -> None:
        key = pod.key
        self._jobs.setdefault(pod.job, set()).add(key)
        if pod.marked_for is not None and not pod.finished:
            self._marked_for.setdefault(pod.marked_for, set()).add(key)
        if pod.nominated_node_name is not None and pod.node_name is None and not pod.finished:
            self._nominated.setdefault(pod.nominated_node_name, set()).add(key)
        try:
            quota = self._resolve_quota(pod)
        except UnknownQuotaError as error:
            # No quota to charge, but a running pod still takes room on its node.
            self._unknown_quota[key] = str(error.args[0])
            if pod.node_name is not None and not pod.finished:
                add_into(self._node_requested.setdefault(pod.node_name, {}), pod.requests)
                self._node_pods.setdefault(pod.node_name, set()).add(key)
            return
        self._pod_quota[key] = quota
        if pod.finished:
            return
        preemptible = self.preemptible(pod)
        used = self.counts_as_used(pod)
        self.ledger.charge(quota, pod.requests, preemptible=preemptible, used=used)
        if pod.node_name is not None:
            add_into(self._node_requested.setdefault(pod.node_name, {}), pod.requests)
            self._node_pods.setdefault(pod.node_name, set()).add(key)
            if preemptible:
                self._victims.setdefault(quota, set()).add(key)
                add_into(self._node_preemptible.setdefault(pod.node_name, {}), pod.requests)
                self._node_victims.setdefault(pod.node_name, {})[key] = quota
        elif key in self._reserved_pod:
            _job, node = self._reserved_pod[key]
            self._node_reserved.setdefault(node, {})[key] = dict(pod.requests)

    def _remove(self, pod: PodInfo) -> None:
        key = pod.key
        members = self._jobs.get(pod.job)
        if members is not None:
            members.discard(key)
            if not members:
                del self._jobs[pod.job]
        for index, at in (
            (self._marked_for, pod.marked_for),
            (self._nominated, pod.nominated_node_name),
        ):
            keys_there = index.get(at or "")
            if keys_there is not None:
                keys_there.discard(key)
                if not keys_there:
                    del index[at or ""]
        if self._unknown_quota.pop(key, None) is not None:
            if pod.node_name is not None and not pod.finished:
                add_into(self._node_requested[pod.node_name], pod.requests, -1)
                self._node_pods[pod.node_name].discard(key)
            return
        quota = self._pod_quota.pop(key)
        if pod.finished:
            return
        preemptible = self.preemptible(pod)
        used = self.counts_as_used(pod)
        self.ledger.charge(quota, pod.requests, preemptible=preemptible, used=used, sign=-1)
        if pod.node_name is not None:
            add_into(self._node_requested[pod.node_name], pod.requests, -1)
            self._node_pods[pod.node_name].discard(key)
            if preemptible:
                self._victims.get(quota, set()).discard(key)
                add_into(self._node_preemptible[pod.node_name], pod.requests, -1)
                del self._node_victims[pod.node_name][key]
        elif key in self._reserved_pod:
            _job, node = self._reserved_pod[key]
            held = self._node_reserved[node]
            del held[key]
            if not held:
                del self._node_reserved[node]

    @contextmanager
    def _reindexing(self, key: str) -> Iterator[None]:
        """Take the pod out of the indexes while its reservation or hold changes, and put
        it back after (a pod not in the snapshot has no index entries to keep)."""
        pod = self.pods.get(key)
        if pod is not None:
            self._unindex(pod)
        yield
        if pod is not None:
            self._index(pod)

    def _reindex_unit(self, job: str) -> None:
        """Recompute the job's victim unit: after any change to the job's pods."""
        old = self._unit_of.pop(job, None)
        if old is not None:
            units = self._units[old[3]]
            del units[bisect.bisect_left(units, old)]
            del self._all_units[bisect.bisect_left(self._all_units, old)]
            del self._unit_pods[job]
            resources = old[4][1]
            if resources:
                shared, count = self._unit_resources[resources]
                if count == 1:
                    del self._unit_resources[resources]
                else:
                    self._unit_resources[resources] = (shared, count - 1)
        members = sorted(
            key
            for key in self._jobs.get(job, ())
            if key in self._pod_quota
            and self.pods[key].node_name is not None
            and not self.pods[key].finished
            and self.preemptible(self.pods[key])
        )
        if not members:
            return
        pods = [self.pods[key] for key in members]
        place = SCATTERED
        node = pods[0].node_name
        if (
            node is not None
            and len(members) == len(self._jobs[job])
            and all(pod.node_name == node for pod in pods)
        ):
            resources = frozenset(
                name for pod in pods for name, amount in pod.requests.items() if amount > 0
            )
            if resources:
                resources, count = self._unit_resources.get(resources, (resources, 0))
                self._unit_resources[resources] = (resources, count + 1)
                place = (node, resources)
        entry = (
            max(pod.priority for pod in pods),
            -max(pod.start_or_created for pod in pods),
            job,
            self._pod_quota[members[0]],
            place,
        )
        bisect.insort(self._units.setdefault(entry[3], []), entry)
        bisect.insort(self._all_units, entry)
        self._unit_of[job] = entry
        self._unit_pods[job] = tuple(pods)

    def _drop_reserved_pod(self, key: str) -> None:
        """A reserved pod bound or went away: it no longer holds reserved room."""
        job, _node = self._reserved_pod.pop(key)
        if job in self.reservations and not any(
            holder == job for holder, _ in self._reserved_pod.values()
        ):
            del self.reservations[job]
