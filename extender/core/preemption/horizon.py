"""How far a walk that holds units back need look: the horizon.

A walk that holds victim units back (:mod:`.deferral`) still meets every unit on every
node that could gain, up to where it stops: at 15,000 nodes, some 8,000 units for a gang
of 64 whole-node pods, nearly all held on nodes that never gain before the walk stops.

A node gains no earlier in the walk than the priority at which its preemptible pods,
taken lowest priority first, would free what it lacks for one more copy of the job: a
unit is offered at its priority, which is its highest pod's (and a unit some of whose
pods are leaving is offered at its staying pods' highest, no lower than any of them), and
every pod of the node is counted, whatever its quota, so no unit can make the node gain
sooner (:func:`gains_at`).  The *horizon* is the priority by which as many nodes could
have gained as the job lacks copies (:func:`walk_up_to`).  Walked only up to that
priority, and only on the nodes that could gain by then, the walk decides what the walk
taking every unit at its place decides: the units on the other nodes, all taken, could not
make their node gain before the horizon, so that walk would put every one of them back.
What they would have taken from their quotas' usage on the way still counts when the
planner asks whether a ``min`` check would have gone otherwise (:func:`held_beyond`).  A
walk that does not stop by the horizon is cut short, and the planner walks again without.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet

from base.resources import add_into
from extender.core.preemption.walk import asking_for, places_wanted, screened
from extender.core.state import SCATTERED, ClusterState

#: Below every pod priority (Kubernetes' range is 32-bit).
LOWEST = -(2**32)


def walk_up_to(
    short: Mapping[str, frozenset[str]], gains: Mapping[str, int], needed: int
) -> tuple[int, dict[str, frozenset[str]]] | None:
    """The horizon and the nodes that could gain by it, each with the resources it may
    lack (``short``: the useful nodes, :attr:`~extender.core.placement.fit.JobFit.short`;
    ``gains``: :func:`gains_at` of those that could ever gain), for a job that lacks
    ``needed`` copies; ``None`` when fewer nodes could ever gain."""
    if needed <= 0 or len(gains) < needed:
        return None
    by_priority = Counter(gains.values())  # (priorities are few)
    seen = 0
    for last in sorted(by_priority):
        seen += by_priority[last]
        if seen >= needed:
            break
    return last, {node: short[node] for node, at in gains.items() if at <= last}


#: Nodes read to judge whether a horizon pays (:func:`pays`); below four times as many
#: useful nodes, every node is read.
SAMPLE = 256


def pays(
    nodes: Iterable[str],
    short: Mapping[str, frozenset[str]],
    gains: Callable[[str], int | None],
    needed: int,
) -> bool:
    """Would a horizon pass over at least half the useful nodes (``short``), judged on an
    even sample of them (``gains``: :func:`gains_at` of one node)?  Reading every node's
    gain priority costs about what walking the units of a tenth of them does; where most
    nodes could gain by the horizon (half-node pods, most nodes able to free one by the
    lowest priority), it buys nothing.  Whether the walk goes up to a horizon changes
    how fast it is, never what it decides.

    The sample is drawn in the cluster's order of ``nodes``, not in ``short``'s, whose
    order follows sets of node names and so changes with the process's string hashing:
    the same cluster draws the same horizon in every process."""
    if len(short) < 4 * SAMPLE:
        return True
    stride = len(short) // SAMPLE
    sample = [node for node in itertools.islice(nodes, 0, None, stride) if node in short]
    known = sorted(at for at in map(gains, sample) if at is not None)
    if not known:
        return True
    last = known[min(len(known) - 1, needed * len(sample) // len(short))]
    return 2 * sum(1 for at in known if at <= last) <= len(sample)


def held_beyond(
    state: ClusterState,
    short: Mapping[str, frozenset[str]],
    walked: AbstractSet[str],
    quotas: AbstractSet[str],
    reached: int,
) -> dict[str, dict[str, int]]:
    """At most what the walk without a horizon would hold on the nodes this one passed
    over (``short`` less ``walked``), by quota: their units of ``quotas`` up to
    ``reached``, the priority where it stopped (it stops among them), read as the walk
    reads units (:mod:`.walk`)."""
    victims = state.victims
    requests = victims.unit_requests()
    passed_over = {node: short[node] for node in short.keys() - walked}
    places = places_wanted(passed_over, victims.unit_resources())
    places.discard(SCATTERED)  # (never held)
    lists = asking_for(victims.units_asking(), (), passed_over)
    held: dict[str, dict[str, int]] = {}
    for _priority, _start, job, quota, _place in screened(lists, reached, places):
        if quota in quotas:
            add_into(held.setdefault(quota, {}), requests[job])
    return held


def gains_at(
    missing: Mapping[str, int],
    short: Iterable[str],
    node: str,
    amounts: Callable[[str, str], Iterable[tuple[int, int]]],
) -> int | None:
    """The lowest priority by which ``node``'s preemptible pods (``amounts(node,
    resource)``: each pod's priority and amount, sorted) free what it is ``missing`` in
    each resource it may lack; ``None`` if all of them do not."""
    at = LOWEST
    for name in short:
        lacking = missing[name]
        if lacking <= 0:
            continue
        for priority, amount in amounts(node, name):
            lacking -= amount
            if lacking <= 0:
                at = max(at, priority)
                break
        else:
            return None  # its preemptible pods all gone, it still lacks this
    return at
