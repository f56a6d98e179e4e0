#!/usr/bin/env bash
# The long form of the fuzz campaigns (operator/fuzz): RUNS inputs per harness (default 10^6)
# through every parser of outside input, built with overflow checks and debug assertions.
# Prints a Markdown table (docs/reliability.md carries the last one); exits 1 on a panic, an
# unclear rejection, or an input slower than 1 s, with the input under target/fuzz-findings/.
#   scripts/fuzz.sh [RUNS] [SEED] [HARNESS...]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-1000000}"
seed="${2:-1}"
shift $(( $# > 2 ? 2 : $# ))
cargo build --profile fuzz -q -p spillway-fuzz
"${CARGO_TARGET_DIR:-target}/fuzz/spillway-fuzz" "$@" --runs "$runs" --seed "$seed" --max-ms 1000
