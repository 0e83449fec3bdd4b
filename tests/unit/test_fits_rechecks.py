"""A job that fits as Muster sees it, though kube-scheduler found it unschedulable, is
planned again a few times (``extender/kube/rechecks.py``): Muster's view may lag a
binding kube-scheduler has in flight, and nothing else would ask again."""

from __future__ import annotations

import dataclasses
from typing import cast

from extender.core.config import MusterArgs
from extender.core.decisions import DecisionLog
from extender.core.objects import parse_pod
from extender.core.preemption.planner import Refusal, plan_job_preemption
from extender.core.preemption.search import FITS_ALREADY
from extender.kube.client import KubeClient
from extender.kube.postfilter import PostFilterLoop, Refused
from extender.kube.rechecks import QUIET_SECONDS, RECHECKS, FitsRechecks
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter
from tests.builders import node, pod, quota, record_keys, snapshot

GPU = "nvidia.com/gpu"


def loop() -> PostFilterLoop:
    source = KubeSource(cast(KubeClient, object()), MusterArgs(), record_keys=record_keys)
    return PostFilterLoop(source, cast(ClusterWriter, None), DecisionLog(), clock=lambda: 0.0)


def fits(job: str, settles: float | None = None) -> Refused:
    return Refused(job, ("fits",), pending=(f"{job}-0",), settles=settles, fits_now=True)


def test_rechecks_wait_twice_as_long_each_time_then_stop() -> None:
    rechecks = FitsRechecks()
    # Found fitting at t = 100 each time: 1 s after, then 2, 4 and 8 s (RECHECKS = 4),
    # then no more (kube-scheduler's own events must ask).
    assert RECHECKS == 4
    due = [rechecks.next_after("team-a/j1", 100.0) for _ in range(RECHECKS + 1)]
    assert due == [101.0, 102.0, 104.0, 108.0, None]
    # Another job has its own count.
    assert rechecks.next_after("team-a/j2", 100.0) == 101.0


def test_a_decision_other_than_fitting_starts_the_rechecks_anew() -> None:
    rechecks = FitsRechecks()
    for _ in range(RECHECKS):
        rechecks.next_after("team-a/j1", 0.0)
    # Refused for something else: no recheck for that, and the count is reset.
    assert rechecks.next_after("team-a/j1", 50.0, fits_now=False) is None
    assert rechecks.next_after("team-a/j1", 50.0) == 51.0
    rechecks.next_after("team-a/j1", 51.0)
    rechecks.forget("team-a/j1")  # a plan was made
    assert rechecks.next_after("team-a/j1", 60.0) == 61.0


def test_a_job_fitting_again_long_after_its_rechecks_were_spent_gets_them_anew() -> None:
    rechecks = FitsRechecks()
    for t in (0.0, 1.0, 3.0, 7.0):
        rechecks.next_after("team-a/j1", t)
    # Spent at t = 7 (the last was asked for then) ...
    assert rechecks.next_after("team-a/j1", 8.0) is None
    # ... and still spent at the end of the quiet period (7 + QUIET_SECONDS) ...
    assert rechecks.next_after("team-a/j1", 7.0 + QUIET_SECONDS) is None
    # ... but a job of that name found fitting later (it bound and was recreated, say)
    # starts over: 1 s after.
    later = 7.0 + QUIET_SECONDS + 1.0
    assert rechecks.next_after("team-a/j1", later) == later + 1.0


def test_the_loop_plans_a_job_found_fitting_again_a_second_later() -> None:
    postfilter = loop()
    postfilter._refuse(fits("team-a/j1"), now=10.0)
    assert postfilter._rechecks.next_due() == 11.0 and postfilter._due == {}
    # A gang settling is asked for when it settles (the recheck is kept apart).
    postfilter._refuse(fits("team-a/j2", settles=10.5), now=10.0)
    assert postfilter._due == {"team-a/j2": 10.5}
    # A refusal that does not fit, with no time to ask again, adds nothing.
    postfilter._refuse(Refused("team-a/j3", ("no room",), (), None), now=10.0)
    assert "team-a/j3" not in postfilter._due
    assert postfilter._rechecks.due(10.9, freed=0) == []
    assert postfilter._rechecks.due(11.0, freed=0) == ["team-a/j1", "team-a/j2"]
    assert postfilter._rechecks.due(11.0, freed=0) == []  # each asked once


