#!/usr/bin/env bash
# Runs every test, as root, against real containerd, PostgreSQL, registry and S3.
# Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "tests need root (containerd, overlayfs, network namespaces)" >&2; exit 1; }
bash scripts/setup.sh --tests
export PATH=/usr/local/lib/envd/bin:$PATH
go vet ./...
# The exec agent instances run their commands through (runtime/agents.go):
# static, since it runs inside any image; nodes the tests start take it
# from ENVD_AGENT_BINARY.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/envd-agent ./cmd/envd-agent
export ENVD_AGENT_BINARY=$PWD/bin/envd-agent
# -p 3 on 2 cores: the long packages (e2e, runtime, envd, the Kubernetes
# deploy test, versions, snapshotter) start their own daemons and mostly
# wait on them. With -p 2, once e2e ran its tests in parallel, the other
# packages queued one after another in the second slot became the longest
# path; -p 4 at load average 50 starved the envd package's core tests
# (PostgreSQL queries past their deadline) and the deploy test's
# apiserver. e2e and runtime run four of their tests at once unless
# -parallel says otherwise (docs/notes/testing.md).
go test -count=1 -p 3 -timeout 75m "$@" ./...
# Then every fuzz target for a bounded number of executions (about 10 s
# each plus the instrumented builds; see scripts/fuzz.sh for why counts).
bash scripts/fuzz.sh
