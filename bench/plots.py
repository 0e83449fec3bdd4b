"""The figures in docs/benchmarks.md, drawn from the benchmarks' own JSON output.

    python -m bench.planner --repeat 7 --json > planner.jsonl
    python -m bench.e2e --json e2e.json
    python -m bench.time_to_mark --json ttm.json      # (and before.json, at an older commit)
    python -m bench.memory --json memory.json
    python -m bench.peers --json peers.json
    python -m bench.plots --planner planner.jsonl --e2e e2e.json --time-to-mark ttm.json \
        [--time-to-mark-before before.json] --memory memory.json \
        --peers peers.json --out docs/img

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
    # The targets for a 64-pod gang: 30 ms at 5,000 nodes, 60 ms at 15,000.
    axes.plot([5000, 15000], [30, 60], "x", color="grey", markersize=9, label="target, gang of 64")
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


def time_to_mark(
    summaries: list[tuple[str, list[dict[str, Any]]]], out: Path, target_ms: float = 150.0
) -> Path:
    """The distribution (empirical CDF) of a gang's time to mark, one line per gang size
    and run (``bench.time_to_mark``'s ``gang_rounds``), with the target."""
    figure, axes = plt.subplots(figsize=(6.5, 4))
    styles = {0: "-", 1: "--"}
    for number, (label, rounds) in enumerate(summaries):
        for gang in sorted({int(r["gang"]) for r in rounds}):
            values = sorted(1000 * float(r["to_mark_s"]) for r in rounds if r["gang"] == gang)
            fractions = [(i + 1) / len(values) for i in range(len(values))]
            axes.step(
                values,
                fractions,
                where="post",
                linestyle=styles.get(number, ":"),
                label=f"gang of {gang}, {label} (n={len(values)})",
            )
    axes.axvline(target_ms, color="tab:red", linestyle=":", linewidth=1)
    axes.annotate(f"target median {target_ms:.0f} ms", (target_ms * 1.03, 0.05), color="tab:red")
    axes.set(
        xlabel="last gang pod created → last victim marked (ms)",
        ylabel="fraction of rounds",
        title="Time to mark, gangs on the local control plane",
        ylim=(0, 1.02),
    )
    axes.title.set_fontsize(10)
    axes.legend(fontsize=8, loc="lower right")
    axes.grid(True, alpha=0.3)
    return _save(figure, out / "time-to-mark.png")


def memory_growth(summary: dict[str, Any], out: Path) -> Path:
    """``muster serve --snapshot``: resident memory and its loading peak against pods."""
    rows = sorted(
        (r for r in summary["rows"] if r["nodes"] == summary["options"]["nodes"]),
        key=lambda r: r["pods"],
    )
    pods = [r["pods"] for r in rows]
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(pods, [r["rss_mib"] for r in rows], marker="o", label="resident after ready")
    axes.plot(pods, [r["peak_mib"] for r in rows], marker="s", label="peak while loading")
    for r in rows:
        axes.annotate(f"{r['rss_mib']:.0f}", (r["pods"], r["rss_mib"]), fontsize=8, va="top")
    axes.axhline(1024, color="tab:red", linestyle="--", linewidth=1)
    axes.annotate("1 GiB (target)", (0, 1000), color="tab:red", fontsize=8, va="top")
    axes.set(
        xlabel=f"running pods ({summary['options']['nodes']:,} nodes)",
        ylabel="MiB",
        title="Muster's memory (muster serve --snapshot)",
        ylim=(0, 1100),
    )
    axes.legend(fontsize=8, loc="center right")
    axes.grid(True, alpha=0.3)
    return _save(figure, out / "memory-growth.png")


def peers_allocation(results: dict[str, Any], out: Path) -> Path:
    """GPUs held over time on each system, one line per system, for one trace."""
    figure, axes = plt.subplots(figsize=(7, 3.5))
    capacity = results["trace"]["nodes"] * results["trace"]["gpus_per_node"]
    for system, figures in results["systems"].items():
        series = figures["allocated_gpus_series"]
        axes.plot([at for at, _ in series], [gpus for _, gpus in series], label=system)
    axes.axhline(capacity, color="grey", linestyle=":", linewidth=1)
    axes.axvline(results["trace"]["seconds"], color="grey", linestyle="--", linewidth=1)
    axes.set_xlabel("seconds into the trace (dashed: last arrival)")
    axes.set_ylabel("GPUs held")
    axes.set_title(f"The same GPU trace (seed {results['seed']}) on each system")
    axes.set_ylim(0, capacity * 1.05)
    axes.legend(loc="lower center", ncol=3, fontsize="small")
    return _save(figure, out / f"peers-allocation-seed{results['seed']}.png")


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planner", type=Path, help="bench.planner --json output (lines)")
    parser.add_argument("--e2e", type=Path, help="bench.e2e --json summary")
    parser.add_argument("--time-to-mark", type=Path, help="bench.time_to_mark --json output")
    parser.add_argument(
        "--time-to-mark-before", type=Path, help="the same, at an older commit (dashed)"
    )
    parser.add_argument("--memory", type=Path, help="bench.memory --json output")
    parser.add_argument("--peers", type=Path, help="bench.peers --json output")
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    options = parser.parse_args(argv)
    if not (
        options.planner or options.e2e or options.time_to_mark or options.memory or options.peers
    ):
        parser.error("nothing to draw: give --planner, --e2e, --time-to-mark, --memory or --peers")
    options.out.mkdir(parents=True, exist_ok=True)
    if options.planner is not None:
        lines = options.planner.read_text().splitlines()
        rows = [json.loads(line) for line in lines if line.startswith("{")]
        print(planner_growth(rows, options.out))
    if options.e2e is not None:
        print(e2e_throughput(json.loads(options.e2e.read_text()), options.out))
    if options.time_to_mark is not None:
        runs = [("now", json.loads(options.time_to_mark.read_text())["gang_rounds"])]
        if options.time_to_mark_before is not None:
            before = json.loads(options.time_to_mark_before.read_text())["gang_rounds"]
            runs.append(("before", before))
        print(time_to_mark(runs, options.out))
    if options.memory is not None:
        print(memory_growth(json.loads(options.memory.read_text()), options.out))
    if options.peers is not None:
        print(peers_allocation(json.loads(options.peers.read_text()), options.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
