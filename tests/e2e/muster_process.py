"""Run ``muster serve`` and ``muster evictor`` as real processes for e2e tests, and read
their endpoints; the harness's ``ServiceProcess`` starts, waits for and stops them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx

import localcluster as lc

ROOT = Path(__file__).resolve().parents[2]
MUSTER = [sys.executable, "-m", "extender.cli.main"]


class MusterProcess(lc.ServiceProcess):
    """``muster serve`` on a free loopback port, log kept in a file: over a fixed
    ``snapshot`` (a list of objects), or over a live cluster (``kubeconfig``); with its
    ``/debug/`` endpoints (:meth:`debug`) unless ``debug_endpoints`` is false."""

    def __init__(
        self,
        workdir: Path,
        *,
        snapshot: list[dict[str, Any]] | None = None,
        kubeconfig: Path | None = None,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
        debug_endpoints: bool = True,
    ) -> None:
        self.workdir = workdir
        if snapshot is not None:
            path = workdir / "muster-snapshot.json"
            # JSON is YAML: one document holding a List, as `kubectl get -o json` prints.
            path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": snapshot}))
            source = ["--snapshot", str(path)]
        else:
            assert kubeconfig is not None
            keys = lc.records_key_dir(kubeconfig.parent)
            source = ["--kubeconfig", str(kubeconfig), "--records-key-dir", str(keys)]
        if debug_endpoints:  # served on 127.0.0.1 only (the default --host)
            source.append("--enable-debug-endpoints")
        super().__init__(
            "muster serve",
            lambda port: [*MUSTER, "serve", *source, "--port", str(port), *extra_args],
            workdir / "muster.log",
            port=port,
            cwd=ROOT,
        )
        #: Set by fixtures that run the evictor beside this Muster.
        self.evictor_metrics_url: str | None = None
        self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample of ``/metrics`` (0 when absent)."""
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        prefix = f"{name}{{{wanted}}}" if labels else name
        for line in httpx.get(f"{self.url}/metrics", timeout=5).text.splitlines():
            if line.startswith(prefix + " "):
                return float(line.split()[-1])
        return 0.0

    def debug(self, path: str) -> Any:
        return httpx.get(f"{self.url}/debug/{path}", timeout=5).json()

    def postfilter_reasons(self, namespace: str, name: str) -> list[str]:
        """The reasons of every PostFilter decision Muster recorded for the pod."""
        return self.decision_reasons(namespace, name, verb="postfilter")

    def decision_reasons(
        self, namespace: str, name: str, *, verb: str | None = None, containing: str = ""
    ) -> list[str]:
        """The reasons of every decision Muster recorded for the pod (of ``verb`` only, if
        given) that contain ``containing``."""
        explained = self.debug(f"pods/{namespace}/{name}")
        return [
            reason
            for decision in explained.get("decisions", [])
            if verb is None or decision["verb"] == verb
            for reason in decision.get("reasons", [])
            if containing in reason
        ]


def start_evictor(kubeconfig: Path, log_path: Path, *, metrics: bool = False) -> lc.ServiceProcess:
    """``muster evictor`` (serving ``/metrics`` on its ``url`` if ``metrics``), started."""
    evictor = lc.ServiceProcess(
        "muster evictor",
        lambda port: [
            *MUSTER,
            "evictor",
            "--kubeconfig",
            str(kubeconfig),
            "--records-key-dir",
            str(lc.records_key_dir(kubeconfig.parent)),
            *(["--metrics-port", str(port)] if metrics else []),
        ],
        log_path,
        cwd=ROOT,
        ready_path=None,
    )
    evictor.start()
    return evictor
