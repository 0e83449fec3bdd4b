"""A gang whose size nobody declared is never bound in part (issue 23, item 2).

Without a PodGroup ``minMember`` or a min-available annotation, a gang is the pods
that exist.  A Job controller creates them one after another and kube-scheduler asks
about the first before the others exist, so the filter turns the gang away (one
stable reason, unresolvable: no eviction helps a gang still arriving) until no pod has
joined it for ``gangSettleSeconds`` (1 s by default); then it is decided whole.
"""

from __future__ import annotations

from extender.core import gangsize
from extender.core.effects import apply
from extender.core.filter import gangstatus, verb
from extender.core.objects import parse_pod
from extender.core.preemption.planner import Refusal, plan_job_preemption
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

T = 1_800_000_000.0
NODES = ["n1"]
JOB = "team-a/g"


def cluster(gpus: int = 16) -> ClusterState:
    return snapshot([node("n1", gpu=gpus)], [], [quota("team-a", max={"nvidia.com/gpu": "64"})])


def arrive(
    snap: ClusterState,
    index: int,
    at: float,
    *,
    preemptible: bool = True,
    can_preempt: bool | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    """Pod g-<index> of the gang is seen (created) at ``at``."""
    manifest = pod(
        f"g-{index}",
        gpu=8,
        group="g",
        preemptible=preemptible,
        can_preempt=can_preempt,
        annotations=annotations,
    )
    snap.upsert_pod(parse_pod(manifest), now=at)


def test_the_first_pod_waits_while_its_siblings_arrive() -> None:
    # One 16-GPU node, three 8-GPU pods created 0.2 s apart: room for two of three.
    snap = cluster()
    arrive(snap, 0, T)
    first = verb.filter_pod(snap, snap.pods["team-a/g-0"], NODES, as_extender=True, now=T + 0.05)
    assert not first.passed and first.unresolvable  # no eviction helps: unresolvable
    assert first.gang_waiting == gangsize.arriving_reason(snap, JOB)
    arrive(snap, 1, T + 0.2)
    arrive(snap, 2, T + 0.4)
    # 1.0 s after the first pod, but only 0.6 s after the last: still arriving, and the
    # reason is the same sentence (kube-scheduler rewrites a condition when it changes).
    again = verb.filter_pod(snap, snap.pods["team-a/g-0"], NODES, as_extender=True, now=T + 1.0)
    assert again.gang_waiting == first.gang_waiting
    # Settled (1 s after the last pod joined): a gang of three, of which two fit. docs/design.md:
    # "otherwise every pod of the job is rejected with one stable reason": none binds.
    settled = verb.filter_pod(snap, snap.pods["team-a/g-0"], NODES, as_extender=True, now=T + 1.5)
    assert not settled.passed
    assert settled.gang_waiting == "gang team-a/g: 2 of 3 pods fit; waiting for room for all 3"


def test_a_settled_gang_that_fits_is_placed_whole() -> None:
    snap = cluster(gpus=24)
    for index in range(3):
        arrive(snap, index, T + 0.2 * index)
    result = verb.filter_pod(snap, snap.pods["team-a/g-0"], NODES, as_extender=True, now=T + 1.5)
    assert result.gang_placed and result.passed == ["n1"]
    for effect in result.effects:
        apply(snap, effect)
    assert sorted(snap.reservations[JOB].placements) == [f"team-a/g-{i}" for i in range(3)]


def test_a_pod_not_seen_yet_has_just_joined() -> None:
    # kube-scheduler may ask about a pod before the informer delivers it: its gang has
    # just grown, whatever the state says of the others.
    snap = cluster(gpus=24)
    arrive(snap, 0, T)
    unseen = parse_pod(pod("g-1", gpu=8, group="g", preemptible=True))
    result = verb.filter_pod(snap, unseen, NODES, as_extender=True, now=T + 5)
    assert result.gang_waiting == gangsize.arriving_reason(snap, JOB)


def test_a_declared_size_needs_no_settling() -> None:
    # min-available 2 on the pods: decided as soon as two exist.
    snap = cluster(gpus=24)
    annotations = {"gang.scheduling.koordinator.sh/min-available": "2"}
    arrive(snap, 0, T, annotations=annotations)
    arrive(snap, 1, T + 0.1, annotations=annotations)
    result = verb.filter_pod(snap, snap.pods["team-a/g-0"], NODES, as_extender=True, now=T + 0.2)
    assert result.gang_placed


def test_a_non_preemptible_gang_beyond_its_min_is_not_admitted_pod_by_pod() -> None:
    # Quota min 16 GPUs; three non-preemptible 8-GPU pods (24 > 16).  One pod alone fits
    # the min, but the job is the three: docs/design.md, non-preemptible job:
    # npUsed + jobReq <= min, so once settled the quota turns the whole job away.
    snap = snapshot(
        [node("n1", gpu=32)], [], [quota("team-a", min={"nvidia.com/gpu": "16"}, max={})]
    )
    arrive(snap, 0, T, preemptible=False)
    early = verb.filter_pod(snap, snap.pods["team-a/g-0"], NODES, as_extender=True, now=T + 0.1)
    assert not early.passed
    arrive(snap, 1, T + 0.2, preemptible=False)
    arrive(snap, 2, T + 0.4, preemptible=False)
    late = verb.filter_pod(snap, snap.pods["team-a/g-0"], NODES, as_extender=True, now=T + 2)
    assert not late.passed
    assert late.quota_failures == (
        "quota team-a: non-preemptible nvidia.com/gpu 24 would exceed min 16",
    )


def test_parked_pods_are_nudged_once_the_gang_settled() -> None:
    snap = cluster()
    for index in range(3):
        arrive(snap, index, T + 0.2 * index)
    reason = gangsize.arriving_reason(snap, JOB)
    parked = {f"team-a/g-{i}": f"0/1 nodes are available: {reason}" for i in range(3)}
    assert gangstatus.parked_too_early(snap, parked, T + 1.0) == []
    assert gangstatus.parked_too_early(snap, parked, T + 1.5) == [f"team-a/g-{i}" for i in range(3)]
    assert gangsize.settled_gangs(snap, T + 1.0) == 0
    assert gangsize.settled_gangs(snap, T + 1.5) == 1


def test_the_planner_does_not_preempt_for_a_gang_still_arriving() -> None:
    snap = cluster()
    arrive(snap, 0, T, can_preempt=True)
    decided = plan_job_preemption(snap, JOB, T + 0.5)
    assert isinstance(decided, Refusal)
    assert decided.reasons == (gangsize.arriving_reason(snap, JOB),)
