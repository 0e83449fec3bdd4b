"""List-and-watch of one resource, in a thread, feeding callbacks.

The client-go informer pattern, small: list (paginated) to get a consistent
view and its ``resourceVersion``, then watch from there with bookmarks.  A
watch that ends is resumed from the last version seen; ``410 Gone`` (the
version fell out of the API server's window) means list again; any other
error backs off exponentially (capped) and retries, so an API server restart
is survived without help.  A relist diffs against what the informer holds,
so objects deleted while it was not watching are reported deleted.  The first list
is handed on page by page (there is nothing to diff against), each next page asked for
while the one before is handed on, and an informer made
with ``keep_objects=False`` remembers of each object only its name, namespace, UID and
``resourceVersion`` (what the diff needs): 50,000 pods' JSON held would be ~1 GB.  Pages
and events are decoded by msgspec (:mod:`extender.kube.decoding`): ``decoding=LEAN``, for
pods and nodes, leaves out their ``managedFields``.

A resource whose API is not installed (``404``, e.g. a CRD group the
cluster lacks) counts as synced and empty, and is looked for again later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from extender.kube.client import ApiError, Json, KubeClient
from extender.kube.decoding import WHOLE, Decoding
from extender.kube.health import Watched

log = logging.getLogger(__name__)

#: Called with ("ADDED" | "MODIFIED" | "DELETED", object), in the informer's thread.
Handler = Callable[[str, Json], None]


def object_key(obj: Json) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name", ""))
    return f"{namespace}/{name}" if namespace else name


@dataclass
class InformerStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    errors: int = 0
    relists_after_gone: int = 0
    last_error: str = ""


@dataclass
class Informer(Watched):
    client: KubeClient
    path: str  # e.g. /api/v1/pods
    handler: Handler
    label_selector: str = ""
    page_size: int = 500
    watch_seconds: int = 300
    missing_retry_seconds: float = 30.0
    backoff_initial: float = 0.2
    backoff_max: float = 10.0
    #: False: remember only each object's identity and version (a relist's DELETED
    #: then carries just those), for resources with many large objects (pods, nodes).
    keep_objects: bool = True
    #: How pages and events are decoded: ``LEAN`` leaves out the objects' managed fields
    #: and any top-level field beyond a Pod's or a Node's (for those two kinds only).
    decoding: Decoding = WHOLE
    stats: InformerStats = field(default_factory=InformerStats)

    def __post_init__(self) -> None:
        self.synced = threading.Event()
        self.installed = True
        self._store: dict[str, Json] = {}
        self._stop = threading.Event()
        self.name = f"informer {self.path}"
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._init_health()

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        backoff = self.backoff_initial
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                    if version is None:  # not installed
                        self._stop.wait(self.missing_retry_seconds)
                        continue
                    self.round_succeeded()
                version = self._watch(version)
                backoff = self.backoff_initial
            except ApiError as error:
                if error.status == 410:
                    self.stats.relists_after_gone += 1
                    version = None
                    continue
                self._failed(error)
                if error.status == 404:
                    version = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)
            except (httpx.HTTPError, ValueError, OSError) as error:
                self._failed(error)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)
            except Exception as error:  # a bug (in a handler, say): logged, then relist
                self.round_failed(error, time.time())
                version = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)
            else:
                self.round_succeeded()

    def _failed(self, error: Exception) -> None:
        self.stats.errors += 1
        self.stats.last_error = f"{type(error).__name__}: {error}"
        log.warning("informer %s: %s", self.path, self.stats.last_error)

    def _relist(self) -> str | None:
        """List everything; report what changed since the last view; return its version."""
        items: dict[str, Json] = {}
        # Nothing known yet (the first list): each page is handed on as it comes, so the
        # whole list is never held at once.
        first = not self._store
        version = ""
        try:
            for page in self._pages():
                for obj in page.get("items") or []:
                    key = object_key(obj)
                    if first:
                        seen = key in items
                        items[key] = _stub(obj)
                        self._remember(key, obj)
                        self._deliver("MODIFIED" if seen else "ADDED", obj)
                    else:
                        items[key] = obj
                metadata = page.get("metadata") or {}
                if not metadata.get("continue"):
                    version = str(metadata.get("resourceVersion", ""))
        except ApiError as error:
            if error.status != 404:
                raise
            self.installed = False
            for key, obj in list(self._store.items()):
                del self._store[key]
                self._deliver("DELETED", obj)
            self.synced.set()
            return None
        self.installed = True
        self.stats.lists += 1
        for key, obj in list(self._store.items()):
            # Gone, or gone and created again under its name (another UID) while no watch
            # ran: either way the object known is deleted (the new one is ADDED below).
            if key not in items or _uid(items[key]) != _uid(obj):
                del self._store[key]
                self._deliver("DELETED", obj)
        if first:
            self.synced.set()
            return version
        for key, obj in items.items():
            known = self._store.get(key)
            if known is None or _version(known) != _version(obj):
                self._remember(key, obj)
                self._deliver("MODIFIED" if known else "ADDED", obj)
        self.synced.set()
        return version

    def _pages(self) -> Iterator[Json]:
        """The list's pages, in order; each next page is asked for as soon as the one
        before it arrives, so the API server serves it (on another core) while this
        thread hands on the one before (at 150,000 pods the list is minutes of both).
        At most one page waits ahead; an error is raised where its page would be."""
        selector = {"labelSelector": self.label_selector} if self.label_selector else {}
        params: dict[str, str] = {"limit": str(self.page_size), **selector}
        with ThreadPoolExecutor(1, thread_name_prefix=f"{self.name} pages") as pool:
            ahead = pool.submit(self._page, params)
            while True:
                page = ahead.result()
                token = (page.get("metadata") or {}).get("continue")
                if token:
                    params = {"limit": str(self.page_size), "continue": token, **selector}
                    ahead = pool.submit(self._page, params)
                yield page
                if not token:
                    return

    def _page(self, params: dict[str, str]) -> Json:
        return self.client.request("GET", self.path, params=params, decode=self.decoding.page)

    def _watch(self, version: str) -> str:
        """Watch from ``version`` until the server closes the watch; return the last version."""
        self.stats.watches += 1
        params = {
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_seconds),
        }
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        with self.client.watch(
            self.path, params, read_timeout=self.watch_seconds + 30, decode=self.decoding.event
        ) as events:
            for event in events:
                if self._stop.is_set():
                    break
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    raise ApiError(int(obj.get("code", 500)), str(obj.get("message", "")), obj)
                new_version = _version(obj)
                if new_version:
                    version = new_version
                if kind == "BOOKMARK":
                    continue
                key = object_key(obj)
                if kind == "DELETED":
                    self._store.pop(key, None)
                else:
                    self._remember(key, obj)
                self._deliver(str(kind), obj)
        return version

    def _remember(self, key: str, obj: Json) -> None:
        self._store[key] = obj if self.keep_objects else _stub(obj)

    def _deliver(self, kind: str, obj: Json) -> None:
        self.stats.events += 1
        try:
            self.handler(kind, obj)
        except Exception:  # a handler bug must not kill the informer
            log.exception("informer %s: handler failed on %s %s", self.path, kind, object_key(obj))


def _uid(obj: Json) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def _stub(obj: Json) -> Json:
    """An object's identity and version: what a relist diffs and a DELETED needs."""
    metadata = obj.get("metadata") or {}
    kept = {
        k: metadata[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in metadata
    }
    return {"metadata": kept}


def _version(obj: Any) -> str:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    return str(metadata.get("resourceVersion", "")) if isinstance(metadata, dict) else ""
