"""A Job's pods that form a pod group take their gang size from the Job (issue 24, item 2).

When no PodGroup ``minMember`` and no min-available annotation declares a gang's size,
the batch/v1 Job owning its pods does: ``parallelism``, capped by the completions still
to go (``completions - status.succeeded``).  Derived by hand from that rule: a 4-pod Job
gang whose first pod is seen alone is "waiting for 3 more pods" at once (no settle wait,
the size is known), and binds only once four exist.  One 32-GPU node; pods of 8 GPUs.
"""

from __future__ import annotations

from typing import Any

import pytest

from base.errors import ManifestError
from extender.core import gangsize
from extender.core.filter import verb
from extender.core.jobs import OwnerSize, parse_owner_size
from extender.core.objects import parse_pod
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

T = 1_800_000_000.0
NODES = ["n1"]
JOB = "team-a/train"


def job(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": spec,
        "status": status or {},
    }


@pytest.mark.parametrize(
    ("spec", "status", "size"),
    [
        ({"parallelism": 4, "completions": 4}, {}, 4),
        ({"parallelism": 4, "completions": 10}, {"succeeded": 8}, 2),  # 2 still to go
        ({"parallelism": 4}, {"succeeded": 3}, 4),  # no completions: every pod at once
        ({}, {}, 1),  # parallelism defaults to 1
        ({"parallelism": 4, "completions": 4}, {"succeeded": 4}, None),  # done
        ({"parallelism": 0}, {}, None),  # paused
    ],
)
def test_a_jobs_size_is_parallelism_capped_by_the_completions_to_go(
    spec: dict[str, Any], status: dict[str, Any], size: int | None
) -> None:
    assert parse_owner_size("Job", job(spec, status)) == OwnerSize("team-a", "Job/train", size)


@pytest.mark.parametrize(
    ("spec", "status", "field"),
    [
        ({"parallelism": "4"}, {}, "spec.parallelism"),
        ({"parallelism": 2, "completions": -1}, {}, "spec.completions"),
        ({"parallelism": True}, {}, "spec.parallelism"),
        ({"parallelism": 2}, {"succeeded": 1.5}, "status.succeeded"),
    ],
)
def test_a_malformed_job_is_refused_naming_the_field(
    spec: dict[str, Any], status: dict[str, Any], field: str
) -> None:
    with pytest.raises(ManifestError) as error:
        parse_owner_size("Job", job(spec, status))
    assert error.value.field == field


def trainer(index: int, *, owner: str | None = "train", group: str | None = "train") -> Any:
    made = pod(f"train-{index}", gpu=8, group=group, preemptible=True, can_preempt=True)
    if owner is not None:
        made["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "j", "controller": True}
        ]
    return parse_pod(made)


def cluster(parallelism: int = 4) -> ClusterState:
    snap = snapshot([node("n1", gpu=32)], [], [quota("team-a", max={"nvidia.com/gpu": "64"})])
    snap.declarations.set_owner_size(parse_owner_size("Job", job({"parallelism": parallelism})))
    return snap


def test_the_first_pod_of_a_job_gang_waits_for_the_jobs_parallelism_not_a_settle() -> None:
    snap = cluster()
    first = trainer(0)
    snap.upsert_pod(first, now=T)
    assert gangsize.size_declared(snap, first) and gangsize.gang_size(snap, first) == 4
    assert not gangsize.still_arriving(snap, first, T + 0.01)
    result = verb.filter_pod(snap, first, NODES, as_extender=True, now=T + 0.01)
    assert not result.passed
    assert result.gang_waiting is not None and "waiting for 3 more pods" in result.gang_waiting
    for index in (1, 2, 3):
        snap.upsert_pod(trainer(index), now=T + 0.1 * index)
    # Four 8-GPU pods on one 32-GPU node: the whole gang fits, decided at once.
    whole = verb.filter_pod(snap, snap.pods["team-a/train-0"], NODES, as_extender=True, now=T + 0.5)
    assert whole.passed == ["n1"]
    assert snap.declarations.min_available(JOB) == 4


def test_an_annotation_or_pod_group_declares_before_the_job_and_bare_pods_are_unaffected() -> None:
    snap = cluster(parallelism=4)
    annotated = pod(
        "train-0",
        gpu=8,
        group="train",
        annotations={"gang.scheduling.koordinator.sh/min-available": "2"},
    )
    annotated["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j", "controller": True}
    ]
    first = parse_pod(annotated)
    assert gangsize.gang_size(snap, first) == 2  # the annotation comes first
    # A Job's pod with no pod-group name is a job of its own: the Job's size is not its.
    lone = trainer(5, group=None)
    assert snap.declarations.owner_size(lone) is None and gangsize.gang_size(snap, lone) == 1


def test_a_deleted_job_no_longer_declares_a_size() -> None:
    snap = cluster()
    first = trainer(0)
    snap.upsert_pod(first, now=T)
    snap.forget_owner("team-a", "Job/train")
    assert not gangsize.size_declared(snap, first)


def owned(name: str, kind: str, owner: str, labels: dict[str, str] | None = None) -> Any:
    made = pod(name, gpu=8, preemptible=True, labels=labels)
    made["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": "u", "controller": True}
    ]
    return parse_pod(made)


ALL_OR_NOTHING = {"muster.dev/all-or-nothing": "true"}


