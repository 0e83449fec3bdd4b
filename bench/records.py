"""What checking Muster's records costs the informer, per pod event.

    python -m bench.records [--events 20000] [--repeat 7]

The informer reads every pod event as ``believed_pod`` (records Muster did not sign
dropped, :mod:`extender.core.records`) and then ``parse_pod``.  For a pod with no record
(most pods) and for a pending pod carrying a signed reservation, this times both steps
and ``parse_pod`` alone, each over ``--events`` calls, ``--repeat`` times, interleaved;
reported: the median microseconds per event and the ratio with the check to without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from base import keys
from extender.core.objects import parse_pod
from extender.core.records import RecordKeys, believed_pod
from tests.builders import pod

KEYS = RecordKeys((("bench", b"b" * 32),))


def pods() -> dict[str, dict[str, Any]]:
    """A running pod with no record, and a pending one with a signed reservation."""
    plain = pod("worker-0", "team-a", gpu=8, node="n0", preemptible=True)
    plain["metadata"]["uid"] = "uid-plain"
    reserved = pod("train-0", "team-a", gpu=8, group="train", can_preempt=True)
    reserved["metadata"]["uid"] = "uid-reserved"
    note = {
        "job": "team-a/train",
        "node": "n3",
        "created": 1_767_261_600.0,
        "expires": 1_767_261_900.0,
        "victims": [f"team-b/b-{i}" for i in range(8)],
    }
    signed = KEYS.sign(keys.RESERVATION_ANNOTATION, "uid-reserved", note)
    reserved["metadata"]["annotations"][keys.RESERVATION_ANNOTATION] = json.dumps(signed)
    return {"no record": plain, "signed reservation": reserved}


def per_event(action: Callable[[], object], events: int) -> float:
    start = time.perf_counter()
    for _ in range(events):
        action()
    return (time.perf_counter() - start) / events * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()
    print(f"{'pod':<20} {'parse_pod µs':>13} {'checked µs':>11} {'ratio':>6}")
    for name, obj in pods().items():
        plain: list[float] = []
        checked: list[float] = []
        for _ in range(options.repeat):
            plain.append(per_event(lambda o=obj: parse_pod(o), options.events))
            checked.append(
                per_event(lambda o=obj: parse_pod(believed_pod(o, KEYS)[0]), options.events)
            )
        p, c = statistics.median(plain), statistics.median(checked)
        print(f"{name:<20} {p:>13.2f} {c:>11.2f} {c / p:>6.3f}")


if __name__ == "__main__":
    main()
