#!/usr/bin/env bash
# Runs every test, as root, against real containerd, PostgreSQL, registry and S3.
# Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "tests need root (containerd, overlayfs, network namespaces)" >&2; exit 1; }
bash scripts/setup.sh --tests
export PATH=/usr/local/lib/envd/bin:$PATH
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
# -parallel says otherwise (docs/notes/testing.md). e2e's
# TestRootGVisorClass (shared group) runs the scenarios of lazy restore,
# retained layers, files, ports and SSH again on gvisor projects of the
# shared node (runsc from setup.sh --tests; it fails, not skips, without it).
#
# e2e's sequential tests (the ones that need the shared node to
# themselves, e2e/groups_test.go) run in a second process with a node of
# their own, started before vet, beside the package's parallel tests
# instead of before them; then every fuzz target for a bounded number of
# executions (one instrumented build per package; scripts/fuzz.sh says
# why counts and what is instrumented). Both go to a log printed when they
# end, so the main run's output stays whole. With -run or -skip among the
# arguments e2e runs as one process.
split=1
for a in "$@"; do case "$a" in -run*|-skip*|-test.run*|-test.skip*) split=0 ;; esac; done
if [ "$split" = 1 ]; then
  side_log=$(mktemp)
  trap 'rm -f "$side_log"' EXIT
  ( set +e
    ENVD_E2E_GROUP=sole go test -count=1 -timeout 75m "$@" ./e2e/; e2e_rc=$?
    bash scripts/fuzz.sh; fuzz_rc=$?
    [ "$e2e_rc" = 0 ] && [ "$fuzz_rc" = 0 ] ) >"$side_log" 2>&1 &
  side=$!
  main_rc=0
  go vet ./... && ENVD_E2E_GROUP=shared go test -count=1 -p 3 -timeout 75m "$@" ./... || main_rc=$?
  side_rc=0
  wait "$side" || side_rc=$?
  echo "== e2e's sequential tests (ENVD_E2E_GROUP=sole), then scripts/fuzz.sh"
  cat "$side_log"
  [ "$main_rc" = 0 ] && [ "$side_rc" = 0 ]
else
  go vet ./...
  go test -count=1 -p 3 -timeout 75m "$@" ./...
  bash scripts/fuzz.sh
fi
