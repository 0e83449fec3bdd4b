"""One watch on a benchmark's pods, and when each pod got where.

:class:`PodWatch` lists, then watches, every pod labelled ``muster-bench`` and keeps a
:class:`PodRecord` per pod: when it was first seen, bound (and to which node), Running,
marked for soft eviction, marked as a disruption target (and by whom), and deleted, in
``time.monotonic()`` seconds of this process.  ``wait`` blocks until a predicate
(:func:`is_bound`, :func:`is_running`, :func:`is_gone`) holds for every pod named.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence

import localcluster as lc
from bench.support.cluster_setup import BENCH_LABEL, SOFT_EVICTION, Json


@dataclasses.dataclass
class PodRecord:
    """What the watch saw of one pod, in ``time.monotonic()`` seconds."""

    seen_at: float
    node: str | None = None
    bound_at: float | None = None
    running_at: float | None = None
    marked_at: float | None = None
    #: First seen with a ``DisruptionTarget=True`` condition, and the component its
    #: message names (``default-scheduler``, ``muster``, ``Eviction API``).
    disrupted_at: float | None = None
    disrupted_by: str | None = None
    deleted_at: float | None = None


class PodWatch:
    """Lists, then watches (``lc.Watcher``), every pod labelled ``muster-bench``; records
    when each pod is first seen bound, Running, marked for soft eviction, and deleted.
    ``wait`` blocks on a predicate over the records, with a deadline."""

    def __init__(self, rest: lc.RestClient) -> None:
        self.records: dict[str, PodRecord] = {}
        self.cond = threading.Condition()
        self._watcher = lc.Watcher(
            rest,
            "/api/v1/pods",
            lambda kind, pod: self._apply(kind, pod, time.monotonic()),
            on_list=self._listed,
            label_selector=BENCH_LABEL,
            page_size=500,
            list_timeout=60,
            watch_seconds=240,
            name="bench-watch",
        )

    @property
    def errors(self) -> list[str]:
        return self._watcher.errors

    def start(self) -> PodWatch:
        self._watcher.start()
        if not self._watcher.synced.wait(60):
            raise TimeoutError(f"pod watch did not sync: {self.errors[-3:]}")
        return self

    def stop(self) -> None:
        self._watcher.stop()

    def _listed(self, pods: list[Json]) -> None:
        """A complete list: every pod in it is there; any other is gone."""
        now = time.monotonic()
        seen = {self._apply("ADDED", pod, now) for pod in pods}
        with self.cond:
            for key, record in self.records.items():
                if key not in seen and record.deleted_at is None:
                    record.deleted_at = now
            self.cond.notify_all()

    def _apply(self, kind: str, pod: Json, now: float) -> str:
        meta = pod.get("metadata", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self.cond:
            record = self.records.get(key)
            if record is None or (record.deleted_at is not None and kind == "ADDED"):
                record = self.records[key] = PodRecord(seen_at=now)
            node = pod.get("spec", {}).get("nodeName")
            if node and record.bound_at is None:
                record.node, record.bound_at = str(node), now
            if pod.get("status", {}).get("phase") == "Running" and record.running_at is None:
                record.running_at = now
            if SOFT_EVICTION in (meta.get("labels") or {}) and record.marked_at is None:
                record.marked_at = now
            if record.disrupted_at is None:
                for condition in pod.get("status", {}).get("conditions") or []:
                    if (
                        condition.get("type") == "DisruptionTarget"
                        and condition.get("status") == "True"
                    ):
                        record.disrupted_at = now
                        record.disrupted_by = str(condition.get("message", "")).split(":")[0]
            if kind == "DELETED" and record.deleted_at is None:
                record.deleted_at = now
            self.cond.notify_all()
        return key

    def keys(self, match: Callable[[str, PodRecord], bool]) -> list[str]:
        with self.cond:
            return [k for k, r in self.records.items() if match(k, r)]

    def wait(
        self,
        keys: Sequence[str],
        done: Callable[[PodRecord], bool],
        *,
        timeout: float,
        what: str,
    ) -> list[PodRecord]:
        """Wait until ``done`` holds for the record of every key; return the records."""

        def all_done() -> bool:
            for key in keys:
                record = self.records.get(key)
                if record is None or not done(record):
                    return False
            return True

        with self.cond:
            if not self.cond.wait_for(all_done, timeout):
                missing = sum(1 for k in keys if (r := self.records.get(k)) is None or not done(r))
                raise TimeoutError(
                    f"{what}: {missing} of {len(keys)} pods still not there after {timeout:.0f}s"
                    f" (watch errors: {self.errors[-3:]})"
                )
            return [self.records[k] for k in keys]


def is_bound(record: PodRecord) -> bool:
    return record.bound_at is not None


def is_running(record: PodRecord) -> bool:
    return record.running_at is not None


def is_gone(record: PodRecord) -> bool:
    return record.deleted_at is not None
