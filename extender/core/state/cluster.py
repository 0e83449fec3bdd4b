"""The cluster as the core sees it: :class:`ClusterState`, a façade over small indexes.

Fed one object at a time (by the informers, by ``simulate`` from manifests, by tests),
it keeps what decisions read without walking the whole cluster: the objects (nodes,
pods, the quota tree, pod groups, disruption budgets); per job its pods, the pods
marked for it, per node the pods nominated to it; and the indexes of their own modules: node usage
(:mod:`.nodes`), the quota ledger (:mod:`quota.accounting`), victim units
(:mod:`.victims`), reservations and admission holds (:mod:`.book`); its mixins :mod:`.room`
(held room added, ended, expired) and :mod:`.jobview` (what it knows per job).

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
from typing import Any, NamedTuple

from base import keys
from base.resources import Resources, add_into
from extender.core.budgets import DisruptionBudget
from extender.core.config import MusterArgs
from extender.core.jobs import is_preemptible
from extender.core.objects import NodeInfo, PodInfo
from extender.core.podgroups import PodGroupInfo, min_resources_hold
from extender.core.state.book import Reservation, ReservationBook, Vacancy
from extender.core.state.jobview import JobsMixin
from extender.core.state.nodes import NodeUsage, memoise_on_node
from extender.core.state.room import RoomMixin
from extender.core.state.victims import VictimIndex
from extender.core.topology import domains_of
from quota.accounting import QuotaLedger
from quota.tree import QuotaMembershipError, QuotaSpec, QuotaTree

#: Node facts the planner memoises (nodes that could hold a pod shape, the domains of a
#: topology level); cleared on change.
NodeMemo = dict[tuple[object, ...], frozenset[Any]]

#: How many removed pods' UIDs the state remembers (see :meth:`ClusterState.was_removed`).
REMOVED_PODS_REMEMBERED = 10_000


def node_domains(
    state: ClusterState, level: str, holding: Collection[str] = ()
) -> dict[str, frozenset[str]]:
    """The domains of a topology level (:func:`extender.core.topology.domains_of`),
    memoised until a node changes; with ``holding`` (the nodes a job's bound pods are
    on, which fix its domain), only the domains holding all of them."""
    key = ("domains", level)
    cached = state.node_memo.get(key)
    if cached is None:
        cached = frozenset(domains_of(state.nodes.values(), level).items())
        state.node_memo[key] = cached
    return {value: names for value, names in cached if names.issuperset(holding)}


class MinResourcesHold(NamedTuple):
    """A started job's PodGroup ``minResources`` beyond its pods' use, charged to
    ``quota`` as used (see :func:`~extender.core.podgroups.min_resources_hold`)."""

    quota: str
    amount: Resources
    preemptible: bool


def change_hold(
    ledger: QuotaLedger, old: MinResourcesHold | None, new: MinResourcesHold | None
) -> None:
    """Charge ``new`` in place of ``old`` to ``ledger``, as used room no pod requests."""
    for hold, sign in ((old, -1), (new, 1)):
        if hold is not None:
            ledger.charge(
                hold.quota,
                hold.amount,
                preemptible=hold.preemptible,
                used=True,
                sign=sign,
                requested=False,
            )


class ClusterState(RoomMixin, JobsMixin):
    """Nodes, pods, quotas, pod groups and reservations, with the indexes decisions need."""

    def __init__(self, args: MusterArgs | None = None, quotas: Iterable[QuotaSpec] = ()) -> None:
        self.args = args if args is not None else MusterArgs()
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.tree = QuotaTree(quotas, self.args.default_quota())
        self.ledger = QuotaLedger(self.tree)
        #: Per node: requested, reserved and preemptible totals (read-only outside).
        self.node_usage = NodeUsage()
        self.victims = VictimIndex()
        self.book = ReservationBook()
        #: Memo for planners: facts derived from nodes only.
        self.node_memo: NodeMemo = {}
        self._pod_groups: dict[str, PodGroupInfo] = {}  # by job ("ns/group"): the winner
        self._declarations: dict[str, dict[int, PodGroupInfo]] = {}  # job → rank → one
        self._owner_sizes: dict[str, int] = {}  # "ns/Kind/name" → pods it runs at once
        #: Kueue's Topology objects: name → their levels, coarsest first.
        self.kueue_topologies: dict[str, tuple[str, ...]] = {}
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
        #: UIDs of pods admitted preemptible whose label now says otherwise: they stay
        #: preemptible (a tenant cannot protect borrowed room by relabelling a running pod).
        self._preemptible_as_admitted: set[str] = set()
        #: Each running job's PodGroup ``minResources`` as its first counted pod was
        #: admitted with (see :meth:`_hold_min_resources`).
        self._admitted_min_resources: dict[str, dict[str, int]] = {}
        self._marked_for: dict[str, set[str]] = {}  # job → pods whose marks name it
        self._nominated: dict[str, set[str]] = {}  # node → pending pods nominated to it
        self._departing: set[str] = set()  # bound pods on their way out (see leaving())
        self._joined: dict[str, float] = {}  # pod-group job → when its newest pod was seen
        #: Job → (quota, amount, preemptible): what its PodGroup's ``minResources`` holds
        #: in its quota beyond its pods' use (see :func:`min_resources_hold`).
        self._min_holds: dict[str, MinResourcesHold] = {}

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
        if (
            old is not None
            and old.uid == pod.uid
            and self.counts_as_used(old)
            and self.preemptible(old)
            and not is_preemptible(pod, self.args)
        ):
            self._preemptible_as_admitted.add(pod.uid)
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
        self._preemptible_as_admitted.discard(pod.uid)
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

    def not_seen_yet(self, key: str) -> bool:
        """Is ``key``, placed by its job's reservation, a pod the state does not hold yet?  A
        filter call can place a pod the informer delivers only later; a pod seen and then
        removed is no longer in its job's reservation (:meth:`remove_pod`)."""
        return key not in self.pods

    def set_quotas(self, quotas: Iterable[QuotaSpec]) -> None:
        """Replace every quota (raises :class:`quota.tree.QuotaTreeError` on a bad tree)."""
        tree = QuotaTree(quotas, self.args.default_quota())
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

    def set_budget(self, budget: DisruptionBudget) -> None:
        """Record a PodDisruptionBudget (its selector and ``disruptionsAllowed``)."""
        self.budgets[budget.key] = budget

    def forget_budget(self, namespace: str, name: str) -> None:
        self.budgets.pop(f"{namespace}/{name}", None)

    # ---- reading: pods, jobs, quotas -----------------------------------------------

    @property
    def reservations(self) -> Mapping[str, Reservation]:
        """Every in-flight job's reservation, by job."""
        return self.book.reservations

    def quota_of(self, pod: PodInfo) -> str:
        """The pod's quota; raises :class:`QuotaMembershipError` if its label names one it
        may not use (missing, or not admitting its namespace): its job is refused."""
        unknown = self._unknown_quota.get(pod.key)
        if unknown is not None:
            raise QuotaMembershipError(unknown)
        quota = self._pod_quota.get(pod.key)
        return quota if quota is not None else self._resolve_quota(pod)

    def charged_to(self, pod: PodInfo) -> str | None:
        """The quota the pod is counted in (its own, or for a pod whose quota label is
        refused, its namespace's); ``None`` for a pod the state does not hold."""
        return self._pod_quota.get(pod.key)

    def quota_name(self, pod: PodInfo) -> str | None:
        """The pod's quota, or ``None`` if its label names one it may not use."""
        try:
            return self.quota_of(pod)
        except QuotaMembershipError:
            return None

    def preemptible(self, pod: PodInfo) -> bool:
        """May the pod be a victim?  Its label (or the default), except that a pod
        admitted preemptible stays so: the ``preemptible`` label changed to ``"false"`` on
        a pod already counted (bound, reserved or held) asks for a protection its quota
        never checked it against.  (Held in memory: a restarted Muster reads the labels.)"""
        return pod.uid in self._preemptible_as_admitted or is_preemptible(pod, self.args)

    def preemptible_as_admitted(self) -> frozenset[str]:
        """The UIDs :meth:`preemptible` keeps preemptible against their label."""
        return frozenset(self._preemptible_as_admitted)

    def keep_preemptible(self, uids: Iterable[str]) -> None:
        """Restore :meth:`preemptible_as_admitted` (a rebuilt state); before the pods."""
        self._preemptible_as_admitted.update(uids)

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
        for key in self._counted_pods(job, gone):
            add_into(used, self.pods[key].requests)
        for holder in self.book.vacancies_of(job):
            add_into(used, self.book.vacancies[holder].requests)
        return used

    def _counted_pods(self, job: str, gone: Collection[str] = ()) -> list[str]:
        """The keys of the job's pods charged to a quota as used, but ``gone``, in order."""
        return sorted(
            key
            for key in self._jobs.get(job, ())
            if key not in gone and key in self._pod_quota and self.counts_as_used(self.pods[key])
        )

    def min_resources_held(self, job: str) -> MinResourcesHold | None:
        """What the job's PodGroup ``minResources`` holds in its quota beyond its pods'
        use, charged as used; ``None`` for a job that declares none, or has not started,
        or whose pods use all of it."""
        return self._min_holds.get(job)

    def quota_held(self, pod_key: str) -> bool:
        return self.book.is_held(pod_key)

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

    def free_amount(self, node: str, resource: str) -> int:
        """:meth:`free_on` of one resource, read without copying the node's room."""
        return self.node_usage.free_room(node, self.nodes[node].allocatable).get(resource, 0)

    def preemptible_amounts(self, node: str, resource: str) -> tuple[tuple[int, int], ...]:
        """``(priority, amount of resource)`` of each preemptible pod bound to ``node`` that
        asks for some, sorted; memoised until the node changes."""
        known = self.node_usage.victim_amounts.get(node)
        amounts = known.get(resource) if known is not None else None
        if amounts is None:
            amounts = tuple(
                sorted(
                    (pod.priority, pod.requests[resource])
                    for pod in self.pods_on(node)
                    if pod.requests.get(resource, 0) > 0
                    and not pod.finished
                    and pod.key in self._pod_quota
                    and self.preemptible(pod)
                )
            )
            memoise_on_node(self.node_usage.victim_amounts, node, resource, amounts)
        return amounts

    def preemptible_on(self, node: str) -> Mapping[str, int]:
        """Requests of the preemptible pods bound to ``node``: the most eviction could free."""
        return self.node_usage.preemptible.get(node, {})

    # ---- the one path into the indexes ---------------------------------------------

    def _resolve_quota(self, pod: PodInfo) -> str:
        return self.tree.quota_for(pod.namespace, pod.labels.get(keys.QUOTA_NAME_LABEL))

    def _index(self, pod: PodInfo) -> None:
        self._count(pod, 1)
        self._hold_min_resources(pod.job)
        if pod.job in self.victims or (
            pod.node_name is not None
            and not pod.finished
            and pod.key in self._pod_quota
            and self.preemptible(pod)
        ):
            self._reindex_unit(pod.job)

    def _unindex(self, pod: PodInfo) -> None:
        self._count(pod, -1)
        self._hold_min_resources(pod.job)
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
            except QuotaMembershipError as error:
                # Its job is refused (quota_of raises), but the pod is never charged to
                # nothing: a label put on a running pod must not take it out of its
                # quota's accounting, nor out of the victims.  It counts in the quota
                # of its namespace (or the default quota), where it would be without it.
                self._unknown_quota[key] = error.reason
                self._pod_quota[key] = self.tree.quota_for(pod.namespace, None)
        else:
            self._unknown_quota.pop(key, None)
        quota = self._pod_quota.pop(key) if sign < 0 else self._pod_quota[key]
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

    def _hold_min_resources(self, job: str) -> None:
        """Charge the job's ``minResources`` hold anew: after any change to its pods or
        its PodGroup.  The amount its first counted pod was admitted with is kept as the
        most it may hold while the job runs: admission checked that amount, not one the
        PodGroup's owner (a tenant) writes later."""
        old = self._min_holds.pop(job, None)
        if old is None and not self.declares_min_resources(job):
            self._admitted_min_resources.pop(job, None)
            return  # the common case: no hold, none to make
        group = self._pod_groups.get(job)
        if not self._counted_pods(job):
            self._admitted_min_resources.pop(job, None)
        elif group is not None and job not in self._admitted_min_resources:
            self._admitted_min_resources[job] = dict(group.min_resources)
        new = self.min_resources_hold_without(job, ())
        change_hold(self.ledger, old, new)
        if new is not None:
            self._min_holds[job] = new

    def declares_min_resources(self, job: str) -> bool:
        """Does the job's PodGroup declare ``minResources``?"""
        group = self._pod_groups.get(job)
        return group is not None and bool(group.min_resources)

    def min_resources_hold_without(
        self, job: str, gone: Collection[str]
    ) -> MinResourcesHold | None:
        """The job's ``minResources`` hold once the pods keyed in ``gone`` have left: held
        from its first pod that counts as used, in that pod's quota (the first by key),
        preemptible as that pod is; ``None`` when no pod of it counts, or they use it all."""
        group = self._pod_groups.get(job)
        if group is None or not group.min_resources:
            return None
        counted = self._counted_pods(job, gone)
        if not counted:
            return None
        declared: Mapping[str, int] = group.min_resources
        admitted = self._admitted_min_resources.get(job)
        if admitted is not None:  # raised since admission: no more than was admitted
            declared = {name: min(v, admitted.get(name, 0)) for name, v in declared.items()}
        amount = min_resources_hold(declared, self.job_used(job, gone))
        if not amount:
            return None
        first = self.pods[counted[0]]
        return MinResourcesHold(self._pod_quota[first.key], amount, self.preemptible(first))

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
