"""Run ``muster serve`` as a real process for e2e tests, and read its endpoints."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MusterProcess:
    """``muster serve`` on a free loopback port, log kept in a file: over a fixed
    ``snapshot`` (a list of objects), or over a live cluster (``kubeconfig``)."""

    def __init__(
        self,
        workdir: Path,
        *,
        snapshot: list[dict[str, Any]] | None = None,
        kubeconfig: Path | None = None,
        port: int | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.workdir = workdir
        if snapshot is not None:
            path = workdir / "muster-snapshot.json"
            # JSON is YAML: one document holding a List, as `kubectl get -o json` prints.
            path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": snapshot}))
            source = ["--snapshot", str(path)]
        else:
            source = ["--kubeconfig", str(kubeconfig)]
        self.port = port if port is not None else free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "muster.log"
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "extender.cli.main",
                "serve",
                *source,
                "--port",
                str(self.port),
                *extra_args,
            ],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        #: Set by fixtures that run the evictor beside this Muster.
        self.evictor_metrics_url: str | None = None
        self._wait_ready(deadline=30.0)

    def _wait_ready(self, deadline: float) -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"muster serve exited:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"muster serve was not ready in {deadline}s:\n{self.log()}")

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

    def kill(self) -> None:
        """``kill -9``: no chance to clean up."""
        self.process.kill()
        self.process.wait()
        self._log.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
