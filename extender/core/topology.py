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
of levels, coarsest first (:func:`choose_levels`), is Muster's ``topologyLevels``
argument when given; else the ``spec.levels[].nodeLabel`` of Kueue's ``Topology`` object
(``kueue.x-k8s.io``, :func:`parse_kueue_topology`) whose levels hold the level asked for;
else :data:`DEFAULT_LEVELS`.  Volcano's ``networkTopology`` is not read: its tiers are
HyperNode objects, not node labels (docs/topology.md).

*Slices* (:class:`SliceRequest`, Kueue's ``podset-slice-required-topology`` with
``podset-slice-size``: N): the gang's pods of one shape are cut into slices of N, each
slice inside one domain of the slice level; different slices may share a domain or not.
So every domain of the slice level holds a multiple of N of those pods (bound ones
included): :func:`assign_slices` decides how many each domain takes.  A slice request
stands alone (slices anywhere) or with a required or preferred level for the whole gang
(both hold: the gang in one domain of its level, each slice in one of the slice level).

Pure: functions of the state's nodes and pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from base import keys
from base.errors import ManifestError
from extender.core.objects import NodeInfo, PodInfo


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """A gang's topology: the node label (level) it asks to stay inside, and how hard."""

    level: str
    required: bool


@dataclass(frozen=True, slots=True)
class SliceRequest:
    """Kueue's podset slices: every ``size`` pods of the gang in one domain of ``level``."""

    level: str
    size: int


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


def pod_slice_request(pod: PodInfo) -> SliceRequest | None:
    """The slices a pod's annotations ask for (Kueue's keys, read as Kueue v0.15.0's
    webhook validates them): the slice level with a size, an integer of at least 1.  An
    empty level, a size that is not such an integer, or one key without the other is a
    :class:`ManifestError` naming the key."""
    level = pod.annotations.get(keys.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION)
    text = pod.annotations.get(keys.KUEUE_SLICE_SIZE_ANNOTATION)
    if level is None and text is None:
        return None
    level_field = f"metadata.annotations.{keys.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION}"
    size_field = f"metadata.annotations.{keys.KUEUE_SLICE_SIZE_ANNOTATION}"
    if level is None:
        raise ManifestError(
            size_field, f"set without {keys.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION}"
        )
    if not level.strip():
        raise ManifestError(level_field, "expected a node label key")
    if text is None:
        raise ManifestError(
            size_field, f"required with {keys.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION}"
        )
    try:
        size = int(text.strip())
    except ValueError:
        size = 0
    if size < 1:
        raise ManifestError(size_field, f"{text!r} is not a positive integer")
    return SliceRequest(level.strip(), size)


def job_slice_request(pods: Iterable[PodInfo]) -> SliceRequest | None:
    """A gang's slices: the first of its pods' (an unreadable declaration is ignored
    here, as :func:`job_topology_request` does; ``simulate`` rejects it outright)."""
    for pod in pods:
        try:
            request = pod_slice_request(pod)
        except ManifestError:
            continue
        if request is not None:
            return request
    return None


def check_slice_size(request: SliceRequest, gang_size: int) -> None:
    """A :class:`ManifestError` naming the size key unless ``request.size`` divides the
    gang's size (its min-available): a gang of whole slices."""
    if gang_size % request.size:
        raise ManifestError(
            f"metadata.annotations.{keys.KUEUE_SLICE_SIZE_ANNOTATION}",
            f"{request.size} does not divide the gang's {gang_size} pods",
        )


