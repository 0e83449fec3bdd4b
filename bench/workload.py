"""What the users of a shared GPU cluster feel, as figures: pure bookkeeping over what a
driver saw of its pods, shared by the soak (:mod:`tests.soak.run`) and the head-to-head
with the peers (:mod:`bench.peers`).

* ``GpuSeconds``: GPU-seconds held by bound pods (from the bind until the pod finishes or
  is gone; a terminating pod still holds its GPUs), over the stream's window, and what
  evictions cost: the GPU-seconds of work each evicted pod lost (from its last save, or
  its bind, to its eviction) and the evictions of pods that had run less than 60 s;
* ``job_completion_figures``: Jobs completed, completion time (creation to
  ``status.completionTime``) p50/p95 per priority class, and evictions per completed Job;
* ``trace_figures``: one sweep over every sighting of a trace's pods (:class:`PodSighting`)
  and its jobs' submissions, for the comparison table: GPU allocation, GPU-seconds held by
  gangs not fully running, seconds a team spent below its ``min`` with work it could have
  run there, completion times per priority (and their floor: the p95 had no job waited),
  evictions per completed job, jobs left.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from base import keys
from base.resources import pod_requests
from base.times import claimed_time, parse_time, seconds

Json = dict[str, Any]


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``fraction`` in (0, 1]); ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


#: An eviction of a pod that had run less than this many seconds is an eviction of a
#: young job: work protected by a minimum runtime, and the mark of admit-evict loops.
YOUNG_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Saves:
    """What a pod says of its saves, in seconds on the observer's clock: its declared
    checkpoint interval (``muster.dev/checkpoint-interval-seconds``, counted from its
    start) and its latest save (``muster.dev/last-checkpoint`` or
    ``muster.dev/checkpointed``, the later)."""

    interval: float | None = None
    last: float | None = None


NO_SAVES = Saves()


def pod_saves(obj: Mapping[str, Any], epoch: float) -> Saves:
    """The saves a pod manifest declares, on a clock whose 0 is the wall time ``epoch``."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    times = [
        claimed_time(annotations.get(key))
        for key in (keys.LAST_CHECKPOINT_ANNOTATION, keys.CHECKPOINTED_ANNOTATION)
    ]
    known = [t - epoch for t in times if t is not None]
    interval = seconds(annotations.get(keys.CHECKPOINT_INTERVAL_ANNOTATION)) or None
    return Saves(interval, max(known) if known else None)


def unsaved_since(started: float, stopped: float, saves: Saves) -> float:
    """When the work a pod that ran from ``started`` and was stopped at ``stopped`` lost
    began: its latest save in that run (a declared one, or the last tick of its
    interval), else its start."""
    began = started
    if saves.last is not None and started <= saves.last <= stopped:
        began = saves.last
    if saves.interval is not None and stopped > started:
        ticks = math.floor((stopped - started) / saves.interval)
        began = max(began, started + ticks * saves.interval)
    return began


@dataclass(frozen=True, slots=True)
class _Eviction:
    gpus: float
    started: float
    stopped: float
    lost: float


