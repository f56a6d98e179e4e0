#!/usr/bin/env bash
# Measures the operator's placement throughput and peak memory: 1,000 one-GPU GpuJobs on 125
# fake 8-GPU nodes, the release binary against the test control plane. Prints one line.
set -euo pipefail
cd "$(dirname "$0")/.."
export SPILLWAY_CACHE="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
KUBEBUILDER_ASSETS="$(scripts/k8s-binaries.sh)"
export KUBEBUILDER_ASSETS
cargo test --release -p spillway --test operator_throughput -- --ignored --nocapture 2>&1 \
  | grep -E "^operator throughput|panicked|error" || true
