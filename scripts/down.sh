#!/usr/bin/env bash
# Stops what scripts/demo.sh started: envd processes, their private containerd (and its
# containers) and PostgreSQL. Data dirs stay.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/lib/envd/bin:$PATH
for dir in "${@:-$PWD/.data/node1 $PWD/.data/node2}"; do
  for d in $dir; do
    [ -s "$d/envd.pid" ] && kill "$(cat "$d/envd.pid")" 2>/dev/null
    sock=$d/containerd/containerd.sock
    if [ -S "$sock" ]; then
      for c in $(ctr -a "$sock" -n envd containers ls -q 2>/dev/null); do
        ctr -a "$sock" -n envd tasks kill -s KILL "$c" 2>/dev/null; sleep 0.2
        ctr -a "$sock" -n envd tasks rm -f "$c" 2>/dev/null
        ctr -a "$sock" -n envd containers rm "$c" 2>/dev/null
      done
      pkill -f "containerd --config $d/containerd/config.toml" 2>/dev/null
    fi
    [ -d "$d/pg/data" ] && runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$d/pg/data" stop -m fast >/dev/null 2>&1
    echo "stopped $d"
  done
done
