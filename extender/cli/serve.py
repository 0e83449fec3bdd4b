"""``muster serve``: the extender over HTTP(S), on uvicorn.

With ``--kubeconfig PATH`` (or ``--in-cluster``) it watches the live
cluster through informers and binds through the API.  With ``--snapshot
FILE...`` it serves over a fixed cluster read from manifests (the input of
``simulate``), with no API server: for trying the protocol, demos and tests.
TLS with ``--tls-cert``/``--tls-key``; mutual TLS (as kube-scheduler's
``tlsConfig`` supports) with ``--client-ca``; renewed certificate files are served without
a restart.  ``--probe-port`` also serves
``/healthz``, ``/readyz`` and ``/metrics`` (only those) in plain HTTP, for kubelet
probes and Prometheus, which cannot present a client certificate.  ``/debug/*`` is served
only with ``--enable-debug-endpoints``, and only to authenticated callers: with
``--client-ca`` (mutual TLS), or on a loopback ``--host`` (local demos and tests).

:func:`run` checks the options, starts the Muster to serve (the live one is assembled by
:mod:`extender.cli.live`) and serves it; every start-up problem is one line on stderr
and exit status 2.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Sequence

import uvicorn
from prometheus_client.registry import Collector

from extender.cli.errors import InputError
from extender.cli.heap import freeze_long_lived
from extender.cli.live import start_live_muster
from extender.cli.manifests import load_manifests
from extender.cli.scheduler_config import check_scheduler_config_file
from extender.cli.simulate import load_args_file
from extender.core.config import MusterArgs
from extender.core.records import RecordKeys
from extender.http.app import DEFAULT_MAX_BODY_BYTES, create_app
from extender.http.asgi import MusterApp, ProbeApp
from extender.http.protocol import VerbProtocol
from extender.http.tls import CertificateReloader
from extender.kube.client import KubeClient
from extender.kube.leader import LeaderElector
from extender.kube.recordkeys import RecordKeyError, record_keys_source
from extender.service import Extender, StaticSource


def run(
    *,
    config: str | None,
    snapshot_files: Sequence[str],
    kubeconfig: str | None = None,
    in_cluster: bool = False,
    leader_elect: bool = True,
    leader_elect_namespace: str | None = None,
    host: str,
    port: int,
    probe_port: int | None = None,
    tls_reload_seconds: float = 10.0,
    tls_cert: str | None,
    tls_key: str | None,
    client_ca: str | None,
    enable_debug_endpoints: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    scheduler_config: str | None = None,
    scheduler_url_prefix: str | None = None,
    records_key_dir: str | None = None,
) -> int:
    """The ``serve`` command; returns the exit status.  Every start-up problem ends it
    with status 2 before it serves, in the order checked here."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per API request otherwise
    try:
        if scheduler_config is not None:
            _warn_of_scheduler_config(scheduler_config, scheduler_url_prefix)
        _check_options(
            host=host,
            port=port,
            probe_port=probe_port,
            tls_cert=tls_cert,
            tls_key=tls_key,
            client_ca=client_ca,
            enable_debug_endpoints=enable_debug_endpoints,
        )
        # Bound before anything starts (informers, the Lease): a taken port ends here.
        probe_socket = None if probe_port is None else _probe_socket(host, probe_port)
        extender, collectors, elector = _muster(
            config,
            snapshot_files,
            kubeconfig,
            in_cluster,
            records_key_dir,
            leader_elect=leader_elect,
            leader_elect_namespace=leader_elect_namespace,
        )
        # On SIGTERM uvicorn drains, runs the app's shutdown hooks, then re-raises the
        # signal: the leader lets its Lease go there, so a successor need not wait it out.
        app = create_app(
            extender,
            max_body_bytes=max_body_bytes,
            debug_endpoints=enable_debug_endpoints,
            collectors=collectors,
            on_shutdown=[elector.release] if elector is not None else [],
        )
        if probe_socket is not None:
            _start_probes(app, probe_socket, probe_port)
    except _Refused as refusal:
        print(f"muster serve: {refusal}", file=sys.stderr)
        return 2
    return _serve(app, host, port, tls_cert, tls_key, client_ca, tls_reload_seconds)


class _Refused(Exception):
    """A start-up problem: printed after ``muster serve:``, and the exit status is 2."""


def _muster(
    config: str | None,
    snapshot_files: Sequence[str],
    kubeconfig: str | None,
    in_cluster: bool,
    records_key_dir: str | None,
    *,
    leader_elect: bool,
    leader_elect_namespace: str | None,
) -> tuple[Extender, list[Collector], LeaderElector | None]:
    """The Muster to serve, started: over the live cluster (:mod:`extender.cli.live`) or
    over a fixed one read from ``snapshot_files``; its verbs, the metrics its parts
    serve, and its leader elector (if it elects one)."""
    live = kubeconfig is not None or in_cluster
    if live == bool(snapshot_files):
        raise _Refused(
            "say where the cluster is: --kubeconfig PATH or --in-cluster "
            "(a live cluster), or --snapshot FILE... (a fixed one)"
        )
    args = _args(config)
    if live:
        client = _client(kubeconfig, in_cluster)
        muster = start_live_muster(
            client,
            args,
            _record_keys(records_key_dir),
            leader_elect=leader_elect,
            leader_elect_namespace=leader_elect_namespace,
        )
        return muster.extender, muster.collectors, muster.elector
    return _snapshot_extender(snapshot_files, args), [], None


