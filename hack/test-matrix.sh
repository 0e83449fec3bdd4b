#!/usr/bin/env bash
# Run Muster's e2e tier against every Kubernetes minor release hack/build-k8s.sh pins
# (hack/k8s/versions/<minor>), building each release's binaries first (once, cached).
# Goes on after a failing release and prints one summary line per release at the end:
#
#     test-matrix: v1.35.8 passed in 912 s (build or cache check: 0 s)
#
# Exit status: 0 only if every release passed. `make test-matrix` runs it.
# Usage: hack/test-matrix.sh [python] [pytest arguments...]
#        (default: python3 -n 2 --dist loadgroup tests/e2e: each half of the tier on its own
#        control plane, as `make test` runs it)
set -uo pipefail
cd "$(dirname "$0")/.."
python="${1:-python3}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(-n 2 --dist loadgroup tests/e2e)

summary=()
status=0
for minor in $(hack/build-k8s.sh --versions); do
    export MUSTER_K8S_VERSION="$minor"
    version="$(hack/build-k8s.sh --version)"
    echo "test-matrix: === Kubernetes $version ===" >&2
    started=$SECONDS
    if ! hack/build-k8s.sh; then
        summary+=("$version FAILED to build")
        status=1
        continue
    fi
    built=$((SECONDS - started))
    started=$SECONDS
    if "$python" -m pytest -q "${targets[@]}"; then
        summary+=("$version passed in $((SECONDS - started)) s (build or cache check: $built s)")
    else
        summary+=("$version FAILED after $((SECONDS - started)) s (build or cache check: $built s)")
        status=1
    fi
done
for line in "${summary[@]}"; do echo "test-matrix: $line"; done
exit "$status"
