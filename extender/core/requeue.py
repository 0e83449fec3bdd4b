"""Which parked pods to nudge: room appeared for them that kube-scheduler cannot see.

kube-scheduler parks a pod an extender rejected and retries it on Pod and Node
events, or after its five-minute flush; it does not watch ElasticQuotas or Muster's
reservations.  So when room appears that only Muster sees (a quota's ``min`` or
``max`` raised, a quota or parent deleted, a stop policy lifted, a reservation or an
admission hold released), the front door nudges the parked pods of the jobs that
now pass Muster's filter (any update makes kube-scheduler retry a parked pod).

:func:`pods_to_requeue` says which, oldest first; also the pods parked while their
gang was short, now that it is complete (:func:`extender.core.filter.gangstatus.parked_too_early`).
Pure: the front door keeps the parked pods' messages (kube-scheduler's
``PodScheduled`` condition) and does the writing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from extender.core.filter.gangstatus import parked_too_early
from extender.core.filter.verb import filter_pod
from extender.core.objects import PodInfo
from extender.core.state import ClusterState

#: Text of Muster's own rejections, as kube-scheduler quotes them in its message: a
#: pod parked for anything else waits for kube-scheduler's own events.
MUSTER_REASONS = ("quota ", "reserved", "is stopped")


def turned_away_by_muster(message: str) -> bool:
    """Was a pod parked with this message turned away by Muster's quota or reservations?"""
    return any(text in message for text in MUSTER_REASONS)


def pods_to_requeue(state: ClusterState, parked: Mapping[str, str], now: float) -> list[str]:
    """Of the parked pods (key → kube-scheduler's Unschedulable message), those to nudge:
    turned away by Muster for quota or reserved room, whose job's first parked pod
    Muster's filter now passes on some node; and those parked while their gang was
    short, now complete.  Oldest pod first."""
    chosen: dict[str, PodInfo] = {
        key: state.pods[key] for key in parked_too_early(state, parked, now)
    }
    by_job: dict[str, list[PodInfo]] = {}
    for key, message in parked.items():
        pod = state.pods.get(key)
        if pod is None or pod.node_name is not None or not turned_away_by_muster(message):
            continue
        by_job.setdefault(pod.job, []).append(pod)
    names = sorted(state.nodes)
    for pods in by_job.values():
        pods.sort(key=lambda pod: (pod.created, pod.key))
        result = filter_pod(state, pods[0], names, as_extender=False, now=now)
        if result.passed and not result.quota_failures:
            chosen.update((pod.key, pod) for pod in pods)
    return [pod.key for pod in sorted(chosen.values(), key=lambda pod: (pod.created, pod.key))]


def jobs_to_replan(state: ClusterState, parked: Collection[str]) -> list[str]:
    """The jobs of the ``parked`` pods (kube-scheduler found them unschedulable) still
    pending with no reservation, by name: what the PostFilter plans again when room its
    plans counted as leaving turns out to stay (pods stuck terminating:
    :meth:`~extender.core.state.cluster.ClusterState.expire_departures`), since no event
    of kube-scheduler's will ask for them."""
    jobs = set()
    for key in parked:
        pod = state.pods.get(key)
        if (
            pod is not None
            and pod.node_name is None
            and not pod.finished
            and not pod.terminating
            and pod.job not in state.reservations
        ):
            jobs.add(pod.job)
    return sorted(jobs)
