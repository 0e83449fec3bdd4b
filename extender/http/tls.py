"""Serving certificates that renew themselves: :class:`CertificateReloader`.

cert-manager (or any rotation) rewrites the files of a mounted Secret in place; the TLS
context uvicorn built at start-up would keep the old certificate until it expires, and
then kube-scheduler could reach Muster no more.  The reloader watches the files and loads
them into the same :class:`ssl.SSLContext`, which new connections use from then on.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Sequence

log = logging.getLogger(__name__)


class CertificateReloader:
    """Every ``interval`` seconds, reload ``cert``/``key`` (and the client CA bundle) into
    ``context`` when any of the files changed.  A failed load (files caught mid-write)
    keeps the certificate in use and is tried again at the next change or interval."""

    def __init__(
        self,
        context: ssl.SSLContext,
        cert: str,
        key: str,
        client_ca: str | None = None,
        *,
        interval: float = 10.0,
    ) -> None:
        self.context = context
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self.interval = interval
        self.reloads = 0
        self._seen = self._stamps()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tls-reloader", daemon=True)

    def start(self) -> CertificateReloader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _files(self) -> Sequence[str]:
        return [self.cert, self.key, *([self.client_ca] if self.client_ca else [])]

    def _stamps(self) -> tuple[tuple[float, int] | None, ...]:
        """Each file's (mtime, size), following the symlinks a Secret volume swaps."""
        stamps: list[tuple[float, int] | None] = []
        for path in self._files():
            try:
                status = os.stat(path)
            except OSError:
                stamps.append(None)
            else:
                stamps.append((status.st_mtime, status.st_size))
        return tuple(stamps)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            stamps = self._stamps()
            if stamps == self._seen:
                continue
            try:
                self.context.load_cert_chain(self.cert, self.key)
                if self.client_ca:
                    self.context.load_verify_locations(self.client_ca)
            except (OSError, ssl.SSLError) as error:
                log.warning("TLS certificate changed but does not load yet: %s", error)
                continue
            self._seen = stamps
            self.reloads += 1
            log.info("reloaded the TLS certificate from %s", self.cert)
