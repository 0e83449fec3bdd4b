#!/usr/bin/env bash
# Build the upstream control-plane binaries Muster's e2e tests and demo run against:
# etcd, kube-apiserver, kube-scheduler and kube-controller-manager (the job, replicaset,
# disruption, garbage-collector ... controllers a batch cluster relies on), with
# `go build` from the Go modules in hack/k8s/ (Kubernetes) and hack/k8s/etcd/ (etcd),
# whose go.mod/go.sum pin every dependency. The binaries go to
#
#     $MUSTER_K8S_CACHE/<kubernetes-version>-etcd<etcd-version>/bin/
#
# (MUSTER_K8S_CACHE defaults to ~/.cache/muster/k8s) and are reused on later runs when
# all four exist and the stamp file there matches the pinned modules and Go version.
#
# Trying another version: the versions live in ONE place, the two lines below
# (or, without editing, the environment variables MUSTER_K8S_VERSION and
# MUSTER_ETCD_VERSION). When they differ from what hack/k8s/go.mod and
# hack/k8s/etcd/go.mod pin, this script re-pins those modules first, then builds into a
# new cache directory. Re-pinning rewrites hack/k8s/go.mod (require k8s.io/kubernetes,
# and `replace` every staging module it requires at v0.0.0 -- k8s.io/api,
# k8s.io/apimachinery, k8s.io/client-go, ... -- with the tag v0.<minor>.<patch>), runs
# `go get` for etcd, and `go mod tidy` in both. It needs the Go module proxy. Commit the
# changed go.mod/go.sum files to keep the new versions.
#
# v1.35.8 is the newest v1.35 patch release the module proxy here serves (v1.35.7,
# v1.35.9 and v1.35.10 answer "403 not available"); etcd v3.6.16 is the newest v3.6
# server (Kubernetes 1.35 is tested with etcd 3.6.x; its own go.mod uses 3.6.5 client
# libraries, which is why etcd is built from a module of its own).
#
# Usage:
#     hack/build-k8s.sh             build (or reuse) the binaries; prints what it did
#     hack/build-k8s.sh --bin-dir   print the bin directory for the pinned versions, build nothing
#     hack/build-k8s.sh --force     rebuild even if cached binaries look current
#     hack/build-k8s.sh --repin     rewrite both go.mod/go.sum from the versions below, then build
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
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager)

log() { printf 'build-k8s: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

force=0
repin=0
case "${1:-}" in
    --bin-dir) echo "$BIN_DIR"; exit 0 ;;
    --force) force=1 ;;
    --repin) repin=1 ;;
    "") ;;
    *) die "unknown argument: $1 (use --bin-dir, --force or --repin)" ;;
esac

command -v go >/dev/null || die "go is not on PATH; Go >= 1.25 is needed to build Kubernetes"
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] \
    || die "MUSTER_K8S_VERSION must look like v1.35.8, got '$K8S_VERSION'"
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

started=$EPOCHREALTIME
# Seconds since $1 (an $EPOCHREALTIME value), e.g. "3.2s".
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2fs", b - a }'; }
export CGO_ENABLED=0

# The version of module $2 that the go.mod in directory $1 requires (no network needed).
pinned() {
    (cd "$1" && go mod edit -json) | grep -A1 "\"Path\": \"$2\"" \
        | sed -n 's/.*"Version": "\(.*\)".*/\1/p' | head -n1
}

# Re-pin hack/k8s to $K8S_VERSION: rewrite its go.mod (require the version, and replace
# every staging module that k8s.io/kubernetes points at ./staging/src/... with the
# published tag v0.<minor>.<patch>), then let `go mod tidy` fill in the rest.
repin_k8s() {
    log "re-pinning hack/k8s/go.mod: k8s.io/kubernetes $K8S_VERSION (staging $STAGING_VERSION)"
    local info gomod staging go_line m
    info="$(cd / && GOWORK=off go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>&1)" || true
    gomod="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$info")"
    if grep -q '"Error"' <<<"$info" || [[ ! -f "$gomod" ]]; then
        die "cannot download k8s.io/kubernetes@$K8S_VERSION: $info"
    fi
    staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$gomod")"
    [[ -n "$staging" ]] || die "no staging replace lines found in $gomod"
    go_line="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
    {
        echo "// Pins the upstream Kubernetes control-plane binaries Muster's e2e tests run against."
        echo "// Written by hack/build-k8s.sh (from the versions at its top), then \`go mod tidy\`."
        echo "module muster.local/hack/k8s"
        echo
        echo "go $go_line"
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "tool ("
        echo "	k8s.io/kubernetes/cmd/kube-apiserver"
        echo "	k8s.io/kubernetes/cmd/kube-controller-manager"
        echo "	k8s.io/kubernetes/cmd/kube-scheduler"
        echo ")"
        echo
        echo "// k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with"
        echo "// local directories; outside its repository they must point at the published tags."
        echo "replace ("
        for m in $staging; do echo "	$m => $m $STAGING_VERSION"; done
        echo ")"
    } >"$K8S_MOD/go.mod"
    (cd "$K8S_MOD" && go mod tidy) || die "go mod tidy failed in $K8S_MOD"
}

