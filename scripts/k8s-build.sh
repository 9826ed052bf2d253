#!/usr/bin/env bash
# Builds the Kubernetes binaries the deployment test runs (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl) from
# k8s.io/kubernetes on the Go module proxy, and installs etcd and nftables from
# Debian. Idempotent: a second run only checks (the binaries are cached in
# $K8S_DIR/bin). As root.
#
# `go install k8s.io/kubernetes/cmd/...@v` does not work: the module's go.mod
# replaces every k8s.io/* staging module with ./staging/... So the module is
# copied out, the replace block removed, and the staging requirements pinned to
# the matching v0.x release. 1.34 is pinned because later releases refuse
# cgroup v1 hosts by default.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
K8S_DIR=${K8S_DIR:-/usr/local/lib/envd/k8s/$K8S_VERSION}
BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

fail() { echo "k8s-build: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root (apt-get, $K8S_DIR)"

need_apt=()
for pkg in etcd-server nftables conntrack; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "k8s-build: apt-get install ${need_apt[*]}"
  apt-get update -qq
  # etcd-server alone: Debian's kubernetes-client would conflict with the built kubectl.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  # The package starts a system etcd on 127.0.0.1:2379; the test runs its own.
  systemctl disable --now etcd >/dev/null 2>&1 || true
fi

missing=()
for b in "${BINS[@]}"; do
  [ -x "$K8S_DIR/bin/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "k8s-build: ok ($K8S_DIR/bin)"
  exit 0
fi

minor=${K8S_VERSION#v1.}            # 34.4
staging="v0.$minor"                 # v0.34.4
echo "k8s-build: building ${missing[*]} of k8s.io/kubernetes@$K8S_VERSION (cold: about 16 min on 2 cores)"
start=$(date +%s)
moddir=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$moddir" ] || fail "go mod download k8s.io/kubernetes@$K8S_VERSION gave no module directory"

src="$K8S_DIR/src"
if [ ! -f "$src/.envd-prepared" ]; then
  rm -rf "$src"
  mkdir -p "$K8S_DIR"
  cp -r "$moddir" "$src"
  chmod -R u+w "$src"
  rm -f "$src/go.work" "$src/go.work.sum"
  # Drop the replace block and pin the staging modules (required as v0.0.0).
  awk '/^replace \($/{skip=1; next} skip && /^\)$/{skip=0; next} !skip' "$src/go.mod" |
    sed -E "s#^(\s+k8s\.io/[a-z0-9-]+) v0\.0\.0\$#\1 $staging#" > "$src/go.mod.new"
  mv "$src/go.mod.new" "$src/go.mod"
  grep -q 'v0\.0\.0$' "$src/go.mod" && fail "go.mod still requires a v0.0.0 staging module"
  touch "$src/.envd-prepared"
fi

mkdir -p "$K8S_DIR/bin"
cd "$src"
for b in "${missing[@]}"; do
  t0=$(date +%s)
  GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION" \
    -o "$K8S_DIR/bin/$b.tmp" "./cmd/$b"
  mv "$K8S_DIR/bin/$b.tmp" "$K8S_DIR/bin/$b"
  echo "k8s-build: $b $(( $(date +%s) - t0 )) s"
done
echo "k8s-build: built in $(( $(date +%s) - start )) s ($K8S_DIR/bin)"
