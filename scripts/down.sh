#!/usr/bin/env bash
# Stops what scripts/demo.sh started (envd, its containers, private containerd, lazy
# snapshotter and PostgreSQL) with `envd down`. Data dirs stay. Usage: down.sh [DATA_DIR...]
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/lib/envd/bin:$PWD/bin:$PATH
[ -x bin/envd ] || go build -o bin/ ./cmd/envd
# node 2 first: it uses node 1's PostgreSQL and registry.
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=("$PWD/.data/node2" "$PWD/.data/node1")
for d in "${dirs[@]}"; do
  [ -d "$d" ] || continue
  envd down --data-dir "$d" || echo "down.sh: $d: envd down failed" >&2
done