def assign_slices(
    room: Mapping[str, int],
    bound: Mapping[str, int],
    size: int,
    pods: int,
    *,
    partial: bool = False,
) -> dict[str, int] | None:
    """How many of ``pods`` pods (of one shape) each domain of the slice level takes, so
    that every domain then holds a multiple of ``size`` of them: ``room``, domain → how
    many more fit there; ``bound``, domain → how many are there already.

    In order: a domain holding an incomplete slice takes the pods that complete it; the
    rest go in whole slices, the fullest domain that holds one first (best fit: large
    domains stay free for large gangs), each domain filled with as many slices as it
    holds.  When the rest is not a multiple of ``size`` (a gang declared with a size that
    does not divide it), the last, smaller slice goes first to the fullest domain that
    can take it and still leave room for the whole slices.  ``None`` when not every pod
    can be placed so; with ``partial``, the completions and whole slices that can be
    (an incomplete slice that cannot be completed is left so, and nothing goes there).
    """
    left = dict(room)
    counts: dict[str, int] = {}
    rest = pods
    for domain in sorted(bound):
        short = -bound[domain] % size
        if short == 0:
            continue
        if left.get(domain, 0) < short or rest < short:
            if not partial:
                return None
            rest -= min(short, rest)  # the pods meant to complete it do not go elsewhere
            continue
        counts[domain] = short
        left[domain] -= short
        rest -= short
    whole, extra = divmod(rest, size)
    if extra:
        slots = sum(free // size for free in left.values())
        takers = [
            (free, domain)
            for domain, free in left.items()
            if free >= extra and slots - free // size + (free - extra) // size >= whole
        ]
        if takers:
            _free, domain = min(takers)
            counts[domain] = counts.get(domain, 0) + extra
            left[domain] -= extra
        elif not partial:
            return None
    for free, domain in sorted((free, domain) for domain, free in left.items() if free >= size):
        if whole == 0:
            break
        taken = min(free // size, whole)
        counts[domain] = counts.get(domain, 0) + taken * size
        whole -= taken
    if whole and not partial:
        return None
    return counts


def slices_fit(room: Mapping[str, int], bound: Mapping[str, int], size: int, pods: int) -> bool:
    """Would :func:`assign_slices` place all ``pods``?  (Without building the answer: the
    planner asks after every victim it takes.)"""
    if not bound and pods % size == 0:
        return sum(free // size for free in room.values()) >= pods // size
    return assign_slices(room, bound, size, pods) is not None


#: The levels' order when neither ``topologyLevels`` nor a Kueue ``Topology`` gives one.
DEFAULT_LEVELS: tuple[str, ...] = (
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    "kubernetes.io/hostname",
)

#: Kueue's Topology API (v0.15.0 serves v1beta1, its storage version, and v1beta2; the
#: ``spec.levels`` of both are the same), cluster-scoped.
KUEUE_TOPOLOGY_GROUP = "kueue.x-k8s.io"
KUEUE_TOPOLOGY_VERSION = "v1beta1"
KUEUE_TOPOLOGY_PLURAL = "topologies"


def parse_kueue_topology(obj: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """A Kueue ``Topology`` object's name and levels (``spec.levels[].nodeLabel``, coarsest
    first), read leniently: a level that is not a mapping with a non-empty string
    ``nodeLabel``, or repeats one before it, is left out, and a ``spec`` or ``levels`` of
    another shape gives no levels.  Only a missing name is a :class:`ManifestError`: the
    object cannot be told apart.  The live source and ``simulate`` both read it here."""
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ManifestError("metadata.name", "expected a non-empty string")
    spec = obj.get("spec")
    entries = spec.get("levels") if isinstance(spec, Mapping) else None
    levels: list[str] = []
    for entry in entries if isinstance(entries, list) else ():
        label = entry.get("nodeLabel") if isinstance(entry, Mapping) else None
        if isinstance(label, str) and label.strip() and label.strip() not in levels:
            levels.append(label.strip())
    return name, tuple(levels)


def choose_levels(
    level: str, argument: Sequence[str], topologies: Mapping[str, Sequence[str]]
) -> tuple[str, ...]:
    """The levels' order, coarsest first, for a gang asking for ``level``: Muster's
    ``topologyLevels`` ``argument`` when it names any; else, of Kueue's ``Topology``
    objects (name → levels), the first by name whose levels hold ``level`` (clusters with
    several Topologies, one per ResourceFlavor, name each level in the ones that order
    it); else :data:`DEFAULT_LEVELS`."""
    if argument:
        return tuple(argument)
    for name in sorted(topologies):
        if level in topologies[name]:
            return tuple(topologies[name])
    return DEFAULT_LEVELS


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
