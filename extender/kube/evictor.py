"""``muster evictor``: the reference soft-eviction operator.

Watches pods carrying the ``scheduling.koordinator.sh/soft-eviction`` label
and evicts each through the Eviction API, so PodDisruptionBudgets are
honoured (a ``429`` is retried later), with the grace period the mark's
``deleteOptions`` asks for.  A cluster with its own operator (one that
checkpoints a training job first, say) runs that instead.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

from base import keys
from extender.kube.client import ApiError, Json, KubeClient
from extender.kube.informer import Informer, object_key
from extender.kube.writer import ClusterWriter

log = logging.getLogger(__name__)


class Evictor:
    def __init__(
        self,
        client: KubeClient,
        *,
        retry_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.writer = ClusterWriter(client, clock)
        self.retry_seconds = retry_seconds
        self.registry = CollectorRegistry()
        self.evictions = Counter(
            "muster_evictor_evictions",
            "Eviction attempts of soft-evicted pods, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self._waiting: dict[str, Json] = {}  # blocked by a PDB, retried later
        self._evicted: set[str] = set()  # UIDs evicted already (their updates follow)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.informer = Informer(
            client, "/api/v1/pods", self._on_pod, label_selector=keys.SOFT_EVICTION_KEY
        )
        self._retry = threading.Thread(target=self._retry_loop, name="evictor retry", daemon=True)

    def start(self) -> Evictor:
        self.informer.start()
        self._retry.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.informer.stop()

    def _on_pod(self, kind: str, obj: Json) -> None:
        metadata = obj.get("metadata") or {}
        if kind == "DELETED" or metadata.get("deletionTimestamp"):
            with self._lock:
                self._waiting.pop(object_key(obj), None)
            if kind == "DELETED":
                self._evicted.discard(str(metadata.get("uid")))
            return
        self._evict(obj)

    def _evict(self, obj: Json) -> None:
        metadata = obj.get("metadata") or {}
        key = object_key(obj)
        uid = str(metadata.get("uid"))
        if uid in self._evicted:
            return
        grace = _grace_seconds(metadata.get("annotations") or {})
        try:
            self.writer.evict(
                str(metadata.get("namespace")),
                str(metadata.get("name")),
                str(metadata.get("uid")),
                grace,
            )
            self.evictions.labels("evicted").inc()
            self._evicted.add(uid)
            log.info("evicted %s", key)
            with self._lock:
                self._waiting.pop(key, None)
        except ApiError as error:
            if error.status == 404 or error.status == 409:
                self.evictions.labels("gone").inc()
                return  # gone, or replaced by a new pod of the same name
            self.evictions.labels("refused" if error.status == 429 else "failed").inc()
            log.warning("evicting %s: %s (will retry)", key, error)
            with self._lock:
                self._waiting[key] = obj

    def _retry_loop(self) -> None:
        while not self._stop.wait(self.retry_seconds):
            with self._lock:
                waiting = list(self._waiting.values())
            for obj in waiting:
                self._evict(obj)


def _grace_seconds(annotations: Json) -> int | None:
    """``deleteOptions.gracePeriodSeconds`` from the soft-eviction annotation, if any."""
    try:
        mark = json.loads(annotations.get(keys.SOFT_EVICTION_KEY, "{}"))
        grace = mark.get("deleteOptions", {}).get("gracePeriodSeconds")
    except (ValueError, AttributeError, RecursionError):
        return None
    return grace if isinstance(grace, int) and grace >= 0 else None
