#!/usr/bin/env bash
# Runs every go fuzz target for a bounded number of executions each.
# A failure leaves the crashing input under the package's testdata/fuzz/;
# commit it: plain `go test` then runs it as a regression case.
#   scripts/fuzz.sh                    all targets, each its own count
#   FUZZTIME=2000000x scripts/fuzz.sh  one count (or a duration) for all
#   scripts/fuzz.sh FuzzCheck          only the named targets
#
# Why counts and not durations: Go 1.26's fuzz coordinator can report
# "context deadline exceeded" as a failure when a duration -fuzztime ends
# while a worker is mid-call (golang/go#75804, fixed in Go 1.27). A count
# has no deadline to race. Each count aims at about 10 s on a 2-core
# machine: the first eight are half of first counts of about 20 s each;
# the memory index and devcontainer counts were timed on a quiet machine
# (2026-12-02: 3.3 s at 20000x, 6.0 s at 50000x, 530 s for
# FuzzLifecycleShell at 50000x), plus the instrumented builds.
set -euo pipefail
cd "$(dirname "$0")/.."
# package target executions
targets=(
	"./internal/tarfs FuzzCopyRootfs 50000x"
	"./workspace FuzzParseSpec 100000x"
	"./api/types FuzzParseSize 100000x"
	"./builder FuzzCheck 125000x"
	"./builder FuzzCheckSpec 50000x"
	"./api FuzzDecodeJSON 4000x"
	"./api FuzzRoutes 7500x"
	"./runtime/agent FuzzReadFrame 60000x"
	"./registry/memimage FuzzIndexCheck 60000x"
	"./builder/devcontainer FuzzParse 80000x"
	# Each input runs /bin/sh: about 100 a second here.
	"./builder/devcontainer FuzzLifecycleShell 1000x"
)
# Every FuzzXxx in the tree must be listed above, so none is forgotten.
listed=" ${targets[*]} "
for f in $(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's/^func //' | sort -u); do
	case "$listed" in *" $f "*) ;; *) echo "fuzz target $f is not listed in scripts/fuzz.sh" >&2; exit 1 ;; esac
done
# One instrumented test binary per package, built once and run for each of
# its targets (go test -fuzz builds and links it again for every target).
#
# What is instrumented: the module's packages, the standard library (less
# the packages go test -fuzz itself leaves out, which the fuzzing engine
# uses while it runs) and the outside packages the fuzzed package imports
# itself (gin for the routes, klauspost's gzip for uploads,
# go-containerregistry for digests). go test -fuzz instruments every
# package linked into the test binary, containerd and gRPC included, which
# no fuzz target calls; a worker copies, scans and clears every counter
# after each call, so their 176 KB of counters (./workspace's binary; 3 KB
# for the module's packages alone) made each execution cost about 0.8 ms
# of CPU instead of about 65 us. With the standard library's counters
# kept, FuzzCheck ran 1.6 times as fast (docs/notes/testing.md). Counts
# stay as they are; only the time to reach them changes.
nofuzz=(context internal/fuzz internal/godebug internal/runtime/maps internal/sync reflect runtime sync sync/atomic syscall testing time)
module=$(go list -m)
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
cachedir="$(go env GOCACHE)/fuzz"
declare -A built=()
failed=0
for t in "${targets[@]}"; do
	read -r pkg name count <<<"$t"
	fuzztime=${FUZZTIME:-$count}
	if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then
		continue
	fi
	importpath=$(go list "$pkg")
	bin="$bindir/${importpath//\//_}.test"
	if [ -z "${built[$pkg]:-}" ]; then
		flags=(-gcflags="std=-d=libfuzzer" -gcflags="$module/...=-d=libfuzzer")
		for imp in $(go list -f '{{join .Imports "\n"}}' "$pkg"); do
			case "$imp" in "$module" | "$module"/* | "") ;; *.*/*) flags+=(-gcflags="$imp/...=-d=libfuzzer") ;; esac
		done
		for p in "${nofuzz[@]}"; do flags+=(-gcflags="$p="); done
		echo "== build $pkg (instrumented)"
		if ! go test -c -o "$bin" "${flags[@]}" "$pkg"; then
			echo "FAIL: build of $pkg" >&2
			failed=1
			built[$pkg]=failed
			continue
		fi
		built[$pkg]=ok
	fi
	[ "${built[$pkg]}" = ok ] || continue
	echo "== $name ($pkg, $fuzztime)"
	# -parallel 2: the machine has 2 cores. The binary runs in its
	# package's directory (testdata/fuzz) with the fuzz cache go test uses.
	start=$(date +%s)
	if ! (cd "$pkg" && "$bin" -test.paniconexit0 -test.timeout=10m -test.run='^$' -test.fuzz="^${name}\$" \
		-test.fuzztime="$fuzztime" -test.parallel=2 -test.fuzzcachedir="$cachedir/$importpath"); then
		echo "FAIL: $name; the input is in $pkg/testdata/fuzz/$name/" >&2
		failed=1
	else
		echo "ok: $name ($importpath) $(($(date +%s) - start)) s"
	fi
done
exit $failed
