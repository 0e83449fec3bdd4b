"""``bench.below_min``: a run's time below ``min`` told by cause, each expectation worked
out by hand from the module's docstring."""

from __future__ import annotations

import dataclasses
import datetime

from bench.below_min import CAUSES, Word, cause_of, causes, holding, read_log
from bench.workload import BelowMin, GapStretch, PodSighting, SubmittedJob, trace_figures

JOBS = {
    "j1": SubmittedJob("team-a", 1, 8, "normal", 0.0),
    "j2": SubmittedJob("team-a", 2, 8, "high", 50.0),
}


def _stamp(epoch: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f",{int(epoch * 1000) % 1000:03d}"


def test_the_log_is_read_on_the_trace_clock() -> None:
    started = datetime.datetime(2026, 12, 4, 10, 0, 0).timestamp()
    lines = [
        f"{_stamp(started + 12.5)} extender.kube.postfilter preempting for team-a/j2: "
        "2 victims (team-b/j9-x reclaimWithinCohort, team-b/j9-y reclaimWithinCohort)\n",
        f"{_stamp(started + 13.0)} extender.kube.postfilter no preemption for team-a/j1: "
        "quota team-a would borrow past its fair share (its share 0.1)\n",
        f"{_stamp(started + 14.0)} extender.kube.postfilter no preemption for team-a/j1: the "
        "whole job would not fit even after evicting every allowed victim: room for 0 of 1\n",
        f"{_stamp(started + 15.0)} extender.kube.postfilter no preemption for team-a/j1: "
        "the job fits without evicting anything\n",
        f"{_stamp(started + 16.0)} extender.kube.requeue requeued 1 parked pods\n",
    ]
    assert read_log(lines, started) == [
        Word(12.5, "team-a", "j2", "plan", ("team-b/j9-x", "team-b/j9-y")),
        Word(13.0, "team-a", "j1", "held back: fair sharing"),
        Word(14.0, "team-a", "j1", "no plan"),
        Word(15.0, "team-a", "j1", "fits"),
    ]


def test_each_stretch_gets_the_first_cause_that_holds() -> None:
    def stretch(at: float, podless: bool = False, waiting: tuple[str, ...] = ("j1",)) -> BelowMin:
        return BelowMin("team-a", at, 1.0, ("j1",), waiting, podless)

    words = [
        Word(10.0, "team-a", "j1", "held back: guarantee reserve"),
        Word(20.0, "team-a", "j1", "no plan"),
        Word(30.0, "team-a", "j1", "fits"),
        Word(40.0, "team-a", "j2", "plan"),
    ]
    # Podless before everything, even a fresh arrival; j1 was sent at 0, so at 2 it arrives.
    assert cause_of(stretch(2.0, podless=True), JOBS, words) == "no pod to place"
    assert cause_of(stretch(2.0), JOBS, words) == "arriving"
    # j1's latest word before 15 is held back, before 25 no plan, before 35 fits.
    assert cause_of(stretch(15.0), JOBS, words) == "held back: guarantee reserve"
    assert cause_of(stretch(25.0), JOBS, words) == "no plan"
    assert cause_of(stretch(35.0), JOBS, words) == "scheduler's view"
    # j2 (the team's, waiting) was planned at 40: its victims leave until 100.
    assert cause_of(stretch(45.0, waiting=("j1", "j2")), JOBS, words) == "victims leaving"
    assert cause_of(stretch(101.0, waiting=("j1", "j2")), JOBS, words) == "scheduler's view"
    # Once j2 no longer waits, its plan explains nothing.
    assert cause_of(stretch(45.0), JOBS, words) == "scheduler's view"
    # Without Muster's log, past the first two causes: other.
    assert cause_of(stretch(15.0), JOBS, None) == "other"


def test_a_plan_explains_a_wait_while_its_victims_hold_and_its_job_is_not_placed() -> None:
    # j2 (team-a, 2 pods, sent at 30) is planned at 40 with victim team-b/v, which holds
    # GPUs from 0 and lets go at 50 (finished).  j2's first pod is placed at 70, its
    # second waits.
    jobs = {"j2": SubmittedJob("team-a", 2, 8, "high", 30.0)}
    seen = [
        PodSighting(0, "team-b/v", "jv", 8, holds=True, succeeded=False),
        PodSighting(50, "team-b/v", "jv", 8, holds=False, succeeded=False),
        PodSighting(40, "team-a/j2-a", "j2", 8, holds=False, succeeded=False),
        PodSighting(70, "team-a/j2-a", "j2", 8, holds=True, succeeded=False),
    ]
    held = holding(seen)
    assert held.left == {"team-b/v": 50}
    assert held.placed == {"jv": [0], "j2": [70]}
    words = [Word(40.0, "team-a", "j2", "plan", ("team-b/v",))]

    def stretch(at: float) -> BelowMin:
        return BelowMin("team-a", at, 1.0, ("j2",), ("j2",), podless=False)

    # 45: the victim still holds; 55: it let go, j2 not placed yet; 75: j2 was placed at
    # 70 since the plan, so the plan explains nothing (no later word: other).
    assert cause_of(stretch(45.0), jobs, words, held) == "victims leaving"
    assert cause_of(stretch(55.0), jobs, words, held) == "victims gone, not placed"
    assert cause_of(stretch(75.0), jobs, words, held) == "other"
    # Without the sightings, a plan under 60 s old counts as its victims leaving.
    assert cause_of(stretch(75.0), jobs, words) == "victims leaving"
    # One stretch 44-80 is cut at the victim's leaving (50) and j2's placing (70):
    # 6 s leaving, 20 s gone and not placed, 10 s other.
    whole = dataclasses.replace(stretch(44.0), seconds=36.0)
    assert causes([whole], jobs, words, held) == dict.fromkeys(CAUSES, 0.0) | {
        "victims leaving": 6.0,
        "victims gone, not placed": 20.0,
        "other": 10.0,
    }


def test_a_stretch_is_cut_where_its_cause_changes() -> None:
    # team-a, min 8, one 8-GPU job j1 sent at 0: its pod is made at 0 and binds at 10.
    # Below min 0-10, one stretch; Muster says at 5 that j1 fits without evicting
    # anything.  0-3: arriving (sent less than 3 s before); 3-5: other (no word yet);
    # 5-10: the scheduler's view.
    seen = [
        PodSighting(0, "team-a/j1-x", "j1", 8, holds=False, succeeded=False),
        PodSighting(10, "team-a/j1-x", "j1", 8, holds=True, succeeded=False),
    ]
    jobs = {"j1": JOBS["j1"]}
    stretches: list[BelowMin] = []
    figures = trace_figures(seen, jobs, {"team-a": 8}, 8, 20, below_min=stretches)
    assert figures["seconds_below_min_with_pending_work"] == {"team-a": 10.0}
    assert len(stretches) == 1
    by_cause = causes(stretches, jobs, [Word(5.0, "team-a", "j1", "fits")])
    assert by_cause == dict.fromkeys(CAUSES, 0.0) | {
        "arriving": 3.0,
        "other": 2.0,
        "scheduler's view": 5.0,
    }


def test_the_fair_share_gap_is_told_by_cause_in_gpu_seconds() -> None:
    # team-a and team-b, min 0 each, 16 GPUs.  team-a's ja (8 GPUs) runs from 0; team-b's
    # jb (8 GPUs) is sent at 0, its pod made at 0 and bound at 10.  0-10: team-b waits at
    # its min borrowing nothing, team-a borrows 8: one stretch of gap, 8 GPUs, team-b's
    # (the mean over 20 s: 8 * 10 / 20 = 4).  Muster says at 4 that jb saves no checkpoint
    # (the reserve): 0-3 arriving (3 s * 8 GPUs = 24), 3-4 other (8), 4-10 reserve (48).
    jobs = {
        "ja": SubmittedJob("team-a", 1, 8, "normal", 0.0),
        "jb": SubmittedJob("team-b", 1, 8, "normal", 0.0),
    }
    seen = [
        PodSighting(0, "team-a/ja-x", "ja", 8, holds=True, succeeded=False),
        PodSighting(0, "team-b/jb-x", "jb", 8, holds=False, succeeded=False),
        PodSighting(10, "team-b/jb-x", "jb", 8, holds=True, succeeded=False),
    ]
    gaps: list[GapStretch] = []
    figures = trace_figures(seen, jobs, {"team-a": 0, "team-b": 0}, 16, 20, gaps=gaps)
    assert figures["fair_share_gap_gpus"]["mean"] == 4.0
    assert gaps == [GapStretch("team-b", 0.0, 10.0, 8.0, ("jb",), podless=False)]
    said = [Word(4.0, "team-b", "jb", "held back: guarantee reserve")]
    assert causes(gaps, jobs, said) == dict.fromkeys(CAUSES, 0.0) | {
        "arriving": 24.0,
        "other": 8.0,
        "held back: guarantee reserve": 48.0,
    }
