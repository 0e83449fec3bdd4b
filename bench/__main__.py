"""``python -m bench``: every benchmark with its defaults (see docs/benchmarks.md).

The planner, deep-queue (at 1,300 nodes: a minute), HTTP, memory (``muster serve
--snapshot`` at 5,000 nodes and up to 50,000 pods: a few minutes, ~400 MB of snapshot files
in a temporary directory) and verb-CPU benchmarks need nothing but the virtualenv; the
end-to-end one needs the control-plane binaries (``hack/build-k8s.sh``, which ``make
bench`` runs first) and Go, and takes about six minutes, the time-to-mark one (a single
pod, then gangs) five more, and the live initial list of 50,000 pods about four (all on
the local control plane).  ``--no-e2e`` skips them.
"""

from __future__ import annotations

import argparse
import sys

from bench import deep_queue, e2e, http, live_list, memory, planner, time_to_mark, verb_cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--no-e2e", action="store_true", help="skip the end-to-end benchmark")
    options = parser.parse_args(argv)
    print("# Planner", flush=True)
    planner.main([])
    print("\n# Deep queues", flush=True)
    deep_queue.main(["--nodes", "1300"])
    print("\n# HTTP", flush=True)
    http.main([])
    print("\n# Memory and time to ready", flush=True)
    memory.main([])
    print("\n# CPU per extender call", flush=True)
    verb_cpu.main(["--rounds", "2"])
    if not options.no_e2e:
        print("\n# End to end", flush=True)
        e2e.main([])
        print("\n# Time to mark", flush=True)
        time_to_mark.main([])
        print("\n# The live initial list (50,000 pods)", flush=True)
        live_list.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
