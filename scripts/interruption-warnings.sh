#!/usr/bin/env bash
# Acting on EC2's interruption warnings against seeing interruptions when the instance is gone:
# the full openb trace on the bundled setup (real prices, 180 s boot), every job restartable
# and checkpointing every 30 minutes (so bursts run on spot), noisy:0.5 estimates, 16 private
# GPUs, at two spot interruption rates, over seeds 1-5. Prints the table docs/simulator.md
# shows ("Interruption warnings"): medians, then ranges.
#
#   scripts/interruption-warnings.sh [OPENB_CSV]
set -euo pipefail
cd "$(dirname "$0")/.."
trace="${1:-${OPENB:-../shared/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv}}"
[[ -f "$trace" ]] || { echo "$(basename "$0"): no openb trace at $trace: pass its path or set OPENB" >&2; exit 2; }
bin="${CARGO_TARGET_DIR:-target}/release/spillway"
cargo build --release --no-default-features -q
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
for rate in 0.05 0.2; do
  for warning in 0s 2m; do
    for seed in 1 2 3 4 5; do
      "$bin" simulate --trace "$trace" --private-gpus 2x8 --runtime-estimates noisy:0.5 \
        --restartable 1 --checkpoint-interval 30m --spot-interruption-rate "$rate" \
        --interruption-warning "$warning" --seed "$seed" --strategy spillway --json 2>/dev/null |
        python3 -c '
import json, sys
r = json.load(sys.stdin)[0]
r["rate"], r["warning"] = sys.argv[1], sys.argv[2]
print(json.dumps(r))' "$rate" "$warning" >> "$runs"
    done
  done
done
python3 - "$runs" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = [("spot_interruptions", "{:.0f}"), ("interrupted_gpu_hours_lost", "{:.1f}"),
        ("avg_recovery_s", "{:.0f}"), ("avg_jct_s", "{:,.0f}"), ("cloud_cost_usd", "{:,.0f}")]
print("| interruptions per instance-hour | warning | " + " | ".join(k for k, _ in keys) + " |")
print("|---|---|" + "---|" * len(keys))
for rate in ("0.05", "0.2"):
    for warning in ("0s", "2m"):
        sel = [r for r in rows if r["rate"] == rate and r["warning"] == warning]
        cells = []
        for k, f in keys:
            v = sorted(r[k] for r in sel)
            cells.append(f"{f.format(statistics.median(v))} ({f.format(v[0])}-{f.format(v[-1])})")
        print(f"| {rate} | {warning} | " + " | ".join(cells) + " |")
PY
