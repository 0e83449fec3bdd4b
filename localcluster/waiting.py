"""Polling with a deadline.

``wait_until`` is how the harness (and the tests built on it) waits for anything: a
component's readiness endpoint, a CRD being served, a pod reaching a state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.1,
    what: str = "condition",
    on_timeout: Callable[[], str] | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    Exceptions raised by ``condition`` count as "not yet" (the last one is reported).
    Raises ``TimeoutError`` after ``timeout`` seconds; its message names ``what`` and
    includes ``on_timeout()`` when given (e.g. the last observed state, or log tails).
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
        except Exception as exc:
            last_error = exc
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    message = f"timed out after {timeout:.1f}s waiting for {what}"
    if last_error is not None:
        message += f" (last error: {last_error!r})"
    if on_timeout is not None:
        message += "\n" + on_timeout()
    raise TimeoutError(message)
