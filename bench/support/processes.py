"""Muster and the no-op extender as child processes of a benchmark.

:class:`MusterServer` runs ``muster serve --kubeconfig ... --no-leader-elect`` from the
checkout or from an exported commit (:func:`bench.support.run_notes.export_muster`),
:class:`Evictor` runs ``muster evictor``, and :class:`NoopExtender` runs
``bench/noop-extender`` (Go: passes every node, the floor of any extender's filter call);
each is a ``localcluster.ServiceProcess`` on a free loopback port.  ``MUSTER_COMMAND`` is
how Muster is started, for benchmarks that run it themselves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

import localcluster as lc

#: How Muster is started (``serve`` or ``evictor`` and their flags follow).
MUSTER_COMMAND = [sys.executable, "-m", "extender.cli.main"]

#: The no-op extender's Go module (``NoopExtender.build`` builds it).
NOOP_SOURCE = Path(__file__).resolve().parents[1] / "noop-extender"


class ExtenderProcess(lc.ServiceProcess):
    """An extender as a child process (``MusterServer``, ``NoopExtender``): on a free
    loopback port, started and waited for until its ``/readyz`` answers."""

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} is not running"
        return self.popen.pid

    def counter(self, name: str) -> float:
        """The value of one unlabelled sample of ``/metrics`` (0 when absent)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        return 0.0

    def metrics(self) -> dict[str, float]:
        return {}


class MusterServer(ExtenderProcess):
    """``muster serve --kubeconfig ... --no-leader-elect``, run from ``cwd`` (the
    checkout, or an exported commit), with ``/debug/`` on (on 127.0.0.1) where that
    code has the flag for it."""

    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        cwd: Path,
        cpus: set[int] | None = None,
        config: Path | None = None,
        ready_timeout: float = 120,
    ) -> None:
        main = (cwd / "extender" / "cli" / "main.py").read_text()
        debug = ["--enable-debug-endpoints"] if "--enable-debug-endpoints" in main else []
        if config is not None:
            debug += ["--config", str(config)]
        if "--records-key-dir" in main:
            debug += ["--records-key-dir", str(lc.records_key_dir(kubeconfig.parent))]
        super().__init__(
            "muster serve",
            lambda port: [
                *MUSTER_COMMAND,
                "serve",
                "--kubeconfig",
                str(kubeconfig),
                "--port",
                str(port),
                "--no-leader-elect",
                *debug,
            ],
            log_path,
            cwd=cwd,
            cpus=cpus,
            ready_timeout=ready_timeout,
            stop_timeout=15,
        )
        self.start()

    def metrics(self) -> dict[str, float]:
        """Request counts and mean latency (ms) per verb, from ``/metrics``."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}
        for line in text.splitlines():
            for suffix, target in (("_sum", sums), ("_count", counts)):
                prefix = f'muster_extender_request_duration_seconds{suffix}{{verb="'
                if line.startswith(prefix):
                    verb = line[len(prefix) :].split('"', 1)[0]
                    target[verb] = float(line.rsplit(" ", 1)[1])
        out: dict[str, float] = {}
        for verb, count in counts.items():
            if count:
                out[f"{verb}_n"] = count
                out[f"{verb}_mean_ms"] = round(1000 * sums.get(verb, 0.0) / count, 2)
        return out

    def debug(self, path: str) -> Any:
        return httpx.get(f"{self.url}/debug/{path}", timeout=10).json()


class NoopExtender(ExtenderProcess):
    """``bench/noop-extender`` (Go, built into the workdir): passes every node, the floor
    any extender's filter call costs kube-scheduler."""

    def __init__(self, binary: Path, log_path: Path, cpus: set[int] | None = None) -> None:
        super().__init__(
            "the no-op extender",
            lambda port: [str(binary), "-listen", f"127.0.0.1:{port}"],
            log_path,
            cpus=cpus,
            ready_timeout=30,
            stop_timeout=15,
        )
        self.start()

    @staticmethod
    def build(workdir: Path) -> Path:
        binary = workdir / "noop-extender"
        subprocess.run(
            ["go", "build", "-o", str(binary), "."],
            cwd=NOOP_SOURCE,
            check=True,
            env={**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"},
        )
        return binary


class Evictor(lc.ServiceProcess):
    """``muster evictor --kubeconfig ...`` as a child process (nothing to wait for)."""

    def __init__(self, kubeconfig: Path, log_path: Path, cwd: Path) -> None:
        command = [*MUSTER_COMMAND, "evictor", "--kubeconfig", str(kubeconfig)]
        if "--records-key-dir" in (cwd / "extender" / "cli" / "main.py").read_text():
            command += ["--records-key-dir", str(lc.records_key_dir(kubeconfig.parent))]
        super().__init__(
            "muster evictor",
            lambda _port: command,
            log_path,
            cwd=cwd,
            ready_path=None,
            stop_timeout=15,
        )
        self.start()
