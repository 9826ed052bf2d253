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
# has no deadline to race. Each count is half of the first counts, which
# were about 20 s each on a 2-core machine: about 10 s each, 80 s for the
# eight plus their instrumented builds (an estimate from those counts, not
# a measurement of these).
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
)
# Every FuzzXxx in the tree must be listed above, so none is forgotten.
listed=" ${targets[*]} "
for f in $(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's/^func //' | sort -u); do
	case "$listed" in *" $f "*) ;; *) echo "fuzz target $f is not listed in scripts/fuzz.sh" >&2; exit 1 ;; esac
done
failed=0
for t in "${targets[@]}"; do
	read -r pkg name count <<<"$t"
	fuzztime=${FUZZTIME:-$count}
	if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then
		continue
	fi
	echo "== $name ($pkg, $fuzztime)"
	# -parallel 2: the machine has 2 cores.
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel 2 "$pkg"; then
		echo "FAIL: $name; the input is in $pkg/testdata/fuzz/$name/" >&2
		failed=1
	fi
done
exit $failed
