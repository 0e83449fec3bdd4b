#!/usr/bin/env bash
# Build the upstream control-plane binaries Muster's e2e tests and demo run against:
# etcd, kube-apiserver, kube-scheduler and kube-controller-manager (the job, replicaset,
# disruption, garbage-collector ... controllers a batch cluster relies on), with
# `go build` from pinned Go modules: one per supported Kubernetes minor release in
# hack/k8s/versions/<minor>/ (1.35, 1.36, 1.37) and one for etcd in hack/k8s/etcd/, whose
# go.mod/go.sum pin every dependency. The binaries go to
#
#     $MUSTER_K8S_CACHE/<kubernetes-version>-etcd<etcd-version>/bin/
#
# (MUSTER_K8S_CACHE defaults to ~/.cache/muster/k8s) and are reused on later runs when
# all four exist and the stamp file there matches the pinned modules and Go version.
#
# Which Kubernetes: MUSTER_K8S_VERSION names a minor release ("1.36" or "v1.36": the
# patch its module pins) or an exact one ("v1.36.3"); unset, the newest minor release
# in hack/k8s/versions/. An exact version that module does not pin re-pins it first:
# its go.mod is rewritten (require k8s.io/kubernetes, and `replace` every staging module
# it requires at v0.0.0 -- k8s.io/api, k8s.io/apimachinery, k8s.io/client-go, ... --
# with the tag v0.<minor>.<patch>), then `go mod tidy`; a new minor release gets a new
# directory. etcd follows MUSTER_ETCD_VERSION (default below) the same way. Re-pinning
# needs the Go module proxy; commit the changed go.mod/go.sum files to keep it.
#
# Pinned: v1.35.8, v1.36.3 and v1.37.2, the newest patches of each minor release the
# module proxy here serves (for 1.35, v1.35.9 and v1.35.10 answer "403 not available");
# etcd v3.6.16, the newest v3.6 server (Kubernetes 1.35-1.37 are tested with etcd 3.6.x;
# etcd has a module of its own so its dependency versions never change kube-apiserver's).
# All three build with go1.26 (the `go` line of each module says the minimum); a machine
# with an older Go builds them with GOTOOLCHAIN=go1.26.8 (Go downloads that toolchain).
#
# Usage:
#     hack/build-k8s.sh             build (or reuse) the binaries; prints what it did
#     hack/build-k8s.sh --bin-dir   print the bin directory for that version, build nothing
#     hack/build-k8s.sh --version   print the exact Kubernetes version selected
#     hack/build-k8s.sh --versions  print the minor releases pinned, oldest first
#     hack/build-k8s.sh --force     rebuild even if cached binaries look current
#     hack/build-k8s.sh --repin     rewrite both go.mod/go.sum from the versions, then build
set -euo pipefail

ETCD_VERSION="${MUSTER_ETCD_VERSION:-v3.6.16}"

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSIONS_DIR="$HACK_DIR/k8s/versions"
ETCD_MOD="$HACK_DIR/k8s/etcd"
CACHE_ROOT="${MUSTER_K8S_CACHE:-$HOME/.cache/muster/k8s}"
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager)

log() { printf 'build-k8s: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The version of module $2 that the go.mod in directory $1 requires (no network needed).
pinned() {
    (cd "$1" && go mod edit -json) | grep -A1 "\"Path\": \"$2\"" \
        | sed -n 's/.*"Version": "\(.*\)".*/\1/p' | head -n1
}

# The minor releases pinned (directory names under hack/k8s/versions), oldest first.
minors() { (cd "$VERSIONS_DIR" && ls -d 1.* | sort -V); }

command -v go >/dev/null || die "go is not on PATH; Go >= 1.26 is needed to build Kubernetes"
requested="${MUSTER_K8S_VERSION:-$(minors | tail -n1)}"
requested="${requested#v}"
if [[ "$requested" =~ ^1\.([0-9]+)$ ]]; then
    K8S_MOD="$VERSIONS_DIR/$requested"
    [[ -f "$K8S_MOD/go.mod" ]] \
        || die "Kubernetes $requested is not pinned (pinned: $(minors | tr '\n' ' '));" \
            "MUSTER_K8S_VERSION=v$requested.<patch> $0 --repin pins it"
    K8S_VERSION="$(pinned "$K8S_MOD" k8s.io/kubernetes)"
elif [[ "$requested" =~ ^1\.([0-9]+)\.([0-9]+)$ ]]; then
    K8S_VERSION="v$requested"
    K8S_MOD="$VERSIONS_DIR/1.${BASH_REMATCH[1]}"
else
    die "MUSTER_K8S_VERSION must look like 1.36, v1.36 or v1.36.3, got '${MUSTER_K8S_VERSION}'"
fi
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "cannot tell the version $K8S_MOD pins"
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
OUT_DIR="$CACHE_ROOT/${K8S_VERSION}-etcd${ETCD_VERSION#v}"
BIN_DIR="$OUT_DIR/bin"
STAMP="$BIN_DIR/.stamp"

force=0
repin=0
case "${1:-}" in
    --bin-dir) echo "$BIN_DIR"; exit 0 ;;
    --version) echo "$K8S_VERSION"; exit 0 ;;
    --versions) minors; exit 0 ;;
    --force) force=1 ;;
    --repin) repin=1 ;;
    "") ;;
    *) die "unknown argument: $1 (use --bin-dir, --version, --versions, --force or --repin)" ;;
esac

started=$EPOCHREALTIME
# Seconds since $1 (an $EPOCHREALTIME value), e.g. "3.2s".
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2fs", b - a }'; }
export CGO_ENABLED=0

# Re-pin $K8S_MOD to $K8S_VERSION: rewrite its go.mod (require the version, and replace
# every staging module that k8s.io/kubernetes points at ./staging/src/... with the
# published tag v0.<minor>.<patch>), then let `go mod tidy` fill in the rest.
repin_k8s() {
    mkdir -p "$K8S_MOD"
    log "re-pinning ${K8S_MOD#"$HACK_DIR/"}/go.mod: k8s.io/kubernetes $K8S_VERSION (staging $STAGING_VERSION)"
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

if ((repin)) || [[ ! -f "$K8S_MOD/go.mod" ]] \
    || [[ "$(pinned "$K8S_MOD" k8s.io/kubernetes)" != "$K8S_VERSION" ]]; then
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
    (cd "$HACK_DIR" && sha256sum "${K8S_MOD#"$HACK_DIR/"}/go.sum" k8s/etcd/go.sum k8s/etcd/main.go)
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
