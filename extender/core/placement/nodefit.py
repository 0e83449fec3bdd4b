"""Does a pod fit a node?  The node constraints the core models.

Modelled, with kube-scheduler's semantics: resources and pod count
(NodeResourcesFit), ``nodeSelector`` and required node affinity
(NodeAffinity: In, NotIn, Exists, DoesNotExist, Gt, Lt, and ``matchFields``
on ``metadata.name``), taints and tolerations for ``NoSchedule`` and
``NoExecute`` (TaintToleration), and ``spec.unschedulable``
(NodeUnschedulable).

Not modelled: inter-pod affinity and anti-affinity, topology spread, host
ports, volumes.  kube-scheduler still enforces them when it schedules; the
preemption planner refuses to preempt for a pod that uses one (see
``PodInfo.unsupported``), rather than evict for a placement it cannot check.

The checks are split in two: :func:`static_misfit` depends only on the pod's
constraints and the node's labels and taints, so planners cache it per pod
*shape*; resource fit is the only part that changes during a simulation.
"""

from __future__ import annotations

from base import keys
from extender.core.constraints import NodeSelectorTerm, requirement_holds
from extender.core.objects import NodeInfo, PodInfo


def static_misfit(pod: PodInfo, node: NodeInfo) -> str | None:
    """Why ``pod`` can never run on ``node`` whatever is evicted, or ``None``."""
    if node.unschedulable and not _tolerates(pod, keys.UNSCHEDULABLE_TAINT, "", "NoSchedule"):
        return "node is unschedulable"
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return f"node does not match nodeSelector {key}={value}"
    if pod.required_affinity is not None and not any(
        _term_matches(term, node) for term in pod.required_affinity
    ):
        return "node does not match the pod's required node affinity"
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not _tolerates(
            pod, taint.key, taint.value, taint.effect
        ):
            return f"node has untolerated taint {taint.key}={taint.value}:{taint.effect}"
    return None


def constraint_signature(pod: PodInfo) -> tuple[object, ...]:
    """A key equal for pods whose :func:`static_misfit` agrees on every node."""
    return (
        tuple(sorted(pod.node_selector.items())),
        pod.required_affinity,
        pod.tolerations,
    )


def _tolerates(pod: PodInfo, key: str, value: str, effect: str) -> bool:
    for toleration in pod.tolerations:
        if toleration.effect and toleration.effect != effect:
            continue
        if toleration.key == "" and toleration.operator == "Exists":
            return True
        if toleration.key != key:
            continue
        if toleration.operator == "Exists" or toleration.value == value:
            return True
    return False


def _term_matches(term: NodeSelectorTerm, node: NodeInfo) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False  # an empty term matches nothing, as in Kubernetes
    fields = {"metadata.name": node.name}
    return all(requirement_holds(r, node.labels) for r in term.match_expressions) and all(
        requirement_holds(r, fields) for r in term.match_fields
    )
