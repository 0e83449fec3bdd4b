"""Holding victim units back until their node could gain (:mod:`extender.core.preemption.
deferral`) changes how fast the walk is, never what it decides.

The expected decision of each case is the planner's own without deferral: the walk that
takes every unit at its place, which the rest of the suite derives by hand.  The cases
are built so that deferral applies and is put to work: gangs of whole-node (or
half-node) pods on GPU clusters whose lowest-priority pods are spread over every node,
gangs of running pods spread over several nodes (offered at their place, between held
units), pods already leaving, and quotas whose ``min`` sits close to their usage, so
that some walks must fall back.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from base.resources import MILLI
from bench.clusters import GPU, add_gang, gpu_cluster
from extender.core.podgroups import parse_scheduler_plugins_pod_group
from extender.core.preemption import search
from extender.core.preemption.deferral import Deferral
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState
from quota.tree import QuotaSpec
from tests.builders import node, pod, quota, snapshot

NOW = 1_767_400_000.0


#: What share of its usage a quota's ``min`` is drawn as: near it (the walk's ``min``
#: checks spare victims, and walks held back must walk again), or far below.
NEAR_USAGE = (0.2, 0.6, 0.85, 0.95, 1.0)
FAR_BELOW = (0.1, 0.3)


def random_case(seed: int, min_shares: tuple[float, ...] = NEAR_USAGE) -> tuple[ClusterState, str]:
    """A GPU cluster with quotas whose ``min`` is drawn from ``min_shares`` of their
    usage, some pods leaving, and a pending gang that needs several nodes' GPUs."""
    rng = random.Random(seed)
    quotas = rng.randint(3, 6)
    drawn = gpu_cluster(
        rng.randint(12, 90),
        pods_per_node=rng.randint(4, 10),
        quotas=quotas,
        seed=seed,
        gpu_pods_per_node=rng.choice((2, 3, 4)),
    )
    used: Counter[str] = Counter()
    for running in drawn.pods.values():
        used[running.namespace] += running.requests.get(GPU, 0)
    cluster_gpus = sum(each.allocatable[GPU] for each in drawn.nodes.values())
    specs = [
        QuotaSpec(
            name=f"team-{i}",
            namespace=f"team-{i}",
            min={
                GPU: cluster_gpus // 2
                if i == 0
                else int(used[f"team-{i}"] * rng.choice(min_shares)) // MILLI * MILLI
            },
            max={GPU: cluster_gpus},
        )
        for i in range(quotas)
    ]
    state = ClusterState(drawn.args, specs)
    for each in drawn.nodes.values():
        state.upsert_node(each)
    for running in drawn.pods.values():
        if rng.random() < 0.03:  # leaving: a plan counts it gone
            running = dataclasses.replace(running, terminating=True)
        state.upsert_pod(running)
    whole = rng.random() < 0.7
    job = add_gang(
        state,
        rng.randint(1, 12) if whole else rng.randint(2, 16),
        gpus=8 if whole else 4,
        priority=rng.choice((50, 500, 5000)),
    )
    return state, job


def decision(state: ClusterState, job: str) -> tuple[object, ...]:
    """Everything the planner decided: each victim with its reason, the placement, or
    the refusal's reasons."""
    outcome = plan_job_preemption(state, job, NOW)
    if isinstance(outcome, PreemptionPlan):
        return (
            "plan",
            tuple((victim.pod.key, victim.reason) for victim in outcome.victims),
            tuple(sorted(outcome.placements.items())),
        )
    assert isinstance(outcome, Refusal)
    return ("refused", tuple(outcome.reasons))


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts the walks that held units back and stood by their answer, or did not, and
    of those that went up to a horizon, the same."""
    counts: Counter[str] = Counter()
    walk, horizon = search._walk, Deferral.horizon
    drawn: list[bool] = []

    def counted(*args: object, **kwargs: object) -> object:
        drawn.clear()
        found = walk(*args, **kwargs)  # type: ignore[arg-type]
        if kwargs["pacing"] is not search.Pacing.IN_ORDER:
            answer = "walked again" if isinstance(found, search.Pacing) else "vouched"
            counts[answer] += 1
            if drawn:
                counts[f"{answer} from a horizon"] += 1
        return found

    def drawing(self: Deferral, *args: Any) -> object:
        found = horizon(self, *args)
        if found is not None:
            drawn.append(True)
        return found

    monkeypatch.setattr(search, "_walk", counted)
    monkeypatch.setattr(Deferral, "horizon", drawing)
    yield counts


def test_deferral_decides_what_the_walk_without_decides(
    walks: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = 160
    _decide_alike(range(cases), NEAR_USAGE, monkeypatch)
    # The property is only as good as its cases: most must take the deferred path to the
    # end, and some must be sent back to walk again, from a horizon too.
    assert walks["vouched"] >= cases // 2, walks
    assert walks["walked again"] >= 5, walks
    assert walks["walked again from a horizon"] >= 5, walks


def test_a_walk_up_to_a_horizon_decides_what_the_walk_without_decides(
    walks: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Quotas far above their min, as on a busy shared cluster: most walks go up to a
    # horizon and stand by their answer.
    cases = 80
    _decide_alike(range(1000, 1000 + cases), FAR_BELOW, monkeypatch)
    assert walks["vouched from a horizon"] >= cases // 2, walks


def _decide_alike(
    seeds: Iterable[int], min_shares: tuple[float, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner decides each seed's :func:`random_case` alike with deferral and
    without."""
    for seed in seeds:
        state, job = random_case(seed, min_shares)
        with_deferral = decision(state, job)
        with monkeypatch.context() as patched:
            patched.setattr(Deferral, "applies", staticmethod(lambda *a, **k: False))
            without = decision(state, job)
        assert with_deferral == without, f"seed {seed}"


