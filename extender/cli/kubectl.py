"""``kubectl muster``: look at Muster, and ask it "what if", from kubectl.

Installed with the package as ``kubectl-muster`` (kubectl finds plugins on the PATH):

- ``whatif FILE...``: read the live cluster through the kubeconfig (nodes, pods,
  quotas, pod groups, priority classes, disruption budgets), add the job files, and
  run ``muster simulate`` over it: where the pods would go, and which victims Muster
  would evict, with its reasons.  The cluster is not changed.
- ``why POD``: Muster's own answer (``/debug/pods``) when ``--muster-url`` reaches it
  (a Muster serving ``/debug``: ``muster serve --enable-debug-endpoints``), else
  computed from the live cluster the same way as ``whatif``;
- ``quotas``: min, max, used and borrowed per quota and resource, as a table;
- ``jobs``: jobs pending, in flight, or backing off, with their gangs.

Exit 0 on an answer, 1 when the pod is unknown, 2 on bad input or an unreachable API.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from extender.cli.errors import InputError
from extender.cli.manifests import load_manifests
from extender.cli.simulate import load_args_file, render_table, simulate_files
from extender.core.config import MusterArgs
from extender.core.decisions import DecisionLog
from extender.core.state import ClusterState
from extender.http import explain
from extender.kube.client import ApiError, KubeClient
from extender.kube.dump import dump_cluster

PROG = "kubectl muster"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", metavar="PATH", help="default: $KUBECONFIG, ~/.kube/config")
    parser.add_argument("--context", help="the kubeconfig context to use")
    parser.add_argument("--config", metavar="ARGS.yaml", help="Muster's arguments (whatif)")
    parser.add_argument(
        "--muster-url",
        metavar="URL",
        help="ask this Muster (e.g. a port-forward to it) instead of computing the answer",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    whatif = commands.add_parser("whatif", help="what would Muster do if these jobs were added?")
    whatif.add_argument("files", nargs="+", metavar="FILE", help="job manifests (YAML)")
    whatif.add_argument("-o", "--output", choices=("table", "json"), default="table")
    why = commands.add_parser("why", help="why is this pod pending?")
    why.add_argument("pod", metavar="POD")
    why.add_argument("-n", "--namespace", default="default")
    commands.add_parser("quotas", help="min, max, used and borrowed per quota and resource")
    jobs = commands.add_parser("jobs", help="jobs pending, in flight or backing off")
    jobs.add_argument("-o", "--output", choices=("table", "json"), default="table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    try:
        if options.muster_url and options.command in ("why", "quotas", "jobs"):
            return _from_muster(options)
        client = KubeClient.from_kubeconfig(options.kubeconfig, options.context)
        with tempfile.TemporaryDirectory(prefix="kubectl-muster-") as workdir:
            live = Path(workdir) / "cluster.json"  # JSON is YAML: one List document
            items = dump_cluster(client)
            live.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
            return _from_cluster(options, str(live))
    except InputError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    except (ApiError, httpx.HTTPError, OSError) as error:
        print(f"{PROG}: cannot read the cluster: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # the kubernetes package's config loader raises several kinds
        if type(error).__name__ != "ConfigException":
            raise
        print(f"{PROG}: cannot configure API access: {error}", file=sys.stderr)
        return 2


def _from_cluster(options: argparse.Namespace, live: str) -> int:
    args = load_args_file(options.config)
    if options.command == "whatif":
        document, notes = simulate_files([live, *options.files], args, tenant_input=True)
        for note in notes:
            if "ignored kind" not in note:  # the dump holds only what Muster reads
                print(f"note: {note}", file=sys.stderr)
        _print(document, options.output, render_table)
        return 0
    state = _load(live, args)
    if options.command == "quotas":
        _quota_table(explain.quotas(state))
        return 0
    if options.command == "jobs":
        _print(explain.jobs(state, time.time()), options.output, _job_table)
        return 0
    key = f"{options.namespace}/{options.pod}"
    if key not in state.pods:
        print(f"{PROG}: pod {key} not found", file=sys.stderr)
        return 1
    document, _notes = simulate_files([live], args, tenant_input=True)
    answer: dict[str, Any] = {
        "pod": key,
        "source": "computed from the cluster (Muster not asked: no --muster-url)",
        "muster": explain.pod(state, DecisionLog(), key, time.time()),
    }
    if key in document["placements"]:
        answer["now"] = f"Muster would place it on {document['placements'][key]}"
        where = document.get("topology", {}).get(state.pods[key].job)
        if where is not None:  # its gang keeps to one domain: which
            answer["now"] += f", in {where['level']}={where['domain']}"
    elif key in document["unschedulable"]:
        answer["now"] = document["unschedulable"][key]
    print(json.dumps(answer, indent=2))
    return 0


def _debug_off(response: httpx.Response) -> bool:
    """Is this Muster's answer that its ``/debug`` endpoints are off?  Says so if it is."""
    if response.status_code != 404 or "debug endpoints are off" not in response.text:
        return False
    print(
        f"{PROG}: this Muster does not serve /debug (start it with --enable-debug-endpoints), "
        "or leave out --muster-url to compute the answer from the cluster",
        file=sys.stderr,
    )
    return True


def _from_muster(options: argparse.Namespace) -> int:
    base = options.muster_url.rstrip("/")
    if options.command == "why":
        key = f"{options.namespace}/{options.pod}"
        response = httpx.get(f"{base}/debug/pods/{key}", timeout=10)
        if _debug_off(response):
            return 2
        if response.status_code == 404:
            print(f"{PROG}: Muster does not know pod {key}", file=sys.stderr)
            return 1
        response.raise_for_status()
        print(json.dumps(response.json(), indent=2))
        return 0
    response = httpx.get(f"{base}/debug/{options.command}", timeout=10)
    if _debug_off(response):
        return 2
    response.raise_for_status()
    if options.command == "quotas":
        _quota_table(response.json())
    else:
        _print(response.json(), options.output, _job_table)
    return 0


def _load(live: str, args: MusterArgs) -> ClusterState:
    return load_manifests([live], args, tenant_input=True).state


def _print(document: dict[str, Any], output: str, table: Any) -> None:
    if output == "json":
        print(json.dumps(document, indent=2))
    else:
        table(document, sys.stdout)


def _quota_table(quotas: dict[str, Any]) -> None:
    """One row per quota and resource: min, max, used, and borrowed (used above min)."""
    print(f"{'QUOTA':<24} {'RESOURCE':<18} {'MIN':>10} {'MAX':>10} {'USED':>10} {'BORROWED':>10}")
    for name, quota in quotas.items():
        resources = sorted(set(quota["min"]) | set(quota["max"]) | set(quota["used"]))
        for resource in resources:
            used = quota["used"].get(resource, "0")
            borrowed = quota.get("borrowed", {}).get(resource, "0")
            print(
                f"{name:<24} {resource:<18} {quota['min'].get(resource, '-'):>10} "
                f"{quota['max'].get(resource, '-'):>10} {used:>10} {borrowed:>10}"
            )


def _job_table(jobs: dict[str, Any], out: Any) -> None:
    out.write(f"{'JOB':<40} {'STATE':<10} {'PODS':>5} {'PENDING':>8} {'GANG':<14} QUOTA\n")
    for job, info in jobs.items():
        gang = (info.get("gang") or {}).get("phase") or "-"
        out.write(
            f"{job:<40} {info['state']:<10} {info['pods']:>5} {info['pending']:>8} "
            f"{gang:<14} {info.get('quota') or '-'}\n"
        )
