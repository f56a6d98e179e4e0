#!/usr/bin/env bash
# Builds KWOK (sigs.k8s.io/kwok, its `kwok` controller) from its Go module and keeps its stock
# stages beside it; prints the directory. The scale test and scripts/scale.sh run it against the
# test control plane: it plays the kubelet of a thousand GPU nodes (tests/src/kwok.rs). Cached
# under $SPILLWAY_CACHE/kwok-VERSION.
#
#   scripts/kwok.sh            # -> DIR with bin/kwok and stages/*.yaml (KWOK's stock stages)
set -euo pipefail

version=v0.8.0
log() { echo "kwok: $*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
out="$cache/kwok-$version"
if [[ -x "$out/bin/kwok" && -s "$out/stages/node-heartbeat-with-lease.yaml" ]]; then
  echo "$out"
  exit 0
fi
start=$SECONDS
log "building KWOK $version"
"$here/go-build.sh" --module sigs.k8s.io/kwok --version "$version" \
  --ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$version" \
  --out "$out/bin" sigs.k8s.io/kwok/cmd/kwok
src=$(GOMODCACHE="$cache/go/mod" GOFLAGS=-modcacherw go mod download -json "sigs.k8s.io/kwok@$version" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
mkdir -p "$out/stages"
# Nodes: ready at once, kept ready through their leases. Pods: running as soon as bound and
# deleted when asked (KWOK's "fast" stages); when they complete is the harness's own stage
# (tests/kwok/pod-complete.yaml), after the time a pod's annotation states.
cp "$src"/kustomize/stage/node/fast/node-initialize.yaml \
  "$src"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
  "$src"/kustomize/stage/pod/fast/pod-ready.yaml \
  "$src"/kustomize/stage/pod/fast/pod-delete.yaml "$out/stages/"
chmod -R u+w "$out"
log "KWOK $version ready in $out ($((SECONDS - start)) s)"
echo "$out"
