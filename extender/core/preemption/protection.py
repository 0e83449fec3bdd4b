"""Victims another quota's plan spares for a while: a job young or not yet whole.

Reclaim and fair-sharing preemption (a plan taking another quota's pods) pass over a
victim group while it is protected:

- **minimum runtime**: a job admitted less than its quota's
  ``muster.dev/min-runtime-seconds`` (else ``minRuntimeSeconds``) ago
  (:func:`protected_until`), so a job is not admitted, reclaimed and admitted again in a
  loop; the planner asks again when the first such protection ends (the refusal's
  ``retry_at``);
- **a gang in flight**: a gang that holds room reserved for the pods it still waits for,
  with fewer than its min-available pods bound (:func:`in_flight`).  Its bound
  pods do no work until the rest join them, so they are the cheapest victims by lost
  work, yet taking them throws away the room its own plan evicted for and sends the
  gang back to plan (and evict) again.  Spared while a plan without it exists, even one
  that breaks a guarantee or a budget the planner's later passes allow; taken only when
  none does (``_plan`` in :mod:`.planner`).

A plan inside the job's own quota follows that quota's policy instead: a
higher-priority job may take a young job or a gang in flight.
"""

from __future__ import annotations

from extender.core.gangsize import bound_count
from extender.core.preemption.groups import VictimGroup
from extender.core.state import ClusterState


def min_runtimes(state: ClusterState) -> dict[str, float]:
    """Each quota's minimum runtime (``muster.dev/min-runtime-seconds``, else
    ``minRuntimeSeconds``), for the quotas that have one."""
    runtimes = {}
    for name, spec in state.tree.specs.items():
        runtime = spec.policy.min_runtime_seconds
        if runtime is None:
            runtime = state.args.min_runtime_seconds
        if runtime > 0:
            runtimes[name] = runtime
    return runtimes


def protected_until(state: ClusterState, group: VictimGroup, runtime: float) -> float:
    """Until when reclaim spares ``group``'s job: its admission (the earliest start among
    the pods evicted with it, or, for pods an elastic job sheds, among all its running
    pods: a job cannot stay young by restarting pods) plus its quota's minimum
    ``runtime`` (:func:`min_runtimes`)."""
    pods = state.victims.unit_pods().get(group.job, group.pods) if group.shed else group.pods
    return min(pod.start_or_created for pod in pods) + runtime


def gangs_in_flight(state: ClusterState) -> frozenset[str]:
    """Every gang in flight (:func:`in_flight`): read once per search, from the few jobs
    holding a reservation, not per victim."""
    return frozenset(job for job in state.reservations if in_flight(state, job))


def in_flight(state: ClusterState, job: str) -> bool:
    """Is ``job`` a gang in flight: it holds a reservation, needs more than one pod, and
    has fewer than its min-available pods bound (and staying)?"""
    if job not in state.reservations:
        return False
    needed = state.declarations.min_available(job)
    return needed >= 2 and bound_count(state, job) < needed
