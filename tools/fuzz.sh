#!/usr/bin/env bash
# Runs every Go fuzz target in the module (func Fuzz* in a _test.go) for a
# short budget each: FUZZTIME (default 10s) per target, one worker, so the
# total is predictable on a 2-core machine. `make test` already replays
# each target's seed corpus (f.Add and testdata/fuzz/<Target>/) as plain
# tests; this explores beyond it. A crash fails the run and Go writes the
# input to testdata/fuzz/<Target>/ in the package: commit it with the fix,
# as a regression test.
#
#   tools/fuzz.sh [directory ...]      (default: gostore bindings bench)
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
gold=-ldflags=-checklinkname=0
fuzztime="${FUZZTIME:-10s}"
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(gostore bindings bench)

start=$(date +%s)
n=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Each package directory whose tests declare a fuzz target, and the targets.
for file in $(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' "${dirs[@]}" | sort); do
	pkg=./$(dirname "$file")
	for t in $(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' "$file"); do
		echo "fuzz: $pkg $t ($fuzztime)"
		if ! go test $gold -run='^$' -fuzz="^${t}\$" -fuzztime="$fuzztime" -fuzzminimizetime=5s -parallel=1 "$pkg" >"$out" 2>&1; then
			cat "$out"
			echo "fuzz: $pkg $t FAILED: the input is in $pkg/testdata/fuzz/$t/; keep it with the fix"
			exit 1
		fi
		grep -E '^(ok|PASS)' "$out" | tail -n 1
		n=$((n + 1))
	done
done
echo "fuzz: $n targets, $(( $(date +%s) - start )) s"
