"""A slice of the soak in ``make test``: ``SOAK_SLICE_SECONDS`` (180) of the stream of
``SOAK_SEED`` (a fixed seed by default, so the suite is repeatable; ``make soak`` draws a
new one each run), on its own control plane.  A violation fails the test with the seed.

One violation is known and reported instead (``KNOWN``): a preempting job's pods bind
as soon as its plan is committed, while its victims are still bound (until the evictor
evicts them and their grace period ends), so for that while a quota (often the parent
of the two) holds more bound pods than its ``max``.  The soak found it
(``python -m tests.soak --seed 1`` shows it 28 s in; docs/reliability.md).  The test xfails with
the evidence while that is so; every other violation fails it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.soak.run import run_soak

pytestmark = pytest.mark.e2e

DEFAULT_SEED = 20261123
KNOWN = "bound beyond a quota's max"


def test_soak_slice(tmp_path: Path) -> None:
    seed = int(os.environ.get("SOAK_SEED") or DEFAULT_SEED)
    seconds = float(os.environ.get("SOAK_SLICE_SECONDS") or 180)
    result = run_soak(seed, seconds, tmp_path / "soak", say=print)
    print(result.report())
    assert result.figures["jobs submitted"] > 0
    assert sum(result.figures["faults injected"].values()) > 0
    others = [v for v in result.violations if v.kind != KNOWN]
    assert not others, result.report()
    if result.violations:
        pytest.xfail(f"known: preemptor bound before its victims left\n{result.report()}")
