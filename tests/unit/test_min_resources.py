"""A PodGroup's ``minResources``: what the whole gang needs admitted together (issue 26).

The rule (docs/design.md, as amended by issue 26; README "Gangs declared by minResources"): a
job whose PodGroup declares ``minResources`` is charged ``max(used, minResources)`` per
resource from its first admitted pod until its last pod ends.  So its first pod (a Spark
driver, ``minMember: 1``) is admitted only where the quota has room for all of
``minResources``; the room its pods do not use yet is held for the pods still to come
(the executors), which are admitted against that hold and not against what other jobs
left; and the hold goes with the job.  Every expectation below is that arithmetic, done
by hand in the comments.
"""

from __future__ import annotations

from base.resources import parse_quantity
from extender.core.effects import HoldRoom, apply
from extender.core.filter.admission import admission_failures, admission_hold
from extender.core.objects import parse_pod
from extender.core.podgroups import PodGroupInfo, parse_scheduler_plugins_pod_group
from extender.core.preemption.groups import _with_hold_change
from extender.core.state import ClusterState, Reservation
from extender.core.state.overlay import Overlay
from tests.builders import leaving, node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOW = 1_767_268_800.0  # 2026-01-01T12:00:00Z


def spark_group(gpus: int = 24) -> PodGroupInfo:
    """The Spark operator's PodGroup: ``minMember: 1``, the gang in ``minResources``."""
    return parse_scheduler_plugins_pod_group(
        {
            "metadata": {"name": "spark", "namespace": "team-a"},
            "spec": {"minMember": 1, "minResources": {GPU: str(gpus), "cpu": "4"}},
        }
    )


def gpus_used(snap: ClusterState, name: str = "team-a") -> int:
    return snap.ledger[name].used.get(GPU, 0) // parse_quantity("1")


def cluster(max_gpus: int, *pods: dict[str, object]) -> ClusterState:
    """Four 8-GPU nodes; team-a's quota ``min`` and ``max`` of ``max_gpus`` (its pods are
    not preemptible, so they may use up to ``min``); a 16-GPU job of team-a already
    running (two 8-GPU pods); the Spark PodGroup."""
    running = [pod(f"other-{i}", gpu=8, node=f"n{i}", group="other") for i in range(2)]
    snap = snapshot(
        [node(f"n{i}") for i in range(4)],
        [*running, *pods],
        [quota("team-a", min={GPU: str(max_gpus)}, max={GPU: str(max_gpus)})],
    )
    snap.set_pod_group(spark_group())
    return snap


def driver(node_name: str | None = None) -> dict[str, object]:
    return pod("driver", cpu="1", node=node_name, group="spark")


def executor(i: int, node_name: str | None = None) -> dict[str, object]:
    return pod(f"exec-{i}", gpu=8, cpu="1", node=node_name, group="spark")


def test_the_first_pod_is_admitted_only_where_the_quota_holds_all_of_min_resources() -> None:
    # The driver asks for no GPU, but its PodGroup declares 24: 16 used + 24 = 40 > 32.
    snap = cluster(32, driver())
    failures = admission_failures(snap, snap.pods["team-a/driver"])
    assert "quota team-a: nvidia.com/gpu 40 would exceed max 32" in failures, failures
    # With max 40 it fits exactly: 16 + 24 = 40 ≤ 40.
    assert admission_failures(cluster(40, driver()), snap.pods["team-a/driver"]) == []


def test_without_min_resources_the_same_driver_is_admitted() -> None:
    # The control: a PodGroup with minMember 1 alone, the driver's 0 GPUs fit 16 ≤ 32.
    snap = cluster(32, driver())
    snap.set_pod_group(
        parse_scheduler_plugins_pod_group(
            {"metadata": {"name": "spark", "namespace": "team-a"}, "spec": {"minMember": 1}}
        )
    )
    assert admission_failures(snap, snap.pods["team-a/driver"]) == []


