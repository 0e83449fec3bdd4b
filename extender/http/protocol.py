"""uvicorn's httptools protocol, with each response sent in one write.

uvicorn writes a response's status line and headers when the app sends
``http.response.start``, and its body in a second write.  On a TCP connection
(``TCP_NODELAY``, as uvicorn sets it) that is two ``send`` calls, two segments, and
for kube-scheduler's Go client, which reads the headers and then the body, often two
wake-ups: on every verb call of its serial scheduling cycle.  :class:`OneWriteProtocol`
hands uvicorn a transport that holds a write ending a response's headers and sends it
with the next write (the body), or at the end of the event loop's current round if no
write follows.  What goes on the wire, and in which order, is unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


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


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol over :class:`_OneWriteTransport` (``http=`` of
    ``uvicorn.Config``)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, though they are one.
        stream = cast(asyncio.Transport, transport)
        super().connection_made(_OneWriteTransport(stream, asyncio.get_running_loop()))
