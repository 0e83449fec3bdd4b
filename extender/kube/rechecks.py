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
deleted, and a plan made for it in the meantime would evict for room about to free.
"""

from __future__ import annotations

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
        # job -> (rechecks made in a row, when the last was asked for)
        self._made: dict[str, tuple[int, float]] = {}

    def next_after(self, job: str, now: float, fits_now: bool = True) -> float | None:
        """``job`` was refused at ``now``, found fitting on room free now or not
        (``fits_now``): when to plan it again for that, or ``None`` (not fitting, or its
        rechecks spent)."""
        if not fits_now:
            self.forget(job)
            return None
        made, last = self._made.get(job, (0, now))
        if now - last > QUIET_SECONDS:
            made = 0
        if made >= RECHECKS:
            return None
        if len(self._made) >= JOBS_REMEMBERED:
            self._made.clear()
        self._made[job] = (made + 1, now)
        return now + FIRST_RECHECK_SECONDS * float(2**made)

    def forget(self, job: str) -> None:
        """``job`` was decided otherwise (a plan, or another refusal): a later fit
        starts its rechecks anew."""
        self._made.pop(job, None)
