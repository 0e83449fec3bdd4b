"""The figures in docs/benchmarks.md, drawn from the benchmarks' own JSON output.

    python -m bench.planner --repeat 7 --json > planner.jsonl
    python -m bench.e2e --json e2e.json
    python -m bench.plots --planner planner.jsonl --e2e e2e.json --out docs/img

Needs matplotlib (``pip install -e '.[plots]'``); nothing else in Muster does.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

#: Throughput modes in bench/e2e.py, as the figure labels them.
E2E_LABELS = {
    "alone": "kube-scheduler\nalone",
    "noop-filter": "no-op extender\n(Go, filter)",
    "muster-filter": "Muster\nfilter, preempt",
    "muster": "Muster\n+ prioritize",
    "muster+bind": "Muster\n+ prioritize, bind",
}


def planner_growth(rows: list[dict[str, Any]], out: Path) -> Path:
    """Warm planning time against nodes, one line per gang size (log-log)."""
    by_gang: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        if row.get("outcome", "").startswith("plan"):
            by_gang[int(row["gang"])].append((int(row["nodes"]), float(row["warm_median_ms"])))
    figure, axes = plt.subplots(figsize=(6, 4))
    for gang, points in sorted(by_gang.items()):
        points.sort()
        axes.plot(*zip(*points, strict=True), marker="o", label=f"gang of {gang}")
    axes.axhline(100, color="grey", linestyle="--", linewidth=1)
    axes.annotate("target, gang of 64 at 5,000 nodes", (100, 104), color="grey", fontsize=8)
    axes.set(
        xscale="log",
        yscale="log",
        xlabel="nodes (10 running pods each)",
        ylabel="plan, warm median (ms)",
        title="Job-level preemption planning time",
    )
    axes.legend()
    axes.grid(True, which="both", alpha=0.3)
    return _save(figure, out / "planner-growth.png")


def e2e_throughput(summary: dict[str, Any], out: Path) -> Path:
    """Pods bound per second by mode: bars at the median, a dot per run."""
    throughput = summary["throughput"]
    modes = [mode for mode in E2E_LABELS if mode in throughput]
    alone = throughput.get("alone", {}).get("median_pods_per_s")
    figure, axes = plt.subplots(figsize=(7, 4))
    for x, mode in enumerate(modes):
        entry = throughput[mode]
        median = entry["median_pods_per_s"]
        axes.bar(x, median, color="tab:grey" if mode in ("alone", "noop-filter") else "tab:blue")
        runs = entry["runs"]
        axes.scatter([x] * len(runs), runs, color="black", s=10, zorder=3)
        label = f"{median:.0f}" + (f"\n{median / alone:.0%}" if alone and mode != "alone" else "")
        axes.annotate(label, (x, median * 0.93), ha="center", va="top", fontsize=8, color="white")
    if alone:
        axes.axhline(0.8 * alone, color="tab:red", linestyle="--", linewidth=1)
        axes.annotate(
            "80% of alone (target)",
            (len(modes) - 0.6, 0.8 * alone * 1.02),
            ha="right",
            color="tab:red",
            fontsize=8,
        )
    nodes = summary.get("options", {}).get("nodes", "?")
    pods = summary.get("options", {}).get("pods", "?")
    axes.set_xticks(range(len(modes)), [E2E_LABELS[mode] for mode in modes], fontsize=8)
    axes.set(
        ylabel="pods bound per second",
        title=f"kube-scheduler throughput, {nodes:,} nodes, {pods:,} pods (median; runs as dots)",
    )
    axes.title.set_fontsize(10)
    return _save(figure, out / "e2e-throughput.png")


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planner", type=Path, help="bench.planner --json output (lines)")
    parser.add_argument("--e2e", type=Path, help="bench.e2e --json summary")
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    options = parser.parse_args(argv)
    if options.planner is None and options.e2e is None:
        parser.error("nothing to draw: give --planner and/or --e2e")
    options.out.mkdir(parents=True, exist_ok=True)
    if options.planner is not None:
        lines = options.planner.read_text().splitlines()
        rows = [json.loads(line) for line in lines if line.startswith("{")]
        print(planner_growth(rows, options.out))
    if options.e2e is not None:
        print(e2e_throughput(json.loads(options.e2e.read_text()), options.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
