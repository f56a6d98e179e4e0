#!/usr/bin/env bash
# The soak's long form (operator/spillway/tests/chaos/soak.rs): JOBS GpuJobs arriving at a
# steady rate over SECONDS while nodes leave and join, through a release build of the operator
# binary; prints the operator's memory, threads, files, tasks, watch-cache sizes and decision
# cycle time every SAMPLE seconds as a table (docs/reliability.md carries the last one).
#   scripts/soak.sh [JOBS] [SECONDS] [SAMPLE] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export SPILLWAY_SOAK_JOBS="${1:-10000}"
export SPILLWAY_SOAK_SECONDS="${2:-3600}"
export SPILLWAY_SOAK_SAMPLE_SECONDS="${3:-60}"
[ -n "${4:-}" ] && export SPILLWAY_CHAOS_SEED="$4"
scripts/test.sh --release -p spillway --test chaos soak -- --nocapture
