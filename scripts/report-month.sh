#!/usr/bin/env bash
# The report a platform lead sends round, from a month of history: 27 days of the openb
# trace's arrivals (its days 115-142, where most of its tasks are; runtimes cut at 3 days),
# replayed by `spillway simulate --jobs-out` on the bundled setup plus a `batch` queue that does
# not burst, with 16 private GPUs at $1.10 per GPU-hour; then `spillway report -f` over 30 days,
# and a screenshot of its page in headless Chromium.
#
# openb has no teams, queues or GPU use: each task gets a namespace (vision, nlp, speech,
# robotics; robotics submits to `batch`) and a GPU utilization (70% of tasks busy at 40-95%,
# 20% middling at 10-40%, 10% idle below 4%) by a draw seeded with its name. The page shows
# what the report looks like over a month, not how busy openb's GPUs were.
#
#   scripts/report-month.sh [OPENB_CSV] [OUT_DIR]     (default OUT_DIR: target/report-month)
set -euo pipefail
cd "$(dirname "$0")/.."
trace="${1:-${OPENB:-../shared/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv}}"
out="${2:-${CARGO_TARGET_DIR:-target}/report-month}"
[[ -f "$trace" ]] || { echo "$(basename "$0"): no openb trace at $trace: pass its path or set OPENB" >&2; exit 2; }
chromium="${SPILLWAY_CHROMIUM:-$(scripts/chromium.sh)}"
cargo build -q --bin spillway
bin="${CARGO_TARGET_DIR:-target}/debug/spillway"
rm -rf "$out" && mkdir -p "$out/config"

python3 - "$trace" "$out/month.csv" <<'PY'
import csv, hashlib, random, sys
src, dst = sys.argv[1], sys.argv[2]
day = 86400
start, end = 115 * day, 142 * day        # arrivals over 27 days: runs end within the month
teams = ["vision", "nlp", "speech", "robotics"]
with open(src) as f, open(dst, "w", newline="") as g:
    w = csv.writer(g)
    w.writerow(["job_id", "arrival_s", "runtime_s", "num_gpus", "queue", "namespace", "gpu_utilization"])
    for r in csv.DictReader(f):
        if int(r["num_gpu"] or 0) == 0 or not r["scheduled_time"]:
            continue
        created = float(r["creation_time"])
        if not start <= created < end:
            continue
        runtime = float(r["deletion_time"]) - float(r["scheduled_time"])
        if runtime <= 0:
            continue
        rng = random.Random(int(hashlib.sha256(r["name"].encode()).hexdigest()[:12], 16))
        team = teams[rng.randrange(4)]
        u = rng.random()
        util = rng.uniform(0, 4) if u < 0.1 else rng.uniform(10, 40) if u < 0.3 else rng.uniform(40, 95)
        w.writerow([r["name"], f"{created - start:.0f}", f"{min(runtime, 3 * day):.0f}", r["num_gpu"],
                    "batch" if team == "robotics" else "research", team, f"{util:.1f}"])
PY

cp examples/config/setup.yaml "$out/config/setup.yaml"
cat >> "$out/config/setup.yaml" <<'YAML'
---
apiVersion: spillway.io/v1alpha1
kind: GpuQueue
metadata:
  name: batch
spec:
  weight: 1
YAML

"$bin" simulate --trace "$out/month.csv" --config "$out/config" --private-gpus 2x8 \
  --strategy spillway --jobs-out "$out/jobs.yaml" --trace-start 2026-11-01T00:00:00Z
"$bin" report -f "$out/jobs.yaml" --since 30d --until 2026-12-01T00:00:00Z --html "$out/report"
"$chromium" --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage \
  --hide-scrollbars --window-size=1366,2350 --user-data-dir="$out/profile" \
  --screenshot="$out/report-month.png" "file://$(realpath "$out/report/index.html")" 2>/dev/null
echo "page: $out/report/index.html; screenshot: $out/report-month.png"
