"""Check that no module of the project's packages is longer than the house allows.

``make lint`` runs it: a module of ``base``, ``extender``, ``quota`` or ``localcluster``
longer than :data:`MAX_LINES` lines is split by what it is for (docs/development.md).
Benchmarks and tests are not held to it.
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_LINES = 400
PACKAGES = ("base", "extender", "quota", "localcluster")


def too_long(root: Path) -> list[tuple[Path, int]]:
    """The modules under ``root``'s packages longer than :data:`MAX_LINES`, with their
    lengths, by path."""
    found = []
    for package in PACKAGES:
        for module in sorted((root / package).rglob("*.py")):
            lines = len(module.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES:
                found.append((module.relative_to(root), lines))
    return found


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    found = too_long(root)
    for module, lines in found:
        print(f"{module}: {lines} lines, more than {MAX_LINES}: split it by what it is for")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
