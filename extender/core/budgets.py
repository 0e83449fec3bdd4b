"""PodDisruptionBudgets (policy/v1) as the planner weighs them.

A budget selects pods of its namespace by label and allows
``status.disruptionsAllowed`` more voluntary disruptions (the disruption
controller keeps that figure current; the Eviction API refuses an eviction
beyond it).  The planner prefers victim sets that violate no budget, counting
the victims of one plan under the same budget together (:class:`BudgetUse`);
with ``pdbPolicy: Strict`` it never picks a victim a budget forbids.  The
preempt verb reports the violations of the victims it keeps.

A plan whose victim a budget still refuses ``victimEvictionDeadlineSeconds``
after it was marked is abandoned
(:func:`extender.core.settling.refused_victims`).

Parsed by one function for the informer and ``simulate``
(:func:`parse_pod_disruption_budget`); a bad selector is a
:class:`~base.errors.ManifestError` naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from base.errors import ManifestError
from base.fields import mapping, string
from extender.core.constraints import LabelSelector, parse_label_selector, selects
from extender.core.objects import PodInfo


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    #: ``None``: the budget selects no pod (policy/v1: a null selector selects nothing).
    selector: LabelSelector | None
    disruptions_allowed: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, pod: PodInfo) -> bool:
        return (
            self.selector is not None
            and pod.namespace == self.namespace
            and selects(self.selector, pod.labels)
        )


def parse_pod_disruption_budget(obj: Mapping[str, Any]) -> DisruptionBudget:
    """A PodDisruptionBudget object → :class:`DisruptionBudget`."""
    metadata = mapping(obj.get("metadata"), "metadata")
    name = string(metadata.get("name"), "metadata.name")
    if not name:
        raise ManifestError("metadata.name", "expected a non-empty string")
    spec = mapping(obj.get("spec"), "spec")
    raw = spec.get("selector")
    selector = None if raw is None else parse_label_selector(raw, "spec.selector")
    status = mapping(obj.get("status"), "status")
    allowed = status.get("disruptionsAllowed", 0)
    if isinstance(allowed, bool) or not isinstance(allowed, int) or allowed < 0:
        raise ManifestError(
            "status.disruptionsAllowed", f"{allowed!r} is not a non-negative integer"
        )
    namespace = string(metadata.get("namespace"), "metadata.namespace") or "default"
    return DisruptionBudget(namespace, name, selector, allowed)


class BudgetUse:
    """The disruptions a plan has used so far, per budget: victims taken out and put back.

    ``spent``: earlier plans' victims not evicted yet (marked, or promised), which
    ``disruptionsAllowed`` does not count yet though their eviction will: the disruption
    controller lowers it only once a pod is terminating or gone.
    """

    def __init__(self, budgets: Iterable[DisruptionBudget], spent: Iterable[PodInfo] = ()) -> None:
        self._by_namespace: dict[str, list[DisruptionBudget]] = {}
        for budget in budgets:
            self._by_namespace.setdefault(budget.namespace, []).append(budget)
        self._used: dict[str, int] = {}
        self._spent: dict[str, int] = {}
        for budget, count in self._count(spent):
            self._spent[budget.key] = count

    def violations(self, pods: Iterable[PodInfo]) -> list[str]:
        """The budgets evicting ``pods`` as well would break, in words (empty: none)."""
        wanted = self._count(pods)
        broken = []
        for budget, count in wanted:
            used = self._used.get(budget.key, 0)
            spent = self._spent.get(budget.key, 0)
            if spent + used + count > budget.disruptions_allowed:
                notes = [f"{used} used by this plan"] if used else []
                if spent:
                    notes.append(f"{spent} by victims of plans in flight")
                broken.append(
                    f"PodDisruptionBudget {budget.key} allows "
                    f"{budget.disruptions_allowed} disruptions"
                    + (f" ({', '.join(notes)})" if notes else "")
                )
        return broken

    def take(self, pods: Iterable[PodInfo], sign: int = 1) -> None:
        for budget, count in self._count(pods):
            self._used[budget.key] = self._used.get(budget.key, 0) + sign * count

    def violation_count(self, pods: Iterable[PodInfo]) -> int:
        """How many of ``pods``, evicted together, their budgets do not allow."""
        over = 0
        for budget, count in self._count(pods):
            allowed = budget.disruptions_allowed - self._spent.get(budget.key, 0)
            over += max(0, count - max(allowed, 0))
        return over

    def _count(self, pods: Iterable[PodInfo]) -> list[tuple[DisruptionBudget, int]]:
        counts: dict[str, tuple[DisruptionBudget, int]] = {}
        for pod in pods:
            for budget in self._by_namespace.get(pod.namespace, ()):
                if budget.covers(pod):
                    _, count = counts.get(budget.key, (budget, 0))
                    counts[budget.key] = (budget, count + 1)
        return [counts[key] for key in sorted(counts)]
