"""How the candidate walk reads the victim index.

:func:`~extender.core.preemption.candidates.find_victim_groups` walks victim units in
the victim order (:mod:`extender.core.state.victims`) up to a policy's priority ceiling.
Two things keep it cheap and right: units that cannot help a job are passed over at C
speed, screened by the resources the job lacks and where they run
(:func:`asking_for`, :func:`screened`, :func:`places_wanted`); and units some of whose
pods are already leaving are re-keyed as they will be once those are gone
(:func:`settled_units`, :func:`with_settled`), since a plan counts leaving pods as gone
for every rule, the victim order included.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from operator import itemgetter
from typing import Any

from extender.core.state import SCATTERED, ClusterState, UnitEntry, UnitPlace

#: A unit entry's priority, and its place.
by_priority = itemgetter(0)
by_place = itemgetter(4)


def settled_units(state: ClusterState, promised: Collection[str]) -> dict[str, UnitEntry | None]:
    """The victim units some of whose pods are leaving (marked, terminating, promised to
    another plan), each keyed as it will be once they are gone: the priority and start of
    its staying pods only, placed :data:`SCATTERED` (``None``: nothing of it stays).  The
    index keys a unit by all its pods; a plan counts leaving pods as gone for every rule,
    the victim order's priority ceiling and order included."""
    units = state.victims.unit_pods()
    jobs = {pod.job for pod in state.leaving() if pod.job in units}
    settled: dict[str, UnitEntry | None] = {}
    for job in jobs:
        staying = [p for p in units[job] if not p.departing and p.key not in promised]
        if len(staying) == len(units[job]):
            continue
        quota = state.victims.quota_of(job)
        settled[job] = (
            (
                max(p.priority for p in staying),
                -max(p.work_started for p in staying),
                job,
                quota,
                SCATTERED,
            )
            if staying
            else None
        )
    return settled


def with_settled(
    entries: Iterator[UnitEntry],
    settled: Mapping[str, UnitEntry | None],
    quotas: AbstractSet[str],
    last: float,
    key: Callable[[UnitEntry], Any] | None = None,
) -> Iterator[UnitEntry]:
    """``entries`` with the units of :func:`settled_units` at their settled places in the
    victim order (and under the priority ceiling ``last`` by their settled priority);
    ``key``: the order ``entries`` are in, when not the victim order itself."""
    staying = sorted(
        (
            entry
            for entry in settled.values()
            if entry is not None and entry[3] in quotas and entry[0] <= last
        ),
        key=key,
    )
    others = (entry for entry in entries if entry[2] not in settled)
    return heapq.merge(others, staying, key=key)


def asking_for(
    asking: Mapping[frozenset[str], Sequence[UnitEntry]],
    scattered: Collection[frozenset[str]],
    lacking: Mapping[str, AbstractSet[str]],
) -> list[Sequence[UnitEntry]]:
    """The lists of ``asking`` whose units ask for a resource some node of ``lacking``
    lacks, and those holding scattered units (keys in ``scattered``): the screen by place
    would pass over every unit of the others."""
    short = set(map(frozenset, lacking.values()))
    return [
        units
        for resources, units in asking.items()
        if resources in scattered or any(not resources.isdisjoint(lacks) for lacks in short)
    ]


def screened(
    sources: Sequence[Sequence[UnitEntry]], last: float, screen: AbstractSet[UnitPlace]
) -> Iterator[UnitEntry]:
    """The units of ``sources`` (each in the victim order) of priority up to ``last`` whose
    place is in ``screen``, in the victim order."""
    streams = []
    for units in sources:
        end = bisect.bisect_right(units, last, key=by_priority)
        places = map(by_place, itertools.islice(units, end))
        streams.append(
            itertools.compress(itertools.islice(units, end), map(screen.__contains__, places))
        )
    return streams[0] if len(streams) == 1 else heapq.merge(*streams)


def places_wanted(
    lacking: Mapping[str, AbstractSet[str]], resource_sets: Iterable[frozenset[str]]
) -> set[UnitPlace]:
    """The unit places (see :data:`~extender.core.state.UnitPlace`) of units that may
    be wanted: on a node of ``lacking`` and asking for one of its resources; or
    scattered, to be looked at."""
    places = {SCATTERED}
    asking: dict[frozenset[str], list[frozenset[str]]] = {}
    for node, resources in lacking.items():
        key = frozenset(resources)
        matching = asking.get(key)
        if matching is None:
            matching = asking[key] = [r for r in resource_sets if not key.isdisjoint(r)]
        places.update((node, r) for r in matching)
    return places
