"""``muster serve``'s HTTP protocol (:mod:`extender.http.protocol`) on a real socket: verb
calls answered straight from the protocol say what the ASGI path says, every call it
does not take (busy snapshot, no or large ``Content-Length``, ``Connection: close``,
HTTP/1.0, other methods and paths) still gets uvicorn's answer, and each response
goes out in one write."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

import localcluster as lc
from extender.http.asgi import MusterApp, Verb
from extender.http.protocol import VerbProtocol, _OneWriteTransport
from extender.service import Extender
from tests.unit.test_http import _RecordingLock, cluster, scheduler_pod

HEADERS = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


@pytest.fixture
def served() -> Iterator[tuple[httpx.Client, TestClient, Extender, list[str]]]:
    """The app of :func:`tests.unit.test_http.cluster` on uvicorn with the protocol, a
    client for it, the ASGI test client of another such app (same cluster, same calls),
    the served app's extender, and the verbs the protocol answered itself."""
    served_asgi, extender, _ = cluster()
    asgi, _, _ = cluster()
    app = served_asgi.app
    assert isinstance(app, MusterApp)
    fast: list[str] = []
    answer_now = app.answer_now

    def counted(verb: Verb, body: bytes) -> tuple[int, bytes] | None:
        fast.append(verb.name)
        return answer_now(verb, body)

    app.answer_now = counted  # type: ignore[method-assign]
    port = lc.free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=VerbProtocol,
        log_level="warning",
        lifespan="off",
        proxy_headers=False,  # as muster serve runs it: the app unwrapped
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        yield client, asgi, extender, fast
    server.should_exit = True
    thread.join(timeout=10)


def calls(client: httpx.Client | TestClient) -> str:
    metrics = client.get("/metrics").text
    return "\n".join(
        line for line in metrics.splitlines() if line.startswith("muster_extender_requests_total")
    )


BODIES: list[tuple[str, bytes]] = [
    ("/filter", json.dumps({"Pod": scheduler_pod("a-0", gpu=8), "NodeNames": ["n0", "n3", "x"]})),
    ("/filter", json.dumps({"Pod": scheduler_pod("a-1", gpu=99), "NodeNames": ["n0"]})),
    ("/filter//", json.dumps({"pod": scheduler_pod("a-2", gpu=1), "nodenames": ["n3"]})),
    ("/prioritize", json.dumps({"Pod": scheduler_pod("a-0", gpu=8), "NodeNames": ["n0", "n3"]})),
    ("/filter", b'{"Pod": null}'),
    ("/filter", b"{not json"),
    ("/filter", b""),
    ("/preempt", json.dumps({"Pod": scheduler_pod("a-0", gpu=8), "NodeNameToMetaVictims": {}})),
]  # type: ignore[list-item]


@pytest.mark.parametrize(("path", "body"), BODIES)
def test_answers_as_the_asgi_path_does(
    served: tuple[httpx.Client, TestClient, Extender, list[str]], path: str, body: str | bytes
) -> None:
    client, asgi, _, fast = served
    content = body.encode() if isinstance(body, str) else body
    mine = client.post(path, content=content)
    theirs = asgi.post(path, content=content)
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())
    assert mine.headers["content-type"] == "application/json"
    assert calls(client) == calls(asgi)  # counted once, as the ASGI path counts
    # filter and prioritize answered by the protocol; preempt (a worker thread's) not
    assert fast == ([] if path == "/preempt" else [path.strip("/")])


def test_calls_the_fast_path_does_not_take_get_uvicorns_answer(
    served: tuple[httpx.Client, TestClient, Extender, list[str]],
) -> None:
    client, _, _, fast = served
    body = json.dumps({"Pod": scheduler_pod("a-0", gpu=1), "NodeNames": ["n3"]}).encode()

    def chunked() -> Iterator[bytes]:  # no Content-Length
        yield body[:10]
        yield body[10:]

    assert client.post("/filter", content=chunked()).json()["NodeNames"] == ["n3"]
    closing = client.post("/filter", content=body, headers={"connection": "close"})
    assert closing.json()["NodeNames"] == ["n3"]
    assert client.get("/filter").status_code == 405
    assert client.get("/healthz").json() == {"status": "ok"}
    big = json.dumps(
        {"Pod": scheduler_pod("a-0"), "NodeNames": [f"n{i:07d}" for i in range(30_000)]}
    )
    assert client.post("/filter", content=big).status_code == 413  # the app's 256 KiB limit
    with socket.create_connection(client.base_url.netloc.decode().split(":")) as sock:
        sock.sendall(b"POST /filter HTTP/1.0\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK") and b'"NodeNames":["n3"]' in answer
    assert fast == []
    assert client.post("/filter", content=body).json()["NodeNames"] == ["n3"]
    assert fast == ["filter"]


def test_a_busy_snapshot_is_answered_once_free_and_the_loop_keeps_serving(
    served: tuple[httpx.Client, TestClient, Extender, list[str]],
) -> None:
    client, _, extender, fast = served
    lock = _RecordingLock()
    extender.source._lock = lock  # type: ignore[attr-defined]
    body = {"Pod": scheduler_pod("a-0", gpu=1), "NodeNames": ["n3"]}
    answers: list[httpx.Response] = []
    lock._lock.acquire()
    try:
        worker = threading.Thread(target=lambda: answers.append(client.post("/filter", json=body)))
        worker.start()
        deadline = time.monotonic() + 10
        while True not in lock.calls:  # the fast attempt failed; a worker thread waits
            assert time.monotonic() < deadline, "the filter never moved to a worker thread"
            time.sleep(0.005)
        with httpx.Client(base_url=client.base_url, timeout=10) as other:
            assert other.get("/healthz").json() == {"status": "ok"}
        assert answers == []
    finally:
        lock._lock.release()
    worker.join(timeout=30)
    assert answers[0].json()["NodeNames"] == ["n3"]
    assert fast == ["filter"]  # tried at once, then answered by the ASGI path
    assert 'muster_extender_requests_total{code="200",verb="filter"} 1.0' in calls(client)


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_headers_and_body_go_out_in_one_write() -> None:
    async def run() -> list[bytes]:
        inner = FakeTransport()
        transport = _OneWriteTransport(inner, asyncio.get_running_loop())
        transport.write(HEADERS)
        assert inner.writes == []
        transport.write(b"{}")
        transport.write(b"more")  # not a header block: straight through
        await asyncio.sleep(0)
        return inner.writes

    assert asyncio.run(run()) == [HEADERS + b"{}", b"more"]


def test_headers_alone_are_sent_at_the_end_of_the_round_and_before_a_close() -> None:
    async def run() -> tuple[list[bytes], list[bytes], bool]:
        inner = FakeTransport()
        transport = _OneWriteTransport(inner, asyncio.get_running_loop())
        transport.write(HEADERS)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        closing = FakeTransport()
        transport = _OneWriteTransport(closing, asyncio.get_running_loop())
        transport.write(HEADERS)
        transport.close()
        return inner.writes, closing.writes, closing.closed

    assert asyncio.run(run()) == ([HEADERS], [HEADERS], True)
