"""Which victims' Jobs are restarted whole rather than their pods evicted.

A Job's pods evicted one by one come back only after the Job controller's failure
backoff: 10 s, doubled for each pod failed since the Job last had one succeed, up to six
minutes, even for pods its ``podFailurePolicy`` ignores (kubernetes#130881).  Measured on
the local control plane, a Job of two pods evicted twice had its replacements created 19
s, then 80 s after the evictions.  A suspended Job's pods are deleted without counting as
failures, and a resumed Job creates its pods at once (Kueue preempts Jobs that way): so
when a plan takes every pod of a Job, the victims' marks say so (``restartJob``), and the
evictor suspends the Job instead of evicting its pods, then resumes it once they are gone
(:mod:`extender.kube.restarter`).  The replacements then wait for room as any new pods do.

A victim's Job is restarted only when nothing is lost by it:

- ``restartEvictedJobs`` is on (the default);
- the pod's controller is a Job, and the pod carries the label the Job controller puts
  on the pods it creates (``batch.kubernetes.io/controller-uid``: a ``batch/v1`` Job's
  pod, not another API's Job);
- every other pod of that Job has finished, is terminating, or is a victim of the same
  plan: the suspension deletes all of them, never a pod the plan spares or one waiting
  to be placed;
- no PodDisruptionBudget covers one of them: a suspension is not an eviction, and asks
  no budget.

Victims with notice to save their work (declared, or to their next save) keep it: the
suspension deletes all the Job's pods at once, so each of them gets the longest notice of
the Job's victims, and the evictor suspends the Job once every one of them is due, has
answered (``muster.dev/checkpointed``), or has exited (:mod:`extender.kube.evictor`).
:func:`extender.core.preemption.completion.completion_notices` gives the same answers
when a restarted Muster marks the victims of a plan the one before it made.
"""

from __future__ import annotations

from collections.abc import Iterable

from extender.core.objects import PodInfo
from extender.core.state import ClusterState

#: The kind of controller that is restarted: a ``batch/v1`` Job.
JOB_KIND = "Job/"
#: The label the ``batch/v1`` Job controller puts on the pods it creates.
JOB_CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


def restarted_jobs(
    state: ClusterState, victims: Iterable[tuple[PodInfo, float]]
) -> dict[str, float]:
    """The ``victims`` (all of one plan, each with the notice it gets, declared or to its
    next save) whose Jobs are restarted whole (see the module docstring), by key, each
    with the notice it gets then: the longest of its Job's victims'."""
    if not state.args.restart_evicted_jobs:
        return {}
    by_job: dict[tuple[str, str], list[PodInfo]] = {}
    notices: dict[str, float] = {}
    for pod, notice in victims:
        notices[pod.key] = notice
        if (
            pod.controller is not None
            and pod.controller.startswith(JOB_KIND)
            and JOB_CONTROLLER_UID_LABEL in pod.labels
        ):
            by_job.setdefault((pod.namespace, pod.controller), []).append(pod)
    restarted: dict[str, float] = {}
    for (namespace, controller), pods in by_job.items():
        taken = {pod.key for pod in pods}
        others = (
            state.pods[key]
            for key in state.members.controller_pods(namespace, controller)
            if key not in taken
        )
        if any(not (pod.finished or pod.terminating) for pod in others):
            continue
        if any(budget.covers(pod) for budget in state.budgets.values() for pod in pods):
            continue
        longest = max(notices[key] for key in taken)
        restarted.update(dict.fromkeys(taken, longest))
    return restarted
