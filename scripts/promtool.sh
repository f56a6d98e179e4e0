#!/usr/bin/env bash
# Fetches promtool from Debian's `prometheus` package (without installing the server) and
# prints its path. Cache: ${SPILLWAY_CACHE:-~/.cache/spillway}/prometheus (~20 MB, once).
set -euo pipefail
cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
dir="$cache/prometheus"
tool="$dir/usr/bin/promtool"
if [[ ! -x "$tool" ]]; then
  echo "promtool: fetching Debian's prometheus package into $dir" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # apt-get download writes into the current directory; the _apt sandbox may not reach it.
  # On a fresh machine the package lists may be empty: update them once and retry.
  if ! (cd "$tmp" && apt-get download -q prometheus >&2 2> >(grep -v "unsandboxed" >&2)); then
    if [[ $(id -u) -eq 0 ]]; then apt-get update -qq >&2; else sudo apt-get update -qq >&2; fi
    (cd "$tmp" && apt-get download -q prometheus >&2 2> >(grep -v "unsandboxed" >&2))
  fi
  mkdir -p "$dir"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$dir"
fi
echo "$tool"