# Re-pin hack/k8s/etcd to $ETCD_VERSION: a fresh go.mod that requires only the etcd
# server, so `go mod tidy` takes every other version (api, client, pkg, ...) from it.
repin_etcd() {
    log "re-pinning hack/k8s/etcd/go.mod: go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    local info gomod go_line
    info="$(cd / && GOWORK=off go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" 2>&1)" \
        || true
    gomod="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$info")"
    if grep -q '"Error"' <<<"$info" || [[ ! -f "$gomod" ]]; then
        die "cannot download go.etcd.io/etcd/server/v3@$ETCD_VERSION: $info"
    fi
    go_line="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
    {
        echo "// etcd for Muster's local control plane. A module of its own so that etcd's"
        echo "// dependency versions never change the ones kube-apiserver is built with."
        echo "// Written by hack/build-k8s.sh (from the versions at its top), then \`go mod tidy\`."
        echo "module muster.local/hack/k8s/etcd"
        echo
        echo "go $go_line"
        echo
        echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    } >"$ETCD_MOD/go.mod"
    (cd "$ETCD_MOD" && go mod tidy) || die "go mod tidy failed in $ETCD_MOD"
}

if ((repin)) || [[ "$(pinned "$K8S_MOD" k8s.io/kubernetes)" != "$K8S_VERSION" ]]; then
    repin_k8s
fi
if ((repin)) || [[ "$(pinned "$ETCD_MOD" go.etcd.io/etcd/server/v3)" != "$ETCD_VERSION" ]]; then
    repin_etcd
fi

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

# Everything that determines the binaries (the modules' requirements, not their
# comments); a cached build with another stamp is rebuilt.
stamp_text() {
    printf 'kubernetes %s\netcd %s\n%s\nflags %s\n' "$K8S_VERSION" "$ETCD_VERSION" \
        "$(go version)" "$GO_BUILD_FLAGS $version_ldflags"
    printf 'modules %s\n' "$( (cd "$K8S_MOD" && go mod edit -json) | sha256sum | cut -d' ' -f1)"
    printf 'etcd module %s\n' "$( (cd "$ETCD_MOD" && go mod edit -json) | sha256sum | cut -d' ' -f1)"
    (cd "$HACK_DIR" && sha256sum k8s/go.sum k8s/etcd/go.sum k8s/etcd/main.go)
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
        "- checked in $(since "$started")"
    exit 0
fi

log "building kubernetes $K8S_VERSION and etcd $ETCD_VERSION into $BIN_DIR ($(go version))"
TMP_BIN="$(mktemp -d "$OUT_DIR/.build.XXXXXX")"
trap 'rm -rf "$TMP_BIN"' EXIT

t0=$EPOCHREALTIME
log "go build kube-apiserver kube-scheduler kube-controller-manager ..."
(cd "$K8S_MOD" && go build $GO_BUILD_FLAGS -ldflags "-s -w$version_ldflags" -o "$TMP_BIN/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager) \
    || die "building the Kubernetes binaries failed (see the go output above)"
log "  done in $(since "$t0")"

t0=$EPOCHREALTIME
log "go build etcd ..."
(cd "$ETCD_MOD" && go build $GO_BUILD_FLAGS -ldflags "-s -w" -o "$TMP_BIN/etcd" .) \
    || die "building etcd failed (see the go output above)"
log "  done in $(since "$t0")"

"$TMP_BIN/kube-apiserver" --version >&2 || die "the built kube-apiserver does not run"
"$TMP_BIN/kube-controller-manager" --version >&2 \
    || die "the built kube-controller-manager does not run"
"$TMP_BIN/etcd" --version >&2 || die "the built etcd does not run"

mkdir -p "$BIN_DIR"
rm -f "$STAMP"
for b in "${BINARIES[@]}"; do mv -f "$TMP_BIN/$b" "$BIN_DIR/$b"; done
stamp_text >"$STAMP"
log "built ${BINARIES[*]} into $BIN_DIR in $(since "$started")"
