#!/usr/bin/env bash
# Builds the envd node image without a container engine:
#   build-node-image.sh [OUT.tar]          (default /var/cache/envd/node-image/envd-node.tar)
#   build-node-image.sh --base-only        (only the cached Debian layer; scripts/setup.sh)
# A Debian rootfs (debootstrap, with runc, CNI plugins, iptables, e2fsprogs,
# fuse3, tini) is one layer, containerd and the envd binaries of this tree
# another; cmd/envd-node-image assembles them into an image tar that
# `ctr -n k8s.io images import` takes. The Debian layer is cached by its
# package list, so a second build only rebuilds the binaries' layer.
# As root (debootstrap). The mirror is read from this machine's apt sources.
#
# Environment: ENVD_NODE_IMAGE (the image's name, default
# envd.local/envd-node:dev), ENVD_IMAGE_CACHE (cache directory),
# ENVD_BIN_DIR (where containerd, containerd-shim-runc-v2 and ctr are,
# default /usr/local/lib/envd/bin), SUITE (default bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."

ref=${ENVD_NODE_IMAGE:-envd.local/envd-node:dev}
cache=${ENVD_IMAGE_CACHE:-/var/cache/envd/node-image}
out=${1:-$cache/envd-node.tar}
[ "$out" = --base-only ] && out=
bindir=${ENVD_BIN_DIR:-/usr/local/lib/envd/bin}
suite=${SUITE:-bookworm}
packages=runc,iptables,e2fsprogs,fuse3,containernetworking-plugins,iproute2,tini,ca-certificates,procps

fail() { echo "build-node-image: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root (debootstrap)"
command -v debootstrap >/dev/null || fail "debootstrap is missing (apt-get install debootstrap)"
for b in containerd containerd-shim-runc-v2 ctr; do
  [ -x "$bindir/$b" ] || fail "$bindir/$b is missing (scripts/setup.sh installs it)"
done
start=$(date +%s)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/envd-node-image" ./cmd/envd-node-image

# The Debian layer, cached by suite and package list.
key=$(printf '%s %s' "$suite" "$packages" | sha256sum | cut -c1-16)
base="$cache/debian-$key"
if [ ! -f "$base/layer.tar.gz" ]; then
  mirror=$(grep -hE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  [ -n "$mirror" ] || mirror=$(grep -hE '^\s*deb\s' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  [ -n "$mirror" ] || fail "no Debian mirror found in this machine's apt sources"
  echo "build-node-image: debootstrap $suite with $packages (once; cached in $base)"
  rm -rf "$base.tmp"
  mkdir -p "$base.tmp"
  debootstrap --variant=minbase --include="$packages" "$suite" "$base.tmp/rootfs" "$mirror" >"$base.tmp/debootstrap.log" 2>&1 ||
    fail "debootstrap failed: $(tail -5 "$base.tmp/debootstrap.log")"
  rm -rf "$base.tmp"/rootfs/var/lib/apt/lists/* "$base.tmp"/rootfs/var/cache/apt/archives/*.deb \
         "$base.tmp"/rootfs/var/log/* "$base.tmp"/rootfs/etc/apt/sources.list
  : > "$base.tmp/rootfs/etc/resolv.conf"    # the kubelet or runc mounts the real one
  "$work/envd-node-image" layer "$base.tmp/rootfs" "$base.tmp/layer.tar.gz"
  rm -rf "$base.tmp/rootfs" "$base"
  mv "$base.tmp" "$base"
fi
t_base=$(date +%s)
if [ "${1:-}" = --base-only ]; then
  echo "build-node-image: debian layer ok ($base)"
  exit 0
fi

# The binaries' layer: envd and envctl of this tree, containerd beside them.
mkdir -p "$work/rootfs/usr/local/bin" "$work/rootfs/usr/local/lib/envd/bin" "$work/rootfs/var/lib/envd"
CGO_ENABLED=0 go build -trimpath -o "$work/rootfs/usr/local/bin/" ./cmd/envd ./cmd/envctl ./cmd/envd-agent
cp "$bindir/containerd" "$bindir/containerd-shim-runc-v2" "$bindir/ctr" "$work/rootfs/usr/local/lib/envd/bin/"
install -m 0755 deploy/image/envd-node-start "$work/rootfs/usr/local/bin/envd-node-start"
"$work/envd-node-image" layer "$work/rootfs" "$work/envd.tar.gz"

version=$("$work/rootfs/usr/local/bin/envd" version 2>/dev/null || echo dev)
"$work/envd-node-image" image --ref "$ref" \
  --layer "$base/layer.tar.gz" --layer "$work/envd.tar.gz" \
  --entrypoint '["/usr/bin/tini","--","/usr/local/bin/envd-node-start"]' --cmd '["serve"]' \
  --env PATH=/usr/local/lib/envd/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env ENVD_DATA_DIR=/var/lib/envd \
  --label org.opencontainers.image.title=envd-node --label "org.opencontainers.image.version=$version" \
  --out "$out"
end=$(date +%s)
echo "build-node-image: $ref in $out ($(du -h "$out" | cut -f1); cached Debian layer ready after $((t_base - start)) s, total $((end - start)) s)"
