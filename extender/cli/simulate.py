"""``muster simulate``: what would Muster do with these manifests?

Loads the files (:mod:`extender.cli.manifests`), runs the same core the
extender serves (:func:`extender.core.whatif.run_simulation`), and prints
the result as the JSON document ``docs/simulate.md`` specifies, or as a table for
a person.  Exit 0 when the simulation ran, 2 with a one-line error when the
input is invalid.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from base.errors import ManifestError
from base.times import parse_time
from extender.cli.errors import InputError
from extender.cli.manifests import load_manifests
from extender.core.config import ArgsError, MusterArgs, parse_args
from extender.core.records import RecordKeys
from extender.core.state import ClusterState
from extender.core.whatif import SimulationResult, run_simulation
from extender.kube.recordkeys import RecordKeyError, read_key_directory
from quota.accounting import usage_report


def load_args_file(path: str | None) -> MusterArgs:
    """The ``--config`` file (YAML) as arguments; raises :class:`InputError`."""
    if path is None:
        return MusterArgs()
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise InputError(f"{path}: invalid YAML: {error}") from None
    try:
        return parse_args(document)
    except ArgsError as error:
        raise InputError(f"{path}: {error}") from None


def _parse_now(text: str | None) -> float | None:
    """``--now`` in epoch seconds; raises :class:`InputError`."""
    if text is None:
        return None
    try:
        return parse_time(text, "--now")
    except ManifestError as error:
        raise InputError(str(error)) from None


def simulate_files(
    paths: Sequence[str],
    args: MusterArgs,
    now: float | None = None,
    record_keys: RecordKeys | None = None,
    *,
    tenant_input: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """Run a simulation over manifest files; returns the JSON document and notes
    (``tenant_input``: a live cluster's dump, see :func:`load_manifests`)."""
    loaded = load_manifests(paths, args, record_keys, tenant_input=tenant_input)
    result = run_simulation(loaded.state, time.time() if now is None else now)
    return result_document(result, loaded.state), loaded.notes + result.notes


def result_document(result: SimulationResult, state: ClusterState) -> dict[str, Any]:
    """The ``--output json`` document of docs/simulate.md."""
    quotas = {}
    for name in sorted(state.tree.specs):
        report = usage_report(state.ledger, name)
        quotas[name] = {key: report[key] for key in ("min", "max", "used", "nonPreemptibleUsed")}
    document: dict[str, Any] = {
        "placements": dict(sorted(result.placements.items())),
        "evictions": [
            {"pod": e.pod, "node": e.node, "preemptor": e.preemptor, "reason": e.reason}
            for e in result.evictions
        ],
        "unschedulable": dict(sorted(result.unschedulable.items())),
        "quotas": quotas,
    }
    domains = {}
    for job in sorted({state.pods[key].job for key in result.placements if key in state.pods}):
        placement = state.topology_placement(job)
        if placement is not None:
            request, domain = placement
            domains[job] = {"level": request.level, "required": request.required, "domain": domain}
    if domains:  # only for jobs with a topology request: the document is unchanged otherwise
        document["topology"] = domains
    return document


def render_table(document: dict[str, Any], out: TextIO) -> None:
    """A readable summary of a result document."""
    out.write(f"Placements ({len(document['placements'])})\n")
    for pod, node in document["placements"].items():
        out.write(f"  {pod:<40} -> {node}\n")
    for job, where in document.get("topology", {}).items():
        strength = "required" if where["required"] else "preferred"
        out.write(f"  job {job} in {where['level']}={where['domain']} ({strength})\n")
    out.write(f"\nEvictions ({len(document['evictions'])})\n")
    for eviction in document["evictions"]:
        cause = eviction["preemptor"] or "drain"
        out.write(f"  {eviction['pod']:<40} on {eviction['node']:<12} for {cause}\n")
        out.write(f"      {eviction['reason']}\n")
    out.write(f"\nStill pending ({len(document['unschedulable'])})\n")
    for pod, why in document["unschedulable"].items():
        out.write(f"  {pod}\n      {why}\n")
    out.write("\nQuotas\n")
    out.write(
        f"  {'name':<20} {'resource':<18} {'used':>10} {'non-preempt.':>12} "
        f"{'min':>10} {'max':>10}\n"
    )
    for name, quota in document["quotas"].items():
        resources = sorted(set(quota["min"]) | set(quota["max"]) | set(quota["used"]))
        for resource in resources or ["-"]:
            out.write(
                f"  {name:<20} {resource:<18} {quota['used'].get(resource, '0'):>10} "
                f"{quota['nonPreemptibleUsed'].get(resource, '0'):>12} "
                f"{quota['min'].get(resource, '-'):>10} {quota['max'].get(resource, '-'):>10}\n"
            )
            name = ""


def run(
    paths: Sequence[str],
    config: str | None,
    output: str | None,
    records_key_dir: str | None = None,
    at: str | None = None,
) -> int:
    """The ``simulate`` command; returns the exit status (``at``: ``--now``)."""
    try:
        now = _parse_now(at)
        args = load_args_file(config)
        record_keys = None
        if records_key_dir is not None:
            record_keys = read_key_directory(Path(records_key_dir))
        document, notes = simulate_files(paths, args, now, record_keys=record_keys)
    except RecordKeyError as error:
        print(f"muster simulate: --records-key-dir: {error}", file=sys.stderr)
        return 2
    except InputError as error:
        print(f"muster simulate: {error}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if output is None:
        output = "table" if sys.stdout.isatty() else "json"
    if output == "json":
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_table(document, sys.stdout)
    return 0
