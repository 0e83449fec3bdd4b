#!/usr/bin/env bash
# The Dockerfile's two stages without a container engine (none runs on the machines
# that test Muster): build Muster and its pinned dependencies as wheels, install only
# those wheels, with no index, into a clean virtualenv, and run the entrypoints.
# Usage: hack/check-image-recipe.sh [WORKDIR]   (default: a new temporary directory)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-$(mktemp -d)}"
PYTHON="${PYTHON:-python3}"

mkdir -p "$WORK/src"
# Stage 1: what the Dockerfile copies, and nothing else.
cp "$ROOT/pyproject.toml" "$ROOT/README.md" "$WORK/src/"
cp -r "$ROOT/base" "$ROOT/quota" "$ROOT/extender" "$WORK/src/"
"$PYTHON" -m pip wheel --quiet --wheel-dir "$WORK/wheels" "$WORK/src"
# Stage 2: a clean prefix, wheels only.
"$PYTHON" -m venv "$WORK/prefix"
"$WORK/prefix/bin/pip" install --quiet --no-index --find-links "$WORK/wheels" muster
cd "$WORK"  # not the source tree: the installed package must stand alone
"$WORK/prefix/bin/muster" --help >/dev/null
"$WORK/prefix/bin/muster" serve --help >/dev/null
"$WORK/prefix/bin/kubectl-muster" --help >/dev/null
echo "image recipe: ok ($(ls "$WORK/wheels" | wc -l) wheels, entrypoints run from $WORK/prefix)"
