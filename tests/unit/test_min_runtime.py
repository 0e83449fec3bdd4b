"""Minimum runtime: a job admitted moments ago is not reclaimed (issue 34, item 3).

The rule (docs/quotas-and-preemption.md, "Minimum runtime"): a victim group of another
quota (reclaim, or borrowing across quotas) whose job was admitted less than its quota's
minimum runtime ago is spared.  Its admission is the earliest start among the pods that
would be evicted (a job cannot stay young by restarting pods); the minimum runtime is its
quota's ``muster.dev/min-runtime-seconds``, else the argument ``minRuntimeSeconds`` (0 by
default: no protection).  Priority preemption inside the job's own quota is untouched.

The cluster, worked by hand: two nodes of 8 GPUs; quota team-a (min 8, max 16) and
team-b (min 0, max 16, so every GPU it uses is borrowed).  team-b runs b-1 on n1 (started
10:00) and b-2 on n2 (started 11:00).  team-a's a-train asks for 8 GPUs and may preempt.
Without protection the victim is the most recently started borrower, b-2.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from base import keys
from base.errors import ManifestError
from extender.core.config import MusterArgs
from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState
from extender.core.whatif import run_simulation
from quota.tree import parse_elastic_quota
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
B2_STARTED = 1_767_265_200.0  # 2026-01-01T11:00:00Z
B1_STARTED = B2_STARTED - 3600  # 10:00
JOB = "team-a/a-train"


def cluster(
    *, argument: float = 0.0, annotation: str | None = None, b2_preemptible: bool = True
) -> ClusterState:
    notes = {keys.MIN_RUNTIME_ANNOTATION: annotation} if annotation is not None else {}
    return snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [
            pod(
                "b-1", "team-b", gpu=8, node="n1", preemptible=True, started="2026-01-01T10:00:00Z"
            ),
            pod(
                "b-2",
                "team-b",
                gpu=8,
                node="n2",
                preemptible=b2_preemptible,
                started="2026-01-01T11:00:00Z",
            ),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "16"}),
            quota("team-b", max={GPU: "16"}, annotations=notes),
        ],
        MusterArgs(minRuntimeSeconds=argument),
    )


def victims(decision: PreemptionPlan | Refusal) -> list[str]:
    assert isinstance(decision, PreemptionPlan), decision
    return [victim.pod.key for victim in decision.victims]


def test_without_a_minimum_the_newest_borrower_goes() -> None:
    assert victims(plan_job_preemption(cluster(), JOB, B2_STARTED + 60)) == ["team-b/b-2"]


def test_the_argument_spares_a_young_job_and_takes_an_older_one() -> None:
    # minRuntimeSeconds 1800: at 11:10, b-2 (started 11:00) is protected until 11:30, and
    # b-1 (started 10:00) is not: the plan takes b-1 instead.
    state = cluster(argument=1800)
    assert victims(plan_job_preemption(state, JOB, B2_STARTED + 600)) == ["team-b/b-1"]


def test_past_its_minimum_runtime_the_young_job_is_a_victim_again() -> None:
    # At 11:31 b-2 has run 31 minutes > 30: the usual order again (b-2, the newer).
    state = cluster(argument=1800)
    assert victims(plan_job_preemption(state, JOB, B2_STARTED + 1860)) == ["team-b/b-2"]


def test_when_every_borrower_is_young_the_job_waits_and_says_until_when() -> None:
    # minRuntimeSeconds 7200 at 11:10: b-1 is protected until 12:00, b-2 until 13:00.
    state = cluster(argument=7200)
    decision = plan_job_preemption(state, JOB, B2_STARTED + 600)
    assert isinstance(decision, Refusal)
    spared = [r for r in decision.reasons if r.startswith("spared for their minimum runtime")]
    assert spared == [
        "spared for their minimum runtime: team-b/b-1 until 2026-01-01T12:00:00Z "
        "(quota team-b); team-b/b-2 until 2026-01-01T13:00:00Z (quota team-b)"
    ]
    # The PostFilter plans again when the first protection ends: b-1's, at 12:00.
    assert decision.retry_at == B1_STARTED + 7200


def test_the_victims_quota_annotation_wins_over_the_argument() -> None:
    # team-b's own minimum, 0, lifts the argument's protection for its jobs: b-2 goes.
    state = cluster(argument=7200, annotation="0")
    assert victims(plan_job_preemption(state, JOB, B2_STARTED + 600)) == ["team-b/b-2"]
    # And a quota may protect its jobs when the argument does not.
    state = cluster(annotation="1800")
    assert victims(plan_job_preemption(state, JOB, B2_STARTED + 600)) == ["team-b/b-1"]


def test_priority_preemption_inside_a_quota_is_not_held_back() -> None:
    # One quota: a-low (priority 0, started 11:00) and a-high (priority 100) asking for 8
    # GPUs on the one node.  withinQuota LowerPriority evicts a-low, minimum or not.
    state = snapshot(
        [node("n1", gpu=8)],
        [
            pod(
                "a-low",
                gpu=8,
                node="n1",
                preemptible=True,
                priority=0,
                started="2026-01-01T11:00:00Z",
            ),
            pod("a-high", gpu=8, can_preempt=True, priority=100),
        ],
        [quota("team-a", min={GPU: "8"}, max={GPU: "8"})],
        MusterArgs(minRuntimeSeconds=7200),
    )
    assert victims(plan_job_preemption(state, "team-a/a-high", B2_STARTED + 60)) == ["team-a/a-low"]


def test_a_job_cannot_stay_young_by_restarting_one_pod() -> None:
    # A two-pod gang of team-b, one pod started at 10:00 and one restarted at 11:05: its
    # admission is 10:00, so under a 30-minute minimum it is not protected at 11:10.
    gang = {"pod-group.scheduling.sigs.k8s.io": "g"}
    state = snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [
            pod(
                "g-0",
                "team-b",
                gpu=8,
                node="n1",
                preemptible=True,
                labels=gang,
                started="2026-01-01T10:00:00Z",
            ),
            pod(
                "g-1",
                "team-b",
                gpu=8,
                node="n2",
                preemptible=True,
                labels=gang,
                started="2026-01-01T11:05:00Z",
            ),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "16"}),
            quota("team-b", max={GPU: "16"}),
        ],
        MusterArgs(minRuntimeSeconds=1800),
    )
    assert sorted(victims(plan_job_preemption(state, JOB, B2_STARTED + 600))) == [
        "team-b/g-0",
        "team-b/g-1",
    ]


@pytest.mark.parametrize("text", ["-1", "soon", "nan", "inf"])
def test_a_bad_annotation_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ManifestError) as error:
        parse_elastic_quota(quota("team-b", annotations={keys.MIN_RUNTIME_ANNOTATION: text}))
    assert error.value.field == f"metadata.annotations.{keys.MIN_RUNTIME_ANNOTATION}"


# ---- no admit → reclaim → re-admit loop ---------------------------------------------

MIN_RUNTIME = 100.0
T_START = B2_STARTED


def _stamp(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=3 * MIN_RUNTIME, allow_nan=False),
            st.sampled_from(["arrive-a", "arrive-b", "finish-a", "finish-b"]),
        ),
        min_size=1,
        max_size=14,
    )
)
def test_no_job_is_reclaimed_before_its_minimum_runtime(
    steps: list[tuple[float, str]],
) -> None:
    """Arrivals and departures of 4-GPU pods of team-a (guaranteed 8 of 16 GPUs) and team-b
    (borrowing), played through simulate as time passes; a pod that is reclaimed comes back
    (its controller re-creates it) and may be admitted again.  Whatever the sequence, every
    reclaim evicts a pod that has run at least the minimum runtime since it was admitted:
    so no job is admitted, reclaimed and re-admitted faster than once per minimum."""
    state = snapshot(
        [node("n1", gpu=8), node("n2", gpu=8)],
        [],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "16"}),
            quota("team-b", max={GPU: "16"}),
        ],
        MusterArgs(minRuntimeSeconds=MIN_RUNTIME),
    )
    now = T_START
    admitted: dict[str, float] = {}
    made = 0
    for wait, action in steps:
        now += wait
        team = "team-a" if action.endswith("-a") else "team-b"
        if action.startswith("arrive"):
            made += 1
            state.upsert_pod(
                parse_pod(
                    pod(
                        f"p{made}",
                        team,
                        gpu=4,
                        preemptible=team == "team-b",
                        can_preempt=team == "team-a",
                        created=_stamp(now),
                    )
                )
            )
        else:
            running = sorted(
                p.key for p in state.pods.values() if p.namespace == team and p.node_name
            )
            if running:
                state.remove_pod(running[0])
        result = run_simulation(state, now)
        for key in result.placements:
            admitted[key] = now
        for eviction in result.evictions:
            victim = eviction.pod
            assert victim.startswith("team-b/")  # team-a's pods are not preemptible
            assert now - admitted[victim] >= MIN_RUNTIME, (victim, admitted[victim], now)
            # Its controller re-creates it, pending, under a new name.
            made += 1
            state.upsert_pod(
                parse_pod(pod(f"p{made}", "team-b", gpu=4, preemptible=True, created=_stamp(now)))
            )
