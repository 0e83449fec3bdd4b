"""Topology-aware gangs (issue 27): declared, placed inside one domain, preempting in one.

The rules are :mod:`extender.core.topology`'s docstring and the README's "Topology-aware
gangs"; every expectation is worked out by hand in the comment beside it.  Nodes are
8-GPU nodes labelled with a block and a rack (``RACK``, ``BLOCK``); gang pods ask for 8
GPUs, so one pod fills one node and "fits" is counting free nodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from base import keys
from base.errors import ManifestError
from extender.cli import kubectl
from extender.cli.errors import InputError
from extender.cli.simulate import simulate_files
from extender.core.config import MusterArgs
from extender.core.effects import apply
from extender.core.filter import gang, verb
from extender.core.objects import parse_pod
from extender.core.podgroups import parse_native_pod_group
from extender.core.preemption.planner import (
    PreemptionPlan,
    Refusal,
    plan_job_preemption,
)
from extender.core.preemption.search import FITS_ALREADY
from extender.core.state import ClusterState
from extender.core.topology import (
    DEFAULT_LEVELS,
    SliceRequest,
    TopologyRequest,
    assign_slices,
    check_slice_size,
    choose_levels,
    domains_of,
    levels_from,
    parse_kueue_topology,
    pod_slice_request,
    pod_topology_request,
)
from extender.http import explain
from extender.kube.client import KubeClient
from extender.kube.source import KubeSource
from tests.builders import node, pod, quota, record_keys, snapshot

NOW = 1_800_000_000.0
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
GPU = "nvidia.com/gpu"
BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
LEVELS = (BLOCK, RACK, "kubernetes.io/hostname")
REQUIRED = {keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK}
PREFERRED = {keys.KUEUE_PREFERRED_TOPOLOGY_ANNOTATION: RACK}


def racked(name: str, rack: str, block: str = "b1") -> dict[str, Any]:
    return node(name, labels={RACK: rack, BLOCK: block, "kubernetes.io/hostname": name})


def gang_pods(count: int, annotations: dict[str, str]) -> list[dict[str, Any]]:
    """``count`` pending 8-GPU pods of team-a/train (min-available ``count``) that may
    preempt."""
    declared = {**annotations, keys.GANG_MIN_AVAILABLE_ANNOTATION: str(count)}
    return [
        pod(
            f"t-{i}",
            gpu=8,
            group="train",
            preemptible=False,
            can_preempt=True,
            annotations=declared,
        )
        for i in range(count)
    ]


def borrower(name: str, node_name: str, priority: int) -> dict[str, Any]:
    """A preemptible 8-GPU pod of team-b (min 0: it borrows) on ``node_name``."""
    return pod(name, "team-b", gpu=8, node=node_name, preemptible=True, priority=priority)


QUOTAS = [
    quota("team-a", min={GPU: "32"}, max={GPU: "32"}),
    quota("team-b", min={GPU: "0"}, max={GPU: "64"}),
]


def placed_nodes(snap: ClusterState, first: str = "t-0") -> dict[str, str]:
    decision = gang.plan_gang_placement(snap, first=snap.pods[f"team-a/{first}"])
    assert isinstance(decision, gang.GangPlacement), decision
    return dict(decision.placements)


# ---- declaring -----------------------------------------------------------------------


def test_kueue_annotations_declare_a_required_or_preferred_level() -> None:
    required = parse_pod(pod("p", annotations=REQUIRED))
    preferred = parse_pod(pod("p", annotations=PREFERRED))
    assert pod_topology_request(required) == TopologyRequest(RACK, required=True)
    assert pod_topology_request(preferred) == TopologyRequest(RACK, required=False)
    assert pod_topology_request(parse_pod(pod("p"))) is None


def test_an_empty_level_names_the_annotation() -> None:
    with pytest.raises(ManifestError) as error:
        pod_topology_request(
            parse_pod(pod("p", annotations={keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: " "}))
        )
    assert error.value.field == f"metadata.annotations.{keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION}"


def test_a_native_pod_group_declares_a_required_level() -> None:
    obj = {
        "metadata": {"name": "g", "namespace": "team-a"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        },
    }
    assert parse_native_pod_group(obj).topology == TopologyRequest(RACK, required=True)
    obj["spec"]["schedulingConstraints"] = {"topology": [{"key": ""}]}
    with pytest.raises(ManifestError) as error:
        parse_native_pod_group(obj)
    assert error.value.field == "spec.schedulingConstraints.topology[0].key"


def test_a_preferred_level_falls_back_to_coarser_levels_nearest_first() -> None:
    assert levels_from(TopologyRequest(RACK, required=False), LEVELS) == [RACK, BLOCK]
    assert levels_from(TopologyRequest(RACK, required=True), LEVELS) == [RACK]
    assert levels_from(TopologyRequest("other", required=False), LEVELS) == ["other"]


def test_nodes_without_the_label_are_in_no_domain() -> None:
    snap = snapshot([racked("a1", "r1"), racked("a2", "r1"), node("bare")])
    assert domains_of(snap.nodes.values(), RACK) == {"r1": frozenset({"a1", "a2"})}


# ---- placement -----------------------------------------------------------------------


def test_a_required_gang_goes_to_the_fullest_rack_that_holds_it_whole() -> None:
    # Racks r1 (2 free nodes), r2 (4), r3 (3); a gang of 3.  r1 cannot hold it; of r2
    # (32 GPUs free) and r3 (24), the fullest is r3: all three pods there, r2 kept whole.
    nodes = [racked(f"a{i}", "r1") for i in range(2)]
    nodes += [racked(f"b{i}", "r2") for i in range(4)]
    nodes += [racked(f"c{i}", "r3") for i in range(3)]
    snap = snapshot(nodes, gang_pods(3, REQUIRED))
    assert sorted(placed_nodes(snap).values()) == ["c0", "c1", "c2"]


def test_a_required_gang_no_rack_holds_waits_and_says_which_came_closest() -> None:
    # Racks r1 and r2 with 2 free nodes each: 4 nodes free, but no rack holds 3.  The
    # gang waits (evicting may help), and the reason names the most one rack holds.
    nodes = [racked(f"a{i}", "r1") for i in range(2)] + [racked(f"b{i}", "r2") for i in range(2)]
    snap = snapshot(nodes, gang_pods(3, REQUIRED))
    decision = gang.plan_gang_placement(snap, first=snap.pods["team-a/t-0"])
    assert isinstance(decision, gang.GangWait) and decision.resolvable
    assert decision.reason == (
        f"gang team-a/train: no {RACK} domain holds all 3 pods (the most: 2 in {RACK}=r1); "
        "waiting for room in one"
    )


def test_a_required_gang_never_uses_an_unlabelled_node() -> None:
    # Rack r1 with 2 nodes and one node with no rack label: 3 nodes free, but only 2 in
    # a domain, so the gang of 3 waits.
    snap = snapshot([racked("a0", "r1"), racked("a1", "r1"), node("bare")], gang_pods(3, REQUIRED))
    decision = gang.plan_gang_placement(snap, first=snap.pods["team-a/t-0"])
    assert isinstance(decision, gang.GangWait)


def test_a_preferred_gang_takes_the_next_coarser_level_then_anywhere() -> None:
    # The two racks of 2 free nodes are both in block b1: no rack holds 3, block b1 does.
    nodes = [racked(f"a{i}", "r1") for i in range(2)] + [racked(f"b{i}", "r2") for i in range(2)]
    nodes.append(racked("x0", "r9", block="b2"))
    snap = snapshot(nodes, gang_pods(3, PREFERRED))
    assert set(placed_nodes(snap).values()) <= {"a0", "a1", "b0", "b1"}
    # Racks in different blocks, none holding 3: the gang spreads anyway.
    nodes = [racked(f"a{i}", "r1", "b1") for i in range(2)]
    nodes += [racked(f"b{i}", "r2", "b2") for i in range(2)]
    snap = snapshot(nodes, gang_pods(3, PREFERRED))
    assert len(placed_nodes(snap)) == 3


# ---- preemption ----------------------------------------------------------------------


def cluster_for_preemption(annotations: dict[str, str]) -> ClusterState:
    """Rack r1: a0 free, a1 and a2 each running a team-b borrower of priority 10.  Rack
    r2: b0, b1, b2 each running a team-b borrower of priority 1.  A gang of 3."""
    nodes = [racked(f"a{i}", "r1") for i in range(3)] + [racked(f"b{i}", "r2") for i in range(3)]
    pods = [borrower("hi-1", "a1", 10), borrower("hi-2", "a2", 10)]
    pods += [borrower(f"lo-{i}", f"b{i}", 1) for i in range(3)]
    return snapshot(nodes, [*pods, *gang_pods(3, annotations)], QUOTAS)


def test_a_required_gang_preempts_inside_the_cheapest_rack_only() -> None:
    # r1 needs 2 victims of priority 10 (a0 is free); r2 needs 3 of priority 1.  The
    # cheapest, lowest highest priority first, is r2: its three borrowers, nothing in r1.
    decision = plan_job_preemption(cluster_for_preemption(REQUIRED), "team-a/train", NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert sorted(v.pod.name for v in decision.victims) == ["lo-0", "lo-1", "lo-2"]
    assert sorted(decision.placements.values()) == ["b0", "b1", "b2"]


def test_of_two_racks_equal_in_all_else_the_gang_waits_for_the_shorter_notice() -> None:
    # Each rack has one free node and one team-b borrower of priority 1, started at the
    # same time: one victim, of one priority, losing the same work, in either rack.  The
    # borrower in r1 declares 60 s of notice (the cap, 120 s, allows it), the one in r2
    # none: the comparator's wait step picks r2 (by name alone it would be r1).
    nodes = [racked("a0", "r1"), racked("a1", "r1"), racked("b0", "r2"), racked("b1", "r2")]
    slow = borrower("slow", "a1", 1)
    slow["metadata"]["annotations"][keys.PREEMPTION_NOTICE_ANNOTATION] = "60"
    pods = [slow, borrower("quick", "b1", 1), *gang_pods(2, REQUIRED)]
    snap = snapshot(nodes, pods, QUOTAS, MusterArgs(maxPreemptionNoticeSeconds=120))
    decision = plan_job_preemption(snap, "team-a/train", NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert [v.pod.name for v in decision.victims] == ["quick"]
    assert sorted(decision.placements.values()) == ["b0", "b1"]


def test_a_preferred_gang_preempts_as_one_without_topology() -> None:
    # No rack constraint: a0 is free, and the two cheapest victims are priority-1 pods
    # (the most recently started first, then by name; all started alike: lo-0, lo-1 by
    # the victim order's stable key).  Two victims, fewer than any rack would need.
    decision = plan_job_preemption(cluster_for_preemption(PREFERRED), "team-a/train", NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert len(decision.victims) == 2
    assert all(v.pod.priority == 1 for v in decision.victims)


def test_a_required_gang_no_rack_can_hold_is_refused_rack_by_rack() -> None:
    # Two racks of 2 nodes: no eviction makes a rack hold 3.
    nodes = [racked(f"a{i}", "r1") for i in range(2)] + [racked(f"b{i}", "r2") for i in range(2)]
    pods = [borrower(f"lo-{i}", f"b{i}", 1) for i in range(2)]
    snap = snapshot(nodes, [*pods, *gang_pods(3, REQUIRED)], QUOTAS)
    decision = plan_job_preemption(snap, "team-a/train", NOW)
    assert isinstance(decision, Refusal)
    assert decision.reasons[0] == f"no {RACK} domain holds the whole job, even after evictions"
    assert any(reason.startswith(f"{RACK}=r1: ") for reason in decision.reasons)


def test_debug_jobs_names_the_domain_a_gang_was_placed_in() -> None:
    # The fullest-rack case above: the gang is reserved in r3, and /debug/jobs says so.
    nodes = [racked(f"b{i}", "r2") for i in range(4)] + [racked(f"c{i}", "r3") for i in range(3)]
    snap = snapshot(nodes, gang_pods(3, REQUIRED))
    result = verb.filter_pod(
        snap, snap.pods["team-a/t-0"], sorted(snap.nodes), as_extender=True, now=NOW
    )
    for effect in result.effects:
        apply(snap, effect)
    topology = explain.jobs(snap, NOW)["team-a/train"]["topology"]
    assert topology == {"level": RACK, "required": True, "domain": "r3"}


def test_simulate_names_the_rack_a_gang_was_placed_in() -> None:
    # The scenario's gang preempts in r2 (see its comment): simulate's document says so.
    document, _notes = simulate_files(
        [str(SCENARIOS / "topology-required-preempts-in-cheapest-rack.yaml")], MusterArgs(), NOW
    )
    assert document["topology"] == {
        "team-a/train": {"level": RACK, "required": True, "domain": "r2"}
    }


def test_a_rack_that_holds_the_gang_once_leaving_pods_go_means_no_eviction_elsewhere() -> None:
    # Found in review: rack r1's three nodes each run a pod on its way out (terminating);
    # once they go, r1 holds the gang as it is.  Rack r2 runs three priority-1 borrowers.
    # The plan is made as if the leaving pods were gone (docs/design.md), so nothing is to be
    # evicted: the planner refuses ("fits without evicting") rather than evict r2.
    nodes = [racked(f"a{i}", "r1") for i in range(3)] + [racked(f"b{i}", "r2") for i in range(3)]
    leaving = []
    for i in range(3):
        gone = borrower(f"old-{i}", f"a{i}", 1)
        gone["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
        leaving.append(gone)
    pods = [*leaving, *(borrower(f"lo-{i}", f"b{i}", 1) for i in range(3))]
    snap = snapshot(nodes, [*pods, *gang_pods(3, REQUIRED)], QUOTAS)
    decision = plan_job_preemption(snap, "team-a/train", NOW)
    assert isinstance(decision, Refusal), decision
    assert decision.reasons == (FITS_ALREADY,)


def test_kubectl_muster_why_names_the_rack_the_gang_would_go_to(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `kubectl muster why` over the scenario's cluster (the path it takes without
    # --muster-url, on the cluster's dump): the pod would go to r2 (the scenario's
    # derivation), and what Muster knows now names the level, no domain yet (nothing of
    # the gang is bound or reserved).
    options = kubectl.build_parser().parse_args(["why", "train-0", "-n", "team-a"])
    scenario = SCENARIOS / "topology-required-preempts-in-cheapest-rack.yaml"
    assert kubectl._from_cluster(options, str(scenario)) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["now"].endswith(f", in {RACK}=r2"), answer["now"]
    assert answer["muster"]["topology"] == {"level": RACK, "required": True, "domain": None}


# ---- slices (Kueue's podset-slice-required-topology / podset-slice-size) -----------------


def sliced(size: str, level: str = RACK, **more: str) -> dict[str, str]:
    return {
        keys.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: level,
        keys.KUEUE_SLICE_SIZE_ANNOTATION: size,
        **more,
    }


def per_rack(snap: ClusterState, placements: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node_name in placements.values():
        rack = snap.nodes[node_name].labels[RACK]
        counts[rack] = counts.get(rack, 0) + 1
    return counts


def test_kueue_slice_annotations_declare_slices() -> None:
    assert pod_slice_request(parse_pod(pod("p", annotations=sliced("2")))) == SliceRequest(RACK, 2)
    assert pod_slice_request(parse_pod(pod("p"))) is None


@pytest.mark.parametrize(
    ("annotations", "key"),
    [
        (sliced("0"), keys.KUEUE_SLICE_SIZE_ANNOTATION),  # Kueue: must be >= 1
        (sliced("-2"), keys.KUEUE_SLICE_SIZE_ANNOTATION),
        (sliced("two"), keys.KUEUE_SLICE_SIZE_ANNOTATION),  # Kueue: must be numeric
        (sliced("1.5"), keys.KUEUE_SLICE_SIZE_ANNOTATION),
        (sliced(" "), keys.KUEUE_SLICE_SIZE_ANNOTATION),
        # Kueue: the size is required with the level, forbidden without it.
        ({keys.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: RACK}, keys.KUEUE_SLICE_SIZE_ANNOTATION),
        ({keys.KUEUE_SLICE_SIZE_ANNOTATION: "2"}, keys.KUEUE_SLICE_SIZE_ANNOTATION),
        (sliced("2", level=""), keys.KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION),
    ],
)
def test_a_bad_slice_declaration_names_its_key(annotations: dict[str, str], key: str) -> None:
    with pytest.raises(ManifestError) as error:
        pod_slice_request(parse_pod(pod("p", annotations=annotations)))
    assert error.value.field == f"metadata.annotations.{key}"


def test_a_slice_size_must_divide_the_gang() -> None:
    check_slice_size(SliceRequest(RACK, 2), 6)  # three slices of 2
    with pytest.raises(ManifestError) as error:
        check_slice_size(SliceRequest(RACK, 4), 6)
    assert error.value.field == f"metadata.annotations.{keys.KUEUE_SLICE_SIZE_ANNOTATION}"
    assert error.value.message == "4 does not divide the gang's 6 pods"


def test_simulate_rejects_a_bad_slice_declaration(tmp_path: Path) -> None:
    # The same keys through simulate's loader: a size that does not divide the gang's
    # min-available (3 pods, slices of 2) stops it, naming the pod and the key.
    nodes = [racked("a0", "r1"), racked("a1", "r1")]
    pods = gang_pods(3, sliced("2"))
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text(yaml.safe_dump_all([*QUOTAS, *nodes, *pods]))
    with pytest.raises(InputError) as error:
        simulate_files([str(manifest)], MusterArgs(), NOW)
    assert str(error.value).endswith(
        f"(Pod team-a/t-0): metadata.annotations.{keys.KUEUE_SLICE_SIZE_ANNOTATION}: "
        "2 does not divide the gang's 3 pods"
    )
    pods = gang_pods(2, {keys.KUEUE_SLICE_SIZE_ANNOTATION: "2"})  # a size with no level
    manifest.write_text(yaml.safe_dump_all([*QUOTAS, *nodes, *pods]))
    with pytest.raises(InputError) as error:
        simulate_files([str(manifest)], MusterArgs(), NOW)
    assert f"metadata.annotations.{keys.KUEUE_SLICE_SIZE_ANNOTATION}: set without" in str(
        error.value
    )


def test_assign_slices_completes_then_fills_the_fullest_domains_first() -> None:
    # Room r1: 3, r2: 2, r3: 4; 4 pods in slices of 2.  Fullest first (least room): r2
    # takes one slice (all it holds), then r1 one (3 // 2); r3, the largest, is kept.
    assert assign_slices({"r1": 3, "r2": 2, "r3": 4}, {}, 2, 4) == {"r2": 2, "r1": 2}
    # r1 holds one bound pod (an incomplete slice): the first pod completes it there, the
    # other two are a slice in r2.
    assert assign_slices({"r1": 1, "r2": 4}, {"r1": 1}, 2, 3) == {"r1": 1, "r2": 2}
    # No room left in r1 to complete its slice: no placement; partially, the whole slice.
    assert assign_slices({"r1": 0, "r2": 4}, {"r1": 1}, 2, 3) is None
    assert assign_slices({"r1": 0, "r2": 4}, {"r1": 1}, 2, 3, partial=True) == {"r2": 2}
    # 5 pods in slices of 2 (a size not dividing the gang, live): two slices and a last
    # one of 1.  r1 (room 3) can take the 1 and still a slice (3 - 1 = 2); r2 (room 2)
    # could not (2 - 1 = 1 leaves no slice, and r1 alone holds one): the 1 goes to r1.
    assert assign_slices({"r1": 3, "r2": 2}, {}, 2, 5) == {"r1": 3, "r2": 2}
    # Room for 3 pods per rack in two racks, 4 pods in slices of 4: none holds a slice.
    assert assign_slices({"r1": 3, "r2": 3}, {}, 4, 4) is None


def test_a_sliced_gang_puts_a_multiple_of_the_slice_size_in_each_rack() -> None:
    # Racks r1 and r2 with 3 free nodes each; a gang of 4 in slices of 2 per rack.  Room
    # for 4 anywhere, but each rack must hold a multiple of 2: one slice per rack (a
    # rack's 3 nodes hold one slice of 2, not two), so 2 and 2.
    nodes = [racked(f"a{i}", "r1") for i in range(3)] + [racked(f"b{i}", "r2") for i in range(3)]
    snap = snapshot(nodes, gang_pods(4, sliced("2")))
    assert per_rack(snap, placed_nodes(snap)) == {"r1": 2, "r2": 2}


def test_a_sliced_gang_no_rack_holds_a_slice_of_waits() -> None:
    # Racks r1, r2, r3 with one free node each: room for 3 pods, but a slice of 2 needs
    # two nodes in one rack.  The gang waits, none placed, and says why.
    nodes = [racked("a0", "r1"), racked("b0", "r2"), racked("c0", "r3")]
    snap = snapshot(nodes, gang_pods(2, sliced("2")))
    decision = gang.plan_gang_placement(snap, first=snap.pods["team-a/t-0"])
    assert isinstance(decision, gang.GangWait) and decision.resolvable
    assert decision.reason == (
        f"gang team-a/train: 0 of 2 pods fit in slices of 2, each inside one {RACK} "
        "domain; waiting for room for all 2"
    )


def test_a_sliced_gang_with_a_required_block_keeps_both() -> None:
    # Block b1: rack r1 with 3 free nodes, r2 with 1 (4 free, the fullest block that
    # holds 4 pods).  Block b2: r3 with 2, r4 with 2, r5 with 1 (5 free).  A gang of 4,
    # required block, slices of 2 per rack.  In b1 only one slice fits (r1: 3 // 2 = 1,
    # r2: 0), so b1 fails; in b2, r3 and r4 take one slice each (fullest first: r5's one
    # node holds none).
    nodes = [racked(f"a{i}", "r1", "b1") for i in range(3)] + [racked("b0", "r2", "b1")]
    nodes += [racked(f"c{i}", "r3", "b2") for i in range(2)]
    nodes += [racked(f"d{i}", "r4", "b2") for i in range(2)] + [racked("e0", "r5", "b2")]
    annotations = sliced("2", **{keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: BLOCK})
    snap = snapshot(nodes, gang_pods(4, annotations))
    assert per_rack(snap, placed_nodes(snap)) == {"r3": 2, "r4": 2}


def test_a_replacement_pod_completes_its_slice_where_the_slice_runs() -> None:
    # A gang of 4 in slices of 2 runs 2 pods in r1 and 1 in r2 (its fourth pod was
    # re-created).  Free: a node in r1 and one in r2.  The new pod must complete r2's
    # slice: r2, not r1 (r1 would then hold 3).
    nodes = [racked(f"a{i}", "r1") for i in range(3)] + [racked(f"b{i}", "r2") for i in range(2)]
    pods = gang_pods(4, sliced("2"))
    for index, node_name in enumerate(("a0", "a1", "b0")):
        pods[index]["spec"]["nodeName"] = node_name
    snap = snapshot(nodes, pods)
    assert placed_nodes(snap, first="t-3") == {"team-a/t-3": "b1"}


def test_a_sliced_gang_preempts_to_free_whole_slices() -> None:
    # Rack r1: a0 free, a1 runs lo-1 (priority 1).  Rack r2: b0 free, b1 runs hi-1
    # (priority 5).  A gang of 2 in one slice of 2 per rack: two free nodes, but in two
    # racks.  Evicting lo-1 (the lowest priority first) lets r1 hold the slice; that one
    # victim is all it takes, and nothing in r2 goes.
    nodes = [racked(f"a{i}", "r1") for i in range(2)] + [racked(f"b{i}", "r2") for i in range(2)]
    pods = [borrower("lo-1", "a1", 1), borrower("hi-1", "b1", 5)]
    snap = snapshot(nodes, [*pods, *gang_pods(2, sliced("2"))], QUOTAS)
    decision = plan_job_preemption(snap, "team-a/train", NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert [v.pod.name for v in decision.victims] == ["lo-1"]
    assert sorted(decision.placements.values()) == ["a0", "a1"]


def test_slices_can_cost_victims_a_plan_without_them_would_spare() -> None:
    # Rack r1: a0, a1 free, a2 and a3 run lo-1, lo-2 (priority 1).  Rack r2: b0 free, b1
    # runs hi-1 (priority 5).  A gang of 4 in slices of 2 per rack: 3 free nodes (r1: 2,
    # r2: 1), one slice.  Victims go lowest priority first: lo-1 (r1 then holds 3 free:
    # still one slice), lo-2 (r1 holds 4: two slices).  Neither can be spared (with one
    # back r1 holds one slice), and hi-1 is never reached.  Without slices one victim
    # would do (3 free + 1).
    nodes = [racked(f"a{i}", "r1") for i in range(4)] + [racked(f"b{i}", "r2") for i in range(2)]
    pods = [borrower("lo-1", "a2", 1), borrower("lo-2", "a3", 1), borrower("hi-1", "b1", 5)]
    snap = snapshot(nodes, [*pods, *gang_pods(4, sliced("2"))], QUOTAS)
    decision = plan_job_preemption(snap, "team-a/train", NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert sorted(v.pod.name for v in decision.victims) == ["lo-1", "lo-2"]
    assert per_rack(snap, dict(decision.placements)) == {"r1": 4}
    plain = snapshot(nodes, [*pods, *gang_pods(4, {})], QUOTAS)
    unsliced = plan_job_preemption(plain, "team-a/train", NOW)
    assert isinstance(unsliced, PreemptionPlan) and len(unsliced.victims) == 1


def test_debug_jobs_names_a_gangs_slices() -> None:
    # The sliced gang of the placement test above: /debug/jobs names its slices; it has
    # no level for the whole gang, so nothing else.
    nodes = [racked(f"a{i}", "r1") for i in range(3)] + [racked(f"b{i}", "r2") for i in range(3)]
    snap = snapshot(nodes, gang_pods(4, sliced("2")))
    topology = explain.jobs(snap, NOW)["team-a/train"]["topology"]
    assert topology == {"slices": {"level": RACK, "size": 2}}


# ---- the levels' order: topologyLevels, else Kueue's Topology object -------------------

KUEUE_RACKS = ("example.com/block", "example.com/rack", "kubernetes.io/hostname")


def kueue_topology(name: str, levels: Any) -> dict[str, Any]:
    """A Kueue Topology object as the API serves it (v0.15.0's v1beta1)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": levels},
    }