def _same_with_and_without(
    state_of: Callable[[], ClusterState], job: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[object, ...]:
    with_deferral = decision(state_of(), job)
    with monkeypatch.context() as patched:
        patched.setattr(Deferral, "applies", staticmethod(lambda *a, **k: False))
        without = decision(state_of(), job)
    assert with_deferral == without
    return without


BORROW_LOWER = {"muster.dev/borrow-within-cohort": "LowerPriority"}
OLD, NEW = "2026-01-01T00:00:00Z", "2026-01-01T06:00:00Z"


def test_node_room_that_suffices_before_the_quota_does_holds_nothing_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (Found by review.)  team-a's gang of two 8-GPU pods needs team-a's own t (on n0) out
    # for its quota, and two free nodes.  The walk takes h (team-b, newest, n0), then x
    # (team-c, n1): node room suffices before the quota does, then t.  Had h been held on
    # n0 until t freed it, it would no longer be wanted once node room sufficed, and the
    # plan would keep x instead.  A job whose quota checks fail before any eviction holds
    # nothing back: the plan is the walk's, h and t.
    def state() -> ClusterState:
        return snapshot(
            [node(f"n{i}") for i in range(3)],
            [
                pod("h", "team-b", gpu=4, node="n0", preemptible=True, priority=0, created=NEW),
                pod("t", "team-a", gpu=4, node="n0", preemptible=True, priority=1, created=OLD),
                pod("x", "team-c", gpu=8, node="n1", preemptible=True, priority=0, created=OLD),
                *(
                    pod(
                        f"j-{i}",
                        "team-a",
                        gpu=8,
                        group="j",
                        preemptible=True,
                        can_preempt=True,
                        priority=100,
                        created=NEW,
                    )
                    for i in range(2)
                ),
            ],
            [
                quota("team-a", min={GPU: "8"}, max={GPU: "16"}, annotations=BORROW_LOWER),
                quota("team-b", min={GPU: "0"}, max={GPU: "24"}),
                quota("team-c", min={GPU: "0"}, max={GPU: "24"}),
            ],
        )

    decided = _same_with_and_without(state, "team-a/j", monkeypatch)
    assert decided[0] == "plan"
    assert [key for key, _reason in decided[1]] == ["team-b/h", "team-a/t"]  # type: ignore[attr-defined]


def test_a_unit_holding_min_resources_is_not_held(monkeypatch: pytest.MonkeyPatch) -> None:
    # (Found by review.)  team-b's h (4 GPUs on n0) belongs to a PodGroup holding
    # minResources of 13 GPUs: evicting it frees 13 of team-b's usage, not 4.  The walk
    # takes h first (newest, priority 0), which leaves team-b's g (n1) spared for team-b's
    # min, then k (team-c, on n0): the plan is h and k, the gang's first pod on n0.  The
    # held h's 4 GPUs would understate what the walk took from team-b.
    def state() -> ClusterState:
        built = snapshot(
            [node(f"n{i}") for i in range(3)],
            [
                pod(
                    "h",
                    "team-b",
                    gpu=4,
                    node="n0",
                    group="h",
                    preemptible=True,
                    priority=0,
                    created=NEW,
                ),
                pod("g", "team-b", gpu=8, node="n1", preemptible=True, priority=0, created=OLD),
                pod("k", "team-c", gpu=4, node="n0", preemptible=True, priority=1, created=OLD),
                *(
                    pod(
                        f"j-{i}",
                        "team-a",
                        gpu=8,
                        group="j",
                        can_preempt=True,
                        priority=100,
                        created=NEW,
                    )
                    for i in range(2)
                ),
            ],
            [
                quota("team-a", min={GPU: "16"}, max={GPU: "24"}),
                quota("team-b", min={GPU: "1"}, max={GPU: "24"}),
                quota("team-c", min={GPU: "0"}, max={GPU: "24"}),
            ],
        )
        built.set_pod_group(
            parse_scheduler_plugins_pod_group(
                {
                    "metadata": {"name": "h", "namespace": "team-b"},
                    "spec": {"minMember": 1, "minResources": {GPU: "13"}},
                }
            )
        )
        return built

    decided = _same_with_and_without(state, "team-a/j", monkeypatch)
    assert decided[0] == "plan"
    assert sorted(key for key, _reason in decided[1]) == ["team-b/h", "team-c/k"]  # type: ignore[attr-defined]


def test_what_a_node_lacks_is_memoised_only_until_the_node_changes() -> None:
    # A plan memoises, per node, what an untouched node lacks for one more copy of the
    # gang (state.node_usage.missing) and by which priority it could gain one (gains, for
    # the horizon).  Then pods leave, and arrive again at another priority, on some
    # nodes: a second plan on that state must decide what a plan on a state built fresh
    # with the same pods decides (it would not, were a changed node's memo kept).
    memoised: Counter[str] = Counter()
    for seed in range(40):
        shares = NEAR_USAGE if seed % 2 else FAR_BELOW
        state, job = random_case(seed, shares)
        fresh, _ = random_case(seed, shares)
        decision(state, job)
        memoised["missing"] += len(state.node_usage.missing)
        memoised["gains"] += len(state.node_usage.gains)
        rng = random.Random(seed)
        running = sorted(key for key, each in state.pods.items() if each.node_name)
        gone = rng.sample(running, min(len(running), 6))
        moved = rng.sample(running, min(len(running), 3))
        for target in (state, fresh):
            for key in gone:
                target.remove_pod(key)
            for key in moved:
                if key in gone:
                    continue
                was = target.pods[key]
                target.remove_pod(key)
                again = dataclasses.replace(
                    was, name=was.name + "-again", priority=(was.priority + 100) % 1100
                )
                target.upsert_pod(again)
        assert decision(state, job) == decision(fresh, job), f"seed {seed}"
    assert memoised["missing"] > 0 and memoised["gains"] > 0, memoised


def test_a_node_that_could_gain_sooner_once_a_pod_left_is_walked_up_to_the_horizon() -> None:
    # team-a's gang of two 8-GPU pods reclaims from team-b, which borrows every GPU of
    # four 8-GPU nodes: n0, n2 and n3 each run two of its 4-GPU pods of priority 0, n1
    # one of priority 0 (the newest pod of all) and one of priority 1000.  The job lacks
    # two copies: n0, n2 and n3 could gain one by priority 0, n1 only by 1000, so the
    # horizon is 0 and n1 is not walked.  The walk, newest first among priority 0,
    # takes n1's pod (held: n1 still lacks 4 GPUs), then n0's, n2's, n3's pods, two of
    # which clear a node each: the plan frees n3 and n2 (their pods are the newest of
    # the rest), four victims.
    # Then n1's priority-1000 pod ends: n1 could gain by priority 0 once its newest pod
    # goes, alone.  The walk takes it first and n1 gains; one more node of n3's two pods:
    # three victims.  A horizon drawn from what n1 could gain before its pod ended would
    # pass n1 over and keep the four-victim plan.
    pods = [
        pod("b1-new", "team-b", gpu=4, node="n1", preemptible=True, priority=0, created=NEW),
        pod("b1-high", "team-b", gpu=4, node="n1", preemptible=True, priority=1000),
        *(
            pod(
                f"b{n}-{i}",
                "team-b",
                gpu=4,
                node=f"n{n}",
                preemptible=True,
                priority=0,
                created=f"2026-01-01T0{n}:0{i}:00Z",
            )
            for n in (0, 2, 3)
            for i in (0, 1)
        ),
        *(
            pod(f"j-{i}", "team-a", gpu=8, group="j", can_preempt=True, priority=100)
            for i in range(2)
        ),
    ]
    state = snapshot(
        [node(f"n{i}") for i in range(4)],
        pods,
        [
            quota("team-a", min={GPU: "16"}, max={GPU: "32"}),
            quota("team-b", min={GPU: "0"}, max={GPU: "32"}),
        ],
    )
    before = plan_job_preemption(state, "team-a/j", NOW)
    assert isinstance(before, PreemptionPlan)
    assert sorted(v.pod.name for v in before.victims) == ["b2-0", "b2-1", "b3-0", "b3-1"]
    assert state.node_usage.gains  # what the horizon read is memoised
    state.remove_pod("team-b/b1-high")
    after = plan_job_preemption(state, "team-a/j", NOW)
    assert isinstance(after, PreemptionPlan)
    assert sorted(v.pod.name for v in after.victims) == ["b1-new", "b3-0", "b3-1"]


def test_one_pod_is_walked_up_to_a_horizon_too(
    walks: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One pod of a whole node: room for it on any node ends the walk, so its units may be
    # held too.  team-a's 8-GPU pod reclaims from team-b, whose 2-GPU pods fill 40 nodes,
    # four a node: node n's first pod of priority 0, 100 or 1000 as n % 3 is 0, 1 or 2,
    # the other three of priority 0; the pods' starts grow with n.
    levels = (0, 100, 1000)

    def state() -> ClusterState:
        return snapshot(
            [node(f"n{n}") for n in range(40)],
            [
                *(
                    pod(
                        f"b{n}-{i}",
                        "team-b",
                        gpu=2,
                        node=f"n{n}",
                        preemptible=True,
                        priority=levels[n % 3] if i == 0 else 0,
                        created=f"2026-01-01T{n // 4:02d}:{(n % 4) * 10 + i:02d}:00Z",
                    )
                    for n in range(40)
                    for i in range(4)
                ),
                pod("j", "team-a", gpu=8, can_preempt=True, priority=100),
            ],
            [
                quota("team-a", min={GPU: "8"}, max={GPU: "320"}),
                quota("team-b", min={GPU: "0"}, max={GPU: "320"}),
            ],
        )

    # Lowest priority first, then the newest: n39's pods (39 % 3 == 0: all of priority 0)
    # are the newest of all, so the walk meets its four first and the node clears.
    expected = max(n for n in range(40) if levels[n % 3] == 0)
    decided = _same_with_and_without(state, "team-a/j", monkeypatch)
    assert decided[0] == "plan"
    assert sorted(key for key, _reason in decided[1]) == sorted(
        f"team-b/b{expected}-{i}" for i in range(4)
    )
    assert walks["vouched from a horizon"] >= 1, walks


def test_one_pod_a_node_may_lack_two_resources_for_holds_nothing_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (Found by review.)  team-a's pod j asks 4 GPUs and 20 CPUs of n0 (8 GPUs, 32 CPUs),
    # where team-b's x (4 GPUs, borrowing) and team-a's own y (4 GPUs) and z (20 CPUs)
    # leave 0 GPUs and 12 CPUs.  The walk takes other quotas' units first: x frees 4 GPUs,
    # enough of them; then team-a's own: y would free only GPUs, no longer missing, so it
    # is not wanted; z frees the CPUs and j fits: x and z.  Had x been held on n0 until
    # it could let n0 gain, y, met at its place first, would have freed the GPUs (and been
    # evicted in x's stead).  A pod that may lack two resources on a node holds nothing.
    def state() -> ClusterState:
        return snapshot(
            [node("n0", gpu=8, cpu="32")],
            [
                pod("x", "team-b", gpu=4, node="n0", preemptible=True, priority=0),
                pod("y", "team-a", gpu=4, node="n0", preemptible=True, priority=10),
                pod("z", "team-a", cpu="20", node="n0", preemptible=True, priority=20),
                pod("j", "team-a", gpu=4, cpu="20", can_preempt=True, priority=100),
            ],
            [
                quota("team-a", min={GPU: "8"}, max={GPU: "16"}),
                quota("team-b", min={GPU: "0"}, max={GPU: "16"}),
            ],
        )

    decided = _same_with_and_without(state, "team-a/j", monkeypatch)
    assert decided[0] == "plan"
    assert sorted(key for key, _reason in decided[1]) == ["team-a/z", "team-b/x"]


@pytest.mark.parametrize(
    ("gpus", "horizon"),
    [
        # Whole-node pods: a node gains one once all four of its 2-GPU pods are out, and
        # all four are of priority 0 on few nodes: the horizon passes over most.
        (8, True),
        # Half-node pods: two of priority 0 suffice, which most nodes have: the horizon
        # would pass over few, and reading every node's gain priority would not pay.
        (4, False),
    ],
)
def test_a_horizon_is_drawn_where_it_passes_over_most_nodes(
    gpus: int, horizon: bool, walks: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def state() -> ClusterState:
        cluster = gpu_cluster(2600)
        add_gang(cluster, 64, gpus=gpus)
        return cluster

    decided = _same_with_and_without(state, "team-0/train", monkeypatch)
    assert decided[0] == "plan"
    drawn = walks["vouched from a horizon"] + walks["walked again from a horizon"]
    assert (drawn > 0) is horizon, walks
