#!/usr/bin/env bash
# Runs the pool comparison and writes the evidence next to this script:
#   raw.txt        every run's `go test -bench` output (the evidence)
#   benchstat.txt  benchstat -col /pool over raw.txt, msl as the base column
#   RESULTS.md     medians, ratios to msl, the targets' verdicts, benchstat
#   chart.png      median ns/op per workload and pool at -cpu 2, and the
#                  Overload workload's wait percentiles
#
# Environment: COUNT rounds (default 6), BENCHTIME per benchmark (default 1s),
# OVERLOAD_LEASES leases per Overload run (default 64000: 1000 per goroutine),
# RTW_LEASES leases per ReleaseThenWork run (default 16000: 1000 per
# goroutine, so its p99.9 is the 16th-longest of a run).
# Overload and ReleaseThenWork run a fixed number of leases rather than
# BENCHTIME, so that every pool's percentiles come from the same number of
# samples and go test spends no time finding b.N. At about 20 µs of CPU work
# a lease, 64000 Overload leases take about 1.3 s at -cpu 1, some 12 s a
# round for the seven pools. At about 22 µs a cycle, 16000 ReleaseThenWork
# leases took 0.37 s at -cpu 1 and 0.21 s at -cpu 2 (ns/op 23 and 13 µs,
# 2026-12-02, 2 cores), some 4 s a round; 17 s while other work kept the
# machine busy. A round is about 105 s at BENCHTIME=1s.
# BASELINE, when set, is another run's raw output (a raw.txt kept from an
# earlier build): the report then checks that msl's ns/op is within 3 % of
# it in every cell the lead targets cover.
# Each round runs every benchmark once, so the pools are interleaved in time
# and a burst of noise hits one round of all of them, not all runs of one.
# Runs from any directory.
set -euo pipefail

COUNT=${COUNT:-6}
BENCHTIME=${BENCHTIME:-1s}
OVERLOAD_LEASES=${OVERLOAD_LEASES:-64000}
RTW_LEASES=${RTW_LEASES:-16000}
BASELINE=${BASELINE:+$(realpath "$BASELINE")} # before the cd below
POOLS="msl puddle commons vitess channel semaphore syncpool" # msl first: the base

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "==> go test -c (once)"
go test -c -o "$tmp/bench.test" .

: >raw.txt
for round in $(seq 1 "$COUNT"); do
	echo "==> round $round of $COUNT (benchtime $BENCHTIME, Overload ${OVERLOAD_LEASES}x, ReleaseThenWork ${RTW_LEASES}x, -cpu 1,2)"
	"$tmp/bench.test" -test.run '^$' -test.bench '^Benchmark(Sequential|Parallel|Contended)$' \
		-test.cpu 1,2 -test.count 1 -test.benchtime "$BENCHTIME" | tee -a raw.txt
	"$tmp/bench.test" -test.run '^$' -test.bench '^BenchmarkOverload$' \
		-test.cpu 1,2 -test.count 1 -test.benchtime "${OVERLOAD_LEASES}x" | tee -a raw.txt
	"$tmp/bench.test" -test.run '^$' -test.bench '^BenchmarkReleaseThenWork$' \
		-test.cpu 1,2 -test.count 1 -test.benchtime "${RTW_LEASES}x" | tee -a raw.txt
done

echo "==> benchstat"
go run golang.org/x/perf/cmd/benchstat -col "/pool@($POOLS)" raw.txt >benchstat.txt

echo "==> report"
go run ./cmd/report -raw raw.txt -benchstat benchstat.txt -out RESULTS.md -chart chart.png \
	-count "$COUNT" -benchtime "$BENCHTIME" -overload-leases "$OVERLOAD_LEASES" -rtw-leases "$RTW_LEASES" \
	${BASELINE:+-baseline "$BASELINE"} \
	-command "COUNT=$COUNT BENCHTIME=$BENCHTIME OVERLOAD_LEASES=$OVERLOAD_LEASES RTW_LEASES=$RTW_LEASES bench/run.sh"

echo
echo "Results:"
echo "  $here/RESULTS.md"
echo "  $here/chart.png"
echo "  $here/benchstat.txt"
echo "  $here/raw.txt"
