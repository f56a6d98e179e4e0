#!/usr/bin/env bash
# The README's bundled-example sentence, regenerated: `spillway simulate` with no inputs (279
# openb tasks on 8 private GPUs, the bundled queue with the default priced wait ($5 an hour), runtime
# estimates off by a seeded log-normal error of sigma 0.5), once per noise seed 1..N (default
# 20), for spillway, Starburst at its published factor (0.076) and at 0.2 (what the default waits at $1 per GPU-hour), a fixed
# 15-minute wait and no wait. Prints each strategy's median and range of cloud USD and average
# JCT over the seeds.
#
#   scripts/readme-headline.sh [SEEDS] [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-20}"
bin="${2:-target/release/spillway}"
if [[ ! -x "$bin" ]]; then
  cargo build --release --no-default-features --locked >&2
  bin=target/release/spillway
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for seed in $(seq 1 "$seeds"); do
  "$bin" simulate --seed "$seed" --json \
    --strategy spillway,starburst,starburst:0.2,constant-wait:900,no-wait >>"$out"
  echo >>"$out"
done
python3 - "$out" "$seeds" <<'PY'
import json, statistics, sys
runs = {}
decoder = json.JSONDecoder()
text = open(sys.argv[1]).read()
i = 0
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    arr, i = decoder.raw_decode(text, i)
    for row in arr:
        runs.setdefault(row["strategy"], []).append(row)
print(f"{sys.argv[2]} noise seeds; median [min, max]")
print("| strategy | cloud USD | avg JCT (min) | burst jobs |")
print("|---|---|---|---|")
for name, rows in runs.items():
    def stat(key, scale=1.0):
        v = sorted(r[key] * scale for r in rows)
        return f"{statistics.median(v):,.0f} [{v[0]:,.0f}, {v[-1]:,.0f}]"
    print(f"| {name} | {stat('cloud_cost_usd')} | {stat('avg_jct_s', 1/60)} | {stat('burst_jobs')} |")
PY
