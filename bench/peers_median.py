"""The head-to-head over repeated runs: each figure's median per system, and its range.

    python -m bench.peers_median RUN.json [RUN.json ...] [--markdown] [--json OUT]

One replay of the trace is one sample: the same seed moves a system's lost work or its
fair-share gap by a third from one run to the next on this machine (timing decides which
pod binds first, and everything after follows).  So claims are made on the median of
several runs.  Each ``RUN.json`` is a ``python -m bench.peers --json`` of the same trace
(seed and trace settings alike; each may hold any of the systems); a system's figure is
the median over the runs that played it, each number of the figures taken on its own
(so a median row need not be one run's row).  Printed: the table of medians (the columns
of :func:`bench.peers.markdown_table`), then each headline figure's lowest and highest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.peers import markdown_table

Json = dict[str, Any]

#: The figures whose spread is printed: (label, how to read it from a system's figures).
SPREAD: tuple[tuple[str, Callable[[Json], float]], ...] = (
    ("GPU allocation", lambda f: f["gpu_allocation"]),
    ("GPU-s held by gangs not fully running", lambda f: f["partial_gang_gpu_seconds"]),
    (
        "team-seconds below `min` with work that fits in it",
        lambda f: sum(f["seconds_below_min_with_pending_work"].values()),
    ),
    ("high-priority completion p95 s", lambda f: f["job_completion_seconds"]["bench-high"]["p95"]),
    ("jobs completed", lambda f: f["jobs_completed"]),
    ("evicted pods per completed job", lambda f: f["evictions_per_completed_job"]),
    ("GPU-s of work lost to eviction", lambda f: f["gpu_seconds_lost_to_eviction"]),
    ("fair-share gap, GPUs (mean)", lambda f: f["fair_share_gap_gpus"]["mean"]),
)


def median_figures(samples: Sequence[Any]) -> Any:
    """The median of ``samples`` (one system's figures from several runs), number by
    number: dictionaries by their keys present in every sample, numbers by their median,
    anything else (text, lists, ``None`` in some) as the first sample has it."""
    first = samples[0]
    if all(isinstance(s, dict) for s in samples):
        keys = [k for k in first if all(k in s for s in samples)]
        return {k: median_figures([s[k] for s in samples]) for k in keys}
    if all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in samples):
        middle = statistics.median(samples)
        if all(isinstance(s, int) for s in samples) and float(middle).is_integer():
            return int(middle)
        return round(middle, 3)
    return first


def combine(runs: Sequence[Json]) -> tuple[Json, dict[str, list[Json]]]:
    """The results of ``runs`` (of one trace) as one, each system's figures the median of
    its runs; and each system's figures run by run.  ``ValueError`` if the runs are of
    different traces."""
    if not runs:
        raise ValueError("no runs given")
    trace = {k: runs[0].get(k) for k in ("seed", "trace", "weights")}
    for index, run in enumerate(runs[1:], start=2):
        if {k: run.get(k) for k in trace} != trace:
            raise ValueError(f"run {index} is of another trace (seed, trace or weights differ)")
    by_system: dict[str, list[Json]] = {}
    for run in runs:
        for name, figures in run.get("systems", {}).items():
            by_system.setdefault(name, []).append(figures)
    if not by_system:
        raise ValueError("the runs hold no system's figures")
    combined = {k: v for k, v in runs[0].items() if k != "systems"}
    combined["systems"] = {name: median_figures(f) for name, f in by_system.items()}
    combined["runs"] = {name: len(f) for name, f in by_system.items()}
    return combined, by_system


def spread_table(by_system: dict[str, list[Json]]) -> str:
    """Each headline figure's lowest to highest over the runs, per system (Markdown)."""
    names = list(by_system)
    lines = [
        "| lowest to highest (runs) | "
        + " | ".join(f"{n} ({len(by_system[n])})" for n in names)
        + " |",
        "|---|" + "---|" * len(names),
    ]
    for label, read in SPREAD:
        cells = []
        for name in names:
            try:
                values = [read(f) for f in by_system[name]]
            except (KeyError, TypeError):
                cells.append("-")
                continue
            if any(v is None for v in values):
                cells.append("-")
                continue
            low, high = min(values), max(values)
            digits = 3 if max(abs(low), abs(high)) < 10 else 0
            cells.append(f"{low:.{digits}f} to {high:.{digits}f}")
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers_median", description=__doc__.splitlines()[0]
    )
    parser.add_argument("runs", nargs="+", type=Path, help="bench.peers --json files")
    parser.add_argument("--markdown", action="store_true", help="print the tables in Markdown")
    parser.add_argument("--json", type=Path, help="write the medians here")
    options = parser.parse_args(argv)
    try:
        runs = [json.loads(path.read_text()) for path in options.runs]
        combined, by_system = combine(runs)
    except (OSError, ValueError) as error:
        print(f"bench.peers_median: {error}", file=sys.stderr)
        return 2
    if options.json:
        options.json.write_text(json.dumps(combined, indent=1))
    if options.markdown:
        print(markdown_table(combined))
        print()
        print(spread_table(by_system))
    else:
        print(json.dumps({"runs": combined["runs"], "systems": combined["systems"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
