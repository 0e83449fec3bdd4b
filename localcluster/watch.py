"""List, then watch, one collection of the Kubernetes API, in a background thread.

``Watcher`` is the loop the ``KubeletEmulator`` and the benchmarks' pod watch share: list
(optionally by label selector, optionally in pages), watch from the list's
resourceVersion with bookmarks, relist after "410 Gone", back off after errors (a lost
connection while kube-apiserver restarts, ...), and ``stop()`` interrupts a blocked
stream.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable

import urllib3

from .common import Json, timestamp
from .rest import RestClient

#: Called with each watch event's type (ADDED, MODIFIED, DELETED) and object.
EventHandler = Callable[[str, Json], object]
#: Called with every item of a complete list (the first one, and each relist).
ListHandler = Callable[[list[Json]], object]


class Watcher:
    """Lists, then watches, ``path`` (e.g. ``/api/v1/pods``) until ``stop()``.

    ``on_list`` gets each complete list's items; ``on_event`` each watch event but
    bookmarks (``on_list`` defaults to passing every listed item to ``on_event`` as
    ``SYNC``). Both run in the watch thread. ``synced`` is set after the first list.
    Errors go to ``on_error`` (default: kept, timestamped, in ``errors``, the last 50).
    """

    def __init__(
        self,
        rest: RestClient,
        path: str,
        on_event: EventHandler,
        *,
        on_list: ListHandler | None = None,
        on_error: Callable[[str], None] | None = None,
        label_selector: str | None = None,
        page_size: int | None = None,
        list_timeout: float = 30.0,
        watch_seconds: int = 300,
        name: str = "watch",
    ) -> None:
        self._rest = rest
        self.path = path
        self._on_event = on_event
        self._on_list = on_list
        self._on_error = on_error
        self.label_selector = label_selector
        self.page_size = page_size
        self.list_timeout = list_timeout
        self.watch_seconds = watch_seconds
        self.name = name
        self.synced = threading.Event()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response_lock = threading.Lock()
        self._response: urllib3.BaseHTTPResponse | None = None

    def start(self) -> None:
        """Start the watch thread (again, after ``stop()``); no-op while it runs."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread, interrupting a blocked watch stream; wait up to ``timeout``."""
        self._stop.set()
        with self._response_lock:
            response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _query(self) -> dict[str, str | int | bool]:
        return {} if self.label_selector is None else {"labelSelector": self.label_selector}

    def _loop(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                rv = self._list()
                self.synced.set()
                backoff = 0.1
                while not self._stop.is_set():
                    rv = self._watch(rv)
            except _Gone:
                continue
            except Exception as exc:
                if self._stop.is_set():
                    break
                self._error(f"{exc!r}")
                self._stop.wait(backoff)
                backoff = min(2.0, backoff * 2)

    def _error(self, message: str) -> None:
        if self._on_error is not None:
            self._on_error(message)
            return
        self.errors.append(f"{timestamp()} {message}")
        del self.errors[:-50]

    def _list(self) -> str:
        """List every page; hand the items over; return the list's resourceVersion."""
        items: list[Json] = []
        rv = ""
        token = ""
        while True:
            query = self._query()
            if self.page_size is not None:
                query["limit"] = self.page_size
            if token:
                query["continue"] = token
            page = self._rest.request("GET", self.path, query=query, timeout=self.list_timeout)
            rv = rv or str(page["metadata"]["resourceVersion"])
            items.extend(page.get("items", []))
            token = str(page["metadata"].get("continue") or "")
            if not token:
                break
        if self._on_list is not None:
            self._on_list(items)
        else:
            for item in items:
                self._on_event("SYNC", item)
        return rv

    def _watch(self, rv: str) -> str:
        """One watch request from ``rv``; return the last resourceVersion seen."""
        query = self._query()
        query.update(
            {
                "watch": True,
                "resourceVersion": rv,
                "allowWatchBookmarks": True,
                "timeoutSeconds": self.watch_seconds,
            }
        )
        response = self._rest.stream(self.path, query, timeout=self.watch_seconds + 30.0)
        with self._response_lock:
            self._response = response
        try:
            if self._stop.is_set():
                return rv
            buffer = b""
            for chunk in response.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        rv = self._dispatch(json.loads(line), rv)
            return rv
        finally:
            with self._response_lock:
                self._response = None
            with contextlib.suppress(Exception):
                response.release_conn()

    def _dispatch(self, event: Json, rv: str) -> str:
        kind = str(event.get("type"))
        obj: Json = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error event: {obj}")
        if kind != "BOOKMARK":
            self._on_event(kind, obj)
        new_rv = obj.get("metadata", {}).get("resourceVersion")
        return str(new_rv) if new_rv else rv


class _Gone(Exception):
    """The watch's resourceVersion is too old: relist."""
