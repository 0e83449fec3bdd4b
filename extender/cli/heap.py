"""The serving process's heap: the cluster as first read kept out of garbage collection.

A live Muster's state is mostly what the informers' initial list built: at 150,000 pods,
millions of objects that live as long as the process.  CPython's cyclic collector walks
every tracked object at each full collection, some 0.3 s at that size, and one falls
into whichever verb call allocated last: a plan or a filter call then takes five times
its median.  Once that state is built (the informers synced, or a snapshot loaded),
:func:`freeze_long_lived` moves everything alive into the permanent generation, which no
collection walks.  Objects made later (pods that arrive, each call's own) are collected
as before; a frozen object that goes is freed by its reference count, as every object of
the state is (none of them is in a reference cycle).  Measured in
``docs/benchmarks.md`` (*The heap at 150,000 pods*).
"""

from __future__ import annotations

import gc
import logging
import threading
from typing import Protocol

log = logging.getLogger(__name__)


class Syncing(Protocol):
    """What :func:`freeze_once_synced` waits on (a :class:`~extender.kube.source.KubeSource`)."""

    def wait_ready(self, timeout: float) -> bool: ...


def freeze_long_lived() -> int:
    """Collect what is garbage now, then keep every object alive out of later
    collections; the number of objects frozen so far."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def freeze_once_synced(source: Syncing, poll_seconds: float = 30.0) -> threading.Thread:
    """Start a daemon thread that freezes the heap once ``source`` has synced (waiting
    as long as that takes), once."""

    def wait_then_freeze() -> None:
        while not source.wait_ready(poll_seconds):
            pass
        frozen = freeze_long_lived()
        log.info("the initial list is in: %d objects kept out of garbage collection", frozen)

    thread = threading.Thread(target=wait_then_freeze, name="heap-freeze", daemon=True)
    thread.start()
    return thread
