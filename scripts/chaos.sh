#!/usr/bin/env bash
# The long form of the chaos suite's random-kills scenario (operator/spillway/tests/chaos.rs):
# JOBS gangs through the real operator binary while it is SIGKILLed KILLS times at seeded random
# moments. Prints the seed and the outcome; docs/reliability.md carries the last figures.
#   scripts/chaos.sh [JOBS] [KILLS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export SPILLWAY_CHAOS_JOBS="${1:-200}"
export SPILLWAY_CHAOS_KILLS="${2:-20}"
[ -n "${3:-}" ] && export SPILLWAY_CHAOS_SEED="$3"
scripts/test.sh -p spillway --test chaos random_kills -- --nocapture
