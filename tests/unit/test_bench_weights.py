"""``bench.peers --weights`` (issue 35): the weights read from the command line, each
peer's form of them (Muster's annotation, Kueue's ClusterQueue weight and fair sharing,
Koordinator's shared weight), and the weighted fair-share gap in the table and in
``--refigure``; expectations worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import localcluster as lc
from bench.peers import (
    CHART_GUARANTEE_RESERVE,
    CHART_VICTIM_RANKING,
    QuotaSettings,
    _quota_object,
    main,
    markdown_table,
)
from bench.support.weights import koordinator_shared_weight, parse_weights
from bench.workload import PodSighting, SubmittedJob, trace_figures
from tests.unit.test_bench_peers import write_recorded_run


def test_weights_are_read_one_positive_number_per_team() -> None:
    assert parse_weights("1, 1,2,4", 4) == [1.0, 1.0, 2.0, 4.0]
    assert parse_weights("0.5,3", 2) == [0.5, 3.0]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("1,1,2", "3 weights given for --teams 4"),
        ("1,1,2,4,8", "5 weights given for --teams 4"),
        ("1,0,2,4", "'0' is not a positive number"),
        ("1,-1,2,4", "'-1' is not a positive number"),
        ("1,inf,2,4", "'inf' is not a positive number"),
        ("1,nan,2,4", "'nan' is not a positive number"),
        ("1,two,2,4", "'two' is not a number"),
        ("1,,2,4", "'' is not a number"),
    ],
)
def test_weights_that_are_not_positive_or_not_one_per_team_are_refused_before_anything_runs(
    value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--weights", value, "--systems", "muster"])
    assert exit_info.value.code == 2
    assert f"--weights: {says}" in capsys.readouterr().err


def test_muster_s_quota_carries_the_weight_only_when_one_is_given() -> None:
    plain = _quota_object("team-a", 8, 32, 4, 4)
    assert "muster.dev/fair-sharing-weight" not in plain["metadata"]["annotations"]
    weighted = _quota_object("team-a", 8, 32, 4, 4, weight=2.5)
    assert weighted["metadata"]["annotations"]["muster.dev/fair-sharing-weight"] == "2.5"


def test_koordinator_s_shared_weight_is_its_max_times_the_weight() -> None:
    # max 32 GPUs, 128 CPUs, 512Gi; weight 1.5: 48, 192, 768Gi. Weight 1: the max itself,
    # what Koordinator weighs by without the annotation.
    maximum = {"nvidia.com/gpu": "32", "cpu": "128", "memory": "512Gi"}
    assert json.loads(koordinator_shared_weight(maximum, 1.5)) == {
        "nvidia.com/gpu": "48",
        "cpu": "192",
        "memory": "768Gi",
    }
    assert json.loads(koordinator_shared_weight(maximum, 1.0)) == maximum
    with pytest.raises(ValueError, match="cpu"):
        koordinator_shared_weight({"cpu": "1.5"}, 2.0)


def test_kueue_gets_fair_sharing_and_each_queue_its_weight_only_when_asked() -> None:
    queues = lc.kueue_objects.kueue_queues(
        [lc.kueue_objects.TeamQuota("a", 8, 32, weight=4.0), lc.kueue_objects.TeamQuota("b", 8, 32)]
    )
    by_name = {o["metadata"]["name"]: o for o in queues if o["kind"] == "ClusterQueue"}
    assert by_name["a"]["spec"]["fairSharing"] == {"weight": "4"}
    assert "fairSharing" not in by_name["b"]["spec"]  # Kueue's default weight, 1

    def configuration(**fair_sharing: bool) -> dict[str, object]:
        return lc.kueue_install.kueue_configuration(
            health_port=1, metrics_port=2, webhook_port=3, cert_dir=Path("/c"), **fair_sharing
        )

    assert "fairSharing" not in configuration()
    on = configuration(fair_sharing=True)
    # v0.17.0's v1beta2 Configuration: the block turns it on; the strategies are required.
    assert on["fairSharing"] == {
        "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    }


def test_refigure_and_the_table_weigh_the_fair_share_gap_by_the_run_s_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Teams a and b, min 8 each, on 32 GPUs, for 20 s: a runs 3 x 8 GPUs throughout
    # (borrows 16), b runs 8 (its min) and a second job of b waits throughout.  Unweighted
    # the gap is 16 - 0 = 16 all along: mean 16, worst 16.  With a's weight 4 a's
    # borrowing counts 16 / 4 = 4: mean 4, worst 4.
    jobs = {
        "a1": SubmittedJob("a", 3, 8, "normal", 0.0),
        "b1": SubmittedJob("b", 1, 8, "normal", 0.0),
        "b2": SubmittedJob("b", 1, 8, "normal", 0.0),
    }
    seen = [PodSighting(0, f"a/a1-{i}", "a1", 8, holds=True, succeeded=False) for i in range(3)]
    seen.append(PodSighting(0, "b/b1-0", "b1", 8, holds=True, succeeded=False))
    write_recorded_run(tmp_path, "muster", jobs, seen)
    trace = {
        "seconds": 10,
        "drain": 10,
        "nodes": 4,
        "gpus_per_node": 8,
        "teams": [
            {"name": "a", "min": 8, "max": 32, "starts": 0.0},
            {"name": "b", "min": 8, "max": 32, "starts": 0.0},
        ],
    }
    unweighted = trace_figures(seen, jobs, {"a": 8, "b": 8}, capacity=32, horizon=20)
    assert unweighted["fair_share_gap_gpus"] == {"mean": 16.0, "worst": 16.0}
    results = tmp_path / "results.json"
    stale = {"gpu_allocation": 0.0}
    body = {
        "seed": 1,
        "trace": trace,
        "weights": {"a": 4.0, "b": 1.0},
        "systems": {"muster": stale},
    }
    results.write_text(json.dumps(body))
    assert main(["--refigure", str(results), "--workdir", str(tmp_path)]) == 0
    capsys.readouterr()
    refigured = json.loads(results.read_text())
    assert refigured["systems"]["muster"]["fair_share_gap_gpus"] == {"mean": 4.0, "worst": 4.0}
    # The table says the gap is weighted, and only when it is.
    row = next(line for line in markdown_table(refigured).splitlines() if "fair-share" in line)
    assert "÷ its weight" in row and row.endswith("| 4.0 / 4 |")
    del refigured["weights"]
    row = next(line for line in markdown_table(refigured).splitlines() if "fair-share" in line)
    assert "weight" not in row


def test_the_quota_settings_muster_alone_reads_are_annotations_and_recorded_when_set() -> None:
    # The defaults: the notice cap of the runs before --max-notice (60 s) and the chart's
    # guarantee reserve (60 s), nothing else; recorded as the earlier runs were
    # (min_runtime_seconds), with the reserve always (the runs before it had none).
    default = _quota_object("team-a", 8, 32, 4, 4)["metadata"]["annotations"]
    assert default == {
        "muster.dev/max-preemption-notice-seconds": "60",
        "muster.dev/guarantee-reserve-seconds": "60",
    }
    assert QuotaSettings().recorded() == {
        "min_runtime_seconds": 0.0,
        "guarantee_reserve_seconds": 60.0,
    }
    chosen = QuotaSettings(max_notice=0, min_runtime=30, reborrow_backoff=15, guarantee_reserve=0)
    assert _quota_object("team-a", 8, 32, 4, 4, chosen)["metadata"]["annotations"] == {
        "muster.dev/max-preemption-notice-seconds": "0",
        "muster.dev/min-runtime-seconds": "30",
        "muster.dev/reborrow-backoff-seconds": "15",
        "muster.dev/guarantee-reserve-seconds": "0",
    }
    assert chosen.recorded() == {
        "min_runtime_seconds": 30,
        "max_notice_seconds": 0,
        "reborrow_backoff_seconds": 15,
        "guarantee_reserve_seconds": 0,
    }


def test_the_runs_guarantee_reserve_is_the_charts() -> None:
    # The head-to-head runs Muster as the chart does: the reserve it sets on every team's
    # quota is the chart's guaranteeReserveSeconds.
    chart = Path(__file__).resolve().parents[2] / "charts" / "muster" / "values.yaml"
    values = yaml.safe_load(chart.read_text())
    assert values["args"]["guaranteeReserveSeconds"] == CHART_GUARANTEE_RESERVE


def test_the_runs_victim_ranking_is_the_charts() -> None:
    chart = Path(__file__).resolve().parents[2] / "charts" / "muster" / "values.yaml"
    values = yaml.safe_load(chart.read_text())
    assert values["args"]["victimRanking"] == CHART_VICTIM_RANKING


@pytest.mark.parametrize(
    "flag", ["--max-notice", "--min-runtime", "--reborrow-backoff", "--guarantee-reserve"]
)
def test_a_negative_quota_setting_is_refused_naming_the_flag(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([flag, "-1", "--systems", "muster"])
    assert exit_info.value.code == 2
    assert f"{flag}: -1 is not a number of seconds >= 0" in capsys.readouterr().err
