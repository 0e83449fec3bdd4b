"""``muster simulate`` over DRA's objects (issue 36, item 5): read from a dump, charged,
explained; bad input named.  Expected figures derived by hand in each test's comment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest
import yaml

from extender.cli.main import main
from extender.cli.manifests import load_manifests
from extender.core.config import MusterArgs
from extender.kube.client import KubeClient
from extender.kube.source import KubeSource
from tests.builders import node, quota, record_keys
from tests.dra_builders import claim_template, device_class, dra_pod, exactly, resource_slice

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "scenarios" / "dra-gang-reclaims-claimed-gpus.yaml"
GPU = "nvidia.com/gpu"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, *objects: object, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def test_the_scenarios_quotas_count_a_shared_claim_once() -> None:
    # Loaded: team-b's b-0 and b-1 hold 8 devices each through their made claims, the gang
    # "pair" 8 through one shared claim: 24, not 32.
    state = load_manifests([SCENARIO], MusterArgs()).state
    assert state.ledger["team-b"].used[GPU] == 24_000
    # Every node's 8 devices are taken.
    assert all(state.free_on(name).get(GPU, 0) == 0 for name in ("n1", "n2", "n3"))


def test_the_scenarios_quotas_after_the_reclaim(capsys: pytest.CaptureFixture[str]) -> None:
    # After b-1 and the pair go: team-b keeps b-0's 8; team-a holds its 16.
    code, out, _ = run(capsys, str(SCENARIO), "--output", "json")
    assert code == 0
    quotas = json.loads(out)["quotas"]
    assert quotas["team-b"]["used"][GPU] == "8"
    assert quotas["team-a"]["used"][GPU] == "16"


def test_device_class_resources_maps_a_class_to_the_quotas_resource(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without the mapping the class's devices count under the implicit
    # deviceclass.resource.kubernetes.io/gpu.example.com, which team-a's max (1 GPU) does
    # not name: both preemptible 1-device pods are placed.  Mapped to nvidia.com/gpu, the
    # max (which bounds preemptible pods) admits one of them, the first created: the
    # second waits on its quota.
    files = write(
        tmp_path,
        node("n0", gpu=0),
        device_class(),
        resource_slice("n0", 4),
        claim_template("one", "team-a", exactly(1)),
        quota("team-a", max={GPU: "1"}),
        dra_pod("p0", template="one", preemptible=True),
        dra_pod("p1", template="one", preemptible=True, created="2026-01-01T10:01:00Z"),
    )
    code, out, _ = run(capsys, files, "--output", "json")
    assert code == 0 and sorted(json.loads(out)["placements"]) == ["team-a/p0", "team-a/p1"]
    config = tmp_path / "args.yaml"
    config.write_text("deviceClassResources: {gpu.example.com: nvidia.com/gpu}\n")
    code, out, _ = run(capsys, files, "--config", str(config), "--output", "json")
    result = json.loads(out)
    assert code == 0 and list(result["placements"]) == ["team-a/p0"]
    assert "team-a/p1" in result["unschedulable"]
    assert result["quotas"]["team-a"]["used"][GPU] == "1"


def test_simulate_says_what_it_cannot_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = write(
        tmp_path,
        node("n0", gpu=0),
        device_class(expressions=['device.driver == "a" || device.driver == "b"']),
        resource_slice("n0", 4),
        claim_template("one", "team-a", exactly(1)),
        dra_pod("p0", template="one"),
    )
    code, _, err = run(capsys, files, "--output", "json")
    assert code == 0
    assert "'||' is not evaluated" in err


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (
            claim_template("bad", "team-a", {"deviceClassName": "gpu.example.com", "count": -1}),
            "team-a/bad): spec.spec.devices.requests[0].exactly.count: expected",
        ),
        (
            {**resource_slice("n0", 1), "spec": {"pool": {"name": "p"}}},
            "spec.driver: required",
        ),
    ],
)
def test_malformed_dra_objects_exit_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broken: object, message: str
) -> None:
    code, _, err = run(capsys, write(tmp_path, node("n0", gpu=0), broken))
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_another_api_version_is_ignored_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = {**device_class(), "apiVersion": "resource.k8s.io/v1beta1"}
    code, _, err = run(capsys, write(tmp_path, node("n0", gpu=0), old))
    assert code == 0 and "resource.k8s.io/v1 is read" in err


def test_the_live_source_reads_the_dra_kinds_through_the_same_parsers() -> None:
    # The informers list and watch the four kinds (get/list/watch in the RBAC); events
    # reach the state as simulate's loader puts them: the node gains its slice's 4
    # devices, a template-claiming bound pod takes 1 (3 free); an unreadable slice is
    # rejected and counts as absent (0 devices); its deletion likewise.
    source = KubeSource(cast(KubeClient, object()), MusterArgs(), record_keys=record_keys)
    paths = {informer.path for informer in source.informers}
    assert {
        "/apis/resource.k8s.io/v1/deviceclasses",
        "/apis/resource.k8s.io/v1/resourceslices",
        "/apis/resource.k8s.io/v1/resourceclaims",
        "/apis/resource.k8s.io/v1/resourceclaimtemplates",
    } <= paths
    source._on_node("ADDED", node("n0", gpu=0))
    source._dra_handler("DeviceClass")("ADDED", device_class(extended=GPU))
    good = resource_slice("n0", 4)
    source._dra_handler("ResourceSlice")("ADDED", good)
    source._dra_handler("ResourceClaimTemplate")(
        "ADDED", claim_template("one", "team-a", exactly(1))
    )
    source._on_pod("ADDED", dra_pod("p", template="one", node="n0"))
    assert source.state.free_on("n0")[GPU] == 3000
    bad = {**good, "spec": {**good["spec"], "driver": 7}}
    source._dra_handler("ResourceSlice")("MODIFIED", bad)
    assert "spec.driver" in source.rejected[f"ResourceSlice/{good['metadata']['name']}"]
    assert source.state.nodes["n0"].allocatable.get(GPU, 0) == 0
    source._dra_handler("ResourceSlice")("MODIFIED", good)
    assert source.state.free_on("n0")[GPU] == 3000
    source._dra_handler("ResourceSlice")("DELETED", good)
    assert source.state.nodes["n0"].allocatable.get(GPU, 0) == 0
