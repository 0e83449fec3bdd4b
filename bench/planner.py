"""Planner benchmark: time to plan a job-level preemption, by cluster and gang size.

    python -m bench.planner [--nodes 100,1000,5000] [--gangs 1,8,64,256] [--repeat 5]

For each shape it builds the cluster once, then times ``plan_job_preemption``
``--repeat`` times (the planner is pure, so every run sees the same input):
the first run is *cold* (node eligibility is computed and memoised on the
snapshot), the median of the rest is *warm*, as in a live Muster whose node
set did not change since the last decision.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from bench.clusters import add_gang, gpu_cluster
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState


def plan_timings(
    snap: ClusterState, job: str, repeat: int
) -> tuple[list[float], PreemptionPlan | Refusal]:
    """Plan ``job`` ``repeat`` times (the first cold, the rest warm): each run's time in
    ms, and the decision."""
    timings = []
    decision = None
    for _ in range(repeat):
        start = time.perf_counter()
        decision = plan_job_preemption(snap, job, time.time())
        timings.append((time.perf_counter() - start) * 1000)
    assert decision is not None
    return timings, decision


def measure(nodes: int, gang: int, repeat: int) -> dict[str, object]:
    snap = gpu_cluster(nodes)
    job = add_gang(snap, gang)
    timings, decision = plan_timings(snap, job, repeat)
    committed = isinstance(decision, PreemptionPlan)
    return {
        "nodes": nodes,
        "running_pods": sum(1 for p in snap.pods.values() if p.node_name),
        "gang": gang,
        "cold_ms": round(timings[0], 2),
        "warm_median_ms": round(statistics.median(timings[1:] or timings), 2),
        "warm_max_ms": round(max(timings[1:] or timings), 2),
        "outcome": f"plan, {len(decision.victims)} victims" if committed else "refused",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,5000")
    parser.add_argument("--gangs", default="1,8,64,256")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one JSON line per shape")
    options = parser.parse_args(argv)
    rows = []
    for nodes in (int(n) for n in options.nodes.split(",")):
        for gang in (int(g) for g in options.gangs.split(",")):
            row = measure(nodes, gang, options.repeat)
            rows.append(row)
            if options.json:
                print(json.dumps(row), flush=True)
            else:
                print(
                    f"nodes={row['nodes']:>5} pods={row['running_pods']:>6} gang={gang:>3}  "
                    f"cold {row['cold_ms']:>8} ms  warm median {row['warm_median_ms']:>8} ms  "
                    f"max {row['warm_max_ms']:>8} ms  {row['outcome']}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
