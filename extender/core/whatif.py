"""Play kube-scheduler and Muster together over a cluster state: the engine of ``simulate``.

Pending pods are taken in kube-scheduler's queue order (priority descending,
then creation time, then the order they were fed in) and scheduled one at a
time with the same filter and score the extender serves, with node
constraints on (there is no kube-scheduler to apply them).  A pod that
cannot be placed sends its job to the preemption planner; a committed plan's
victims are removed at once, as if the eviction operator had deleted them,
and its reservation steers the job's pods.  Rounds repeat until nothing
changes.  Quotas with ``stop-policy: HoldAndDrain`` are drained first.  Room held
for starving jobs at the given time (:mod:`extender.core.filter.starvation`) is a note.

Pure: the caller hands in the state (which this mutates) and the time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from extender.core.effects import AssumeBound, HoldRoom, ReleaseRoom, apply
from extender.core.filter.nodes import FilterResult
from extender.core.filter.starvation import describe_hold, starving_holds
from extender.core.filter.verb import filter_pod
from extender.core.objects import PodInfo
from extender.core.placement.score import best_node, score_nodes
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.state import ClusterState
from quota.tree import StopPolicy


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: str
    node: str
    preemptor: str | None  # the job that caused it; None for a drain
    reason: str


@dataclass
class SimulationResult:
    placements: dict[str, str] = field(default_factory=dict)
    evictions: list[Eviction] = field(default_factory=list)
    unschedulable: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def run_simulation(state: ClusterState, now: float) -> SimulationResult:
    """Schedule every pending pod of ``state`` (mutated in place) until nothing changes."""
    result = SimulationResult()
    _drain_stopped_quotas(state, result)
    for key in state.expire_departures(now):
        result.notes.append(
            f"{key} has been terminating for more than stuckTerminatingSeconds "
            f"({state.args.stuck_terminating_seconds:g}s) past its deletion deadline: its room "
            "counts as taken"
        )
    result.notes.extend(describe_hold(hold) for hold in starving_holds(state, now))
    pending = _pending_in_order(state, result)
    play = _Play(state, now, result)
    max_rounds = 2 * len(pending) + 2
    for _round in range(max_rounds):
        changes_before = play.changes
        for pod in pending:
            play.schedule(pod.key)
        if play.changes == changes_before:
            break
    else:
        result.notes.append(f"stopped after {max_rounds} rounds without settling")
    for pod in pending:
        current = state.pods.get(pod.key)
        if current is not None and current.node_name is None:
            result.unschedulable[pod.key] = play.reasons.get(pod.key, "not scheduled")
    # A pod placed and later evicted is not a placement.
    result.placements = {
        key: node
        for key, node in result.placements.items()
        if key in state.pods and state.pods[key].node_name == node
    }
    return result


def _pending_in_order(state: ClusterState, result: SimulationResult) -> list[PodInfo]:
    """The pending pods in kube-scheduler's queue order (priority, then age, then the
    order given); a note for each that uses a constraint simulate does not model."""
    order = {key: index for index, key in enumerate(state.pods)}
    pending = sorted(
        (
            pod
            for pod in state.pods.values()
            if pod.node_name is None and not pod.finished and not pod.terminating
        ),
        key=lambda pod: (-pod.priority, pod.created, order[pod.key]),
    )
    for pod in pending:
        if pod.unsupported:
            result.notes.append(
                f"{pod.key} uses {', '.join(pod.unsupported)}, which simulate does not model"
            )
    return pending


@dataclass
class _Play:
    """kube-scheduler's part, one pod at a time: filter, score and bind, or the
    PostFilter's plan; counts the changes a round made."""

    state: ClusterState
    now: float
    result: SimulationResult
    reasons: dict[str, str] = field(default_factory=dict)  # pod → why it is not placed
    refused: dict[str, int] = field(default_factory=dict)  # job → changes when refused
    refusals: dict[str, str] = field(default_factory=dict)  # job → why
    changes: int = 0

    def schedule(self, key: str) -> None:
        state, now = self.state, self.now
        current = state.pods.get(key)
        if current is None or current.node_name is not None:
            return
        names = sorted(state.nodes)
        outcome = filter_pod(state, current, names, as_extender=False, now=now)
        for effect in outcome.effects:
            apply(state, effect)
        if outcome.passed:
            node = best_node(score_nodes(state, current, outcome.passed))
            assert node is not None
            apply(state, AssumeBound(current, node, started=now))
            self.result.placements[key] = node
            self.reasons.pop(key, None)
            self.changes += 1
            return
        self.reasons[key] = describe_filter_failure(outcome, len(names))
        if outcome.gang_waiting is not None and not outcome.failed:
            return  # no eviction helps (waiting for pods, backing off)
        job = current.job
        if self.refused.get(job) == self.changes:
            self.reasons[key] += f" Preemption: {self.refusals[job]}"
            return
        decision = plan_job_preemption(state, job, now)
        if isinstance(decision, PreemptionPlan):
            _commit(state, decision, now, self.result)
            self.changes += 1
        else:
            self.refused[job] = self.changes
            self.refusals[job] = "; ".join(decision.reasons)
            self.reasons[key] += f" Preemption: {self.refusals[job]}"


def describe_filter_failure(outcome: FilterResult, node_count: int) -> str:
    """kube-scheduler's style: ``0/4 nodes are available: 4 Insufficient nvidia.com/gpu.``"""
    if outcome.quota_failures:
        return "; ".join(outcome.quota_failures) + "."
    if outcome.gang_waiting is not None:
        return outcome.gang_waiting + "."
    counts = Counter([*outcome.failed.values(), *outcome.unresolvable.values()])
    parts = ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items()))
    return f"0/{node_count} nodes are available: {parts}."


def _commit(
    state: ClusterState, plan: PreemptionPlan, now: float, result: SimulationResult
) -> None:
    for victim in plan.victims:
        result.evictions.append(
            Eviction(
                pod=victim.pod.key,
                node=victim.pod.node_name or "",
                preemptor=plan.job,
                reason=victim.reason,
            )
        )
        state.remove_pod(victim.pod.key)
    for held in plan.yielded:
        apply(state, ReleaseRoom(held.job))
    apply(state, HoldRoom(plan.reservation(now, state.args.reservation_timeout_seconds)))


def _drain_stopped_quotas(state: ClusterState, result: SimulationResult) -> None:
    for name in sorted(state.tree.specs):
        stop, source = state.tree.stop_policy(name)  # a parent's drains its subtree
        if stop is not StopPolicy.HOLD_AND_DRAIN:
            continue
        for pod in sorted(state.pods.values(), key=lambda p: p.key):
            if pod.node_name is None or pod.finished or state.quota_name(pod) != name:
                continue
            result.evictions.append(
                Eviction(
                    pod=pod.key,
                    node=pod.node_name,
                    preemptor=None,
                    reason=f"quota {source} has stop-policy HoldAndDrain",
                )
            )
            state.remove_pod(pod.key)
