#!/usr/bin/env bash
# Measures the operator's memory among 50,000 pods that are not Spillway's (realistic specs and
# statuses, 200 nodes): the binary against the test control plane. Prints one line.
#   scripts/bench-pods.sh             # the release build
#   scripts/bench-pods.sh --profile dev
set -euo pipefail
cd "$(dirname "$0")/.."
export SPILLWAY_CACHE="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
KUBEBUILDER_ASSETS="$(scripts/k8s-binaries.sh)"
export KUBEBUILDER_ASSETS
profile=(--release)
[[ $# -gt 0 ]] && profile=("$@")
cargo test "${profile[@]}" -p spillway --test operator_throughput -- --ignored --nocapture \
  operator_memory_with_50000_foreign_pods 2>&1 | grep -E "^foreign pods|pods created|panicked|error" || true
