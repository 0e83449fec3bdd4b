"""A slice of the soak in ``make test``: ``SOAK_SLICE_SECONDS`` (180) of the stream of
``SOAK_SEED`` (a fixed seed by default, so the suite is repeatable; ``make soak`` draws a
new one each run), on its own control plane.  A violation fails the test with the seed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.soak.run import run_soak

# Its own control plane, on its own pytest-xdist worker in `make test`.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("soak")]

DEFAULT_SEED = 20261123


def test_soak_slice(tmp_path: Path) -> None:
    seed = int(os.environ.get("SOAK_SEED") or DEFAULT_SEED)
    seconds = float(os.environ.get("SOAK_SLICE_SECONDS") or 180)
    result = run_soak(seed, seconds, tmp_path / "soak", say=print)
    print(result.report())
    assert result.figures["jobs submitted"] > 0
    assert result.figures["jobs completed"] > 0  # Jobs run to completion on the controllers
    assert sum(result.figures["faults injected"].values()) > 0
    assert result.passed, result.report()
