#!/usr/bin/env bash
# Build the schedulers Muster is measured against (issue 25) from their published Go
# modules, as hack/build-k8s.sh builds Kubernetes: one wrapper module per peer in
# hack/peers/<peer>/ whose go.mod/go.sum pin every dependency (the peer's own `replace`
# lines included). The binaries go to
#
#     $MUSTER_K8S_CACHE/peers/<peer>-<version>/bin/
#
# (MUSTER_K8S_CACHE defaults to ~/.cache/muster/k8s) and are reused while the stamp there
# matches the pinned modules and the Go version.
#
# Peers:
#   scheduler-plugins  sigs.k8s.io/scheduler-plugins v0.34.7: its kube-scheduler
#                      (cmd/scheduler: CapacityScheduling, Coscheduling, ...) and its
#                      controller (cmd/controller: PodGroup and ElasticQuota status).
#                      Built against Kubernetes v1.34.4 (its own go.mod says v1.34.7, but
#                      the module proxy here refuses several v0.34.7 staging modules, and
#                      v0.34.4 is the newest patch it serves whole); run it with the v1.35
#                      control plane (kube-scheduler may be one minor release older than
#                      kube-apiserver).
#   kueue              sigs.k8s.io/kueue v0.17.0: its controller manager (cmd/kueue), which
#                      admits workloads beside a stock kube-scheduler, and its CRDs and
#                      webhook configurations (config/components/crd/bases/*.yaml and
#                      config/components/webhook/*.yaml of the same module, copied to
#                      bin/crds/ and bin/webhook/). Built against Kubernetes v1.35.3 and
#                      controller-runtime v0.23.3, what its own go.mod requires (the module
#                      proxy here serves every module of it as it is; it has no replace
#                      lines). localcluster/kueue.py runs it on the local control plane
#                      (`make test-peers`), in its v1beta2 API.
#   koordinator        github.com/koordinator-sh/koordinator v1.6.0: its scheduler
#                      (cmd/koord-scheduler: ElasticQuota, Coscheduling, Reservation, ...),
#                      built against Kubernetes v1.28.7 (its own replace lines, which the
#                      module proxy here serves as they are), and its CRDs
#                      (config/crd/bases/*.yaml of the same module, copied to bin/crds/:
#                      scheduling.sigs.k8s.io ElasticQuota and PodGroup in its own schema,
#                      and its scheduling/slo/config.koordinator.sh kinds, whose informers
#                      the scheduler starts whatever plugins are enabled).
#                      localcluster/koordinator.py runs it on the local control plane.
#
# Usage:
#     hack/build-peers.sh [PEER]            build (or reuse); default scheduler-plugins
#     hack/build-peers.sh [PEER] --bin-dir  print the bin directory, build nothing
#     hack/build-peers.sh [PEER] --force    rebuild even if the cached binaries look current
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${MUSTER_K8S_CACHE:-$HOME/.cache/muster/k8s}"

log() { printf 'build-peers: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

peer="scheduler-plugins"
module_files=()
if [[ $# -gt 0 && "$1" != --* ]]; then
    peer="$1"
    shift
fi
case "$peer" in
    scheduler-plugins)
        module=sigs.k8s.io/scheduler-plugins
        packages=(cmd/scheduler cmd/controller)
        names=(kube-scheduler controller)
        ;;
    kueue)
        module=sigs.k8s.io/kueue
        packages=(cmd/kueue)
        names=(kueue-manager)
        # Files of the module itself the harness needs beside the binary.
        module_files=("config/components/crd/bases:crds" "config/components/webhook:webhook")
        ;;
    koordinator)
        module=github.com/koordinator-sh/koordinator
        packages=(cmd/koord-scheduler)
        names=(koord-scheduler)
        module_files=("config/crd/bases:crds")
        ;;
    *) die "unknown peer '$peer' (known: scheduler-plugins, kueue, koordinator)" ;;
esac
MOD_DIR="$HACK_DIR/peers/$peer"
[[ -f "$MOD_DIR/go.mod" ]] || die "$MOD_DIR/go.mod is missing"
command -v go >/dev/null || die "go is not on PATH"
version="$(cd "$MOD_DIR" && go mod edit -json | grep -A1 "\"Path\": \"$module\"" \
    | sed -n 's/.*"Version": "\(.*\)".*/\1/p' | head -n1)"
[[ -n "$version" ]] || die "cannot tell the version of $module that $MOD_DIR/go.mod pins"
BIN_DIR="$CACHE_ROOT/peers/$peer-$version/bin"
STAMP="$BIN_DIR/.stamp"

force=0
case "${1:-}" in
    --bin-dir) echo "$BIN_DIR"; exit 0 ;;
    --force) force=1 ;;
    "") ;;
    *) die "unknown argument: $1 (use --bin-dir or --force)" ;;
esac

stamp="$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" | sha256sum | cut -d' ' -f1) $(go env GOVERSION)"
if [[ $force -eq 0 && -f "$STAMP" && "$(cat "$STAMP")" == "$stamp" ]]; then
    all=1
    for name in "${names[@]}"; do [[ -x "$BIN_DIR/$name" ]] || all=0; done
    for pair in "${module_files[@]}"; do [[ -d "$BIN_DIR/${pair#*:}" ]] || all=0; done
    if [[ $all -eq 1 ]]; then
        log "reusing cached $peer $version binaries in $BIN_DIR"
        exit 0
    fi
fi

started=$SECONDS
mkdir -p "$BIN_DIR"
export CGO_ENABLED=0
log "building $peer $version (${packages[*]}) into $BIN_DIR"
for i in "${!packages[@]}"; do
    (cd "$MOD_DIR" && GOWORK=off go build -trimpath -buildvcs=false -mod=readonly \
        -ldflags "-s -w" -o "$BIN_DIR/${names[$i]}" "$module/${packages[$i]}")
done
if [[ ${#module_files[@]} -gt 0 ]]; then
    module_dir="$(cd "$MOD_DIR" && GOWORK=off go list -mod=readonly -m -f '{{.Dir}}' "$module")"
    [[ -d "$module_dir" ]] || die "cannot find $module's source in the module cache"
    for pair in "${module_files[@]}"; do
        src="$module_dir/${pair%%:*}" dst="$BIN_DIR/${pair#*:}"
        rm -rf "$dst" && mkdir -p "$dst"
        cp "$src"/*.yaml "$dst"/ && chmod u+w "$dst"/*.yaml
        log "copied $module ${pair%%:*} to $dst"
    done
fi
echo "$stamp" > "$STAMP"
log "built $peer $version in $((SECONDS - started))s"
