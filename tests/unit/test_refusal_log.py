"""The PostFilter loop's log of refusals: why a job gets no preemption, said once each time
the reasons change (an operator reads why a guarantee waits), not on every round that asks
again."""

from __future__ import annotations

import logging
from typing import cast

import pytest

from extender.core.config import MusterArgs
from extender.core.decisions import DecisionLog
from extender.kube.client import KubeClient
from extender.kube.postfilter import PostFilterLoop, Refused
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter
from tests.builders import record_keys


def loop() -> PostFilterLoop:
    source = KubeSource(cast(KubeClient, object()), MusterArgs(), record_keys=record_keys)
    return PostFilterLoop(source, cast(ClusterWriter, None), DecisionLog(), clock=lambda: 0.0)


def refusal(job: str, *reasons: str) -> Refused:
    return Refused(job, reasons, pending=(f"{job}-0",), settles=None)


def test_a_refusal_is_logged_once_until_its_reasons_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    postfilter = loop()
    caplog.set_level(logging.INFO, logger="extender.kube.postfilter")
    # The same refusal three times, another, then the first again: three lines (the
    # first, the change, the change back), each naming the job and its reasons.
    for reasons in (("no room",), ("no room",), ("no room",), ("spared",), ("no room",)):
        postfilter._refuse(refusal("team-a/j1", *reasons), now=0.0)
    lines = [r.getMessage() for r in caplog.records if "no preemption" in r.getMessage()]
    assert lines == [
        "no preemption for team-a/j1: no room",
        "no preemption for team-a/j1: spared",
        "no preemption for team-a/j1: no room",
    ]
    # Every refusal is still counted and in the pod's decision log.
    assert postfilter.refused == 5
    assert len(postfilter.decisions.for_pod("team-a/j1-0")) == 5


def test_each_job_has_its_own_last_refusal(caplog: pytest.LogCaptureFixture) -> None:
    postfilter = loop()
    caplog.set_level(logging.INFO, logger="extender.kube.postfilter")
    # Two jobs refused alike, alternating: each is logged once (2 lines, not 4).
    for job in ("team-a/j1", "team-b/j2", "team-a/j1", "team-b/j2"):
        postfilter._refuse(refusal(job, "no room", "spared"), now=0.0)
    lines = [r.getMessage() for r in caplog.records if "no preemption" in r.getMessage()]
    assert lines == [
        "no preemption for team-a/j1: no room; spared",
        "no preemption for team-b/j2: no room; spared",
    ]
