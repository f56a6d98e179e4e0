#!/usr/bin/env bash
# Regenerates the README's chart (docs/img/) from the simulator's report on the bundled example.
# Run after changing the decision core or the simulator.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
cargo run -q --release --no-default-features -- simulate --report "$out" >/dev/null
cp "$out/cloud-spend.svg" docs/img/simulate-cloud-spend.svg
cp "$out/wait-cdf.svg" docs/img/simulate-wait-cdf.svg
rm -rf "$out"
echo "docs/img/simulate-cloud-spend.svg and docs/img/simulate-wait-cdf.svg regenerated"
