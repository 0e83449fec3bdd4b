"""What the state knows per job: the part of :class:`~extender.core.state.ClusterState`
that answers for a job (its pods, its declared size and pod group, when its newest pod
joined, the pods marked for it) and which pods are leaving.

A mixin of ``ClusterState``, reading the indexes ``ClusterState`` keeps.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from base.errors import ManifestError
from extender.core.config import MusterArgs
from extender.core.jobs import OwnerSize, min_available_annotation
from extender.core.objects import NodeInfo, PodInfo
from extender.core.podgroups import PodGroupInfo
from extender.core.state.book import ReservationBook
from extender.core.topology import (
    SliceRequest,
    TopologyRequest,
    choose_levels,
    job_slice_request,
    job_topology_request,
    shared_domain,
)


class JobsMixin:
    """Per-job reads of :class:`ClusterState`, and its pod groups."""

    if TYPE_CHECKING:
        args: MusterArgs
        nodes: dict[str, NodeInfo]
        pods: dict[str, PodInfo]
        book: ReservationBook
        _pod_groups: dict[str, PodGroupInfo]
        _declarations: dict[str, dict[int, PodGroupInfo]]
        _jobs: dict[str, set[str]]
        _marked_for: dict[str, set[str]]
        _departing: set[str]
        _joined: dict[str, float]
        _owner_sizes: dict[str, int]
        kueue_topologies: dict[str, tuple[str, ...]]

        def _hold_min_resources(self, job: str) -> None: ...

    def set_pod_group(self, group: PodGroupInfo) -> None:
        """Record a gang declaration (a PodGroup's ``minMember``, schedule timeout and
        ``minResources``).  Where two APIs declare one job, the lower ``rank`` wins."""
        ranked = self._declarations.setdefault(group.job, {})
        ranked[group.rank] = group
        self._pod_groups[group.job] = ranked[min(ranked)]
        self._hold_min_resources(group.job)

    def forget_pod_group(self, namespace: str, name: str, rank: int = 0) -> None:
        """The declaration of that rank is gone (or unreadable): another API's, if any,
        declares the job; else its pods are a job of all of them."""
        job = f"{namespace}/{name}"
        ranked = self._declarations.get(job, {})
        ranked.pop(rank, None)
        if ranked:
            self._pod_groups[job] = ranked[min(ranked)]
        else:
            self._declarations.pop(job, None)
            self._pod_groups.pop(job, None)
        self._hold_min_resources(job)

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
        annotation, else the size of the controller that owns its pods, such as a Job's
        ``parallelism``); ``None`` when it is not, and only the pods seen so far tell."""
        group = self.pod_group(job)
        if group is not None and group.min_member is not None:
            return group.min_member
        pods = self.job_pods(job)
        for pod in pods:
            try:
                declared = min_available_annotation(pod)
            except ManifestError:
                continue  # not a number: ignored here (simulate rejects it outright)
            if declared is not None:
                return declared
        for pod in pods:
            size = self.owner_size(pod)
            if size is not None:
                return size
        return None

    def set_owner_size(self, size: OwnerSize) -> None:
        """Record how many pods a controller runs at once (``None``: unknown)."""
        key = f"{size.namespace}/{size.controller}"
        if size.size is None:
            self._owner_sizes.pop(key, None)
        else:
            self._owner_sizes[key] = size.size

    def owner_size(self, pod: PodInfo) -> int | None:
        """The size of the controller owning ``pod``, for a pod of a pod group."""
        if pod.group is None or pod.controller is None:
            return None
        return self._owner_sizes.get(f"{pod.namespace}/{pod.controller}")

    def last_joined(self, job: str) -> float | None:
        """When the newest pod of a pod-group job was first seen (live), or created."""
        return self._joined.get(job)

    def joined(self) -> Mapping[str, float]:
        """:meth:`last_joined` of every pod-group job."""
        return self._joined

    def pod_group(self, job: str) -> PodGroupInfo | None:
        """The job's gang declaration (its PodGroup), if it has one: for the pods of a
        1.35 Workload's pod group with a replica key, the pod group's."""
        group = self._pod_groups.get(job)
        if group is None and self._declarations:
            key = next(iter(self._jobs.get(job, ())), None)
            pod = self.pods.get(key) if key is not None else None
            if pod is not None and pod.declared_by is not None:
                group = self._pod_groups.get(f"{pod.namespace}/{pod.declared_by}")
        return group

    def topology_request(
        self, job: str, including: PodInfo | None = None
    ) -> TopologyRequest | None:
        """The topology level the job's pods must or would like to share, if any
        (:mod:`extender.core.topology`); ``including``: a pod of it the state may not
        hold yet."""
        group = self.pod_group(job)
        pods = self.job_pods(job)
        if including is not None:
            pods.insert(0, including)
        return job_topology_request(group.topology if group is not None else None, pods)

    def slice_request(self, job: str, including: PodInfo | None = None) -> SliceRequest | None:
        """The slices the job's pods ask for, if any (Kueue's podset slices:
        :mod:`extender.core.topology`); ``including`` as for :meth:`topology_request`."""
        pods = self.job_pods(job)
        if including is not None:
            pods.insert(0, including)
        return job_slice_request(pods)

    def set_kueue_topology(self, name: str, levels: tuple[str, ...]) -> None:
        """Kueue's ``Topology`` object ``name`` orders these levels, coarsest first."""
        self.kueue_topologies[name] = levels

    def forget_kueue_topology(self, name: str) -> None:
        self.kueue_topologies.pop(name, None)

    def topology_levels(self, level: str) -> tuple[str, ...]:
        """The levels' order for a gang asking for ``level`` (``topologyLevels``, else a
        Kueue Topology's: :func:`~extender.core.topology.choose_levels`)."""
        return choose_levels(level, self.args.topology_levels, self.kueue_topologies)

    def topology_placement(self, job: str) -> tuple[TopologyRequest, str | None] | None:
        """The job's topology request and the domain its bound and reserved pods are in
        (``None`` while they are in none, or in several); ``None`` for a job without one."""
        request = self.topology_request(job)
        if request is None:
            return None
        names = {pod.node_name for pod in self.job_pods(job) if pod.node_name is not None}
        reservation = self.book.reservations.get(job)
        if reservation is not None:
            names.update(reservation.placements.values())
        known = [self.nodes[name] for name in sorted(names) if name in self.nodes]
        return request, shared_domain(known, request.level) if known else None

    def gang_timeout_seconds(self, job: str) -> float:
        """How long the job may have fewer than min-available pods bound: its PodGroup's
        ``scheduleTimeoutSeconds``, else ``gangTimeoutSeconds``."""
        group = self.pod_group(job)
        if group is not None and group.schedule_timeout_seconds is not None:
            return float(group.schedule_timeout_seconds)
        return self.args.gang_timeout_seconds
