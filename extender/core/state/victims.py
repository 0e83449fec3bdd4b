"""The victim index: running preemptible pods grouped in victim units, in preemption order.

One of the indexes behind :class:`~extender.core.state.ClusterState`.  A *victim unit*
is what is evicted together: a running preemptible pod, or the running preemptible pods
of a gang (evicting part of a gang wastes the rest).  Units are kept sorted, per quota
and all together, in **the victim order**, defined here and nowhere else:

1. lowest priority first (a unit's priority is its highest pod's);
2. then the least work lost first: the unit whose work began latest (a unit's is its
   latest pod's: the later of its start, or creation when it has not started, and its
   last checkpoint, :attr:`~extender.core.objects.PodInfo.work_started`);
3. then by job name, then by quota: a stable key.

"Other quotas first", the order's first rule in docs/design.md, is the candidate walk's
(:mod:`extender.core.preemption.candidates` takes other quotas' units before the
preemptor's own); within each walk, units come in this order, except that with fair
sharing the walk ranks the other quotas among units of one priority (the quota furthest
above its fair share first).

Every quota's units are also kept split by the resources their pods ask for
(:meth:`VictimIndex.units_asking`), so a walk for a job short of GPUs reads the units
that ask for GPUs (and the lists holding scattered units) and never the CPU-only ones, in
the same order.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from base.resources import add_into, total
from extender.core.objects import PodInfo

#: Where a victim unit's pods run and what they ask for: ``(node, resources)`` when the
#: unit is all of its job's pods and they run on one node (a lone pod, usually), with the
#: resources they request a positive amount of; else :data:`SCATTERED`.
UnitPlace = tuple[str, frozenset[str]]
SCATTERED: UnitPlace = ("", frozenset())

#: A victim unit, sortable in the victim order: ``(highest priority, -latest start, job,
#: quota, place)``.
UnitEntry = tuple[int, float, str, str, UnitPlace]

#: One of the index's sorted lists: ``("all", None)``, ``("quota", quota)`` or
#: ``("asks", resources)``.
ListKey = tuple[str, str | frozenset[str] | None]


class VictimIndex:
    def __init__(self) -> None:
        self._units: dict[str, list[UnitEntry]] = {}  # quota → its units, in order
        self._all: list[UnitEntry] = []
        self._unit_of: dict[str, UnitEntry] = {}  # job → its entry (one unit per job)
        self._unit_pods: dict[str, tuple[PodInfo, ...]] = {}
        self._unit_requests: dict[str, Mapping[str, int]] = {}  # job → its unit's requests
        # The resource sets in the units' places → (that set, shared by them; how many).
        self._resources: dict[frozenset[str], tuple[frozenset[str], int]] = {}
        # Every quota's units by the resources their pods ask for, each in order.
        self._asking: dict[frozenset[str], list[UnitEntry]] = {}
        self._asks_of: dict[str, frozenset[str]] = {}  # job → the resources of its unit
        # The resource sets of those lists holding SCATTERED units → how many.
        self._scattered: dict[frozenset[str], int] = {}
        # Elastic units: job → the minimum it declares, below its running pods.
        self._elastic: dict[str, int] = {}
        # Quota → a unit priority → what its units of that priority ask for, summed.
        self._asked: dict[str, dict[int, dict[str, int]]] = {}
        # The sorted lists' changes not applied yet, by list (see _settle): entries added,
        # entries taken out.  Readers of the order settle first; a pod event only notes.
        self._pending: dict[ListKey, tuple[list[UnitEntry], Counter[UnitEntry]]] = {}

    def __contains__(self, job: object) -> bool:
        return job in self._unit_of

    def update(
        self,
        job: str,
        quota: str,
        pods: Sequence[PodInfo],
        whole_job: bool,
        minimum: int | None = None,
    ) -> None:
        """Replace ``job``'s unit by its running preemptible ``pods`` (sorted by key; none:
        no unit); ``whole_job``: they are all of the job's pods; ``minimum``: the pods its
        gang declares it needs, when that is fewer than ``pods`` (an elastic job, which
        gives up pods above it before any whole job goes)."""
        self._drop(job)
        if not pods:
            return
        if minimum is not None and 0 < minimum < len(pods):
            self._elastic[job] = minimum
        place = SCATTERED
        node = pods[0].node_name
        asks = frozenset(
            name for pod in pods for name, amount in pod.requests.items() if amount > 0
        )
        whole_on_node = whole_job and all(pod.node_name == node for pod in pods)
        if asks and node is not None and whole_on_node:
            asks, count = self._resources.get(asks, (asks, 0))
            self._resources[asks] = (asks, count + 1)
            place = (node, asks)
        entry = (
            max(pod.priority for pod in pods),
            -max(pod.work_started for pod in pods),
            job,
            quota,
            place,
        )
        self._units.setdefault(quota, [])
        self._note(("quota", quota), entry, added=True)
        self._note(("all", None), entry, added=True)
        if place is SCATTERED:  # its list is read by every walk (see units_asking)
            self._scattered[asks] = self._scattered.get(asks, 0) + 1
        self._asking.setdefault(asks, [])
        self._note(("asks", asks), entry, added=True)
        self._asks_of[job] = asks
        self._unit_of[job] = entry
        self._unit_pods[job] = tuple(pods)
        requests = pods[0].requests if len(pods) == 1 else total(pod.requests for pod in pods)
        self._unit_requests[job] = requests
        add_into(self._asked.setdefault(quota, {}).setdefault(entry[0], {}), requests)

    def _drop(self, job: str) -> None:
        self._elastic.pop(job, None)
        old = self._unit_of.pop(job, None)
        if old is None:
            return
        self._note(("quota", old[3]), old, added=False)
        self._note(("all", None), old, added=False)
        asks = self._asks_of.pop(job)
        self._note(("asks", asks), old, added=False)
        if old[4] is SCATTERED:
            if self._scattered[asks] == 1:
                del self._scattered[asks]
            else:
                self._scattered[asks] -= 1
        del self._unit_pods[job]
        # (A priority's sums stay, at zero, when its last unit goes: priorities are few.)
        add_into(self._asked[old[3]][old[0]], self._unit_requests.pop(job), -1)
        resources = old[4][1]
        if resources:
            shared, count = self._resources[resources]
            if count == 1:
                del self._resources[resources]
            else:
                self._resources[resources] = (shared, count - 1)

    def _list(self, key: ListKey) -> list[UnitEntry]:
        which = key[1]
        if isinstance(which, str):
            return self._units[which]
        if isinstance(which, frozenset):
            return self._asking[which]
        return self._all

    def _forget_if_empty(self, key: ListKey, units: list[UnitEntry]) -> None:
        """An empty list of units asking for some resources goes (see units_asking)."""
        if not units and isinstance(key[1], frozenset):
            del self._asking[key[1]]

    def _note(self, key: ListKey, entry: UnitEntry, *, added: bool) -> None:
        """Note ``entry`` added to (or taken out of) the sorted list ``key`` names; a list
        with nothing pending loses an entry at once."""
        pending = self._pending.get(key)
        if pending is None:
            if not added:
                units = self._list(key)
                del units[bisect.bisect_left(units, entry)]
                self._forget_if_empty(key, units)
                return
            pending = self._pending[key] = ([], Counter())
        if added:
            pending[0].append(entry)
        else:
            pending[1][entry] += 1

    def _settle(self) -> None:
        """Apply the pending changes: a few by insertion (as a pod event would), many (the
        informer's first list of every pod) by one sort and merge, so loading n pods costs
        n log n, not n² (each insertion into a list of n moves half of it)."""
        for key, (added, removed) in self._pending.items():
            units = self._list(key)
            if len(added) <= 32:
                for entry in added:
                    bisect.insort(units, entry)
                for entry in removed.elements():
                    del units[bisect.bisect_left(units, entry)]
            else:
                merged = heapq.merge(units, sorted(added))
                if removed:
                    kept = []
                    for entry in merged:
                        if removed[entry]:
                            removed[entry] -= 1
                        else:
                            kept.append(entry)
                    units[:] = kept
                else:
                    units[:] = merged
            self._forget_if_empty(key, units)
        self._pending.clear()

    def units(self, quota: str | None = None) -> Sequence[UnitEntry]:
        """The quota's units (every quota's with ``None``) in the victim order."""
        if self._pending:
            self._settle()
        if quota is None:
            return self._all
        return self._units.get(quota, ())

    def units_asking(self) -> Mapping[frozenset[str], Sequence[UnitEntry]]:
        """Every quota's units by the resources their pods ask for a positive amount of,
        each list in the victim order."""
        if self._pending:
            self._settle()
        return self._asking

    def asks_of_scattered(self) -> Collection[frozenset[str]]:
        """The keys of :meth:`units_asking` whose lists hold units placed
        :data:`SCATTERED`: a walk screening units by place reads those lists whatever it
        lacks, as the screen lets such units through."""
        return self._scattered.keys()

    def entries(self) -> Mapping[str, UnitEntry]:
        """Every unit's entry, by job."""
        return self._unit_of

    def elastic(self) -> Mapping[str, int]:
        """The elastic units: job → the minimum it declares, below its running pods."""
        return self._elastic

    def unit_pods(self) -> Mapping[str, tuple[PodInfo, ...]]:
        return self._unit_pods

    def unit_requests(self) -> Mapping[str, Mapping[str, int]]:
        """What evicting each job's unit frees: its pods' requests, summed."""
        return self._unit_requests

    def asked_up_to(self, quota: str, priority: int) -> dict[str, int]:
        """What the quota's units of ``priority`` or lower ask for, summed: the most a
        walk up to that priority could take from it."""
        asked: dict[str, int] = {}
        for each, requests in self._asked.get(quota, {}).items():
            if each <= priority:
                add_into(asked, requests)
        return asked

    def quota_of(self, job: str) -> str:
        """The quota of ``job``'s unit."""
        return self._unit_of[job][3]

    def unit_resources(self) -> Collection[frozenset[str]]:
        return self._resources.keys()