def _warn_of_scheduler_config(path: str, url_prefix: str | None) -> None:
    """Check kube-scheduler's configuration file: each finding a warning, printed and
    logged; a file that cannot be checked is refused."""
    try:
        findings = check_scheduler_config_file(path, url_prefix, flag="--scheduler-url-prefix")
    except InputError as error:
        raise _Refused(str(error)) from None
    for finding in findings:
        logging.getLogger(__name__).warning("%s: %s", finding.field, finding.message)
        print(f"muster serve: warning: {finding.field}: {finding.message}", file=sys.stderr)


def _check_options(
    *,
    host: str,
    port: int,
    probe_port: int | None,
    tls_cert: str | None,
    tls_key: str | None,
    client_ca: str | None,
    enable_debug_endpoints: bool,
) -> None:
    """The options that go together, and the debug endpoints only to authenticated
    callers; raises :class:`_Refused` for the first problem."""
    if (tls_cert is None) != (tls_key is None):
        raise _Refused("--tls-cert and --tls-key go together")
    if probe_port is not None and probe_port == port:
        raise _Refused("--probe-port must differ from --port")
    if client_ca is not None and tls_cert is None:
        raise _Refused("--client-ca needs --tls-cert and --tls-key")
    if enable_debug_endpoints and client_ca is None and not is_loopback(host):
        raise _Refused(
            f"--enable-debug-endpoints on --host {host} needs --client-ca "
            "(mutual TLS): /debug tells whoever asks about every quota, job and pod; "
            "without client certificates serve it on a loopback host only "
            "(127.0.0.1, ::1, localhost)"
        )


def _probe_socket(host: str, probe_port: int) -> socket.socket:
    try:
        return _bind(host, probe_port)
    except OSError as error:
        raise _Refused(f"--probe-port {probe_port}: cannot listen: {error}") from None


def _args(config: str | None) -> MusterArgs:
    try:
        return load_args_file(config)
    except InputError as error:
        raise _Refused(str(error)) from None


def _client(kubeconfig: str | None, in_cluster: bool) -> KubeClient:
    try:
        return KubeClient.in_cluster() if in_cluster else KubeClient.from_kubeconfig(kubeconfig)
    except Exception as error:  # the kubernetes package raises several kinds
        raise _Refused(f"cannot configure API access: {error}") from None


def _record_keys(records_key_dir: str | None) -> Callable[[], RecordKeys]:
    try:
        return record_keys_source(records_key_dir)
    except RecordKeyError as error:
        raise _Refused(f"--records-key-dir: {error}") from None


def _snapshot_extender(snapshot_files: Sequence[str], args: MusterArgs) -> Extender:
    """The verbs over a fixed cluster read from ``snapshot_files`` (notes printed)."""
    try:
        loaded = load_manifests(snapshot_files, args)
    except InputError as error:
        raise _Refused(str(error)) from None
    for note in loaded.notes:
        print(f"note: {note}", file=sys.stderr)
    freeze_long_lived()
    return Extender(StaticSource(loaded.state))


def _serve(
    app: MusterApp,
    host: str,
    port: int,
    tls_cert: str | None,
    tls_key: str | None,
    client_ca: str | None,
    tls_reload_seconds: float,
) -> int:
    """Serve ``app`` until the server stops; 0 if it started, else 1."""
    server_config = uvicorn.Config(
        app,
        host=host,
        port=port,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        ssl_ca_certs=client_ca,
        ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca else ssl.CERT_NONE,
        log_level="warning",
        access_log=False,
        # kube-scheduler connects directly: no proxy headers to trust, and one less layer.
        proxy_headers=False,
        # Verb calls answered straight from the protocol, each answer in one write.
        http=VerbProtocol,
    )
    server_config.load()
    if server_config.ssl is not None and tls_cert is not None and tls_key is not None:
        # A renewed certificate (a rotated Secret) is served without a restart.
        CertificateReloader(
            server_config.ssl, tls_cert, tls_key, client_ca, interval=tls_reload_seconds
        ).start()
    server = uvicorn.Server(server_config)
    server.run()
    return 0 if server.started else 1


def is_loopback(host: str) -> bool:
    """Is ``host`` a loopback address (only this machine can connect)?"""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (raises ``OSError``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _start_probes(app: MusterApp, sock: socket.socket, probe_port: int | None) -> None:
    """``/healthz``, ``/readyz`` and ``/metrics`` of ``app`` served on ``sock``, the
    ``--probe-port``; raises :class:`_Refused` when they cannot be."""
    problem = _serve_probes(ProbeApp(app), sock)
    if problem is not None:
        raise _Refused(f"--probe-port {probe_port}: {problem}")


def _serve_probes(app: ProbeApp, sock: socket.socket, timeout: float = 10.0) -> str | None:
    """Serve ``app`` in plain HTTP on ``sock`` from a daemon thread (uvicorn installs no
    signal handlers outside the main thread; the main server's shutdown ends the
    process).  Returns ``None`` once it serves, else why it does not."""
    server = uvicorn.Server(
        uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    )
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="probe-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive():
            return "the probe server stopped (see the error above)"
        if time.monotonic() > deadline:
            return f"not serving after {timeout:.0f} s"
        time.sleep(0.01)
    return None