@dataclass
class GpuSeconds:
    """GPU-seconds held by pods, each from the moment it is seen bound until it is seen
    finished or gone; and what the holds that ended without success (evictions) lost.

    A job saving its work on notice exits, then says when it saved: a save a pod reports
    after its eviction was seen (within its run, before its stop) still counts."""

    #: pod key → (GPUs, held since) for the pods holding GPUs now.
    holding: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: GPU-seconds of holds that ended.
    ended: float = 0.0
    #: Holds that ended without the pod succeeding: evictions.
    evictions: int = 0
    #: GPU-seconds of work the evicted pods lost since their last save.
    lost_gpu_seconds: float = 0.0
    #: Evictions of pods that had held their GPUs less than ``YOUNG_SECONDS``.
    young_evictions: int = 0
    #: pod key → its last eviction, for a save it reports after it.
    _evicted: dict[str, _Eviction] = field(default_factory=dict)

    def observe(
        self,
        key: str,
        gpus: float,
        holds: bool,
        at: float,
        *,
        succeeded: bool | None = None,
        saves: Saves = NO_SAVES,
    ) -> None:
        """The pod ``key`` is seen at ``at``: holding ``gpus`` GPUs (bound, not finished)
        or not (pending, finished, deleted). A hold that ends with ``succeeded`` false is
        an eviction (``None``: not known, as for a pod missed while the watch was down,
        counted as neither)."""
        current = self.holding.get(key)
        if holds and current is None:
            self.holding[key] = (gpus, at)
            self._evicted.pop(key, None)
        elif not holds and current is not None:
            held, since = self.holding.pop(key)
            self.ended += held * max(0.0, at - since)
            if succeeded is False:
                self.evictions += 1
                lost = held * max(0.0, at - unsaved_since(since, at, saves))
                self.lost_gpu_seconds += lost
                self._evicted[key] = _Eviction(held, since, at, lost)
                if at - since < YOUNG_SECONDS:
                    self.young_evictions += 1
        elif not holds and key in self._evicted and saves.last is not None:
            evicted = self._evicted[key]
            began = unsaved_since(evicted.started, evicted.stopped, saves)
            lost = min(evicted.lost, evicted.gpus * max(0.0, evicted.stopped - began))
            self.lost_gpu_seconds -= evicted.lost - lost
            self._evicted[key] = dataclasses.replace(evicted, lost=lost)

    def total(self, until: float) -> float:
        """GPU-seconds held up to ``until``, counting the holds still going on."""
        going = sum(gpus * max(0.0, until - since) for gpus, since in self.holding.values())
        return self.ended + going


def pod_gpus(obj: Mapping[str, Any], resource: str) -> float:
    """The GPUs a pod manifest requests, by the Kubernetes rules (``pod_requests``)."""
    return pod_requests(obj.get("spec") or {}).get(resource, 0) / 1000


