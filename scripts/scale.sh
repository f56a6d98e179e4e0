#!/usr/bin/env bash
# Spillway at the scale of a real cluster: N GPU nodes kept by KWOK (built from its Go module,
# scripts/kwok.sh) on the newest control plane, M GpuJobs arriving over time (1-8 GPU gangs, a
# tenth of two 8-GPU nodes, 5-30 s each, arrivals spread so the cluster runs near full), placed
# by the operator binary, private only. Runs the scale test (operator/spillway/tests/scale.rs)
# in release mode and writes its figures as a JSON array (one object per system): jobs,
# started, starts_per_second, time_to_start_p50_s/p99_s with their queueing and bind parts,
# api_writes_per_job, api_reads_per_job, operator_cpu_s, operator_peak_rss_mib, nodes,
# kubernetes. docs/performance.md reports them.
#
#   scripts/scale.sh [--nodes N] [--jobs M] [--json FILE]     (default 1000, 10000, stdout)
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=1000 jobs=10000 json=""
while (($#)); do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "scale.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(scripts/k8s-binaries.sh)}"
SPILLWAY_KWOK="${SPILLWAY_KWOK:-$(scripts/kwok.sh)}"
export KUBEBUILDER_ASSETS SPILLWAY_KWOK
out=$(mktemp)
trap 'rm -f "$out"' EXIT
SPILLWAY_SCALE_NODES="$nodes" SPILLWAY_SCALE_JOBS="$jobs" SPILLWAY_SCALE_JSON="$out" \
  cargo test --release -q -p spillway --test scale -- --nocapture >&2
python3 -c 'import json,sys; print(json.dumps([json.load(open(sys.argv[1]))], indent=2))' "$out" > "${json:-/dev/stdout}"
