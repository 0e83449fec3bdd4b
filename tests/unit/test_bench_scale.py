"""The scale benchmarks' parts (issue 37): the streamed snapshot file of ``bench.memory``,
and ``bench.deep_queue``'s gangs, percentile and queue."""

from __future__ import annotations

import json
from pathlib import Path

from bench.clusters import gpu_cluster
from bench.deep_queue import GPUS, SIZES, Queue, measure, percentile, queue_gangs
from bench.memory import snapshot_manifests, write_snapshot


def test_the_streamed_snapshot_is_the_whole_snapshot_dumped(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    write_snapshot(path, nodes=3, pods=7)
    assert path.read_text() == json.dumps(snapshot_manifests(3, 7))
    kinds = [item["kind"] for item in json.loads(path.read_text())["items"]]
    assert kinds.count("Node") == 3 and kinds.count("Pod") == 7


def test_an_empty_snapshot_is_a_valid_list(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    write_snapshot(path, nodes=1, pods=0)
    assert path.read_text() == json.dumps(snapshot_manifests(1, 0))


def test_queued_gangs_spread_over_the_teams_a_third_with_a_required_rack() -> None:
    gangs = queue_gangs(60, teams=20, seed=1)
    assert [g.team for g in gangs[:21]] == [f"team-{i % 20}" for i in range(21)]
    assert sum(g.topology for g in gangs) == 20
    assert {g.size for g in gangs} <= set(SIZES) and {g.gpus for g in gangs} <= set(GPUS)
    assert queue_gangs(60, teams=20, seed=1) == gangs  # seeded
    assert len({g.name for g in gangs}) == 60


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values[:40], 99) == 40.0  # 40 values: p99 is the largest
    assert percentile([3.0], 99) == 3.0


def test_the_queue_grows_and_the_cluster_and_the_probes_decisions_stay_the_same() -> None:
    state = gpu_cluster(64, quotas=4, racks=2, gpu_pods_per_node=3)
    queue = Queue(state)
    running = {key: pod.node_name for key, pod in state.pods.items()}
    decided = {}
    for gang in queue_gangs(40, teams=4, seed=3):
        job = queue.arrive(gang)
        decided[job] = queue.decide(job)
        if decided[job].outcome == "refused":
            queue.waiting.append(job)
        else:
            queue.take_back(job)
            assert job not in state.reservations and not state.members.job_pods(job)
    outcomes = {d.outcome for d in decided.values()}
    assert outcomes == {"placed", "planned", "refused"}
    assert all(d.reason for d in decided.values() if d.outcome == "refused")
    # Taking back leaves the running pods as they were; the waiting gangs are pending.
    assert {k: state.pods[k].node_name for k in running} == running
    assert all(p.node_name is None for job in queue.waiting for p in state.members.job_pods(job))
    # A probe decided twice, taken back between, is decided the same.
    probe = queue_gangs(1, teams=4, seed=9, prefix="probe")[0]
    first = queue.decide(queue.arrive(probe))
    queue.take_back(f"{probe.team}/{probe.name}")
    again = queue.decide(queue.arrive(probe))
    assert (first.outcome, first.reason) == (again.outcome, again.reason)
    queue.close()


def test_measure_reports_every_depth_with_the_same_probe_outcomes() -> None:
    row = measure(64, [2, 6], probes=4, teams=4, seed=3, repeat=1)
    assert set(row["probes"]) == {2, 6}
    assert row["probes"][2]["outcomes"] == row["probes"][6]["outcomes"]
    assert row["backlog"]["outcomes"]["refused"] == 6
