"""The domains of a topology level, memoised until a node changes.

A gang that must (or would like to) share a topology domain is placed inside one: the
filter (:mod:`extender.core.filter.gang`) and the planner
(:mod:`extender.core.preemption.domains`) both ask here for the domains of a level.
"""

from __future__ import annotations

from collections.abc import Collection

from extender.core.state import ClusterState
from extender.core.topology import domains_of


def node_domains(
    state: ClusterState, level: str, holding: Collection[str] = ()
) -> dict[str, frozenset[str]]:
    """The domains of a topology level (:func:`extender.core.topology.domains_of`),
    memoised until a node changes; with ``holding`` (the nodes a job's bound pods are
    on, which fix its domain), only the domains holding all of them."""
    key = ("domains", level)
    cached = state.node_memo.get(key)
    if cached is None:
        cached = frozenset(domains_of(state.nodes.values(), level).items())
        state.node_memo[key] = cached
    return {value: names for value, names in cached if names.issuperset(holding)}
