#!/usr/bin/env bash
# The long forms of the chaos suite (operator/spillway/tests/chaos/), all through the real
# operator binary: random kills (JOBS gangs while the operator is SIGKILLed KILLS times at
# seeded random moments) and failovers (JOBS gangs while two replicas run with leader election
# and the leader is SIGKILLed FAILOVERS times) and lost nodes (JOBS restartable gangs while
# NODE_LOSSES nodes holding running pods are deleted and replaced) and API-server restarts
# (JOBS gangs while kube-apiserver is SIGKILLed and started again API_RESTARTS times) and
# 429/500 periods (JOBS gangs while the API server answers most requests with 429 or 500 in
# API_FAULTS periods). Prints
# the seed and the outcome, with the failover times; docs/reliability.md carries the last
# figures. Then the cloud side (moto behind the fault proxy): CLOUD_JOBS gangs bursting while
# the operator is SIGKILLed KILLS times and INSTANCE_LOSSES instances under running jobs are
# terminated, and CLOUD_JOBS gangs bursting through STORM_SECONDS
# of EC2 storm (throttling, capacity errors, slow and lost responses).
#   scripts/chaos.sh [JOBS] [KILLS] [SEED] [FAILOVERS] [NODE_LOSSES] [API_RESTARTS] [CLOUD_JOBS]
#                    [STORM_SECONDS] [API_FAULTS] [INSTANCE_LOSSES]
set -euo pipefail
cd "$(dirname "$0")/.."
export SPILLWAY_CHAOS_JOBS="${1:-200}"
export SPILLWAY_CHAOS_KILLS="${2:-20}"
[ -n "${3:-}" ] && export SPILLWAY_CHAOS_SEED="$3"
export SPILLWAY_CHAOS_FAILOVERS="${4:-10}"
export SPILLWAY_CHAOS_NODE_LOSSES="${5:-12}"
export SPILLWAY_CHAOS_API_RESTARTS="${6:-8}"
export SPILLWAY_CHAOS_CLOUD_JOBS="${7:-100}"
export SPILLWAY_CHAOS_STORM_SECONDS="${8:-600}"
export SPILLWAY_CHAOS_API_FAULTS="${9:-12}"
export SPILLWAY_CHAOS_INSTANCE_LOSSES="${10:-8}"
scripts/test.sh -p spillway --test chaos random_kills -- --nocapture
scripts/test.sh -p spillway --test chaos leader_kills -- --nocapture
scripts/test.sh -p spillway --test chaos lost_nodes -- --nocapture
scripts/test.sh -p spillway --test chaos api_server_restarts -- --nocapture
scripts/test.sh -p spillway --test chaos api_server_answering -- --nocapture
scripts/test.sh -p spillway --test chaos cloud_bursts -- --nocapture
scripts/test.sh -p spillway --test chaos ec2_storms -- --nocapture
