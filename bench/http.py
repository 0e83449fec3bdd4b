"""HTTP benchmark: filter and prioritize latency over loopback, as kube-scheduler calls them.

    python -m bench.http [--nodes 1000,5000] [--requests 300]

Serves the app on uvicorn (one worker, in a thread of this process) over a
synthetic cluster (``bench.clusters``), then sends sequential requests with
one keep-alive client, as kube-scheduler's extender client does: node names
only (``nodeCacheCapable: true``) and whole Node objects (``false``).
Reports p50/p99 latency and requests per second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

import httpx
import uvicorn

import localcluster as lc
from bench.clusters import GPU, gpu_cluster
from extender.http.app import create_app
from extender.service import Extender, StaticSource


def _pod() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "bench-0",
            "namespace": "team-1",
            "uid": "bench-0",
            "labels": {"quota.scheduling.koordinator.sh/preemptible": "true"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "4", GPU: "2"}}}]},
    }


def _node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"pool": "gpu", "kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"},
            "capacity": {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def measure(nodes: int, requests: int) -> list[dict[str, object]]:
    snap = gpu_cluster(nodes)
    app = create_app(Extender(StaticSource(snap)))
    port = lc.free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.01)
    names = sorted(snap.nodes)
    bodies = {
        "names": json.dumps({"Pod": _pod(), "Nodes": None, "NodeNames": names}).encode(),
        "objects": json.dumps(
            {"Pod": _pod(), "Nodes": {"items": [_node(n) for n in names]}, "NodeNames": None}
        ).encode(),
    }
    rows = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for verb in ("filter", "prioritize"):
            for mode, body in bodies.items():
                for _ in range(5):  # warm up
                    client.post(f"/{verb}", content=body)
                timings = []
                started = time.perf_counter()
                for _ in range(requests):
                    t0 = time.perf_counter()
                    response = client.post(f"/{verb}", content=body)
                    timings.append((time.perf_counter() - t0) * 1000)
                    assert response.status_code == 200, response.text
                elapsed = time.perf_counter() - started
                timings.sort()
                rows.append(
                    {
                        "verb": verb,
                        "nodes": nodes,
                        "mode": f"nodeCacheCapable: {str(mode == 'names').lower()}",
                        "request_kib": round(len(body) / 1024),
                        "p50_ms": round(statistics.median(timings), 2),
                        "p99_ms": round(timings[int(0.99 * (len(timings) - 1))], 2),
                        "rps": round(requests / elapsed),
                    }
                )
    server.should_exit = True
    thread.join(timeout=10)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000")
    parser.add_argument("--requests", type=int, default=300)
    options = parser.parse_args(argv)
    for nodes in (int(n) for n in options.nodes.split(",")):
        for row in measure(nodes, options.requests):
            print(
                f"{row['verb']:<10} nodes={row['nodes']:>5} {row['mode']:<24} "
                f"body {row['request_kib']:>5} KiB  p50 {row['p50_ms']:>7} ms  "
                f"p99 {row['p99_ms']:>7} ms  {row['rps']:>5} req/s",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
