#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler and kube-controller-manager from Debian's source package
# (no prebuilt binary can be downloaded on our machines) and caches them. Prints the directory
# that holds the binaries (the envtest KUBEBUILDER_ASSETS convention: etcd lives there too).
#
# If KUBEBUILDER_ASSETS is set and holds kube-apiserver, it is used as is and nothing is built.
# Cache: ${SPILLWAY_CACHE:-~/.cache/spillway}/k8s-1.20.2/bin. First run ~7-10 min on 2 cores.
set -euo pipefail

log() { echo "k8s-binaries: $*" >&2; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/kube-apiserver" ]]; then
  echo "${KUBEBUILDER_ASSETS}"
  exit 0
fi

cache="${SPILLWAY_CACHE:-$HOME/.cache/spillway}"
out="$cache/k8s-1.20.2/bin"
want=(kube-apiserver kube-scheduler kube-controller-manager etcd)

have_all() {
  for b in "${want[@]}"; do [[ -x "$out/$b" ]] || return 1; done
}

if have_all; then
  echo "$out"
  exit 0
fi

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }

export DEBIAN_FRONTEND=noninteractive
need_pkgs=()
# Kubernetes 1.20's sources want an older Go than most machines carry on their PATH (Go 1.26
# rejects its vendored modules): build it with Debian's Go 1.19, from its own directory.
go119=/usr/lib/go-1.19/bin
[[ -x "$go119/go" ]] || need_pkgs+=(golang-1.19-go)
command -v etcd >/dev/null || need_pkgs+=(etcd-server)
command -v rsync >/dev/null || need_pkgs+=(rsync)
dpkg -s golang-github-modern-go-reflect2-dev >/dev/null 2>&1 || need_pkgs+=(golang-github-modern-go-reflect2-dev)
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  as_root apt-get update -qq >&2
  as_root apt-get install -y -qq "${need_pkgs[@]}" >&2
fi

mkdir -p "$out"
if [[ ! -x "$out/etcd" ]]; then
  ln -sf "$(command -v etcd)" "$out/etcd"
fi

if [[ ! -x "$out/kube-apiserver" || ! -x "$out/kube-scheduler" || ! -x "$out/kube-controller-manager" ]]; then
  work="$cache/k8s-src"
  mkdir -p "$work"
  cd "$work"
  if ! ls kubernetes_*.orig.tar.gz >/dev/null 2>&1; then
    parts=$(apt-config shell PARTS Dir::Etc::sourceparts/d | sed -e "s/^PARTS='//" -e "s/'$//")
    src_list="${parts%/}/spillway-deb-src.sources"
    if [[ ! -f "$src_list" ]]; then
      log "enabling Debian source packages in $src_list"
      sed 's/^Types: deb$/Types: deb-src/' "${parts%/}/debian.sources" | as_root tee "$src_list" >/dev/null
    fi
    as_root apt-get update -qq >&2
    log "downloading the kubernetes source package"
    apt-get source --download-only kubernetes >&2
  fi
  tarball=$(ls kubernetes_*.orig.tar.gz | head -n1)
  rm -rf tree && mkdir tree
  log "unpacking $tarball"
  tar -xzf "$tarball" -C tree --strip-components=1
  cd tree
  # Kubernetes 1.20 vendors reflect2 1.0.1, which crashes under Go >= 1.18: use Debian's 1.0.2.
  r2=$(dpkg -L golang-github-modern-go-reflect2-dev | grep -m1 '/github.com/modern-go/reflect2$')
  rm -rf vendor/github.com/modern-go/reflect2
  mkdir -p vendor/github.com/modern-go/reflect2
  cp -r "$r2"/. vendor/github.com/modern-go/reflect2/
  mkdir -p .go/src/k8s.io
  ln -sfn ../../.. .go/src/k8s.io/kubernetes
  log "building with $("$go119/go" version) (several minutes on 2 cores)"
  export PATH="$go119:$PATH" GOTOOLCHAIN=local
  GOPATH=$PWD/.go CGO_ENABLED=0 GOFLAGS=-mod=vendor make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager" >&2 || \
    GOPATH=$PWD/.go CGO_ENABLED=0 make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager" >&2
  for b in kube-apiserver kube-scheduler kube-controller-manager; do
    install -m 0755 "_output/local/bin/linux/amd64/$b" "$out/$b"
  done
  cd "$cache"
  rm -rf "$work/tree"
fi

have_all
echo "$out"
