"""The serving process's heap: the cluster as read kept out of garbage collection.

A live Muster's state is mostly what the informers list: at 150,000 pods, millions of
objects that live for minutes to hours.  CPython's cyclic collector walks every tracked
object at each full collection, some 0.3 s at that size, and one falls into whichever verb
call allocated last: a plan or a filter call then takes several times its median.  Once
that state is built (the informers synced, or a snapshot loaded), :func:`freeze_long_lived`
moves everything alive into the permanent generation, which no collection walks.  Objects
made later (pods that arrive or change, each call's own) are collected as before, so as
the pods present at the freeze are replaced the collector has more to walk again:
:func:`freeze_once_synced` freezes again every ``refreeze_seconds`` (first letting go of
the old frozen set, so what died in it since is collected then, once).  The state's
objects are in no reference cycle (a frozen one that goes is freed by its reference
count); the few cyclic objects alive at a freeze (an open watch's response and stream, a
connection) wait for the next one.  Measured in ``docs/benchmarks.md`` (*The heap at
150,000 pods*).
"""

from __future__ import annotations

import gc
import logging
import threading
from typing import Protocol

log = logging.getLogger(__name__)

#: How often the live Muster freezes its heap again (one full collection each time).
REFREEZE_SECONDS = 600.0


class Syncing(Protocol):
    """What :func:`freeze_once_synced` waits on (a :class:`~extender.kube.source.KubeSource`)."""

    def wait_ready(self, timeout: float) -> bool: ...


def freeze_long_lived() -> int:
    """Let go of what an earlier call froze, collect what is garbage now, then keep every
    object alive out of later collections; the number of objects frozen."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def freeze_once_synced(
    source: Syncing,
    poll_seconds: float = 30.0,
    refreeze_seconds: float = REFREEZE_SECONDS,
    stop: threading.Event | None = None,
) -> threading.Thread:
    """Start a daemon thread that freezes the heap once ``source`` has synced (waiting as
    long as that takes), then again every ``refreeze_seconds`` until ``stop`` is set."""
    stopping = stop or threading.Event()

    def wait_then_freeze() -> None:
        while not source.wait_ready(poll_seconds):
            if stopping.is_set():
                return
        while not stopping.is_set():
            frozen = freeze_long_lived()
            log.info("%d objects kept out of garbage collection", frozen)
            stopping.wait(refreeze_seconds)

    thread = threading.Thread(target=wait_then_freeze, name="heap-freeze", daemon=True)
    thread.start()
    return thread
