"""What a plan inside one topology domain can cost at least, without searching.

A gang that must stay in one domain (a rack, a block) is planned in the cheapest domain
that can hold it (:func:`extender.core.preemption.planner.plan_job_preemption`); these
bounds order the domains and rule out those that cannot hold it whatever is evicted, so
the search runs in as few of them as possible.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from base.resources import Resources, add_into
from extender.core.objects import PodInfo
from extender.core.placement.demand import JobDemand
from extender.core.placement.shapes import eligible_nodes
from extender.core.state import ClusterState
from extender.core.topology import scarce_resource


class DomainBounds:
    """What no plan inside a domain can do better than, from the nodes' running totals
    and the victim index, without a search: how many of the job's pods fit at most with
    every preemptible pod there gone, and the least (highest victim priority, victim
    count) a plan there can cost.  Judged in the job's scarcest resource in aggregate
    (fragments, quotas and budgets only make a real plan dearer).  One pass over the
    domains' nodes and one over the running preemptible pods, for every domain at once."""

    def __init__(
        self,
        state: ClusterState,
        demand: JobDemand,
        domains: Mapping[str, frozenset[str]],
        released: Collection[str] = (),
    ) -> None:
        """``released``: reserved pods whose held room yields to the job (free there)."""
        self.needed = needed = len(demand.unplaced)
        self.smallest = smallest = smallest_request(demand.unplaced)
        # (The pods of one shape share one memoised set: union the distinct ones.)
        eligible = frozenset().union(*{eligible_nodes(state, pod) for pod in demand.unplaced})
        self.scarce = scarce = scarce_resource(demand.unplaced[0])
        leaving = state.leaving()
        unevictable: dict[str, Resources] = {}  # what leaving unevictable pods free, by node
        evictable: dict[str, list[PodInfo]] = {}  # leaving preemptible pods, by node
        for pod in leaving:
            if pod.node_name is None:
                continue
            if state.preemptible(pod):
                evictable.setdefault(pod.node_name, []).append(pod)
            else:
                add_into(unevictable.setdefault(pod.node_name, {}), pod.requests)
        yielded: dict[str, int] = {}  # the room held for ``released`` pods, by node
        for key in released:
            reserved = state.book.reserved(key)
            if reserved is not None:
                held = state.node_usage.reserved.get(reserved[1], {}).get(key, {})
                yielded[reserved[1]] = yielded.get(reserved[1], 0) + held.get(scarce, 0)
        unit = smallest.get(scarce, 0) or 1
        self.most: dict[str, int] = {}
        self.free: dict[str, int] = {}
        #: (priority, scarce amount) of each preemptible pod that could be a victim there.
        self.victims: dict[str, list[tuple[int, int]]] = {}
        for value, names in domains.items():
            most = free = 0
            victims: list[tuple[int, int]] = []
            for name in names & eligible:
                # In the scarce resource alone: the others only lower the count.
                room = state.free_amount(name, scarce) + yielded.get(name, 0)
                gone = unevictable[name].get(scarce, 0) if name in unevictable else 0
                free += room + gone
                most += min(
                    needed, (room + gone + state.preemptible_on(name).get(scarce, 0)) // unit
                )
                amounts = state.preemptible_amounts(name, scarce)
                going = evictable.get(name)
                if going is None:
                    victims.extend(amounts)
                    continue
                # Pods on their way out count as gone: free now, not victims.
                rest = list(amounts)
                for pod in going:
                    amount = pod.requests.get(scarce, 0)
                    if amount > 0 and (pod.priority, amount) in rest:
                        rest.remove((pod.priority, amount))
                        free += amount
                victims.extend(rest)
            self.most[value], self.free[value], self.victims[value] = most, free, victims

    def of(self, value: str) -> tuple[int, int] | str:
        """The domain's least (highest victim priority, victim count); or why it cannot
        hold the job whatever is evicted."""
        needed, most = self.needed, self.most[value]
        if most < needed:
            return (
                f"room for at most {most} of its {needed} unplaced pods, even with every "
                "preemptible pod there gone"
            )
        deficit = needed * self.smallest.get(self.scarce, 0) - self.free[value]
        if deficit <= 0:
            return (-(2**31), 0)
        victims = sorted(self.victims[value])
        freed = 0
        for priority, amount in victims:
            freed += amount
            if freed >= deficit:
                # No plan evicts only pods below this priority; and at this priority, none
                # evicts fewer pods than the largest ones that free the deficit.
                allowed = sorted((a for p, a in victims if p <= priority), reverse=True)
                count, total = 0, 0
                while total < deficit:
                    total += allowed[count]
                    count += 1
                return (priority, count)
        return f"too little {self.scarce} frees up even with every preemptible pod there gone"


def smallest_request(pods: Sequence[PodInfo]) -> dict[str, int]:
    """Per resource the least any of ``pods`` asks for: a copy of it fits wherever any of
    them does, so counting its copies bounds how many of them fit."""
    names = set.intersection(*(set(pod.requests) for pod in pods)) if pods else set()
    return {name: min(pod.requests[name] for pod in pods) for name in names}
