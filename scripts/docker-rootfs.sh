#!/usr/bin/env bash
# Makes a Debian root filesystem with Docker (Debian's docker.io, with
# iptables and iproute2) for Docker inside a gvisor instance:
#   docker-rootfs.sh DIR [SUITE] [MIRROR]
# The base is scripts/debian-rootfs.sh's; the packages are installed in a
# chroot with services kept from starting (policy-rc.d), so nothing runs on
# the node. MIRROR defaults to the first Debian mirror in this machine's
# apt sources. As root.
set -euo pipefail
dir=${1:?usage: docker-rootfs.sh DIR [SUITE] [MIRROR]}
suite=${2:-bookworm}
mirror=${3:-}
if [ -x "$dir/usr/sbin/dockerd" ]; then echo "docker rootfs already in $dir"; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "docker-rootfs: run as root (debootstrap, chroot)" >&2; exit 1; }
# Built beside and renamed when complete, so an interrupted run never
# leaves a half-made rootfs that a later run would take for done.
tmp="$dir.tmp"
rm -rf "$tmp"
bash "$(dirname "$0")/debian-rootfs.sh" "$tmp" "$suite" "$mirror" >/dev/null
printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d"
chmod 0755 "$tmp/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$tmp/etc/resolv.conf"
chroot "$tmp" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io iptables iproute2 >/dev/null'
rm -f "$tmp/usr/sbin/policy-rc.d"
: > "$tmp/etc/resolv.conf" # the instance's is mounted over it
rm -rf "$tmp"/var/lib/apt/lists/* "$tmp"/var/cache/apt/archives/*.deb
rm -rf "$dir"
mv "$tmp" "$dir"
echo "debian $suite rootfs with $("$dir/usr/sbin/dockerd" --version 2>/dev/null || echo docker) in $dir"
