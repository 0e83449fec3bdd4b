"""Notice before eviction (issue 34, item 2).

The rule (docs/quotas-and-preemption.md, "Notice before eviction"): a victim's pods may
declare ``muster.dev/preemption-notice-seconds``; the notice they get is that, capped by
their quota's ``muster.dev/max-preemption-notice-seconds``, else the argument
``maxPreemptionNoticeSeconds`` (0 by default: none).  The mark carries it; the evictor
evicts when it runs out, at once when the job answers (``muster.dev/checkpointed`` at or
after the mark), and not at all when the pod exits by itself.  The preemptor's
reservation lasts through the longest notice; a budget's refusal counts from the notice's
end.  Each expectation below is that arithmetic, by hand.
"""

from __future__ import annotations

import json
from typing import Any, cast

from base import keys
from extender.core.budgets import parse_pod_disruption_budget
from extender.core.config import MusterArgs
from extender.core.filter.admission import victims_still_there
from extender.core.marks import read_mark
from extender.core.notice import answered, notice_seconds
from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.settling import refused_victims
from extender.core.state import ClusterState
from extender.kube.client import KubeClient
from extender.kube.evictor import Evictor
from tests.builders import hold_plan, node, pod, quota, record_keys, signed, snapshot
from tests.unit.test_evictor import Clock, ScriptedClient, outcomes

GPU = "nvidia.com/gpu"
NOW = 1_767_268_800.0  # 2026-01-01T12:00:00Z


def cluster(*, declared: str | None, argument: float = 0.0, cap: str | None = None) -> ClusterState:
    """team-b's b-1 (8 GPUs, borrowed) on the one node, declaring ``declared`` seconds of
    notice; team-a's a-train (8 GPUs, within its min) reclaims it."""
    notes = {keys.PREEMPTION_NOTICE_ANNOTATION: declared} if declared is not None else {}
    caps = {keys.MAX_PREEMPTION_NOTICE_ANNOTATION: cap} if cap is not None else {}
    return snapshot(
        [node("n1", gpu=8)],
        [
            pod("b-1", "team-b", gpu=8, node="n1", preemptible=True, annotations=notes),
            pod("a-train", "team-a", gpu=8, can_preempt=True),
        ],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "8"}),
            quota("team-b", max={GPU: "8"}, annotations=caps),
        ],
        MusterArgs(maxPreemptionNoticeSeconds=argument, reservationTimeoutSeconds=300),
    )


def victim_notice(state: ClusterState) -> float:
    return notice_seconds(state, state.pods["team-b/b-1"])


def test_the_notice_is_what_the_job_declares_within_the_admins_caps() -> None:
    assert victim_notice(cluster(declared="600")) == 0  # the argument's default, 0: none
    assert victim_notice(cluster(declared="600", argument=120)) == 120  # capped
    assert victim_notice(cluster(declared="60", argument=120)) == 60  # as declared
    assert victim_notice(cluster(declared="600", argument=120, cap="300")) == 300  # quota's
    assert victim_notice(cluster(declared="600", argument=900, cap="0")) == 0
    assert victim_notice(cluster(declared=None, argument=120)) == 0  # declares none
    for nonsense in ("soon", "-5", "nan", "inf"):
        assert victim_notice(cluster(declared=nonsense, argument=120)) == 0


def test_the_plan_gives_the_notice_and_holds_the_room_through_it() -> None:
    # 90 s of notice (declared 90, argument 120): the victim's reason says so, and the
    # reservation lasts the timeout (300 s) plus the notice: until NOW + 390.
    state = cluster(declared="90", argument=120)
    plan = plan_job_preemption(state, "team-a/a-train", NOW)
    assert isinstance(plan, PreemptionPlan)
    (victim,) = plan.victims
    assert victim.notice_seconds == 90
    assert victim.reason.endswith("; 90s notice to save its work")
    assert plan.reservation(NOW, 300).expires == NOW + 390


def test_a_mark_carries_its_notice_and_a_bad_one_is_not_muster_s() -> None:
    mark = {"preemptor": "team-a/job", "timestamp": "2026-01-01T12:00:00Z", "noticeSeconds": 90}
    assert read_mark(json.dumps(mark)).notice_seconds == 90
    assert read_mark(json.dumps(mark)).well_formed
    for bad in (-1, "90", True, 10**9):
        assert not read_mark(json.dumps({**mark, "noticeSeconds": bad})).well_formed


def test_the_job_answers_with_a_checkpoint_at_or_after_the_mark() -> None:
    checkpointed = keys.CHECKPOINTED_ANNOTATION
    assert answered({checkpointed: "2026-01-01T12:00:00Z"}, NOW)
    assert answered({checkpointed: "2026-01-01T12:00:05Z"}, NOW)
    assert not answered({checkpointed: "2026-01-01T11:59:59Z"}, NOW)  # an older save
    assert not answered({checkpointed: "whenever"}, NOW)
    assert not answered({}, NOW)


