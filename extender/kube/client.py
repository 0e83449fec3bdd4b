"""A small JSON client for the Kubernetes API, on httpx.

Muster reads and writes raw Kubernetes JSON: the core's parsers take dicts,
and decoding 50,000 pods into generated model classes only to turn them back
into dicts would cost seconds.  A caller may name the decoder of a successful
answer's bytes (the informers': :mod:`extender.kube.decoding`); ``json.loads``
otherwise.  Configuration (kubeconfig files, in-cluster service-account tokens,
their refresh) comes from the official ``kubernetes`` package; requests go
through one pooled ``httpx.Client``.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

Json = dict[str, Any]
#: JSON bytes → the decoded document.
Decode = Callable[[bytes], Any]


class ApiError(RuntimeError):
    """A non-2xx answer: ``status`` and the API server's message."""

    def __init__(self, status: int, message: str, body: Json | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.body = body or {}

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", ""))


class KubeClient:
    def __init__(self, configuration: k8s_client.Configuration) -> None:
        self.configuration = configuration
        verify: ssl.SSLContext | bool
        if configuration.verify_ssl:
            verify = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
            if configuration.cert_file:
                verify.load_cert_chain(configuration.cert_file, configuration.key_file)
        else:
            verify = False
        self._http = httpx.Client(
            base_url=configuration.host,
            verify=verify,
            timeout=httpx.Timeout(30.0, connect=5.0),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
        )

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> KubeClient:
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=configuration
        )
        return cls(configuration)

    @classmethod
    def in_cluster(cls) -> KubeClient:
        configuration = k8s_client.Configuration()
        k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
        return cls(configuration)

    def close(self) -> None:
        self._http.close()

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        # auth_settings() refreshes expiring tokens (in-cluster, exec plugins) as it goes.
        settings: Mapping[str, Any] = self.configuration.auth_settings()
        for setting in settings.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"]).title()] = str(setting["value"])
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def request(
        self,
        method: str,
        path: str,
        body: Json | None = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        decode: Decode | None = None,
    ) -> Json:
        """One request; the answer decoded (by ``decode`` when it succeeded, if given)."""
        response = self._http.request(
            method,
            path,
            params=params,
            content=None if body is None else json.dumps(body).encode(),
            headers=self._headers(content_type if body is not None else None),
            timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
        )
        return _decoded(response, decode)

    @contextmanager
    def watch(
        self,
        path: str,
        params: Mapping[str, str],
        read_timeout: float,
        decode: Decode = json.loads,
    ) -> Iterator[Iterator[Json]]:
        """Stream watch events (``{"type", "object"}``, each line decoded by ``decode``)
        until the server ends the watch."""
        with self._http.stream(
            "GET",
            path,
            params={**params, "watch": "true"},
            headers=self._headers(),
            timeout=httpx.Timeout(read_timeout, connect=5.0),
        ) as response:
            if response.status_code >= 300:
                response.read()
                _decoded(response)
            # iter_bytes: undoes a Content-Encoding, should anything in between compress.
            events = stream_lines(response.iter_bytes())
            yield (decode(line) for line in events if line.strip())


def stream_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Split a byte stream at newlines: a watch sends one JSON event per line.  (Cheaper
    than httpx's ``iter_lines``, which decodes to text first; a newline byte never occurs
    inside a multi-byte UTF-8 character, so splitting bytes is safe.)"""
    parts: list[bytes] = []
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            parts.append(chunk[start:end])
            yield b"".join(parts)
            parts.clear()
            start = end + 1
        if start < len(chunk):
            parts.append(chunk[start:])
    if parts:
        yield b"".join(parts)


def _decoded(response: httpx.Response, decode: Decode | None = None) -> Json:
    try:
        if not response.content:
            body = {}
        elif decode is not None and response.status_code < 300:
            body = decode(response.content)
        else:
            body = response.json()
    except ValueError:
        body = {"message": response.text[:500]}
    if response.status_code >= 300:
        raise ApiError(response.status_code, str(body.get("message", response.reason_phrase)), body)
    return body if isinstance(body, dict) else {"items": body}
