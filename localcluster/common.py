"""Small pieces every module of the harness shares.

The repository root (to find ``hack/build-k8s.sh`` and ``manifests/crds``), the ``Json``
alias for decoded API objects, and the RFC 3339 timestamps the API server reads and writes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

Json = dict[str, Any]


def timestamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
