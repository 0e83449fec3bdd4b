"""The lean ASGI layer in front of FastAPI that answers kube-scheduler's verbs.

Each verb call sits on kube-scheduler's serial scheduling cycle, and FastAPI's
per-request machinery costs more than the decision itself (docs/benchmarks.md), so
:class:`MusterApp` answers ``POST`` to a verb straight from ASGI: the body read (413
over the limit), the handler run inline on the event loop or in a worker thread, a
:class:`ClientError` turned into its 4xx, a bug into a logged JSON 500.  Everything
else goes on to FastAPI.  :mod:`extender.http.verbs` holds the verbs' handlers;
:mod:`extender.http.app` builds the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from prometheus_client import Counter, Histogram
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool

from extender.service import StateBusy

log = logging.getLogger(__name__)

_Scope = MutableMapping[str, Any]
_Message = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[_Message]]
_Send = Callable[[_Message], Awaitable[None]]


class ClientError(Exception):
    """A request the client got wrong: answered with ``status`` and a JSON error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Verb:
    """One extender verb: its metric label, its handler (body in, JSON out; told whether
    it may wait for the state), and whether it runs on the event loop (``inline``)
    or in a worker thread."""

    name: str
    handle: Callable[[bytes, bool], bytes]
    inline: bool


#: What the probe port serves: kubelet's probes and Prometheus's scrape.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: How long the extender's event loop may take to answer the probe port's heartbeat.
HEARTBEAT_SECONDS = 5.0


class ProbeApp:
    """``app`` limited to :data:`PROBE_PATHS`, for a plain-HTTP port beside a mutual-TLS
    one: kubelet probes and Prometheus present no client certificate, and these paths
    neither change nor reveal any decision.  Every other path is a 404 saying so.

    It runs on a server (and event loop) of its own, so ``/healthz`` and ``/readyz``
    first check that the event loop serving kube-scheduler answers (a heartbeat): a stuck
    extender must not look healthy through another port."""

    def __init__(self, app: MusterApp, heartbeat_seconds: float = HEARTBEAT_SECONDS) -> None:
        self.app = app
        self.heartbeat_seconds = heartbeat_seconds

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            return  # the probe server runs without lifespan events
        path = scope["path"]
        if path not in PROBE_PATHS:
            served = ", ".join(sorted(PROBE_PATHS))
            error = f"{path}: not served on the probe port (only {served})"
            await _send_json(send, 404, _error_body(error))
            return
        if path != "/metrics":
            problem = await self._heartbeat()
            if problem is not None:
                await _send_json(send, 503, to_json({"status": problem}))
                return
        await self.app(scope, receive, send)

    async def _heartbeat(self) -> str | None:
        """``None`` when the extender's event loop runs a no-op in time, else why not."""
        loop: asyncio.AbstractEventLoop | None = getattr(self.app.api.state, "event_loop", None)
        if loop is None or loop.is_closed():
            return "the extender server is not running"
        here = asyncio.get_running_loop()
        answered: asyncio.Future[None] = here.create_future()

        def answer() -> None:  # on this loop, once the extender's loop ran its callback
            if not answered.done():
                answered.set_result(None)

        def relay() -> None:  # on the extender's loop
            with contextlib.suppress(RuntimeError):  # this loop closed meanwhile
                here.call_soon_threadsafe(answer)

        loop.call_soon_threadsafe(relay)
        try:
            await asyncio.wait_for(answered, self.heartbeat_seconds)
        except TimeoutError:
            return f"the extender's event loop has not answered in {self.heartbeat_seconds:g} s"
        return None