def test_a_budget_s_refusal_counts_from_the_end_of_the_notice() -> None:
    # b-1, marked at NOW with 90 s of notice, under a budget allowing no disruption: at
    # NOW + 150 it has been refused for 60 s only, under victimEvictionDeadlineSeconds
    # (120); at NOW + 211, for 121 s: its plan is stuck.
    mark = {
        "initiator": "muster",
        "preemptor": "team-a/a-train",
        "reason": "test",
        "timestamp": "2026-01-01T12:00:00Z",
        "noticeSeconds": 90,
    }
    manifest = pod("b-1", "team-b", gpu=8, node="n1", preemptible=True, labels={"app": "b"})
    manifest["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    manifest["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = json.dumps(mark)
    state = snapshot([node("n1", gpu=8)], [manifest], [quota("team-b", max={GPU: "8"})])
    state.set_budget(
        parse_pod_disruption_budget(
            {
                "metadata": {"name": "b", "namespace": "team-b"},
                "spec": {"selector": {"matchLabels": {"app": "b"}}},
                "status": {"disruptionsAllowed": 0},
            }
        )
    )
    assert refused_victims(state, NOW + 150) == {}
    assert [p.key for p in refused_victims(state, NOW + 211)["team-a/a-train"]] == ["team-b/b-1"]


def test_a_victim_that_exits_on_notice_is_gone_for_its_preemptor() -> None:
    # The plan is held (its reservation names b-1); b-1 marked, then Succeeded: its job's
    # pods no longer wait for it.
    state = cluster(declared="90", argument=120)
    plan = plan_job_preemption(state, "team-a/a-train", NOW)
    assert isinstance(plan, PreemptionPlan)
    hold_plan(state, plan, NOW)
    assert victims_still_there(state, "team-a/a-train")
    exited = pod("b-1", "team-b", gpu=8, node="n1", preemptible=True)
    exited["status"]["phase"] = "Succeeded"
    state.upsert_pod(parse_pod(exited))
    assert not victims_still_there(state, "team-a/a-train")


# ---- the evictor ---------------------------------------------------------------------


def on_notice(
    name: str, uid: str, notice: float, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod marked at NOW with ``notice`` seconds of notice, as the evictor sees it."""
    mark = {
        "preemptor": "team-a/job",
        "timestamp": "2026-01-01T12:00:00Z",
        "noticeSeconds": notice,
        "deleteOptions": {"gracePeriodSeconds": None},
    }
    return {
        "metadata": {
            "name": name,
            "namespace": "team-b",
            "uid": uid,
            "labels": {keys.SOFT_EVICTION_KEY: "true"},
            "annotations": {
                keys.SOFT_EVICTION_KEY: signed(keys.SOFT_EVICTION_KEY, uid, mark),
                **(annotations or {}),
            },
        },
        "status": {"phase": "Running"},
    }


def evictor_at(clock: Clock, client: ScriptedClient) -> Evictor:
    return Evictor(
        cast(KubeClient, client), clock=clock, jitter=lambda: 0.5, record_keys=record_keys
    )


def test_the_evictor_waits_for_the_notice_to_run_out() -> None:
    clock, client = Clock(), ScriptedClient({})
    clock.now = NOW + 10
    made = evictor_at(clock, client)
    made._on_pod("ADDED", on_notice("b-0", "u0", 90))
    assert client.evictions == []  # 10 s into 90 s of notice
    clock.now = NOW + 89
    made.retry_due()
    assert client.evictions == []
    clock.now = NOW + 90
    made.retry_due()
    assert [name for name, _ in client.evictions] == ["b-0"]
    made.retry_due()
    assert len(client.evictions) == 1 and outcomes(made)["evicted"] == 1


def test_a_job_that_answers_is_evicted_at_once() -> None:
    clock, client = Clock(), ScriptedClient({})
    clock.now = NOW + 10
    made = evictor_at(clock, client)
    made._on_pod("ADDED", on_notice("b-0", "u0", 90))
    saved = {keys.CHECKPOINTED_ANNOTATION: "2026-01-01T12:00:08Z"}
    made._on_pod("MODIFIED", on_notice("b-0", "u0", 90, saved))
    assert [name for name, _ in client.evictions] == ["b-0"]
    # A checkpoint older than the mark is not an answer.
    stale = {keys.CHECKPOINTED_ANNOTATION: "2026-01-01T11:00:00Z"}
    made._on_pod("ADDED", on_notice("b-1", "u1", 90, stale))
    assert [name for name, _ in client.evictions] == ["b-0"]


def test_a_job_that_exits_on_notice_is_not_evicted() -> None:
    clock, client = Clock(), ScriptedClient({})
    clock.now = NOW + 10
    made = evictor_at(clock, client)
    made._on_pod("ADDED", on_notice("b-0", "u0", 90))
    exited = on_notice("b-0", "u0", 90)
    exited["status"]["phase"] = "Succeeded"
    made._on_pod("MODIFIED", exited)
    made._on_pod("MODIFIED", exited)
    clock.now = NOW + 200
    made.retry_due()
    assert client.evictions == []
    assert outcomes(made) == {"exited": 1}
