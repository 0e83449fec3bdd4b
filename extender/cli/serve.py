"""``muster serve``: the extender over HTTP(S), on uvicorn.

With ``--snapshot FILE...`` it serves over a fixed cluster read from
manifests (the input of ``simulate``), with no API server: for trying the
protocol, demos and tests.  TLS with ``--tls-cert``/``--tls-key``; mutual
TLS (as kube-scheduler's ``tlsConfig`` supports) with ``--client-ca``.
"""

from __future__ import annotations

import ssl
import sys
from collections.abc import Sequence

import uvicorn

from extender.cli.manifests import InputError, load_manifests
from extender.cli.simulate import load_args_file
from extender.http.app import DEFAULT_MAX_BODY_BYTES, create_app
from extender.service import Extender, StaticSource


def run(
    *,
    config: str | None,
    snapshot_files: Sequence[str],
    host: str,
    port: int,
    tls_cert: str | None,
    tls_key: str | None,
    client_ca: str | None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> int:
    """The ``serve`` command; returns the exit status."""
    if (tls_cert is None) != (tls_key is None):
        print("muster serve: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    if client_ca is not None and tls_cert is None:
        print("muster serve: --client-ca needs --tls-cert and --tls-key", file=sys.stderr)
        return 2
    if not snapshot_files:
        print(
            "muster serve: no cluster to serve: pass --snapshot FILE... (the Kubernetes "
            "adapter that watches a live cluster is not part of this version)",
            file=sys.stderr,
        )
        return 2
    try:
        args = load_args_file(config)
        loaded = load_manifests(snapshot_files, args)
    except InputError as error:
        print(f"muster serve: {error}", file=sys.stderr)
        return 2
    for note in loaded.notes:
        print(f"note: {note}", file=sys.stderr)
    app = create_app(Extender(StaticSource(loaded.snapshot)), max_body_bytes=max_body_bytes)
    uvicorn.run(
        app,
        host=host,
        port=port,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        ssl_ca_certs=client_ca,
        ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca else ssl.CERT_NONE,
        log_level="warning",
        access_log=False,
    )
    return 0
