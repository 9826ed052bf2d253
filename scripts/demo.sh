#!/usr/bin/env bash
# The seed scenario, for real, on embedded defaults:
#   1. a Debian base (debootstrap; mirror from this machine's apt sources) is imported; project = version 1
#   2. an instance installs graphviz with apt-get through its own network namespace
#   3. envctl save makes version 2 current
#   4. the instance is removed; a second node (fresh containerd, same PostgreSQL and registry)
#      starts version 2, `dot -Tpng` renders, a file deleted before the save is still absent
#   5. envctl switch p 1 rolls back: the next instance has no dot
#   6. a table of timings
# DEMO_BASE=busybox runs the same flow on a busybox base with a small change instead of graphviz.
# envd (node 1) stays up afterwards; scripts/down.sh stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
bash scripts/setup.sh
export PATH=/usr/local/lib/envd/bin:$PWD/bin:$PATH
go build -o bin/ ./cmd/envd ./cmd/envctl
# The exec agent runs inside instances, on any image: static (runtime/agents.go).
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/ ./cmd/envd-agent

BASE=${DEMO_BASE:-debian}
DATA=${ENVD_DATA_DIR:-$PWD/.data/node1}
DATA2=${ENVD_DATA_DIR2:-$PWD/.data/node2}
ROOTFS=$PWD/.data/rootfs-$BASE
mkdir -p "$DATA" "$DATA2"
chmod 755 "$PWD/.data" "$DATA" "$DATA2"
export ENVD_DATA_DIR=$DATA
unset ENVD_URL ENVD_TOKEN

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
ms() { date +%s%3N; }

start_node() { # DATA_DIR LOG [serve flags...]
  local dir=$1 log=$2; shift 2
  rm -f "$dir/envd.url"
  setsid envd "$@" --data-dir "$dir" >"$log" 2>&1 < /dev/null &
  echo $! > "$dir/envd.pid"
  for _ in $(seq 300); do
    [ -s "$dir/envd.url" ] && curl -fsS "$(cat "$dir/envd.url")/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$dir/envd.pid")" 2>/dev/null || { cat "$log"; return 1; }
    sleep 0.2
  done
  cat "$log"; return 1
}

step "envd up (data dir $DATA)"
if [ -s "$DATA/envd.pid" ] && kill -0 "$(cat "$DATA/envd.pid")" 2>/dev/null; then
  echo "already running"
else
  start_node "$DATA" "$DATA/envd.log" up
fi
envctl info

step "base image: $BASE"
if [ "$BASE" = debian ]; then
  bash scripts/debian-rootfs.sh "$ROOTFS"
  echo "demo file in the base" > "$ROOTFS/etc/envd-demo-delete-me"
else
  bash scripts/busybox-rootfs.sh "$ROOTFS"
  echo "demo file in the base" > "$ROOTFS/etc/envd-demo-delete-me"
fi
envctl image import "$ROOTFS" "$BASE"
P=demo-$(date +%s)
envctl project create "$P" --base "$BASE"

step "instance 1: install software"
I1=$(envctl up "$P" -o json | jq -r .id)
echo "instance $I1"
if [ "$BASE" = debian ]; then
  envctl exec "$I1" -- sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends graphviz >/dev/null && dot -V'
  CHECK='echo "digraph { envd -> works }" | dot -Tpng -o /root/graph.png && ls -l /root/graph.png && file_size=$(wc -c < /root/graph.png) && [ "$file_size" -gt 100 ]'
  ABSENT='! command -v dot'
else
  envctl exec "$I1" -- sh -c 'mkdir -p /usr/local/bin && printf "#!/bin/sh\necho rendered: \$*\n" > /usr/local/bin/dot && chmod +x /usr/local/bin/dot && dot -V'
  CHECK='dot -Tpng'
  ABSENT='! command -v dot'
fi
envctl exec "$I1" -- rm /etc/envd-demo-delete-me

step "save"
envctl save "$I1" -m "installed graphviz" -o json > "$DATA/save.json"
jq '{id, state, version, current, conflict}' "$DATA/save.json"
V=$(jq -r .version "$DATA/save.json")
envctl versions "$P"
envctl rm "$I1" >/dev/null

step "node 2: fresh containerd, same PostgreSQL and registry; start version $V"
REG=$(cat "$DATA/registry.addr")
DSN="host=$DATA/pg/run dbname=envd user=postgres sslmode=disable"
[ -s "$DATA2/envd.pid" ] && envd down --data-dir "$DATA2" >/dev/null
start_node "$DATA2" "$DATA2/envd.log" serve --database "$DSN" --registry "$REG" \
  --registry-credential-file "$DATA/registry-node.credential"
export ENVD_URL=$(cat "$DATA2/envd.url") ENVD_TOKEN=$(cat "$DATA2/admin.token")
t0=$(ms)
I2=$(envctl up "$P" -o json | jq -r .id)
envctl exec "$I2" -- true
t1=$(ms)
envctl exec "$I2" -- sh -c "$CHECK"
envctl exec "$I2" -- sh -c '[ ! -e /etc/envd-demo-delete-me ] && echo "deleted file is still absent"'
envctl show "$I2"
envctl rm "$I2" >/dev/null

step "roll back to version 1"
envctl switch "$P" 1
I3=$(envctl up "$P" -o json | jq -r .id)
envctl exec "$I3" -- sh -c "$ABSENT && echo 'version 1 has no dot'"
envctl rm "$I3" >/dev/null
envd down --data-dir "$DATA2" >/dev/null
unset ENVD_URL ENVD_TOKEN

step "timings"
jq -r --arg restore "$((t1 - t0))" '.operation.result as $r |
  "| phase | ms |\n|---|---|\n| save: freeze window | \($r.freeze_ms) |\n| save: spool (read upper dir) | \($r.spool_ms) |\n| save: encode (\($r.compression)) | \($r.encode_ms) |\n| save: push + verify | \($r.push_ms) |\n| save: commit | \($r.commit_ms) |\n| save: total | \($r.total_ms) |\n| save: layer bytes | \($r.layer_bytes) |\n| restore on node 2: up + first command | \($restore) |"' "$DATA/save.json"
echo
echo "envd node 1 is still up at $(cat "$DATA/envd.url") (token in $DATA/admin.token); scripts/down.sh stops it."
