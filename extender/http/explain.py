"""JSON views for the ``/debug/`` endpoints: quotas, jobs, budgets, and why a pod is
pending."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from base.times import format_time
from extender.core.decisions import DecisionLog
from extender.core.filter.admission import admission_failures
from extender.core.filter.gangstatus import GangStatus, gang_status
from extender.core.objects import PodInfo
from extender.core.state import ClusterState
from quota.accounting import usage_report


def quotas(state: ClusterState) -> dict[str, Any]:
    result = {}
    for name, spec in sorted(state.tree.specs.items()):
        result[name] = {
            "namespace": spec.namespace,
            "parent": spec.parent,
            **usage_report(state.ledger, name),
            "policy": {
                "withinQuota": spec.policy.within_quota.value,
                "reclaimWithinCohort": spec.policy.reclaim_within_cohort.value,
                "borrowWithinCohort": spec.policy.borrow_within_cohort.value,
                "maxPriorityThreshold": spec.policy.max_priority_threshold,
                "stopPolicy": spec.policy.stop_policy.value,
            },
        }
    return result


def budgets(state: ClusterState) -> dict[str, Any]:
    """The PodDisruptionBudgets the planner weighs: disruptions allowed, pods covered."""
    result = {}
    for key, budget in sorted(state.budgets.items()):
        covered = sorted(
            pod.key
            for pod in state.pods.values()
            if pod.namespace == budget.namespace and budget.covers(pod)
        )
        result[key] = {"disruptionsAllowed": budget.disruptions_allowed, "pods": covered}
    return result


def waiting_pods(state: ClusterState) -> Iterator[PodInfo]:
    """Pending pods no reservation or admission hold covers: the ones still waiting."""
    for pod in state.pods.values():
        if pod.node_name is None and not pod.finished and not state.counts_as_used(pod):
            yield pod


def jobs(state: ClusterState, now: float) -> dict[str, Any]:
    """Jobs with pods still pending, holding a reservation, or backing off; gangs with
    where they stand (:func:`extender.core.filter.gangstatus.gang_status`)."""
    pending: dict[str, int] = {}
    for pod in waiting_pods(state):
        pending[pod.job] = pending.get(pod.job, 0) + 1
    result = {}
    for job in sorted(set(pending) | set(state.reservations) | set(state.book.backoffs)):
        pods = state.members.job_pods(job)
        reservation = state.reservations.get(job)
        gang = gang_status(state, job) if any(p.group is not None for p in pods) else None
        result[job] = {
            "pods": len(pods),
            "pending": pending.get(job, 0),
            "minAvailable": state.declarations.min_available(job),
            "quota": state.quota_name(pods[0]) if pods else None,
            "state": "in flight" if reservation is not None else "pending",
            "reservation": None
            if reservation is None
            else {
                "placements": dict(reservation.placements),
                # room of deleted pods kept for the pods replacing them
                "vacated": {
                    state.book.vacancies[holder].pod_key: state.book.vacancies[holder].node
                    for holder in state.book.vacancies_of(job)
                },
                "victims": list(reservation.victims),
                "expires": format_time(reservation.expires),
                "expiresInSeconds": round(reservation.expires - now),
            },
            "gang": None if gang is None else _gang(gang, now),
            "topology": _topology(state, job),
        }
    return result


def _topology(state: ClusterState, job: str) -> dict[str, Any] | None:
    """The job's topology request and the domain its bound and reserved pods are in, and
    its slices (Kueue's podset slices: ``slices``, only when it asks for them)."""
    placement = state.topology_placement(job)
    slices = state.declarations.slice_request(job)
    if placement is None and slices is None:
        return None
    found: dict[str, Any] = {}
    if placement is not None:
        request, domain = placement
        found = {"level": request.level, "required": request.required, "domain": domain}
    if slices is not None:
        found["slices"] = {"level": slices.level, "size": slices.size}
    return found


def _gang(status: GangStatus, now: float) -> dict[str, Any]:
    backoff = status.backoff
    return {
        "phase": status.phase,
        "created": status.created,
        "scheduled": status.scheduled,
        "running": status.running,
        "reserved": status.reserved,
        "backoff": None
        if backoff is None
        else {
            "attempts": backoff.attempts,
            "givenUp": format_time(backoff.given_up),
            "retryAt": None if backoff.until is None else format_time(backoff.until),
            "retryInSeconds": None if backoff.until is None else max(0, round(backoff.until - now)),
        },
    }


def pod(state: ClusterState, log: DecisionLog, key: str, now: float) -> dict[str, Any] | None:
    """What Muster knows and last decided about one pod, or ``None`` if nothing."""
    info = state.pods.get(key)
    decisions = log.for_pod(key)
    if info is None and not decisions:
        return None
    result: dict[str, Any] = {"pod": key}
    if info is not None:
        result |= {
            "job": info.job,
            "quota": state.quota_name(info),
            "node": info.node_name,
            "reservedNode": state.reserved_node(key),
            "preemptible": state.preemptible(info),
            "priority": info.priority,
            # When the work it would lose began: its start, or its last checkpoint.
            "workStarted": format_time(info.work_started),
            "quotaAdmission": admission_failures(state, info, now) or "admitted",
        }
        topology = _topology(state, info.job)
        if topology is not None:  # only for a job with a topology request
            result["topology"] = topology
    result["decisions"] = [
        {"at": format_time(d.at), "verb": d.verb, "outcome": d.outcome, "reasons": list(d.reasons)}
        for d in decisions
    ]
    return result
