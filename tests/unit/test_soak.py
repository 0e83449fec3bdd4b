"""The soak's pure parts (tests/soak): the seeded stream and the invariant checks, on
hand-made pods whose expected verdicts are derived in the comments."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from bench.workload import (
    GpuSeconds,
    completed_jobs,
    holds_gpus,
    job_completion_figures,
    percentile,
    pod_gpus,
)
from tests.soak.invariants import (
    Observer,
    double_evictions,
    end_state_violations,
    evictions_in_audit,
    jobs_left_suspended,
)
from tests.soak.plan import FAULT_KINDS, GPU, make_plan

SOFT = "scheduling.koordinator.sh/soft-eviction"


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", GPU: str(gpus), "pods": "110"}},
    }


def quota(name: str, lo: int, hi: int, parent: str | None = None) -> dict[str, Any]:
    labels = {"quota.scheduling.koordinator.sh/parent": parent} if parent else {}
    if parent is None:
        labels = {"quota.scheduling.koordinator.sh/is-parent": "true"}
    return {
        "metadata": {"name": name, "namespace": name, "labels": labels},
        "spec": {"min": {GPU: str(lo)}, "max": {GPU: str(hi)}},
    }


def pod(
    ns: str,
    name: str,
    *,
    gpus: int = 1,
    group: str | None = None,
    node_name: str | None = None,
    preemptible: bool = True,
    mark_for: str | None = None,
    deleting: bool = False,
    uid: str | None = None,
) -> dict[str, Any]:
    labels = {"quota.scheduling.koordinator.sh/preemptible": str(preemptible).lower()}
    annotations = {}
    if group:
        labels["pod-group.scheduling.sigs.k8s.io"] = group
    if mark_for is not None:
        labels[SOFT] = "true"
        annotations[SOFT] = json.dumps(
            {"timestamp": "2026-01-01T00:00:00Z", "initiator": "muster", "preemptor": mark_for}
        )
    metadata: dict[str, Any] = {
        "namespace": ns,
        "name": name,
        "uid": uid or f"uid-{ns}-{name}",
        "labels": labels,
        "annotations": annotations,
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {GPU: str(gpus)}}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


# ---- the plan


def test_a_seed_replays_the_same_stream_and_another_seed_does_not() -> None:
    assert make_plan(42, 300) == make_plan(42, 300)
    assert make_plan(42, 300) != make_plan(43, 300)


@pytest.mark.parametrize("seed", range(20))
def test_the_stream_keeps_the_issue_s_ranges(seed: int) -> None:
    plan = make_plan(seed, 600)
    parents = [q for q in plan.quotas if q.is_parent]
    # One parent, 2-4 leaves under it: a two-level tree.
    assert len(parents) == 1 and 2 <= len(plan.leaves) <= 4
    assert all(q.parent == parents[0].name for q in plan.leaves)
    assert all(0 <= q.min_gpus <= q.max_gpus for q in plan.quotas)
    for job in plan.jobs:
        assert 0 <= job.grace_seconds <= 20 and 0 < job.at < 600
        assert job.pdb_min_available is None or 1 <= job.pdb_min_available <= job.pods
        if job.burst:  # 5-20 single pods of 1, 2 or 4 GPUs, no budget, no preempting
            assert 5 <= job.pods <= 20 and len(job.sizes) == job.pods
            assert set(job.sizes) <= {1, 2, 4} and job.pdb_min_available is None
            assert not job.can_preempt
        else:
            assert 1 <= job.pods <= 8
    # About 150 jobs of which 15% are bursts: some in every 600 s stream.
    assert any(job.burst for job in plan.jobs)
    # 600 s: 600 // 15 - 1 = 39 slots; 4 kinds + 600 // 60 = 14 faults, every kind.
    assert len(plan.faults) == 14
    assert {f.kind for f in plan.faults} == set(FAULT_KINDS)
    times = [f.at for f in plan.faults]
    assert times == sorted(times) and all(b - a >= 7.5 for a, b in itertools.pairwise(times))
    # Each edit keeps min <= max, replaying the edits in order from the plan's quotas.
    bounds = {q.name: [q.min_gpus, q.max_gpus] for q in plan.quotas}
    for fault in plan.faults:
        if fault.kind == "edit-quota":
            bounds[fault.quota][0 if fault.field == "min" else 1] = fault.gpus
            assert bounds[fault.quota][0] <= bounds[fault.quota][1]


def test_a_three_minute_slice_has_every_fault_kind() -> None:
    # 180 s: 180 // 15 - 1 = 11 slots; min(11, 4 + 3) = 7 faults, the four kinds first.
    plan = make_plan(5, 180)
    assert len(plan.faults) == 7 and {f.kind for f in plan.faults} == set(FAULT_KINDS)


# ---- the continuous checks


def observer() -> Observer:
    # A parent of 8 GPUs over two leaves, a (min 2, max 4) and b (min 0, max 8).
    watch = Observer(nodes=[node("n0"), node("n1")], partial_grace=20.0, edit_grace=70.0)
    watch.set_quotas([quota("org", 8, 8), quota("a", 2, 4, "org"), quota("b", 0, 8, "org")], 0.0)
    return watch


def test_binds_within_every_max_are_fine_and_one_past_the_parent_s_is_not() -> None:
    watch = observer()
    # a: 4 GPUs bound (its max 4); b: 4 GPUs; the parent: 8 of 8.  No violation.
    watch.pod_event("ADDED", pod("a", "a0", gpus=4, node_name="n0"), 1.0)
    watch.pod_event("ADDED", pod("b", "b0", gpus=4, node_name="n1"), 2.0)
    assert watch.violations == []
    # A pending pod is not counted (not bound).
    watch.pod_event("ADDED", pod("b", "b1", gpus=1), 3.0)
    assert watch.violations == []
    # b1 binds: b uses 5 of 8 (fine) but the parent 9 of 8: one violation, naming org.
    watch.pod_event("MODIFIED", pod("b", "b1", gpus=1, node_name="n1"), 4.0)
    assert [v.kind for v in watch.violations] == ["bound beyond a quota's max"]
    assert "quota org" in watch.violations[0].detail


def test_a_terminating_victim_still_counts_until_it_is_gone() -> None:
    watch = observer()
    watch.pod_event("ADDED", pod("b", "b0", gpus=8, node_name="n0", mark_for="a/j"), 1.0)
    watch.pod_event(
        "MODIFIED", pod("b", "b0", gpus=8, node_name="n0", mark_for="a/j", deleting=True), 2.0
    )
    # b0 (8 GPUs, terminating) still bound: a0 binding 2 GPUs makes the parent 10 of 8.
    watch.pod_event("ADDED", pod("a", "a0", gpus=2, node_name="n1"), 3.0)
    assert len(watch.violations) == 1
    assert "b/b0" in watch.violations[0].detail  # named as on its way out
    # Once b0 is gone, a1 binding (parent 4 of 8, a 4 of 4) is fine.
    watch.pod_event("DELETED", pod("b", "b0", gpus=8, node_name="n0"), 4.0)
    watch.pod_event("ADDED", pod("a", "a1", gpus=2, node_name="n1"), 5.0)
    assert len(watch.violations) == 1


def test_a_bind_over_a_max_lowered_just_before_is_counted_not_failed() -> None:
    watch = observer()
    watch.pod_event("ADDED", pod("b", "b0", gpus=6, node_name="n0"), 1.0)
    # b's max lowered to 4 at t=10: b0 alone (6) is over it, and b1 binds at t=20, within
    # the 70 s grace: counted apart.  At t=100, past the grace, b2 binding is a violation.
    watch.set_quotas([quota("org", 8, 8), quota("a", 2, 4, "org"), quota("b", 0, 4, "org")], 10.0)
    watch.pod_event("ADDED", pod("b", "b1", gpus=1, node_name="n1"), 20.0)
    assert watch.violations == [] and watch.figures.over_max_after_edit == 1
    watch.pod_event("ADDED", pod("b", "b2", gpus=1, node_name="n1"), 100.0)
    assert [v.kind for v in watch.violations] == ["bound beyond a quota's max"]


def test_a_bind_right_after_the_soak_edits_a_quota_is_within_its_grace() -> None:
    watch = observer()
    watch.pod_event("ADDED", pod("a", "a0", gpus=4, node_name="n0"), 1.0)
    # The soak raises a's max at t=10 and notes it; Muster sees it first and binds a1
    # (a: 5 of the old max 4) before the observer reads the quotas: counted, not failed.
    watch.note_edit("a", 10.0)
    watch.pod_event("ADDED", pod("a", "a1", gpus=1, node_name="n0"), 10.5)
    assert watch.violations == [] and watch.figures.over_max_after_edit == 1


def test_marks_non_preemptible_and_two_jobs() -> None:
    watch = observer()
    watch.pod_event("ADDED", pod("b", "np", node_name="n0", preemptible=False), 1.0)
    watch.pod_event(
        "MODIFIED", pod("b", "np", node_name="n0", preemptible=False, mark_for="a/j"), 2.0
    )
    assert [v.kind for v in watch.violations] == ["non-preemptible victim"]
    watch.pod_event("ADDED", pod("b", "p", node_name="n0"), 3.0)
    watch.pod_event("MODIFIED", pod("b", "p", node_name="n0", mark_for="a/j"), 4.0)
    watch.pod_event("MODIFIED", pod("b", "p", node_name="n0", mark_for="a/j"), 5.0)  # same mark
    assert len(watch.violations) == 1
    # The mark changes from a/j to a/k without being taken back: marked by two jobs.
    watch.pod_event("MODIFIED", pod("b", "p", node_name="n0", mark_for="a/k"), 6.0)
    assert watch.violations[-1].kind == "pod marked by two jobs"
    # Taken back, then marked for a third job: not a violation, counted as re-marked.
    watch.pod_event("MODIFIED", pod("b", "p", node_name="n0"), 7.0)
    watch.pod_event("MODIFIED", pod("b", "p", node_name="n0", mark_for="a/m"), 8.0)
    assert len(watch.violations) == 2
    assert watch.figures.marks["uid-b-p"] == ["a/j", "a/k", "a/m"]
    assert watch.figures.remarked == 2  # j → k and k → m


def test_a_gang_partly_marked_fails_only_if_it_stays_so() -> None:
    watch = observer()
    for i in range(2):
        watch.pod_event("ADDED", pod("b", f"g{i}", group="g", node_name="n0"), 0.0)
    watch.pod_event("MODIFIED", pod("b", "g0", group="g", node_name="n0", mark_for="a/j"), 1.0)
    # g0 marked, g1 bound and unmarked: partial since t=1; within the 20 s grace at t=15.
    watch.scan(1.0)
    watch.scan(15.0)
    assert watch.violations == []
    watch.scan(21.0)  # 20 s after t=1
    assert [v.kind for v in watch.violations] == ["victim gang partly marked"]
    watch.scan(30.0)  # reported once
    assert len(watch.violations) == 1


def test_a_gang_marked_whole_then_leaving_is_not_partial() -> None:
    watch = observer()
    for i in range(2):
        watch.pod_event("ADDED", pod("b", f"g{i}", group="g", node_name="n0", mark_for="a/j"), 0.0)
    # g0 is evicted (terminating), g1 still marked and waiting: no unmarked pod.
    watch.pod_event(
        "MODIFIED", pod("b", "g0", group="g", node_name="n0", mark_for="a/j", deleting=True), 1.0
    )
    for at in (1.0, 30.0, 60.0):
        watch.scan(at)
    assert watch.violations == []


def test_a_relist_forgets_pods_deleted_while_the_watch_was_down() -> None:
    watch = observer()
    watch.pod_event("ADDED", pod("b", "b0", gpus=8, node_name="n0"), 0.0)
    watch.relist([pod("a", "a0", gpus=2, node_name="n1")], 5.0)
    # b0 is gone: the parent holds 2 of 8, nothing over.
    assert set(watch.state.pods) == {"a/a0"} and watch.violations == []


# ---- the end state, evictions, percentiles


def test_end_state() -> None:
    pods = [
        pod("a", "bound", node_name="n0"),
        pod("a", "why", group="w"),  # pending with a decision
        pod("a", "mute", group="m"),  # pending, nothing said
        pod("b", "held", mark_for="a/gone", node_name="n1"),  # marked for a job with no pods
    ]
    said = {"a/why": {"decisions": [{"outcome": "no preemption", "reasons": ["room for 1 of 2"]}]}}
    jobs = {
        "a/w": {"reservation": {"placements": {}}},  # w still has a pending pod: fine
        "a/x": {"reservation": {"placements": {}}},  # x has no pod: outlives its job
    }
    violations = end_state_violations(pods, said.get, jobs, 9.0)
    assert sorted(v.kind for v in violations) == [
        "mark outlives its job",
        "pending without a reason",
        "reservation outlives its job",
    ]
    assert [v.detail.split(":")[0] for v in violations if v.kind == "pending without a reason"] == [
        "a/mute"
    ]


def test_evictions_are_counted_from_the_audit_log() -> None:
    def event(name: str, code: int, stage: str = "ResponseComplete") -> str:
        ref = {"resource": "pods", "subresource": "eviction", "namespace": "b", "name": name}
        return json.dumps(
            {"stage": stage, "verb": "create", "objectRef": ref, "responseStatus": {"code": code}}
        )

    lines = [
        event("p", 201),
        event("p", 201, stage="ResponseStarted"),  # not a completed request
        event("q", 429),  # refused by a budget: not an eviction
        event("q", 201),
        event("q", 201),  # q evicted twice
        '{"truncated',  # a line cut short by a kill
    ]
    counts = evictions_in_audit(lines)
    assert counts == {"b/p": 1, "b/q": 2}
    assert [v.detail for v in double_evictions(counts, 0.0)] == ["b/q: 2 successful evictions"]


def test_a_job_left_suspended_or_with_the_restart_record_is_a_violation() -> None:
    def job(name: str, *, suspend: bool = False, record: bool = False) -> dict[str, object]:
        labels = {"muster.dev/restarting": "true"} if record else {}
        return {
            "metadata": {"name": name, "namespace": "soak", "labels": labels},
            "spec": {"suspend": suspend},
        }

    jobs = [job("done"), job("stuck", suspend=True, record=True), job("half", record=True)]
    assert [v.detail for v in jobs_left_suspended(jobs, 0.0)] == ["soak/stuck", "soak/half"]


def test_percentile_is_nearest_rank() -> None:
    # 10 values: p50 is the 5th (ceil(5.0)), p99 the 10th (ceil(9.9)).
    values = [float(v) for v in range(10, 0, -1)]
    assert percentile(values, 0.5) == 5.0 and percentile(values, 0.99) == 10.0
    assert percentile([], 0.5) is None


def two_teams() -> Observer:
    # A parent of 16 GPUs over two leaves: a (min 8, max 16) and b (min 4, max 16).
    watch = Observer(nodes=[node("n0"), node("n1")], partial_grace=20.0, edit_grace=70.0)
    quotas = [quota("org", 16, 16), quota("a", 8, 16, "org"), quota("b", 4, 16, "org")]
    watch.set_quotas(quotas, 0.0)
    return watch


def test_a_second_reclaim_that_takes_a_quota_below_its_min_is_caught() -> None:
    watch = two_teams()
    # b borrows 8 GPUs with b0 and b1 (4 each; min 4); a's jobs a/hi and a/lo are pending.
    watch.pod_event("ADDED", pod("b", "b0", gpus=4, node_name="n0"), 1.0)
    watch.pod_event("ADDED", pod("b", "b1", gpus=4, node_name="n0"), 1.0)
    watch.pod_event("ADDED", pod("a", "hi", gpus=4, group="hi"), 2.0)
    watch.pod_event("ADDED", pod("a", "lo", gpus=4, group="lo"), 2.0)
    # b1 marked for a/hi: once it is gone, b keeps 4 = its min.  Fine.
    watch.pod_event("MODIFIED", pod("b", "b1", gpus=4, node_name="n0", mark_for="a/hi"), 3.0)
    assert watch.violations == []
    # b0 marked for a/lo while b1 is still there (marked): with both gone b keeps 0 < 4.
    # The parent org holds both a and b: a reclaim between them leaves it as it was.
    watch.pod_event("MODIFIED", pod("b", "b0", gpus=4, node_name="n0", mark_for="a/lo"), 4.0)
    assert [v.kind for v in watch.violations] == ["quota taken below its min by reclaim"]
    assert "quota b keeps {'nvidia.com/gpu': 0}" in watch.violations[0].detail
    assert watch.figures.reclaims_checked == 2


def test_reclaims_within_min_within_a_quota_and_after_an_edit_are_not_violations() -> None:
    watch = two_teams()
    watch.pod_event("ADDED", pod("b", "b0", gpus=4, node_name="n0"), 1.0)
    watch.pod_event("ADDED", pod("b", "b1", gpus=8, node_name="n1"), 1.0)
    watch.pod_event("ADDED", pod("b", "own", gpus=8, group="own"), 2.0)
    watch.pod_event("ADDED", pod("a", "j", gpus=8, group="j"), 2.0)
    # b's own job preempts b1 inside b: b's usage is not reclaimed (the check is skipped).
    watch.pod_event("MODIFIED", pod("b", "b1", gpus=8, node_name="n1", mark_for="b/own"), 3.0)
    assert watch.violations == [] and watch.figures.reclaims_checked == 0
    # A gang given up (a mark naming no job) is not a reclaim either.
    watch.pod_event("ADDED", pod("b", "b2", gpus=1, node_name="n0"), 3.0)
    watch.pod_event("MODIFIED", pod("b", "b2", gpus=1, node_name="n0", mark_for=""), 3.5)
    assert watch.violations == []
    # b's min raised to 16 just now (an edit): b0 marked for a/j leaves b at 1 (b2 counts:
    # its mark names no job), below 16, but within the edit's grace: counted, not failed.
    quotas = [quota("org", 16, 16), quota("a", 8, 16, "org"), quota("b", 16, 16, "org")]
    watch.set_quotas(quotas, 4.0)
    watch.pod_event("MODIFIED", pod("b", "b0", gpus=4, node_name="n0", mark_for="a/j"), 5.0)
    assert watch.violations == [] and watch.figures.below_min_after_edit == 1


def test_gpu_seconds_count_each_hold_from_bind_to_finish_or_gone() -> None:
    # Derived by hand: a holds 2 GPUs from 10 to 30 s (40), b 1 GPU from 20 s on (until
    # 50 s: 30); a second sighting of a bound pod starts nothing new; a pending pod holds
    # nothing.  40 + 30 = 70.
    held = GpuSeconds()
    held.observe("a", 2, True, 10.0)
    held.observe("a", 2, True, 15.0)
    held.observe("b", 1, True, 20.0)
    held.observe("c", 4, False, 20.0)
    held.observe("a", 2, False, 30.0)
    assert held.total(50.0) == 70.0
    # a's end was not seen to succeed or fail (missed while the watch was down): it is
    # not counted as an eviction; b's failure at 50 is, and loses its 30 s on 1 GPU.
    assert held.evictions == 0
    held.observe("b", 1, False, 50.0, succeeded=False)
    assert (held.evictions, held.lost_gpu_seconds, held.young_evictions) == (1, 30.0, 1)


def test_a_terminating_pod_still_holds_its_gpus_and_a_finished_one_does_not() -> None:
    bound = {"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    assert holds_gpus(bound)
    assert not holds_gpus({"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}})
    assert not holds_gpus({"spec": {}, "status": {"phase": "Pending"}})
    requests = {"requests": {"nvidia.com/gpu": "2"}}
    two = {"spec": {"containers": [{"resources": requests}, {"resources": requests}]}}
    assert pod_gpus(two, "nvidia.com/gpu") == 4


def test_job_completion_figures_per_priority_class() -> None:
    # Three Jobs complete (60, 120 and 30 s from creation), one does not; 3 evictions.
    # By hand: soak-high has [60, 120] (nearest rank: p50 60, p95 120), soak-low [30].
    def job(name: str, seconds: int | None) -> dict[str, Any]:
        status: dict[str, Any] = {}
        if seconds is not None:
            status = {
                "completionTime": f"2026-01-01T10:{seconds // 60:02d}:{seconds % 60:02d}Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            }
        return {
            "metadata": {"name": name, "creationTimestamp": "2026-01-01T10:00:00Z"},
            "status": status,
        }

    priority = {"a": "soak-high", "b": "soak-high", "c": "soak-low", "d": "soak-low"}
    done = completed_jobs([job("a", 60), job("b", 120), job("c", 30), job("d", None)], priority)
    figures = job_completion_figures(done, evictions=3)
    assert figures["jobs completed"] == 3
    assert figures["job completion time p50/p95 (s), count, by priority class"] == {
        "soak-high": (60.0, 120.0, 2),
        "soak-low": (30.0, 30.0, 1),
    }
    assert figures["evictions per completed job"] == 1.0
