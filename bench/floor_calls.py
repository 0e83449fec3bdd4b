"""The extender floor, call by call: the no-op extender and Muster under a Go client.

    python -m bench.floor_calls [--refs REF,REF,...] [--rounds 3] [--calls 3000]
                                [--nodes 500] [--names 230] [--workdir DIR] [--json PATH]

What one filter call costs each side when the client is Go's ``net/http``, as
kube-scheduler's extender client is: ``bench/noop-extender/callgen`` sends one body
(a pending pod as the API server defaults it, and ``--names`` node names:
``nodeCacheCapable: true``, kube-scheduler's 46% of 500 nodes) ``--calls`` times over one
keep-alive connection, after 200 warm-up calls.  Servers, in turn each round: the no-op
extender (``bench/noop-extender``, Go), then ``muster serve --snapshot`` (``--nodes``
nodes, the pod's namespace with an ElasticQuota) from each ref (exported with ``git
archive``; ``.`` is the working tree).  Reported per call: wall time, the client's CPU
(``getrusage``), the server's CPU (``/proc``, all threads; warm-up included, 200 of
``--calls`` + 200), the round trip's p50; the median of the rounds.

Muster serves a fixed snapshot here, so it parses the pod on every call (a live Muster
reads its informer's copy of the same version instead); what it leaves out is everything
a cluster view costs (the watches, their events): ``bench.e2e`` has those.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.memory import free_port
from bench.support.meters import process_cpu_seconds
from bench.support.processes import MUSTER_COMMAND, NOOP_SOURCE
from bench.support.run_notes import export_muster, log, machine_notes

FIELDS = ("wall_us", "client_cpu_us", "server_cpu_us", "p50_us")


def manifests(nodes: int) -> list[dict[str, Any]]:
    """``nodes`` Ready nodes of 32 cpu, 128Gi and 8 GPUs, and team ``bench-1``'s quota."""
    capacity = {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "8", "pods": "110"}
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{i:04d}"},
            "status": {
                "allocatable": capacity,
                "capacity": capacity,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(nodes)
    ]
    objects.append(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "bench-1", "namespace": "bench-1"},
            "spec": {"min": {"cpu": "100", "memory": "128Gi"}, "max": {"cpu": "200"}},
        }
    )
    return objects


def pending_pod() -> dict[str, Any]:
    """A pending pod of ``bench.e2e``'s shape, as kube-scheduler sends it: defaulted by the
    API server, with its managed fields."""
    stamp = "2026-11-23T20:27:10Z"
    return {
        "metadata": {
            "name": "t1-5",
            "namespace": "bench-1",
            "uid": "8a7c0a4e-1f0e-4e8a-9f53-0c7b3f0f2b11",
            "resourceVersion": "12345",
            "creationTimestamp": stamp,
            "labels": {"muster-bench": "true", "muster-bench/trial": "t1"},
            "managedFields": [
                {
                    "manager": "python-urllib3",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, "f:muster-bench": {}}},
                        "f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:name": {}}}},
                    },
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "pause",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "Always",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{taint}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for taint in ("not-ready", "unreachable")
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited {process.returncode}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url}: not ready")


def one(
    command: list[str], cwd: Path | None, callgen: Path, body: Path, calls: int
) -> dict[str, float]:
    """Start a server (``command`` with ``{port}``), measure ``calls`` calls, stop it."""
    port = free_port()
    argv = [part.replace("{port}", str(port)) for part in command]
    env = {**os.environ, "PYTHONPATH": str(cwd)} if cwd is not None else None
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}"
        ready(url, process)
        before = process_cpu_seconds(process.pid)
        out = subprocess.run(
            [str(callgen), "-url", f"{url}/filter", "-body", str(body), "-calls", str(calls)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        server = process_cpu_seconds(process.pid) - before
    finally:
        process.terminate()
        process.wait(15)
    wall, client, p50, _p99 = (float(value) for value in out)
    return {
        "wall_us": wall,
        "client_cpu_us": client,
        "server_cpu_us": round(1e6 * server / (calls + 200), 1),
        "p50_us": p50,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refs", default=".", help="Muster's code: commits, or . (the tree)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--names", type=int, default=230)
    parser.add_argument("--workdir", metavar="DIR")
    parser.add_argument("--json", metavar="PATH")
    options = parser.parse_args(argv)
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="muster-floor-calls-"))
    workdir.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parent.parent
    go = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    noop, callgen = workdir / "noop-extender", workdir / "callgen"
    subprocess.run(["go", "build", "-o", str(noop), "."], cwd=NOOP_SOURCE, check=True, env=go)
    subprocess.run(
        ["go", "build", "-o", str(callgen), "./callgen"], cwd=NOOP_SOURCE, check=True, env=go
    )
    snapshot = workdir / "snapshot.yaml"
    snapshot.write_text("\n---\n".join(json.dumps(o) for o in manifests(options.nodes)))
    body = workdir / "filter.json"
    names = [f"node-{i:04d}" for i in range(options.names)]
    body.write_text(json.dumps({"Pod": pending_pod(), "Nodes": None, "NodeNames": names}))
    servers: dict[str, tuple[list[str], Path | None]] = {
        "no-op (Go)": ([str(noop), "-listen", "127.0.0.1:{port}"], None)
    }
    for ref in options.refs.split(","):
        cwd = root if ref == "." else export_muster(ref, workdir)[1]
        command = [*MUSTER_COMMAND, "serve", "--snapshot", str(snapshot), "--port", "{port}"]
        servers[f"muster@{ref}"] = (command, cwd)
    notes = machine_notes()
    log(f"machine: {notes}; workdir {workdir}")
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    for round_ in range(1, options.rounds + 1):
        for name, (command, cwd) in servers.items():
            row = one(command, cwd, callgen, body, options.calls)
            rows[name].append(row)
            log(f"round {round_} {name}: {row}")
    summary: dict[str, Any] = {"machine": notes, "options": vars(options), "servers": {}}
    print(f"{'server':<24} " + " ".join(f"{field:>14}" for field in FIELDS) + "  (medians, µs)")
    for name, measured in rows.items():
        medians = {f: round(statistics.median(r[f] for r in measured), 1) for f in FIELDS}
        summary["servers"][name] = {"median": medians, "rounds": measured}
        print(f"{name:<24} " + " ".join(f"{medians[f]:>14}" for f in FIELDS))
    if options.json:
        Path(options.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
