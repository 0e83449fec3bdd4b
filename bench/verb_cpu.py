"""CPU per extender call: ``muster serve --snapshot`` in its own process, code against code.

    python -m bench.verb_cpu [--refs BEFORE,AFTER] [--nodes 5000] [--pods 50000]
                             [--calls 300] [--rounds 3] [--verbs filter,prioritize]
                             [--workdir DIR] [--json PATH]

The snapshot is ``bench.memory``'s (``--nodes`` nodes, ``--pods`` running pods; written
once into ``--workdir``).  Each round, for each ref in turn (exported with ``git
archive``, as ``bench.e2e --muster-ref`` does): ``muster serve --snapshot`` is started and
waited for; then for each verb, 20 warm-up calls, and ``--calls`` sequential calls from one
keep-alive client in this process, each with every node's name (``nodeCacheCapable:
true``) and a 2-GPU pod of ``team-1``.  The server's CPU time (user + system, all
threads, from ``/proc``) over those calls, divided by their number, is the figure;
client round-trip p50 beside it.  Reported: the median per ref and verb over the rounds,
and each ref's median over the first's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.http import _pod
from bench.memory import free_port, write_snapshot
from bench.support.meters import process_cpu_seconds
from bench.support.processes import MUSTER_COMMAND
from bench.support.run_notes import export_muster, log, machine_notes


def serve(cwd: Path, snapshot: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [*MUSTER_COMMAND, "serve", "--snapshot", str(snapshot), "--port", str(port)]
    with log_path.open("ab") as output:
        process = subprocess.Popen(command, cwd=cwd, stdout=output, stderr=output)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"muster serve exited {process.returncode}: see {log_path}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    raise TimeoutError("muster serve not ready")


def measure(url: str, pid: int, verb: str, body: bytes, calls: int) -> dict[str, float]:
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(20):
            client.post(f"/{verb}", content=body).raise_for_status()
        timings = []
        before = process_cpu_seconds(pid)
        for _ in range(calls):
            started = time.perf_counter()
            client.post(f"/{verb}", content=body).raise_for_status()
            timings.append(time.perf_counter() - started)
        used = process_cpu_seconds(pid) - before
    return {
        "cpu_us_per_call": round(1e6 * used / calls, 1),
        "p50_ms": round(1000 * statistics.median(timings), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--refs", default="HEAD", help="commits to compare, comma-separated (default: HEAD)"
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verbs", default="filter,prioritize")
    parser.add_argument("--workdir", metavar="DIR", help="snapshot and exports (kept)")
    parser.add_argument("--json", metavar="PATH", help="write the summary here")
    options = parser.parse_args(argv)
    refs = options.refs.split(",")
    verbs = options.verbs.split(",")
    notes = machine_notes()
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="muster-bench-verbs-"))
    workdir.mkdir(parents=True, exist_ok=True)
    snapshot = workdir / f"snapshot-{options.nodes}n-{options.pods}p.json"
    if not snapshot.exists():
        write_snapshot(snapshot, options.nodes, options.pods)
    trees = {ref: export_muster(ref, workdir) for ref in refs}
    notes["refs"] = {ref: commit[:12] for ref, (commit, _) in trees.items()}
    log(f"machine: {notes}; workdir: {workdir}")
    names = [f"node-{i:05d}" for i in range(options.nodes)]
    body = json.dumps({"Pod": _pod(), "Nodes": None, "NodeNames": names}).encode()
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        ref: {verb: [] for verb in verbs} for ref in refs
    }
    for round_ in range(1, options.rounds + 1):
        for ref in refs:
            process, url = serve(trees[ref][1], snapshot, workdir / "muster.log")
            try:
                for verb in verbs:
                    row = measure(url, process.pid, verb, body, options.calls)
                    results[ref][verb].append(row)
                    log(f"round {round_} {ref} {verb}: {row}")
            finally:
                process.terminate()
                process.wait(15)
    summary: dict[str, Any] = {"machine": notes, "options": vars(options), "medians": {}}
    for ref in refs:
        summary["medians"][ref] = {
            verb: {
                name: round(statistics.median(r[name] for r in rows), 3)
                for name in ("cpu_us_per_call", "p50_ms")
            }
            for verb, rows in results[ref].items()
        }
    first = summary["medians"][refs[0]]
    summary["cpu_ratio_to_first"] = {
        ref: {
            verb: (
                round(values["cpu_us_per_call"] / first[verb]["cpu_us_per_call"], 3)
                if first[verb]["cpu_us_per_call"]
                else None  # below /proc's 10 ms tick: more --calls
            )
            for verb, values in summary["medians"][ref].items()
        }
        for ref in refs
    }
    summary["runs"] = results
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    if options.json:
        Path(options.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
