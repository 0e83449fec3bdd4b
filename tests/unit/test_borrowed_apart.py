"""The prioritize score keeps borrowed pods apart from guaranteed ones (issue 35, item 3).

Four nodes of 8 GPUs.  team-a (min 8) runs a-0 (4 GPUs) on n0: within its min.  team-b
(min 0) runs b-0 (4 GPUs) on n1: borrowing.  n2 and n3 are empty.  Packing alone scores a
4-GPU pod 10 on n0 and n1 (full after it: floor(10 * 8/8)) and 5 on n2, n3
(floor(10 * 4/8)).  Expected scores derived by hand in each test.
"""

from __future__ import annotations

from extender.core.config import MusterArgs
from extender.core.objects import parse_pod
from extender.core.placement.score import score_nodes
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NODES = ["n0", "n1", "n2", "n3"]


def scores(new: str, namespace: str, *, gpu: int = 4, apart: bool = True) -> dict[str, int]:
    args = MusterArgs(borrowedApart=apart)
    state = snapshot(
        [node(name, gpu=8) for name in NODES],
        [
            pod("a-0", "team-a", gpu=4, node="n0", preemptible=True),
            pod("b-0", "team-b", gpu=4, node="n1", preemptible=True),
            pod(new, namespace, gpu=gpu, preemptible=True),
        ],
        [
            quota("team-a", min={GPU: "8"}, max={GPU: "32"}),
            quota("team-b", min={GPU: "0"}, max={GPU: "32"}),
            quota("team-c", min={GPU: "8"}, max={GPU: "32"}),
        ],
        args,
    )
    return score_nodes(state, state.pods[parse_pod(pod(new, namespace)).key], NODES)


def test_a_guaranteed_pod_avoids_nodes_running_borrowed_pods() -> None:
    # team-c's pod: team-c uses 0 + 4 <= its min 8, so it does not borrow.  n1 runs b-0 of
    # team-b, which borrows: 0.  n0 runs a-0 of team-a, within its min: packing, 10.
    assert scores("c-0", "team-c") == {"n0": 10, "n1": 0, "n2": 5, "n3": 5}


def test_a_borrowed_pod_avoids_nodes_running_guaranteed_pods() -> None:
    # team-b's pod: team-b (min 0) borrows.  n0 runs a-0 of team-a, within its min: 0.
    # n1 runs b-0, its own quota's: packing, 10.
    assert scores("b-1", "team-b") == {"n0": 0, "n1": 10, "n2": 5, "n3": 5}


def test_a_pod_that_makes_its_quota_borrow_counts_as_borrowed() -> None:
    # team-a's 4-GPU pod: team-a uses 4 + 4 = 8 <= its min 8, not borrowing: n1 (b-0) is 0.
    assert scores("a-1", "team-a") == {"n0": 10, "n1": 0, "n2": 5, "n3": 5}
    # A 6-GPU pod: 4 + 6 = 10 > 8, it makes team-a borrow: n1 (b-0, borrowing) matches,
    # packing 10; n0 runs its own quota's pod, never counted against it: 10 (packing counts
    # at most full); n2, n3: floor(10 * 6/8) = 7.
    assert scores("a-1", "team-a", gpu=6) == {"n0": 10, "n1": 10, "n2": 7, "n3": 7}


def test_off_it_is_packing_alone() -> None:
    assert scores("c-0", "team-c", apart=False) == {"n0": 10, "n1": 10, "n2": 5, "n3": 5}


def test_a_quota_borrowing_only_cpu_does_not_keep_gpu_pods_away() -> None:
    # team-d guarantees no cpu and runs d-0 (4 cpus, no GPU) on n2: it borrows cpu.
    # c-0 (4 GPUs and 1 cpu; team-c within its min in both) is packed by GPUs alone, and
    # team-d borrows no GPU: n2 keeps its packing score, floor(10 * 4/8) = 5.
    state = snapshot(
        [node(name, gpu=8) for name in NODES],
        [
            pod("d-0", "team-d", cpu="4", node="n2", preemptible=True),
            pod("c-0", "team-c", gpu=4, cpu="1", preemptible=True),
        ],
        [
            quota("team-c", min={GPU: "8", "cpu": "8"}, max={GPU: "32", "cpu": "64"}),
            quota("team-d", min={"cpu": "0"}, max={"cpu": "64"}),
        ],
    )
    assert score_nodes(state, state.pods["team-c/c-0"], ["n2"]) == {"n2": 5}
