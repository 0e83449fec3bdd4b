"""The victim index keeps its lists in the victim order whatever comes between two reads: a
few changes (a pod event) or many (the informer's first list: applied by one merge)."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict

import pytest

from bench.clusters import gpu_cluster
from extender.core.state.victims import VictimIndex


def expected(
    index: VictimIndex,
) -> tuple[list[object], dict[str, list[object]], dict[object, list[object]]]:
    entries = sorted(index.entries().values())
    by_quota: dict[str, list[object]] = defaultdict(list)
    by_asks: dict[object, list[object]] = defaultdict(list)
    for job, entry in index.entries().items():
        by_quota[entry[3]].append(entry)
        pods = index.unit_pods()[job]
        asks = frozenset(n for pod in pods for n, amount in pod.requests.items() if amount > 0)
        by_asks[asks].append(entry)
    return (
        entries,
        {q: sorted(e) for q, e in by_quota.items()},
        {a: sorted(e) for a, e in by_asks.items()},
    )


@pytest.mark.parametrize("seed", range(6))
def test_every_list_is_in_order_after_few_or_many_changes(seed: int) -> None:
    state = gpu_cluster(40, quotas=4, seed=seed)
    pods = sorted(state.pods.values(), key=lambda p: p.key)
    rng = random.Random(seed)
    index = VictimIndex()
    quotas = set()
    for _round in range(8):
        for _ in range(rng.choice((1, 5, 40, 300))):
            pod = rng.choice(pods)
            quota = pod.namespace
            quotas.add(quota)
            what = rng.random()
            if what < 0.2:
                index.update(pod.key, quota, [], True)  # gone
            elif what < 0.4:  # the same pod again, or moved in the order
                moved = dataclasses.replace(pod, priority=rng.choice((0, 100, 1000)))
                index.update(pod.key, quota, [moved], True)
            else:
                index.update(pod.key, quota, [pod], True)
        entries, by_quota, by_asks = expected(index)
        assert list(index.units()) == entries
        for quota in quotas:
            assert list(index.units(quota)) == by_quota.get(quota, [])
        asking = {asks: list(units) for asks, units in index.units_asking().items()}
        assert asking == by_asks
        # What each quota's units up to a priority ask for, summed (a walk's bound on
        # what it held): kept as units come, change and go.
        for quota in quotas:
            for priority in (-1, 0, 100, 1000):
                summed: dict[str, int] = defaultdict(int)
                for entry in by_quota.get(quota, []):
                    if entry[0] <= priority:
                        for name, amount in index.unit_requests()[entry[2]].items():
                            summed[name] += amount
                asked = index.asked_up_to(quota, priority)
                assert {n: a for n, a in asked.items() if a} == {
                    n: a for n, a in summed.items() if a
                }, (quota, priority)


def test_a_unit_asking_for_nothing_comes_and_goes_beside_others_of_its_priority() -> None:
    # (Found by review.)  The sums of a priority stay while any unit of it does, whatever
    # the others ask for: a unit asking for nothing, then one asking for a CPU, which goes
    # first, then the first.
    template = next(iter(gpu_cluster(1, quotas=2).pods.values()))
    nothing = dataclasses.replace(template, name="a", requests={}, priority=0)
    cpu = dataclasses.replace(template, name="b", requests={"cpu": 1000}, priority=0)
    index = VictimIndex()
    index.update("team-1/a", "team-1", [nothing], True)
    index.update("team-1/b", "team-1", [cpu], True)
    assert index.asked_up_to("team-1", 0) == {"cpu": 1000}
    index.update("team-1/b", "team-1", [], True)
    index.update("team-1/a", "team-1", [], True)
    assert not any(index.asked_up_to("team-1", 0).values())
    assert list(index.units("team-1")) == []
