"""Everything Muster reads from a live cluster, listed once, as manifests.

The kubectl plugin's ``whatif`` (and its fallbacks when Muster is unreachable) turns
the live cluster into the same manifests ``muster simulate`` reads, so the answer
comes from the same loader and core as a ``kubectl get -o yaml`` dump would.
"""

from __future__ import annotations

from extender.core.dra import DRA_API_VERSION, DRA_PLURALS
from extender.core.jobs import OWNER_KINDS
from extender.core.podgroups import GANG_OBJECT_KINDS
from extender.core.topology import (
    KUEUE_TOPOLOGY_GROUP,
    KUEUE_TOPOLOGY_PLURAL,
    KUEUE_TOPOLOGY_VERSION,
)
from extender.kube.client import ApiError, Json, KubeClient
from extender.kube.source import QUOTA_GROUPS

#: (collection path, apiVersion, kind) of every resource Muster reads.
RESOURCES: tuple[tuple[str, str, str], ...] = (
    ("/apis/scheduling.k8s.io/v1/priorityclasses", "scheduling.k8s.io/v1", "PriorityClass"),
    ("/api/v1/nodes", "v1", "Node"),
    *(
        (f"/apis/{group}/v1alpha1/elasticquotas", f"{group}/v1alpha1", "ElasticQuota")
        for group in QUOTA_GROUPS
    ),
    *((kind.path, kind.api_version, kind.kind) for kind in GANG_OBJECT_KINDS),
    ("/apis/policy/v1/poddisruptionbudgets", "policy/v1", "PodDisruptionBudget"),
    (
        f"/apis/{KUEUE_TOPOLOGY_GROUP}/{KUEUE_TOPOLOGY_VERSION}/{KUEUE_TOPOLOGY_PLURAL}",
        f"{KUEUE_TOPOLOGY_GROUP}/{KUEUE_TOPOLOGY_VERSION}",
        "Topology",
    ),
    *((f"/apis/{api}/{plural}", api, kind) for kind, (api, plural) in OWNER_KINDS.items()),
    *(
        (f"/apis/{DRA_API_VERSION}/{plural}", DRA_API_VERSION, kind)
        for kind, plural in DRA_PLURALS.items()
    ),
    ("/api/v1/pods", "v1", "Pod"),
)


def dump_cluster(client: KubeClient, page_size: int = 500) -> list[Json]:
    """Every object of :data:`RESOURCES` (a resource not installed or not served, such
    as DRA's before Kubernetes 1.34, is skipped), each
    with its ``apiVersion`` and ``kind`` as a manifest has them."""
    objects: list[Json] = []
    for path, api_version, kind in RESOURCES:
        params = {"limit": str(page_size)}
        while True:
            try:
                page = client.request("GET", path, params=params)
            except ApiError as error:
                if error.status == 404:
                    break  # that CRD is not installed
                raise
            for item in page.get("items") or []:
                objects.append({"apiVersion": api_version, "kind": kind, **item})
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            params = {"limit": str(page_size), "continue": token}
    return objects
