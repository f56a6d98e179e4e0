#!/usr/bin/env bash
# Builds a Kubernetes control plane from Go modules and prints the directory that holds it:
# kube-apiserver, kube-scheduler, kube-controller-manager and kubectl from `k8s.io/kubernetes`,
# and etcd from `go.etcd.io/etcd/server/v3` (the envtest KUBEBUILDER_ASSETS layout). No prebuilt binary
# can be downloaded on our machines; the Go module proxy serves both modules.
#
#   scripts/k8s-binaries.sh            # the current release (the whole suite runs on it)
#   scripts/k8s-binaries.sh 1.34.4     # another release (the oldest supported: the smoke set)
#
# With no argument, a KUBEBUILDER_ASSETS that holds kube-apiserver is used as is (nothing built).
# Cache: ${SPILLWAY_CACHE:-~/.cache/spillway}/k8s-<version>/bin, etcd-<version>/bin, and the Go
# module and build caches under go/ (scripts/go-build.sh). Cold, on 2 cores: see
# docs/development.md ("The Kubernetes control plane").
set -euo pipefail

# The newest release the module proxy serves, and the oldest this project supports
# (docs/operations.md says why); etcd 3.6 serves both (1.35+ needs etcd >= 3.5.13).
current=1.37.2
oldest=1.34.4
etcd_version=3.6.16

log() { echo "k8s-binaries: $*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"

case "${1:-}" in
  "") version="$current"
      if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/kube-apiserver" ]]; then
        echo "${KUBEBUILDER_ASSETS}"
        exit 0
      fi ;;
  current) version="$current" ;;
  oldest) version="$oldest" ;;
  *) version="${1#v}" ;;
esac
[[ "$version" =~ ^1\.([0-9]+)\.([0-9]+)$ ]] || { log "not a release version: $version"; exit 2; }
minor="${BASH_REMATCH[1]}"

cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
out="$cache/k8s-$version/bin"
kube=(kube-apiserver kube-scheduler kube-controller-manager kubectl)
want=("${kube[@]}" etcd)
have_all() {
  for b in "${want[@]}"; do [[ -x "$out/$b" ]] || return 1; done
}
if have_all; then
  echo "$out"
  exit 0
fi

start=$SECONDS
etcd_dir="$cache/etcd-$etcd_version/bin"
if [[ ! -x "$etcd_dir/etcd" ]]; then
  log "building etcd $etcd_version"
  "$here/go-build.sh" --module go.etcd.io/etcd/server/v3 --version "v$etcd_version" \
    --out "$etcd_dir" go.etcd.io/etcd/server/v3=etcd
fi

missing=()
for b in "${kube[@]}"; do [[ -x "$out/$b" ]] || missing+=("k8s.io/kubernetes/cmd/$b"); done
if ((${#missing[@]})); then
  # The version stamps Kubernetes' own build sets (hack/lib/version.sh): without them /version
  # reads v0.0.0-master and version checks (kubectl's skew warning, Helm's kubeVersion) break.
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=v$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  log "building Kubernetes v$version: ${missing[*]##*/}"
  "$here/go-build.sh" --module k8s.io/kubernetes --version "v$version" --staging \
    --ldflags "$ldflags" --out "$out" "${missing[@]}"
fi
ln -sfn "$etcd_dir/etcd" "$out/etcd"
have_all
log "Kubernetes v$version ready in $out ($((SECONDS - start)) s)"
echo "$out"
