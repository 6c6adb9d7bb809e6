#!/usr/bin/env bash
# Compares the root package's benchmarks at two commits, in one run:
#
#   bench/ab.sh BASE [HEAD]      # HEAD defaults to the work tree as it is
#
# Environment: COUNT rounds (default 6), BENCH (a -test.bench regexp,
# default the lease and release benchmarks), CPU (default 1,2), BENCHTIME
# (default 1s). It builds one test binary per side, then runs them in
# interleaved rounds, so that noise hits a round of both rather than every
# run of one, at the highest priority when it runs as root (nice -n -20:
# other work on the machine then takes less from the measured one), and
# prints benchstat's comparison. Runs from any directory.
set -euo pipefail

base=${1:?usage: bench/ab.sh BASE [HEAD]}
head=${2:-}
COUNT=${COUNT:-6}
BENCH=${BENCH:-'BenchmarkLeaseRelease/|BenchmarkTryLeaseExhausted|BenchmarkHandoff'}
CPU=${CPU:-1,2}
BENCHTIME=${BENCHTIME:-1s}

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
	[ -d "$tmp/head" ] && git -C "$top" worktree remove --force "$tmp/head" >/dev/null 2>&1 || true
	rm -rf "$tmp"' EXIT

build() { # build REV DIR OUT: the test binary of REV (or of the work tree when REV is empty)
	if [ -z "$1" ]; then
		(cd "$top" && go test -c -o "$3" .)
	else
		git -C "$top" worktree add -q --detach "$2" "$1"
		(cd "$2" && go test -c -o "$3" .)
	fi
}
echo "==> building $base and ${head:-the work tree}"
build "$base" "$tmp/base" "$tmp/a.test"
build "$head" "$tmp/head" "$tmp/b.test"

nice=()
[ "$(id -u)" = 0 ] && nice=(nice -n -20)
: >"$tmp/a.txt"
: >"$tmp/b.txt"
for round in $(seq 1 "$COUNT"); do
	echo "==> round $round of $COUNT"
	for side in a b; do
		"${nice[@]}" "$tmp/$side.test" -test.run '^$' -test.bench "$BENCH" -test.count 1 \
			-test.cpu "$CPU" -test.benchtime "$BENCHTIME" >>"$tmp/$side.txt"
	done
done
echo "==> a.txt: $base; b.txt: ${head:-the work tree}"
(cd "$top/bench" && go run golang.org/x/perf/cmd/benchstat "$tmp/a.txt" "$tmp/b.txt")