class MusterApp:
    """The ASGI app: ``POST`` to an extender verb is answered here, straight from ASGI;
    everything else goes on to the FastAPI app (``api``).

    Each verb call sits on kube-scheduler's serial scheduling cycle, and FastAPI's
    per-request machinery (middleware, routing, request objects) costs more than the
    decision itself (docs/benchmarks.md).  Only the verbs read a request body, so
    ``max_bytes`` (413 over it, declared or streamed) is enforced here.
    """

    def __init__(
        self,
        api: FastAPI,
        verbs: Mapping[str, Verb],
        *,
        max_bytes: int,
        latency: Histogram,
        requests: Counter,
    ) -> None:
        self.api = api
        self.verbs = verbs
        self.max_bytes = max_bytes
        self.latency = {verb.name: latency.labels(verb.name) for verb in verbs.values()}
        self.requests = requests

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        verb = self.verbs.get(_verb_path(scope)) if scope["type"] == "http" else None
        if verb is None:
            await self.api(scope, receive, send)
            return
        if scope["method"] != "POST":
            error = f"{scope['method']} {scope['path']}: method not allowed, use POST"
            await _send_json(send, 405, _error_body(error), [(b"allow", b"POST")])
            return
        start = time.perf_counter()
        try:
            body = await self._read_body(scope, receive)
            start = time.perf_counter()  # counted from the body read, as answer_now counts
            status, payload = 200, await self._answer(verb, body)
        except ClientError as error:
            status, payload = error.status, _error_body(error.message)
        except _Disconnected:
            self.requests.labels(verb.name, "disconnected").inc()
            return
        except Exception as error:  # a bug: answer it, count it, keep serving
            status, payload = _bug(verb, error)
        self.counted(verb, status, start)
        await _send_json(send, status, payload)

    def answer_now(self, verb: Verb, body: bytes) -> tuple[int, bytes] | None:
        """An inline verb's answer (status, JSON), computed at once on the event loop, for
        a body already read; ``None`` if the state is busy (nothing was done: answer it
        through :meth:`__call__`, which waits in a worker thread).  Counted as
        :meth:`__call__` counts, from the body read."""
        start = time.perf_counter()
        try:
            status, payload = 200, verb.handle(body, False)
        except StateBusy:
            return None
        except ClientError as error:
            status, payload = error.status, _error_body(error.message)
        except Exception as error:  # a bug: answer it, count it, keep serving
            status, payload = _bug(verb, error)
        self.counted(verb, status, start)
        return status, payload

    def counted(self, verb: Verb, status: int, start: float) -> None:
        """Record an answered call: its latency since ``start`` (the body read: the time to
        answer, with any wait for the state) and its status."""
        self.latency[verb.name].observe(time.perf_counter() - start)
        self.requests.labels(verb.name, str(status)).inc()

    async def _answer(self, verb: Verb, body: bytes) -> bytes:
        """Inline verbs run on the event loop unless the state is busy (an informer
        relisting, a preemption being planned): then in a worker thread, so the loop
        keeps answering everything else."""
        if verb.inline:
            try:
                return verb.handle(body, False)
            except StateBusy:
                pass
        return await run_in_threadpool(verb.handle, body, True)

    async def _read_body(self, scope: _Scope, receive: _Receive) -> bytes:
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise ClientError(413, f"request body over {self.max_bytes} bytes")
        chunks = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise ClientError(413, f"request body over {self.max_bytes} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _bug(verb: Verb, error: Exception) -> tuple[int, bytes]:
    """A bug's answer, logged with its traceback: a JSON 500."""
    log.exception("%s: unexpected error", verb.name, exc_info=error)
    return 500, _error_body(f"internal error: {type(error).__name__}")


class _Disconnected(Exception):
    """The client went away before its request body was read: nobody to answer."""


def _verb_path(scope: _Scope) -> str:
    """The request path as a verb key: without the app's root path, repeated or trailing
    slashes (a ``urlPrefix`` ending in ``/`` makes kube-scheduler ask for ``//filter``)."""
    return verb_key(str(scope["path"]), str(scope.get("root_path") or ""))


def verb_key(path: str, root: str = "") -> str:
    """A request path as :attr:`MusterApp.verbs` keys it (see :func:`_verb_path`)."""
    if root and path.startswith(root):
        path = path[len(root) :]
    return "/" + "/".join(part for part in path.split("/") if part)


def _header(scope: _Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value)
    return None


def _error_body(message: str) -> bytes:
    return to_json({"error": message})


async def _send_json(
    send: _Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