def test_a_started_job_holds_the_rest_for_its_pods_to_come_and_not_for_others() -> None:
    # Max 48.  The driver runs: team-a is charged 16 + max(0 used, 24 declared) = 40.
    snap = cluster(48, driver("n2"))
    assert gpus_used(snap) == 40
    # Another 16-GPU job of team-a: 40 + 16 = 56 > 48, refused.
    snap.upsert_pod(parse_pod(pod("late-0", gpu=8, group="late")))
    snap.upsert_pod(parse_pod(pod("late-1", gpu=8, group="late")))
    assert admission_failures(snap, snap.pods["team-a/late-0"])
    # The driver's executors come: each 8-GPU one is covered by the hold (24 - 8 ≥ 0
    # left), so none is refused, and the charge stays 40 as they bind one by one.
    for i in range(3):
        snap.upsert_pod(parse_pod(executor(i)))
        assert admission_failures(snap, snap.pods[f"team-a/exec-{i}"]) == [], i
        snap.upsert_pod(parse_pod(executor(i, "n3" if i == 0 else f"n{i - 1}")))
        assert gpus_used(snap) == 40, i
    # Used now 16 + 24 = 40 ≥ 24 declared: nothing is held beyond the pods.
    assert snap.min_resources.held("team-a/spark") is None
    # A fourth executor goes beyond minResources and asks for its own 8: 40 + 8 ≤ 48.
    snap.upsert_pod(parse_pod(executor(3)))
    assert admission_failures(snap, snap.pods["team-a/exec-3"]) == []


def test_an_admitted_driver_holds_min_resources_before_it_binds() -> None:
    # The filter's admission hold charges the driver as used: from then on, team-a's
    # charge is 16 + 24 = 40, though no pod of the job is bound yet.
    snap = cluster(48, driver())
    hold = admission_hold(snap, snap.pods["team-a/driver"], until=NOW + 30)
    assert hold is not None
    apply(snap, hold)
    assert gpus_used(snap) == 40


def test_the_hold_goes_with_the_job() -> None:
    # Driver and one executor running: 16 + 8 + hold (24 - 8 = 16) = 40.  When both end,
    # team-a is back to its other job's 16; and the PodGroup deleted drops the hold too.
    snap = cluster(48, driver("n2"), executor(0, "n3"))
    assert gpus_used(snap) == 40
    snap.forget_pod_group("team-a", "spark")
    assert gpus_used(snap) == 24
    snap.set_pod_group(spark_group())
    assert gpus_used(snap) == 40
    snap.remove_pod("team-a/exec-0")
    assert gpus_used(snap) == 40  # 16 + driver 0 + hold 24
    snap.remove_pod("team-a/driver")
    assert gpus_used(snap) == 16


def test_a_plan_counts_a_leaving_jobs_hold_as_gone() -> None:
    # The job's only running pods, the driver and one executor, are leaving (marked, or
    # marked and terminating): a plan's settled ledger counts them and the 16 held as
    # gone, leaving the other job's 16.  With only the executor leaving, the driver
    # stays and so does the hold: 16 + 0 + 24.
    for how in ("marked", "terminating"):
        snap = cluster(48, driver("n2"), executor(0, "n3"))
        snap.upsert_pod(parse_pod(leaving(executor(0, "n3"), "team-a/x", how)))
        settled = Overlay.settled(snap)
        assert settled.ledger["team-a"].used.get(GPU, 0) == parse_quantity("40"), how
        snap.upsert_pod(parse_pod(leaving(driver("n2"), "team-a/x", how)))
        settled = Overlay.settled(snap)
        assert settled.ledger["team-a"].used.get(GPU, 0) == parse_quantity("16"), how


# ---- found in review ------------------------------------------------------------------


def test_the_hold_is_used_room_not_a_request() -> None:
    # Max 48; the driver runs and two 8-GPU executors are pending (not admitted).  The
    # quota's non-preemptible *request* is what its pods ask: 16 (other job) + 16
    # (executors), the driver none; the hold (24) is used room, not one more request.
    snap = cluster(48, driver("n2"), executor(0), executor(1))
    assert gpus_used(snap) == 40
    assert snap.ledger["team-a"].np_request.get(GPU, 0) == parse_quantity("32")


