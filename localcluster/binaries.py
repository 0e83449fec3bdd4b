"""Where the control-plane binaries come from.

``ensure_binaries`` runs ``hack/build-k8s.sh`` (pinned Go modules, cached builds) and
returns the directory holding the control-plane binaries for ``ControlPlane``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import IO

from .common import REPO_ROOT

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-k8s.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")


class BuildError(RuntimeError):
    """The control-plane binaries could not be built or found."""


def _env(version: str | None) -> dict[str, str] | None:
    """The environment for ``hack/build-k8s.sh`` selecting ``version`` (``None``: as set)."""
    return None if version is None else {**os.environ, "MUSTER_K8S_VERSION": version}


def default_bin_dir(version: str | None = None) -> Path:
    """Where ``hack/build-k8s.sh`` puts the binaries for the pinned versions (``version``:
    a minor release such as ``"1.35"``; default ``$MUSTER_K8S_VERSION``, else the newest).

    ``$MUSTER_K8S_BIN_DIR`` overrides it (binaries built some other way).
    """
    override = os.environ.get("MUSTER_K8S_BIN_DIR")
    if override and version is None:
        return Path(override)
    result = subprocess.run(
        [str(BUILD_SCRIPT), "--bin-dir"],
        capture_output=True,
        text=True,
        check=False,
        env=_env(version),
    )
    if result.returncode != 0:
        raise BuildError(f"{BUILD_SCRIPT} --bin-dir failed: {result.stderr.strip()}")
    return Path(result.stdout.strip())


def ensure_binaries(
    *, build: bool = True, output: IO[str] | None = None, version: str | None = None
) -> Path:
    """Return the directory holding the control-plane binaries (``BINARIES``).

    With ``build`` (the default) this runs ``hack/build-k8s.sh``, which reuses cached
    binaries and builds them otherwise (minutes, the first time). Its progress goes to
    ``output`` (default: inherited stderr). Raises ``BuildError`` when the build fails or
    a binary is missing, never returns a directory without all of them.
    """
    if build and (version is not None or not os.environ.get("MUSTER_K8S_BIN_DIR")):
        result = subprocess.run(
            [str(BUILD_SCRIPT)],
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            check=False,
            env=_env(version),
        )
        if result.returncode != 0:
            raise BuildError(f"{BUILD_SCRIPT} failed with exit status {result.returncode}")
    bin_dir = default_bin_dir(version)
    missing = [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise BuildError(f"missing binaries in {bin_dir}: {', '.join(missing)}")
    return bin_dir


def kubernetes_minor(bin_dir: Path) -> int:
    """The minor release of the kube-apiserver in ``bin_dir`` (37 for v1.37.2), read
    from its ``--version`` (``Kubernetes v1.37.2``)."""
    result = subprocess.run(
        [str(bin_dir / "kube-apiserver"), "--version"], capture_output=True, text=True, check=False
    )
    words = result.stdout.split()
    parts = words[-1].lstrip("v").split(".") if words else []
    if result.returncode != 0 or len(parts) < 2 or not parts[1].isdigit():
        raise BuildError(f"{bin_dir / 'kube-apiserver'} --version: {result.stdout.strip()!r}")
    return int(parts[1])


PEERS_SCRIPT = REPO_ROOT / "hack" / "build-peers.sh"


def ensure_peer(peer: str = "scheduler-plugins") -> Path:
    """The bin directory of a peer scheduler built by ``hack/build-peers.sh`` (built if
    needed: minutes, the first time); raises ``BuildError`` when that fails."""
    done = subprocess.run([str(PEERS_SCRIPT), peer], check=False)
    if done.returncode != 0:
        raise BuildError(f"{PEERS_SCRIPT} {peer} failed with exit status {done.returncode}")
    where = subprocess.run(
        [str(PEERS_SCRIPT), peer, "--bin-dir"], capture_output=True, text=True, check=False
    )
    if where.returncode != 0:
        raise BuildError(f"{PEERS_SCRIPT} --bin-dir failed: {where.stderr.strip()}")
    return Path(where.stdout.strip())
