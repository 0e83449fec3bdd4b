"""Scale in memory: ``muster serve --snapshot`` over a large cluster, its resident memory
and its time to ready.

    python -m bench.memory [--nodes 5000] [--pods 0,10000,25000,50000] [--repeat 2]
                           [--workdir DIR] [--json PATH]

For each pod count, a snapshot file is written (``snapshot_manifests``: one JSON ``List``,
as ``kubectl get nodes,pods,elasticquotas,priorityclasses -A -o json`` prints it;
seeded): ``--nodes`` nodes of 8 GPUs and 64 CPUs, the pods spread evenly over them,
running, in 7 team quotas, the mix of ``bench/clusters.py`` (2-GPU and CPU-only pods,
priorities 0/0/100/1000, 80% preemptible, a quarter of the GPU pods in 4-pod gangs).
The objects look like a real cluster's (``kubectl`` hides ``managedFields``): a pod
carries owner references, ~6 labels, 2 annotations, a container with image, ports, env,
resources and volume mounts, the service-account volume, default tolerations, four
conditions and a container status; a node 11 labels, capacity and allocatable, five
conditions, addresses, node info and 20 images.

Then, ``--repeat`` times in turn for each file: ``muster serve --snapshot FILE`` is
started (``python -m extender.cli.main``, this tree) and ``/readyz`` polled every 20 ms;
*ready* is process start to the first 200.  One second after, ``VmRSS`` (resident) and
``VmHWM`` (its peak, while loading) are read from ``/proc/PID/status``; the process is
stopped.  Reported per pod count: the medians, and how memory grows: per pod (the
slope between the smallest and largest pod counts) and per node (the 0-pod snapshot
against a one-node one).
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.support.processes import MUSTER_COMMAND
from bench.support.run_notes import ROOT, log, machine_notes, muster_tree_state

Json = dict[str, Any]
GPU = "nvidia.com/gpu"
QUOTA_API = "scheduling.x-k8s.io/v1alpha1"
EPOCH = 1_767_225_600  # 2026-01-01
TEAMS = 8  # team-0 runs nothing (the preemptor in bench/clusters.py)
PRIORITIES = {"p0": 0, "p100": 100, "p1000": 1000}


def stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def node_object(index: int) -> Json:
    name = f"node-{index:05d}"
    capacity = {
        "cpu": "64",
        "memory": "527952124Ki",
        GPU: "8",
        "pods": "110",
        "ephemeral-storage": "959786032Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    conditions = [
        {
            "type": kind,
            "status": "False",
            "reason": f"KubeletHas{'No' if kind != 'PIDPressure' else 'Sufficient'}{kind}",
            "message": f"kubelet has no {kind}",
            "lastHeartbeatTime": stamp(EPOCH + 86_000),
            "lastTransitionTime": stamp(EPOCH),
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": stamp(EPOCH + 86_000),
            "lastTransitionTime": stamp(EPOCH),
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"0000node-{index:08d}-4000-8000-000000000000",
            "resourceVersion": str(1000 + index),
            "creationTimestamp": stamp(EPOCH - 86_400),
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "p4d.24xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": f"us-east-1{'abc'[index % 3]}",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": "8",
                "pool": "gpu",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": f"10.{index // 256}.{index % 256}.0/24"},
        "status": {
            "capacity": capacity,
            "allocatable": {**capacity, "cpu": "63500m", "memory": "526903548Ki"},
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": f"10.200.{index // 256}.{index % 256}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": f"boot-{index}",
                "containerRuntimeVersion": "containerd://1.7.20",
                "kernelVersion": "6.1.0-21-cloud-amd64",
                "kubeProxyVersion": "v1.35.8",
                "kubeletVersion": "v1.35.8",
                "machineID": f"machine-{index}",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04 LTS",
                "systemUUID": f"uuid-{index}",
            },
            "images": [
                {
                    "names": [f"registry.example.com/team/image-{i}@sha256:{i:064x}"],
                    "sizeBytes": 1_000_000 * (i + 1),
                }
                for i in range(20)
            ],
        },
    }


def pod_object(rng: random.Random, index: int, node: int, slot: int, gang: list[int]) -> Json:
    team = 1 + rng.randrange(TEAMS - 1)
    gpu_pod = slot % 10 < 4
    started = EPOCH + rng.randrange(86_400)
    name = f"run-{node}-{slot}"
    labels = {
        "app.kubernetes.io/name": f"trainer-{team}",
        "app.kubernetes.io/part-of": "research",
        "batch.kubernetes.io/controller-uid": f"job-{index // 8:08d}",
        "batch.kubernetes.io/job-name": f"job-{index // 8}",
        "job-name": f"job-{index // 8}",
        "quota.scheduling.koordinator.sh/preemptible": ("true" if rng.random() < 0.8 else "false"),
    }
    if gpu_pod and rng.random() < 0.25:
        labels["pod-group.scheduling.sigs.k8s.io"] = f"gang-{gang[0] // 4}"
        gang[0] += 1
    requests = {"cpu": "4", "memory": "16Gi"}
    resources: Json = {"requests": requests}
    if gpu_pod:
        requests[GPU] = "2"
        resources["limits"] = {GPU: "2"}
    uid = f"{index:08x}-0000-4000-8000-{node:012d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": f"team-{team}",
            "uid": uid,
            "resourceVersion": str(100_000 + index),
            "creationTimestamp": stamp(started - 2),
            "generateName": f"job-{index // 8}-",
            "labels": labels,
            "annotations": {
                "kubectl.kubernetes.io/default-container": "main",
                "prometheus.io/scrape": "true",
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"job-{index // 8}",
                    "uid": f"job-{index // 8:08d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": f"registry.example.com/team-{team}/trainer:v1.{index % 7}",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-m", "train"],
                    "args": ["--config", "/etc/train/config.yaml"],
                    "ports": [{"containerPort": 8080, "name": "metrics", "protocol": "TCP"}],
                    "env": [
                        {"name": "RANK", "value": str(slot)},
                        {"name": "WORLD_SIZE", "value": "8"},
                    ],
                    "resources": resources,
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        }
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                }
            ],
            "nodeName": f"node-{node:05d}",
            "nodeSelector": {"pool": "gpu"},
            "priorityClassName": rng.choice(("p0", "p0", "p100", "p1000")),
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "securityContext": {},
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{what}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for what in ("not-ready", "unreachable")
            ],
            "volumes": [
                {
                    "name": "kube-api-access",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "expirationSeconds": 3607,
                                    "path": "token",
                                }
                            },
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                    },
                }
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": f"10.200.{node // 256}.{node % 256}",
            "podIP": f"10.{node // 256}.{node % 256}.{slot + 2}",
            "qosClass": "Burstable",
            "startTime": stamp(started),
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": stamp(started)}
                for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "image": f"registry.example.com/team-{team}/trainer:v1.{index % 7}",
                    "imageID": f"registry.example.com/team-{team}/trainer@sha256:{index:064x}",
                    "containerID": f"containerd://{index:064x}",
                    "state": {"running": {"startedAt": stamp(started)}},
                }
            ],
        },
    }


def snapshot_items(nodes: int, pods: int, seed: int = 1) -> Iterator[Json]:
    """The snapshot's objects (module docstring), one at a time, in the file's order."""
    rng = random.Random(seed)
    gpus = nodes * 8
    for name, value in PRIORITIES.items():
        yield {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
    for team in range(TEAMS):
        share = gpus // 2 if team == 0 else gpus // (2 * TEAMS)
        yield {
            "apiVersion": QUOTA_API,
            "kind": "ElasticQuota",
            "metadata": {"name": f"team-{team}", "namespace": f"team-{team}"},
            "spec": {"min": {GPU: str(share)}, "max": {GPU: str(gpus)}},
        }
    for i in range(nodes):
        yield node_object(i)
    gang = [0]
    per_node = -(-pods // nodes) if nodes else 0
    for index in range(pods):
        node, slot = index % nodes, index // nodes
        assert slot < per_node
        yield pod_object(rng, index, node, slot, gang)


def snapshot_manifests(nodes: int, pods: int, seed: int = 1) -> Json:
    """The snapshot (module docstring) as one ``kind: List``."""
    return {"apiVersion": "v1", "kind": "List", "items": list(snapshot_items(nodes, pods, seed))}


def write_snapshot(path: Path, nodes: int, pods: int, seed: int = 1) -> None:
    """Write ``json.dumps(snapshot_manifests(...))`` to ``path`` object by object, so that
    150,000 pods never sit whole in this process's memory."""
    with path.open("w") as out:
        out.write('{"apiVersion": "v1", "kind": "List", "items": [')
        for n, item in enumerate(snapshot_items(nodes, pods, seed)):
            out.write(", " if n else "")
            out.write(json.dumps(item))
        out.write("]}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def measure(path: Path, log_path: Path, timeout: float = 300.0) -> dict[str, float]:
    """Start ``muster serve --snapshot PATH``; seconds to ``/readyz``, then its memory."""
    port = free_port()
    command = [*MUSTER_COMMAND, "serve", "--snapshot", str(path), "--port", str(port)]
    with log_path.open("ab") as output:
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=output)
        try:
            ready = None
            with httpx.Client(timeout=1.0) as client:
                while time.monotonic() - started < timeout:
                    if process.poll() is not None:
                        raise RuntimeError(f"muster serve exited {process.returncode}: {log_path}")
                    try:
                        if client.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                            ready = time.monotonic() - started
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(0.02)
            if ready is None:
                raise TimeoutError(f"muster serve not ready in {timeout:.0f} s")
            time.sleep(1.0)
            memory = proc_status(process.pid)
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return ready_figures(ready, memory)


