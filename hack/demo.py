"""``make demo``: Muster's decisions on the example scenarios, told as a story.

For each scenario in tests/scenarios it prints the scenario's own comment,
then what ``muster simulate`` decided (placements, evictions with their
reasons, pods left pending and why, quota usage), using the same core the
extender serves.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from extender.cli.simulate import render_table, simulate_files
from extender.core.config import MusterArgs

ROOT = Path(__file__).resolve().parents[1]
NOW = 1_767_268_800.0  # 2026-01-01T12:00:00Z: after every timestamp in the scenarios


def story(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


def main() -> int:
    for path in sorted((ROOT / "tests" / "scenarios").glob("*.yaml")):
        print("=" * 78)
        print(f"{path.stem}\n")
        print(textwrap.fill(story(path), width=78, initial_indent="  ", subsequent_indent="  "))
        print()
        document, notes = simulate_files([str(path)], MusterArgs(), now=NOW)
        for note in notes:
            print(f"  note: {note}")
        render_table(document, sys.stdout)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