def test_an_all_or_nothing_controllers_pods_are_one_gang_named_after_it() -> None:
    # docs/design.md via the README's "Jobs and other controllers": with no pod-group name, the
    # all-or-nothing label makes a controller's pods one job named after the controller.
    a = owned("train-0", "Job", "train", ALL_OR_NOTHING)
    b = owned("train-1", "Job", "train", ALL_OR_NOTHING)
    assert a.group == b.group == "train" and a.job == b.job == JOB
    # Without the label: each pod is a job of its own (a plain Job's pods bind one by one).
    plain = owned("train-2", "Job", "train")
    assert plain.group is None and plain.job == "team-a/train-2"
    # On a pod no controller owns, the label names no group.
    bare = parse_pod(pod("solo", labels=ALL_OR_NOTHING))
    assert bare.group is None and bare.job == "team-a/solo"
    # A pod-group name says otherwise, and wins.
    named = owned(
        "train-3", "Job", "train", {**ALL_OR_NOTHING, "scheduling.x-k8s.io/pod-group": "g"}
    )
    assert named.job == "team-a/g"
    # Any other value is not a yes.
    assert owned("train-4", "Job", "train", {"muster.dev/all-or-nothing": "yes"}).group is None


def replica_set(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": "web", "namespace": "team-a"}, "spec": spec}


@pytest.mark.parametrize("kind", ["ReplicaSet", "StatefulSet"])
def test_a_replica_sets_and_a_stateful_sets_size_is_replicas(kind: str) -> None:
    assert parse_owner_size(kind, replica_set(kind, {"replicas": 3})).size == 3
    assert parse_owner_size(kind, replica_set(kind, {})).size == 1  # replicas defaults to 1
    assert parse_owner_size(kind, replica_set(kind, {"replicas": 0})).size is None  # scaled down
    with pytest.raises(ManifestError) as error:
        parse_owner_size(kind, replica_set(kind, {"replicas": "3"}))
    assert error.value.field == "spec.replicas"


def test_an_unknown_owner_kind_is_refused_naming_the_kind() -> None:
    with pytest.raises(ManifestError) as error:
        parse_owner_size("DaemonSet", replica_set("DaemonSet", {}))
    assert error.value.field == "kind"


def test_an_all_or_nothing_stateful_set_waits_for_all_its_replicas() -> None:
    # Three replicas of 8 GPUs on one 16-GPU node: never all at once.  Sized by replicas
    # (3), the first pod waits for the two others, and with all three there, the whole
    # gang does not fit one 16-GPU node: no pod passes (none is bound in part).
    snap = snapshot([node("n1", gpu=16)], [], [quota("team-a", max={"nvidia.com/gpu": "64"})])
    snap.declarations.set_owner_size(
        parse_owner_size("StatefulSet", replica_set("StatefulSet", {"replicas": 3}))
    )
    first = owned("web-0", "StatefulSet", "web", ALL_OR_NOTHING)
    snap.upsert_pod(first, now=T)
    assert gangsize.gang_size(snap, first) == 3
    waiting = verb.filter_pod(snap, first, NODES, as_extender=True, now=T + 0.01)
    assert not waiting.passed and waiting.gang_waiting is not None
    assert "waiting for 2 more pods" in waiting.gang_waiting
    for index in (1, 2):
        snap.upsert_pod(owned(f"web-{index}", "StatefulSet", "web", ALL_OR_NOTHING), now=T + index)
    whole = verb.filter_pod(snap, snap.pods["team-a/web-0"], NODES, as_extender=True, now=T + 3)
    assert whole.passed == []


def elastic_trainer(index: int, minimum: str) -> Any:
    made = pod(
        f"train-{index}",
        gpu=8,
        group="train",
        preemptible=True,
        annotations={"gang.scheduling.koordinator.sh/min-available": minimum},
    )
    made["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j", "controller": True}
    ]
    return parse_pod(made)


def test_a_declared_minimum_above_what_the_job_still_runs_is_capped_by_it() -> None:
    # An elastic Job of 4 pods declaring a minimum of 2, with 3 of its 4 completions done:
    # the Job controller creates min(4, 4 - 3) = 1 more pod, never a second one, so the
    # gang's minimum is 1 (not 2: it would wait for ever), and its one pod binds alone.
    snap = snapshot([node("n1", gpu=32)], [], [quota("team-a", max={"nvidia.com/gpu": "64"})])
    done = job({"parallelism": 4, "completions": 4}, {"succeeded": 3})
    snap.declarations.set_owner_size(parse_owner_size("Job", done))
    last = elastic_trainer(3, "2")
    snap.upsert_pod(last, now=T)
    assert gangsize.gang_size(snap, last) == 1
    assert snap.declarations.min_available(JOB) == 1
    result = verb.filter_pod(snap, last, NODES, as_extender=True, now=T + 0.01)
    assert result.passed == ["n1"]
    # With two completions to go the Job runs 2 pods: the declared 2 stands, and one pod
    # alone waits for its sibling.
    snap.declarations.set_owner_size(
        parse_owner_size("Job", job({"parallelism": 4, "completions": 4}, {"succeeded": 2}))
    )
    assert snap.declarations.min_available(JOB) == 2
    waiting = verb.filter_pod(snap, last, NODES, as_extender=True, now=T + 0.02)
    assert not waiting.passed and waiting.gang_waiting is not None


def test_a_minimum_below_what_the_job_runs_is_kept() -> None:
    # The cap only lowers: 4 pods to run, a declared minimum of 2 stays 2.
    snap = cluster(parallelism=4)
    first = elastic_trainer(0, "2")
    snap.upsert_pod(first, now=T)
    assert gangsize.gang_size(snap, first) == 2 and snap.declarations.min_available(JOB) == 2
