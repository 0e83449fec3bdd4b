"""Elastic shrink: a victim job above its declared minimum gives up the extra pods first
(issue 34, item 4).

The rule (docs/quotas-and-preemption.md, "Elastic jobs shrink"): a job that declares a
minimum (its PodGroup's ``minMember``, the min-available annotation) below the pods it runs
gives up the pods above that minimum, one by one, before any whole job of its priority or above
goes, and keeps running; the pods shed are the highest completion indexes of an indexed
Job, else the newest.  A job that declares no minimum goes whole, as before.

The cluster, worked by hand: six 8-GPU nodes; quota team-a (min 24, max 48) and team-b
(min 0, so all it runs is borrowed).  team-b runs gang ``g`` (four 8-GPU pods on n1..n4,
started 10:00, 10:01, 10:02, 10:03) and the lone pod ``h`` on n5 (started 10:30); n6 is
empty.  team-a's gang ``train`` (three 8-GPU pods) takes n6 and needs two more nodes.
"""

from __future__ import annotations

from typing import Any

from base import keys
from extender.core.config import MusterArgs
from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0


def cluster(minimum: str | None, *, indexed: bool = False) -> ClusterState:
    gang = {keys.POD_GROUP_LABEL: "g"}
    notes: dict[str, str] = {}
    if minimum is not None:
        notes[keys.GANG_MIN_AVAILABLE_ANNOTATION] = minimum
    pods: list[dict[str, Any]] = []
    for i in range(4):
        annotations = dict(notes)
        if indexed:  # indexes run against start order: g-0 has the highest index, 3
            annotations[keys.COMPLETION_INDEX_ANNOTATION] = str(3 - i)
        pods.append(
            pod(
                f"g-{i}",
                "team-b",
                gpu=8,
                node=f"n{i + 1}",
                preemptible=True,
                labels=gang,
                annotations=annotations,
                started=f"2026-01-01T10:0{i}:00Z",
            )
        )
    pods.append(
        pod("h", "team-b", gpu=8, node="n5", preemptible=True, started="2026-01-01T10:30:00Z")
    )
    train = {keys.POD_GROUP_LABEL: "train"}
    pods += [pod(f"t-{i}", gpu=8, can_preempt=True, labels=train) for i in range(3)]
    return snapshot(
        [node(f"n{i}", gpu=8) for i in range(1, 7)],
        pods,
        [quota("team-a", min={GPU: "24"}, max={GPU: "48"}), quota("team-b", max={GPU: "48"})],
    )


