"""The one-write transport under uvicorn's protocol: a response's header block goes out
with its body, in one write, and nothing is lost, reordered or held past the loop's round."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.http.protocol import _OneWriteTransport

HEADERS = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


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


def test_headers_alone_are_sent_at_the_end_of_the_round() -> None:
    async def run() -> list[bytes]:
        inner = FakeTransport()
        transport = _OneWriteTransport(inner, asyncio.get_running_loop())
        transport.write(HEADERS)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return inner.writes

    assert asyncio.run(run()) == [HEADERS]


def test_close_sends_what_is_held_first() -> None:
    async def run() -> tuple[list[bytes], bool]:
        inner = FakeTransport()
        transport = _OneWriteTransport(inner, asyncio.get_running_loop())
        transport.write(HEADERS)
        transport.close()
        await asyncio.sleep(0)
        return inner.writes, inner.closed

    assert asyncio.run(run()) == ([HEADERS], True)
