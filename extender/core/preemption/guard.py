"""The ``preempt`` verb's guard on kube-scheduler's own priority preemption.

kube-scheduler proposes victims per node from its own dry run, which knows
nothing of quotas, gangs or soft eviction.  The guard keeps only victims the
job-level rules would also pick, and only nodes where those still make room:

- a pod of a gang (any pod with a pod-group name) gets no victims at all:
  evicting for one pod of a gang is the partial preemption Muster exists to
  prevent, so the job is handed to the PostFilter, which decides for the
  whole job;
- a preemptor whose job may not trigger preemption gets none either;
- a victim is dropped if Muster does not know it, or it is not preemptible,
  belongs to a gang (kube-scheduler would evict part of it), is already
  marked or promised, terminating, or outside the preemptor quota's policies,
  or if evicting it would take a reclaimed quota below its ``min``;
- a node is dropped if the victims left do not make room for the pod there
  (room held for other jobs' reservations counts as taken), or if the pod's
  quota would still not admit it once they are gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from extender.core.jobs import may_trigger_preemption
from extender.core.objects import PodInfo
from extender.core.preemption.candidates import Preemptor, preemptor_admits
from extender.core.resources import add_into, fits
from extender.core.scheduling import job_demand
from extender.core.snapshot import Snapshot, UnknownQuotaError
from quota.admission import job_admission_failures, min_violation, would_borrow


@dataclass(frozen=True, slots=True)
class GuardResult:
    victims: dict[str, list[str]]  # node → victim UIDs, non-empty lists only
    #: Why victims or nodes were dropped (for the decision log).
    notes: tuple[str, ...]
    #: The whole job should go to the PostFilter instead.
    hand_to_postfilter: bool = False


def guard_scheduler_preemption(
    snapshot: Snapshot, pod: PodInfo, proposed: Mapping[str, Sequence[str]]
) -> GuardResult:
    """Filter kube-scheduler's proposed ``node → victim UIDs`` by the job-level rules."""
    if pod.group is not None:
        return GuardResult({}, (f"{pod.key} belongs to gang {pod.job}",), hand_to_postfilter=True)
    if not may_trigger_preemption(pod, snapshot.args):
        return GuardResult({}, (f"{pod.key} may not trigger preemption",))
    try:
        demand = job_demand(snapshot, pod.job, including=pod)
    except UnknownQuotaError as error:
        return GuardResult({}, (f"pod names unknown quota {error.args[0]!r}",))
    request = demand.request
    preemptor = Preemptor(
        job=pod.job,
        quota=demand.quota,
        priority=pod.priority,
        created=pod.created,
        borrows=would_borrow(snapshot.ledger, demand.quota, request, demand.asks),
        contested=demand.asks,
    )
    by_uid = {p.uid: p for p in snapshot.pods.values() if p.node_name in proposed}
    promised = {key for r in snapshot.reservations.values() for key in r.victims}
    kept: dict[str, list[str]] = {}
    notes = []
    for node, uids in sorted(proposed.items()):
        if node not in snapshot.nodes:
            notes.append(f"{node}: unknown node")
            continue
        ledger = snapshot.ledger.overlay()
        free = snapshot.free_on(node, for_pod=pod.key)
        chosen = []
        for uid in uids:
            victim = by_uid.get(uid)
            why = _veto(snapshot, victim, node, preemptor, promised)
            if victim is not None and why is None:
                quota = snapshot.quota_of(victim)
                if quota != preemptor.quota:
                    path = snapshot.tree.path_below_common_ancestor(quota, preemptor.quota)
                    why = min_violation(ledger, path, victim.requests, preemptor.contested)
                if why is None:
                    ledger.charge(quota, victim.requests, preemptible=True, used=True, sign=-1)
                    add_into(free, victim.requests)
                    chosen.append(uid)
                    continue
            notes.append(f"{node}: victim {uid} dropped: {why}")
        if not chosen:
            continue
        if not fits(pod.requests, free):
            notes.append(f"{node}: the victims left do not make room")
            continue
        failures = job_admission_failures(ledger, demand.quota, demand.np_request, demand.p_request)
        if failures:
            notes.append(f"{node}: the pod's quota would still not admit it: {failures[0]}")
            continue
        kept[node] = chosen
    return GuardResult(kept, tuple(notes))


def _veto(
    snapshot: Snapshot,
    victim: PodInfo | None,
    node: str,
    preemptor: Preemptor,
    promised: set[str],
) -> str | None:
    if victim is None:
        return "unknown to Muster"
    if victim.node_name != node:
        return "not on this node"
    if not snapshot.preemptible(victim):
        return "not preemptible"
    if victim.group is not None:
        return f"it belongs to gang {victim.job}, which goes whole or not at all"
    if victim.soft_evicted or victim.key in promised:
        return "already marked for eviction"
    if victim.terminating:
        return "already terminating"
    quota = snapshot.quota_name(victim)
    if quota is None:
        return "its quota is unknown"
    if not preemptor_admits(snapshot, preemptor, victim, quota):
        return f"the policies of quota {preemptor.quota} do not allow it"
    return None
