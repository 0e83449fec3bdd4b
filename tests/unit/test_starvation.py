"""No starvation (issue 35, item 4): a job waiting longer than its quota's
starvation-seconds is not passed by later, no larger jobs of the same or lower priority
for the room it needs, for at most starvationHoldSeconds at a time.  Expected results
are derived by hand in each test's comment, from docs/quotas-and-preemption.md and the
rule's docstring (extender/core/filter/starvation.py).

The cluster: n1..n6 of 8 GPUs, filled by team-b's 1-GPU pods started at 11:00, leaving
free n1 3, n2 2, n3 5, n4 1, n5 0, n6 1 GPUs.  team-a's gang ``train`` (4 pods of 8
GPUs, min-available 4) was created at 12:00.  starvationSeconds 600,
starvationHoldSeconds 300: it starves from 12:10:00 to 12:15:00, then waits until
12:25:00, holds until 12:30:00, and so on.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from base import keys
from extender.core.config import MusterArgs, parse_args
from extender.core.filter.starvation import Hold, hold_window, kept_off, starving_holds
from extender.core.filter.verb import filter_pod
from extender.core.objects import parse_pod
from extender.core.state import ClusterState
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
S, H = 600.0, 300.0
IN_HOLD = NOON + 700  # 12:11:40, 100 s into the first hold
FREE = {"n1": 3, "n2": 2, "n3": 5, "n4": 1, "n5": 0, "n6": 1}
NODES = sorted(FREE)
#: Both quotas guarantee (min) all 48 GPUs: every job here is admitted, non-preemptible.
QUOTAS = [quota(team, min={GPU: "64"}, max={GPU: "64"}) for team in ("team-a", "team-b")]


def args(starve: float = S, **more: Any) -> MusterArgs:
    return parse_args({"starvationSeconds": starve, "starvationHoldSeconds": H, **more})


def fillers() -> list[dict[str, Any]]:
    return [
        pod(f"fill-{name}-{i}", "team-b", gpu=1, node=name, created="2026-01-01T11:00:00Z")
        for name, free in FREE.items()
        for i in range(8 - free)
    ]


def train(size: int = 4, gpu: int = 8, created: str = "2026-01-01T12:00:00Z") -> list[Any]:
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: str(size)}
    return [
        pod(
            f"train-{i}", "team-a", gpu=gpu, group="train", created=created, annotations=annotations
        )
        for i in range(size)
    ]


def small(name: str = "small", created: str = "2026-01-01T12:05:00Z", **more: Any) -> Any:
    return pod(name, "team-b", gpu=1, created=created, **more)


def cluster(*extra: dict[str, Any], starve: float = S, quotas: Any = QUOTAS) -> ClusterState:
    return snapshot(
        [node(name, gpu=8) for name in NODES],
        [*fillers(), *train(), *extra],
        quotas,
        args(starve),
    )


def holds_of(state: ClusterState, now: float) -> dict[str, Hold]:
    return {hold.job: hold for hold in starving_holds(state, now)}


def test_the_starving_gang_holds_the_nodes_it_lacks_least_on() -> None:
    state = cluster()
    holds = holds_of(state, IN_HOLD)
    # By hand: each 8-GPU pod, train-0 first (same size: by key), goes to the node it
    # lacks least on.  train-0: n3 lacks 3/8 (5 free).  train-1: n3 has no room left for
    # another 8; n1 lacks 5/8.  train-2: n2 lacks 6/8.  train-3: n4 and n6 both lack 7/8
    # and their newest pods started alike (11:00): n4 first by name.  Each holds 8 GPUs;
    # the hold began at 12:10:00 (waited S) and ends at 12:15:00 (H later).
    hold = holds["team-a/train"]
    assert {name: dict(room) for name, room in hold.claims.items()} == {
        name: {GPU: 8000} for name in ("n1", "n2", "n3", "n4")
    }
    assert (hold.began, hold.ends) == (NOON + S, NOON + S + H)
    # The same answer on every call: the choice is derived from the cluster, not kept.
    assert holds_of(state, IN_HOLD + 1)["team-a/train"].claims == hold.claims


def test_a_later_small_pod_is_kept_off_the_held_nodes() -> None:
    state = cluster(small())
    result = filter_pod(state, state.pods["team-b/small"], NODES, as_extender=False, now=IN_HOLD)
    # By hand: n1..n4 are held (above); placing a GPU there leaves less free than the 8
    # held.  n5 has no GPU free.  n6, not held, has 1 free: the pod goes there.
    assert result.passed == ["n6"]
    for name in ("n1", "n2", "n3", "n4"):
        assert "reserved for starving job team-a/train" in result.failed[name]
    assert result.failed["n5"] == f"Insufficient {GPU}"


def test_as_the_extender_the_same_nodes_fail() -> None:
    state = cluster(small())
    # kube-scheduler passes the nodes where a GPU is free: n1..n4 and n6.
    offered = ["n1", "n2", "n3", "n4", "n6"]
    result = filter_pod(state, state.pods["team-b/small"], offered, as_extender=True, now=IN_HOLD)
    assert result.passed == ["n6"]
    assert sorted(result.failed) == ["n1", "n2", "n3", "n4"]


def passes_everywhere_free(state: ClusterState, key: str, now: float) -> bool:
    """The pod passes every node with a GPU free (all but n5)."""
    result = filter_pod(state, state.pods[key], NODES, as_extender=False, now=now)
    return result.passed == ["n1", "n2", "n3", "n4", "n6"]


def test_who_is_not_held_back() -> None:
    # Each is not later, not of lower or equal priority, or larger: none is held back,
    # so each passes every node with a free GPU.
    earlier = small("earlier", created="2026-01-01T11:59:00Z")  # created before the gang
    higher = small("higher", priority=10)  # the gang's priority is 0
    state = cluster(earlier, higher)
    assert passes_everywhere_free(state, "team-b/earlier", IN_HOLD)
    assert passes_everywhere_free(state, "team-b/higher", IN_HOLD)
    # A later gang asking 33 GPUs in all (one pod of 1, four of 8), more than train's 32,
    # is not held back: kept off no node.
    sizes = [1, 8, 8, 8, 8]
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "5"}
    larger = [
        pod(
            f"big-{i}",
            "team-b",
            gpu=gpu,
            group="big",
            created="2026-01-01T12:05:00Z",
            annotations=annotations,
        )
        for i, gpu in enumerate(sizes)
    ]
    state = cluster(*larger)
    assert kept_off(state, state.pods["team-b/big-0"], NODES, IN_HOLD) == {}
    # The same gang with four pods of 7 (29 GPUs in all) is no larger: kept off n1..n4.
    smaller = [
        pod(
            f"big-{i}",
            "team-b",
            gpu=7 if i else 1,
            group="big",
            created="2026-01-01T12:05:00Z",
            annotations=annotations,
        )
        for i in range(5)
    ]
    state = cluster(*smaller)
    assert sorted(kept_off(state, state.pods["team-b/big-0"], NODES, IN_HOLD)) == [
        "n1",
        "n2",
        "n3",
        "n4",
    ]


def test_no_hold_before_starvation_seconds_after_the_hold_or_when_off() -> None:
    state = cluster(small())
    # 12:09:59: waited 599 s < 600.  12:15:00: the hold (12:10-12:15) is over, and the
    # next begins only at 12:25:00 (waited another S).  12:25:00: held again.
    assert passes_everywhere_free(state, "team-b/small", NOON + S - 1)
    assert passes_everywhere_free(state, "team-b/small", NOON + S + H)
    assert passes_everywhere_free(state, "team-b/small", NOON + 2 * S + H - 1)
    assert not passes_everywhere_free(state, "team-b/small", NOON + 2 * S + H)
    # starvationSeconds 0 (the default): no job ever starves.
    off = cluster(small(), starve=0)
    assert passes_everywhere_free(off, "team-b/small", IN_HOLD)


def test_the_quota_annotation_sets_its_own_starvation_seconds() -> None:
    # starvationSeconds off, team-a's quota says 60: at 12:11:40 the gang (waited 700 s)
    # is in its second hold?  By hand: holds at [60, 360), then [420, 720): 700 is in it.
    own = [
        quota(
            "team-a",
            min={GPU: "64"},
            max={GPU: "64"},
            annotations={keys.STARVATION_ANNOTATION: "60"},
        ),
        QUOTAS[1],
    ]
    state = cluster(small(), starve=0, quotas=own)
    hold = holds_of(state, IN_HOLD)["team-a/train"]
    assert (hold.began, hold.ends) == (NOON + 420, NOON + 720)
    assert not passes_everywhere_free(state, "team-b/small", IN_HOLD)


def test_a_job_its_quota_does_not_admit_does_not_starve() -> None:
    # team-a's max of 24 GPUs is below the gang's 32: no room would let it run.
    tight = [quota("team-a", min={GPU: "24"}, max={GPU: "24"}), QUOTAS[1]]
    state = cluster(small(), quotas=tight)
    assert holds_of(state, IN_HOLD) == {}
    assert passes_everywhere_free(state, "team-b/small", IN_HOLD)
    # The control: with the quotas admitting it, it holds and the pod is kept off.
    assert not passes_everywhere_free(cluster(small()), "team-b/small", IN_HOLD)


def test_a_job_no_nodes_could_hold_holds_nothing() -> None:
    # 7 pods of 8 GPUs on 6 nodes of 8: it can never fit, so it holds nothing.
    state = snapshot(
        [node(name, gpu=8) for name in NODES],
        [*fillers(), *train(size=7), small()],
        QUOTAS,
        args(),
    )
    assert holds_of(state, IN_HOLD) == {}
    assert passes_everywhere_free(state, "team-b/small", IN_HOLD)
    # The control: 4 pods of 8 fit the 6 nodes once free: held.
    assert "team-a/train" in holds_of(cluster(), IN_HOLD)


def test_a_gang_whose_pods_do_not_all_exist_does_not_starve() -> None:
    # min-available 4, three pods created.
    pods = train()[:3]
    state = snapshot([node(name, gpu=8) for name in NODES], [*fillers(), *pods], QUOTAS, args())
    assert holds_of(state, IN_HOLD) == {}
    state.upsert_pod(parse_pod(train()[3]))  # the fourth: whole, it starves
    assert "team-a/train" in holds_of(state, IN_HOLD)


def test_a_gated_job_does_not_starve() -> None:
    # The gang of test_the_starving_gang_holds_the_nodes_it_lacks_least_on, one of its
    # pods created with a scheduling gate (a tenant can write one and never remove it):
    # kube-scheduler does not try it, so no room would let it run: it holds nothing, and
    # the later 1-GPU pod passes everywhere.  Its gate removed: it starves as before.
    pods = train()
    pods[0]["spec"]["schedulingGates"] = [{"name": "wait"}]
    state = snapshot(
        [node(name, gpu=8) for name in NODES], [*fillers(), *pods, small()], QUOTAS, args()
    )
    assert holds_of(state, IN_HOLD) == {}
    assert passes_everywhere_free(state, "team-b/small", IN_HOLD)
    state.upsert_pod(parse_pod(train()[0]))
    assert "team-a/train" in holds_of(state, IN_HOLD)


def test_room_beyond_what_is_held_stays_usable() -> None:
    # One 8-GPU pod (a job of its own, created 12:00) on n1..n2 of 16 GPUs: n1 has 10
    # free, n2 6.  By hand: it lacks nothing on n1 (10 >= 8): held there, 8 GPUs.  A
    # later 1-GPU pod leaves 9 >= 8: passes; a later 3-GPU pod leaves 7 < 8: kept off.
    nodes = [node("n1", gpu=16), node("n2", gpu=16)]
    running = [
        pod(f"r{i}", "team-b", gpu=1, node="n1" if i < 6 else "n2", created="2026-01-01T11:00:00Z")
        for i in range(16)
    ]
    job = pod("solo", "team-a", gpu=8, created="2026-01-01T12:00:00Z")
    one = small("one")
    three = pod("three", "team-b", gpu=3, created="2026-01-01T12:05:00Z")
    state = snapshot(nodes, [*running, job, one, three], QUOTAS, args())
    claims = holds_of(state, IN_HOLD)["team-a/solo"].claims
    assert {name: dict(room) for name, room in claims.items()} == {"n1": {GPU: 8000}}
    assert filter_pod(
        state, state.pods["team-b/one"], ["n1"], as_extender=False, now=IN_HOLD
    ).passed
    kept = filter_pod(state, state.pods["team-b/three"], ["n1"], as_extender=False, now=IN_HOLD)
    assert kept.passed == [] and "starving job team-a/solo" in kept.failed["n1"]


def later_pair(gpu: int) -> list[dict[str, Any]]:
    """team-b's gang ``pair`` of two pods of ``gpu`` GPUs each, created after the
    starving job (12:05), declaring both its minimum."""
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "2"}
    return [
        pod(
            f"pair-{i}",
            "team-b",
            gpu=gpu,
            group="pair",
            created="2026-01-01T12:05:00Z",
            annotations=annotations,
        )
        for i in range(2)
    ]


def test_a_later_smaller_gang_is_planned_off_the_held_nodes() -> None:
    # A later gang of two 1-GPU pods: its first pod's nodes n1..n4 fail, and its plan
    # keeps both pods off them: the only GPU free elsewhere is n6's, so 1 of 2 fits.
    state = cluster(*later_pair(gpu=1))
    result = filter_pod(state, state.pods["team-b/pair-0"], NODES, as_extender=False, now=IN_HOLD)
    assert result.passed == []
    assert result.gang_waiting is not None and "1 of 2 pods fit" in result.gang_waiting
    # Without the hold (before S) both fit: n3 alone has 5 free.
    early = filter_pod(state, state.pods["team-b/pair-0"], NODES, as_extender=False, now=NOON + 1)
    assert early.gang_placed


def test_the_gang_is_placed_on_the_held_room_once_it_frees() -> None:
    state = cluster()
    # Every filler on n1..n4 ends (the held nodes' room frees; nothing else binds there).
    for key in [k for k, p in state.pods.items() if p.node_name in ("n1", "n2", "n3", "n4")]:
        state.remove_pod(key)
    result = filter_pod(state, state.pods["team-a/train-0"], NODES, as_extender=False, now=IN_HOLD)
    assert result.gang_placed


def test_a_higher_priority_starving_job_picks_first() -> None:
    # Two starving jobs: train (priority 0) and solo (8 GPUs, priority 5, created 12:01).
    # By hand: solo picks first (priority): n3 (lacks 3/8).  train then picks among the
    # rest: n1 (5/8), n2 (6/8), n4 (7/8), n6 (7/8): n3 is solo's.
    solo = pod("solo", "team-a", gpu=8, priority=5, created="2026-01-01T12:01:00Z")
    state = cluster(solo)
    holds = holds_of(state, IN_HOLD)
    assert sorted(holds["team-a/solo"].claims) == ["n3"]
    assert sorted(holds["team-a/train"].claims) == ["n1", "n2", "n4", "n6"]


@settings(max_examples=300, deadline=None)
@given(
    # Eighths of a second: exact in floating point, so the bounds are checked exactly.
    since=st.integers(0, 80_000).map(lambda n: n / 8),
    starve=st.integers(1, 40_000).map(lambda n: n / 8),
    hold=st.integers(1, 40_000).map(lambda n: n / 8),
    offset=st.integers(0, 800_000).map(lambda n: n / 8),
)
def test_a_hold_never_lasts_longer_than_the_hold_seconds(
    since: float, starve: float, hold: float, offset: float
) -> None:
    """Property: whenever a job holds room, the hold began at least S after the job's
    newest pod was created, is at most H old, and is followed by at least S without one."""
    assert hold_window(since, starve, hold, since + starve) == (
        since + starve,
        since + starve + hold,
    )
    now = since + offset
    window = hold_window(since, starve, hold, now)
    if window is None:
        return
    began, ends = window
    assert since + starve <= began <= now < ends
    assert ends - began == hold
    # The same hold at any time within it.
    assert hold_window(since, starve, hold, began + (now - began) / 2) == window
    # Let go at ends, and not held again for S.
    for gap in (0.0, starve / 3, starve * 0.999):
        assert hold_window(since, starve, hold, ends + gap) is None


@settings(max_examples=25, deadline=None)
@given(
    frees=st.lists(st.integers(0, 4), min_size=3, max_size=4),
    size=st.integers(1, 3),
    priorities=st.lists(st.integers(0, 2), min_size=40, max_size=40),
)
def test_under_any_stream_no_job_holds_nodes_longer_than_the_hold_seconds(
    frees: list[int], size: int, priorities: list[int]
) -> None:
    """Property over played streams: nodes of 4 GPUs, some free; a gang of ``size`` pods
    of 4 GPUs (priority 1) created at NOON; every 10 s a 1-GPU pod of a random priority
    0..2 arrives and takes a free GPU where Muster's filter lets it (as kube-scheduler
    would).  A higher-priority pod may take held room, so the gang may never run; the
    claim checked is the bound: the gang's hold, whenever it has one, is at most
    starvationHoldSeconds (60) old, and a tick after any hold without one is at least
    starvationSeconds (30) after it ended."""
    nodes = [node(f"n{i}", gpu=4) for i in range(len(frees))]
    running = [
        pod(f"r{i}-{j}", "team-b", gpu=1, node=f"n{i}", created="2026-01-01T11:00:00Z")
        for i, free in enumerate(frees)
        for j in range(4 - free)
    ]
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: str(size)}
    gang = [
        pod(f"g-{i}", "team-a", gpu=4, group="g", priority=1, annotations=annotations)
        for i in range(size)
    ]
    for item in gang:
        item["metadata"]["creationTimestamp"] = "2026-01-01T12:00:00Z"
    args = parse_args({"starvationSeconds": 30, "starvationHoldSeconds": 60})
    state = snapshot(nodes, [*running, *gang], QUOTAS, args)
    names = sorted(state.nodes)
    previous: Hold | None = None
    seen = 0
    for tick, priority in enumerate(priorities):
        now = NOON + 10 * tick
        arriving = pod(f"s{tick}", "team-b", gpu=1, priority=priority, created=_stamp(now))
        state.upsert_pod(parse_pod(arriving))
        result = filter_pod(state, state.pods[f"team-b/s{tick}"], names, as_extender=False, now=now)
        if result.passed:
            arriving["spec"]["nodeName"] = result.passed[0]
            state.upsert_pod(parse_pod(arriving))
        held = {hold.job: hold for hold in starving_holds(state, now)}.get("team-a/g")
        if held is None:
            continue
        seen += 1
        assert NOON + 30 <= held.began <= now < held.ends == held.began + 60
        if previous is not None and held.began != previous.began:
            assert held.began >= previous.ends + 30  # let go for S between holds
        previous = held
    # The gang (never placed here) held at 30 s: the rule acted.
    assert seen


def _stamp(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_borrowing_starving_job_does_not_keep_a_guaranteed_one_off() -> None:
    # team-a guarantees nothing (min 0, max 64): its starving gang borrows (32 > 0).
    # team-b guarantees 64 and uses 36 (its fillers): its later 1-GPU pod stays within its min,
    # so the borrower's hold does not keep it off n1..n4 (a guarantee is not withheld for a
    # job the guaranteed quota could evict once it ran).  With team-a guaranteed (QUOTAS),
    # the same pod is kept off them (test above).
    quotas = [
        quota("team-a", min={GPU: "0"}, max={GPU: "64"}),
        quota("team-b", min={GPU: "64"}, max={GPU: "64"}),
    ]
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "4"}
    borrowing = [
        pod(
            f"train-{i}",
            "team-a",
            gpu=8,
            group="train",
            created="2026-01-01T12:00:00Z",
            annotations=annotations,
            preemptible=True,
        )  # what a quota borrows is preemptible
        for i in range(4)
    ]
    state = snapshot(
        [node(name, gpu=8) for name in NODES], [*fillers(), *borrowing, small()], quotas, args()
    )
    assert holds_of(state, IN_HOLD)["team-a/train"].borrows
    assert kept_off(state, state.pods["team-b/small"], NODES, IN_HOLD) == {}
    guaranteed = cluster(small())
    assert set(kept_off(guaranteed, guaranteed.pods["team-b/small"], NODES, IN_HOLD)) == {
        "n1",
        "n2",
        "n3",
        "n4",
    }


def test_a_gang_kept_off_held_room_says_the_room_is_reserved() -> None:
    # A later gang of two 5-GPU pods (team-b): only n3 (5 free) could take one of them, and
    # n3 is held for the starving gang: it waits, and its reason says the room is reserved
    # (the words the requeuer nudges parked pods on when the hold ends).
    state = cluster(*later_pair(gpu=5))
    result = filter_pod(state, state.pods["team-b/pair-0"], NODES, as_extender=False, now=IN_HOLD)
    assert not result.passed
    assert result.gang_waiting is not None and "reserved" in result.gang_waiting, result
