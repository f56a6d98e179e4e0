#!/usr/bin/env bash
# The "Real prices, by load" table of docs/simulator.md: the synthetic family of
# decision-quality-loads.sh (loads 0.5 to 2 times the private GPUs, three seeds each, at 16, 32
# and 64 private GPUs) on the real AWS catalog (examples/catalog-aws-us-east-1.csv), 180 s boot,
# the default 10-minute idle timeout, half the jobs restartable (they may use spot), exact
# estimates, the simulator's built-in setup (the default queue: priced at $5 an hour). Each
# replay is a sweep of spillway, Starburst (both packings), a constant wait and no wait; for the
# default queue's point it reports, against each baseline's cost-versus-JCT frontier, the
# frontier's cost at the default's average JCT (linear between frontier points, flat beyond
# them) and whether the default's cost is at or below it. Prints Markdown.
#   scripts/decision-quality-prices.sh [JOBS]     # default 3000 jobs per trace
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${1:-3000}"
[ -x target/release/spillway ] || cargo build --release -q
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for gpus in 16 32 64; do
  for load in 0.5 1 1.5 2; do
    for seed in 1 2 3; do
      python3 scripts/synthetic-trace.py --load "$load" --private-gpus "$gpus" --jobs "$jobs" \
        --seed "$seed" > "$dir/trace.csv"
      ./target/release/spillway simulate --trace "$dir/trace.csv" --private-gpus "$(( gpus / 8 ))x8" \
        --runtime-estimates exact --restartable 0.5 --seed "$seed" --sweep --json \
        --strategy spillway,starburst,starburst-best-fit,constant-wait:900,no-wait 2>/dev/null |
        python3 -c '
import json, sys
print(json.dumps({"gpus": int(sys.argv[1]), "load": sys.argv[2], "seed": int(sys.argv[3]),
                  "points": json.load(sys.stdin)}))' "$gpus" "$load" "$seed" >> "$dir/rows.jsonl"
    done
  done
done
python3 - "$dir/rows.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def curve_cost(front, jct):
    """The frontier's cost at `jct`: linear between its points, flat beyond them."""
    front = sorted(front, key=lambda p: p["avg_jct_s"])
    if jct <= front[0]["avg_jct_s"]:
        return front[0]["cloud_cost_usd"]
    for a, b in zip(front, front[1:]):
        if a["avg_jct_s"] <= jct <= b["avg_jct_s"]:
            span = b["avg_jct_s"] - a["avg_jct_s"]
            t = (jct - a["avg_jct_s"]) / span if span > 0 else 0.0
            return a["cloud_cost_usd"] + t * (b["cloud_cost_usd"] - a["cloud_cost_usd"])
    return front[-1]["cloud_cost_usd"]
baselines = ["starburst", "starburst-best-fit", "constant-wait", "no-wait"]
print("| private GPUs | load | default's cloud USD | default's avg JCT | " +
      " | ".join(b + " at that JCT" for b in baselines) + " | on or below every curve |")
print("|---|---|---|---|" + "---|" * len(baselines) + "---|")
keys = sorted({(r["gpus"], r["load"]) for r in rows}, key=lambda k: (k[0], float(k[1])))
def spread(values, fmt):
    values = sorted(values)
    return "{} ({} to {})".format(fmt(statistics.median(values)), fmt(values[0]), fmt(values[-1]))
total = met_all = 0
for gpus, load in keys:
    mine = [r for r in rows if (r["gpus"], r["load"]) == (gpus, load)]
    cost, jct, ratios, met = [], [], {b: [] for b in baselines}, 0
    for r in mine:
        pts = r["points"]
        today = next(p for p in pts if p["family"] == "spillway" and p["current"])
        cost.append(today["cloud_cost_usd"]); jct.append(today["avg_jct_s"])
        ok = True
        for b in baselines:
            front = [p for p in pts if p["family"] == b and p["frontier"]]
            c = curve_cost(front, today["avg_jct_s"])
            ratios[b].append(today["cloud_cost_usd"] / c if c > 0 else (1.0 if today["cloud_cost_usd"] <= 0.005 else float("inf")))
            ok = ok and today["cloud_cost_usd"] <= c + 0.005
        met += ok
    total += len(mine); met_all += met
    print("| {} | {}x | {} | {} | {} | {} of {} seeds |".format(
        gpus, load, spread(cost, lambda v: "{:,.0f}".format(v)), spread(jct, lambda v: "{:,.0f} s".format(v)),
        " | ".join(spread(ratios[b], lambda v: "{:.2f}x".format(v)) for b in baselines), met, len(mine)))
print()
print("The default's cost over each baseline's frontier cost at the default's average JCT (median and range over the seeds); on or below every curve in {} of {} replays.".format(met_all, total))
PY
