"""The serving process keeps its state out of garbage collection once synced, and again
from time to time (extender.cli.heap)."""

from __future__ import annotations

import gc
import threading
import time

import pytest

from extender.cli import heap


class _Source:
    """Synced on the third look; what was frozen at each look recorded."""

    def __init__(self) -> None:
        self.looks = 0
        self.frozen_when_looked: list[int] = []

    def wait_ready(self, timeout: float) -> bool:
        self.looks += 1
        self.frozen_when_looked.append(gc.get_freeze_count())
        return self.looks >= 3


def test_the_heap_is_frozen_once_synced_not_before_and_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gc.unfreeze()
    frozen: list[int] = []
    real = heap.freeze_long_lived

    def counted() -> int:
        frozen.append(real())
        return frozen[-1]

    monkeypatch.setattr(heap, "freeze_long_lived", counted)
    source, stop = _Source(), threading.Event()
    try:
        thread = heap.freeze_once_synced(source, poll_seconds=0.0, refreeze_seconds=0.01, stop=stop)
        deadline = time.monotonic() + 30
        while len(frozen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()
        # It looked until the source said it had synced, freezing nothing before that.
        assert source.looks == 3
        assert source.frozen_when_looked == [0, 0, 0]
        # Then it froze what was alive, and froze again after refreeze_seconds.
        assert len(frozen) >= 2 and all(count > 0 for count in frozen)
    finally:
        gc.unfreeze()


def test_a_source_that_never_syncs_is_waited_for_until_stopped() -> None:
    class Never:
        def wait_ready(self, timeout: float) -> bool:
            return False

    gc.unfreeze()
    stop = threading.Event()
    thread = heap.freeze_once_synced(Never(), poll_seconds=0.0, stop=stop)
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert gc.get_freeze_count() == 0
