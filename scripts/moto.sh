#!/usr/bin/env bash
# Installs moto's EC2-compatible server into a cached virtualenv and prints the path of its
# `moto_server` executable. Cache: ${SPILLWAY_CACHE:-~/.cache/spillway}/moto-venv (~35 s once).
set -euo pipefail
cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
venv="$cache/moto-venv"
version="${SPILLWAY_MOTO_VERSION:-5.2.5}"
if [[ ! -x "$venv/bin/moto_server" ]]; then
  echo "moto: installing moto[server]==$version into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check "moto[server]==$version" >&2
fi
echo "$venv/bin/moto_server"
