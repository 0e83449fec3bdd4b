"""The starvation scenario played over time (issue 35, item 4): a 32-GPU gang runs within
the bound under a stream of 1-GPU jobs, and never without the rule.

``muster simulate`` decides at one moment; a stream needs time to pass.  So this plays
the same core (:func:`extender.core.whatif.run_simulation`: kube-scheduler's queue,
Muster's filter and score) once a second, with pods ending and arriving in between:

- n1..n8 of 8 GPUs (64 GPUs), full at 12:00:00 with 1-GPU pods, one ending every 2 s,
  the nodes in turn (n1, n2, ..., n8, n1, ...: pod ``i`` ends at 2i + 1 s).
- At 12:00:00 team-a's gang ``train`` is created: 4 pods of 8 GPUs (min-available 4).
- The stream: team-b always has 4 pending 1-GPU jobs (topped up each second), each
  running 128 s once placed.  So a GPU frees every 2 s, on one node, and a 1-GPU job
  takes it the same second.

Derived by hand:

- Without the rule (``starvationSeconds`` 0): the gang goes first in the queue (it is
  the oldest) but needs four nodes with 8 GPUs free; each second at most one GPU is
  free, and the stream takes it.  It never runs (checked over 3 (S + H) = 2,700 s).
- With ``starvationSeconds`` 600 and ``starvationHoldSeconds`` 300: node ``n<m>``
  frees a GPU at the seconds ≡ 2m - 1 (mod 16) (pod ``i`` on ``n<i mod 8 + 1>`` ends at
  2i + 1; its successor takes the GPU that second and runs 128 s, a multiple of 16).  At
  12:10:00 (600 s) the gang starves.  Every node lacks all 8 GPUs, so the nodes whose
  newest pod started first are picked: n5 (585), n6 (587), n7 (589), n8 (591), against
  n1..n4 (593..599).  From then on nothing binds there (the stream's jobs are later,
  smaller, of the same priority) and the choice does not move (a node the stream
  refills has a newer pod than any held one).  The newest pod on n8, started at 591,
  ends at 719; those of n5..n7 earlier: the gang is placed at 719 s, within the bound
  S + H = 900 s.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from base import keys
from extender.core.config import parse_args
from extender.core.objects import parse_pod
from extender.core.state import ClusterState
from extender.core.whatif import run_simulation
from tests.builders import node, pod, quota, snapshot

GPU = "nvidia.com/gpu"
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z
RUN = 128.0  # every 1-GPU job runs this long
BACKLOG = 4  # 1-GPU jobs always waiting
QUOTAS = [quota(team, min={GPU: "64"}, max={GPU: "64"}) for team in ("team-a", "team-b")]
GANG = [f"team-a/train-{i}" for i in range(4)]


def stamp(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def start(starve: float, hold: float = 300) -> tuple[ClusterState, dict[str, float]]:
    """The cluster at 12:00:00 and when each running pod ends."""
    nodes = [node(f"n{i}", gpu=8) for i in range(1, 9)]
    running: list[dict[str, Any]] = []
    ends: dict[str, float] = {}
    for i in range(64):
        name = f"n{i % 8 + 1}"
        running.append(pod(f"old-{i}", "team-b", gpu=1, node=name, created=stamp(NOON - 200)))
        ends[f"team-b/old-{i}"] = NOON + 2 * i + 1
    annotations = {keys.GANG_MIN_AVAILABLE_ANNOTATION: "4"}
    gang = [
        pod(
            f"train-{i}",
            "team-a",
            gpu=8,
            group="train",
            created=stamp(NOON),
            annotations=annotations,
        )
        for i in range(4)
    ]
    args = parse_args({"starvationSeconds": starve, "starvationHoldSeconds": hold})
    return snapshot(nodes, [*running, *gang], QUOTAS, args), ends


def play(starve: float, until: float) -> float | None:
    """Seconds after 12:00:00 at which the gang is placed whole, or ``None``."""
    state, ends = start(starve)
    made = 0
    for second in range(1, int(until) + 1):
        now = NOON + second
        for key in [key for key, end in ends.items() if end <= now]:
            state.remove_pod(key)
            del ends[key]
        waiting = sum(
            1 for p in state.pods.values() if p.node_name is None and p.namespace == "team-b"
        )
        for _ in range(BACKLOG - waiting):
            state.upsert_pod(parse_pod(pod(f"s{made}", "team-b", gpu=1, created=stamp(now))))
            made += 1
        result = run_simulation(state, now)
        for key in result.placements:
            if key.startswith("team-b/"):
                ends[key] = now + RUN
        if all(state.pods[key].node_name is not None for key in GANG):
            return second
    return None


def test_without_the_rule_the_gang_never_runs() -> None:
    assert play(starve=0, until=2_700) is None


def test_with_the_rule_the_gang_runs_within_the_bound() -> None:
    assert play(starve=600, until=2_700) == 719  # by hand, above; within S + H = 900