def victims(state: ClusterState) -> list[str]:
    plan = plan_job_preemption(state, "team-a/train", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    return sorted(victim.pod.key for victim in plan.victims)


def test_a_job_declaring_no_minimum_goes_whole() -> None:
    # No minimum: g's minimum is all four pods.  The walk takes h (the least work lost,
    # started last), then g whole; minimising puts h back (g's four nodes hold the job):
    # the victims are g's four pods.
    assert victims(cluster(None)) == [f"team-b/g-{i}" for i in range(4)]


def test_an_elastic_job_sheds_its_newest_pods_and_keeps_running() -> None:
    # g declares a minimum of 2 of its 4: its two newest (g-3, g-2) go first, one group
    # each, before h or any whole job; the job needs two nodes: those are enough.
    state = cluster("2")
    assert state.victims.elastic() == {"team-b/g": 2}
    plan = plan_job_preemption(state, "team-a/train", NOON)
    assert isinstance(plan, PreemptionPlan)
    assert sorted(v.pod.key for v in plan.victims) == ["team-b/g-2", "team-b/g-3"]
    assert all("minimum of 2: the job keeps running" in v.reason for v in plan.victims)


def test_an_indexed_job_sheds_its_highest_indexes() -> None:
    # Indexes 3, 2, 1, 0 on g-0..g-3: the highest, 3 and 2, are g-0 and g-1.
    assert victims(cluster("2", indexed=True)) == ["team-b/g-0", "team-b/g-1"]


def test_past_its_minimum_the_rest_of_an_elastic_job_goes_whole() -> None:
    # A minimum of 3: one pod (g-3) can be shed; the job needs two nodes, so the walk goes
    # on: h, then what is left of g (three pods) as a whole.  Minimising puts back the
    # groups not needed: g-3 and h give the two nodes, and g keeps running on three.
    assert victims(cluster("3")) == ["team-b/g-3", "team-b/h"]


def test_a_minimum_at_or_above_the_running_pods_is_not_elastic() -> None:
    assert cluster("4").victims.elastic() == {}
    assert cluster("9").victims.elastic() == {}


def g_pod(i: int, *, started: str | None = None, priority: int | None = None, **notes: str) -> Any:
    """g's pod ``i`` (minimum 2) as :func:`cluster` makes it, with these changes."""
    return parse_pod(
        pod(
            f"g-{i}",
            "team-b",
            gpu=8,
            node=f"n{i + 1}",
            preemptible=True,
            priority=priority,
            labels={keys.POD_GROUP_LABEL: "g"},
            annotations={keys.GANG_MIN_AVAILABLE_ANNOTATION: "2", **notes},
            started=started or f"2026-01-01T10:0{i}:00Z",
        )
    )


def test_a_completion_index_a_tenant_writes_cannot_break_the_planner() -> None:
    # "²" is a digit to str.isdigit and not to int; 5,000 digits int refuses: both count
    # as no index, and the job sheds its newest pods as any other.
    for nonsense in ("²", "9" * 5000, "-3", "x"):
        state = cluster("2")
        for i in range(4):
            state.upsert_pod(g_pod(i, **{keys.COMPLETION_INDEX_ANNOTATION: nonsense}))
        assert victims(state) == ["team-b/g-2", "team-b/g-3"]


def test_pods_shed_are_as_old_as_their_job_for_the_minimum_runtime() -> None:
    # minRuntimeSeconds 3600 at noon: g's pods started 10:00-10:03, so the job was admitted
    # two hours ago and its extra pods may go; were each pod judged alone, g-2 and g-3
    # (restarted 30 minutes ago) would be spared and the whole job taken instead.
    state = cluster("2")
    for i in (2, 3):
        state.upsert_pod(g_pod(i, started="2026-01-01T11:30:00Z"))
    state.args = MusterArgs(minRuntimeSeconds=3600)
    assert victims(state) == ["team-b/g-2", "team-b/g-3"]


def test_a_lower_priority_job_goes_before_a_higher_priority_job_sheds() -> None:
    # g (priority 100, minimum 2) and h (priority 0): priority first.  The walk takes h
    # whole (one node), then, in g's priority, sheds g-3 (the second node): h and g-3 go,
    # and g keeps three pods.
    state = cluster("2")
    for i in range(4):
        state.upsert_pod(g_pod(i, priority=100))
    assert victims(state) == ["team-b/g-3", "team-b/h"]


def test_a_job_whose_rest_goes_loses_its_shed_pods_too() -> None:
    # (Found by the gang property test.)  One node of 8 CPUs.  team-b (min 0) runs gang g,
    # declaring a minimum of 2: g-0 and g-1 (1 CPU each) and g-2 (4 CPUs), started
    # together.  team-a (min 8) runs a-run (1 CPU, not preemptible); its a-new needs 3 CPUs,
    # and 1 is free.  The walk sheds g's one pod above its minimum first: the newest, and
    # with equal starts the first by name, g-0 (1 CPU: 2 free, short of 3); then g's unit,
    # what is left of it, g-1 and g-2 (7 free: a-new fits).  Minimising, the unit stays
    # (without it a-new does not fit); g-0 must go with it: spared, it would leave g
    # running one pod, below its minimum of 2.  So all three go, and no reason says g
    # keeps running.
    gang = {keys.POD_GROUP_LABEL: "g"}
    minimum = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "2"}
    started = "2026-01-01T10:00:00Z"
    pods = [
        *(
            pod(
                f"g-{i}",
                "team-b",
                cpu=cpu,
                node="n0",
                preemptible=True,
                labels=gang,
                annotations=minimum,
                started=started,
            )
            for i, cpu in enumerate(("1", "1", "4"))
        ),
        pod("a-run", "team-a", cpu="1", node="n0", started=started),
        pod("a-new", "team-a", cpu="3", can_preempt=True),
    ]
    state = snapshot(
        [node("n0", cpu="8")],
        pods,
        [
            quota("team-a", min={"cpu": "8"}, max={"cpu": "8"}),
            quota("team-b", min={"cpu": "0"}, max={"cpu": "8"}),
        ],
    )
    plan = plan_job_preemption(state, "team-a/a-new", NOON)
    assert isinstance(plan, PreemptionPlan), plan
    assert sorted(victim.pod.key for victim in plan.victims) == [
        "team-b/g-0",
        "team-b/g-1",
        "team-b/g-2",
    ]
    assert not any("keeps running" in victim.reason for victim in plan.victims)
