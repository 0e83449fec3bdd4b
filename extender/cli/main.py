"""The ``muster`` command: one entry point, one subcommand per front door."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from extender.cli import simulate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster",
        description="Elastic quotas and job-level, gang-aware preemption for kube-scheduler.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    what_if = commands.add_parser(
        "simulate",
        help="what would Muster do with these manifests?",
        description="Schedule the pending pods of Kubernetes manifests with Muster's core "
        "and print the placements, evictions, pods left pending and quota usage.",
    )
    what_if.add_argument("files", nargs="+", metavar="FILE", help="YAML manifests")
    what_if.add_argument("--config", metavar="ARGS.yaml", help="Muster's arguments")
    what_if.add_argument(
        "--output",
        choices=("json", "table"),
        help="json (default when stdout is not a terminal) or table",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    if options.command == "simulate":
        return simulate.run(options.files, options.config, options.output)
    raise AssertionError(options.command)  # argparse rejects unknown commands


if __name__ == "__main__":
    raise SystemExit(main())
