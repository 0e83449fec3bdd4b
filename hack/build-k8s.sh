#!/usr/bin/env bash
# Build the upstream control-plane binaries Muster's e2e tests and demo run against:
# etcd, kube-apiserver and kube-scheduler, with `go build` from the Go modules in
# hack/k8s/ (Kubernetes) and hack/k8s/etcd/ (etcd), whose go.mod/go.sum pin every
# dependency. The binaries go to
#
#     $MUSTER_K8S_CACHE/<kubernetes-version>-etcd<etcd-version>/bin/
#
# (MUSTER_K8S_CACHE defaults to ~/.cache/muster/k8s) and are reused on later runs when
# all three exist and the stamp file there matches the pinned modules and Go version.
#
# Trying another version: the versions live in ONE place, the two lines below
# (or, without editing, the environment variables MUSTER_K8S_VERSION and
# MUSTER_ETCD_VERSION). When they differ from what hack/k8s/go.mod and
# hack/k8s/etcd/go.mod pin, this script re-pins those modules first (it rewrites the
# `replace` lines for Kubernetes' staging modules, k8s.io/* v0.0.0 => v0.<minor>.<patch>,
# and runs `go mod tidy`), then builds into a new cache directory. Commit the changed
# go.mod/go.sum files to keep the new versions. This needs the Go module proxy.
#
# Usage:
#     hack/build-k8s.sh             build (or reuse) the binaries; prints what it did
#     hack/build-k8s.sh --bin-dir   print the bin directory for the pinned versions, build nothing
#     hack/build-k8s.sh --force     rebuild even if cached binaries look current
set -euo pipefail

K8S_VERSION="${MUSTER_K8S_VERSION:-v1.35.8}"
ETCD_VERSION="${MUSTER_ETCD_VERSION:-v3.6.16}"

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_MOD="$HACK_DIR/k8s"
ETCD_MOD="$HACK_DIR/k8s/etcd"
CACHE_ROOT="${MUSTER_K8S_CACHE:-$HOME/.cache/muster/k8s}"
OUT_DIR="$CACHE_ROOT/${K8S_VERSION}-etcd${ETCD_VERSION#v}"
BIN_DIR="$OUT_DIR/bin"
STAMP="$BIN_DIR/.stamp"
BINARIES=(etcd kube-apiserver kube-scheduler)

log() { printf 'build-k8s: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

force=0
case "${1:-}" in
    --bin-dir) echo "$BIN_DIR"; exit 0 ;;
    --force) force=1 ;;
    "") ;;
    *) die "unknown argument: $1 (use --bin-dir or --force)" ;;
esac

command -v go >/dev/null || die "go is not on PATH; Go >= 1.25 is needed to build Kubernetes"
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] \
    || die "MUSTER_K8S_VERSION must look like v1.35.8, got '$K8S_VERSION'"
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

started=$SECONDS
export CGO_ENABLED=0

# The version of module $2 that the go.mod in directory $1 requires (no network needed).
pinned() {
    (cd "$1" && go mod edit -json) | grep -A1 "\"Path\": \"$2\"" \
        | sed -n 's/.*"Version": "\(.*\)".*/\1/p' | head -n1
}

# Re-pin hack/k8s to $K8S_VERSION: require it and point every staging module it
# replaces with ./staging/src/... at the published tag v0.<minor>.<patch>.
repin_k8s() {
    log "re-pinning hack/k8s/go.mod: k8s.io/kubernetes $K8S_VERSION (staging $STAGING_VERSION)"
    local gomod staging go_line args=() m
    gomod="$(cd / && GOWORK=off go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
        | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    [[ -f "$gomod" ]] || die "could not download k8s.io/kubernetes@$K8S_VERSION"
    staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$gomod")"
    [[ -n "$staging" ]] || die "no staging replace lines found in $gomod"
    go_line="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
    for m in $( (cd "$K8S_MOD" && go mod edit -json) | grep -A1 '"Old"' \
        | sed -n 's/.*"Path": "\(.*\)".*/\1/p'); do
        args+=("-dropreplace=$m")
    done
    (cd "$K8S_MOD" && go mod edit "${args[@]}")
    args=("-require=k8s.io/kubernetes@$K8S_VERSION" "-go=$go_line")
    for m in $staging; do args+=("-replace=$m=$m@$STAGING_VERSION"); done
    (cd "$K8S_MOD" && go mod edit "${args[@]}" && go mod tidy)
}

repin_etcd() {
    log "re-pinning hack/k8s/etcd/go.mod: go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    (cd "$ETCD_MOD" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" && go mod tidy)
}

[[ "$(pinned "$K8S_MOD" k8s.io/kubernetes)" == "$K8S_VERSION" ]] || repin_k8s
[[ "$(pinned "$ETCD_MOD" go.etcd.io/etcd/server/v3)" == "$ETCD_VERSION" ]] || repin_etcd

# Kubernetes' own release builds stamp the version in with -X; without it the
# binaries report v0.0.0-master.
minor="${K8S_VERSION#v1.}"
minor="${minor%%.*}"
version_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1"
    version_ldflags+=" -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

GO_BUILD_FLAGS="-trimpath -buildvcs=false -mod=readonly"

# Everything that determines the binaries; a cached build with another stamp is rebuilt.
stamp_text() {
    printf 'kubernetes %s\netcd %s\n%s\nflags %s\n' "$K8S_VERSION" "$ETCD_VERSION" \
        "$(go version)" "$GO_BUILD_FLAGS $version_ldflags"
    (cd "$HACK_DIR" && sha256sum k8s/go.mod k8s/go.sum k8s/etcd/go.mod k8s/etcd/go.sum \
        k8s/etcd/main.go)
}

all_present() {
    local b
    for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

mkdir -p "$OUT_DIR"
# One build at a time per version (parallel test sessions share the cache).
exec 9>"$OUT_DIR/.lock"
flock 9

if ((force == 0)) && all_present && [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$(stamp_text)" ]]; then
    log "reusing cached binaries in $BIN_DIR (kubernetes $K8S_VERSION, etcd $ETCD_VERSION)" \
        "- checked in $((SECONDS - started))s"
    exit 0
fi

log "building kubernetes $K8S_VERSION and etcd $ETCD_VERSION into $BIN_DIR ($(go version))"
TMP_BIN="$(mktemp -d "$OUT_DIR/.build.XXXXXX")"
trap 'rm -rf "$TMP_BIN"' EXIT

t0=$SECONDS
log "go build kube-apiserver kube-scheduler ..."
(cd "$K8S_MOD" && go build $GO_BUILD_FLAGS -ldflags "-s -w$version_ldflags" -o "$TMP_BIN/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler) \
    || die "building kube-apiserver/kube-scheduler failed (see the go output above)"
log "  done in $((SECONDS - t0))s"

t0=$SECONDS
log "go build etcd ..."
(cd "$ETCD_MOD" && go build $GO_BUILD_FLAGS -ldflags "-s -w" -o "$TMP_BIN/etcd" .) \
    || die "building etcd failed (see the go output above)"
log "  done in $((SECONDS - t0))s"

"$TMP_BIN/kube-apiserver" --version >&2 || die "the built kube-apiserver does not run"
"$TMP_BIN/etcd" --version >&2 || die "the built etcd does not run"

mkdir -p "$BIN_DIR"
rm -f "$STAMP"
for b in "${BINARIES[@]}"; do mv -f "$TMP_BIN/$b" "$BIN_DIR/$b"; done
stamp_text >"$STAMP"
log "built ${BINARIES[*]} into $BIN_DIR in $((SECONDS - started))s"
