"""An elastic job running its minimum grows into free room only (issue 34, items 1 and 4).

The rule (docs/quotas-and-preemption.md, "Elastic jobs shrink"): a job that declares a
minimum (its PodGroup's ``minMember``, the min-available annotation) and runs at least
that many pods evicts no one for its other pods when they would keep its quota past its
``min``: they wait for free room, as the pods an elastic victim shed do.  Within its
quota's ``min`` it reclaims for them as any job, and below its minimum it preempts for its
pods as any gang.

The cluster, worked by hand: three 8-GPU nodes, all busy.  team-a's gang ``train``
(three 8-GPU pods, priority 100, minimum ``minimum``) runs ``running`` of them on n1 (and
n2); the last node is held by ``b`` (8 GPUs, preemptible): team-b's, borrowing (team-b's
min is 0), or, beyond team-a's min, team-a's own at priority 0, which withinQuota
LowerPriority (the default) lets train take.  With running pods on n1 and n2 only, ``c``
(like ``b``) holds n2 when train runs one.
"""

from __future__ import annotations

from typing import Any

from base import keys
from extender.core.podgroups import parse_scheduler_plugins_pod_group
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0


def cluster(minimum: str | None, running: int, *, team_a_min: int = 24) -> ClusterState:
    """team-a's max is 24 (the cluster); its min ``team_a_min``: 24 covers the cluster, and
    b and c are team-b's borrowers; below that they are team-a's own low-priority pods."""
    notes = {keys.GANG_MIN_AVAILABLE_ANNOTATION: minimum} if minimum is not None else {}
    gang = {keys.POD_GROUP_LABEL: "train"}
    pods: list[dict[str, Any]] = []
    for i in range(3):
        where = {"node": f"n{i + 1}", "started": "2026-01-01T11:00:00Z"} if i < running else {}
        pods.append(
            pod(
                f"t-{i}",
                gpu=8,
                can_preempt=True,
                preemptible=True,
                priority=100,
                labels=gang,
                annotations=notes,
                **where,
            )
        )
    owner = "team-b" if team_a_min == 24 else "team-a"
    holders = [("b", "n3")] + ([("c", "n2")] if running == 1 else [])
    for name, where in holders:
        pods.append(
            pod(
                name,
                owner,
                gpu=8,
                node=where,
                preemptible=True,
                priority=0,
                started="2026-01-01T11:30:00Z",
            )
        )
    return snapshot(
        [node(f"n{i}", gpu=8) for i in range(1, 4)],
        pods,
        [
            quota("team-a", min={GPU: str(team_a_min)}, max={GPU: "24"}),
            quota("team-b", max={GPU: "24"}),
        ],
    )


def test_a_job_running_its_minimum_evicts_no_one_for_pods_past_its_quotas_min() -> None:
    # team-a's min 8: minimum 2, two running (n1, n2), b (team-a's, priority 0) on n3.
    # t-2 fits max 24 only without b (24 + 8 > 24), and priority would let it take b, but
    # it keeps team-a past its min (24 > 8) and train runs its minimum: t-2 waits.
    refusal = plan_job_preemption(cluster("2", running=2, team_a_min=8), "team-a/train", NOON)
    assert isinstance(refusal, Refusal)
    assert refusal.reasons == (
        "the job runs 2 pods, at least the minimum of 2 it declares, and its other pods "
        "would take quota team-a past its min: they wait for free room, and no one is "
        "evicted for them",
    )


def test_a_job_declaring_no_minimum_takes_lower_priority_work_past_its_min() -> None:
    # The control of the test above: without a minimum the gang is all three pods, so
    # t-2 takes b by withinQuota LowerPriority (priority 0 < 100).
    plan = plan_job_preemption(cluster(None, running=2, team_a_min=8), "team-a/train", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-a/b"]


def test_within_its_quotas_min_a_job_running_its_minimum_reclaims() -> None:
    # team-a's min 24: two of train run (16), t-2 takes team-a to 24 ≤ 24, within its
    # min: it reclaims team-b's borrowing b as any job would.
    plan = plan_job_preemption(cluster("2", running=2), "team-a/train", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    assert [victim.pod.key for victim in plan.victims] == ["team-b/b"]


def test_below_its_minimum_it_preempts_as_any_gang() -> None:
    # Minimum 2, one running (n1), team-a's min 8: b (n3) and c (n2), team-a's priority-0
    # pods, hold the nodes t-1 and t-2 need; priority lets train take both (24 ≤ max 24).
    plan = plan_job_preemption(cluster("2", running=1, team_a_min=8), "team-a/train", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    assert sorted(victim.pod.key for victim in plan.victims) == ["team-a/b", "team-a/c"]


def test_a_job_short_of_its_min_resources_has_not_reached_its_minimum() -> None:
    # The Spark shape (README "Gangs declared by minResources"): minMember 1, but the
    # PodGroup's minResources is 24 GPUs.  Four 8-GPU nodes; team-a (min = max = 24) runs
    # the driver (no GPU) and exec-0 on n0; team-b borrows n1..n3.  Two pods run, past
    # minMember, but they use 8 of the 24 GPUs the job was admitted for: it is short of
    # its minimum, so exec-1 reclaims one borrowed node (team-a: 24 ≤ min 24).
    spark = {keys.POD_GROUP_LABEL: "spark"}
    running = {"started": "2026-01-01T11:00:00Z", "can_preempt": True, "labels": spark}
    snap = snapshot(
        [node(f"n{i}", gpu=8) for i in range(4)],
        [
            pod("driver", cpu="1", node="n0", **running),
            pod("exec-0", gpu=8, cpu="1", node="n0", **running),
            pod("exec-1", gpu=8, cpu="1", can_preempt=True, labels=spark),
            *(pod(f"b{i}", "team-b", gpu=8, node=f"n{i}", preemptible=True) for i in range(1, 4)),
        ],
        [quota("team-a", min={GPU: "24"}, max={GPU: "24"}), quota("team-b", max={GPU: "24"})],
    )
    snap.set_pod_group(
        parse_scheduler_plugins_pod_group(
            {
                "metadata": {"name": "spark", "namespace": "team-a"},
                "spec": {"minMember": 1, "minResources": {GPU: "24", "cpu": "4"}},
            }
        )
    )
    plan = plan_job_preemption(snap, "team-a/spark", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    assert len(plan.victims) == 1 and plan.victims[0].pod.namespace == "team-b", plan.victims
