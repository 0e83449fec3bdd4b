"""The cluster as the core sees it: :class:`ClusterState`, made of small parts.

Fed one object at a time (by the informers, by ``simulate`` from manifests, by tests), it
keeps what decisions read without walking the whole cluster, in parts with fields of
their own: the pods and who they belong to (:mod:`.directory`), what jobs declare
(:mod:`.declarations`), the quota each pod counts in (:mod:`.membership`), node usage
(:mod:`.nodes`), the quota ledger (:mod:`quota.accounting`), victim units
(:mod:`.victims`), reservations and holds (:mod:`.book`), ``minResources`` holds
(:mod:`.minresources`).  Its room operations (reservations added, ended, expired) are
:mod:`.room`'s, DRA's devices :mod:`.devices`'; what decisions read of a pod or a job
(its quota, whether it counts as used, a job's use) is :mod:`.podview`'s, and of one
node (pods on it, free room, preemptible amounts) :mod:`.nodeview`'s.  This module
keeps the fields and feeds the parts.

Every change to a pod reaches every part through one path, :meth:`ClusterState._count`
(the old version out, the new one in).  A pod *counts as used* when it is bound, or
pending with a reservation or an admission hold: its requests are charged to its quota,
and reserved room is held on its node.  Decisions read a state and never change it; the
front doors apply the effects they return (:mod:`extender.core.effects`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from extender.core.budgets import DisruptionBudget
from extender.core.config import MusterArgs
from extender.core.dra import DraCatalog
from extender.core.jobs import is_preemptible
from extender.core.objects import NodeInfo, PodInfo
from extender.core.podgroups import PodGroupInfo
from extender.core.state.book import ReservationBook
from extender.core.state.declarations import JobDeclarations
from extender.core.state.devices import DevicesMixin
from extender.core.state.directory import PodDirectory
from extender.core.state.membership import QuotaMembership
from extender.core.state.minresources import MinResourcesHolds
from extender.core.state.nodes import NodeUsage
from extender.core.state.nodeview import NodeViewMixin
from extender.core.state.podview import PodViewMixin
from extender.core.state.room import RoomMixin
from extender.core.state.victims import VictimIndex
from quota.accounting import QuotaLedger
from quota.tree import QuotaSpec, QuotaTree

#: Node facts the planner memoises (nodes that could hold a pod shape, the domains of a
#: topology level); cleared on change.
NodeMemo = dict[tuple[object, ...], frozenset[Any]]


class ClusterState(PodViewMixin, NodeViewMixin, RoomMixin, DevicesMixin):
    """Nodes, pods, quotas, pod groups and reservations, with the parts decisions read."""

    def __init__(self, args: MusterArgs | None = None, quotas: Iterable[QuotaSpec] = ()) -> None:
        self.args = args if args is not None else MusterArgs()
        self.nodes: dict[str, NodeInfo] = {}
        self.members = PodDirectory()
        #: The pods by key (:attr:`members`' map; read-only outside the state).
        self.pods = self.members.pods
        self.declarations = JobDeclarations(self.args, self.members)
        self.membership = QuotaMembership(self.args)
        self.tree = QuotaTree(quotas, self.args.default_quota())
        self.ledger = QuotaLedger(self.tree)
        #: Per node: requested, reserved and preemptible totals (read-only outside).
        self.node_usage = NodeUsage()
        self.victims = VictimIndex()
        self.book = ReservationBook()
        #: Memo for planners: facts derived from nodes only.
        self.node_memo: NodeMemo = {}
        #: Counts changes that free room only Muster sees (quotas replaced, reservations
        #: and admission holds let go): what makes parked pods worth a nudge.
        self.room_epoch = 0
        #: Counts bound pods that stopped holding their room (deleted, finished, or
        #: replaced by a new pod of the same name, its delete missed): the events on which
        #: kube-scheduler retries the pods it found no room for.
        self.freed = 0
        #: PodDisruptionBudgets, by ``namespace/name``.
        self.budgets: dict[str, DisruptionBudget] = {}
        #: What started jobs' PodGroup ``minResources`` hold beyond their pods' use.
        self.min_resources = MinResourcesHolds()
        #: DRA's objects; their devices are counted into pods and nodes (:mod:`.devices`).
        self.dra = DraCatalog(self.args.device_class_resources)
        self.given_nodes: dict[str, NodeInfo] = {}
        self.device_pods: set[str] = set()

    # ---- feeding -------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> None:
        """Add or replace a node.  The same node again (a status update: heartbeat,
        conditions, images) changes nothing and keeps every memo: at 5,000 nodes such
        updates come several times a second, and each would otherwise make the next plan
        recompute every node's eligibility.  DRA devices its ResourceSlices publish are
        added to its ``allocatable`` (:mod:`.devices`)."""
        self.given_nodes[node.name] = node
        node = self._with_devices(node)
        if self.nodes.get(node.name) == node:
            return
        self.nodes[node.name] = node
        self.node_usage.add_node(node.name)
        self.node_memo.clear()

    def remove_node(self, name: str) -> None:
        self.given_nodes.pop(name, None)
        self.nodes.pop(name, None)
        self.node_usage.remove_node(name)
        self.node_memo.clear()

    def upsert_pod(self, pod: PodInfo, now: float | None = None) -> None:
        """Add or replace a pod.  ``now``: when it is seen (live); a new pod of a pod group
        marks when its job last grew (:meth:`PodDirectory.last_joined
        <extender.core.state.directory.PodDirectory.last_joined>`), else its creation time
        does.  A pod with DRA claims is stored with their devices in its requests
        (:mod:`.devices`), and the other pods sharing a claim are charged anew."""
        others = set()
        if pod.devices is not None or pod.key in self.device_pods:
            others = self._track(pod)
        self._upsert(self._resolved(pod), now)
        self._recharge(others)

    def _upsert(self, pod: PodInfo, now: float | None) -> None:
        old = self.pods.get(pod.key)
        if (
            old is not None
            and old.node_name is not None
            and not old.finished
            and (pod.finished or pod.uid != old.uid)
        ):
            self.freed += 1  # finished, or gone: a new pod under its name (a relist)
        if (
            old is not None
            and old.uid == pod.uid
            and self.counts_as_used(old)
            and self.preemptible(old)
            and not is_preemptible(pod, self.args)
        ):
            self.membership.keep_preemptible((pod.uid,))  # it stays preemptible
        if old is not None:
            self._unindex(old)
        elif pod.group is not None:
            seen = now if now is not None else pod.created
            self.members.joins(pod.job, seen)
        self.pods[pod.key] = pod
        if old is None and pod.node_name is None and not pod.finished:
            self._take_reserved_room(pod)
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
        if pod.node_name is not None and not pod.finished:
            self.freed += 1
        others = self._untrack(pod) if key in self.device_pods else set()
        self.membership.forget_preemptible(pod.uid)
        quota = self.membership.charged_to(key)
        self._unindex(pod)
        self.members.removed(pod)
        reserved = self.book.reserved(key)
        if reserved is not None:
            self._leave_reserved_room(pod, reserved[1], quota, now)
        self.book.unhold(key)
        if not self.members.has_job(pod.job) and not self.book.vacancies_of(pod.job):
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
        self._recharge(others)

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

    def set_pod_group(self, group: PodGroupInfo) -> None:
        """Record a gang declaration (a PodGroup's ``minMember``, schedule timeout and
        ``minResources``).  Where two APIs declare one job, the lower ``rank`` wins."""
        self.declarations.set_pod_group(group)
        self._hold_min_resources(group.job)
        if group.job in self.victims:  # its minimum may have changed
            self._reindex_unit(group.job)

    def forget_pod_group(self, namespace: str, name: str, rank: int = 0) -> None:
        """The declaration of that rank is gone (or unreadable): another API's, if any,
        declares the job; else its pods are a job of all of them."""
        job = f"{namespace}/{name}"
        self.declarations.forget_pod_group(job, rank)
        self._hold_min_resources(job)
        if job in self.victims:
            self._reindex_unit(job)

    # ---- the one path into the indexes ---------------------------------------------

    def _index(self, pod: PodInfo) -> None:
        self._count(pod, 1)
        self._hold_min_resources(pod.job)
        if pod.job in self.victims or (
            pod.node_name is not None
            and not pod.finished
            and self.membership.charged_to(pod.key) is not None
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
        self.members.index(pod, sign)
        # A pod whose quota label is refused is charged to its namespace's quota.
        quota = (
            self.membership.assign(pod, self.tree) if sign > 0 else self.membership.unassign(key)
        )
        if not live:
            return
        if pod.waiting_to_bind:
            self.membership.count_pending(quota, sign)
        preemptible = self.preemptible(pod)
        used = self.counts_as_used(pod)
        self.ledger.charge(quota, pod.requests, preemptible=preemptible, used=used, sign=sign)
        if pod.node_name is not None:
            self.node_usage.bind(
                pod.node_name, key, pod.requests, preemptible=preemptible, sign=sign, quota=quota
            )
            return
        reserved = self.book.reserved(key)
        if reserved is not None:
            if sign > 0:
                self.node_usage.hold(reserved[1], key, pod.requests)
            else:
                self.node_usage.release(reserved[1], key)

    def _hold_min_resources(self, job: str) -> None:
        """Charge the job's ``minResources`` hold anew (:meth:`MinResourcesHolds.rehold
        <extender.core.state.minresources.MinResourcesHolds.rehold>`)."""
        self.min_resources.rehold(self, job)

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
            for key in self.members.job_members(job)
            if self.membership.charged_to(key) is not None
            and self.pods[key].node_name is not None
            and not self.pods[key].finished
            and self.preemptible(self.pods[key])
        )
        quota = self.membership.charged(members[0]) if members else ""
        whole = len(members) == len(self.members.job_members(job))
        minimum = None
        if len(members) > 1 and self.pods[members[0]].group is not None:
            minimum = self.declarations.declared_min_available(job)
        self.victims.update(job, quota, [self.pods[key] for key in members], whole, minimum)
