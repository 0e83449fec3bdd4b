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
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import uvicorn
from prometheus_client.registry import Collector

from extender.cli.errors import InputError
from extender.cli.manifests import load_manifests
from extender.cli.scheduler_config import check_scheduler_config_file
from extender.cli.simulate import load_args_file
from extender.core.decisions import DecisionLog
from extender.http.app import DEFAULT_MAX_BODY_BYTES, create_app
from extender.http.asgi import ProbeApp
from extender.http.protocol import VerbProtocol
from extender.http.tls import CertificateReloader
from extender.kube.binder import KubeBinder
from extender.kube.client import KubeClient
from extender.kube.gangs import GangKeeper
from extender.kube.housekeeping import Housekeeper
from extender.kube.leader import LeaderElector
from extender.kube.persister import ReservationPersister
from extender.kube.postfilter import PostFilterLoop
from extender.kube.recordkeys import RecordKeyError, record_keys_source
from extender.kube.requeue import Requeuer
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter
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
    """The ``serve`` command; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per API request otherwise
    if scheduler_config is not None:
        try:
            findings = check_scheduler_config_file(
                scheduler_config, scheduler_url_prefix, flag="--scheduler-url-prefix"
            )
        except InputError as error:
            print(f"muster serve: {error}", file=sys.stderr)
            return 2
        for finding in findings:
            logging.getLogger(__name__).warning("%s: %s", finding.field, finding.message)
            print(f"muster serve: warning: {finding.field}: {finding.message}", file=sys.stderr)
    if (tls_cert is None) != (tls_key is None):
        print("muster serve: --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    if probe_port is not None and probe_port == port:
        print("muster serve: --probe-port must differ from --port", file=sys.stderr)
        return 2
    if client_ca is not None and tls_cert is None:
        print("muster serve: --client-ca needs --tls-cert and --tls-key", file=sys.stderr)
        return 2
    if enable_debug_endpoints and client_ca is None and not is_loopback(host):
        print(
            f"muster serve: --enable-debug-endpoints on --host {host} needs --client-ca "
            "(mutual TLS): /debug tells whoever asks about every quota, job and pod; "
            "without client certificates serve it on a loopback host only "
            "(127.0.0.1, ::1, localhost)",
            file=sys.stderr,
        )
        return 2
    probe_socket = None
    if probe_port is not None:
        # Bound before anything starts (informers, the Lease): a taken port ends here.
        try:
            probe_socket = _bind(host, probe_port)
        except OSError as error:
            print(
                f"muster serve: --probe-port {probe_port}: cannot listen: {error}", file=sys.stderr
            )
            return 2
    live = kubeconfig is not None or in_cluster
    if live == bool(snapshot_files):
        print(
            "muster serve: say where the cluster is: --kubeconfig PATH or --in-cluster "
            "(a live cluster), or --snapshot FILE... (a fixed one)",
            file=sys.stderr,
        )
        return 2
    try:
        args = load_args_file(config)
    except InputError as error:
        print(f"muster serve: {error}", file=sys.stderr)
        return 2
    if live:
        try:
            client = (
                KubeClient.in_cluster() if in_cluster else KubeClient.from_kubeconfig(kubeconfig)
            )
        except Exception as error:  # the kubernetes package raises several kinds
            print(f"muster serve: cannot configure API access: {error}", file=sys.stderr)
            return 2
        try:
            record_keys = record_keys_source(records_key_dir)
        except RecordKeyError as error:
            print(f"muster serve: --records-key-dir: {error}", file=sys.stderr)
            return 2
        source = KubeSource(client, args, record_keys=record_keys)
        collectors: list[Collector] = [source.scheduler_preemptions, source.forged_records]

        def writer() -> ClusterWriter:
            return ClusterWriter(client, record_keys=record_keys)

        decisions = DecisionLog()
        elector = None
        if leader_elect:
            elector = LeaderElector(client, leader_elect_namespace or _own_namespace()).start()
        is_leader = elector.is_leader if elector is not None else (lambda: True)
        postfilter = PostFilterLoop(
            source,
            writer(),
            decisions,
            is_leader=is_leader,
        )
        source.on_unschedulable = postfilter.request
        collectors.append(postfilter.time_to_mark)
        extender = Extender(
            source,
            binder=KubeBinder(client),
            on_unschedulable=postfilter.request,
            log=decisions,
            room_keeper=ReservationPersister(writer()).start(),
        )
        workers = [
            Housekeeper(source, writer(), is_leader=is_leader),
            GangKeeper(source, writer(), is_leader=is_leader),
            Requeuer(source, writer(), is_leader=is_leader),
        ]
        for part in (*workers, postfilter, *([elector] if elector is not None else [])):
            source.health.add(part)
        for worker in workers:
            worker.start()
        source.start()
        postfilter.start()
        source.health.watch()
    else:
        try:
            loaded = load_manifests(snapshot_files, args)
        except InputError as error:
            print(f"muster serve: {error}", file=sys.stderr)
            return 2
        for note in loaded.notes:
            print(f"note: {note}", file=sys.stderr)
        extender = Extender(StaticSource(loaded.snapshot))
        collectors = []
        elector = None
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
        problem = _serve_probes(ProbeApp(app), probe_socket)
        if problem is not None:
            print(f"muster serve: --probe-port {probe_port}: {problem}", file=sys.stderr)
            return 2
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


def _own_namespace() -> str:
    """The namespace Muster runs in (in a pod), else ``muster-system``."""
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    try:
        return path.read_text().strip() or "muster-system"
    except OSError:
        return "muster-system"
