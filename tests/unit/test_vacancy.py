"""Reservations follow the job, not a pod's name (issue #14, item 4).

Derived by hand from the rule (``ClusterState.remove_pod``): a pending pod holding
reserved room that is deleted (seen live: ``remove_pod(key, now)``) leaves its room to its
job for ``vacatedRoomSeconds`` (60 s by default) if a controller owns it (it comes back):
held on its node and charged to its quota as the pod was.  The first new pending pod of
the job with the same requests, quota and controller takes it (the pod's own name first,
as a StatefulSet re-creates it); otherwise the room is let go when the time is up.

Every node has 8 GPUs; the job ``team-a/train`` has two 8-GPU pods reserved on n0 and n1.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from base import keys
from base.errors import ManifestError
from extender.core.objects import parse_pod
from extender.core.settling import settle_reservations
from extender.core.state import ClusterState, Reservation
from quota.accounting import usage_report
from quota.tree import parse_elastic_quota
from tests.builders import node, pod, quota, snapshot

T0 = 1_800_000_000.0
JOB = "team-a/train"
GPU = "nvidia.com/gpu"


def trainer(
    name: str, gpu: int = 8, uid: str | None = None, owner: str | None = "train"
) -> dict[str, Any]:
    """A pod of the job, owned by the Job ``owner`` (``None``: a bare pod)."""
    made = pod(name, gpu=gpu, group="train", can_preempt=True)
    made["metadata"]["uid"] = uid or f"uid-{name}"
    if owner is not None:
        made["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "j", "controller": True}
        ]
    return made


def state(placements: dict[str, str], *extra: dict[str, Any]) -> ClusterState:
    pods = [trainer(key.split("/")[1]) for key in placements]
    snap = snapshot(
        [node("n0"), node("n1")],
        [*pods, *extra],
        [quota("team-a", namespace="team-a", max={GPU: "32"})],
    )
    snap.add_reservation(Reservation(JOB, "team-a", placements, (), T0, T0 + 300))
    return snap


TWO = {"team-a/t-0": "n0", "team-a/t-1": "n1"}


def used_gpus(snap: ClusterState) -> str:
    return usage_report(snap.ledger, "team-a")["used"].get(GPU, "0")


def free_gpus(snap: ClusterState, name: str) -> int:
    return snap.free_on(name).get(GPU, 0) // 1000  # amounts are kept in thousandths


def test_a_deleted_reserved_pod_keeps_its_room_for_its_job() -> None:
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    # n1's 8 GPUs stay held, and team-a is still charged 8 + 8.
    assert free_gpus(snap, "n1") == 0
    assert used_gpus(snap) == "16"
    assert snap.book.vacancies_of(JOB) == ["team-a/t-1#vacated"]
    assert snap.reservation_holder("team-a/t-1#vacated") == JOB
    assert snap.reservation_holder("team-a/t-1") is None  # not the name: a new pod may take it
    assert JOB in snap.reservations


def test_the_replacement_of_the_same_shape_takes_the_room_under_a_new_name() -> None:
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    snap.upsert_pod(parse_pod(trainer("t-1-x7k2p")))  # a Job controller's new name
    assert snap.reserved_node("team-a/t-1-x7k2p") == "n1"
    assert snap.reservations[JOB].placements == {"team-a/t-0": "n0", "team-a/t-1-x7k2p": "n1"}
    assert snap.book.vacancies == {}
    # Exactly the state of a cluster where the new pod was reserved from the start.
    fresh = state({"team-a/t-0": "n0", "team-a/t-1-x7k2p": "n1"})
    assert snap.node_usage.reserved == fresh.node_usage.reserved
    assert usage_report(snap.ledger, "team-a") == usage_report(fresh.ledger, "team-a")


def test_a_statefulset_pod_re_created_under_its_name_takes_its_own_room_first() -> None:
    # Both pods are deleted; the one re-created as t-1 takes t-1's vacancy (n1), not
    # t-0's (n0), although both have its shape.
    snap = state(TWO)
    snap.remove_pod("team-a/t-0", now=T0 + 5)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    snap.upsert_pod(parse_pod(trainer("t-1", uid="uid-t-1-second")))
    assert snap.reserved_node("team-a/t-1") == "n1"
    assert snap.book.vacancies_of(JOB) == ["team-a/t-0#vacated"]


def test_a_pod_of_another_shape_job_or_controller_does_not_take_the_room() -> None:
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    snap.upsert_pod(parse_pod(trainer("t-2", gpu=4)))
    snap.upsert_pod(parse_pod(trainer("t-3", owner="another-job")))
    snap.upsert_pod(parse_pod(trainer("t-4", owner=None)))
    other = pod("o-0", gpu=8, group="other", can_preempt=True)
    snap.upsert_pod(parse_pod(other))
    for name in ("t-2", "t-3", "t-4"):
        assert snap.reserved_node(f"team-a/{name}") is None, name
    assert snap.reserved_node("team-a/o-0") is None
    assert snap.book.vacancies_of(JOB) == ["team-a/t-1#vacated"]


def test_a_bare_pod_takes_its_room_with_it() -> None:
    # No controller owns it: nothing will re-create it (a user deleting their pod).
    snap = snapshot(
        [node("n0"), node("n1")],
        [trainer("t-0", owner=None), trainer("t-1", owner=None)],
        [quota("team-a", namespace="team-a", max={GPU: "32"})],
    )
    snap.add_reservation(Reservation(JOB, "team-a", TWO, (), T0, T0 + 300))
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    assert snap.book.vacancies == {}
    assert free_gpus(snap, "n1") == 8 and used_gpus(snap) == "8"


def test_vacated_room_is_let_go_after_vacated_room_seconds() -> None:
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    epoch = snap.room_epoch
    assert snap.expire_vacancies(T0 + 5 + 59.9) == []
    assert snap.expire_vacancies(T0 + 5 + 60) == ["team-a/t-1#vacated"]
    # n1 is free again, team-a is charged for t-0 only, and parked pods get a look.
    assert free_gpus(snap, "n1") == 8
    assert used_gpus(snap) == "8"
    assert snap.room_epoch > epoch
    assert snap.reservations[JOB].placements == {"team-a/t-0": "n0"}


def test_a_deletion_not_seen_live_leaves_no_vacancy() -> None:
    # simulate and other callers without a clock: the pod and its room go together.
    snap = state(TWO)
    snap.remove_pod("team-a/t-1")
    assert free_gpus(snap, "n1") == 8 and used_gpus(snap) == "8"


def marked_victim() -> dict[str, Any]:
    made = pod("b-0", "team-b", gpu=8, node="n1", preemptible=True)
    made["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    made["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = json.dumps({"preemptor": JOB})
    return made


def test_a_job_whose_pods_are_all_being_re_created_is_not_gone_until_its_room_expires() -> None:
    # Its one pod is deleted; its victim b-0 is still marked.  While the vacancy lasts the
    # plan stands; when it expires with no replacement, the job is gone and the plan is
    # undone (b-0's mark taken back).
    snap = state({"team-a/t-0": "n0"}, marked_victim())
    snap.remove_pod("team-a/t-0", now=T0 + 5)
    assert settle_reservations(snap, T0 + 10) == ([], [])
    snap.expire_vacancies(T0 + 65)
    assert JOB not in snap.reservations
    extended, ended = settle_reservations(snap, T0 + 65)
    assert extended == []
    assert [(p.why, [v.key for v in p.unmark]) for p in ended] == [
        ("the job is gone", ["team-b/b-0"])
    ]


def test_letting_the_reservation_go_lets_its_vacancies_go() -> None:
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    snap.remove_reservation(JOB)
    assert snap.book.vacancies == {}
    assert free_gpus(snap, "n1") == 8 and used_gpus(snap) == "0"


def test_the_controller_is_read_from_the_owner_reference_marked_controller() -> None:
    owned = trainer("t-0")
    owned["metadata"]["ownerReferences"].insert(
        0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-a-controller", "uid": "c"}
    )
    assert parse_pod(owned).controller == "Job/train"
    assert parse_pod(trainer("t-0", owner=None)).controller is None


@pytest.mark.parametrize(
    ("owners", "field"),
    [("job", "metadata.ownerReferences"), (["job"], "metadata.ownerReferences[0]")],
)
def test_malformed_owner_references_are_refused_naming_the_field(owners: Any, field: str) -> None:
    bad = trainer("t-0")
    bad["metadata"]["ownerReferences"] = owners
    with pytest.raises(ManifestError) as refused:
        parse_pod(bad)
    assert field in str(refused.value)


def test_a_new_pod_under_the_vacated_name_but_of_another_shape_is_its_own_pod() -> None:
    # A StatefulSet whose template changed: t-1 comes back asking for 4 GPUs.  It does not
    # take the 8-GPU vacancy, is not reserved, and the books stay exact: n1 holds the
    # vacancy's 8; team-a is charged 8 (t-0) + 8 (vacancy) as used, t-1's 4 pending; when
    # the vacancy expires, n1 is free and team-a's used is t-0's 8.
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    snap.upsert_pod(parse_pod(trainer("t-1", gpu=4, uid="uid-t-1-new")))
    assert snap.reserved_node("team-a/t-1") is None
    assert free_gpus(snap, "n1") == 0 and used_gpus(snap) == "16"
    snap.expire_vacancies(T0 + 65)
    assert free_gpus(snap, "n1") == 8 and used_gpus(snap) == "8"


def test_a_new_pod_under_the_vacated_name_seen_bound_leaves_the_vacancy_whole() -> None:
    # First seen bound (a relist, or Muster's own bind): it is a running pod, and the
    # vacancy expires cleanly: used is t-0's 8 (reserved) + t-1's 8 (bound on n0).
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    bound = trainer("t-1", uid="uid-t-1-new")
    bound["spec"]["nodeName"] = "n0"
    snap.upsert_pod(parse_pod(bound))
    assert snap.book.vacancies_of(JOB) == ["team-a/t-1#vacated"]
    assert snap.expire_vacancies(T0 + 65) == ["team-a/t-1#vacated"]
    assert free_gpus(snap, "n1") == 8 and used_gpus(snap) == "16"


def test_a_quota_edit_keeps_the_vacancy_charged() -> None:
    # The ledger is rebuilt from the pods on a quota edit; the vacancy is charged again.
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    snap.set_quotas([parse_elastic_quota(quota("team-a", namespace="team-a", max={GPU: "24"}))])
    assert used_gpus(snap) == "16"
    snap.expire_vacancies(T0 + 65)
    assert used_gpus(snap) == "8" and free_gpus(snap, "n1") == 8


def test_a_quota_deleted_lets_its_vacancies_go() -> None:
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    snap.set_quotas([])
    assert snap.book.vacancies == {} and free_gpus(snap, "n1") == 8
    assert snap.expire_vacancies(T0 + 65) == []


def test_extending_the_reservation_keeps_its_vacancies() -> None:
    # Settling extends a reservation whose victims are terminating (the same placements,
    # a later expiry): the room kept for a replacement stays.
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    longer = dataclasses.replace(snap.reservations[JOB], expires=T0 + 330)
    snap.add_reservation(longer)
    assert snap.book.vacancies_of(JOB) == ["team-a/t-1#vacated"]
    assert free_gpus(snap, "n1") == 0 and used_gpus(snap) == "16"


def test_a_deleted_job_lets_its_vacated_room_go_and_its_plan_ends() -> None:
    # t-0 (owned by the Job "train") is deleted: its room is kept for a replacement.  Then
    # the Job itself is seen deleted: nothing will replace t-0, so the room goes at once
    # (no need to wait the 60 s), the reservation holding nothing ends, and the plan is
    # undone as for any job that is gone (b-0's mark taken back).
    snap = state({"team-a/t-0": "n0"}, marked_victim())
    snap.remove_pod("team-a/t-0", now=T0 + 5)
    assert snap.forget_owner("team-a", "Job/train")
    assert snap.book.vacancies == {}
    assert free_gpus(snap, "n0") == 8 and used_gpus(snap) == "0"
    assert JOB not in snap.reservations
    extended, ended = settle_reservations(snap, T0 + 6)
    assert extended == []
    assert [(p.why, [v.key for v in p.unmark]) for p in ended] == [
        ("the job is gone", ["team-b/b-0"])
    ]


def test_a_pod_of_a_deleted_job_leaves_no_vacancy() -> None:
    # The Job is seen deleted first (a background deletion removes the owner, then the
    # garbage collector its pods): the pod deleted after it is not coming back.
    snap = state(TWO)
    assert not snap.forget_owner("team-a", "Job/train")  # no room was vacated yet
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    assert snap.book.vacancies == {}
    assert free_gpus(snap, "n1") == 8 and used_gpus(snap) == "8"


def test_only_the_deleted_jobs_room_goes() -> None:
    # Another namespace's Job of the same name, and another Job of this namespace, are
    # not the deleted one; a Job created again under the deleted name re-creates pods.
    snap = state(TWO)
    snap.remove_pod("team-a/t-1", now=T0 + 5)
    assert not snap.forget_owner("team-b", "Job/train")
    assert not snap.forget_owner("team-a", "Job/other")
    assert snap.book.vacancies_of(JOB) == ["team-a/t-1#vacated"]
    snap.forget_owner("team-a", "Job/train")
    snap.declarations.owner_present("team-a", "Job/train")
    snap.remove_pod("team-a/t-0", now=T0 + 6)
    assert snap.book.vacancies_of(JOB) == ["team-a/t-0#vacated"]