def test_room_kept_for_a_re_created_executor_is_not_held_twice() -> None:
    # Max 48.  The driver runs; exec-0 (a Job's pod) holds reserved room on n3: the job
    # uses 8, holds 16 more: 16 + 8 + 16 = 40.  exec-0 is deleted pending (its controller
    # will re-create it): its room stays the job's as a vacancy (8 on n3), which counts as
    # the job's use, so the hold stays 16 and the quota 40, not 48.
    made = executor(0)
    made["metadata"]["ownerReferences"] = [  # type: ignore[index]
        {"apiVersion": "batch/v1", "kind": "Job", "name": "spark", "uid": "j", "controller": True}
    ]
    snap = cluster(48, driver("n2"), made)
    placements = {"team-a/exec-0": "n3"}
    apply(snap, HoldRoom(Reservation("team-a/spark", "team-a", placements, (), NOW, NOW + 300)))
    assert gpus_used(snap) == 40
    snap.remove_pod("team-a/exec-0", now=NOW)
    assert snap.book.vacancies_of("team-a/spark")
    assert gpus_used(snap) == 40


def test_evicting_part_of_a_job_frees_its_pods_less_the_hold_they_leave_behind() -> None:
    # The driver (no GPU) and exec-0 (8) run, exec-1 (8) holds reserved room: used 16,
    # hold 24 - 16 = 8.  Evicting only the running pods (the victim unit) leaves exec-1
    # counted, so the hold grows to 24 - 8 = 16: their quota gets back 8 (exec-0) + 8
    # (the hold now) - 16 (the hold after) = 0 GPUs, not 16.
    snap = cluster(48, driver("n2"), executor(0, "n3"), executor(1))
    placements = {"team-a/exec-1": "n0"}
    apply(snap, HoldRoom(Reservation("team-a/spark", "team-a", placements, (), NOW, NOW + 300)))
    members = (snap.pods["team-a/driver"], snap.pods["team-a/exec-0"])
    freed = _with_hold_change(snap, "team-a/spark", members, {GPU: 8000})
    assert freed.get(GPU, 0) == 0


def test_min_resources_raised_after_admission_holds_no_more_than_was_admitted() -> None:
    # The driver runs, admitted with the PodGroup's 24 GPUs held: 16 + 24 = 40 = max.  Its
    # owner (a tenant may write its PodGroup) raises minResources to 100: admission never
    # checked 100, so the hold stays 24 (used 40, not 116, which would refuse every other
    # job of the quota and of any parent).  Lowered to 8, it holds 8 (16 + 8 = 24).
    snap = cluster(40, driver("n2"))
    assert gpus_used(snap) == 40
    snap.set_pod_group(spark_group(100))
    assert gpus_used(snap) == 40
    snap.set_pod_group(spark_group(8))
    assert gpus_used(snap) == 24
    # Raised again: still no more than the 24 it was admitted with.
    snap.set_pod_group(spark_group(30))
    assert gpus_used(snap) == 40


def test_which_jobs_declare_min_resources_follows_their_winning_declaration() -> None:
    # A job declared by two APIs: the lower rank wins.  Its minResources count only while
    # the winner holds them: declared, outranked by one without, that one gone, all gone.
    snap = snapshot([node("n0")], [], [quota("team-a")])
    declarations = snap.declarations
    jobs = {"team-a/g"}
    holding = PodGroupInfo("team-a", "g", 1, min_resources={"cpu": 1000}, rank=2)
    plain = PodGroupInfo("team-a", "g", 1, rank=1)
    declarations.set_pod_group(holding)
    assert declarations.any_min_resources(jobs)
    assert not declarations.any_min_resources({"team-a/other"})
    declarations.set_pod_group(plain)  # rank 1 wins, without minResources
    assert not declarations.any_min_resources(jobs)
    declarations.forget_pod_group("team-a/g", 1)  # the holding one wins again
    assert declarations.any_min_resources(jobs)
    declarations.forget_pod_group("team-a/g", 2)
    assert not declarations.any_min_resources(jobs)
    assert declarations.own_pod_group("team-a/g") is None
