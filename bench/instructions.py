"""Work to count instructions of, under valgrind: planning and filtering, N times.

    valgrind --tool=callgrind python -m bench.instructions plan N     # 300 nodes, 64-pod gang
    valgrind --tool=callgrind python -m bench.instructions filter N   # 1,000 node names

Wall-clock timings on a shared 2-core machine swing by a third for the same code;
valgrind counts instructions the same whatever else runs.  Run each with N and with 0:
the difference over N is the cost of one plan (warm) or one filter call with its pod
parse.  docs/benchmarks.md compares two commits this way.
"""

from __future__ import annotations

import argparse
import sys

from bench.clusters import add_gang, gpu_cluster
from bench.http import _pod
from extender.core.filter.nodes import filter_nodes
from extender.core.objects import parse_pod
from extender.core.preemption.planner import plan_job_preemption


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", choices=("plan", "filter"))
    parser.add_argument("times", type=int)
    options = parser.parse_args(argv)
    if options.work == "plan":
        snap = gpu_cluster(300)
        job = add_gang(snap, 64)
        for _ in range(options.times):
            plan_job_preemption(snap, job, 1_800_000_000.0)
    else:
        snap = gpu_cluster(1000)
        names = sorted(snap.nodes)
        obj = _pod()
        for _ in range(options.times):
            filter_nodes(snap, parse_pod(obj), names, as_extender=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
