#!/usr/bin/env bash
# The "By load, against the limit" table of docs/simulator.md: synthetic traces by target load
# (average demand 0.5, 1, 1.5 and 2 times the private GPUs; scripts/synthetic-trace.py --load),
# three seeds each, at 16, 32 and 64 private GPUs, on Starburst's terms (examples/starburst-terms/:
# $1 per GPU-hour, no boot delay, the jobs' own time billed). For each strategy: the median and
# range over the seeds of its excess over the limit (cloud GPU-hours minus
# cloud_gpu_hours_lower_bound) and of its average JCT relative to Starburst's, with exact
# estimates; then the medians with exact, noisy (sigma 0.5) and no estimates side by side.
# Prints Markdown; decision-quality.sh calls it last.
#   scripts/decision-quality-loads.sh [JOBS]     # default 3000 jobs per trace
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${1:-3000}"
[ -x target/release/spillway ] || cargo build --release -q
terms=examples/starburst-terms
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for est in exact noisy:0.5 none; do
for gpus in 16 32 64; do
  for load in 0.5 1 1.5 2; do
    for seed in 1 2 3; do
      python3 scripts/synthetic-trace.py --load "$load" --private-gpus "$gpus" --jobs "$jobs" \
        --seed "$seed" > "$dir/trace.csv"
      for cfg in setup setup-compute-wait; do
        strategies=spillway
        [ "$cfg" = setup ] && strategies=starburst,spillway
        ./target/release/spillway simulate --trace "$dir/trace.csv" --private-gpus "$(( gpus / 8 ))x8" \
          --config "$terms/$cfg.yaml" --catalog "$terms/catalog.csv" --cloud-boot-delay 0 \
          --runtime-estimates "$est" --strategy "$strategies" --json 2>/dev/null |
          python3 -c '
import json, sys
for r in json.load(sys.stdin):
    name = r["strategy"]
    if name == "spillway":
        name += " (compute-wait 0.2)" if sys.argv[4] == "setup-compute-wait" else " (default)"
    print(json.dumps({"gpus": int(sys.argv[1]), "load": sys.argv[2], "seed": int(sys.argv[3]), "est": sys.argv[5],
        "strategy": name, "excess": r["cloud_gpu_hours"] - r["cloud_gpu_hours_lower_bound"],
        "cloud": r["cloud_gpu_hours"], "limit": r["cloud_gpu_hours_lower_bound"],
        "jct": r["avg_jct_s"]}))
' "$gpus" "$load" "$seed" "$cfg" "$est" >> "$dir/rows.jsonl"
      done
    done
  done
done
done
python3 - "$dir/rows.jsonl" <<'PY'
import json, statistics, sys
every = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in every if r["est"] == "exact"]
star = {(r["gpus"], r["load"], r["seed"]): r for r in rows if r["strategy"] == "starburst"}
print("| private GPUs | load | strategy | cloud GPU-h | limit | excess over the limit | excess / Starburst's | avg JCT / Starburst's |")
print("|---|---|---|---|---|---|---|---|")
def spread(values, fmt):
    values = sorted(values)
    return "{} ({} to {})".format(fmt(statistics.median(values)), fmt(values[0]), fmt(values[-1]))
keys = sorted({(r["gpus"], r["load"]) for r in rows}, key=lambda k: (k[0], float(k[1])))
for gpus, load in keys:
    for name in ["starburst", "spillway (default)", "spillway (compute-wait 0.2)"]:
        mine = [r for r in rows if (r["gpus"], r["load"], r["strategy"]) == (gpus, load, name)]
        if not mine:
            continue
        ratio = []
        for r in mine:
            s = star[(gpus, load, r["seed"])]
            if s["excess"] > 0.05:
                ratio.append(r["excess"] / s["excess"])
        jct = [r["jct"] / star[(gpus, load, r["seed"])]["jct"] for r in mine]
        print("| {} | {}x | {} | {} | {} | {} | {} | {} |".format(
            gpus, load, name,
            spread([r["cloud"] for r in mine], lambda v: "{:,.0f}".format(v)),
            spread([r["limit"] for r in mine], lambda v: "{:,.0f}".format(v)),
            spread([r["excess"] for r in mine], lambda v: "{:,.0f}".format(v)),
            spread(ratio, lambda v: "{:.2f}".format(v)) if ratio else "-",
            spread(jct, lambda v: "{:.3f}".format(v))))

print()
print("Medians over the seeds, each estimate mode: excess over the limit / Starburst's, and avg JCT / Starburst's:")
print()
loads = sorted({r["load"] for r in every}, key=float)
print("| estimates | private GPUs | strategy | " + " | ".join(l + "x" for l in loads) + " |")
print("|---|---|---|" + "---|" * len(loads))
allstar = {(r["est"], r["gpus"], r["load"], r["seed"]): r for r in every if r["strategy"] == "starburst"}
for est in ["exact", "noisy:0.5", "none"]:
    for gpus in sorted({r["gpus"] for r in every}):
        for name in ["spillway (default)", "spillway (compute-wait 0.2)"]:
            cells = []
            for load in loads:
                mine = [r for r in every if (r["est"], r["gpus"], r["load"], r["strategy"]) == (est, gpus, load, name)]
                pairs = [(r, allstar[(est, gpus, load, r["seed"])]) for r in mine]
                ratio = [r["excess"] / s["excess"] for r, s in pairs if s["excess"] > 0.05]
                jct = [r["jct"] / s["jct"] for r, s in pairs]
                cells.append("{} / {:.3f}".format(
                    "{:.2f}".format(statistics.median(ratio)) if ratio else "-", statistics.median(jct)) if jct else "-")
            print("| {} | {} | {} | {} |".format(est, gpus, name, " | ".join(cells)))
PY