def test_a_kueue_topology_gives_its_levels_coarsest_first() -> None:
    obj = kueue_topology("default", [{"nodeLabel": label} for label in KUEUE_RACKS])
    assert parse_kueue_topology(obj) == ("default", KUEUE_RACKS)


@pytest.mark.parametrize(
    ("spec", "levels"),
    [
        # Each entry that is not a mapping with a non-empty string nodeLabel is left out;
        # a repeated label counts once (Kueue's own validation refuses both).
        ({"levels": [{"nodeLabel": "a"}, "b", {"nodeLabel": 3}, {}, {"nodeLabel": " "}]}, ("a",)),
        ({"levels": [{"nodeLabel": "a"}, {"nodeLabel": "a"}, {"nodeLabel": "b"}]}, ("a", "b")),
        ({"levels": {"nodeLabel": "a"}}, ()),  # not a list: no levels
        ({"levels": None}, ()),
        ({}, ()),
        ("spec", ()),  # not a mapping
        (None, ()),
    ],
)
def test_a_malformed_kueue_topology_is_read_leniently(spec: Any, levels: tuple[str, ...]) -> None:
    obj = {"metadata": {"name": "t"}, "spec": spec}
    assert parse_kueue_topology(obj) == ("t", levels)


@pytest.mark.parametrize("metadata", [None, {}, {"name": ""}, {"name": 7}, "t"])
def test_a_kueue_topology_without_a_name_names_the_field(metadata: Any) -> None:
    with pytest.raises(ManifestError) as error:
        parse_kueue_topology({"metadata": metadata, "spec": {"levels": []}})
    assert error.value.field == "metadata.name"


