#!/usr/bin/env bash
# Makes a ~2 MB busybox root filesystem in DIR from Debian's busybox-static,
# for fast tests: busybox-rootfs.sh DIR
set -euo pipefail
dir=${1:?usage: busybox-rootfs.sh DIR}
bb=/bin/busybox
[ -x "$bb" ] || { echo "busybox-static is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,root,tmp,var/tmp,home,proc,sys,dev,run}
cp "$bb" "$dir/bin/busybox"
for applet in $("$bb" --list); do
  [ -e "$dir/bin/$applet" ] || ln -s busybox "$dir/bin/$applet"
done
chmod 1777 "$dir/tmp" "$dir/var/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$dir/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$dir/etc/group"
echo "busybox rootfs in $dir"
