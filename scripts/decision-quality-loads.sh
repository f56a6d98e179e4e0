#!/usr/bin/env bash
# The "By load, against the limit" table of docs/simulator.md: synthetic traces by target load
# (average demand 0.5, 1, 1.5 and 2 times the private GPUs; scripts/synthetic-trace.py --load),
# three seeds each, at 16, 32 and 64 private GPUs, on Starburst's terms (examples/starburst-terms/:
# $1 per GPU-hour, no boot delay, the jobs' own time billed). For each strategy: the median and
# range over the seeds of its excess over the limit (cloud GPU-hours minus
# cloud_gpu_hours_lower_bound) and of its average JCT relative to Starburst's, with exact
# estimates, for Starburst, the default queue (setup.yaml: priced at $5 an hour of waiting, on
# this $1-per-GPU-hour catalog the same waits as compute-wait with factor 0.2) and a
# fixed 15-minute wait (setup-fixed.yaml, the default before); then the medians with exact,
# noisy (sigma 0.5) and no estimates side by side, each marked where it meets the goal (excess
# at most 0.6 times Starburst's at an average JCT at most 1.001 times Starburst's).
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
      trace="$dir/trace-$gpus-$load-$seed.csv"
      [ -s "$trace" ] || python3 scripts/synthetic-trace.py --load "$load" --private-gpus "$gpus" \
        --jobs "$jobs" --seed "$seed" > "$trace"
      for cfg in setup setup-fixed; do
        strategies=spillway
        [ "$cfg" = setup ] && strategies=starburst,spillway
        ./target/release/spillway simulate --trace "$trace" --private-gpus "$(( gpus / 8 ))x8" \
          --config "$terms/$cfg.yaml" --catalog "$terms/catalog.csv" --cloud-boot-delay 0 \
          --runtime-estimates "$est" --strategy "$strategies" --json 2>/dev/null |
          python3 -c '
import json, sys
for r in json.load(sys.stdin):
    name = r["strategy"]
    if name == "spillway":
        name += " (fixed 15m)" if sys.argv[4] == "setup-fixed" else " (default)"
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
# openb on the same terms: the censored pods left out and kept, at 16, 32 and 64 GPUs.
openb="${OPENB:-../shared/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv}"  # docs/simulator.md says where to get it
for cens in left-out kept; do
  keep=()
  [ "$cens" = kept ] && keep=(--keep-censored)
  for gpus in 16 32 64; do
    ./target/release/spillway simulate --trace "$openb" --private-gpus "$(( gpus / 8 ))x8" \
      --config "$terms/setup.yaml" --catalog "$terms/catalog.csv" --cloud-boot-delay 0 \
      --runtime-estimates exact --strategy starburst,spillway --json "${keep[@]}" 2>/dev/null |
      python3 -c '
import json, sys
for r in json.load(sys.stdin):
    print(json.dumps({"gpus": int(sys.argv[1]), "censored": sys.argv[2], "strategy": r["strategy"],
        "cloud": r["cloud_gpu_hours"], "limit": r["cloud_gpu_hours_lower_bound"], "jct": r["avg_jct_s"]}))
' "$gpus" "$cens" >> "$dir/openb.jsonl"
  done
done
# The wait scanned (compute-wait factors: on this catalog factor F waits as priced at 1/F USD an
# hour), exact estimates: where the goal is missed, does any setting meet it?
for f in 0.1 0.15 0.2 0.25 0.3; do
  sed "s/^    enabled: true$/    enabled: true\n    waitMode: compute-wait\n    computeWaitFactor: $f/" \
    "$terms/setup.yaml" > "$dir/scan.yaml"
  for gpus in 16 32 64; do
    for load in 0.5 1 1.5 2; do
      for seed in 1 2 3; do
        ./target/release/spillway simulate --trace "$dir/trace-$gpus-$load-$seed.csv" \
          --private-gpus "$(( gpus / 8 ))x8" --config "$dir/scan.yaml" --catalog "$terms/catalog.csv" \
          --cloud-boot-delay 0 --runtime-estimates exact --strategy spillway --json 2>/dev/null |
          python3 -c '
