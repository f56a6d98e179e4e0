#!/usr/bin/env bash
# Builds the KubeRay operator (github.com/ray-project/kuberay/ray-operator) from its Go module
# and keeps its CRDs beside it; prints the directory. The workload tests run it for real
# against the test control plane (docs/workloads.md). Cached under $SPILLWAY_CACHE/kuberay-VERSION.
#
#   scripts/kuberay.sh           # -> DIR with bin/ray-operator, crd/*.yaml
set -euo pipefail

version=v1.6.0
log() { echo "kuberay: $*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
out="$cache/kuberay-$version"
if [[ -x "$out/bin/ray-operator" && -s "$out/crd/ray.io_rayjobs.yaml" ]]; then
  echo "$out"
  exit 0
fi
start=$SECONDS
log "building KubeRay $version"
"$here/go-build.sh" --module github.com/ray-project/kuberay/ray-operator --version "$version" \
  --ldflags "-s -w" \
  --out "$out/bin" github.com/ray-project/kuberay/ray-operator=ray-operator
src=$(GOMODCACHE="$cache/go/mod" GOFLAGS=-modcacherw go mod download -json "github.com/ray-project/kuberay/ray-operator@$version" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
mkdir -p "$out/crd"
cp "$src"/config/crd/bases/ray.io_rayclusters.yaml "$src"/config/crd/bases/ray.io_rayjobs.yaml "$out/crd/"
chmod -R u+w "$out"
log "KubeRay $version ready in $out ($((SECONDS - start)) s)"
echo "$out"
