"""The ``preempt`` verb: Muster stays the only preemption authority for its pods.

kube-scheduler calls the verb when its own dry run found lower-priority pods
whose deletion would make room for a pod, proposing ``node → victims``; the
answer is what it deletes.  It would delete them outright, without the
soft-eviction mark, and race Muster's own plan for the same job.  So, by
:func:`extender.core.authority.governing_reason`:

- a preemptor Muster governs gets no victims at all, and its job is planned
  by the PostFilter at once (this call is the earliest sign that it needs
  room): kube-scheduler then evicts nothing and marks the pod unschedulable;
- any other preemptor keeps only victims Muster does not govern either (a
  pod in a quota or a gang is preempted only by Muster, and marked), and only
  nodes where those still make room, room held for Muster's reservations
  counting as taken; with, per node, how many of them their
  PodDisruptionBudgets do not allow (``NumPDBViolations``, from the budgets
  Muster reads, not kube-scheduler's count for its own proposal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from base.resources import fits
from extender.core.authority import governing_reason
from extender.core.budgets import BudgetUse
from extender.core.objects import PodInfo
from extender.core.state import ClusterState, Overlay


@dataclass(frozen=True, slots=True)
class GuardResult:
    victims: dict[str, list[str]]  # node → victim UIDs, non-empty lists only
    #: Why victims or nodes were dropped (for the decision log).
    notes: tuple[str, ...]
    #: Muster governs the preemptor: its job goes to the PostFilter instead.
    hand_to_postfilter: bool = False
    #: node → how many of its kept victims their PodDisruptionBudgets do not allow.
    pdb_violations: dict[str, int] = field(default_factory=dict)


def guard_scheduler_preemption(
    state: ClusterState, pod: PodInfo, proposed: Mapping[str, Sequence[str]]
) -> GuardResult:
    """Answer kube-scheduler's proposed ``node → victim UIDs`` for ``pod``."""
    governed = governing_reason(state, pod)
    if governed is not None:
        note = f"Muster preempts for {pod.key} itself, for its whole job: {governed}"
        return GuardResult({}, (note,), hand_to_postfilter=True)
    by_uid = {p.uid: p for node in proposed for p in state.pods_on(node)}
    promised = state.book.promised_victims()
    # The pod's own reserved room never blocks it; a pod Muster does not govern has none.
    overlay = Overlay(state)
    kept: dict[str, list[str]] = {}
    notes = []
    for node, uids in sorted(proposed.items()):
        if node not in state.nodes:
            notes.append(f"{node}: unknown node")
            continue
        chosen = []
        for uid in uids:
            victim = by_uid.get(uid)
            why = _veto(state, victim, promised)
            if victim is not None and why is None:
                overlay.take([victim])
                chosen.append(uid)
            else:
                notes.append(f"{node}: victim {uid} dropped: {why}")
        if not chosen:
            continue
        if not fits(pod.requests, overlay.room(node)):
            notes.append(f"{node}: the victims left do not make room")
            continue
        kept[node] = chosen
    budgets = BudgetUse(state.budgets.values())
    violations = {
        node: budgets.violation_count(by_uid[uid] for uid in uids) for node, uids in kept.items()
    }
    return GuardResult(kept, tuple(notes), pdb_violations=violations)


def _veto(state: ClusterState, victim: PodInfo | None, promised: set[str]) -> str | None:
    if victim is None:
        return "unknown to Muster on this node"
    if victim.departing or victim.key in promised:
        return "already on its way out"
    governed = governing_reason(state, victim)
    if governed is not None:
        return f"Muster governs it ({governed}): only Muster preempts it, and marks it"
    return None
