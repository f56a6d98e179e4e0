#!/usr/bin/env bash
# Builds the Kubeflow Trainer controller (github.com/kubeflow/trainer/v2, its
# trainer-controller-manager) from its Go module and keeps its CRDs, webhook manifests and the
# torch runtime beside it; prints the directory. The workload tests run it for real against the
# test control plane, beside the JobSet controller it drives (docs/workloads.md). Cached under
# $SPILLWAY_CACHE/trainer-VERSION.
#
#   scripts/trainer.sh           # -> DIR with bin/trainer-manager, crd/*.yaml, webhook.yaml
set -euo pipefail

version=v2.2.0
log() { echo "trainer: $*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
out="$cache/trainer-$version"
if [[ -x "$out/bin/trainer-manager" && -s "$out/crd/trainer.kubeflow.org_trainjobs.yaml" && -s "$out/webhook.yaml" ]]; then
  echo "$out"
  exit 0
fi
start=$SECONDS
log "building Kubeflow Trainer $version"
"$here/go-build.sh" --module github.com/kubeflow/trainer/v2 --version "$version" \
  --ldflags "-s -w" \
  --out "$out/bin" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager=trainer-manager
src=$(GOMODCACHE="$cache/go/mod" GOFLAGS=-modcacherw go mod download -json "github.com/kubeflow/trainer/v2@$version" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
mkdir -p "$out/crd"
cp "$src"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$out/crd/"
cp "$src/manifests/base/webhook/manifests.yaml" "$out/webhook.yaml"
chmod -R u+w "$out"
log "Kubeflow Trainer $version ready in $out ($((SECONDS - start)) s)"
echo "$out"
