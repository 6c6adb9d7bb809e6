#!/usr/bin/env bash
# Runs the wait path's three workloads for several builds of the pool, in
# interleaved rounds, and prints each build's medians:
#
#   bench/rounds.sh NAME=BINARY...
#
# Each BINARY is this module's test binary built from a tree to measure
# (`go test -c -o /tmp/NAME.test .` in that tree's bench/). A round runs, for
# each build in turn, Contended (`-test.benchtime` BENCHTIME), Overload
# (OVERLOAD_LEASES leases) and ReleaseThenWork (RTW_LEASES leases) for msl
# at `-test.cpu` CPU, and, for the first
# build only, the pools in OTHERS as well, so noise hits a round of every
# build rather than every run of one. It runs at the highest priority when
# it runs as root (nice -n -20). bench/JOURNAL.md, "The wait path's drafts"
# and "Yielding after a hand-off", has what it measured.
#
# Environment: COUNT rounds (default 6), CPU (default 1,2), BENCHTIME
# (default 1s), OVERLOAD_LEASES (default 64000), RTW_LEASES (default 16000),
# OTHERS (a regexp of pools, default channel|vitess), OUT (the raw output,
# default a temporary file).
set -euo pipefail

[ $# -ge 1 ] || {
	echo "usage: bench/rounds.sh NAME=BINARY..." >&2
	exit 2
}
COUNT=${COUNT:-6}
CPU=${CPU:-1,2}
BENCHTIME=${BENCHTIME:-1s}
OVERLOAD_LEASES=${OVERLOAD_LEASES:-64000}
RTW_LEASES=${RTW_LEASES:-16000}
OTHERS=${OTHERS:-channel|vitess}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-$(mktemp)}

nice=()
if [ "$(id -u)" = 0 ]; then
	nice=(nice -n -20)
fi

: >"$out"
for round in $(seq 1 "$COUNT"); do
	echo "==> round $round of $COUNT" >&2
	first=1
	for arg in "$@"; do
		name=${arg%%=*}
		bin=${arg#*=}
		pools=msl
		if [ "$first" = 1 ]; then
			pools="msl|$OTHERS"
		fi
		first=0
		"${nice[@]}" "$bin" -test.run '^$' -test.bench "^BenchmarkContended\$/pool=($pools)\$" \
			-test.cpu "$CPU" -test.benchtime "$BENCHTIME" | grep '^Benchmark' | sed "s/^/$name /" >>"$out"
		"${nice[@]}" "$bin" -test.run '^$' -test.bench "^BenchmarkOverload\$/pool=($pools)\$" \
			-test.cpu "$CPU" -test.benchtime "${OVERLOAD_LEASES}x" | grep '^Benchmark' | sed "s/^/$name /" >>"$out"
		"${nice[@]}" "$bin" -test.run '^$' -test.bench "^BenchmarkReleaseThenWork\$/pool=($pools)\$" \
			-test.cpu "$CPU" -test.benchtime "${RTW_LEASES}x" | grep '^Benchmark' | sed "s/^/$name /" >>"$out"
	done
done

echo "raw output: $out" >&2
(cd "$here" && go run ./cmd/rounds "$out")
