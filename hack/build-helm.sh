#!/usr/bin/env bash
# Build helm, which the chart tests use (`helm lint`, `helm template`) and
# hack/render_manifests.py uses to write manifests/ from charts/muster, with `go build`
# from the Go module in hack/helm/, whose go.mod/go.sum pin helm and every dependency.
# The binary goes to
#
#     $MUSTER_HELM_CACHE/<helm-version>/bin/helm     (MUSTER_HELM_CACHE: ~/.cache/muster/helm)
#
# and is reused while the stamp beside it matches the pinned module and Go version.
# To try another helm, edit the require line in hack/helm/go.mod and `go mod tidy` there.
#
# Usage:
#     hack/build-helm.sh           build (or reuse) helm; prints the binary's path on stdout
#     hack/build-helm.sh --force   rebuild even if the cached binary looks current
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD="$HACK_DIR/helm"
CACHE_ROOT="${MUSTER_HELM_CACHE:-$HOME/.cache/muster/helm}"

log() { printf 'build-helm: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

force=0
case "${1:-}" in
    --force) force=1 ;;
    "") ;;
    *) die "unknown argument: $1 (use --force)" ;;
esac

command -v go >/dev/null || die "go is not on PATH; Go >= 1.26 is needed to build helm (hack/helm/go.mod)"
VERSION="$( (cd "$MOD" && go mod edit -json) | grep -A1 '"Path": "helm.sh/helm/v4"' \
    | sed -n 's/.*"Version": "\(.*\)".*/\1/p' | head -n1)"
[[ -n "$VERSION" ]] || die "hack/helm/go.mod requires no helm.sh/helm/v4"
BIN_DIR="$CACHE_ROOT/$VERSION/bin"
STAMP="$BIN_DIR/.stamp"
# helm reports the version stamped in at link time, as its own release builds do.
LDFLAGS="-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION"
FLAGS="-trimpath -buildvcs=false -mod=readonly"

stamp_text() {
    printf 'helm %s\n%s\nflags %s %s\n' "$VERSION" "$(go version)" "$FLAGS" "$LDFLAGS"
    (cd "$HACK_DIR" && sha256sum helm/go.mod helm/go.sum)
}

mkdir -p "$BIN_DIR"
exec 9>"$BIN_DIR/.lock"
flock 9   # parallel test sessions share the cache
if ((force == 0)) && [[ -x "$BIN_DIR/helm" && -f "$STAMP" && "$(cat "$STAMP")" == "$(stamp_text)" ]]; then
    echo "$BIN_DIR/helm"
    exit 0
fi

log "building helm $VERSION into $BIN_DIR ($(go version)) ..."
started=$SECONDS
export CGO_ENABLED=0
tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
(cd "$MOD" && go build $FLAGS -ldflags "$LDFLAGS" -o "$tmp/helm" helm.sh/helm/v4/cmd/helm) \
    || die "building helm failed (see the go output above)"
"$tmp/helm" version --short >&2 || die "the built helm does not run"
rm -f "$STAMP"
mv -f "$tmp/helm" "$BIN_DIR/helm"
stamp_text >"$STAMP"
log "built helm $VERSION in $((SECONDS - started))s"
echo "$BIN_DIR/helm"
