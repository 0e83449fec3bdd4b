"""``muster simulate``: the shared scenarios, the output contract, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from extender.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SCENARIO_DIRS = [ROOT / "tests" / "scenarios", ROOT.parent / "shared" / "scenarios"]
SCENARIOS = sorted(
    {
        path
        for folder in SCENARIO_DIRS
        if folder.is_dir()
        for path in folder.glob("*.yaml")
        if not path.name.endswith(".args.yaml")
    }
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_there_are_scenarios() -> None:
    assert len(SCENARIOS) >= 3


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_scenario_matches_expected(scenario: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = json.loads(scenario.with_suffix("").with_suffix(".expected.json").read_text())
    # A scenario's arguments, when it needs any, beside it: NAME.args.yaml (--config).
    config = scenario.with_suffix("").with_suffix(".args.yaml")
    options = ["--config", str(config)] if config.is_file() else []
    # A scenario about time decides at the time beside it: NAME.now (--now), RFC 3339.
    at = scenario.with_suffix("").with_suffix(".now")
    if at.is_file():
        options += ["--now", at.read_text().strip()]
    code, out, _ = run(capsys, str(scenario), "--output", "json", *options)
    assert code == 0
    result = json.loads(out)
    if "evictions" in expected:
        assert sorted(e["pod"] for e in result["evictions"]) == sorted(expected["evictions"])
    if "restarted" in expected:  # victims whose Job is restarted whole, their reason says
        restarted = [e["pod"] for e in result["evictions"] if "the Job is restarted" in e["reason"]]
        assert sorted(restarted) == sorted(expected["restarted"])
    for key, words in expected.get("reasons", {}).items():  # what an eviction's reason says
        said = [e["reason"] for e in result["evictions"] if e["pod"] == key]
        assert said and words in said[0], (key, said)
    for key in expected.get("placed", []):
        assert key in result["placements"], f"{key} was not placed: {result['unschedulable']}"
    for key in expected.get("pending", []):
        assert key in result["unschedulable"], f"{key} was placed"
    for key, words in expected.get("pendingReasons", {}).items():  # why a pod waits
        assert words in result["unschedulable"].get(key, ""), (key, result["unschedulable"])
    for key, node in expected.get("placements", {}).items():
        assert result["placements"].get(key) == node


def test_output_document_shape(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = ROOT / "tests" / "scenarios" / "gang-fits-after-eviction.yaml"
    code, out, _ = run(capsys, str(scenario), "--output", "json")
    assert code == 0
    result: dict[str, Any] = json.loads(out)
    assert set(result) == {"placements", "evictions", "unschedulable", "quotas"}
    assert result["evictions"][0]["preemptor"] == "team-a/train"
    assert set(result["evictions"][0]) == {"pod", "node", "preemptor", "reason"}
    assert result["quotas"]["team-a"] == {
        "min": {"nvidia.com/gpu": "16"},
        "max": {"nvidia.com/gpu": "32"},
        "used": {"cpu": "8", "nvidia.com/gpu": "16", "pods": "2"},
        "nonPreemptibleUsed": {"cpu": "8", "nvidia.com/gpu": "16", "pods": "2"},
    }
    # the two trainers landed on different nodes, where the victims were
    assert sorted(result["placements"].values()) == ["n3", "n4"]


def test_table_output_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = ROOT / "tests" / "scenarios" / "no-partial-eviction.yaml"
    code, out, _ = run(capsys, str(scenario), "--output", "table")
    assert code == 0
    assert "Still pending (3)" in out
    assert "room for 2 of its 3 unplaced pods" in out
    assert "team-b" in out.split("Quotas")[1]


def test_config_file_changes_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        """
kind: Node
apiVersion: v1
metadata: {name: n1}
status: {allocatable: {cpu: "4", pods: "10"}}
---
kind: Pod
apiVersion: v1
metadata: {name: old, namespace: x, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {nodeName: n1, priority: 0, containers: [{name: c, resources: {requests: {cpu: "4"}}}]}
---
kind: Pod
apiVersion: v1
metadata: {name: new, namespace: x, creationTimestamp: "2026-01-01T01:00:00Z"}
spec: {priority: 10, containers: [{name: c, resources: {requests: {cpu: "4"}}}]}
"""
    )
    code, out, _ = run(capsys, str(cluster), "--output", "json")
    assert code == 0 and json.loads(out)["evictions"] == []
    config = tmp_path / "args.yaml"
    defaults = "disableDefaultPreemptible: false\ndisableDefaultTriggerPreemption: false\n"
    config.write_text(defaults)
    code, out, _ = run(capsys, str(cluster), "--config", str(config), "--output", "json")
    # Namespace x has no quota: both pods fall to the implicit default quota, whose pods
    # never evict each other unless defaultQuotaPreemption says so (docs/security.md).
    assert code == 0 and json.loads(out)["evictions"] == []
    config.write_text(defaults + "defaultQuotaPreemption: LowerPriority\n")
    code, out, _ = run(capsys, str(cluster), "--config", str(config), "--output", "json")
    assert code == 0
    result = json.loads(out)
    assert [e["pod"] for e in result["evictions"]] == ["x/old"]
    assert result["placements"] == {"x/new": "n1"}


NODE = (
    "kind: Node\napiVersion: v1\nmetadata: {name: n1}\n"
    "status: {allocatable: {cpu: '4', pods: '9'}}\n"
)
EQ = "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: ElasticQuota\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            NODE + "---\nkind: Pod\napiVersion: v1\nmetadata: {name: p, namespace: a}\n"
            "spec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}\n",
            "document 2 (Pod a/p): spec.containers[0].resources.requests.cpu: "
            "'lots' is not a quantity",
        ),
        (
            EQ + "metadata: {name: q, namespace: a}\nspec: {min: {cpu: '2'}, max: {cpu: '1'}}\n",
            "document 1 (ElasticQuota a/q): spec.min.cpu: min 2 is greater than max 1",
        ),
        (
            NODE + "---\n" + NODE,
            "document 2 (Node n1): metadata.name: duplicate Node name 'n1'",
        ),
        (
            NODE + "---\nkind: Pod\napiVersion: v1\nmetadata: {name: p, namespace: a, labels: "
            "{quota.scheduling.koordinator.sh/name: nope}}\nspec: {containers: [{name: c}]}\n",
            "metadata.labels.quota.scheduling.koordinator.sh/name: unknown quota 'nope'",
        ),
        (
            "kind: List\napiVersion: v1\nitems:\n- kind: Pod\n  apiVersion: v1\n"
            "  metadata: {name: p}\n  spec: {nodeName: ghost, containers: [{name: c}]}\n",
            "document 1.items[0] (Pod p): spec.nodeName: unknown node 'ghost'",
        ),
        (
            EQ + "metadata: {name: q, labels: {quota.scheduling.koordinator.sh/parent: up}}\n",
            "(ElasticQuota q): metadata.labels.quota.scheduling.koordinator.sh/parent: "
            "unknown quota 'up'",
        ),
        (
            "kind: Pod\napiVersion: v1\nmetadata: {name: p}\n"
            "spec: {priorityClassName: gold, containers: [{name: c}]}\n",
            "spec.priorityClassName: unknown PriorityClass 'gold'",
        ),
        ("kind: Node\nmetadata: {name: [1, 2]}\n", "metadata.name: expected a non-empty string"),
        ("a: [1, 2\n", "invalid YAML at line"),
        ("- 1\n- 2\n", "document 1: expected a Kubernetes object"),
        (EQ + "metadata: {name: q, labels: oops}\n", "metadata.labels: expected a mapping"),
        (
            EQ + "metadata: {name: q, annotations: {muster.dev/max-priority-threshold: [1]}}\n",
            "metadata.annotations: expected a mapping of strings",
        ),
        (
            "kind: PodDisruptionBudget\napiVersion: policy/v1\nmetadata: {name: b, namespace: a}\n"
            "spec: {selector: {matchExpressions: [{key: app, operator: Gt, values: ['1']}]}}\n",
            "(PodDisruptionBudget a/b): spec.selector.matchExpressions[0].operator: "
            "unknown operator 'Gt'",
        ),
        (
            "kind: PodDisruptionBudget\napiVersion: policy/v1\nmetadata: {name: b, namespace: a}\n"
            "spec: {selector: {matchLabels: {app: [x]}}}\n",
            "spec.selector.matchLabels.app: expected a string",
        ),
    ],
)
def test_invalid_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = run(capsys, str(path))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"muster simulate: {path}")
    assert message in err


def test_now_decides_the_time(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = ROOT / "tests" / "scenarios" / "starving-gang-holds-room.yaml"
    config = str(scenario.with_suffix("").with_suffix(".args.yaml"))
    # By hand (the scenario's header): at 12:09:59 the gang has waited 599 s < 600, so
    # nothing is held and all five 1-GPU jobs find a GPU (12 are free); at 12:11:40 it
    # starves (the note) and only s-1 is placed.
    code, out, err = run(capsys, str(scenario), "--config", config, "--now", "2026-01-01T12:09:59Z")
    assert code == 0 and "starving" not in err
    assert len(json.loads(out)["placements"]) == 5
    code, out, err = run(capsys, str(scenario), "--config", config, "--now", "2026-01-01T12:11:40Z")
    assert code == 0
    assert "job team-a/train is starving" in err and "n1, n2, n3, n4" in err
    assert json.loads(out)["placements"] == {"team-b/s-1": "n6"}
    code, out, err = run(capsys, str(scenario), "--now", "yesterday")
    assert code == 2 and out == ""
    assert err == "muster simulate: --now: 'yesterday' is not an RFC 3339 timestamp\n"


def test_bad_config_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "args.yaml"
    config.write_text("disableDefaultPreemptibel: true\n")
    scenario = str(ROOT / "tests" / "scenarios" / "gang-fits-after-eviction.yaml")
    code, _, err = run(capsys, scenario, "--config", str(config))
    assert code == 2 and "disableDefaultPreemptibel" in err and "Extra inputs" in err
    config.write_text("disableDefaultPreemptible: 'yes'\n")
    code, _, err = run(capsys, scenario, "--config", str(config))
    assert code == 2 and "disableDefaultPreemptible" in err
    config.write_text("pdbPolicy: Sometimes\n")
    code, _, err = run(capsys, scenario, "--config", str(config))
    assert code == 2 and "pdbPolicy" in err and "'BestEffort' or 'Strict'" in err
    code, _, err = run(capsys, str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read" in err


def test_unknown_kinds_are_noted_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(NODE + "---\nkind: ConfigMap\napiVersion: v1\nmetadata: {name: x}\n")
    code, _, err = run(capsys, str(path), "--output", "json")
    assert code == 0
    assert "ignored kind 'ConfigMap'" in err


def test_console_script_runs() -> None:
    scenario = ROOT / "tests" / "scenarios" / "partial-gang-then-preempt.yaml"
    completed = subprocess.run(
        [sys.executable, "-m", "extender.cli.main", "simulate", str(scenario)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    assert [e["pod"] for e in json.loads(completed.stdout)["evictions"]] == ["team-b/b-0"]


@pytest.mark.parametrize("scenario", SCENARIOS[:6], ids=lambda p: p.stem)
def test_a_json_list_reads_as_its_yaml(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kubectl get -o json``'s shape (one List, its nodes and pods decoded one at a time)
    gives the same decisions as the YAML documents."""
    import yaml

    documents = [d for d in yaml.safe_load_all(scenario.read_text()) if d is not None]
    items = [i for d in documents for i in (d["items"] if d.get("kind") == "List" else [d])]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "items": items, "kind": "List"}, indent=1))
    assert (
        run(capsys, str(scenario), "--output", "json")[:2]
        == run(capsys, str(path), "--output", "json")[:2]
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": [1]}}]}',
            "document 1.items[0] (Pod [1]): metadata.name: expected a non-empty string",
        ),
        ('{"kind": "List", "items": [{"kind": "Node"},', "invalid YAML at line"),
        ('{"kind": "List", "items": []} {}', "invalid YAML at line"),
    ],
)
def test_json_input_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    code, _, err = run(capsys, str(path))
    assert code == 2 and message in err, err