def holds_gpus(obj: Mapping[str, Any]) -> bool:
    """Bound and not finished: the pod's GPUs are taken (terminating ones included)."""
    phase = (obj.get("status") or {}).get("phase")
    return bool((obj.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class CompletedJob:
    name: str
    priority_class: str
    seconds: float


def completed_jobs(
    jobs: Iterable[Mapping[str, Any]], priority_of: Mapping[str, str]
) -> list[CompletedJob]:
    """The batch/v1 Jobs (as the API returns them) with a ``Complete=True`` condition:
    their completion time, creation to ``status.completionTime`` (whole seconds, as the
    API keeps them), and the priority class ``priority_of`` gives their name."""
    done = []
    for job in jobs:
        metadata = job.get("metadata") or {}
        status = job.get("status") or {}
        complete = any(
            c.get("type") == "Complete" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        created = parse_time(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
        finished = parse_time(status.get("completionTime"), "status.completionTime")
        name = str(metadata.get("name"))
        if complete and created is not None and finished is not None and name in priority_of:
            done.append(CompletedJob(name, priority_of[name], finished - created))
    return done


def job_completion_figures(done: list[CompletedJob], evictions: int) -> dict[str, Any]:
    """Jobs completed, completion time p50/p95 per priority class, evictions per completed
    Job."""
    by_class: dict[str, list[float]] = {}
    for job in done:
        by_class.setdefault(job.priority_class, []).append(job.seconds)
    times = {
        name: (percentile(values, 0.5), percentile(values, 0.95), len(values))
        for name, values in sorted(by_class.items())
    }
    return {
        "jobs completed": len(done),
        "job completion time p50/p95 (s), count, by priority class": {
            name: (round(p50 or 0.0, 1), round(p95 or 0.0, 1), count)
            for name, (p50, p95, count) in times.items()
        },
        "evictions per completed job": round(evictions / len(done), 3) if done else None,
    }


@dataclass(frozen=True, slots=True)
class PodSighting:
    """One look at a trace's pod, as a watch delivered it, ``at`` seconds into the trace."""

    at: float
    key: str
    #: The trace job the pod belongs to.
    job: str
    gpus: float
    #: Bound and not finished (terminating included): its GPUs are taken.
    holds: bool
    succeeded: bool
    #: Deleted (the watch's DELETED).
    gone: bool = False
    #: What the pod says of its saves (what an eviction then loses).
    saves: Saves = NO_SAVES

    @property
    def takes_gpus(self) -> bool:
        """Its GPUs are taken as of this sighting: it holds them and is not deleted."""
        return self.holds and not self.gone


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    """A trace job as submitted: its team, its shape, its class and when it was sent."""

    team: str
    pods: int
    gpus_per_pod: float
    priority_class: str
    submitted: float
    #: The fewest pods it runs with (an elastic range's lower end); ``None``: all of them.
    min_pods: int | None = None
    #: Seconds each of its pods runs (the trace's); ``None``: not recorded (older runs).
    runtime: float | None = None

    @property
    def runs_with(self) -> int:
        return self.pods if self.min_pods is None else self.min_pods


@dataclass(frozen=True, slots=True)
class BelowMin:
    """A stretch of a team's time below ``min`` with work that fits in it."""

    team: str
    at: float
    seconds: float
    #: The team's waiting jobs that would fit in what its ``min`` leaves.
    fitting: tuple[str, ...]
    #: All the team's waiting jobs.
    waiting: tuple[str, ...]
    #: None of the fitting jobs has a pod waiting to be placed.
    podless: bool


@dataclass(frozen=True, slots=True)
class GapStretch:
    """A stretch of fair-share gap: ``team``, the least-borrowing team at or above its
    ``min`` with work waiting, borrowed ``gpus`` fewer (each team's borrowing divided by
    its weight) than the team borrowing the most."""

    team: str
    at: float
    seconds: float
    gpus: float
    #: The team's waiting jobs.
    waiting: tuple[str, ...]
    #: None of them has a pod waiting to be placed.
    podless: bool

    @property
    def fitting(self) -> tuple[str, ...]:
        """The jobs whose latest word tells the stretch (as :class:`BelowMin`'s): all of
        the team's waiting jobs."""
        return self.waiting


@dataclass
class _JobState:
    holding: dict[str, float] = field(default_factory=dict)  # pod → GPUs, pods holding now
    succeeded: set[str] = field(default_factory=set)
    present: set[str] = field(default_factory=set)  # pods that exist, not done or gone
    ended: set[str] = field(default_factory=set)  # pods that held and stopped, or are gone
    completed: float | None = None


def _fair_share_gap(
    used: Mapping[str, float],
    mins: Mapping[str, float],
    weights: Mapping[str, float],
    waiting: AbstractSet[str],
) -> tuple[float, str | None]:
    """How many more GPUs (each team's borrowing divided by its weight) the team borrowing
    the most borrows than the least-borrowing team at or above its ``min`` with work
    waiting, and that team (the first by name of equals); ``(0, None)`` if there is no such
    team.  Weights are positive."""

    def borrowed(team: str) -> float:
        return max(0.0, used[team] - mins[team]) / weights[team]

    wanting = sorted(team for team in waiting if team in mins and used[team] >= mins[team])
    if not wanting:
        return 0.0, None
    least = min(wanting, key=borrowed)
    return max(borrowed(team) for team in mins) - borrowed(least), least


def trace_figures(
    sightings: Iterable[PodSighting],
    jobs: Mapping[str, SubmittedJob],
    mins: Mapping[str, float],
    capacity: float,
    horizon: float,
    *,
    sample_seconds: float = 5.0,
    weights: Mapping[str, float] | None = None,
    below_min: list[BelowMin] | None = None,
    gaps: list[GapStretch] | None = None,
) -> dict[str, Any]:
    """The comparison table's figures over ``[0, horizon)``, from every sighting of the
    trace's pods and the jobs submitted (``mins``: each team's GPU ``min``).

    One sweep in time order; between two events nothing changes, and each stretch adds:

    - to **allocation**, the GPUs held (divided by ``capacity * horizon`` at the end);
    - to **partial gangs**, the GPUs held by jobs of more than one pod that have some but
      fewer than they run with (all, or an elastic range's lower end) running or done
      (their GPUs wait for the rest, doing nothing);
    - to a team's **seconds below min**, the stretch if the team holds less than its
      ``min`` while one of its jobs waits that would fit in what the ``min`` leaves (the
      room a guarantee promises: the job's pods not yet running or done, times their GPUs),
      and of those, to its seconds **with no pod to place** if none of those jobs has a
      pod waiting (their controller has not made one: a Job's failure back-off after a
      pod exited on notice, say; a pod that ran and stopped, failed and not yet deleted,
      waits for nothing), time no scheduler could have shortened;
    - to the **fair-share gap**, the stretch times how many more GPUs (weighted by
      ``weights``, 1 each by default) the team borrowing the most borrows than a team at
      or above its ``min`` with a job waiting borrows (0 when no team waits so, or the
      waiting team borrows the most): idle room lent to one team while another wants it.

    ``below_min``, if given, gets each stretch of a team's time below ``min``, and ``gaps``
    each stretch of fair-share gap (for a second look at where they go:
    :mod:`bench.below_min`).

    A pod that stops holding GPUs without succeeding is an **eviction** (preempted,
    given up, or deleted while running); it **loses** its GPUs times the seconds since its
    last save (:func:`unsaved_since`), and is **young** if it had run less than
    ``YOUNG_SECONDS``. A job is **complete** when ``pods`` of its pods
    have succeeded; **pending at the end** when it is neither complete nor running any
    pod at ``horizon``.
    """
    timeline: list[tuple[float, int, PodSighting | str]] = [
        (job.submitted, 0, name) for name, job in jobs.items()
    ]
    timeline += [(s.at, 1, s) for s in sightings if s.job in jobs]
    timeline.sort(key=lambda entry: (entry[0], entry[1]))
    state = {name: _JobState() for name in jobs}
    submitted: set[str] = set()
    ledger = GpuSeconds()  # the pods holding GPUs now, and what evictions lost
    allocated = partial = 0.0
    partial_by_job: dict[str, float] = {}
    below = dict.fromkeys(mins, 0.0)
    below_podless = dict.fromkeys(mins, 0.0)
    weight = {team: (weights or {}).get(team, 1.0) for team in mins}
    if any(value <= 0 for value in weight.values()):
        raise ValueError(f"weights must be positive: {weight}")
    gap_seconds = gap_worst = 0.0
    series: list[tuple[float, float]] = []
    now = 0.0

    def waiting(name: str) -> bool:
        job, js = jobs[name], state[name]
        return js.completed is None and len(js.holding) + len(js.succeeded) < job.pods

    def waiting_of(team: str) -> tuple[str, ...]:
        return tuple(sorted(n for n in submitted if jobs[n].team == team and waiting(n)))

    def podless(names: Iterable[str]) -> bool:
        """None of the jobs ``names`` has a pod waiting to be placed."""
        return not any(state[n].present - state[n].holding.keys() for n in names)

    def advance(until: float) -> None:
        nonlocal now, allocated, partial, gap_seconds, gap_worst
        until = min(until, horizon)
        if until <= now:
            return
        span = until - now
        held = sum(gpus for gpus, _since in ledger.holding.values())
        allocated += held * span
        for name in submitted:
            job, js = jobs[name], state[name]
            running = len(js.holding) + len(js.succeeded)
            if job.pods > 1 and js.holding and waiting(name) and running < job.runs_with:
                held_partly = sum(js.holding.values()) * span
                partial += held_partly
                partial_by_job[name] = partial_by_job.get(name, 0.0) + held_partly
        used = dict.fromkeys(mins, 0.0)
        for name in submitted:
            team = jobs[name].team
            if team in used:
                used[team] += sum(state[name].holding.values())
        gap, least = _fair_share_gap(
            used, mins, weight, {jobs[n].team for n in submitted if waiting(n)}
        )
        gap_seconds += gap * span
        gap_worst = max(gap_worst, gap)
        if gaps is not None and gap > 0 and least is not None:
            waits = waiting_of(least)
            gaps.append(GapStretch(least, now, span, gap, waits, podless(waits)))
        for team, floor in mins.items():
            if used[team] >= floor:
                continue
            fitting = [
                n
                for n in submitted
                if jobs[n].team == team
                and waiting(n)
                and used[team] + _left_to_run(jobs[n], state[n]) <= floor
            ]
            if fitting:
                below[team] += span
                none_to_place = podless(fitting)
                if none_to_place:
                    below_podless[team] += span
                if below_min is not None:
                    below_min.append(
                        BelowMin(
                            team,
                            now,
                            span,
                            tuple(sorted(fitting)),
                            waiting_of(team),
                            none_to_place,
                        )
                    )
        while not series or series[-1][0] + sample_seconds <= until:
            at = series[-1][0] + sample_seconds if series else 0.0
            if at > until:
                break
            series.append((at, held))
        now = until

    for at, _, event in timeline:
        if at >= horizon:
            break
        advance(at)
        if isinstance(event, str):
            submitted.add(event)
            continue
        js = state[event.job]
        holds = event.takes_gpus
        was = event.key in ledger.holding
        if event.gone or event.succeeded or (was and not holds):
            # A bound pod that stops holding has ended (failed, evicted, exited on
            # notice): it lingers until deleted, but it is no pod waiting to be placed.
            js.present.discard(event.key)
            js.ended.add(event.key)
        elif event.key not in js.ended:
            js.present.add(event.key)
        if holds and not was:
            js.holding[event.key] = event.gpus
        elif not holds and was:
            del js.holding[event.key]
        ledger.observe(
            event.key, event.gpus, holds, at, succeeded=event.succeeded, saves=event.saves
        )
        if event.succeeded and event.key not in js.succeeded:
            js.succeeded.add(event.key)
            if len(js.succeeded) >= jobs[event.job].pods and js.completed is None:
                js.completed = at
    advance(horizon)

    done = [
        (jobs[name], js.completed - jobs[name].submitted)
        for name, js in state.items()
        if js.completed is not None
    ]
    done_by_class: dict[str, list[tuple[SubmittedJob, float]]] = {}
    for job, took in done:
        done_by_class.setdefault(job.priority_class, []).append((job, took))
    pending = [n for n in submitted if waiting(n) and not state[n].holding]
    return {
        "gpu_allocation": round(allocated / (capacity * horizon), 4),
        "partial_gang_gpu_seconds": round(partial, 1),
        "partial_gangs_worst": [
            (name, round(gpu_seconds, 1))
            for gpu_seconds, name in sorted(
                ((v, k) for k, v in partial_by_job.items()), reverse=True
            )[:5]
        ],
        "partial_gangs": len(partial_by_job),
        "seconds_below_min_with_pending_work": {t: round(s, 1) for t, s in below.items()},
        "seconds_below_min_with_no_pod_to_place": {
            t: round(s, 1) for t, s in below_podless.items()
        },
        "fair_share_gap_gpus": {
            "mean": round(gap_seconds / horizon, 1),
            "worst": round(gap_worst, 1),
        },
        "job_completion_seconds": {
            name: _completion_row(of_class) for name, of_class in sorted(done_by_class.items())
        },
        "jobs_submitted": len(submitted),
        "jobs_completed": len(done),
        "evicted_pods": ledger.evictions,
        "evictions_per_completed_job": round(ledger.evictions / len(done), 3) if done else None,
        "gpu_seconds_lost_to_eviction": round(ledger.lost_gpu_seconds, 1),
        "evictions_younger_than_60s": ledger.young_evictions,
        "pending_at_end": len(pending),
        "allocated_gpus_series": series,
    }


def _completion_row(done: Sequence[tuple[SubmittedJob, float]]) -> dict[str, float]:
    """Completion p50, p95 and count of these completed jobs (each with the seconds it
    took), and ``p95_floor``: what the p95 would be had none of them waited or lost work,
    their runtimes alone. No scheduler completes them sooner (but by up to a second: the
    kubelet stand-in times a pod from its whole-second ``startTime``). No floor when a
    runtime is not recorded."""
    took = [seconds for _, seconds in done]
    row: dict[str, float] = {
        "p50": round(percentile(took, 0.5) or 0.0, 1),
        "p95": round(percentile(took, 0.95) or 0.0, 1),
        "count": len(took),
    }
    runtimes = [job.runtime for job, _ in done if job.runtime is not None]
    if len(runtimes) == len(done):
        row["p95_floor"] = round(percentile(runtimes, 0.95) or 0.0, 1)
    return row


def _left_to_run(job: SubmittedJob, state: _JobState) -> float:
    """The GPUs a job still needs to run whole: its pods neither running nor done."""
    return (job.pods - len(state.holding) - len(state.succeeded)) * job.gpus_per_pod
