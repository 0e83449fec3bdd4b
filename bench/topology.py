"""Topology benchmark: planning a gang that must stay in one rack, against the same gang
without topology, on one cluster in one run (issue 27's target: at most 2x).

    python -m bench.topology [--nodes 5000] [--racks 40] [--gang 64] [--gpus 4] [--repeat 7]

The cluster is :func:`bench.clusters.gpu_cluster` with its nodes in ``--racks`` racks
of consecutive nodes; two pending gangs of ``--gang`` pods of ``--gpus`` GPUs (4: half a
node, so a rack of 125 nodes, a fifth of their GPU pods not preemptible, can be cleared
for 64 of them) in team-0, one with
Kueue's ``podset-required-topology`` on the rack label, one without.  Each is planned
``--repeat`` times (warm: node eligibility memoised after the first); the figure is the
ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from base import keys
from bench.clusters import RACK, add_gang, gpu_cluster
from bench.planner import plan_timings
from extender.core.preemption.planner import PreemptionPlan
from extender.core.state import ClusterState


def timed(snap: ClusterState, job: str, repeat: int) -> tuple[float, str]:
    """The median of the warm runs, in ms, and what the planner decided."""
    timings, decision = plan_timings(snap, job, repeat)
    if isinstance(decision, PreemptionPlan):
        outcome = f"plan, {len(decision.victims)} victims"
    else:
        outcome = f"refused: {decision.reasons[0]}"
    return statistics.median(timings[1:] or timings), outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--racks", type=int, default=40)
    parser.add_argument("--gang", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args(argv)
    snap = gpu_cluster(options.nodes, racks=options.racks)
    plain = add_gang(snap, options.gang, options.gpus, name="plain")
    racked = add_gang(
        snap,
        options.gang,
        options.gpus,
        name="racked",
        annotations={keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK},
    )
    plain_ms, plain_outcome = timed(snap, plain, options.repeat)
    racked_ms, racked_outcome = timed(snap, racked, options.repeat)
    row = {
        "nodes": options.nodes,
        "racks": options.racks,
        "gang": options.gang,
        "gpus_per_pod": options.gpus,
        "without_topology_ms": round(plain_ms, 2),
        "required_rack_ms": round(racked_ms, 2),
        "ratio": round(racked_ms / plain_ms, 2),
        "without_topology": plain_outcome,
        "required_rack": racked_outcome,
    }
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
