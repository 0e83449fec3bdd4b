"""The head-to-head over repeated runs: each figure's median per system, and its range.

    python -m bench.peers_median RUN.json [RUN.json ...] [--markdown] [--json OUT]

One replay of the trace is one sample: the same seed moves a system's lost work or its
fair-share gap by a third from one run to the next on this machine (timing decides which
pod binds first, and everything after follows).  So claims are made on the median of
several runs.  Each ``RUN.json`` is a ``python -m bench.peers --json`` of the same trace
and settings (seed, trace, weights and Muster's arguments alike; each may hold any of the
systems); a system's figure is the median over the runs that measured it (a
``--no-trace`` run adds its binding rate only; a figure a run has as ``None`` is left out
of it), each number taken on its own, so a median row need not be one run's row.  Series
and lists (the allocation over time, the worst partial gangs) are left out.  Printed, the
systems in the head-to-head's order: the table of medians (the columns of
:func:`bench.peers.markdown_table`), then each headline figure's lowest and highest, with
how many runs measured it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.peers import SYSTEMS, markdown_table

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


#: What ``bench.peers`` records beside the trace that changes its results.
SETTINGS = (
    "seed",
    "trace",
    "weights",
    "min_runtime_seconds",
    "reborrow_backoff_seconds",
    "guarantee_reserve_seconds",
    "max_notice_seconds",
    "muster_prioritize",
    "muster_fair_sharing",
    "muster_restart_jobs",
    "kubernetes",
)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def median_figures(samples: Sequence[Any]) -> Any:
    """The median of ``samples`` (one system's figures from several runs), number by
    number: dictionaries key by key over the samples that have the key, numbers by the
    median of those that are numbers (``None`` where none is), text as the first sample
    has it; lists are left out (``None``)."""
    present = [s for s in samples if s is not None]
    if not present:
        return None
    if all(isinstance(s, dict) for s in present):
        keys = list(dict.fromkeys(k for s in present for k in s))
        merged = {k: median_figures([s[k] for s in present if k in s]) for k in keys}
        return {k: v for k, v in merged.items() if v is not None}
    if all(_is_number(s) for s in present):
        middle = statistics.median(present)
        if all(isinstance(s, int) for s in present) and float(middle).is_integer():
            return int(middle)
        return round(middle, 4)
    if isinstance(present[0], str):
        return present[0]
    return None


def combine(runs: Sequence[Json]) -> tuple[Json, dict[str, list[Json]]]:
    """The results of ``runs`` (of one trace) as one, each system's figures the median of
    its runs; and each system's figures run by run.  ``ValueError`` if the runs are of
    different traces."""
    if not runs:
        raise ValueError("no runs given")
    for index, run in enumerate(runs, start=1):
        if not isinstance(run, dict) or not isinstance(run.get("systems"), dict):
            raise ValueError(f"run {index} is not a bench.peers --json (no systems)")
    trace = {k: runs[0].get(k) for k in SETTINGS}
    for index, run in enumerate(runs[1:], start=2):
        differ = [k for k in SETTINGS if run.get(k) != trace[k]]
        if differ:
            raise ValueError(f"run {index} is of another trace or settings: {', '.join(differ)}")
    by_system: dict[str, list[Json]] = {}
    for run in runs:
        for name, figures in run["systems"].items():
            by_system.setdefault(name, []).append(figures)
    if not by_system:
        raise ValueError("the runs hold no system's figures")
    known = {name: index for index, name in enumerate(SYSTEMS)}
    by_system = dict(sorted(by_system.items(), key=lambda item: known.get(item[0], len(known))))
    combined = {k: v for k, v in runs[0].items() if k != "systems"}
    combined["systems"] = {name: median_figures(f) for name, f in by_system.items()}
    combined["runs"] = {name: len(f) for name, f in by_system.items()}
    return combined, by_system


def spread_table(by_system: dict[str, list[Json]]) -> str:
    """Each headline figure's lowest to highest over the runs, per system (Markdown)."""
    names = list(by_system)
    lines = [
        "| lowest to highest (runs measuring it) | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for label, read in SPREAD:
        cells: list[str] = []
        for name in names:
            values = [v for v in map(_read_or_none(read), by_system[name]) if v is not None]
            if not values:
                cells.append("-")
                continue
            low, high = min(values), max(values)
            cells.append(f"{_number(low)} to {_number(high)} ({len(values)})")
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def _read_or_none(read: Callable[[Json], Any]) -> Callable[[Json], Any]:
    def reading(figures: Json) -> Any:
        try:
            return read(figures)
        except (KeyError, TypeError):
            return None

    return reading


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.3f}"


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
