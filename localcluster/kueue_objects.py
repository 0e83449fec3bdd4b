"""Kueue's objects on the local control plane (issue 25): the teams' queues written, Jobs
submitted, Workloads read, for the manager :func:`~localcluster.kueue.start_kueue` runs.

Queues (:func:`kueue_queues`) are written, and Workloads read, in
``kueue.x-k8s.io/v1beta2`` (``KUEUE_API``), the CRDs' storage version: nothing the harness
writes or reads goes through the conversion webhook.

Submitting a Job to Kueue: the label ``kueue.x-k8s.io/queue-name: <LocalQueue>``; create
it with ``spec.suspend: true`` as well (:func:`kueue_job` does both) so that it is right
without the Job webhook too (``start_kueue(admission_webhooks=False)``); that webhook
suspends a Job that names a LocalQueue when it is created, as in a Kueue installation.
Kueue unsuspends the Job when it admits its Workload (:func:`job_workloads`,
:func:`workload_condition`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import quote

from .common import Json
from .kueue_install import KUEUE_API
from .rest import ApiError
from .waiting import wait_until

if TYPE_CHECKING:
    from .controlplane import ControlPlane

#: The label that names a Job's LocalQueue.
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
GPU = "nvidia.com/gpu"


class TeamQuota(NamedTuple):
    """One team's quota: its namespace ``name``, ``min_gpus`` (ClusterQueue nominal
    quota) and ``max_gpus`` (nominal + borrowing limit), and cpu/memory nominal quotas
    generous enough never to limit (GPUs alone decide, as in the ElasticQuotas)."""

    name: str
    min_gpus: int
    max_gpus: int
    cpu: str = "100000"
    memory: str = "1000Ti"
    #: The ClusterQueue's ``spec.fairSharing.weight``, read when fair sharing is on
    #: (``kueue_configuration(fair_sharing=True)``); None: unset (Kueue's default, 1).
    weight: float | None = None


# -- queues


def kueue_queues(
    teams: Iterable[TeamQuota | tuple[str, int, int]],
    *,
    cohort: str = "muster",
    flavor: str = "default",
) -> list[Json]:
    """Kueue's objects for teams' quotas (``KUEUE_API``, v1beta2): one ResourceFlavor
    ``flavor`` (no node labels: every node), and per team a ClusterQueue named after it in
    ``cohort`` (v1beta2's ``spec.cohortName``, v1beta1's ``spec.cohort``) and a LocalQueue
    of the same name in its namespace.

    A ClusterQueue's ``nominalQuota`` of ``nvidia.com/gpu`` is the team's ``min`` and its
    ``borrowingLimit`` ``max - min`` (Kueue: a queue may use its nominal quota plus what it
    borrows from the cohort's unused nominal quota, up to the limit), the same meaning as an
    ElasticQuota's ``min``/``max``. cpu and memory have generous nominal quotas (no
    borrowing limit). ``preemption`` is Muster's defaults: ``withinClusterQueue:
    LowerPriority``, ``reclaimWithinCohort: Any`` (a team within its nominal quota takes
    back what others borrowed, whatever their priority), ``borrowWithinCohort: {policy:
    Never}`` (a borrowing job preempts no one); ``queueingStrategy: BestEffortFIFO`` (a
    job that does not fit does not hold back smaller ones behind it). The ClusterQueue
    admits only its team's namespace; a team's ``weight``, if set, is its
    ``spec.fairSharing.weight``."""
    objects: list[Json] = [
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor}}
    ]
    for team in teams:
        quota = team if isinstance(team, TeamQuota) else TeamQuota(*team)
        if quota.max_gpus < quota.min_gpus:
            raise ValueError(f"team {quota.name}: max {quota.max_gpus} < min {quota.min_gpus}")
        fair_sharing = (
            {} if quota.weight is None else {"fairSharing": {"weight": f"{quota.weight:g}"}}
        )
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": {"name": quota.name},
                "spec": {
                    **fair_sharing,
                    "cohortName": cohort,
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": quota.name}
                    },
                    "queueingStrategy": "BestEffortFIFO",
                    "preemption": {
                        "withinClusterQueue": "LowerPriority",
                        "reclaimWithinCohort": "Any",
                        "borrowWithinCohort": {"policy": "Never"},
                    },
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", GPU],
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": quota.cpu},
                                        {"name": "memory", "nominalQuota": quota.memory},
                                        {
                                            "name": GPU,
                                            "nominalQuota": str(quota.min_gpus),
                                            "borrowingLimit": str(quota.max_gpus - quota.min_gpus),
                                        },
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": quota.name, "namespace": quota.name},
                "spec": {"clusterQueue": quota.name},
            }
        )
    return objects


_PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "Cohort": "cohorts",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "Workload": "workloads",
}


def kueue_path(obj: Json) -> str:
    """The collection path of a Kueue object (its ``apiVersion`` and kind)."""
    namespace = obj["metadata"].get("namespace")
    scope = f"/namespaces/{quote(namespace)}" if namespace else ""
    return f"/apis/{obj['apiVersion']}{scope}/{_PLURALS[obj['kind']]}"


def create_kueue_objects(plane: ControlPlane, objects: Sequence[Json]) -> None:
    """Create ``objects`` (e.g. :func:`kueue_queues`'), the namespaces of namespaced ones
    first; an object that exists is replaced."""
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if namespace:
            plane.create_namespace(namespace)
        path = kueue_path(obj)
        try:
            plane.rest.request("POST", path, obj)
        except ApiError as exc:
            if exc.status != 409:
                raise
            name = quote(obj["metadata"]["name"])
            current = plane.rest.request("GET", f"{path}/{name}")
            body = copy.deepcopy(obj)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            plane.rest.request("PUT", f"{path}/{name}", body)


def delete_kueue_objects(plane: ControlPlane, objects: Sequence[Json]) -> None:
    """Delete ``objects`` (best effort, not waited for: a ClusterQueue with admitted
    Workloads keeps Kueue's finalizer until they finish)."""
    for obj in reversed(objects):
        with contextlib.suppress(ApiError):
            plane.rest.request("DELETE", f"{kueue_path(obj)}/{quote(obj['metadata']['name'])}")


def wait_queues_active(plane: ControlPlane, objects: Sequence[Json], timeout: float = 60.0) -> None:
    """Until every ClusterQueue and LocalQueue among ``objects`` reports ``Active`` true:
    Kueue has seen them, their flavor and their cohort, and will admit into them."""
    queues = [o for o in objects if o["kind"] in ("ClusterQueue", "LocalQueue")]
    last: dict[str, Json] = {}

    def active() -> bool:
        for obj in queues:
            path = f"{kueue_path(obj)}/{quote(obj['metadata']['name'])}"
            current = last[path] = plane.rest.request("GET", path)
            if not _condition_true(current, "Active"):
                return False
        return True

    wait_until(
        active,
        timeout=timeout,
        what="Kueue's queues to be Active",
        on_timeout=lambda: "\n".join(
            f"{p}: {v.get('status', {}).get('conditions')}" for p, v in last.items()
        ),
    )


# -- jobs and workloads


def kueue_job(job: Json, queue: str) -> Json:
    """A copy of the batch/v1 ``job`` submitted to Kueue's LocalQueue ``queue``: the
    ``kueue.x-k8s.io/queue-name`` label and ``spec.suspend: true`` (no Job webhook does it
    here; Kueue unsuspends the Job when it admits its Workload)."""
    job = copy.deepcopy(job)
    metadata = job.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), QUEUE_NAME_LABEL: queue}
    job.setdefault("spec", {})["suspend"] = True
    return job


def job_workloads(plane: ControlPlane, namespace: str, job: str) -> list[Json]:
    """The Workloads (``KUEUE_API``) Kueue made for the Job ``job`` of ``namespace`` (its
    owner reference names the Job)."""
    items: list[Json] = plane.rest.request(
        "GET", f"/apis/{KUEUE_API}/namespaces/{quote(namespace)}/workloads"
    )["items"]
    return [
        w
        for w in items
        if any(
            ref.get("kind") == "Job" and ref.get("name") == job
            for ref in w["metadata"].get("ownerReferences", [])
        )
    ]


def workload_condition(workload: Json, kind: str) -> bool:
    """Whether a Workload's condition ``kind`` (``QuotaReserved``, ``Admitted``,
    ``PodsReady``, ``Evicted``, ``Preempted``, ``Finished``) is true."""
    return _condition_true(workload, kind)


def _condition_true(obj: Json, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )
