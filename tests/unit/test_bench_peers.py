"""The head-to-head's pure parts (issue 25): the seeded GPU trace (``bench.trace``) and the
figures of the comparison table (``bench.workload.trace_figures``), each expectation
worked out by hand from the definitions in their docstrings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.peers import main, markdown_table
from bench.trace import (
    CHECKPOINT_SHARE,
    ELASTIC_SHARE,
    GANG_SIZES,
    NOTICE_SHARE,
    make_trace,
    pods_of,
)
from bench.workload import (
    PodSighting,
    Saves,
    SubmittedJob,
    pod_saves,
    trace_figures,
    unsaved_since,
)


def test_a_seed_replays_the_same_trace_and_another_seed_does_not() -> None:
    assert make_trace(7) == make_trace(7)
    assert make_trace(7).jobs != make_trace(8).jobs


def test_the_trace_offers_load_times_what_the_cluster_can_do() -> None:
    # Jobs are drawn until the work offered (GPUs x run time) reaches load x capacity x
    # seconds: it passes that by less than one job's work, at most 32 GPUs x 240 s.
    trace = make_trace(3, seconds=120, nodes=8, load=1.5)
    offered = sum(job.gpus * job.runtime for job in trace.jobs)
    wanted = 1.5 * 64 * 120
    assert wanted <= offered < wanted + 32 * 240
    assert all(0 <= job.at <= 120 for job in trace.jobs)
    assert [job.at for job in trace.jobs] == sorted(job.at for job in trace.jobs)
    assert all(10.0 <= job.runtime <= 240.0 for job in trace.jobs)
    assert {job.gpus for job in trace.jobs} <= {size for size, _ in GANG_SIZES}


def test_teams_share_the_cluster_in_guarantees_and_start_in_turn() -> None:
    # 4 teams on 32 nodes of 8 GPUs: min 256 / 4 = 64 each, max 256; team i starts at
    # i x 240 / 8 = 30 i seconds, and no job goes to a team before it starts.
    trace = make_trace(5)
    assert [(t.min_gpus, t.max_gpus, t.starts) for t in trace.teams] == [
        (64, 256, 0.0),
        (64, 256, 30.0),
        (64, 256, 60.0),
        (64, 256, 90.0),
    ]
    starts = {t.name: t.starts for t in trace.teams}
    assert all(job.at >= starts[job.team] for job in trace.jobs)


def test_jobs_declare_their_work_in_the_documented_shares_without_changing_the_jobs() -> None:
    trace = make_trace(11, nodes=64, load=3.0)
    jobs = trace.jobs
    gangs = [job for job in jobs if job.pods > 1]

    def share(count: int, of: int) -> float:
        return count / of

    # The declarations come from their own generator: the jobs are what they were without them.
    assert len(jobs) > 400
    assert (
        abs(share(sum(j.checkpoint_interval == 30.0 for j in jobs), len(jobs)) - CHECKPOINT_SHARE)
        < 0.07
    )
    assert abs(share(sum(j.notice_seconds == 20.0 for j in jobs), len(jobs)) - NOTICE_SHARE) < 0.07
    assert abs(share(sum(j.min_pods is not None for j in gangs), len(gangs)) - ELASTIC_SHARE) < 0.1
    # An elastic range is the lower half of a gang; a single pod has none.
    assert all(j.min_pods == j.pods // 2 for j in gangs if j.min_pods is not None)
    assert all(j.min_pods is None for j in jobs if j.pods == 1)


@pytest.mark.parametrize(
    ("started", "stopped", "saves", "since"),
    [
        (10.0, 50.0, Saves(), 10.0),  # saves nothing: loses its whole run
        (10.0, 50.0, Saves(interval=15.0), 40.0),  # saved at 25 and 40
        (10.0, 50.0, Saves(last=47.0), 47.0),  # said it saved at 47
        (10.0, 50.0, Saves(interval=15.0, last=30.0), 40.0),  # the later of the two
        (10.0, 50.0, Saves(last=5.0), 10.0),  # a save of an earlier run does not count
        (10.0, 50.0, Saves(last=55.0), 10.0),  # nor one after the stop
    ],
)
def test_an_evicted_pod_loses_its_work_since_its_last_save(
    started: float, stopped: float, saves: Saves, since: float
) -> None:
    assert unsaved_since(started, stopped, saves) == since


def test_a_pod_says_its_saves_in_annotations_on_the_observers_clock() -> None:
    # epoch 1,800,000,000 is 2027-01-15T08:00:00Z; the later of the two saves, 8 s after.
    pod = {
        "metadata": {
            "annotations": {
                "muster.dev/checkpoint-interval-seconds": "30",
                "muster.dev/last-checkpoint": "2027-01-15T08:00:05Z",
                "muster.dev/checkpointed": "2027-01-15T08:00:08Z",
            }
        }
    }
    assert pod_saves(pod, 1_800_000_000.0) == Saves(interval=30.0, last=8.0)
    assert (
        pod_saves({"metadata": {"annotations": {"muster.dev/last-checkpoint": "soon"}}}, 0.0)
        == Saves()
    )


def test_trace_figures_count_the_work_evictions_lose_and_evictions_of_young_pods() -> None:
    # One team, 16 GPUs, 200 s.
    # x: 1 pod x 8 GPUs, binds at 0, saves every 30 s, evicted at 100: saved at 90, loses
    #    8 x 10 = 80; it had run 100 s, not young. Its replacement binds at 110, succeeds.
    # y: 1 pod x 4 GPUs, binds at 20, evicted at 50 having said it saved at 45: loses
    #    4 x 5 = 20; it had run 30 s, young.
    # z: 1 pod x 4 GPUs, binds at 20, deleted at 70 saving nothing: loses 4 x 50 = 200,
    #    young (50 s).
    jobs = {
        name: SubmittedJob("a", 1, gpus, "normal", 0.0)
        for name, gpus in (("x", 8), ("y", 4), ("z", 4))
    }
    seen = [
        PodSighting(0, "a/x-0", "x", 8, holds=True, succeeded=False, saves=Saves(interval=30.0)),
        PodSighting(20, "a/y-0", "y", 4, holds=True, succeeded=False),
        PodSighting(20, "a/z-0", "z", 4, holds=True, succeeded=False),
        PodSighting(50, "a/y-0", "y", 4, holds=False, succeeded=False, saves=Saves(last=45.0)),
        PodSighting(70, "a/z-0", "z", 4, holds=False, succeeded=False, gone=True),
        PodSighting(100, "a/x-0", "x", 8, holds=False, succeeded=False, saves=Saves(interval=30.0)),
        PodSighting(110, "a/x-1", "x", 8, holds=True, succeeded=False),
        PodSighting(150, "a/x-1", "x", 8, holds=False, succeeded=True),
    ]
    figures = trace_figures(seen, jobs, {"a": 16}, capacity=16, horizon=200)
    assert figures["evicted_pods"] == 3
    assert figures["gpu_seconds_lost_to_eviction"] == 80.0 + 20.0 + 200.0
    assert figures["evictions_younger_than_60s"] == 2
    # z exits on notice and says a moment later that it saved at 68: it loses 4 x 2 = 8,
    # not 200 (a save after its stop, or outside its run, would not count).
    said = PodSighting(71, "a/z-0", "z", 4, holds=False, succeeded=False, saves=Saves(last=68.0))
    late = PodSighting(72, "a/z-0", "z", 4, holds=False, succeeded=False, saves=Saves(last=75.0))
    figures = trace_figures([*seen, said, late], jobs, {"a": 16}, capacity=16, horizon=200)
    assert figures["gpu_seconds_lost_to_eviction"] == 80.0 + 20.0 + 8.0
    assert figures["evicted_pods"] == 3


def test_an_elastic_job_running_its_minimum_is_not_a_partial_gang() -> None:
    # e: 4 pods x 2 GPUs, runs with as few as 2. Pods 0 and 1 bind at 0 (its minimum:
    # whole), pod 2 at 10; all end at 40. g: the same without a range, pods 0-2 bound at
    # 0: 3 of 4 pods, partial, 6 GPUs x 40 s = 240.
    jobs = {
        "e": SubmittedJob("a", 4, 2, "normal", 0.0, min_pods=2),
        "g": SubmittedJob("a", 4, 2, "normal", 0.0),
    }
    seen = [PodSighting(0, f"a/e-{i}", "e", 2, holds=True, succeeded=False) for i in (0, 1)]
    seen += [PodSighting(10, "a/e-2", "e", 2, holds=True, succeeded=False)]
    seen += [PodSighting(0, f"a/g-{i}", "g", 2, holds=True, succeeded=False) for i in (0, 1, 2)]
    seen += [
        PodSighting(40, f"a/{j}-{i}", j, 2, holds=False, succeeded=True)
        for j in "eg"
        for i in (0, 1, 2)
    ]
    figures = trace_figures(seen, jobs, {"a": 16}, capacity=16, horizon=50)
    assert figures["partial_gang_gpu_seconds"] == 240.0
    assert [name for name, _ in figures["partial_gangs_worst"]] == ["g"]


@pytest.mark.parametrize(
    ("gpus", "shape"),
    [(1, (1, 1)), (2, (2, 1)), (4, (4, 1)), (8, (2, 4)), (16, (2, 8)), (32, (4, 8))],
)
def test_a_job_is_split_into_pods_as_the_docstring_says(gpus: int, shape: tuple[int, int]) -> None:
    assert pods_of(gpus, 8) == shape


_A1_X_DELETED_AT_30 = [PodSighting(30, "a/a1-x", "a1", 8, holds=False, succeeded=False, gone=True)]
_A1_X_FAILED_AT_30 = [
    PodSighting(30, "a/a1-x", "a1", 8, holds=False, succeeded=False),  # exited on notice
    PodSighting(40, "a/a1-x", "a1", 8, holds=False, succeeded=False),  # its status again
    PodSighting(45, "a/a1-x", "a1", 8, holds=False, succeeded=False, gone=True),
]


@pytest.mark.parametrize("ending", [_A1_X_DELETED_AT_30, _A1_X_FAILED_AT_30])
def test_time_below_min_with_no_pod_to_place_is_told_apart(ending: list[PodSighting]) -> None:
    # 8 GPUs, 100 s; team a, min 8. a1: 1 pod x 8 GPUs sent at 0; a1-x is created at 0
    # and binds at 10, stops at 30 (deleted; or failed, exiting on notice, and deleted
    # only at 45); its Job's back-off makes the replacement a1-y only at 50, which binds
    # at 60 and succeeds at 90.  Below min with a1 waiting: 0-10 and 30-60, 40 s; of which
    # with no pod of a1 waiting to be placed: 30-50, 20 s (a failed a1-x waits for nothing).
    jobs = {"a1": SubmittedJob("a", 1, 8, "normal", 0.0)}
    seen = [
        PodSighting(0, "a/a1-x", "a1", 8, holds=False, succeeded=False),
        PodSighting(10, "a/a1-x", "a1", 8, holds=True, succeeded=False),
        *ending,
        PodSighting(50, "a/a1-y", "a1", 8, holds=False, succeeded=False),
        PodSighting(60, "a/a1-y", "a1", 8, holds=True, succeeded=False),
        PodSighting(90, "a/a1-y", "a1", 8, holds=False, succeeded=True),
    ]
    figures = trace_figures(seen, jobs, {"a": 8}, capacity=8, horizon=100)
    assert figures["seconds_below_min_with_pending_work"] == {"a": 40.0}
    assert figures["seconds_below_min_with_no_pod_to_place"] == {"a": 20.0}
    assert figures["evicted_pods"] == 1


def test_trace_figures_worked_by_hand() -> None:
    # 16 GPUs, 100 s; teams a and b, min 8 each.
    # a/a1: 2 pods x 4 GPUs, sent at 0; p0 binds at 10, p1 at 20, both succeed at 50.
    # b/b1: 1 pod x 8 GPUs, sent at 0; binds at 0, evicted at 30; its replacement binds
    #       at 40 and succeeds at 90.
    # a/a2: 1 pod x 16 GPUs, sent at 60, never binds.
    jobs = {
        "a1": SubmittedJob("a", 2, 4, "normal", 0.0),
        "b1": SubmittedJob("b", 1, 8, "high", 0.0),
        "a2": SubmittedJob("a", 1, 16, "normal", 60.0),
    }
    seen = [
        PodSighting(0, "b/b1-x", "b1", 8, holds=True, succeeded=False),
        PodSighting(10, "a/a1-0", "a1", 4, holds=True, succeeded=False),
        PodSighting(20, "a/a1-1", "a1", 4, holds=True, succeeded=False),
        PodSighting(30, "b/b1-x", "b1", 8, holds=False, succeeded=False, gone=True),
        PodSighting(40, "b/b1-y", "b1", 8, holds=True, succeeded=False),
        PodSighting(50, "a/a1-0", "a1", 4, holds=False, succeeded=True),
        PodSighting(50, "a/a1-1", "a1", 4, holds=False, succeeded=True),
        PodSighting(61, "a/a2-0", "a2", 16, holds=False, succeeded=False),
        PodSighting(90, "b/b1-y", "b1", 8, holds=False, succeeded=True),
        PodSighting(120, "a/a2-0", "a2", 16, holds=True, succeeded=False),  # after horizon
    ]
    figures = trace_figures(seen, jobs, {"a": 8, "b": 8}, capacity=16, horizon=100)
    # Held: a1 4 x 40 + 4 x 30 = 280, b1 8 x 30 + 8 x 50 = 640; 920 / (16 x 100).
    assert figures["gpu_allocation"] == 0.575
    # a1 has one pod of two running from 10 to 20: 4 GPUs x 10 s.
    assert figures["partial_gang_gpu_seconds"] == 40.0
    # a: from 0 to 20 it holds less than 8 while a1 (8, then 4 left) fits in what min
    # leaves; a2 (16) never fits in 8. b: from 30 to 40 it holds 0 while b1 waits.
    assert figures["seconds_below_min_with_pending_work"] == {"a": 20.0, "b": 10.0}
    # No pod of a1 is sighted before its binds, nor of b1 between its eviction and its
    # replacement: all of that time had no pod to place.
    assert figures["seconds_below_min_with_no_pod_to_place"] == {"a": 20.0, "b": 10.0}
    assert figures["job_completion_seconds"] == {
        "high": {"p50": 90.0, "p95": 90.0, "count": 1},
        "normal": {"p50": 50.0, "p95": 50.0, "count": 1},
    }
    assert figures["jobs_completed"] == 2 and figures["jobs_submitted"] == 3
    assert figures["evicted_pods"] == 1 and figures["evictions_per_completed_job"] == 0.5
    assert figures["pending_at_end"] == 1  # a2


def test_the_completion_floor_is_the_p95_of_the_completed_jobs_runtimes() -> None:
    # h1 runs 30 s at once; h2 (runtime 40) waits 20 s, done at 60; h3 (runtime 100)
    # never runs. Nearest rank over two jobs is the larger: p95 of [30, 60] is 60, and
    # the floor, over the completed jobs' runtimes [30, 40] (not h3's), is 40.
    runtimes = {"h1": 30.0, "h2": 40.0, "h3": 100.0}
    jobs = {name: SubmittedJob("a", 1, 1, "high", 0.0, runtime=r) for name, r in runtimes.items()}
    seen = [
        PodSighting(0, "a/h1-0", "h1", 1, holds=True, succeeded=False),
        PodSighting(30, "a/h1-0", "h1", 1, holds=False, succeeded=True),
        PodSighting(20, "a/h2-0", "h2", 1, holds=True, succeeded=False),
        PodSighting(60, "a/h2-0", "h2", 1, holds=False, succeeded=True),
    ]
    figures = trace_figures(seen, jobs, {"a": 8}, capacity=8, horizon=100)
    assert figures["job_completion_seconds"]["high"] == {
        "p50": 30.0,
        "p95": 60.0,
        "count": 2,
        "p95_floor": 40.0,
    }
    # A completed job whose runtime is not recorded (an older run) gives no floor rather
    # than a wrong one.
    jobs["h2"] = SubmittedJob("a", 1, 1, "high", 0.0)
    figures = trace_figures(seen, jobs, {"a": 8}, capacity=8, horizon=100)
    assert "p95_floor" not in figures["job_completion_seconds"]["high"]


def test_a_gang_done_one_pod_at_a_time_is_not_partial() -> None:
    # Two pods bound together at 0; one succeeds at 10, the other at 20: from 10 to 20
    # the job has one pod running and one done, which is the whole job.
    jobs = {"g": SubmittedJob("a", 2, 8, "normal", 0.0)}
    seen = [
        PodSighting(0, "a/g-0", "g", 8, holds=True, succeeded=False),
        PodSighting(0, "a/g-1", "g", 8, holds=True, succeeded=False),
        PodSighting(10, "a/g-0", "g", 8, holds=False, succeeded=True),
        PodSighting(20, "a/g-1", "g", 8, holds=False, succeeded=True),
    ]
    figures = trace_figures(seen, jobs, {"a": 16}, capacity=16, horizon=30)
    assert figures["partial_gang_gpu_seconds"] == 0.0
    assert figures["evicted_pods"] == 0
    assert figures["job_completion_seconds"]["normal"]["p50"] == 20.0


def test_the_table_has_a_column_per_system_and_the_paired_binding_rate() -> None:
    jobs = {"g": SubmittedJob("a", 1, 8, "normal", 0.0, runtime=9.5)}
    seen = [
        PodSighting(0, "a/g-0", "g", 8, holds=True, succeeded=False),
        PodSighting(10, "a/g-0", "g", 8, holds=False, succeeded=True),
    ]
    figures = trace_figures(seen, jobs, {"a": 8}, capacity=8, horizon=20)
    results = {
        "systems": {
            "kube-scheduler": {
                **figures,
                "binding": {"pods_per_second": 200.0, "ratio_to_alone": 1.0},
            },
            "muster": {**figures, "binding": {"pods_per_second": 190.0, "ratio_to_alone": 0.95}},
            # measured for its binding rate only (--no-trace): a dash for the rest
            "kueue": {"binding": {"pods_per_second": 201.0, "ratio_to_alone": 1.01}},
        }
    }
    lines = markdown_table(results).splitlines()
    assert lines[0] == "| | kube-scheduler | muster | kueue |"
    # 8 GPUs held 10 s of 20 on 8 GPUs: 0.5.
    assert "| GPU allocation (GPU-s held / capacity) | 0.500 | 0.500 | - |" in lines
    # g completed in 10 s; its runtime alone, 9.5, is the floor, given to a tenth (a
    # whole second would round it past the completion).
    row = "| completion p50 / p95 s (jobs; floor: p95 at their runtimes), normal |"
    assert f"{row} 10 / 10 (1; floor 9.5) | 10 / 10 (1; floor 9.5) | - |" in lines
    assert lines[-1].endswith("| 200 (1.00) | 190 (0.95) | 201 (1.01) |")
    # A trace played without the binding rates has no row for them.
    for figures_of in results["systems"].values():
        figures_of.pop("binding")
    assert not any("binding rate" in line for line in markdown_table(results).splitlines())
    # Muster's plans, Muster's column only (no plans counted by the others): 3 plans that
    # evicted 4 pods, 1.33 a plan; a table without them has no such row.
    assert not any("preemption plans" in line for line in markdown_table(results).splitlines())
    results["systems"]["muster"] |= {"preemption_plans": 3, "evicted_pods_per_plan": 1.33}
    assert "| Muster's preemption plans (evicted pods per plan) | - | 3 (1.33) | - |" in (
        markdown_table(results).splitlines()
    )


@pytest.mark.parametrize("value", ["-1", "inf", "nan"])
def test_a_minimum_runtime_that_is_not_seconds_is_refused_before_anything_runs(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--min-runtime", value, "--systems", "muster"])
    assert exit_info.value.code == 2
    assert "--min-runtime" in capsys.readouterr().err


def write_recorded_run(
    workdir: Path, system: str, jobs: dict[str, SubmittedJob], seen: list[PodSighting]
) -> None:
    """What a run of ``system`` records under ``--workdir`` for ``--refigure``: its
    submissions, then its sightings."""
    run = workdir / system
    run.mkdir()
    rows = [{"job": name, **dataclasses.asdict(job)} for name, job in jobs.items()]
    rows += [dataclasses.asdict(sighting) for sighting in seen]
    (run / "sightings.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_refigure_computes_a_run_s_figures_again_from_what_it_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run of one system recorded: job g (1 pod x 8 GPUs) bound at 0 and evicted at 40
    # (saving every 30 s: loses 8 x 10 = 80); the results it wrote say 0 GPU-s lost (a
    # figure defined since, say). Computed again from the sightings: 80.
    write_recorded_run(
        tmp_path,
        "muster",
        {"g": SubmittedJob("team-a", 1, 8, "normal", 0.0)},
        [
            PodSighting(0, "team-a/g-0", "g", 8, holds=True, succeeded=False),
            PodSighting(
                40, "team-a/g-0", "g", 8, holds=False, succeeded=False, saves=Saves(interval=30.0)
            ),
        ],
    )
    trace = {
        "seconds": 40,
        "drain": 10,
        "nodes": 1,
        "gpus_per_node": 8,
        "teams": [{"name": "team-a", "min": 8, "max": 8, "starts": 0.0}],
    }
    stale = {"gpu_allocation": 0.0, "gpu_seconds_lost_to_eviction": 0.0}
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"seed": 1, "trace": trace, "systems": {"muster": stale}}))
    assert main(["--refigure", str(results), "--workdir", str(tmp_path)]) == 0
    figures = json.loads(results.read_text())["systems"]["muster"]
    assert figures["gpu_seconds_lost_to_eviction"] == 80.0
    assert figures["gpu_allocation"] == 0.8  # 8 GPUs x 40 s of 8 x 50
    capsys.readouterr()
    # Without the run's directory, or with a directory that recorded nothing: a clear error.
    with pytest.raises(SystemExit):
        main(["--refigure", str(results)])
    assert "--workdir" in capsys.readouterr().err
    assert main(["--refigure", str(results), "--workdir", str(tmp_path / "elsewhere")]) == 2
    assert "no sightings recorded for muster" in capsys.readouterr().err


def test_the_fair_share_gap_is_what_a_borrower_holds_over_a_team_that_waits() -> None:
    # Teams a and b, min 8 each, on 32 GPUs, for 20 s.  a runs 3 x 8 GPUs until 10 s (it
    # borrows 16); b runs 8 (its min) throughout and a second job of b waits throughout.
    # Until 10 s a borrows 16 more than b (which waits at its min, borrowing 0): gap 16;
    # after, nobody borrows: gap 0.  Mean over 20 s: 16 x 10 / 20 = 8.0; worst 16.
    jobs = {
        "a1": SubmittedJob("a", 3, 8, "normal", 0.0),
        "b1": SubmittedJob("b", 1, 8, "normal", 0.0),
        "b2": SubmittedJob("b", 1, 8, "normal", 0.0),
    }
    seen = [PodSighting(0, f"a/a1-{i}", "a1", 8, holds=True, succeeded=False) for i in range(3)]
    seen += [PodSighting(10, f"a/a1-{i}", "a1", 8, holds=False, succeeded=True) for i in range(3)]
    seen.append(PodSighting(0, "b/b1-0", "b1", 8, holds=True, succeeded=False))
    figures = trace_figures(seen, jobs, {"a": 8, "b": 8}, capacity=32, horizon=20)
    assert figures["fair_share_gap_gpus"] == {"mean": 8.0, "worst": 16.0}
    # Weighted: a's weight 2 halves what its borrowing counts for: gap 8, mean 4.0.
    weighted = trace_figures(
        seen, jobs, {"a": 8, "b": 8}, capacity=32, horizon=20, weights={"a": 2.0}
    )
    assert weighted["fair_share_gap_gpus"] == {"mean": 4.0, "worst": 8.0}
    # A team below its min that waits is the guarantee's business, not this figure's.
    below = trace_figures(seen, jobs, {"a": 8, "b": 16}, capacity=32, horizon=20)
    assert below["fair_share_gap_gpus"] == {"mean": 0.0, "worst": 0.0}
