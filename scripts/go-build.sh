#!/usr/bin/env bash
# Builds main packages of a Go module served by the Go module proxy, with the machine's Go and
# nothing fetched but modules. The control plane (scripts/k8s-binaries.sh) and the peers the
# scale and workload tests run (KWOK, Kueue, JobSet, ...) are all built through here.
#
#   scripts/go-build.sh --module MODULE --version VERSION --out DIR \
#       [--staging] [--ldflags FLAGS] PACKAGE[=NAME] ...
#
# A wrapper module under $SPILLWAY_CACHE/go-build requires MODULE@VERSION and carries over its
# `go` and `godebug` lines; each PACKAGE (an import path inside MODULE's build graph) is built
# into DIR/NAME (default: the package's last path element). `--staging` is for
# k8s.io/kubernetes, whose go.mod points its staging modules (k8s.io/api, client-go, ...) at
# ./staging: each is replaced with its published v0.MINOR.PATCH, read from the proxy's copy of
# that go.mod. Module and build caches live under $SPILLWAY_CACHE/go, so a second build of the
# same version compiles nothing. GOTOOLCHAIN=local: a module that needs a newer Go than the
# machine's fails with that message instead of fetching a toolchain.
set -euo pipefail

log() { echo "go-build: $*" >&2; }
die() { log "$*"; exit 1; }

module="" version="" out="" staging=0 ldflags=""
pkgs=()
while (($#)); do
  case "$1" in
    --module) module="$2"; shift 2 ;;
    --version) version="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --staging) staging=1; shift ;;
    --ldflags) ldflags="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) pkgs+=("$1"); shift ;;
  esac
done
[[ -n "$module" && -n "$version" && -n "$out" && ${#pkgs[@]} -gt 0 ]] ||
  die "usage: go-build.sh --module M --version V --out DIR [--staging] [--ldflags F] PKG[=NAME]..."
command -v go >/dev/null || die "no go on the PATH (Go 1.26 or later is needed)"

cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
export GOPATH="$cache/go" GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build-cache"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-modcacherw -buildvcs=false"
mkdir -p "$GOMODCACHE" "$GOCACHE" "$out"

wrapper="$cache/go-build/${module//\//_}@$version"
mkdir -p "$wrapper"
cd "$wrapper"

# The dependency's own go.mod, from the proxy (or the module cache).
gomod=$(go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])') ||
  die "$module@$version is not served by the module proxy ($(go env GOPROXY))"

python3 - "$gomod" "$module" "$version" "$staging" > go.mod.new <<'EOF'
import re, sys
gomod, module, version, staging = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
text = open(gomod).read()
lines = ["module spillway.local/go-build", ""]
m = re.search(r"^go\s+(\S+)", text, re.M)
if m:
    lines.append(f"go {m.group(1)}")
for d in re.findall(r"^godebug\s+(.+)$", text, re.M):
    lines.append(f"godebug {d.strip()}")
block = re.search(r"^godebug\s*\((.*?)^\)", text, re.M | re.S)
if block:
    lines += [f"godebug {l.strip()}" for l in block.group(1).splitlines() if l.strip()]
lines += ["", f"require {module} {version}"]
if staging:
    # k8s.io/kubernetes vA.B.C publishes its staging modules as v0.B.C.
    mm = re.match(r"v\d+\.(\d+)\.(\d+)$", version)
    if not mm:
        sys.exit(f"--staging needs a release version vX.Y.Z, not {version}")
    pub = f"v0.{mm.group(1)}.{mm.group(2)}"
    staged = re.findall(r"^\s*(\S+)\s+=>\s+\./staging/\S+", text, re.M)
    if not staged:
        sys.exit(f"--staging: {module}@{version}'s go.mod replaces nothing with ./staging")
    lines.append("")
    lines += [f"replace {s} => {s} {pub}" for s in staged]
print("\n".join(lines))
EOF
if ! cmp -s go.mod go.mod.new; then
  mv go.mod.new go.mod
  rm -f go.sum
  log "resolving $module@$version in $wrapper"
  go mod download -x "$module" >/dev/null 2>&1 || true
else
  rm -f go.mod.new
fi

for spec in "${pkgs[@]}"; do
  pkg="${spec%%=*}"
  name="${spec#*=}"
  if [[ "$name" == "$spec" ]]; then name="${pkg##*/}"; fi
  log "building $pkg -> $out/$name"
  go build -mod=mod -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg"
  mv "$out/$name.tmp" "$out/$name"
done
