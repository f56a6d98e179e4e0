#!/usr/bin/env bash
# Regenerates the strategy comparison of docs/simulator.md: the full openb trace with 16 and 32
# private GPUs, with the default cloud boot delay (180 s) and with none. Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
trace="${1:-${OPENB:-../shared/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv}}"
[[ -f "$trace" ]] || { echo "$(basename "$0"): no openb trace at $trace: pass its path or set OPENB (docs/simulator.md says where to get it)" >&2; exit 2; }
cargo build --release -q
fmt=$(mktemp)
cat > "$fmt" <<'PY'
import json, sys
boot = sys.argv[1]
for r in json.load(sys.stdin):
    print("| {} | {} s | {} | {} | {:,.0f} | {:,.0f} | {:.1f}% | {:.1f} min | {:.1f} min | {:.2f} h | {:.3f} |".format(
        r["private_gpus"], boot, r["strategy"], r["burst_jobs"], r["cloud_cost_usd"], r["cloud_gpu_hours"],
        100 * r["private_gpu_utilization"], r["avg_wait_s"] / 60, r["p95_wait_s"] / 60, r["avg_jct_s"] / 3600,
        r["sim_wall_s"]))
PY
echo "| private GPUs | boot delay | strategy | burst jobs | cloud USD | cloud GPU-h | private util | avg wait | p95 wait | avg JCT | replay s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for gpus in 2x8 4x8; do
  for boot in 180 0; do
    ./target/release/spillway simulate --trace "$trace" --private-gpus "$gpus" --cloud-boot-delay "$boot" --json |
      python3 "$fmt" "$boot"
  done
done
rm -f "$fmt"
