"""``python -m tests.soak [--seconds N] [--seed S] [--workdir DIR]``: one soak run.

The defaults come from ``SOAK_SECONDS`` (600) and ``SOAK_SEED`` (a random seed, printed,
so a failure can be replayed).  Exit status 0 when no invariant was violated, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from tests.soak.run import run_soak  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS") or 600)
    )
    seed = os.environ.get("SOAK_SEED")
    parser.add_argument(
        "--seed", type=int, default=int(seed) if seed else random.randrange(1, 2**31)
    )
    parser.add_argument("--workdir", type=Path, default=None)
    options = parser.parse_args(argv)
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix=f"muster-soak-{options.seed}-"))
    print(
        f"soak: SOAK_SEED={options.seed} SOAK_SECONDS={options.seconds:g} (logs in {workdir})",
        flush=True,
    )
    result = run_soak(
        options.seed, options.seconds, workdir, say=lambda line: print(line, flush=True)
    )
    print(result.report(), flush=True)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
