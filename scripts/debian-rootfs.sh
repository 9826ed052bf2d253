#!/usr/bin/env bash
# Makes a minimal Debian root filesystem with debootstrap:
#   debian-rootfs.sh DIR [SUITE] [MIRROR]
# MIRROR defaults to the first Debian mirror in this machine's apt sources.
set -euo pipefail
dir=${1:?usage: debian-rootfs.sh DIR [SUITE] [MIRROR]}
suite=${2:-bookworm}
mirror=${3:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -hE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  [ -n "$mirror" ] || mirror=$(grep -hE '^\s*deb\s' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
fi
[ -n "$mirror" ] || { echo "no Debian mirror found in apt sources; pass one" >&2; exit 1; }
if [ -x "$dir/usr/bin/apt-get" ]; then echo "debian rootfs already in $dir"; exit 0; fi
# Built beside and renamed when complete, so an interrupted run never
# leaves a half-made rootfs that a later run would take for done.
tmp="$dir.tmp"
rm -rf "$tmp"
mkdir -p "$(dirname "$dir")"
debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >/dev/null
# Point the image's apt at the same mirror, and keep apt lists out of the base.
echo "deb $mirror $suite main" > "$tmp/etc/apt/sources.list"
rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/archives/*.deb
rm -rf "$dir"
mv "$tmp" "$dir"
echo "debian $suite rootfs in $dir"
