"""DRA benchmark: planning a gang whose GPUs come through ResourceClaims, against the same
gang asking an extended resource (issue 36, item 6).

    python -m bench.dra [--nodes 5000] [--gang 64] [--repeat 7] [--json]

Builds :func:`bench.clusters.gpu_cluster` and a twin of it where every node's GPUs are
the devices of a ResourceSlice (a DeviceClass mapped to ``nvidia.com/gpu`` by
``deviceClassResources``) and every GPU pod gets its GPUs from a claim made from a
ResourceClaimTemplate instead of a container request; the same gang is added to both.
Both states charge the same quotas (checked), so the planner sees the same cluster
either way.  Reports the time to build each state, and per state the planner's cold
run and warm median (:func:`bench.planner.plan_timings`), the twins interleaved.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from typing import Any

from bench.clusters import GPU, add_gang, gpu_cluster
from bench.planner import plan_timings
from extender.core.config import MusterArgs
from extender.core.dra import PodDevices
from extender.core.dra.podclaims import PodClaim
from extender.core.preemption.planner import PreemptionPlan
from extender.core.state import ClusterState
from tests.dra_builders import DRIVER, claim_template, device_class, exactly, resource_slice

ONE_GPU = 1000  # a GPU in milli-units, as requests hold it


def dra_twin(plain: ClusterState) -> ClusterState:
    """``plain`` with its GPUs through DRA: slices on the nodes, claims on the pods."""
    state = ClusterState(MusterArgs(deviceClassResources={DRIVER: GPU}))
    state.set_quotas([spec for name, spec in plain.tree.specs.items() if name != "default"])
    state.set_dra_object("DeviceClass", device_class())
    sizes = sorted({pod.requests.get(GPU, 0) // ONE_GPU for pod in plain.pods.values()} - {0})
    for namespace in sorted({pod.namespace for pod in plain.pods.values()}):
        for size in sizes:
            template = claim_template(f"gpus-{size}", namespace, exactly(size))
            state.set_dra_object("ResourceClaimTemplate", template)
    for name, node in plain.nodes.items():
        gpus = node.allocatable.get(GPU, 0) // ONE_GPU
        others = {k: v for k, v in node.allocatable.items() if k != GPU}
        state.upsert_node(dataclasses.replace(node, allocatable=others))
        state.set_dra_object("ResourceSlice", resource_slice(name, gpus))
    for pod in plain.pods.values():
        gpus = pod.requests.get(GPU, 0) // ONE_GPU
        if not gpus:
            state.upsert_pod(pod)
            continue
        own = {k: v for k, v in pod.requests.items() if k != GPU}
        claims = (PodClaim("gpus", None, f"gpus-{gpus}"),)
        state.upsert_pod(
            dataclasses.replace(pod, requests=own, devices=PodDevices(own, (), claims, None))
        )
    return state


def measure(nodes: int, gang: int, repeat: int) -> dict[str, Any]:
    """Both twins built and planned: build seconds, cold and warm planner ms, outcomes."""
    started = time.perf_counter()
    plain = gpu_cluster(nodes)
    built_plain = time.perf_counter() - started
    job = add_gang(plain, gang, 4, name="train")
    started = time.perf_counter()
    dra = dra_twin(plain)
    built_dra = time.perf_counter() - started
    for name in plain.tree.specs:
        if dra.ledger[name].used != plain.ledger[name].used:
            raise AssertionError(f"quota {name}: the twins charge it differently")
    warm: dict[str, list[float]] = {"extended": [], "dra": []}
    cold: dict[str, float] = {}
    outcome: dict[str, str] = {}
    victims: dict[str, list[str]] = {}
    for _round in range(2):  # interleaved: each twin planned twice, each time `repeat` runs
        for label, state in (("extended", plain), ("dra", dra)):
            timings, decision = plan_timings(state, job, repeat)
            cold.setdefault(label, timings[0])
            warm[label] += timings[1:]
            planned = isinstance(decision, PreemptionPlan)
            outcome[label] = f"plan, {len(decision.victims)} victims" if planned else "refused"
            victims[label] = sorted(v.pod.key for v in decision.victims) if planned else []
    medians = {label: statistics.median(values) for label, values in warm.items()}
    return {
        "nodes": nodes,
        "gang": gang,
        "build_seconds": {"extended": round(built_plain, 2), "dra": round(built_dra, 2)},
        "cold_ms": {label: round(value, 1) for label, value in cold.items()},
        "warm_median_ms": {label: round(value, 1) for label, value in medians.items()},
        "dra_over_extended": round(medians["dra"] / medians["extended"], 2),
        "outcome": outcome,
        "same_victims": victims["dra"] == victims["extended"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gang", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    options = parser.parse_args(argv)
    if options.nodes < 1 or options.gang < 1 or options.repeat < 2:
        parser.error("--nodes and --gang must be >= 1, --repeat >= 2 (one cold run, then warm)")
    result = measure(options.nodes, options.gang, options.repeat)
    if options.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
