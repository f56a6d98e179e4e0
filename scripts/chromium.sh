#!/usr/bin/env bash
# Prints the path of a headless-capable Chromium for the report's browser test, installing
# Debian's `chromium` package when there is none. SPILLWAY_CHROMIUM names another binary.
set -euo pipefail
if [[ -n "${SPILLWAY_CHROMIUM:-}" ]]; then
  echo "$SPILLWAY_CHROMIUM"
  exit 0
fi
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null; then
    command -v "$c"
    exit 0
  fi
done
echo "chromium.sh: installing Debian's chromium (the report's browser test)" >&2
if [[ $(id -u) -eq 0 ]]; then
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
else
  sudo apt-get update -qq >&2 && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi
command -v chromium
