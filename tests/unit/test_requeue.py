"""Which parked pods Muster nudges (:mod:`extender.core.requeue`).

Derived by hand: team-a's quota caps GPUs; two free 8-GPU nodes, so only the quota
ever stands in the way.  The pods are preemptible, so ``max`` bounds them (a
non-preemptible pod must fit within ``min``).
"""

from __future__ import annotations

from extender.core.requeue import pods_to_requeue
from quota.tree import parse_elastic_quota
from tests.builders import node, pod, quota, snapshot

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"
QUOTA_MESSAGE = (
    "0/3 nodes are available: 3 quota team-a: nvidia.com/gpu 16 would exceed max 8. "
    "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)


def test_a_pod_its_quota_turned_away_is_nudged_once_the_quota_admits_it() -> None:
    # a-0 uses team-a's max of 8 GPUs; p (8 GPUs) was parked for the quota.  While the
    # max is 8 nothing is nudged; raised to 16, p is.  A pod parked for a reason of
    # kube-scheduler's own (its fit) is left to kube-scheduler's events.
    capped = [quota("team-a", min={GPU: "8"}, max={GPU: "8"})]
    pods = [
        pod("a-0", gpu=8, node="n0", preemptible=True),
        pod("p", gpu=8, preemptible=True),
        pod("q", gpu=8, preemptible=True, created="2026-01-01T09:00:00Z"),
    ]
    snap = snapshot([node("n0"), node("n1"), node("n2")], pods, capped)
    parked = {"team-a/p": QUOTA_MESSAGE, "team-a/q": "0/3 nodes: 3 Insufficient nvidia.com/gpu."}
    assert pods_to_requeue(snap, parked, NOW) == []
    raised = quota("team-a", min={GPU: "8"}, max={GPU: "16"})
    snap.set_quotas([parse_elastic_quota(raised)])
    assert pods_to_requeue(snap, parked, NOW) == ["team-a/p"]


def test_the_jobs_that_fit_are_nudged_oldest_first_and_only_those() -> None:
    # max raised to 16 with 8 used: room for one more 8-GPU job.  Both p (10:00) and r
    # (09:30) would fit on their own, so both are nudged, the older first; kube-scheduler
    # then admits one, and the other is turned away again.
    quotas = [quota("team-a", min={GPU: "8"}, max={GPU: "16"})]
    pods = [
        pod("a-0", gpu=8, node="n0", preemptible=True),
        pod("p", gpu=8, preemptible=True, created="2026-01-01T10:00:00Z"),
        pod("r", gpu=8, preemptible=True, created="2026-01-01T09:30:00Z"),
        pod("big", gpu=16, preemptible=True, created="2026-01-01T09:00:00Z"),
    ]
    snap = snapshot([node("n0"), node("n1"), node("n2")], pods, quotas)
    parked = dict.fromkeys(("team-a/p", "team-a/r", "team-a/big"), QUOTA_MESSAGE)
    # big asks 16: 8 + 16 > 16, still over the max: not nudged.
    assert pods_to_requeue(snap, parked, NOW) == ["team-a/r", "team-a/p"]
