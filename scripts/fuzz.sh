#!/usr/bin/env bash
# Runs every go fuzz target for a bounded time each (FUZZTIME, default 20s).
# A failure leaves the crashing input under the package's testdata/fuzz/;
# commit it: plain `go test` then runs it as a regression case.
#   scripts/fuzz.sh               all targets
#   FUZZTIME=1m scripts/fuzz.sh   longer
#   scripts/fuzz.sh FuzzCheck     only the named targets
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-20s}
# package target
targets=(
	"./internal/rootfstar FuzzCopy"
	"./workspace FuzzParseSpec"
	"./workspace FuzzParseSize"
	"./builder FuzzCheck"
	"./api FuzzDecodeJSON"
	"./api FuzzRoutes"
)
# Every FuzzXxx in the tree must be listed above, so none is forgotten.
listed=" ${targets[*]} "
for f in $(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's/^func //' | sort -u); do
	case "$listed" in *" $f "*) ;; *) echo "fuzz target $f is not listed in scripts/fuzz.sh" >&2; exit 1 ;; esac
done
failed=0
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
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
