#!/usr/bin/env bash
# Regenerates the decision-quality tables of docs/simulator.md ("Against Starburst" and what
# follows): the full openb trace and a synthetic one (scripts/synthetic-trace.py 5000 530 1) on
# Starburst's terms (examples/starburst-terms/: $1 per GPU-hour, no boot delay, the jobs' own
# time billed) at 16, 32 and 64 private GPUs, openb without and with the censored pods, with
# exact, noisy and no runtime estimates, for the default queue (setup.yaml) and a fixed
# 15-minute wait (setup-fixed.yaml); the frontiers of a sweep on the real AWS catalog (180 s
# boot, 10-minute idle timeout, the bundled setup examples/config/setup.yaml); repatriation;
# then the family of traces by load (decision-quality-loads.sh) and real prices by load
# (decision-quality-prices.sh). Prints Markdown; about eight minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
trace="${1:-${OPENB:-../shared/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv}}"
[[ -f "$trace" ]] || { echo "$(basename "$0"): no openb trace at $trace: pass its path or set OPENB (docs/simulator.md says where to get it)" >&2; exit 2; }
cargo build --release -q
terms=examples/starburst-terms
fmt=$(mktemp)
cat > "$fmt" <<'PY'
import json, sys
label, gpus, cens, est = sys.argv[1:5]
for r in json.load(sys.stdin):
    name = r["strategy"] if r["strategy"] != "spillway" else "spillway (" + label + ")"
    print("| {} | {} | {} | {} | {:,.1f} | {:,.0f} s | {:,.0f} s |".format(
        gpus, cens, est, name, r["cloud_gpu_hours"], r["avg_jct_s"], r["avg_wait_s"]))
PY
run() { # gpus censored estimates config label strategies
  local keep=()
  [ "$2" = kept ] && keep=(--keep-censored)
  ./target/release/spillway simulate --trace "$trace" --private-gpus "$1" --config "$4" \
    --catalog "$terms/catalog.csv" --cloud-boot-delay 0 --runtime-estimates "$3" \
    --strategy "$6" --json "${keep[@]}" 2>/dev/null | python3 "$fmt" "$5" "$(( ${1%x8} * 8 ))" "$2" "$3"
}
echo "| private GPUs | censored pods | estimates | strategy | cloud GPU-h | avg JCT | avg wait |"
echo "|---|---|---|---|---|---|---|"
for cens in left-out kept; do
  for gpus in 2x8 4x8 8x8; do
    run "$gpus" "$cens" exact "$terms/setup.yaml" "default" starburst,starburst-best-fit,no-wait,spillway
    run "$gpus" "$cens" exact "$terms/setup-fixed.yaml" "fixed 15m" spillway
  done
done
synthetic=$(mktemp)
trap 'rm -f "$fmt" "$synthetic"' EXIT
python3 scripts/synthetic-trace.py 5000 530 1 > "$synthetic"
openb="$trace"
trace="$synthetic"
for gpus in 2x8 4x8 8x8; do
  run "$gpus" synthetic exact "$terms/setup.yaml" "default" starburst,starburst-best-fit,no-wait,spillway
  run "$gpus" synthetic exact "$terms/setup-fixed.yaml" "fixed 15m" spillway
done
echo
trace="$openb"
for est in noisy:0.5 noisy:1 none; do
  for gpus in 2x8 4x8; do
    run "$gpus" left-out "$est" "$terms/setup.yaml" "default" starburst,starburst-best-fit,spillway
    run "$gpus" left-out "$est" "$terms/setup-fixed.yaml" "fixed 15m" spillway
  done
done

echo
echo "Real prices (today's configuration of each strategy, and the frontier points of each on"
echo "either side of the default's average JCT):"
echo
echo "| private GPUs | strategy | knob | value | cloud USD | avg JCT | marks |"
echo "|---|---|---|---|---|---|---|"
for gpus in 2x8 4x8; do
  ./target/release/spillway simulate --trace "$trace" --private-gpus "$gpus" \
    --config examples/config/setup.yaml --runtime-estimates exact --sweep --json \
    --strategy spillway,starburst,starburst-best-fit,constant-wait:900,no-wait 2>/dev/null |
    python3 -c '
import json, sys
points = json.load(sys.stdin)
mine = next(p for p in points if p["family"] == "spillway" and p["current"])
keep = set()
for fam in dict.fromkeys(p["family"] for p in points):
    front = sorted((p for p in points if p["family"] == fam and p["frontier"]), key=lambda p: p["avg_jct_s"])
    before = [p for p in front if p["avg_jct_s"] <= mine["avg_jct_s"]]
    after = [p for p in front if p["avg_jct_s"] >= mine["avg_jct_s"]]
    keep |= {id(p) for p in before[-1:] + after[:1]}
for p in points:
    if p["current"] or id(p) in keep:
        marks = ", ".join(m for m, on in (("frontier", p["frontier"]), ("today", p["current"])) if on)
        print("| {} | {} | {} | {} | {:,.0f} | {:,.0f} s | {} |".format(
            sys.argv[1], p["family"], p["knob"], "-" if p["knob"] == "none" else p["value"],
            p["cloud_cost_usd"], p["avg_jct_s"], marks))
' "$(( ${gpus%x8} * 8 ))"
done

echo
echo "With repatriation (real prices, noisy:0.5 estimates, restartable jobs checkpointing every"
echo "30 minutes), against the same run with a rule 'repatriate: never':"
echo
echo "| private GPUs | restartable | repatriation | cloud USD | cloud GPU-h | avg JCT | avg wait | moves | GPU-h lost |"
echo "|---|---|---|---|---|---|---|---|---|"
never=$(mktemp -d)
trap 'rm -rf "$fmt" "$synthetic" "$never"' EXIT
cp examples/config/setup.yaml "$never/"
cat > "$never/stay.yaml" <<'YAML'
apiVersion: spillway.io/v1alpha1
kind: BurstPolicy
metadata:
  name: stay-in-the-cloud
spec:
  rules:
    - name: never-repatriate
      repatriate: never
YAML
for gpus in 2x8 4x8; do
  for p in 0.5 1; do
    for cfg in examples/config/setup.yaml "$never"; do
      ./target/release/spillway simulate --trace "$trace" --private-gpus "$gpus" --config "$cfg" \
        --runtime-estimates noisy:0.5 --restartable "$p" --checkpoint-interval 30m \
        --strategy spillway --json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)[0]
print("| {} | {} | {} | {:,.0f} | {:,.1f} | {:,.0f} s | {:,.0f} s | {} | {:,.2f} |".format(
    sys.argv[1], sys.argv[2], sys.argv[3], r["cloud_cost_usd"], r["cloud_gpu_hours"],
    r["avg_jct_s"], r["avg_wait_s"], r["repatriations"], r["repatriated_gpu_hours_lost"]))
' "$(( ${gpus%x8} * 8 ))" "$p" "$([ "$cfg" = "$never" ] && echo never || echo whenCheaper)"
    done
  done
done

echo
echo "By load, against the limit (scripts/decision-quality-loads.sh):"
echo
scripts/decision-quality-loads.sh
echo
echo "Real prices, by load (scripts/decision-quality-prices.sh):"
echo
scripts/decision-quality-prices.sh
