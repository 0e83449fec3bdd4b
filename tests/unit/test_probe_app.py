"""The probe port's app (``ProbeApp``): only /healthz, /readyz and /metrics, and those
report unhealthy when the event loop serving kube-scheduler does not answer, since they
are served from another loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from extender.http.app import create_app
from extender.http.asgi import ProbeApp
from extender.service import Extender, StaticSource
from tests.builders import node, snapshot


@pytest.fixture
def extender_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread, standing for the extender server's."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def get(app: ProbeApp, path: str) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [],
        "root_path": "",
        "scheme": "http",
        "server": ("127.0.0.1", 1),
        "client": ("127.0.0.1", 2),
        "http_version": "1.1",
    }
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def probe_app(loop: asyncio.AbstractEventLoop | None) -> ProbeApp:
    app = create_app(Extender(StaticSource(snapshot([node("n0")]))))
    if loop is not None:
        app.api.state.event_loop = loop
    return ProbeApp(app, heartbeat_seconds=0.3)


def test_health_is_served_while_the_extender_loop_answers(
    extender_loop: asyncio.AbstractEventLoop,
) -> None:
    app = probe_app(extender_loop)
    assert get(app, "/readyz") == (200, b'{"status":"ready"}')
    assert get(app, "/healthz") == (200, b'{"status":"ok"}')


def test_a_stuck_extender_loop_is_unhealthy_on_the_probe_port(
    extender_loop: asyncio.AbstractEventLoop,
) -> None:
    app = probe_app(extender_loop)
    blocked = threading.Event()
    extender_loop.call_soon_threadsafe(lambda: (blocked.set(), time.sleep(1.5)))
    assert blocked.wait(5)
    status, body = get(app, "/healthz")
    assert status == 503 and b"has not answered in 0.3 s" in body
    # Metrics are still served (they read no loop state).
    assert get(app, "/metrics")[0] == 200


def test_before_the_extender_server_starts_probes_say_so() -> None:
    status, body = get(probe_app(None), "/readyz")
    assert status == 503 and b"not running" in body


def test_other_paths_are_not_served_on_the_probe_port() -> None:
    status, body = get(probe_app(None), "/debug/quotas")
    assert status == 404 and b"not served on the probe port" in body
