#!/usr/bin/env bash
# Measures `spillway simulate` on a 1,000,000-job synthetic trace (Spillway CSV): wall time of
# the replay (sim_wall_s), total wall time and peak memory. Results go to docs/performance.md.
#   scripts/bench-1m.sh [JOBS] [PRIVATE]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${1:-1000000}"
private="${2:-32x8}"
# The simulator alone: no cluster parts needed.
cargo build --release -q --no-default-features
bin="${CARGO_TARGET_DIR:-target}/release/spillway"
trace="$(mktemp -d)/synthetic.csv"
python3 - "$jobs" "$trace" <<'PY'
import random, sys
n, path = int(sys.argv[1]), sys.argv[2]
rng = random.Random(42)
t = 0.0
with open(path, "w") as f:
    f.write("job_id,arrival_s,runtime_s,num_gpus,estimated_runtime_s\n")
    for i in range(n):
        t += rng.expovariate(1 / 12.0)                 # one job every 12 s on average
        runtime = min(rng.lognormvariate(6.5, 1.5), 7 * 86400)   # median ~11 min, heavy tail
        gpus = rng.choices([1, 2, 4, 8], weights=[80, 8, 6, 6])[0]
        estimate = runtime * rng.uniform(0.8, 1.5)
        f.write(f"j{i},{t:.1f},{runtime:.1f},{gpus},{estimate:.1f}\n")
PY
echo "trace: $jobs jobs, $(du -h "$trace" | cut -f1); private GPUs: $private" >&2
/usr/bin/time -f "total wall %e s, peak RSS %M KiB" \
  "$bin" simulate --trace "$trace" --private-gpus "$private" --strategy spillway --json
rm -rf "$(dirname "$trace")"