def test_no_recheck_once_a_bound_pod_has_left_since_the_refusal() -> None:
    # Refused with the state's freed count at 3; by the recheck a bound pod has left
    # (4): kube-scheduler retries the job's pods on that itself, so Muster does not.
    rechecks = FitsRechecks()
    rechecks.after_refusal("team-a/j1", 10.0, fits_now=True, freed=3)
    rechecks.after_refusal("team-a/j2", 10.0, fits_now=True, freed=3)
    assert rechecks.superseded("team-a/j1", 4) and not rechecks.superseded("team-a/j1", 3)
    assert rechecks.due(11.0, freed=4) == []
    # Refused again with the new count: its next recheck (2 s on) is made if nothing left.
    rechecks.after_refusal("team-a/j1", 12.0, fits_now=True, freed=4)
    assert rechecks.due(14.0, freed=4) == ["team-a/j1"]


def test_the_freed_count_counts_bound_pods_that_stop_holding_room() -> None:
    # Derived from kube-scheduler's retry events: a bound pod deleted or finished frees
    # room (counted); a pending pod deleted, or a bound pod updated, frees none.
    state = snapshot(
        [node("n0", gpu=8)],
        [pod("run", gpu=4, node="n0"), pod("done", gpu=4, node="n0"), pod("wait", gpu=8)],
        [quota("team-a", min={GPU: "8"}, max={GPU: "16"})],
    )
    keys = {p.name: p.key for p in state.pods.values()}
    assert state.freed == 0
    state.remove_pod(keys["wait"], 1.0)
    assert state.freed == 0
    finished = dataclasses.replace(state.pods[keys["done"]], phase="Succeeded")
    state.upsert_pod(finished, 2.0)
    assert state.freed == 1
    state.upsert_pod(finished, 3.0)  # seen again, finished already
    assert state.freed == 1
    state.remove_pod(keys["done"], 4.0)  # finished: its room was free already
    state.remove_pod(keys["run"], 5.0)
    assert state.freed == 2


def test_a_bound_pod_replaced_under_its_name_counts_as_freed() -> None:
    # A relist after a missed delete: the key comes back with a new uid, pending.  The old
    # pod left its node (kube-scheduler saw the delete): counted.  The same pod seen
    # again, bound as before, frees nothing.
    state = snapshot(
        [node("n0", gpu=8)],
        [pod("run", gpu=4, node="n0")],
        [quota("team-a", min={GPU: "8"}, max={GPU: "16"})],
    )
    (old,) = state.pods.values()
    state.upsert_pod(dataclasses.replace(old, resource_version="2"), 1.0)
    assert state.freed == 0
    again = pod("run", gpu=4)  # pending, under the same name
    again["metadata"]["uid"] = "a-new-uid"
    state.upsert_pod(parse_pod(again), 2.0)
    assert state.freed == 1


def test_the_planner_says_when_a_job_fits_without_evicting_anything() -> None:
    # One free 8-GPU node and a pending 8-GPU pod within its quota: it fits, nothing is
    # evicted, and the refusal says so (what the loop rechecks on).
    state = snapshot(
        [node("n0", gpu=8)],
        [pod("p0", gpu=8, can_preempt=True)],
        [quota("team-a", min={GPU: "8"}, max={GPU: "8"})],
    )
    job = next(iter(state.pods.values())).job
    decision = plan_job_preemption(state, job, now=0.0)
    assert isinstance(decision, Refusal)
    assert decision.reasons == (FITS_ALREADY,) and decision.fits_now()
    # A node that is full: no fit, so no recheck.
    state.upsert_pod(parse_pod(pod("other", namespace="team-b", gpu=8, node="n0")))
    decision = plan_job_preemption(state, job, now=0.0)
    assert isinstance(decision, Refusal) and not decision.fits_now()


def test_a_job_that_fits_only_once_a_leaving_pod_goes_is_not_rechecked() -> None:
    # The 8-GPU node's pod is terminating: a plan counts its room free, so the job fits
    # without evicting anything, but not on room free now: kube-scheduler tries the pod
    # again when that pod is deleted, so Muster does not ask again (fits_now false).
    leaving = pod("old", namespace="team-b", gpu=8, node="n0")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    state = snapshot(
        [node("n0", gpu=8)],
        [pod("p0", gpu=8, can_preempt=True), leaving],
        [quota("team-a", min={GPU: "8"}, max={GPU: "8"})],
    )
    job = state.pods["team-a/p0"].job
    decision = plan_job_preemption(state, job, now=0.0)
    assert isinstance(decision, Refusal)
    assert decision.reasons == (FITS_ALREADY,) and not decision.fits_now()
