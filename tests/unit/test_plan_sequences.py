"""Plans made back to back, while earlier plans' victims are still leaving (issue 23,
item 4).

docs/design.md, Job-level preemption, step 2: "Pods already marked, or leaving, for another
job are gone for every rule here: they are never candidates, and their quota is judged
as it will be without them (two plans in a row keep every guarantee one plan keeps)."

So over generated clusters (a few nodes, two to four ElasticQuotas with GPU and
sometimes CPU bounds, running pods and gangs, preemptible or not) and a sequence of two
to four pending jobs planned one after another, each committed plan is applied twice:

- *in flight*: its reservation is held and its victims stay, each either only promised
  (named by the reservation), marked for soft eviction, or marked and terminating;
- *gone*: its reservation is held and its victims are deleted.

A few running pods are leaving before the first plan too (terminating, or marked by a
drain): present in the one state, deleted in the other.  Each job is planned on both.
Properties:

1. the decision in flight is the decision once the victims are gone (same victims,
   same placements, the same refusal);
2. no pod is a victim twice across the sequence;
3. another quota's pods are taken only from a quota borrowing (using more than its
   ``min``) in a resource the job asks for, judged once the earlier victims are gone,
   and never below its ``min`` in such a resource;
4. a job that reclaims ends within its own ``min``.

Every expectation is docs/design.md's, computed from the pods and quota specs, not read from
Muster's ledger.  The last tests pin down a case the property found (and that the
generator now avoids): a gang's pods with different priorities or starts, one of them
leaving alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from base.resources import PODS, add_into
from extender.core.objects import parse_pod
from extender.core.preemption.planner import (
    PreemptionPlan,
    Refusal,
    Victim,
    plan_job_preemption,
)
from extender.core.state import ClusterState
from tests.builders import LEAVING, hold_plan, leaving, node, pod, quota, snapshot
from tests.unit.test_planner_properties import POLICIES

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"
CPU = "cpu"
#: Requests of running pods: (GPUs, CPUs), a CPU of 0 meaning none asked.
RUNNING_SHAPES = [(1, 0), (2, 0), (4, 0), (1, 2), (2, 4), (0, 4), (0, 8), (8, 0)]
#: Requests of a pending job's pods.
JOB_SHAPES = [(1, 0), (2, 0), (4, 0), (2, 4), (4, 8), (0, 4), (1, 2)]


@dataclass(frozen=True)
class Case:
    nodes: list[dict[str, Any]]
    quotas: list[dict[str, Any]]
    pods: dict[str, dict[str, Any]]  # key → manifest
    jobs: list[str]  # planned in this order
    #: Running pods already on their way out before the first plan (terminating, or
    #: marked by a drain): leaving for every plan, as earlier victims are.
    leaving_at_start: frozenset[str]

    def build(self, without: Iterable[str] = ()) -> ClusterState:
        gone = set(without)
        return snapshot(self.nodes, [m for k, m in self.pods.items() if k not in gone], self.quotas)


@st.composite
def _bounds(
    draw: st.DrawFn, names_cpu: bool, reclaimer: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """A quota's ``min`` and ``max``: GPUs always, CPUs (when some quota names them)
    in ``min``, ``max``, both or neither.  A ``reclaimer`` (the quota most jobs use) is
    more often given a large ``min``; the others a small one."""
    maximum = draw(st.integers(4, 32))
    some = draw(st.integers(0, maximum))
    minimum = draw(st.sampled_from([maximum, some]) if reclaimer else st.integers(0, 8))
    low, high = {GPU: str(min(minimum, maximum))}, {GPU: str(maximum)}
    if names_cpu:
        cpu_max = draw(st.integers(0, 48))
        cpu_min = draw(st.integers(0, cpu_max if reclaimer else min(cpu_max, 8)))
        where = draw(st.sampled_from(["min", "max", "both", "neither"]))
        if where in ("min", "both"):
            low[CPU] = str(cpu_min)
        if where in ("max", "both"):
            high[CPU] = str(cpu_max)
    return low, high


def _requests(gpu: int, cpu: int) -> dict[str, int]:
    """Requests in the state's units (milli)."""
    return {name: 1000 * amount for name, amount in ((GPU, gpu), (CPU, cpu)) if amount}


