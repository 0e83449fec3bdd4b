"""uvicorn's httptools protocol, with kube-scheduler's verb calls answered straight from it.

Each verb call sits on kube-scheduler's serial scheduling cycle, and for a call of a
few hundred microseconds uvicorn's per-request machinery (an ASGI scope, a
request-response cycle, a task, the ASGI messages) costs more than Muster's decision
(docs/benchmarks.md, "the extender floor").  :class:`VerbProtocol` answers a ``POST`` to
an inline verb (filter, prioritize) itself, once its body is read, on the event loop:
:meth:`~extender.http.asgi.MusterApp.answer_now`, the same handler, errors and metrics
as through ASGI.  A call it cannot answer so (the state busy, a body without a
``Content-Length`` or over :data:`FAST_MAX_BYTES`, a pipelined request, ``Expect:
100-continue``, ``Connection: close``, HTTP/1.0) is handed to uvicorn's own path
unchanged, as is every other request.

Also, uvicorn writes a response's status line and headers on ``http.response.start``
and its body in a second write: on a TCP connection (``TCP_NODELAY``) two segments, and
for kube-scheduler's Go client often two wake-ups.  The transport uvicorn is given here
holds a write ending a header block and sends it with the next write (the body), or at
the end of the event loop's round if none follows.  The bytes on the wire, and their
order, are unchanged.

Both lean on uvicorn's httptools protocol's internals (uvicorn is pinned in
pyproject.toml); ``tests/unit/test_verb_protocol.py`` sends the same calls through both
paths on a real socket.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from extender.http.asgi import MusterApp, Verb, verb_key

#: The largest request body answered on the fast path (a verb call with node names is a
#: few KiB; whole Node objects, a few MiB, go through uvicorn's flow control).
FAST_MAX_BYTES = 1 << 20


class _OneWriteTransport(asyncio.Transport):
    """``transport`` with a response's header block held for the write that follows."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held + bytes(data))
            return
        if data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            # A status line and headers: the body comes next in this round, as a rule.
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(held)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)


class VerbProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol (``http=`` of ``uvicorn.Config``) over the
    one-write transport, answering inline verb calls itself (see the module docstring)."""

    _fast: Verb | None = None
    _fast_body: list[bytes]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, though they are one.
        stream = cast(asyncio.Transport, transport)
        super().connection_made(_OneWriteTransport(stream, asyncio.get_running_loop()))

    def on_message_begin(self) -> None:
        self._fast = None
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._fast = self._fast_verb()
        if self._fast is None:
            super().on_headers_complete()
        else:
            self._fast_body = []

    def on_body(self, body: bytes) -> None:
        if self._fast is None:
            super().on_body(body)
        else:
            self._fast_body.append(body)

    def on_message_complete(self) -> None:
        verb = self._fast
        if verb is None:
            super().on_message_complete()
            return
        self._fast = None
        body = b"".join(self._fast_body)
        self._fast_body = []
        app = self.app
        assert isinstance(app, MusterApp)
        answer = app.answer_now(verb, body)
        if answer is None:  # the state is busy: uvicorn's path, which can wait
            super().on_headers_complete()
            if body:
                super().on_body(body)
            super().on_message_complete()
            return
        status, payload = answer
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(payload))
        self.transport.write(b"".join(head) + payload)
        self.on_response_complete()

    def _fast_verb(self) -> Verb | None:
        """The inline verb this request calls, if it may be answered on the fast path."""
        app = self.app
        if (
            not isinstance(app, MusterApp)
            or self.parser.get_method() != b"POST"
            or self.root_path
            or self.expect_100_continue
            or self.parser.get_http_version() != "1.1"
            or not self.parser.should_keep_alive()
            or self.parser.should_upgrade()
            or (self.cycle is not None and not self.cycle.response_complete)
            or self.pipeline
        ):
            return None
        path = httptools.parse_url(self.url).path
        if b"%" in path:
            return None
        verb = app.verbs.get(verb_key(path.decode("ascii", "replace")))
        if verb is None or not verb.inline:
            return None
        length = next((value for name, value in self.headers if name == b"content-length"), None)
        if not (length and length.isdigit() and int(length) <= min(FAST_MAX_BYTES, app.max_bytes)):
            return None  # unknown, or large: uvicorn's flow control, and a 413 over the limit
        return verb
