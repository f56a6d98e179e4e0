#!/usr/bin/env bash
# Builds Kueue (sigs.k8s.io/kueue, its manager `cmd/kueue`) from its Go module and keeps its CRD
# and webhook manifests beside it; prints the directory. The scale comparison runs it against
# the same control plane and KWOK nodes as Spillway (docs/performance.md). Cached under
# $SPILLWAY_CACHE/kueue-VERSION.
#
#   scripts/kueue.sh            # -> DIR with bin/kueue, crd/*.yaml, webhook.yaml
set -euo pipefail

version=v0.17.0
log() { echo "kueue: $*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
out="$cache/kueue-$version"
if [[ -x "$out/bin/kueue" && -s "$out/crd/kueue.x-k8s.io_clusterqueues.yaml" && -s "$out/webhook.yaml" ]]; then
  echo "$out"
  exit 0
fi
start=$SECONDS
log "building Kueue $version"
"$here/go-build.sh" --module sigs.k8s.io/kueue --version "$version" \
  --ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version" \
  --out "$out/bin" sigs.k8s.io/kueue/cmd/kueue
src=$(GOMODCACHE="$cache/go/mod" GOFLAGS=-modcacherw go mod download -json "sigs.k8s.io/kueue@$version" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
mkdir -p "$out/crd"
cp "$src"/config/components/crd/bases/*.yaml "$out/crd/"
cp "$src/config/components/webhook/manifests.yaml" "$out/webhook.yaml"
chmod -R u+w "$out"
log "Kueue $version ready in $out ($((SECONDS - start)) s)"
echo "$out"