def test_topology_levels_argument_wins_then_the_kueue_topology_holding_the_level() -> None:
    other = ("example.com/zone", "example.com/rack-b")
    topologies = {"z-racks": KUEUE_RACKS, "a-zones": other}
    # The argument, when it names any level, whatever the Topologies say.
    assert choose_levels("example.com/rack", LEVELS, topologies) == LEVELS
    # Empty: the first Topology by name whose levels hold the level asked for ("a-zones"
    # comes first but does not hold example.com/rack; "z-racks" does).
    assert choose_levels("example.com/rack", (), topologies) == KUEUE_RACKS
    assert choose_levels("example.com/rack-b", (), topologies) == other
    # Two holding it: the first by name.
    assert (
        choose_levels("example.com/rack", (), {"b": KUEUE_RACKS, "a": KUEUE_RACKS[1:]})
        == (KUEUE_RACKS[1:])
    )
    # None holds it, or none exists: the built-in order.
    assert choose_levels("example.com/pod", (), topologies) == DEFAULT_LEVELS
    assert choose_levels(RACK, (), {}) == DEFAULT_LEVELS


def test_a_preferred_gang_falls_back_along_the_kueue_topologys_levels() -> None:
    # Nodes labelled with the Kueue Topology's levels only (example.com/block, /rack):
    # block k1 with racks r1 (m0, m1) and r2 (m2, m3); block k2 with a0 (rack r7) and a1
    # (r8), all free.  A gang of 3 preferring a rack: no rack holds 3.  By the Topology
    # the next coarser level is example.com/block, and only k1 holds 3: m-nodes only.
    # Without it the built-in order knows nothing of example.com/rack: the gang goes
    # anywhere, and the greedy order (equal scores, then names) starts with a0 and a1.
    def kueue_node(name: str, rack: str, block: str) -> dict[str, Any]:
        return node(name, labels={KUEUE_RACKS[0]: block, KUEUE_RACKS[1]: rack})

    nodes = [kueue_node(f"m{i}", "r1" if i < 2 else "r2", "k1") for i in range(4)]
    nodes += [kueue_node("a0", "r7", "k2"), kueue_node("a1", "r8", "k2")]
    preferred = {keys.KUEUE_PREFERRED_TOPOLOGY_ANNOTATION: KUEUE_RACKS[1]}
    snap = snapshot(nodes, gang_pods(3, preferred))
    assert {"a0", "a1"} <= set(placed_nodes(snap).values())
    snap.declarations.set_kueue_topology("default", KUEUE_RACKS)
    assert snap.declarations.topology_levels(KUEUE_RACKS[1]) == KUEUE_RACKS
    assert set(placed_nodes(snap).values()) <= {"m0", "m1", "m2", "m3"}
    snap.declarations.forget_kueue_topology("default")
    assert snap.declarations.topology_levels(KUEUE_RACKS[1]) == DEFAULT_LEVELS


