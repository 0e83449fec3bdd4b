"""Ask again about a job that fits as Muster sees it, though kube-scheduler found it
unschedulable.

Muster's view can lag kube-scheduler's by a binding in flight: kube-scheduler assumes a
pod on a node, goes on to the next pod, finds no room for it and asks Muster to
preempt, before the first pod's bind has reached Muster.  The planner then finds that
the job fits without evicting anything, and nothing else asks again: kube-scheduler
retries a pod its own filters rejected only when room frees, and the Requeuer nudges
only pods Muster turned away.  So such a job is planned again, a few times, a little
later each time (by then the binding has landed, and the plan sees the room taken).

Only a job that fits on room free now: one that fits only once pods leaving have gone
(a plan counts their room free) is tried again by kube-scheduler itself when they are
deleted, and a plan made for it in the meantime would evict for room about to free.  And
only while no bound pod has left since (deleted, or finished: the state's ``freed``
count): kube-scheduler retries the pods it found no room for on that event itself, with
the room it freed, and a recheck then would plan evictions for a job that may now fit
without (on a busy cluster, most of them).
"""

from __future__ import annotations

import math

#: Seconds before the first recheck; each next one waits twice as long.
FIRST_RECHECK_SECONDS = 1.0
#: Rechecks of a job that keeps fitting (1 + 2 + 4 + 8 s: past a bind on a loaded
#: machine), after which kube-scheduler's own events must ask.
RECHECKS = 4
#: Seconds after a job's last recheck past which a new fit starts its rechecks anew (the
#: job bound and left, or was recreated under its name, since): well past the 15 s a
#: run of rechecks spans.
QUIET_SECONDS = 60.0
#: Jobs whose rechecks are counted at once (the count is reset past this).
JOBS_REMEMBERED = 10_000


class FitsRechecks:
    """How many times each job was found fitting in a row, and when to ask again."""

    def __init__(self) -> None:
        # job -> (rechecks made in a row, when the last was asked for, the freed count then)
        self._made: dict[str, tuple[int, float, int]] = {}
        self._due: dict[str, float] = {}  # job -> when its next recheck is due

    def after_refusal(self, job: str, now: float, fits_now: bool, freed: int) -> None:
        """``job`` was refused at ``now``: its next recheck, if it gets one
        (:meth:`next_after`)."""
        at = self.next_after(job, now, fits_now, freed)
        if at is not None:
            self._due[job] = at

    def due(self, now: float, freed: int) -> list[str]:
        """The jobs whose recheck is due at ``now`` and not :meth:`superseded` (the
        state's count is ``freed`` now), by name; each is asked once."""
        jobs = sorted(job for job, at in self._due.items() if at <= now)
        for job in jobs:
            del self._due[job]
        return [job for job in jobs if not self.superseded(job, freed)]

    def next_due(self) -> float:
        """When the next recheck is due (infinity if none is)."""
        return min(self._due.values(), default=math.inf)

    def next_after(
        self, job: str, now: float, fits_now: bool = True, freed: int = 0
    ) -> float | None:
        """``job`` was refused at ``now``, found fitting on room free now or not
        (``fits_now``), the state's ``freed`` count then: when to plan it again for that,
        or ``None`` (not fitting, or its rechecks spent)."""
        if not fits_now:
            self.forget(job)
            return None
        made, last, _ = self._made.get(job, (0, now, freed))
        if now - last > QUIET_SECONDS:
            made = 0
        if made >= RECHECKS:
            return None
        if len(self._made) >= JOBS_REMEMBERED:
            self._made.clear()
        self._made[job] = (made + 1, now, freed)
        return now + FIRST_RECHECK_SECONDS * float(2**made)

    def superseded(self, job: str, freed: int) -> bool:
        """Has a bound pod left since ``job`` was last found fitting (the state's count is
        ``freed`` now)?  Then kube-scheduler tries its pods again itself, and the recheck
        due is not made."""
        made = self._made.get(job)
        return made is not None and made[2] != freed

    def forget(self, job: str) -> None:
        """``job`` was decided otherwise (a plan, or another refusal): a later fit
        starts its rechecks anew."""
        self._made.pop(job, None)
