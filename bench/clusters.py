"""Synthetic GPU clusters for benchmarks: many nodes, a realistic mix of running pods.

Every node has 8 GPUs and 64 CPUs and runs ``pods_per_node`` pods: GPU pods
of 2 GPUs and CPU-only pods, in one of ``quotas`` team quotas, with a mix of
priorities, preemptible and non-preemptible pods, and some 4-pod gangs.  The
preemptor quota ``team-0`` runs nothing, so its gang reclaims within its
``min`` from borrowing teams.  Built straight into a :class:`ClusterState` (no
YAML), seeded, so every run sees the same cluster.
"""

from __future__ import annotations

import random

from base import keys
from base.resources import MILLI
from extender.core.config import MusterArgs
from extender.core.objects import NodeInfo, PodInfo
from extender.core.state import ClusterState
from quota.tree import QuotaSpec

GPU = "nvidia.com/gpu"
EPOCH = 1_767_225_600.0  # 2026-01-01


#: The node label of a rack, as :func:`gpu_cluster` writes it with ``racks``.
RACK = "cloud.provider.com/topology-rack"


def gpu_cluster(
    nodes: int,
    pods_per_node: int = 10,
    quotas: int = 8,
    seed: int = 1,
    racks: int = 0,
    gpu_pods_per_node: int = 4,
    args: MusterArgs | None = None,
) -> ClusterState:
    """``args``: Muster's arguments (default: its defaults); ``racks``: label the nodes with
    that many racks of consecutive nodes (:data:`RACK`);
    ``gpu_pods_per_node``: how many of a node's pods take 2 GPUs (4: every GPU taken;
    fewer leave 2 GPUs free a pod fewer)."""
    rng = random.Random(seed)
    cluster_gpus = nodes * 8
    specs = [
        QuotaSpec(
            name=f"team-{i}",
            namespace=f"team-{i}",
            # team-0, the preemptor, is guaranteed half the cluster; the others share the rest.
            min={GPU: (cluster_gpus // 2 if i == 0 else cluster_gpus // (2 * quotas)) * MILLI},
            max={GPU: cluster_gpus * MILLI},
        )
        for i in range(quotas)
    ]
    snap = ClusterState(args or MusterArgs(), specs)
    for n in range(nodes):
        snap.upsert_node(
            NodeInfo(
                name=f"node-{n:05d}",
                labels={"pool": "gpu", **({RACK: f"r{n * racks // nodes:03d}"} if racks else {})},
                allocatable={
                    "cpu": 64 * MILLI,
                    "memory": 512 * 2**30 * MILLI,
                    GPU: 8 * MILLI,
                    "pods": 110 * MILLI,
                },
                taints=(),
                unschedulable=False,
            )
        )
    gang = 0
    for n in range(nodes):
        for slot in range(pods_per_node):
            team = 1 + rng.randrange(quotas - 1)
            gpu_pod = slot < gpu_pods_per_node
            labels = {
                keys.PREEMPTIBLE_LABEL: "true" if rng.random() < 0.8 else "false",
            }
            if gpu_pod and rng.random() < 0.25:
                labels[keys.POD_GROUP_LABEL] = f"gang-{gang // 4}"
                gang += 1
            requests = {"cpu": 4 * MILLI, "memory": 16 * 2**30 * MILLI, "pods": MILLI}
            if gpu_pod:
                requests[GPU] = 2 * MILLI
            started = EPOCH + rng.randrange(86_400)
            snap.upsert_pod(
                PodInfo(
                    namespace=f"team-{team}",
                    name=f"run-{n}-{slot}",
                    uid=f"uid-{n}-{slot}",
                    labels=labels,
                    annotations={},
                    priority=rng.choice((0, 0, 100, 1000)),
                    created=started,
                    started=started,
                    node_name=f"node-{n:05d}",
                    phase="Running",
                    terminating=False,
                    requests=requests,
                    node_selector={},
                    required_affinity=None,
                    tolerations=(),
                    preemption_policy="PreemptLowerPriority",
                    nominated_node_name=None,
                    unsupported=(),
                )
            )
    return snap


def add_gang(
    snap: ClusterState,
    size: int,
    gpus: int = 8,
    name: str = "train",
    annotations: dict[str, str] | None = None,
    team: str = "team-0",
    priority: int = 500,
) -> str:
    """A pending, non-preemptible gang (in team-0 unless ``team`` says) that may trigger
    preemption; returns its job."""
    for i in range(size):
        snap.upsert_pod(
            PodInfo(
                namespace=team,
                name=f"{name}-{i}",
                uid=f"{name}-{i}",
                labels={
                    keys.POD_GROUP_LABEL: name,
                    keys.PREEMPTIBLE_LABEL: "false",
                    keys.CAN_PREEMPT_LABEL: "true",
                },
                annotations=dict(annotations or {}),
                priority=priority,
                created=EPOCH + 90_000,
                started=None,
                node_name=None,
                phase="Pending",
                terminating=False,
                requests={
                    "cpu": 8 * MILLI,
                    "memory": 64 * 2**30 * MILLI,
                    GPU: gpus * MILLI,
                    "pods": MILLI,
                },
                node_selector={"pool": "gpu"},
                required_affinity=None,
                tolerations=(),
                preemption_policy="PreemptLowerPriority",
                nominated_node_name=None,
                unsupported=(),
            )
        )
    return f"{team}/{name}"
