#!/usr/bin/env bash
# Spillway at the scale of a real cluster: N GPU nodes kept by KWOK (built from its Go module,
# scripts/kwok.sh) on the newest control plane, M GpuJobs arriving over time (1-8 GPU gangs, a
# tenth of two 8-GPU nodes, 5-30 s each, arrivals spread so the cluster runs near full), placed
# by the operator binary, private only. With --peer kueue, the same stream again as batch Jobs
# through Kueue (built from its Go module, scripts/kueue.sh) with one ClusterQueue holding the
# nodes' GPUs, on a fresh control plane and KWOK of its own; Spillway then also runs the very
# same batch Jobs (labelled spillway.io/queue instead of Kueue's label), run by the Job
# controller once placed (--spillway-as gpujobs|jobs|both picks Spillway's forms; default both
# with a peer, gpujobs alone). --seed S draws another stream (default: the published one's
# seed, 1554098974). Runs the scale test
# (operator/spillway/tests/scale.rs) in release mode, one process per system, and writes the
# figures as a JSON array (one object per system): jobs, started, starts_per_second,
# time_to_start_p50_s/p99_s with their queueing and bind parts, api_writes_per_job (and
# api_writes_per_job_by_resource), api_reads_per_job, operator_cpu_s, operator_peak_rss_mib,
# nodes, kubernetes, jobs_as, seed.
# docs/performance.md reports them.
#
# --kcm-args "FLAGS" adds flags to kube-controller-manager in both runs (its Job controller
# makes a batch Job's pods; its stock client QPS of 20 sets Kueue's pace at this size).
# --kueue-qps N / --kueue-concurrency N set Kueue's client QPS (burst 2N) and its Job and
# Workload reconcilers (it ships with 50 and 5). With --peer kueue the defaults are those of
# docs/performance.md's table: --kcm-args "--kube-api-qps=200 --kube-api-burst=400
# --concurrent-job-syncs=50", --kueue-qps 500, --kueue-concurrency 50 (pass --kcm-args "" and
# --kueue-qps 50 --kueue-concurrency 5 for the shipped settings, which do not finish 10,000
# jobs within the deadline here). --deadline S: how long a run may take (default 3600 with a
# peer).
#
#   scripts/scale.sh [--nodes N] [--jobs M] [--peer kueue] [--spillway-as gpujobs|jobs|both]
#                    [--seed S] [--kcm-args FLAGS] [--kueue-qps N] [--kueue-concurrency N]
#                    [--deadline S] [--json FILE]
#                                                  (default 1000, 10000, Spillway alone, stdout)
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=1000 jobs=10000 json="" peer="" forms=""
while (($#)); do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    --peer) peer="$2"; shift 2 ;;
    --spillway-as) forms="$2"; shift 2 ;;
    --seed) export SPILLWAY_SCALE_SEED="$2"; shift 2 ;;
    --kcm-args) export SPILLWAY_KCM_ARGS="$2"; shift 2 ;;
    --kueue-qps) export SPILLWAY_KUEUE_QPS="$2"; shift 2 ;;
    --kueue-concurrency) export SPILLWAY_KUEUE_CONCURRENCY="$2"; shift 2 ;;
    --deadline) export SPILLWAY_SCALE_DEADLINE_S="$2"; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "scale.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(scripts/k8s-binaries.sh)}"
SPILLWAY_KWOK="${SPILLWAY_KWOK:-$(scripts/kwok.sh)}"
export KUBEBUILDER_ASSETS SPILLWAY_KWOK
forms="${forms:-$([[ -n "$peer" ]] && echo both || echo gpujobs)}"
case "$forms" in
  gpujobs) tests=(a_stream_of_gangs_on_kwok_nodes_runs_each_job_once_within_capacity) ;;
  jobs) tests=(the_same_stream_as_labelled_batch_jobs_runs_each_job_once_within_capacity) ;;
  both) tests=(a_stream_of_gangs_on_kwok_nodes_runs_each_job_once_within_capacity
               the_same_stream_as_labelled_batch_jobs_runs_each_job_once_within_capacity) ;;
  *) echo "scale.sh: --spillway-as gpujobs, jobs or both, not $forms" >&2; exit 2 ;;
esac
case "$peer" in
  "") ;;
  kueue)
    export SPILLWAY_KCM_ARGS="${SPILLWAY_KCM_ARGS---kube-api-qps=200 --kube-api-burst=400 --concurrent-job-syncs=50}"
    export SPILLWAY_KUEUE_QPS="${SPILLWAY_KUEUE_QPS:-500}"
    export SPILLWAY_KUEUE_CONCURRENCY="${SPILLWAY_KUEUE_CONCURRENCY:-50}"
    export SPILLWAY_SCALE_DEADLINE_S="${SPILLWAY_SCALE_DEADLINE_S:-3600}"
    SPILLWAY_KUEUE="${SPILLWAY_KUEUE:-$(scripts/kueue.sh)}"
    export SPILLWAY_KUEUE
    tests+=(kueue_runs_the_same_stream_of_batch_jobs_once_within_capacity) ;;
  *) echo "scale.sh: unknown peer $peer (known: kueue)" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo test --release -q -p spillway --test scale --no-run >&2
# A system's run that fails does not lose the others' figures: the JSON holds those that
# finished, and the script exits with the first failure's status.
status=0
files=()
for t in "${tests[@]}"; do
  if SPILLWAY_SCALE_NODES="$nodes" SPILLWAY_SCALE_JOBS="$jobs" SPILLWAY_SCALE_JSON="$work/$t.json" \
    cargo test --release -q -p spillway --test scale -- --exact "$t" --include-ignored --nocapture >&2; then
    files+=("$work/$t.json")
  else
    rc=$?
    echo "scale.sh: $t failed (exit $rc)" >&2
    ((status)) || status=$rc
  fi
done
python3 -c 'import json,sys; print(json.dumps([json.load(open(f)) for f in sys.argv[1:]], indent=2))' \
  "${files[@]}" > "${json:-/dev/stdout}"
exit "$status"
