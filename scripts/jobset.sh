#!/usr/bin/env bash
# Builds the JobSet controller (sigs.k8s.io/jobset, its manager) from its Go module and keeps
# its CRD and webhook manifests beside it; prints the directory. The workload tests run it for
# real against the test control plane (docs/workloads.md). Cached under
# $SPILLWAY_CACHE/jobset-VERSION.
#
#   scripts/jobset.sh            # -> DIR with bin/jobset-manager, crd/*.yaml, webhook.yaml
set -euo pipefail

version=v0.11.1
log() { echo "jobset: $*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
out="$cache/jobset-$version"
if [[ -x "$out/bin/jobset-manager" && -s "$out/crd/jobset.x-k8s.io_jobsets.yaml" && -s "$out/webhook.yaml" ]]; then
  echo "$out"
  exit 0
fi
start=$SECONDS
log "building JobSet $version"
"$here/go-build.sh" --module sigs.k8s.io/jobset --version "$version" \
  --ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$version" \
  --out "$out/bin" sigs.k8s.io/jobset=jobset-manager
src=$(GOMODCACHE="$cache/go/mod" GOFLAGS=-modcacherw go mod download -json "sigs.k8s.io/jobset@$version" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
mkdir -p "$out/crd"
cp "$src/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$out/crd/"
cp "$src/config/components/webhook/manifests.yaml" "$out/webhook.yaml"
chmod -R u+w "$out"
log "JobSet $version ready in $out ($((SECONDS - start)) s)"
echo "$out"
