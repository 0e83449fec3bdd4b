"""bench.peers_median: each system's figures the median of its runs, refused across traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.peers_median import combine, main, median_figures, spread_table


def _run(seed: int, **systems: dict[str, Any]) -> dict[str, Any]:
    return {"seed": seed, "trace": {"nodes": 32, "seconds": 240}, "systems": systems}


def _figures(lost: float, completed: int, p95: float, below: dict[str, float]) -> dict[str, Any]:
    return {
        "gpu_allocation": 0.7,
        "partial_gang_gpu_seconds": 10.0,
        "seconds_below_min_with_pending_work": below,
        "job_completion_seconds": {"bench-high": {"p50": 40.0, "p95": p95, "count": 22}},
        "jobs_completed": completed,
        "jobs_submitted": 173,
        "evictions_per_completed_job": None,
        "pending_at_end": 0,
        "gpu_seconds_lost_to_eviction": lost,
        "evictions_younger_than_60s": 3,
        "fair_share_gap_gpus": {"mean": 1.0, "worst": 9.0},
        "kubernetes": "1.35",
    }


def test_each_number_is_its_own_median_across_runs() -> None:
    runs = [
        _run(1, muster=_figures(3000.0, 160, 70.0, {"team-a": 10.0, "team-b": 0.0})),
        _run(1, muster=_figures(1000.0, 165, 90.0, {"team-a": 30.0, "team-b": 5.0})),
        _run(1, muster=_figures(2000.0, 170, 80.0, {"team-a": 20.0, "team-b": 9.0})),
    ]
    combined, by_system = combine(runs)
    muster = combined["systems"]["muster"]
    # Medians of (3000, 1000, 2000), (160, 165, 170), (70, 90, 80) and per team: each
    # number on its own, so no single run's row.
    assert muster["gpu_seconds_lost_to_eviction"] == 2000.0
    assert muster["jobs_completed"] == 165
    assert muster["job_completion_seconds"]["bench-high"]["p95"] == 80.0
    assert muster["seconds_below_min_with_pending_work"] == {"team-a": 20.0, "team-b": 5.0}
    # Text is as the first run has it; a figure no run measured is left out.
    assert muster["kubernetes"] == "1.35" and "evictions_per_completed_job" not in muster
    assert combined["runs"] == {"muster": 3}
    table = spread_table(by_system)
    assert "| GPU-s of work lost to eviction | 1000 to 3000 (3) |" in table
    assert "| evicted pods per completed job | - |" in table


def test_runs_missing_a_figure_leave_it_to_the_runs_that_have_it() -> None:
    measured = _figures(3000.0, 160, 70.0, {"team-a": 10.0})
    measured["evictions_per_completed_job"] = 0.5
    other = _figures(1000.0, 170, 90.0, {"team-a": 30.0})
    other["evictions_per_completed_job"] = 0.7
    del other["job_completion_seconds"]["bench-high"]  # no high job completed in it
    binding_only = {"binding": {"pods_per_second": 300.0, "ratio_to_alone": 0.9}}
    combined, by_system = combine(
        [_run(1, muster=measured), _run(1, muster=other), _run(1, muster=binding_only)]
    )
    muster = combined["systems"]["muster"]
    # Each figure over the runs that have it: the binding run takes nothing away.
    assert muster["gpu_seconds_lost_to_eviction"] == 2000.0  # median of 3000, 1000
    assert muster["evictions_per_completed_job"] == 0.6  # of 0.5, 0.7
    assert muster["job_completion_seconds"]["bench-high"]["p95"] == 70.0  # the one run
    assert muster["binding"]["pods_per_second"] == 300.0
    table = spread_table(by_system)
    assert "| high-priority completion p95 s | 70 to 70 (1) |" in table
    assert "| evicted pods per completed job | 0.500 to 0.700 (2) |" in table


def test_runs_with_other_settings_are_refused() -> None:
    first = _run(1, muster=_figures(1.0, 1, 1.0, {}))
    second = {**_run(1, muster=_figures(1.0, 1, 1.0, {})), "min_runtime_seconds": 60}
    with pytest.raises(ValueError, match="min_runtime_seconds"):
        combine([first, second])


def test_an_even_count_of_whole_numbers_gives_a_whole_median_only_when_it_is_one() -> None:
    assert median_figures([160, 170]) == 165 and isinstance(median_figures([160, 170]), int)
    assert median_figures([160, 161]) == 160.5


def test_systems_may_come_from_different_runs() -> None:
    combined, _ = combine(
        [
            _run(1, muster=_figures(1.0, 1, 1.0, {})),
            _run(1, kueue=_figures(5.0, 2, 2.0, {})),
            _run(1, kueue=_figures(7.0, 4, 4.0, {})),
        ]
    )
    assert combined["runs"] == {"muster": 1, "kueue": 2}
    assert combined["systems"]["kueue"]["gpu_seconds_lost_to_eviction"] == 6.0


def test_runs_of_another_trace_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="run 2 is of another trace"):
        combine(
            [_run(1, muster=_figures(1.0, 1, 1.0, {})), _run(2, muster=_figures(1.0, 1, 1.0, {}))]
        )
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps(_run(1, muster=_figures(1.0, 1, 1.0, {}))))
    second.write_text("{not json")
    assert main([str(first), str(second)]) == 2
    assert "bench.peers_median:" in capsys.readouterr().err
    second.write_text("[1, 2]")  # JSON, but not a run
    assert main([str(first), str(second)]) == 2
    assert "run 2 is not a bench.peers --json" in capsys.readouterr().err


def test_columns_come_in_the_head_to_heads_order_whatever_the_runs_order() -> None:
    combined, _ = combine(
        [
            _run(1, kueue=_figures(1.0, 1, 1.0, {})),
            _run(
                1, muster=_figures(1.0, 1, 1.0, {}), **{"kube-scheduler": _figures(1.0, 1, 1.0, {})}
            ),
        ]
    )
    # bench.peers.SYSTEMS: kube-scheduler, muster, scheduler-plugins, kueue, koordinator.
    assert list(combined["systems"]) == ["kube-scheduler", "muster", "kueue"]
