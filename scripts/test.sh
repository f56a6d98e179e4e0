#!/usr/bin/env bash
# Runs every Spillway test on a fresh machine: installs and caches what the tests need (real
# Kubernetes control planes built from Go modules, the newest release and the oldest supported,
# moto's EC2 server, promtool, Helm 3 and 4, Debian's Chromium for the report's browser test,
# the JobSet, Kubeflow Trainer and KubeRay controllers), then runs the workspace's tests against them: the whole suite on the newest release, the
# smoke set on the oldest. Heavy builds are cached under ~/.cache/spillway.
#
#   scripts/test.sh                    # everything
#   scripts/test.sh -p spillway-core   # extra arguments go to `cargo test` (newest release only)
set -euo pipefail
cd "$(dirname "$0")/.."

export SPILLWAY_CACHE="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
mkdir -p "$SPILLWAY_CACHE"

if ! command -v openssl >/dev/null; then
  echo "test.sh: installing openssl" >&2
  if [[ $(id -u) -eq 0 ]]; then apt-get update -qq && apt-get install -y -qq openssl >&2
  else sudo apt-get update -qq && sudo apt-get install -y -qq openssl >&2; fi
fi

# No test may reach the EC2 instance metadata service (a real address, not loopback): an
# operator started without credentials would otherwise try it through the AWS SDK's chain.
export AWS_EC2_METADATA_DISABLED=true

KUBEBUILDER_ASSETS="$(scripts/k8s-binaries.sh)"
export KUBEBUILDER_ASSETS
oldest_assets="$(scripts/k8s-binaries.sh oldest)"
SPILLWAY_MOTO_SERVER="$(scripts/moto.sh)"
export SPILLWAY_MOTO_SERVER
SPILLWAY_PROMTOOL="$(scripts/promtool.sh)"
export SPILLWAY_PROMTOOL
while read -r which dir; do
  case "$which" in
    helm3) export SPILLWAY_HELM3="$dir" ;;
    helm4) export SPILLWAY_HELM4="$dir" ;;
  esac
done < <(scripts/helm.sh)
SPILLWAY_CHROMIUM="$(scripts/chromium.sh)"
export SPILLWAY_CHROMIUM
SPILLWAY_JOBSET="$(scripts/jobset.sh)"
export SPILLWAY_JOBSET
SPILLWAY_TRAINER="$(scripts/trainer.sh)"
export SPILLWAY_TRAINER
SPILLWAY_KUBERAY="$(scripts/kuberay.sh)"
export SPILLWAY_KUBERAY
SPILLWAY_KWOK="$(scripts/kwok.sh)"
export SPILLWAY_KWOK
echo "test.sh: Kubernetes binaries in $KUBEBUILDER_ASSETS (oldest supported: $oldest_assets); moto at $SPILLWAY_MOTO_SERVER; promtool at $SPILLWAY_PROMTOOL; Helm 3 in $SPILLWAY_HELM3, Helm 4 in $SPILLWAY_HELM4; Chromium $SPILLWAY_CHROMIUM; JobSet in $SPILLWAY_JOBSET; Kubeflow Trainer in $SPILLWAY_TRAINER; KubeRay in $SPILLWAY_KUBERAY; KWOK in $SPILLWAY_KWOK" >&2

if (($#)); then
  exec cargo test --workspace --locked --no-fail-fast "$@"
fi

status=0
# The whole suite on the newest release: the test binaries three at a time (most of their time
# is spent waiting on servers, not computing), then the doc tests.
scripts/run-tests.py --jobs 3 -- --workspace --locked || status=$?
cargo test --workspace --locked --doc || status=$?
# The smoke set on the oldest supported release (docs/operations.md): the CRDs' rules on the
# server, helm install with Helm 3 and 4 (a private job and a burst), getting-started, the
# admission webhook.
echo "test.sh: the smoke set on $("$oldest_assets/kube-apiserver" --version)" >&2
scripts/run-tests.py --jobs 3 --env "KUBEBUILDER_ASSETS=$oldest_assets" \
  --only helm --only crd_rules --only control_plane --only operator \
  -- --workspace --locked -- \
  installs_runs getting_started_runs the_api_server schema_validation admission:: || status=$?
exit "$status"
