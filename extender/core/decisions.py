"""A bounded record of recent decisions, for "why is this pod pending?".

Each front door appends what it decided about a pod (verb, outcome, reasons)
with the time it is handed; the debug endpoints read it back.  Bounded per
pod and in the number of pods kept (least recently touched pods are
forgotten first), so it never grows with the cluster's history.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Decision:
    at: float
    verb: str
    outcome: str
    reasons: tuple[str, ...] = ()


class DecisionLog:
    def __init__(self, per_pod: int = 8, pods: int = 10_000) -> None:
        self._per_pod = per_pod
        self._pods = pods
        self._entries: OrderedDict[str, deque[Decision]] = OrderedDict()
        self._lock = threading.Lock()  # written by request threads and the PostFilter loop

    def record(self, pod_key: str, decision: Decision) -> None:
        with self._lock:
            entries = self._entries.get(pod_key)
            if entries is None:
                entries = self._entries[pod_key] = deque(maxlen=self._per_pod)
                while len(self._entries) > self._pods:
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(pod_key)
            entries.append(decision)

    def for_pod(self, pod_key: str) -> list[Decision]:
        """The pod's recent decisions, oldest first."""
        with self._lock:
            return list(self._entries.get(pod_key, ()))