def test_simulate_reads_a_kueue_topology_from_the_dump(tmp_path: Path) -> None:
    # The cluster of the test above as a dump with its Topology object: simulate orders
    # the levels as the live informer does (the same parser): the gang stays in block k1.
    nodes = [
        node(name, labels={KUEUE_RACKS[0]: block, KUEUE_RACKS[1]: rack})
        for name, rack, block in (
            ("m0", "r1", "k1"),
            ("m1", "r1", "k1"),
            ("m2", "r2", "k1"),
            ("m3", "r2", "k1"),
            ("a0", "r7", "k2"),
            ("a1", "r8", "k2"),
        )
    ]
    pods = gang_pods(3, {keys.KUEUE_PREFERRED_TOPOLOGY_ANNOTATION: KUEUE_RACKS[1]})
    topology = kueue_topology("default", [{"nodeLabel": label} for label in KUEUE_RACKS])
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text(yaml.safe_dump_all([*QUOTAS, *nodes, topology, *pods]))
    document, notes = simulate_files([str(manifest)], MusterArgs(), NOW)
    assert len(document["placements"]) == 3
    assert set(document["placements"].values()) <= {"m0", "m1", "m2", "m3"}
    assert not any("Topology" in note for note in notes)
    # Another API's Topology is no Kueue Topology: a note, and it is not read (the gang
    # goes anywhere: a0 and a1 first).
    topology["apiVersion"] = "example.com/v1"
    manifest.write_text(yaml.safe_dump_all([*QUOTAS, *nodes, topology, *pods]))
    document, notes = simulate_files([str(manifest)], MusterArgs(), NOW)
    assert any("ignored Topology of apiVersion 'example.com/v1'" in note for note in notes)
    assert {"a0", "a1"} <= set(document["placements"].values())