import json, sys
r = json.load(sys.stdin)[0]
print(json.dumps({"gpus": int(sys.argv[1]), "load": sys.argv[2], "seed": int(sys.argv[3]), "factor": sys.argv[4],
    "excess": r["cloud_gpu_hours"] - r["cloud_gpu_hours_lower_bound"], "jct": r["avg_jct_s"]}))
' "$gpus" "$load" "$seed" "$f" >> "$dir/scan.jsonl"
      done
    done
  done
done
python3 - "$dir/rows.jsonl" "$dir/scan.jsonl" "$dir/openb.jsonl" <<'PY'
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
    for name in ["starburst", "spillway (default)", "spillway (fixed 15m)"]:
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
        for name in ["spillway (default)", "spillway (fixed 15m)"]:
            cells = []
            for load in loads:
                mine = [r for r in every if (r["est"], r["gpus"], r["load"], r["strategy"]) == (est, gpus, load, name)]
                pairs = [(r, allstar[(est, gpus, load, r["seed"])]) for r in mine]
                ratio = [r["excess"] / s["excess"] for r, s in pairs if s["excess"] > 0.05]
                jct = [r["jct"] / s["jct"] for r, s in pairs]
                if not jct:
                    cells.append("-")
                    continue
                r, j = (statistics.median(ratio) if ratio else None), statistics.median(jct)
                met = (r is None or r <= 0.6) and j <= 1.001
                cells.append("{} / {:.3f}{}".format(
                    "{:.2f}".format(r) if r is not None else "-", j, " (met)" if met else ""))
            print("| {} | {} | {} | {} |".format(est, gpus, name, " | ".join(cells)))

print()
print("The wait scanned as `computeWaitFactor` (on this catalog factor F waits as `waitCostPerHour` 1/F; exact estimates; medians over the seeds of excess / Starburst's and avg JCT / Starburst's):")
print()
scan = [json.loads(l) for l in open(sys.argv[2])]
factors = sorted({r["factor"] for r in scan}, key=float)
print("| private GPUs | factor | " + " | ".join(l + "x" for l in loads) + " |")
print("|---|---|" + "---|" * len(loads))
for gpus in sorted({r["gpus"] for r in scan}):
    for f in factors:
        cells = []
        for load in loads:
            mine = [r for r in scan if (r["gpus"], r["load"], r["factor"]) == (gpus, load, f)]
            pairs = [(r, star[(gpus, load, r["seed"])]) for r in mine]
            ratio = [r["excess"] / s["excess"] for r, s in pairs if s["excess"] > 0.05]
            rr = statistics.median(ratio) if ratio else None
            j = statistics.median([r["jct"] / s["jct"] for r, s in pairs])
            met = (rr is None or rr <= 0.6) and j <= 1.001
            cells.append("{} / {:.3f}{}".format("{:.2f}".format(rr) if rr is not None else "-", j, " (met)" if met else ""))
        print("| {} | {} | {} |".format(gpus, f, " | ".join(cells)))

print()
print("openb on the same terms (exact estimates), the default against Starburst:")
print()
print("| censored pods | private GPUs | Starburst: cloud GPU-h (limit) | default: cloud GPU-h (limit) | excess / Starburst's | avg JCT / Starburst's |")
print("|---|---|---|---|---|---|")
ob = [json.loads(l) for l in open(sys.argv[3])]
for cens in ["left-out", "kept"]:
    for gpus in [16, 32, 64]:
        s = next(r for r in ob if (r["censored"], r["gpus"], r["strategy"]) == (cens, gpus, "starburst"))
        m = next(r for r in ob if (r["censored"], r["gpus"], r["strategy"]) == (cens, gpus, "spillway"))
        es, em = s["cloud"] - s["limit"], m["cloud"] - m["limit"]
        print("| {} | {} | {:,.1f} ({:,.1f}) | {:,.1f} ({:,.1f}) | {} | {:.4f} |".format(
            cens, gpus, s["cloud"], s["limit"], m["cloud"], m["limit"],
            "{:.2f}".format(em / es) if es > 0.05 else "- (nothing overflows)", m["jct"] / s["jct"]))
PY
