"""A minimal JSON client for the Kubernetes API.

``RestClient`` (dicts in, dicts out, watch streams) is what ``ControlPlane`` and the
``KubeletEmulator`` talk to kube-apiserver with; ``ApiError`` is its non-2xx answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3

from .common import Json


class ApiError(RuntimeError):
    """A Kubernetes API request answered with an unexpected HTTP status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.method = method
        self.path = path
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        """The ``reason`` of the Status object in the body ("NotFound", ...), if any."""
        try:
            return str(json.loads(self.body).get("reason", ""))
        except (ValueError, AttributeError):
            return ""


class RestClient:
    """A minimal JSON client for the Kubernetes API (dicts in, dicts out).

    The harness uses it instead of the generated client where it needs raw JSON
    (watch streams, strategic-merge patches of status, custom resources).
    """

    def __init__(self, server: str, token: str, ca_file: Path) -> None:
        self.server = server.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._pool = urllib3.PoolManager(
            num_pools=2, maxsize=8, cert_reqs="CERT_REQUIRED", ca_certs=str(ca_file)
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Json:
        """Send a request; return the decoded JSON body; raise ``ApiError`` unless 2xx."""
        url = self._url(path, query)
        headers = dict(self._headers)
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        response = self._pool.request(
            method,
            url,
            body=data,
            headers=headers,
            timeout=urllib3.Timeout(connect=5.0, read=timeout),
            retries=False,
        )
        text = response.data.decode("utf-8", errors="replace")
        if not 200 <= response.status < 300:
            raise ApiError(method, path, response.status, text)
        if not text:
            return {}
        decoded = json.loads(text)
        return decoded if isinstance(decoded, dict) else {"value": decoded}

    def _get(
        self,
        path: str,
        query: Mapping[str, str | int | bool] | None,
        *,
        connect: float,
        read: float,
        preload: bool,
    ) -> urllib3.BaseHTTPResponse:
        """A raw GET, not retried; ``preload`` false leaves the body to stream."""
        return self._pool.request(
            "GET",
            self._url(path, query),
            headers=self._headers,
            timeout=urllib3.Timeout(connect=connect, read=read),
            retries=False,
            preload_content=preload,
        )

    def get_text(self, path: str, *, timeout: float = 5.0) -> tuple[int, str]:
        """GET ``path`` and return (status, body text); no exception on non-2xx."""
        response = self._get(path, None, connect=2.0, read=timeout, preload=True)
        return response.status, response.data.decode("utf-8", errors="replace")

    def stream(
        self, path: str, query: Mapping[str, str | int | bool], *, timeout: float
    ) -> urllib3.BaseHTTPResponse:
        """Open a streaming GET (a watch); the caller reads and closes it."""
        response = self._get(path, query, connect=5.0, read=timeout, preload=False)
        if response.status != 200:
            body = response.read().decode("utf-8", errors="replace")
            response.release_conn()
            raise ApiError("GET", path, response.status, body)
        return response

    def close(self) -> None:
        self._pool.clear()

    def _url(self, path: str, query: Mapping[str, str | int | bool] | None) -> str:
        url = self.server + path
        if query:
            encoded = {
                k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in query.items()
            }
            url += ("&" if "?" in path else "?") + urlencode(encoded)
        return url
