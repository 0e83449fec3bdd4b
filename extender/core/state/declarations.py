"""What jobs declare about themselves: the declarations part of the cluster state.

:class:`JobDeclarations` holds the gang declarations of every API (PodGroups of each
kind, ranked where two declare one job), the sizes of the controllers owning pods (a
Job's ``parallelism``), the controllers seen deleted, and Kueue's ``Topology`` objects;
and answers per job from them and from the pods (:class:`~.directory.PodDirectory`):
its min-available, its pod group, its topology and slice requests, its gang timeout.
A tenant writes most of these: they say what a job asks for, never what it may have.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container

from base.errors import ManifestError
from extender.core.config import MusterArgs
from extender.core.jobs import OwnerSize, capped_by_owner, min_available_annotation
from extender.core.objects import PodInfo
from extender.core.podgroups import PodGroupInfo
from extender.core.state.directory import PodDirectory
from extender.core.topology import (
    SliceRequest,
    TopologyRequest,
    choose_levels,
    job_slice_request,
    job_topology_request,
)

#: How many deleted controllers are remembered (see :meth:`JobDeclarations.owner_gone`).
GONE_OWNERS_REMEMBERED = 10_000


class JobDeclarations:
    """Gang declarations, controller sizes and topologies, read per job."""

    def __init__(self, args: MusterArgs, directory: PodDirectory) -> None:
        self._args = args
        self._directory = directory
        self._pod_groups: dict[str, PodGroupInfo] = {}  # by job ("ns/group"): the winner
        self._ranked: dict[str, dict[int, PodGroupInfo]] = {}  # job → rank → one
        #: The jobs whose winning declaration holds ``minResources`` (few, read per plan).
        self._with_min_resources: set[str] = set()
        self._owner_sizes: dict[str, int] = {}  # "ns/Kind/name" → pods it runs at once
        #: Controllers seen deleted, ``namespace/Kind/name``: their pods do not come back.
        self._gone_owners: OrderedDict[str, None] = OrderedDict()
        #: Kueue's Topology objects: name → their levels, coarsest first.
        self.kueue_topologies: dict[str, tuple[str, ...]] = {}

    # ---- feeding -------------------------------------------------------------------

    def set_pod_group(self, group: PodGroupInfo) -> None:
        """Record a gang declaration; where two APIs declare one job, the lower ``rank``
        wins."""
        ranked = self._ranked.setdefault(group.job, {})
        ranked[group.rank] = group
        self._choose(group.job, ranked)

    def forget_pod_group(self, job: str, rank: int) -> None:
        """The declaration of that rank is gone: another API's, if any, declares the job."""
        ranked = self._ranked.get(job, {})
        ranked.pop(rank, None)
        if not ranked:
            self._ranked.pop(job, None)
        self._choose(job, ranked)

    def _choose(self, job: str, ranked: dict[int, PodGroupInfo]) -> None:
        """The job's declaration: the lowest rank of ``ranked`` (none if it is empty)."""
        winner = ranked[min(ranked)] if ranked else None
        if winner is None:
            self._pod_groups.pop(job, None)
        else:
            self._pod_groups[job] = winner
        if winner is not None and winner.min_resources:
            self._with_min_resources.add(job)
        else:
            self._with_min_resources.discard(job)

    def set_owner_size(self, size: OwnerSize) -> None:
        """Record how many pods a controller runs at once (``None``: unknown)."""
        key = f"{size.namespace}/{size.controller}"
        if size.size is None:
            self._owner_sizes.pop(key, None)
        else:
            self._owner_sizes[key] = size.size

    def mark_owner_gone(self, namespace: str, controller: str) -> None:
        """The controller ``Kind/name`` is deleted: it re-creates no pod."""
        key = f"{namespace}/{controller}"
        self._owner_sizes.pop(key, None)
        self._gone_owners[key] = None
        self._gone_owners.move_to_end(key)
        if len(self._gone_owners) > GONE_OWNERS_REMEMBERED:
            self._gone_owners.popitem(last=False)

    def owner_present(self, namespace: str, controller: str) -> None:
        """The controller ``Kind/name`` exists (again, under a name once deleted)."""
        self._gone_owners.pop(f"{namespace}/{controller}", None)

    def set_kueue_topology(self, name: str, levels: tuple[str, ...]) -> None:
        """Kueue's ``Topology`` object ``name`` orders these levels, coarsest first."""
        self.kueue_topologies[name] = levels

    def forget_kueue_topology(self, name: str) -> None:
        self.kueue_topologies.pop(name, None)

    # ---- reading -------------------------------------------------------------------

    def owner_gone(self, namespace: str, controller: str) -> bool:
        """Was the controller ``Kind/name`` in ``namespace`` seen deleted?"""
        return f"{namespace}/{controller}" in self._gone_owners

    def owner_size(self, pod: PodInfo) -> int | None:
        """The size of the controller owning ``pod``, for a pod of a pod group."""
        if pod.group is None or pod.controller is None:
            return None
        return self._owner_sizes.get(f"{pod.namespace}/{pod.controller}")

    def pod_group(self, job: str) -> PodGroupInfo | None:
        """The job's gang declaration (its PodGroup), if it has one: for the pods of a
        1.35 Workload's pod group with a replica key, the pod group's."""
        group = self._pod_groups.get(job)
        if group is None and self._ranked:
            key = next(iter(self._directory.job_members(job)), None)
            pod = self._directory.pods.get(key) if key is not None else None
            if pod is not None and pod.declared_by is not None:
                group = self._pod_groups.get(f"{pod.namespace}/{pod.declared_by}")
        return group

    def declares_min_resources(self, job: str) -> bool:
        """Does the job's own PodGroup declare ``minResources``?"""
        group = self._pod_groups.get(job)
        return group is not None and bool(group.min_resources)

    def any_min_resources(self, among: Container[str]) -> bool:
        """Does the own PodGroup of any job ``among`` these declare ``minResources``?"""
        return any(job in among for job in self._with_min_resources)

    def own_pod_group(self, job: str) -> PodGroupInfo | None:
        """The declaration named for ``job`` itself (not a Workload's pod group its pods
        point to: :meth:`pod_group`)."""
        return self._pod_groups.get(job)

    def min_available(self, job: str) -> int:
        """How many of the job's pods must run together (default: all of them)."""
        declared = self.declared_min_available(job)
        return declared if declared is not None else len(self._directory.job_members(job))

    def declared_min_available(self, job: str) -> int | None:
        """The job's size as declared (PodGroup ``minMember``, else the min-available
        annotation, else the size of the controller that owns its pods, such as a Job's
        ``parallelism``); ``None`` when it is not, and only the pods seen so far tell.

        Never more than the controller still runs (:func:`capped_by_owner`): a Job with
        one completion to go creates one pod, whatever its PodGroup says."""
        pods = self._directory.job_pods(job)
        owner = next((s for s in map(self.owner_size, pods) if s is not None), None)
        group = self.pod_group(job)
        if group is not None and group.min_member is not None:
            return capped_by_owner(group.min_member, owner)
        for pod in pods:
            try:
                declared = min_available_annotation(pod)
            except ManifestError:
                continue  # not a number: ignored here (simulate rejects it outright)
            if declared is not None:
                return capped_by_owner(declared, owner)
        return owner

    def topology_request(
        self, job: str, including: PodInfo | None = None
    ) -> TopologyRequest | None:
        """The topology level the job's pods must or would like to share, if any
        (:mod:`extender.core.topology`); ``including``: a pod of it the state may not
        hold yet."""
        group = self.pod_group(job)
        pods = self._directory.job_pods(job)
        if including is not None:
            pods.insert(0, including)
        return job_topology_request(group.topology if group is not None else None, pods)

    def slice_request(self, job: str, including: PodInfo | None = None) -> SliceRequest | None:
        """The slices the job's pods ask for, if any (Kueue's podset slices:
        :mod:`extender.core.topology`); ``including`` as for :meth:`topology_request`."""
        pods = self._directory.job_pods(job)
        if including is not None:
            pods.insert(0, including)
        return job_slice_request(pods)

    def topology_levels(self, level: str) -> tuple[str, ...]:
        """The levels' order for a gang asking for ``level`` (``topologyLevels``, else a
        Kueue Topology's: :func:`~extender.core.topology.choose_levels`)."""
        return choose_levels(level, self._args.topology_levels, self.kueue_topologies)

    def gang_timeout_seconds(self, job: str) -> float:
        """How long the job may have fewer than min-available pods bound: its PodGroup's
        ``scheduleTimeoutSeconds``, else ``gangTimeoutSeconds``."""
        group = self.pod_group(job)
        if group is not None and group.schedule_timeout_seconds is not None:
            return float(group.schedule_timeout_seconds)
        return self._args.gang_timeout_seconds
