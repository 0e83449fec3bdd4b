"""The ``muster`` command: one entry point, one subcommand per front door."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from extender.cli import scheduler_config, serve, simulate
from extender.cli.evictor import run_evictor
from extender.http.app import DEFAULT_MAX_BODY_BYTES

if TYPE_CHECKING:
    #: What ``ArgumentParser.add_subparsers`` returns: one parser per subcommand is added.
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster",
        description="Elastic quotas and job-level, gang-aware preemption for kube-scheduler.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_simulate(commands)
    _add_serve(commands)
    _add_check_scheduler_config(commands)
    _add_evictor(commands)
    return parser


def _add_simulate(commands: _SubParsers) -> None:
    what_if = commands.add_parser(
        "simulate",
        help="what would Muster do with these manifests?",
        description="Schedule the pending pods of Kubernetes manifests with Muster's core "
        "and print the placements, evictions, pods left pending and quota usage.",
    )
    what_if.add_argument("files", nargs="+", metavar="FILE", help="YAML manifests")
    what_if.add_argument("--config", metavar="ARGS.yaml", help="Muster's arguments")
    what_if.add_argument(
        "--records-key-dir",
        metavar="DIR",
        help="believe only the records (reservations, marks, backoffs) these keys verify; "
        "without it, the files' records are believed as written",
    )
    what_if.add_argument(
        "--output",
        choices=("json", "table"),
        help="json (default when stdout is not a terminal) or table",
    )
    what_if.add_argument(
        "--now",
        metavar="TIME",
        help="decide as at this RFC 3339 time (default: the clock's); rules that wait "
        "(starvation, minimum runtime, timeouts) read it",
    )


def _add_serve(commands: _SubParsers) -> None:
    server = commands.add_parser(
        "serve",
        help="serve kube-scheduler's extender verbs over HTTP(S)",
        description="Serve filter, prioritize, preempt and bind to kube-scheduler.",
    )
    _add_serve_cluster_options(server)
    _add_serve_http_options(server)
    server.add_argument(
        "--scheduler-config",
        metavar="FILE",
        help="check kube-scheduler's KubeSchedulerConfiguration at start-up; warn on findings",
    )
    server.add_argument(
        "--records-key-dir",
        metavar="DIR",
        help="sign and check Muster's records (reservations, marks, backoffs) with the keys "
        "in DIR, one file each (a mounted Secret); without it, a key of this process alone",
    )
    server.add_argument(
        "--scheduler-url-prefix",
        metavar="PREFIX",
        help="Muster's urlPrefix in --scheduler-config, when it has several extenders",
    )


def _add_serve_cluster_options(server: argparse.ArgumentParser) -> None:
    """Where the cluster is, and how replicas elect their leader."""
    server.add_argument("--config", metavar="ARGS.yaml", help="Muster's arguments")
    server.add_argument(
        "--snapshot",
        nargs="+",
        default=[],
        metavar="FILE",
        help="serve over a fixed cluster read from these manifests (no API server)",
    )
    server.add_argument("--kubeconfig", metavar="PATH", help="watch the cluster of this kubeconfig")
    server.add_argument(
        "--in-cluster", action="store_true", help="watch the cluster Muster runs in"
    )
    server.add_argument(
        "--no-leader-elect",
        dest="leader_elect",
        action="store_false",
        help="commit preemptions without holding the Lease (one replica only)",
    )
    server.add_argument(
        "--leader-elect-namespace",
        metavar="NAMESPACE",
        help="where the Lease lives (default: Muster's own namespace, else muster-system)",
    )


def _add_serve_http_options(server: argparse.ArgumentParser) -> None:
    """Where and how the verbs are served: address, probes, TLS, debug endpoints, limits."""
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=int, default=8888)
    server.add_argument(
        "--probe-port",
        type=int,
        metavar="PORT",
        help="also serve /healthz, /readyz and /metrics (only) in plain HTTP on this port",
    )
    server.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate")
    server.add_argument(
        "--tls-reload-seconds",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often to look for renewed certificate files (default: %(default)s)",
    )
    server.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    server.add_argument(
        "--client-ca", metavar="PEM", help="require client certificates signed by this CA"
    )
    server.add_argument(
        "--enable-debug-endpoints",
        action="store_true",
        help="serve /debug/* (off by default); needs --client-ca unless --host is loopback",
    )
    server.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help="answer 413 to larger requests (default: %(default)s)",
    )


def _add_check_scheduler_config(commands: _SubParsers) -> None:
    checker = commands.add_parser(
        "check-scheduler-config",
        help="is kube-scheduler configured so Muster is the only preemption authority?",
        description="Check a KubeSchedulerConfiguration file for settings that let "
        "kube-scheduler schedule past Muster's quotas or preempt without Muster.",
    )
    checker.add_argument("file", metavar="FILE", help="the KubeSchedulerConfiguration YAML")
    checker.add_argument(
        "--url-prefix",
        metavar="PREFIX",
        help="Muster's extenders[].urlPrefix (needed when there are several extenders)",
    )
    checker.add_argument(
        "--feature-gates",
        metavar="GATES",
        default="",
        help="kube-scheduler's --feature-gates (A=true,B=false): with GenericWorkload=true, "
        "its in-tree gang scheduling is checked too",
    )
    checker.add_argument(
        "--kubernetes-version",
        metavar="VERSION",
        default="1.37",
        help="kube-scheduler's release, such as 1.36 (default 1.37)",
    )


def _add_evictor(commands: _SubParsers) -> None:
    evictor = commands.add_parser(
        "evictor",
        help="the reference soft-eviction operator",
        description="Evict pods marked for soft eviction, through the Eviction API.",
    )
    evictor.add_argument("--kubeconfig", metavar="PATH", help="the cluster's kubeconfig")
    evictor.add_argument("--in-cluster", action="store_true", help="the cluster it runs in")
    evictor.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="serve Prometheus /metrics on this port"
    )
    evictor.add_argument(
        "--records-key-dir",
        metavar="DIR",
        required=True,
        help="evict only pods whose mark these keys verify (Muster's --records-key-dir)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    if options.command == "simulate":
        return simulate.run(
            options.files, options.config, options.output, options.records_key_dir, options.now
        )
    if options.command == "serve":
        return serve.run(
            config=options.config,
            snapshot_files=options.snapshot,
            kubeconfig=options.kubeconfig,
            in_cluster=options.in_cluster,
            leader_elect=options.leader_elect,
            leader_elect_namespace=options.leader_elect_namespace,
            host=options.host,
            port=options.port,
            probe_port=options.probe_port,
            tls_reload_seconds=options.tls_reload_seconds,
            tls_cert=options.tls_cert,
            tls_key=options.tls_key,
            client_ca=options.client_ca,
            enable_debug_endpoints=options.enable_debug_endpoints,
            max_body_bytes=options.max_body_bytes,
            scheduler_config=options.scheduler_config,
            scheduler_url_prefix=options.scheduler_url_prefix,
            records_key_dir=options.records_key_dir,
        )
    if options.command == "check-scheduler-config":
        return scheduler_config.run(
            options.file, options.url_prefix, options.feature_gates, options.kubernetes_version
        )
    if options.command == "evictor":
        return run_evictor(
            kubeconfig=options.kubeconfig,
            in_cluster=options.in_cluster,
            metrics_port=options.metrics_port,
            records_key_dir=options.records_key_dir,
        )
    raise AssertionError(options.command)  # argparse rejects unknown commands


if __name__ == "__main__":
    raise SystemExit(main())