def test_the_live_source_reads_kueue_topologies_through_the_same_parser() -> None:
    source = KubeSource(cast(KubeClient, object()), MusterArgs(), record_keys=record_keys)
    paths = [informer.path for informer in source.informers]
    assert "/apis/kueue.x-k8s.io/v1beta1/topologies" in paths
    obj = kueue_topology("default", [{"nodeLabel": label} for label in KUEUE_RACKS])
    source._on_kueue_topology("ADDED", obj)
    assert source.state.declarations.kueue_topologies == {"default": KUEUE_RACKS}
    source._on_kueue_topology("MODIFIED", {"metadata": {}, "spec": None})  # no name: skipped
    assert source.rejected == {"Topology/": "metadata.name: expected a non-empty string"}
    source._on_kueue_topology("DELETED", obj)
    assert source.state.declarations.kueue_topologies == {}


def test_a_sliced_gang_with_a_required_block_preempts_in_the_cheapest_block() -> None:
    # Block b1: rack r1 (a0 free, a1 running lo-1, priority 1) and r2 (b0 free).  Block
    # b2: rack r3 (c0 free, c1 running mid-1, priority 3).  A gang of 2, required block,
    # one slice of 2 per rack.  b1 has two free nodes, but in two racks: no slice.  Each
    # block needs one victim to free a slice: lo-1 in b1 (highest priority 1), mid-1 in b2
    # (3); the cheapest block is b1, and nothing in b2 goes.
    nodes = [racked("a0", "r1", "b1"), racked("a1", "r1", "b1"), racked("b0", "r2", "b1")]
    nodes += [racked("c0", "r3", "b2"), racked("c1", "r3", "b2")]
    pods = [borrower("lo-1", "a1", 1), borrower("mid-1", "c1", 3)]
    annotations = sliced("2", **{keys.KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: BLOCK})
    snap = snapshot(nodes, [*pods, *gang_pods(2, annotations)], QUOTAS)
    decision = plan_job_preemption(snap, "team-a/train", NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert [v.pod.name for v in decision.victims] == ["lo-1"]
    assert sorted(decision.placements.values()) == ["a0", "a1"]
