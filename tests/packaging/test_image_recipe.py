"""The container image's recipe, checked without a container engine (issue #16, item 1):
the Dockerfile's two stages, run by hack/check-image-recipe.sh, give a clean prefix
whose entrypoints run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_image_recipe_installs_from_wheels_alone_and_its_entrypoints_run(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [str(ROOT / "hack" / "check-image-recipe.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "image recipe: ok" in done.stdout
    installed = tmp_path / "prefix" / "bin"
    assert (installed / "muster").exists() and (installed / "kubectl-muster").exists()
    # The Dockerfile copies exactly what the recipe copies.
    dockerfile = (ROOT / "Dockerfile").read_text()
    for copied in ("COPY base ./base", "COPY quota ./quota", "COPY extender ./extender"):
        assert copied in dockerfile
