"""``python -m bench``: run every benchmark with its defaults (see docs/benchmarks.md)."""

from __future__ import annotations

import sys

from bench import http, planner


def main() -> int:
    print("# Planner", flush=True)
    planner.main([])
    print("\n# HTTP", flush=True)
    http.main([])
    return 0


if __name__ == "__main__":
    sys.exit(main())
