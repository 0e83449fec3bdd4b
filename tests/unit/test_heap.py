"""The serving process keeps its initial state out of garbage collection, once synced."""

from __future__ import annotations

import gc
import threading

from extender.cli.heap import freeze_once_synced


class _Source:
    """Synced on the third look, each look recorded."""

    def __init__(self) -> None:
        self.looks = 0
        self.frozen_when_looked: list[int] = []
        self.synced = threading.Event()

    def wait_ready(self, timeout: float) -> bool:
        self.looks += 1
        self.frozen_when_looked.append(gc.get_freeze_count())
        if self.looks >= 3:
            self.synced.set()
            return True
        return False


def test_the_heap_is_frozen_once_the_source_has_synced_and_not_before() -> None:
    gc.unfreeze()
    source = _Source()
    try:
        thread = freeze_once_synced(source, poll_seconds=0.0)
        thread.join(timeout=30)
        assert not thread.is_alive()
        # It looked until the source said it had synced, then froze what was alive.
        assert source.looks == 3
        assert source.frozen_when_looked == [0, 0, 0]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
