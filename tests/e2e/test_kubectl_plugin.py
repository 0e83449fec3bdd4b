"""``kubectl muster`` (issue #16, item 3) against the real control plane: ``whatif`` reads
the live cluster and answers without changing it; ``quotas``, ``jobs`` and ``why`` answer
from Muster when it is reachable, and from the cluster when it is not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_support import Cluster, make_pod
from muster_process import MusterProcess
from test_budgets import borrowed_nodes
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    TRAINER,
    Teams,
    muster_and_evictor,
    tokens,
)

import localcluster as lc

pytestmark = pytest.mark.e2e

PLUGIN = Path(sys.executable).parent / "kubectl-muster"


def kubectl_muster(plane: lc.ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PLUGIN), "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_whatif_reads_the_live_cluster_and_names_the_victim_without_touching_it(
    cluster: Cluster, control_plane: lc.ControlPlane, tmp_path: Path
) -> None:
    teams = borrowed_nodes(cluster, ["etl"])
    try:
        # Team A (within its min of 16) asks for 8 GPUs: the only room is b-0's, which
        # borrows, so Muster would evict it (reclaimWithinCohort) and place train-0 on n0.
        job = make_pod(
            "train-0",
            requests={"cpu": "4", GPU: 8},
            labels={**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"},
        )
        job["metadata"]["namespace"] = teams.a
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
        done = kubectl_muster(control_plane, "whatif", str(tmp_path / "job.yaml"), "-o", "json")
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        node = cluster.nodes[0]
        assert answer["placements"][f"{teams.a}/train-0"] == node
        (eviction,) = [e for e in answer["evictions"] if e["pod"].startswith(teams.b)]
        assert eviction["pod"] == f"{teams.b}/b-0"
        assert eviction["preemptor"] == f"{teams.a}/train"
        assert "reclaimWithinCohort" in eviction["reason"]
        # Nothing was written: b-0 runs unmarked, train-0 does not exist.
        b0 = teams.get(teams.b, "b-0") or {}
        assert b0["status"]["phase"] == "Running"
        assert "scheduling.koordinator.sh/soft-eviction" not in b0["metadata"]["labels"]
        assert teams.get(teams.a, "train-0") is None
        table = kubectl_muster(control_plane, "whatif", str(tmp_path / "job.yaml"))
        assert "Evictions (1)" in table.stdout or f"{teams.b}/b-0" in table.stdout
        missing = kubectl_muster(control_plane, "whatif", str(tmp_path / "nope.yaml"))
        assert missing.returncode == 2 and "cannot read" in missing.stderr
    finally:
        teams.cleanup()


def _row(table: str, quota: str, resource: str) -> list[str] | None:
    for line in table.splitlines():
        cells = line.split()
        if cells[:2] == [quota, resource]:
            return cells
    return None


def test_quotas_jobs_and_why_from_muster_and_from_the_cluster(
    cluster: Cluster,
    control_plane: lc.ControlPlane,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    teams = borrowed_nodes(cluster, ["etl"])
    try:
        # A pod team A's quota cannot admit (its max is 32: 40 GPUs would exceed it).
        teams.create(teams.a, "huge", requests={"cpu": "1", GPU: 40}, labels={})
        url = muster_and_evictor.url
        for source in ([], ["--muster-url", url]):
            quotas = kubectl_muster(control_plane, *source, "quotas")
            assert quotas.returncode == 0, quotas.stderr
            # team B: min 0, max 32, uses 8, all of it borrowed.
            row = _row(quotas.stdout, teams.b, GPU)
            assert row == [teams.b, GPU, "0", "32", "8", "8"], (source, quotas.stdout)

            def why(args: list[str] = source) -> dict[str, Any] | None:
                done = kubectl_muster(control_plane, *args, "why", "huge", "-n", teams.a)
                assert done.returncode == 0, done.stderr
                text = done.stdout
                return json.loads(text) if "would exceed max" in text else None

            lc.wait_until(why, timeout=30, what=f"why huge is pending ({source or 'computed'})")
            jobs = kubectl_muster(control_plane, *source, "jobs")
            assert jobs.returncode == 0 and f"{teams.a}/huge" in jobs.stdout, jobs.stdout
        unknown = kubectl_muster(control_plane, "why", "ghost", "-n", teams.a)
        assert unknown.returncode == 1 and "not found" in unknown.stderr
    finally:
        teams.cleanup()