def ready_figures(ready: float, memory: dict[str, int]) -> dict[str, float]:
    """One run's figures: seconds to ``/readyz``, resident and peak memory (MiB) from
    :func:`proc_status`."""
    return {
        "ready_s": round(ready, 2),
        "rss_mib": round(memory["VmRSS"] / 1024, 1),
        "peak_mib": round(memory["VmHWM"] / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", default="0,10000,25000,50000", help="pod counts")
    parser.add_argument("--repeat", type=int, default=2, help="runs per snapshot")
    parser.add_argument("--workdir", metavar="DIR", help="where the snapshots go (kept)")
    parser.add_argument("--json", metavar="PATH", help="write the summary here")
    options = parser.parse_args(argv)
    counts = [int(count) for count in options.pods.split(",")]
    notes = machine_notes()
    notes["muster"] = muster_tree_state()
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="muster-bench-memory-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"machine: {notes}; workdir: {workdir}")
    files: dict[tuple[int, int], Path] = {}
    for nodes, pods in [(1, 0), *[(options.nodes, count) for count in counts]]:
        path = workdir / f"snapshot-{nodes}n-{pods}p.json"
        if not path.exists():
            write_snapshot(path, nodes, pods)
        files[(nodes, pods)] = path
        log(f"{path.name}: {path.stat().st_size / 2**20:.1f} MiB")
    runs: dict[tuple[int, int], list[dict[str, float]]] = {key: [] for key in files}
    for attempt in range(options.repeat):
        for key, path in files.items():
            result = measure(path, workdir / "muster.log")
            log(f"round {attempt + 1}, {key[0]} nodes, {key[1]} pods: {result}")
            runs[key].append(result)
    rows = []
    for (nodes, pods), results in runs.items():
        rows.append(
            {
                "nodes": nodes,
                "pods": pods,
                "file_mib": round(files[(nodes, pods)].stat().st_size / 2**20, 1),
                **{
                    name: round(statistics.median(r[name] for r in results), 2)
                    for name in ("ready_s", "rss_mib", "peak_mib")
                },
                "runs": results,
            }
        )
    summary: Json = {"machine": notes, "options": vars(options), "rows": rows}
    by = {(row["nodes"], row["pods"]): row for row in rows}
    if len(counts) >= 2:
        low, high = min(counts), max(counts)
        if high > low:
            slope = (by[(options.nodes, high)]["rss_mib"] - by[(options.nodes, low)]["rss_mib"]) / (
                high - low
            )
            summary["kib_per_pod"] = round(slope * 1024, 2)
    if 0 in counts and options.nodes > 1:
        per_node = (by[(options.nodes, 0)]["rss_mib"] - by[(1, 0)]["rss_mib"]) / (options.nodes - 1)
        summary["kib_per_node"] = round(per_node * 1024, 2)
    print(json.dumps({k: v for k, v in summary.items()}, indent=1))
    if options.json:
        Path(options.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