@st.composite
def cases(draw: st.DrawFn) -> Case:
    node_count = draw(st.integers(1, 4))
    nodes = [
        node(f"n{i}", gpu=draw(st.sampled_from([4, 8, 8])), cpu=str(draw(st.sampled_from([8, 16]))))
        for i in range(node_count)
    ]
    free = [
        {
            GPU: 1000 * int(n["status"]["allocatable"][GPU]),
            CPU: 1000 * int(n["status"]["allocatable"][CPU]),
        }
        for n in nodes
    ]
    names = [f"q{i}" for i in range(draw(st.integers(2, 4)))]
    names_cpu = draw(st.booleans())
    quotas = []
    for name in names:
        low, high = draw(_bounds(names_cpu, reclaimer=name == names[-1]))
        annotations = (  # Muster's defaults half the time: reclaim Any, borrow Never
            {key: draw(st.sampled_from(values)) for key, values in POLICIES.items()}
            if draw(st.booleans())
            else {}
        )
        quotas.append(quota(name, min=low, max=high, annotations=annotations))

    # Running pods are more often in the first quotas and jobs in the last (the
    # reclaimer), so that some quotas borrow and others have their min to reclaim.
    running = [*names, *names[:-1]]
    preempting = [*names, names[-1], names[-1]]
    pods: dict[str, dict[str, Any]] = {}
    on_its_way_out: set[str] = set()
    for index in range(draw(st.integers(0, 12))):  # running groups: a pod, or a gang of 2
        members = draw(st.integers(1, 2))
        group = f"g{index}" if members > 1 else None
        namespace = draw(st.sampled_from(running))
        for member in range(members):
            # A gang's pods may differ in priority and start: a unit whose pod leaves
            # alone is judged by the pods that stay (see test_a_gang_member_leaving_alone).
            minute = draw(st.integers(0, 59))
            priority = draw(st.sampled_from([0, 0, 5, 10]))
            gpu, cpu = draw(st.sampled_from(RUNNING_SHAPES))
            need = _requests(gpu, cpu)
            spots = [i for i, room in enumerate(free) if all(room[k] >= v for k, v in need.items())]
            if not spots:
                break
            spot = draw(st.sampled_from(spots))
            for name, amount in need.items():
                free[spot][name] -= amount
            started = f"2026-01-01T10:{minute:02d}:00Z"
            manifest = pod(
                f"r{index}-{member}",
                namespace,
                gpu=gpu,
                cpu=str(cpu) if cpu else None,
                node=f"n{spot}",
                group=group,
                preemptible=draw(st.sampled_from([True, True, True, False])),
                priority=priority,
                created=started,
                started=started,
            )
            how = draw(st.sampled_from([None] * 14 + ["terminating", "drained"]))
            if how is not None:
                manifest = _on_its_way_out(manifest, how)
                on_its_way_out.add(f"{namespace}/r{index}-{member}")
            pods[f"{namespace}/r{index}-{member}"] = manifest
    if draw(st.sampled_from([True, True, True, False])):
        # Fill what is left of each node with single preemptible pods: 1 GPU and a share
        # of the CPUs each, then 2 CPUs each.
        for spot, room in enumerate(free):
            gpus = room[GPU] // 1000
            share = room[CPU] // 1000 // (2 * gpus) if gpus else 0
            shapes = [(1, share)] * gpus + [(0, 2)] * ((room[CPU] // 1000 - share * gpus) // 2)
            for extra, (gpu, cpu) in enumerate(shapes):
                namespace = draw(st.sampled_from(running))
                pods[f"{namespace}/fill-{spot}-{extra}"] = pod(
                    f"fill-{spot}-{extra}",
                    namespace,
                    gpu=gpu,
                    cpu=str(cpu) if cpu else None,
                    node=f"n{spot}",
                    preemptible=True,
                    priority=draw(st.sampled_from([0, 5])),
                )

    jobs = []
    for index in range(draw(st.integers(2, 4))):
        namespace = draw(st.sampled_from(preempting))
        gpu, cpu = draw(st.sampled_from(JOB_SHAPES))
        preemptible = draw(st.sampled_from([True, True, False]))
        priority = draw(st.sampled_from([0, 5, 10, 10, 10]))
        for member in range(draw(st.integers(1, 2))):
            pods[f"{namespace}/job{index}-{member}"] = pod(
                f"job{index}-{member}",
                namespace,
                gpu=gpu,
                cpu=str(cpu) if cpu else None,
                group=f"job{index}",
                preemptible=preemptible,
                can_preempt=True,
                priority=priority,
                created=f"2026-01-01T11:0{index}:00Z",
            )
        jobs.append(f"{namespace}/job{index}")
    return Case(nodes, quotas, pods, jobs, frozenset(on_its_way_out))


def _on_its_way_out(manifest: dict[str, Any], how: str) -> dict[str, Any]:
    """A running pod leaving for no plan: being deleted, or marked by a drain (a
    ``HoldAndDrain`` stop policy's mark names no preemptor)."""
    if how == "drained":
        return leaving(manifest, None, "marked")
    made = leaving(manifest, None, "promised")  # a copy
    made["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return made


def _used(snap: ClusterState, name: str) -> dict[str, int]:
    """What quota ``name`` uses, counted from the pods themselves: those bound and not
    finished, and the pending pods a reservation holds room for (a job whose plan was
    committed holds its quota until its pods bind: docs/design.md, step 6)."""
    used: dict[str, int] = {}
    for item in snap.pods.values():
        if item.namespace != name or item.finished:
            continue
        if item.node_name is not None or snap.reserved_node(item.key) is not None:
            add_into(used, item.requests)
    return used


def _contested(snap: ClusterState, job: str) -> frozenset[str]:
    """The resources the job's pending pods ask for that some quota names (docs/design.md: a
    resource no quota names is outside quota accounting; the pod count is no quota's)."""
    named = {name for spec in snap.tree.specs.values() for name in (*spec.min, *spec.max)}
    return frozenset(
        name
        for item in snap.members.job_pods(job)
        if item.node_name is None and snap.reserved_node(item.key) is None
        for name, amount in item.requests.items()
        if amount > 0 and name in named and name != PODS
    )


def _taken(victims: Iterable[Victim], name: str) -> dict[str, int]:
    """What the ``victims`` of quota ``name`` use."""
    taken: dict[str, int] = {}
    for victim in victims:
        if victim.quota == name:
            add_into(taken, victim.pod.requests)
    return taken


@settings(
    max_examples=int(os.environ.get("PLAN_SEQUENCE_EXAMPLES", 400)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(cases(), st.data())
def test_a_plan_made_while_earlier_victims_leave_decides_what_it_would_once_they_left(
    case: Case, data: st.DataObject
) -> None:
    in_flight = case.build()  # earlier plans' victims still there, leaving
    gone = case.build(without=case.leaving_at_start)  # and the leaving pods deleted
    evicted: set[str] = set()
    plans = 0
    for step, job in enumerate(case.jobs):
        decision = plan_job_preemption(in_flight, job, NOW)
        settled = plan_job_preemption(gone, job, NOW)
        # Property 1 (docs/design.md step 2: leaving pods "are gone for every rule here"): the
        # plan made while the earlier victims leave is the plan made once they left.
        assert decision == settled, (step, job, decision, settled)
        if isinstance(decision, Refusal):
            event(f"refused: {decision.reasons[0].split(':')[0][:30]}")
            continue
        plans += 1
        event("plan, with earlier victims leaving" if evicted else "plan")
        keys_ = [victim.pod.key for victim in decision.victims]
        # Property 2 (step 2: a pod marked or leaving for another job is never a
        # candidate; step 6: a victim is marked once): never a victim twice.
        assert len(keys_) == len(set(keys_)), keys_
        assert evicted.isdisjoint(keys_), (evicted & set(keys_), decision)

        # Property 3, judged where the earlier victims are gone (step 2: "their quota is
        # judged as it will be without them").
        contested = _contested(gone, job)
        for name in sorted({v.quota for v in decision.victims if v.quota != decision.quota}):
            before = _used(gone, name)
            minimum = gone.tree[name].min
            # Another quota's pods are candidates only if it borrows, "above its min in a
            # resource J contends for" (a resource absent from min is guaranteed nothing:
            # any use of it is beyond min).
            assert any(before.get(r, 0) > minimum.get(r, 0) for r in contested), (
                f"{name} does not borrow in {sorted(contested)}: uses {before}, min "
                f"{dict(minimum)}",
                decision,
            )
            # "Never push a victim's quota below its min in a resource J contends for"
            # (one already short of its min in a resource is not pushed below it there).
            # In a resource J does not ask for, such a victim is only "a last resort",
            # which this test does not judge (the oracle tests judge what exists).
            taken = _taken(decision.victims, name)
            for resource in sorted(contested):
                bound = minimum.get(resource, 0)
                if before.get(resource, 0) >= bound:
                    after = before.get(resource, 0) - taken.get(resource, 0)
                    assert after >= bound, (
                        f"{name} taken below its min {resource}: {before} - {taken} < {bound}",
                        decision,
                    )

        # Commit the plan to both states: the reservation on both; the victims leaving
        # (each as the draw says) on one, deleted on the other.
        for state in (in_flight, gone):
            hold_plan(state, decision, NOW)
        for key in keys_:
            how = data.draw(st.sampled_from(LEAVING), label=f"{key} leaving")
            if how != "promised":
                in_flight.upsert_pod(parse_pod(leaving(case.pods[key], decision.job, how)))
            gone.remove_pod(key)
        evicted.update(keys_)

        # Property 4 (step 2, KEP-83: "a plan that takes other quotas' pods by reclaim
        # must then end with J's quota within its min"): with its victims gone and its
        # pods holding their room, the job's quota uses at most its min in what it asks.
        if any("reclaimWithinCohort" in victim.reason for victim in decision.victims):
            used = _used(gone, decision.quota)
            minimum = gone.tree[decision.quota].min
            for resource in sorted(contested):
                assert used.get(resource, 0) <= minimum.get(resource, 0), (
                    f"{decision.quota} borrows {resource} after reclaiming: {used}",
                    decision,
                )
    event(f"plans in the sequence: {plans}")


# ---- a gang member leaving alone ------------------------------------------------------
#
# One pod of a running gang is terminating (deleted by someone, in its grace period); the
# gang's other pod stays.  docs/design.md step 2: a pod leaving is gone for every rule, so the
# gang is, for the plan, its staying pod alone: the victim order (step 3, "lower priority
# first, most recently started first") and the policies' priority bounds read that pod's
# priority and start, not the leaving one's.  The planner reads them off its victim unit,
# which still holds the leaving pod, so a plan made while the pod terminates differs from
# the plan made a moment later, once it is gone.

T10 = "2026-01-01T10:00:00Z"


def _gang_member_leaving(
    *, leaving_priority: int, leaving_start: str, others: list[dict[str, Any]], gpus: int
) -> tuple[ClusterState, ClusterState]:
    """The cluster with g-0 terminating, and the same once g-0 is gone."""
    team = [quota("team-a", min={GPU: "8"}, max={GPU: "8"})]
    g0 = pod(
        "g-0",
        gpu=2,
        node="n0",
        group="g",
        preemptible=True,
        priority=leaving_priority,
        created="2026-01-01T10:00:00Z",
        started=leaving_start,
    )
    g0["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    g1 = pod("g-1", gpu=2, node="n0", group="g", preemptible=True, priority=0, started=T10)
    job = pod("t-0", gpu=4, preemptible=False, can_preempt=True, priority=5)
    cluster = [node("n0", gpu=gpus)]
    return (
        snapshot(cluster, [g0, g1, *others, job], team),
        snapshot(cluster, [g1, *others, job], team),
    )


def _priority_case() -> tuple[ClusterState, ClusterState]:
    # n0 (4 GPUs) holds g-0 (priority 9, terminating) and g-1 (priority 0), 2 GPUs each.
    # team-a/t-0 (priority 5, 4 GPUs, non-preemptible) needs n0 whole.  team-a's quota
    # (min = max = 8) admits it: non-preemptible 0 + 4 <= min 8, used 2 + 4 <= max 8.
    # Once g-0 is gone, g is g-1 alone, priority 0 < 5: withinQuota LowerPriority (the
    # default) allows it, and evicting it frees n0 whole.  So the plan: evict g-1, place
    # t-0 on n0.
    return _gang_member_leaving(leaving_priority=9, leaving_start=T10, others=[], gpus=4)


def _order_case() -> tuple[ClusterState, ClusterState]:
    # n0 (6 GPUs) holds g-0 (started 10:30, terminating), g-1 (started 10:00) and a lone
    # pod s (started 10:15), 2 GPUs each, priority 0.  t-0 needs 4 GPUs: g-0's 2 and 2
    # more.  Once g-0 is gone, g's latest start is g-1's, 10:00, so s (10:15) is the
    # most recently started (step 3) and goes first; it suffices, and minimising keeps it
    # (the last group taken is needed).  So the plan: evict s.
    lone = pod("s", gpu=2, node="n0", preemptible=True, priority=0, started="2026-01-01T10:15:00Z")
    return _gang_member_leaving(
        leaving_priority=0, leaving_start="2026-01-01T10:30:00Z", others=[lone], gpus=6
    )


CASES = {"priority bound": (_priority_case, ["team-a/g-1"]), "order": (_order_case, ["team-a/s"])}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_gang_member_once_gone_leaves_the_rest_of_its_gang_judged_alone(name: str) -> None:
    build, expected = CASES[name]
    _, gone = build()
    decision = plan_job_preemption(gone, "team-a/t-0", NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert [v.pod.key for v in decision.victims] == expected
    assert decision.placements == {"team-a/t-0": "n0"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_gang_member_leaving_alone_leaves_its_unit_judged_by_the_pods_that_stay(
    name: str,
) -> None:
    # The bug the property test found (its unit kept the leaving pod's priority and
    # start, extender/core/preemption/walk.py settled_units now re-keys it): planning with
    # the pod still terminating decides what planning after it is gone decides.
    build, expected = CASES[name]
    in_flight, gone = build()
    decision = plan_job_preemption(in_flight, "team-a/t-0", NOW)
    assert decision == plan_job_preemption(gone, "team-a/t-0", NOW), decision
    assert isinstance(decision, PreemptionPlan)
    assert [v.pod.key for v in decision.victims] == expected


def _own_gang_member_leaving() -> tuple[ClusterState, ClusterState]:
    """The cluster with team-a's g-0 terminating, and the same once it is gone.

    n0 (4 GPUs) holds team-b's b (2 GPUs, priority 5; team-b's min is 0, so it borrows)
    and team-a's gang g: g-1 (2 GPUs, priority 0) and g-0 (2 CPUs, priority 9,
    terminating); n1 (4 GPUs) holds team-a's x (4 GPUs, not preemptible).  team-a (min =
    max = 8) sends t-0 (2 GPUs, priority 10, not preemptible)."""
    teams = [
        quota("team-a", min={GPU: "8"}, max={GPU: "8"}),
        quota("team-b", min={GPU: "0"}, max={GPU: "8"}),
    ]
    g0 = pod("g-0", cpu="2", node="n0", group="g", preemptible=True, priority=9, started=T10)
    g0["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    staying = [
        pod("g-1", gpu=2, node="n0", group="g", preemptible=True, priority=0, started=T10),
        pod("b", "team-b", gpu=2, node="n0", preemptible=True, priority=5, started=T10),
        pod("x", gpu=4, node="n1", preemptible=False, started=T10),
        pod("t-0", gpu=2, preemptible=False, can_preempt=True, priority=10),
    ]
    cluster = [node("n0", gpu=4), node("n1", gpu=4)]
    return snapshot(cluster, [g0, *staying], teams), snapshot(cluster, staying, teams)


def test_the_search_below_a_borrowers_priority_reads_own_units_as_they_stay() -> None:
    # The property found it: priority before quota compared the borrower's victim with
    # the lowest priority of the job's own units as the index keys them, all their pods
    # counted, so g (priority 9 while g-0 terminates) hid g-1 (priority 0).  Derived by
    # hand: team-a uses g-1 2 + x 4 = 6 once g-0 is gone, + t-0's 2 = 8 <= its min 8, so
    # t-0 reclaims; only n0 can make room (2 GPUs: b or g-1).  The walk takes other quotas
    # first: b (priority 5).  team-a's own g is g-1 alone, priority 0 < 5: the search
    # below 5 finds evicting g-1, whose highest victim priority is lower: it is the plan,
    # while g-0 terminates as once it is gone.
    in_flight, gone = _own_gang_member_leaving()
    decision = plan_job_preemption(in_flight, "team-a/t-0", NOW)
    assert decision == plan_job_preemption(gone, "team-a/t-0", NOW), decision
    assert isinstance(decision, PreemptionPlan)
    assert [v.pod.key for v in decision.victims] == ["team-a/g-1"]
    assert decision.placements == {"team-a/t-0": "n0"}
