"""Topology-aware gangs: the node label a gang must, or would like to, stay inside.

GPU clusters label nodes with where they sit (``cloud.provider.com/topology-block``,
``cloud.provider.com/topology-rack``, ``kubernetes.io/hostname``); a *domain* of a level
is the set of nodes sharing one value of that label.  A gang asks for a level in one of
two strengths (:class:`TopologyRequest`):

- **required**: every pod of the gang in one domain of the level; nodes without the
  label are in no domain.  The gang waits, or preempts inside one domain, rather than
  spread.
- **preferred**: one domain of the level if one holds the gang, else one domain of the
  next coarser level, and so on; else anywhere, over as few domains of the level as the
  placement finds.  A preference never causes an eviction: the planner preempts for such
  a gang as for one without topology.

Declared, first found wins: on Kubernetes' own PodGroup
(``spec.schedulingConstraints.topology[].key``, v1.36+: required), else on the gang's
pods with Kueue's Topology Aware Scheduling annotations (the pod template's):
``kueue.x-k8s.io/podset-required-topology``, ``podset-preferred-topology``.  The order
of levels, coarsest first, is Muster's ``topologyLevels`` argument.

Pure: functions of the state's nodes and pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from base import keys
from base.errors import ManifestError
from extender.core.objects import NodeInfo, PodInfo


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """A gang's topology: the node label (level) it asks to stay inside, and how hard."""

    level: str
    required: bool


def pod_topology_request(pod: PodInfo) -> TopologyRequest | None:
    """The request a pod's annotations make (Kueue's keys); a required level wins over a
    preferred one.  An empty value is a :class:`ManifestError` naming the key."""
    for key, required in (
        (keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION, True),
        (keys.KUEUE_PREFERRED_TOPOLOGY_ANNOTATION, False),
    ):
        level = pod.annotations.get(key)
        if level is None:
            continue
        if not level.strip():
            raise ManifestError(f"metadata.annotations.{key}", "expected a node label key")
        return TopologyRequest(level.strip(), required)
    return None


def job_topology_request(
    declared: TopologyRequest | None, pods: Iterable[PodInfo]
) -> TopologyRequest | None:
    """A gang's request: its PodGroup's (``declared``), else the first of its pods'
    (an unreadable annotation is ignored here; ``simulate`` rejects it outright)."""
    if declared is not None:
        return declared
    for pod in pods:
        try:
            request = pod_topology_request(pod)
        except ManifestError:
            continue
        if request is not None:
            return request
    return None


def levels_from(request: TopologyRequest, levels: Sequence[str]) -> list[str]:
    """The levels a request tries, in order: its own, then (preferred only) every coarser
    one of ``levels`` (coarsest first), nearest first."""
    if request.required or request.level not in levels:
        return [request.level]
    at = levels.index(request.level)
    return [request.level, *reversed(levels[:at])]


def domains_of(nodes: Iterable[NodeInfo], level: str) -> dict[str, frozenset[str]]:
    """The domains of a level: label value → the names of the nodes carrying it (nodes
    without the label are in none)."""
    found: dict[str, set[str]] = {}
    for node in nodes:
        value = node.labels.get(level)
        if value is not None:
            found.setdefault(value, set()).add(node.name)
    return {value: frozenset(names) for value, names in found.items()}


def shared_domain(nodes: Iterable[NodeInfo], level: str) -> str | None:
    """The domain of ``level`` all ``nodes`` are in; ``None`` if they are in several, in
    none, or there are no nodes."""
    values = {node.labels.get(level) for node in nodes}
    if len(values) != 1:
        return None
    return values.pop()


def scarce_resource(pod: PodInfo) -> str:
    """The resource a domain's fullness is judged by for this gang: the first it asks for
    beyond cpu, memory, storage and the pod count (GPUs, usually), else cpu."""
    common = ("cpu", "memory", "ephemeral-storage", "pods")
    return next(
        (
            name
            for name, amount in sorted(pod.requests.items())
            if amount > 0 and name not in common
        ),
        "cpu",
    )


def fullest_first(
    domains: Mapping[str, frozenset[str]], free: Mapping[str, int]
) -> list[tuple[str, frozenset[str]]]:
    """Domains in best-fit order: least free room (``free``: node → free amount of the
    gang's scarcest resource) first, so the fullest domain that holds the gang is the one
    tried first and large domains stay free for large gangs; ties by name."""
    return sorted(domains.items(), key=lambda item: (sum(free.get(n, 0) for n in item[1]), item[0]))
