"""Where a run's time below ``min``, or its fair-share gap, goes: each stretch told by why
its work waited.

``bench.peers`` counts a team's seconds below its ``min`` while one of its jobs waits that
would fit in what the ``min`` leaves, and the fair-share gap: the GPUs the team borrowing
the most borrows beyond the least-borrowing team at or above its ``min`` with work waiting
(:func:`bench.workload.trace_figures`).  This reads a kept run (``--json`` and
``--workdir``) again and gives each stretch (with ``--gap``, each stretch of gap, weighed
by its GPUs: GPU-seconds; its jobs are the waiting team's) one cause, the first that
holds:

- **no pod to place**: none of the waiting jobs has a pod waiting (its controller has not
  made one: the Job controller's failure back-off);
- **arriving**: one of them (of a gap, every one) was submitted less than
  :data:`ARRIVING_SECONDS` ago (the scheduling path's own time: pod creation, the
  scheduler's queue, the bind);
- for Muster, from its log (``muster.log``: the PostFilter's line per job), the waiting
  jobs' or their team's latest word before the stretch:
  **victims leaving** (a plan for one of the team's waiting jobs, made less than
  :data:`PLAN_SECONDS` ago and none of the job's pods placed since, one of whose victims
  still holds its GPUs: their notice and grace period), **victims gone, not placed**
  (such a plan's victims have all let go of their GPUs: the scheduling path, or the
  room taken by someone else),
  **held back** by the **guarantee reserve**, **fair sharing** or a **reborrow backoff**
  (the rule turned the job away as a borrower, counting what the team's plans and
  placements hold as used; the first of the jobs' rules in that order), **no plan** (no
  set of allowed victims frees room for the whole job),
  **scheduler's view** (Muster saw room free that kube-scheduler did not yet: pods
  terminating), else **other**.

The causes past the first two need Muster's log; for another system every stretch past
the first two is **other**.
``python -m bench.below_min RUN.json --workdir DIR [--system muster] [--gap]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.peers import recorded_figures, recorded_run
from bench.workload import BelowMin, GapStretch, PodSighting, SubmittedJob

#: A job submitted this recently is still on the scheduling path.
ARRIVING_SECONDS = 3.0
#: A plan this recent is still waiting for its victims to leave (notice up to 60 s).
PLAN_SECONDS = 60.0

CAUSES = (
    "no pod to place",
    "arriving",
    "victims leaving",
    "victims gone, not placed",
    "held back: guarantee reserve",
    "held back: fair sharing",
    "held back: reborrow backoff",
    "no plan",
    "scheduler's view",
    "other",
)

_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \S+ "
    r"(?:(preempting) for ([\w.-]+)/(\w+): |no preemption for ([\w.-]+)/(\w+): (.*))"
)
#: Muster's refusals of a borrower, by the words that name the rule: its word's kind.
_HELD_BACK = {
    "saves no checkpoint": "held back: guarantee reserve",
    "fair share": "held back: fair sharing",
    "reborrow": "held back: reborrow backoff",
}
#: A victim in a plan's line: ``(namespace/name rule``, or ``, namespace/name rule``.
_VICTIM = re.compile(r"[(,] ?([\w.-]+/[\w.-]+) ")
_NO_PLAN = "would not fit even after evicting"
_FITS = "fits without evicting anything"


@dataclass(frozen=True, slots=True)
class Word:
    """One PostFilter line of Muster's log: when (trace seconds), of which job, and what."""

    at: float
    team: str
    job: str
    #: ``"plan"``, one of the ``"held back: …"`` causes, ``"no plan"``, ``"fits"`` or
    #: ``"other"``.
    kind: str
    #: A plan's victims: their pods' keys (``namespace/name``).
    victims: tuple[str, ...] = ()


def read_log(lines: Iterable[str], started_at: float) -> list[Word]:
    """Muster's PostFilter lines, on the trace's clock (``started_at``: its epoch start;
    the log's times are local)."""
    words = []
    for line in lines:
        match = _LINE.match(line.rstrip("\n"))
        if match is None:
            continue
        stamp = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S")
        at = stamp.timestamp() + int(match[2]) / 1000 - started_at
        if match[3]:
            victims = tuple(_VICTIM.findall(line))
            words.append(Word(at, match[4], match[5], "plan", victims))
            continue
        reason = match[8]
        held = next((kind for phrase, kind in _HELD_BACK.items() if phrase in reason), None)
        kind = held or ("no plan" if _NO_PLAN in reason else "fits" if _FITS in reason else "other")
        words.append(Word(at, match[6], match[7], kind))
    return words


#: A stretch told by cause: of a team's time below ``min``, or of fair-share gap.
Stretch = BelowMin | GapStretch


@dataclass(frozen=True, slots=True)
class Holding:
    """When pods took and let go of their GPUs, as the run's sightings show."""

    #: Pod key → when it first stopped holding GPUs it held (finished, or deleted).
    left: Mapping[str, float]
    #: Job → when each of its pods began holding GPUs, in time order.
    placed: Mapping[str, Sequence[float]]

    def placed_between(self, job: str, start: float, end: float) -> bool:
        """Did a pod of ``job`` begin holding GPUs after ``start``, by ``end``?"""
        return any(start < at <= end for at in self.placed.get(job, ()))


