"""The heap benchmark: what garbage collection costs a plan at scale, and what keeping the
initial state out of it (:mod:`extender.cli.heap`) saves.

    python -m bench.heap [--nodes 15000] [--gang 64] [--plans 200] [--rounds 2]

Builds the cluster once (``--nodes`` nodes, ten pods each), then plans the gang
``--plans`` times with the heap as built, then as many times with it frozen, ``--rounds``
times alternating (unfrozen again between rounds; a collection before each batch, so
each starts with nothing pending), and prints each batch's median, mean, 99th percentile
(nearest rank) and maximum plan time: the mean and the tail are where a full collection
of the heap shows.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys

from bench.clusters import add_gang, gpu_cluster
from bench.planner import plan_timings
from extender.cli.heap import freeze_long_lived


def summary(timings: list[float]) -> str:
    ordered = sorted(timings)
    p99 = ordered[math.ceil(0.99 * len(ordered)) - 1]
    return (
        f"median {statistics.median(ordered):6.1f}  mean {statistics.fmean(ordered):6.1f}  "
        f"p99 {p99:6.1f}  max {ordered[-1]:6.1f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=15000)
    parser.add_argument("--gang", type=int, default=64)
    parser.add_argument("--plans", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.gang < 1 or args.plans < 2 or args.rounds < 1:
        parser.error("--nodes, --gang and --rounds must be positive, --plans at least 2")
    snap = gpu_cluster(args.nodes)
    job = add_gang(snap, args.gang)
    plan_timings(snap, job, 1)  # the cold plan: memos built
    print(f"{args.nodes} nodes, {len(snap.pods)} pods, a {args.gang}-pod gang", flush=True)
    for round_ in range(1, args.rounds + 1):
        for frozen in (False, True):
            if frozen:
                freeze_long_lived()
            else:
                gc.collect()
            timings, _ = plan_timings(snap, job, args.plans)
            label = "frozen" if frozen else "as built"
            print(f"round {round_} {label:>8}: {summary(timings)}", flush=True)
            if frozen:
                gc.unfreeze()
    return 0


if __name__ == "__main__":
    sys.exit(main())
