#!/usr/bin/env bash
# Runs every test, as root, against real containerd, PostgreSQL, registry and S3.
# Installs what it needs first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "tests need root (containerd, overlayfs, network namespaces)" >&2; exit 1; }
bash scripts/setup.sh --tests
setup_s=$SECONDS
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
# CI shows only the end of a long output: the last lines say how long
# each part took and which tests failed (summary below).
main_log=$(mktemp)
side_log=$(mktemp)
trap 'rm -f "$main_log" "$side_log"' EXIT
summary() {
  echo "== summary: set-up ${setup_s} s; $*"
  if grep -qE -- '^(\s*--- FAIL|FAIL|panic:)' "$main_log" "$side_log"; then
    echo "== failed:"
    grep -hE -- '^(\s*--- FAIL|FAIL|panic:)' "$main_log" "$side_log" | head -60
    # A timeout's panic names the tests still running on the next lines.
    grep -hE -A8 -- '^panic: test timed out' "$main_log" "$side_log" | grep -E '^\s|^panic' | head -20
  fi
}
if [ "$split" = 1 ]; then
  ( set +e
    s=$SECONDS
    ENVD_E2E_GROUP=sole go test -count=1 -timeout 45m "$@" ./e2e/; e2e_rc=$?
    printf 'e2e sole %s s' $((SECONDS - s)) >"$side_log.times"
    s=$SECONDS
    bash scripts/fuzz.sh; fuzz_rc=$?
    printf ', fuzz %s s' $((SECONDS - s)) >>"$side_log.times"
    [ "$e2e_rc" = 0 ] && [ "$fuzz_rc" = 0 ] ) >"$side_log" 2>&1 &
  side=$!
  main_rc=0
  s=$SECONDS
  { go vet ./... && ENVD_E2E_GROUP=shared go test -count=1 -p 3 -timeout 45m "$@" ./...; } 2>&1 | tee "$main_log" || main_rc=$?
  main_s=$((SECONDS - s))
  side_rc=0
  wait "$side" || side_rc=$?
  echo "== e2e's sequential tests (ENVD_E2E_GROUP=sole), then scripts/fuzz.sh"
  cat "$side_log"
  summary "vet and tests ${main_s} s beside $(cat "$side_log.times" 2>/dev/null); rc main ${main_rc}, side ${side_rc}"
  rm -f "$side_log.times"
  [ "$main_rc" = 0 ] && [ "$side_rc" = 0 ]
else
  rc=0
  { go vet ./... && go test -count=1 -p 3 -timeout 45m "$@" ./... && bash scripts/fuzz.sh; } 2>&1 | tee "$main_log" || rc=$?
  summary "vet, tests and fuzz $((SECONDS - setup_s)) s; rc ${rc}"
  [ "$rc" = 0 ]
fi