def holding(seen: Iterable[PodSighting]) -> Holding:
    """The run's :class:`Holding`, from its sightings."""
    held: set[str] = set()
    left: dict[str, float] = {}
    placed: dict[str, list[float]] = defaultdict(list)
    for sighting in sorted(seen, key=lambda s: s.at):
        holds = sighting.takes_gpus
        if holds and sighting.key not in held:
            held.add(sighting.key)
            placed[sighting.job].append(sighting.at)
        elif not holds and sighting.key in held and sighting.key not in left:
            left[sighting.key] = sighting.at
    return Holding(left, dict(placed))


def cause_of(
    stretch: Stretch,
    jobs: Mapping[str, SubmittedJob],
    words: Sequence[Word] | None,
    held: Holding | None = None,
) -> str:
    """The first of :data:`CAUSES` that holds for ``stretch`` (``words``: Muster's log,
    in time order; ``None`` for another system; ``held``: when pods took and let go of
    their GPUs, :func:`holding`; without it, a recent plan counts as its victims
    leaving)."""
    if stretch.podless:
        return "no pod to place"
    arriving = [stretch.at - jobs[name].submitted < ARRIVING_SECONDS for name in stretch.fitting]
    # Of a gap, every waiting job: one that has waited longer is what the gap waits for.
    if all(arriving) if isinstance(stretch, GapStretch) else any(arriving):
        return "arriving"
    if words is None:
        return "other"
    before = [w for w in words if w.at <= stretch.at]
    plans = [
        w
        for w in before
        if w.kind == "plan"
        and w.job in stretch.waiting
        and stretch.at - w.at < PLAN_SECONDS
        and not (held is not None and held.placed_between(w.job, w.at, stretch.at))
    ]
    if plans:
        if held is None or any(
            held.left.get(victim, math.inf) > stretch.at for w in plans for victim in w.victims
        ):
            return "victims leaving"
        return "victims gone, not placed"
    last = {w.job: w.kind for w in before if w.job in stretch.fitting}
    kinds = set(last.values())
    for kind in (*_HELD_BACK.values(), "no plan"):
        if kind in kinds:
            return kind
    return "scheduler's view" if "fits" in kinds else "other"


def causes(
    stretches: Iterable[Stretch],
    jobs: Mapping[str, SubmittedJob],
    words: Sequence[Word] | None,
    held: Holding | None = None,
) -> dict[str, float]:
    """Team-seconds below ``min`` (for stretches of gap, GPU-seconds of gap: each second
    times its GPUs) per cause, in :data:`CAUSES` order.  A stretch is cut where its cause
    may change (an arrival's window ends, a word is logged, a plan's window ends, a
    victim lets go, a pod is placed), each piece told by its start."""
    seconds: dict[str, float] = defaultdict(float)
    for stretch in stretches:
        weight = stretch.gpus if isinstance(stretch, GapStretch) else 1.0
        for piece in _pieces(stretch, jobs, words or (), held):
            seconds[cause_of(piece, jobs, words, held)] += piece.seconds * weight
    return {cause: round(seconds.get(cause, 0.0), 1) for cause in CAUSES}


def _pieces(
    stretch: Stretch,
    jobs: Mapping[str, SubmittedJob],
    words: Sequence[Word],
    held: Holding | None,
) -> list[Stretch]:
    start, end = stretch.at, stretch.at + stretch.seconds
    cuts = {jobs[name].submitted + ARRIVING_SECONDS for name in stretch.fitting}
    for word in words:
        if word.job in stretch.waiting:
            cuts.update((word.at, word.at + PLAN_SECONDS))
            if held is not None:
                cuts.update(held.left[victim] for victim in word.victims if victim in held.left)
    if held is not None:
        cuts.update(at for name in stretch.waiting for at in held.placed.get(name, ()))
    edges = [start, *sorted(cut for cut in cuts if start < cut < end), end]
    return [dataclasses.replace(stretch, at=a, seconds=b - a) for a, b in itertools.pairwise(edges)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.below_min", description=__doc__)
    parser.add_argument("run", type=Path, help="a bench.peers --json results file")
    parser.add_argument("--workdir", type=Path, required=True, help="the run's --workdir")
    parser.add_argument("--system", default="muster")
    parser.add_argument(
        "--gap", action="store_true", help="tell the fair-share gap's GPU-seconds by cause"
    )
    options = parser.parse_args(argv)

    try:
        results = json.loads(options.run.read_text())
        figures = results["systems"][options.system]
        jobs, seen = recorded_run(options.workdir, options.system)
    except (OSError, KeyError, ValueError) as error:
        print(f"bench.below_min: {error}", file=sys.stderr)
        return 2
    below: list[BelowMin] = []
    gaps: list[GapStretch] = []
    recorded_figures(results, jobs, seen, below_min=below, gaps=gaps)
    stretches: Sequence[Stretch] = gaps if options.gap else below
    words = None
    log = options.workdir / options.system / "muster.log"
    if options.system == "muster" and log.is_file():
        with log.open() as lines:
            words = read_log(lines, 0.0)
        started = figures.get("trace_started_at")
        if started is None:
            # A run from before it was recorded: no job is named before it is submitted,
            # and the first is named within a few milliseconds of it.
            started = min(w.at - jobs[w.job].submitted for w in words if w.job in jobs)
        words = [dataclasses.replace(w, at=w.at - started) for w in words]
    if options.gap:
        total = sum(s.seconds * s.gpus for s in gaps)
        print(f"GPU-seconds of fair-share gap: {total:.1f}")
    else:
        print(f"team-seconds below min with work that fits: {sum(s.seconds for s in below):.1f}")
    for cause, seconds in causes(stretches, jobs, words, holding(seen)).items():
        print(f"  {cause:30s} {seconds:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
