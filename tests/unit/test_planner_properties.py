"""Property tests of the planner over generated clusters (hypothesis).

For every generated cluster and preempting job, a committed plan:
never evicts a non-preemptible pod, a pod already marked, or a pod of the
preemptor's own job; never takes a reclaimed quota below its ``min``; leaves
room for *every* unplaced pod of the job where it says, with the job's quota
checks holding; and could spare no single victim group.  Plans are
deterministic.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Set as AbstractSet
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from base import keys
from base.resources import add_into, fits
from extender.core.placement.demand import job_demand
from extender.core.placement.fit import JobFit
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.state import ClusterState
from quota.admission import job_admission_failures, would_borrow
from tests.builders import node, pod, quota, snapshot

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"
QUOTAS = ["qa", "qb", "qc"]
# Permissive values are repeated so that generated jobs often do preempt.
POLICIES = {
    keys.RECLAIM_WITHIN_COHORT_ANNOTATION: ["Never", "LowerPriority", "Any", "Any"],
    keys.BORROW_WITHIN_COHORT_ANNOTATION: ["Never", "LowerPriority", "LowerPriority"],
    keys.WITHIN_QUOTA_ANNOTATION: ["Never", "LowerPriority", "LowerOrNewerEqualPriority"],
}


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Any], list[Any], list[Any], str]:
    node_count = draw(st.integers(1, 6))
    capacities = [draw(st.sampled_from([4, 8])) for _ in range(node_count)]
    nodes = [node(f"n{i}", gpu=gpu) for i, gpu in enumerate(capacities)]
    job_quota = draw(st.sampled_from(QUOTAS))
    quotas = []
    for name in QUOTAS:
        maximum = draw(st.integers(0, 48))
        minimum = draw(st.sampled_from([0, draw(st.integers(0, maximum))]))
        if name == job_quota and draw(st.booleans()):
            minimum = maximum = 48
        annotations = {key: draw(st.sampled_from(values)) for key, values in POLICIES.items()}
        quotas.append(
            quota(name, min={GPU: str(minimum)}, max={GPU: str(maximum)}, annotations=annotations)
        )
    free = list(capacities)
    pods = []
    for index in range(draw(st.integers(0, 20))):
        size = draw(st.integers(1, 4))
        gang = draw(st.integers(1, 2))
        group = f"g{index}" if gang > 1 else None
        placed = []
        for member in range(gang):
            spots = [i for i, room in enumerate(free) if room >= size]
            if not spots:
                break
            spot = draw(st.sampled_from(spots))
            free[spot] -= size
            placed.append(spot)
            labels = (
                {keys.SOFT_EVICTION_KEY: "true"}
                if draw(st.booleans()) and draw(st.booleans())
                else {}
            )
            minute = draw(st.integers(0, 59))
            pods.append(
                pod(
                    f"r{index}-{member}",
                    draw(st.sampled_from(QUOTAS))
                    if member == 0
                    else pods[-1]["metadata"]["namespace"],
                    gpu=size,
                    node=f"n{spot}",
                    group=group,
                    preemptible=draw(st.sampled_from([True, True, True, False])),
                    priority=draw(st.sampled_from([0, 5, 10])),
                    created=f"2026-01-01T10:{minute:02d}:00Z",
                    labels=labels,
                )
            )
    if draw(st.booleans()):  # fill the cluster up with single preemptible pods
        for spot, room in enumerate(free):
            for extra in range(room):
                pods.append(
                    pod(
                        f"fill-{spot}-{extra}",
                        draw(st.sampled_from(QUOTAS)),
                        gpu=1,
                        node=f"n{spot}",
                        preemptible=True,
                        priority=draw(st.sampled_from([0, 5])),
                    )
                )
    priority = draw(st.sampled_from([0, 5, 10, 10]))
    preemptible = draw(st.booleans())
    size = draw(st.integers(1, 4))
    for member in range(draw(st.integers(1, 3))):
        pods.append(
            pod(
                f"job-{member}",
                job_quota,
                gpu=size,
                group="job",
                preemptible=preemptible,
                can_preempt=True,
                priority=priority,
                created="2026-01-01T11:00:00Z",
            )
        )
    return nodes, pods, quotas, f"{job_quota}/job"


def build(
    case: tuple[list[Any], list[Any], list[Any], str], without: AbstractSet[str] = frozenset()
) -> ClusterState:
    nodes, pods, quotas, _ = case
    kept = [
        p for p in pods if f"{p['metadata']['namespace']}/{p['metadata']['name']}" not in without
    ]
    return snapshot(nodes, kept, quotas)


def job_fits(snap: ClusterState, job: str, within_min: bool = False) -> bool:
    """Does the whole job fit, with its quota checks holding (and, ``within_min``, its
    quota staying within its min: the job reclaimed from other quotas)?"""
    demand = job_demand(snap, job)
    fit = JobFit(snap, job, demand.unplaced)
    if within_min and would_borrow(snap.ledger, demand.quota, demand.request, demand.asks):
        return False
    return fit.fits() and not job_admission_failures(
        snap.ledger, demand.quota, demand.np_request, demand.p_request
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_committed_plans_are_safe_complete_and_minimal(case: Any) -> None:
    job = case[3]
    snap = build(case)
    decision = plan_job_preemption(snap, job, NOW)
    assert decision == plan_job_preemption(build(case), job, NOW)  # deterministic
    event("plan" if isinstance(decision, PreemptionPlan) else decision.reasons[0][:50])
    if not isinstance(decision, PreemptionPlan):
        return
    event(f"victim groups: {len({v.job for v in decision.victims})}")
    job_quota = decision.quota
    victims = {v.pod.key for v in decision.victims}
    for victim in decision.victims:
        current = snap.pods[victim.pod.key]
        assert snap.preemptible(current), victim
        assert not current.soft_evicted, victim
        assert victim.job != job
        assert current.node_name is not None

    # docs/design.md: pods already marked or leaving are gone for every rule a plan keeps, so
    # the plan is judged on the cluster without its victims and without them.
    gone = frozenset(p.key for p in snap.leaving())
    after = build(case, victims | gone)
    # reclaimed quotas keep at least their min
    for victim_quota in {v.quota for v in decision.victims if v.quota != job_quota}:
        spec = after.tree[victim_quota]
        used = after.ledger[victim_quota].used
        assert used.get(GPU, 0) >= spec.min.get(GPU, 0)

    # every unplaced pod has room where the plan put it, and the quota admits the job
    demand = job_demand(after, job)
    assert {p.key for p in demand.unplaced} == set(decision.placements)
    assert not job_admission_failures(
        after.ledger, demand.quota, demand.np_request, demand.p_request
    )
    by_node: dict[str, dict[str, int]] = defaultdict(dict)
    for pod_key, node_name in decision.placements.items():
        add_into(by_node[node_name], after.pods[pod_key].requests)
    for node_name, total in by_node.items():
        assert fits(total, after.free_on(node_name)), (node_name, total)

    # no victim group could be spared
    groups: dict[str, set[str]] = defaultdict(set)
    for victim in decision.victims:
        groups[victim.job].add(victim.pod.key)
    # A job that reclaims (reclaimWithinCohort) must end within its min (docs/design.md;
    # issue #13 rule 3): sparing a group that leaves it borrowing is not a valid plan.
    reclaims = any("reclaimWithinCohort" in victim.reason for victim in decision.victims)
    if reclaims:
        assert not would_borrow(after.ledger, demand.quota, demand.request, demand.asks)
    for members in groups.values():
        spared = build(case, (victims - members) | gone)
        assert not job_fits(spared, job, within_min=reclaims), f"{members} could be spared"
