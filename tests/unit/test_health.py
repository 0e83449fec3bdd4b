"""Honest health (issue #14, item 6): a background thread's failures show in /readyz at
once and in /healthz after the grace period; a failing round does not end the thread."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient

import localcluster as lc
from extender.http.app import create_app
from extender.kube.health import Health, Watched
from extender.kube.worker import PeriodicWorker
from extender.service import Extender, StaticSource
from tests.builders import node, snapshot


class Flaky(PeriodicWorker):
    """Raises in every round while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__("flaky", 0.01)
        self.failing = threading.Event()
        self.rounds = 0

    def tick(self) -> None:
        self.rounds += 1
        if self.failing.is_set():
            raise RuntimeError("boom")


class Gone(Watched):
    """A thread that has ended on its own."""

    def __init__(self) -> None:
        self.name = "gone"
        self._thread = threading.Thread(target=lambda: None)
        self._init_health()
        self._thread.start()
        self._thread.join()


def test_a_failing_worker_keeps_running_and_is_a_problem_until_a_round_succeeds() -> None:
    health = Health(grace_seconds=60)
    worker = Flaky()
    health.add(worker)
    worker.failing.set()
    worker.start()
    try:
        problems = lc.wait_until(lambda: health.problems() or None, timeout=5, what="a problem")
        assert "flaky: failing since" in problems[0] and "RuntimeError: boom" in problems[0]
        before = worker.rounds
        lc.wait_until(lambda: worker.rounds > before + 2 or None, timeout=5, what="more rounds")
        assert health.lasting_problems() == []  # not for 60 s yet
        worker.failing.clear()
        lc.wait_until(lambda: not health.problems() or None, timeout=5, what="recovered")
    finally:
        worker.stop()
    assert health.problems() == []  # stopped on purpose: not a problem


def test_a_dead_thread_is_a_lasting_problem_after_the_grace_period() -> None:
    now = [1000.0]
    health = Health(grace_seconds=30, clock=lambda: now[0])
    health.add(Gone())
    assert health.problems() == ["gone: its thread died"]
    assert health.lasting_problems() == []  # first seen dead now
    now[0] += 31
    assert health.lasting_problems() == ["gone: its thread died"]


class Troubled(StaticSource):
    def __init__(self, problems: list[str], lasting: list[str]) -> None:
        super().__init__(snapshot([node("n0")]))
        self._problems, self._lasting = problems, lasting

    def problems(self) -> list[str]:
        return self._problems

    def lasting_problems(self) -> list[str]:
        return self._lasting


def test_readyz_fails_at_once_and_healthz_once_a_problem_lasts() -> None:
    fresh = TestClient(create_app(Extender(Troubled(["postfilter: failing since x"], []))))
    assert fresh.get("/readyz").status_code == 503
    assert fresh.get("/readyz").json()["problems"] == ["postfilter: failing since x"]
    assert fresh.get("/healthz").status_code == 200
    lasting = TestClient(create_app(Extender(Troubled(["p"], ["p"]))))
    assert lasting.get("/healthz").status_code == 503
    assert lasting.get("/healthz").json() == {"status": "unhealthy", "problems": ["p"]}
    fine = TestClient(create_app(Extender(Troubled([], []))))
    assert fine.get("/readyz").json() == {"status": "ready"}
    assert fine.get("/healthz").json() == {"status": "ok"}
