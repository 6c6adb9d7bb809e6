package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sample is two rounds of benchmark output as run.sh appends them (each
// round two runs of the test binary, the second for Overload), with the
// pools out of poolOrder, GOMAXPROCS 1 (no suffix) and 2, and go test's
// chatter between runs. Round 2 differs so that medians are means of two.
const sample = `goos: linux
goarch: amd64
pkg: github.com/msl-armory/pool/bench
cpu: Test CPU @ 1GHz            
BenchmarkSequential/pool=puddle         	 1000000	       150.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=puddle-2       	 1000000	       200.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=msl            	 1000000	        30.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=msl-2          	 1000000	        40.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=syncpool       	 1000000	        10.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=syncpool-2     	 1000000	        10.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkParallel/pool=msl-2            	 1000000	        20.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkParallel/pool=puddle-2         	 1000000	       200.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkParallel/pool=syncpool-2       	 1000000	         6.000 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/pool=msl-2           	 1000000	       300.0 ns/op	      16 B/op	       1 allocs/op
BenchmarkContended/pool=puddle-2        	 1000000	       600.0 ns/op	     175 B/op	       2 allocs/op
PASS
goos: linux
goarch: amd64
pkg: github.com/msl-armory/pool/bench
cpu: Test CPU @ 1GHz            
BenchmarkOverload/pool=msl              	   64000	     20000 ns/op	     50000 leases/s	   1000000 p50-ns	   2000000 p99-ns	   4000000 p99.9-ns	   8000000 max-ns	     20000 work-ns	       0 B/op	       0 allocs/op
BenchmarkOverload/pool=msl-2            	   64000	     10000 ns/op	    100000 leases/s	    500000 p50-ns	    700000 p99-ns	    900000 p99.9-ns	   1800000 max-ns	     19800 work-ns	       0 B/op	       0 allocs/op
BenchmarkOverload/pool=puddle-2         	   64000	     11000 ns/op	     90000 leases/s	    550000 p50-ns	   5000000 p99-ns	  40000000 p99.9-ns	  80000000 max-ns	     20000 work-ns	     160 B/op	       2 allocs/op
BenchmarkOverload/pool=syncpool-2       	   64000	     10000 ns/op	    100000 leases/s	        40.00 p50-ns	       140.0 p99-ns	      1500 p99.9-ns	      3000 max-ns	     20000 work-ns	       0 B/op	       0 allocs/op
PASS
goos: linux
goarch: amd64
pkg: github.com/msl-armory/pool/bench
cpu: Test CPU @ 1GHz            
BenchmarkSequential/pool=puddle         	 1000000	       170.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=puddle-2       	 1000000	       220.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=msl            	 1000000	        34.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=msl-2          	 1000000	        44.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=syncpool       	 1000000	        12.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkSequential/pool=syncpool-2     	 1000000	        12.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkParallel/pool=msl-2            	 1000000	        30.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkParallel/pool=puddle-2         	 1000000	       220.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkParallel/pool=syncpool-2       	 1000000	         6.000 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/pool=msl-2           	 1000000	       340.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkContended/pool=puddle-2        	 1000000	       640.0 ns/op	     175 B/op	       2 allocs/op
PASS
goos: linux
goarch: amd64
pkg: github.com/msl-armory/pool/bench
cpu: Test CPU @ 1GHz            
BenchmarkOverload/pool=msl              	   64000	     22000 ns/op	     45454 leases/s	   1200000 p50-ns	   3000000 p99-ns	   6000000 p99.9-ns	  12000000 max-ns	     20200 work-ns	       0 B/op	       0 allocs/op
BenchmarkOverload/pool=msl-2            	   64000	     12000 ns/op	     83333 leases/s	    700000 p50-ns	    900000 p99-ns	   1100000 p99.9-ns	   2200000 max-ns	     20200 work-ns	       0 B/op	       0 allocs/op
BenchmarkOverload/pool=puddle-2         	   64000	     13000 ns/op	     76923 leases/s	    650000 p50-ns	   7000000 p99-ns	  60000000 p99.9-ns	 120000000 max-ns	     20000 work-ns	     170 B/op	       2 allocs/op
BenchmarkOverload/pool=syncpool-2       	   64000	     10000 ns/op	    100000 leases/s	        44.00 p50-ns	       160.0 p99-ns	      2500 p99.9-ns	      5000 max-ns	     20000 work-ns	       0 B/op	       0 allocs/op
PASS
ok  	github.com/msl-armory/pool/bench	12.345s
`

func parseSample(t *testing.T) *data {
	t.Helper()
	d, err := parse(strings.NewReader(sample), "sample.txt")
	require.NoError(t, err)
	return d
}

func TestParse(t *testing.T) {
	d := parseSample(t)
	assert.Equal(t, []string{"Sequential", "Parallel", "Contended", "Overload"}, d.workloads, "workloads in the order first seen")
	assert.Equal(t, []string{"msl", "puddle", "syncpool"}, d.pools, "pools in poolOrder, ours first")
	assert.Equal(t, []int{1, 2}, d.procs)
	assert.Equal(t, "linux", d.config["goos"])
	assert.Equal(t, "Test CPU @ 1GHz", d.config["cpu"], "trailing blanks trimmed")

	s := d.runs[key{"Sequential", "puddle", 1}]
	require.NotNil(t, s)
	assert.InDeltaSlice(t, []float64{150, 170}, s.ns, 1e-9, "ns/op per run, in input order")
	assert.Equal(t, []float64{0, 0}, s.allocs)
	assert.Nil(t, d.runs[key{"Parallel", "msl", 1}], "no such benchmark in the sample")
	assert.Nil(t, s.lat[latP99], "a throughput workload has no latency metrics")

	// benchfmt reads p50-ns as p50-sec; parse turns it back into ns.
	s = d.runs[key{"Overload", "msl", 2}]
	require.NotNil(t, s)
	assert.InDeltaSlice(t, []float64{500000, 700000}, s.lat[latP50], 1e-6)
	assert.InDeltaSlice(t, []float64{700000, 900000}, s.lat[latP99], 1e-6)
	assert.InDeltaSlice(t, []float64{900000, 1100000}, s.lat[latP999], 1e-6)
	assert.InDeltaSlice(t, []float64{1800000, 2200000}, s.lat[latMax], 1e-6)
	assert.InDeltaSlice(t, []float64{100000, 83333}, s.lat[latRate], 1e-6, "leases/s as reported")
	assert.InDeltaSlice(t, []float64{19800, 20200}, s.lat[latWork], 1e-6)
	assert.InDeltaSlice(t, []float64{10000, 12000}, s.ns, 1e-6)
}

func TestSplit(t *testing.T) {
	d := parseSample(t)
	throughput, latency, cycle := d.split()
	assert.Equal(t, []string{"Sequential", "Parallel", "Contended"}, throughput)
	assert.Equal(t, []string{"Overload"}, latency)
	assert.Empty(t, cycle)
	assert.True(t, d.isLatency("Overload"))
	assert.False(t, d.isLatency("Contended"))
	assert.False(t, d.isLatency("NoSuchWorkload"))
}

func TestParseRejects(t *testing.T) {
	for name, in := range map[string]string{
		"no pool part": "BenchmarkSequential-2 \t 100 \t 5.0 ns/op\n",
		"no results":   "goos: linux\nPASS\n",
		"torn line":    "BenchmarkSequential/pool=msl-2 \t 100 \t 5.0\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parse(strings.NewReader(in), "bad.txt")
			assert.Error(t, err)
		})
	}
}

func TestKeyOf(t *testing.T) {
	for in, want := range map[string]key{
		"BenchmarkParallel/pool=msl-2":     {"Parallel", "msl", 2},
		"BenchmarkParallel/pool=msl":       {"Parallel", "msl", 1},
		"BenchmarkContended/pool=puddle-8": {"Contended", "puddle", 8},
		"BenchmarkX/size=4/pool=chan-2":    {"X/size=4", "chan", 2},
	} {
		got, err := keyOf([]byte(in))
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1000, 9}, 10},
	} {
		in := append([]float64(nil), tc.in...)
		assert.InDelta(t, tc.want, median(in), 1e-12, "median(%v)", tc.in)
		assert.Equal(t, tc.in, in, "median must not reorder its input")
	}
}

func TestCellAndCompare(t *testing.T) {
	d := parseSample(t)

	c, ok := d.cell("Contended", "msl", 2)
	require.True(t, ok)
	assert.Equal(t, 2, c.n)
	assert.InDelta(t, 320, c.ns, 1e-9)
	assert.InDelta(t, 0.5, c.allocs, 1e-9, "median of 1 and 0")
	assert.InDelta(t, 1, c.maxAllocs, 1e-9)
	assert.InDelta(t, 8, c.bytes, 1e-9)

	_, ok = d.cell("Contended", "syncpool", 2)
	assert.False(t, ok)

	r, ok := d.compare("Sequential", "puddle", 2) // 210 / 42
	require.True(t, ok)
	assert.InDelta(t, 5, r.theirsOverOurs, 1e-9)
	assert.InDelta(t, 0.2, r.oursOverTheirs, 1e-9)

	_, ok = d.compare("Contended", "syncpool", 2)
	assert.False(t, ok, "no syncpool runs to compare with")

	c, ok = d.cell("Overload", "puddle", 2)
	require.True(t, ok)
	assert.InDelta(t, 600000, c.lat[latP50], 1e-6)
	assert.InDelta(t, 6e6, c.lat[latP99], 1e-6)
	assert.InDelta(t, 50e6, c.lat[latP999], 1e-6)
	assert.InDelta(t, 100e6, c.lat[latMax], 1e-6)
	assert.InDelta(t, 83461.5, c.lat[latRate], 1e-6)
	assert.InDelta(t, 20000, c.lat[latWork], 1e-6)
	assert.InDelta(t, 2, c.allocs, 1e-9)

	c, ok = d.cell("Sequential", "msl", 2)
	require.True(t, ok)
	assert.Equal(t, [numLatMetrics]float64{-1, -1, -1, -1, -1, -1, -1}, c.lat, "not measured")
}

func TestTargets(t *testing.T) {
	d := parseSample(t)
	for _, tc := range []struct {
		target speedTarget
		want   verdict
	}{
		// 42 ≤ 0.2 × 210 exactly: a limit met with equality passes.
		{speedTarget{workload: "Sequential", procs: 2, other: "puddle", factor: 0.2}, verdict{have: true, met: true}},
		{speedTarget{workload: "Sequential", procs: 2, other: "puddle", factor: 0.19}, verdict{have: true, met: false}},
		// 25 > 0.1 × 210; 25 ≤ 4 × 6.
		{speedTarget{workload: "Parallel", procs: 2, other: "puddle", factor: 0.1}, verdict{have: true, met: false}},
		{speedTarget{workload: "Parallel", procs: 2, other: "syncpool", factor: 4.5}, verdict{have: true, met: true}},
		{speedTarget{workload: "Parallel", procs: 1, other: "puddle", factor: 0.2}, verdict{}},
		{speedTarget{workload: "Contended", procs: 2, other: "puddle", factor: 0.4}, verdict{have: true, met: false}},
	} {
		_, _, _, v := checkSpeed(d, tc.target)
		assert.Equal(t, tc.want, v, "%s", tc.target)
	}

	// Contended -cpu 2, msl: runs of 300 and 340 ns, 340/300 = 1.13.
	med, lo, hi, v := checkSpread(d, spreadTarget{workload: "Contended", procs: 2, limit: 1.5})
	assert.Equal(t, verdict{have: true, met: true}, v)
	assert.InDeltaSlice(t, []float64{320, 300, 340}, []float64{med, lo, hi}, 1e-6)
	_, _, _, v = checkSpread(d, spreadTarget{workload: "Contended", procs: 2, limit: 1.1})
	assert.Equal(t, verdict{have: true, met: false}, v)
	_, _, _, v = checkSpread(d, spreadTarget{workload: "Contended", procs: 1, limit: 1.5})
	assert.Equal(t, verdict{}, v, "no runs")

	for _, tc := range []struct {
		target waitTarget
		want   verdict
	}{
		// Overload, msl: -cpu 2 p99.9 1 ms, p50 600 µs, 91.7k leases/s;
		// puddle 50 ms and 83.5k leases/s.
		{waitTarget{workload: "Overload", procs: 2, metric: latP999, other: ours, otherMetric: latP50, factor: 1.5}, verdict{have: true, met: false}},
		{waitTarget{workload: "Overload", procs: 2, metric: latP999, other: "puddle", otherMetric: latP999, factor: 0.02}, verdict{have: true, met: true}},
		{waitTarget{workload: "Overload", procs: 2, metric: latRate, other: "puddle", otherMetric: latRate, factor: 1, atLeast: true}, verdict{have: true, met: true}},
		{waitTarget{workload: "Overload", procs: 2, metric: latRate, other: "puddle", otherMetric: latRate, factor: 1.2, atLeast: true}, verdict{have: true, met: false}},
		{waitTarget{workload: "Overload", procs: 1, metric: latP999, other: "puddle", otherMetric: latP999, factor: 1}, verdict{}},
	} {
		_, _, v := checkWait(d, tc.target)
		assert.Equal(t, tc.want, v, "%s", tc.target)
	}

	_, best, pool, v := checkLead(d, "Sequential", 2)
	assert.Equal(t, verdict{have: true, met: true}, v)
	assert.Equal(t, "puddle", pool, "syncpool is faster, but has no bound")
	assert.InDelta(t, 210, best.ns, 1e-6)

	_, v = checkAllocs(d, "Sequential")
	assert.Equal(t, verdict{have: true, met: true}, v)
	_, v = checkAllocs(d, "Contended") // median 0.5 at -cpu 2, no -cpu 1 runs
	assert.Equal(t, verdict{}, v)
}

func TestWriteResults(t *testing.T) {
	d := parseSample(t)
	const bs = "goos: linux\n      │ msl │ puddle │\nsec/op 42n 210n\n"
	var buf bytes.Buffer
	require.NoError(t, writeResults(&buf, d, nil, meta{
		date: "2026-01-02 03:04 UTC", goVersion: "go version go1.26 linux/amd64",
		cpu: "Test CPU", ncpu: 2, goos: "linux", goarch: "amd64",
		count: "2", benchtime: "1s", overload: "64000", rtw: "16000", command: "COUNT=2 BENCHTIME=1s bench/run.sh",
	}, "chart.png", bs))
	out := buf.String()

	for _, want := range []string{
		"`COUNT=2 BENCHTIME=1s bench/run.sh`",
		"go version go1.26 linux/amd64",
		"Test CPU (2 logical CPUs)",
		"2 runs of each benchmark",
		"![", "(chart.png)",
		"### Sequential", "### Parallel", "### Contended", "### Overload: wait for an item",
		"OVERLOAD_LEASES=64000 leases per run (`-test.benchtime 64000x`), ReleaseThenWork a fixed RTW_LEASES=16000 (`-test.benchtime 16000x`)",
		"| pool | -cpu 1: p50 | p99 | p99.9 | max | leases/s | work | allocs | -cpu 2: p50 | p99 | p99.9 | max | leases/s | work | allocs |",
		// Overload, msl: -cpu 1 p50 (1+1.2)/2 ms, p99 2.5 ms, p99.9 5 ms,
		// max 10 ms, 47.7k leases/s; -cpu 2 0.6, 0.8, 1, 2 ms, 91.7k leases/s.
		"| msl | 1.1 ms | 2.5 ms | 5 ms | 10 ms | 47.7k | 20.1 µs | 0 | 600 µs | 800 µs | 1 ms | 2 ms | 91.7k | 20 µs | 0 |",
		"| puddle | – | – | – | – | – | – | – | 600 µs | 6 ms | 50 ms | 100 ms | 83.5k | 20 µs | 2 |",
		"| syncpool | – | – | – | – | – | – | – | 42 ns | 150 ns | 2 µs | 4 µs | 100.0k | 20 µs | 0 |",
		// Sequential, puddle: 160 and 210 ns; theirs/ours 160/32 = 5, 210/42 = 5.
		"| puddle | 160 | 0 | 0 | 5.00 | 0.20 | 210 | 0 | 0 | 5.00 | 0.20 |",
		"| msl | 32.0 | 0 | 0 | base | base | 42.0 | 0 | 0 | base | base |",
		"| Sequential, -cpu 2: ours ≤ 0.2 × puddle | 42.0 | 210 | 0.2000 | ≤ 0.20 | PASS |",
		"| Parallel, -cpu 2: ours ≤ 0.15 × puddle | 25.0 | 210 | 0.1190 | ≤ 0.15 | PASS |",
		"| Parallel, -cpu 2: ours ≤ 4 × syncpool | 25.0 | 6.00 | 4.1667 | ≤ 4.00 | FAIL |",
		"| Contended, -cpu 2: ours ≤ 0.4 × puddle | 320 | 620 | 0.5161 | ≤ 0.40 | FAIL |",
		"| Contended: ours 0 allocs/op | – (-cpu 1), 0.5 (-cpu 2) | –, 1 | NO DATA |",
		"| Sequential, -cpu 1: ours ≤ 1.5 × syncpool | 32.0 | 11.0 | 2.9091 | ≤ 1.50 | FAIL |",
		"| Contended, -cpu 1: ours ≤ 1 × channel | – | – | – | ≤ 1.00 | NO DATA |",
		"| Contended, -cpu 1: ours ≤ 0.9 × channel (stretch, not counted) | – | – | – | ≤ 0.90 | NO DATA |",
		"| ReleaseThenWork, -cpu 1: ours p99.9 ≤ 1 × channel p99.9 | – | – | NO DATA |",
		"| Overload, -cpu 2: ours p99.9 in every round ≤ 2 × channel median p99.9 | – | – | – | – | NO DATA |",
		"No baseline given (`-baseline`): the targets against a baseline were skipped.",
		// Overload -cpu 2, msl: p99.9 1 ms ≤ 2.5 × its p50 of 600 µs.
		"| Overload, -cpu 2: ours p99.9 ≤ 2.5 × ours p50 | 1 ms | 1.5 ms | PASS |",
		"| Overload, -cpu 2: ours p99.9 ≤ 1.5 × channel p99.9 | – | – | NO DATA |",
		// Contended -cpu 2: 320 ns against puddle's 620; syncpool, unbounded, is no rival.
		"| Contended, -cpu 2: ours ahead of every bounded pool | 320 | puddle | 620 | PASS |",
		"| Parallel, -cpu 1: ours ahead of every bounded pool | – | – | – | NO DATA |",
		// Contended -cpu 2, msl: runs of 300 and 340 ns.
		"| Contended, -cpu 2: ours, slowest run ≤ 1.5 × fastest | 320 | 300 | 340 | 1.13 | ≤ 1.50 | PASS |",
		"**9 of 36 targets met.**",
		"```\n" + bs + "```\n",
	} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, out, "(reported, not counted)")
	assert.NotContains(t, out, "Overload: ours 0 allocs/op", "a latency workload has no targets")
	assert.NotContains(t, out, "### Overload\n", "a latency workload has no ns/op table")
	assert.NotContains(t, out, "### ReleaseThenWork", "no ReleaseThenWork runs, no table")
	assert.NotContains(t, out, "ours/baseline", "no baseline, no baseline table")
}

// rtwSample is two rounds of ReleaseThenWork, as run.sh appends them after
// sample's, and of Overload for the channel at -cpu 2. The rounds differ
// only in msl's wait p99.9 at -cpu 1 (400 and 440 µs) and in the channel's
// Overload p99.9 (450 and 550 µs).
const rtwSample = `goos: linux
goarch: amd64
pkg: github.com/msl-armory/pool/bench
cpu: Test CPU @ 1GHz
BenchmarkReleaseThenWork/pool=msl            	   16000	     23000 ns/op	    500000 cycle-p99.9-ns	    250000 p50-ns	    400000 p99.9-ns	       1 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=msl-2          	   16000	     12000 ns/op	   4000000 cycle-p99.9-ns	    140000 p50-ns	    300000 p99.9-ns	       2 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=puddle         	   16000	     23500 ns/op	  24000000 cycle-p99.9-ns	    240000 p50-ns	    410000 p99.9-ns	     129 B/op	       2 allocs/op
BenchmarkReleaseThenWork/pool=puddle-2       	   16000	     14000 ns/op	   5700000 cycle-p99.9-ns	    140000 p50-ns	   5700000 p99.9-ns	     168 B/op	       2 allocs/op
BenchmarkReleaseThenWork/pool=vitess         	   16000	     22900 ns/op	    120000 cycle-p99.9-ns	        53.00 p50-ns	       418.0 p99.9-ns	       1 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=vitess-2       	   16000	     13600 ns/op	  15000000 cycle-p99.9-ns	       204.0 p50-ns	  15000000 p99.9-ns	       2 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=channel        	   16000	     24600 ns/op	  26000000 cycle-p99.9-ns	    245000 p50-ns	    700000 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=channel-2      	   16000	     12300 ns/op	   4600000 cycle-p99.9-ns	    144000 p50-ns	    290000 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkOverload/pool=channel-2             	   64000	     10000 ns/op	    100000 leases/s	    500000 p50-ns	    400000 p99-ns	    450000 p99.9-ns	    900000 max-ns	     20000 work-ns	       0 B/op	       0 allocs/op
PASS
goos: linux
goarch: amd64
pkg: github.com/msl-armory/pool/bench
cpu: Test CPU @ 1GHz
BenchmarkReleaseThenWork/pool=msl            	   16000	     23000 ns/op	    500000 cycle-p99.9-ns	    250000 p50-ns	    440000 p99.9-ns	       1 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=msl-2          	   16000	     12000 ns/op	   4000000 cycle-p99.9-ns	    140000 p50-ns	    300000 p99.9-ns	       2 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=puddle         	   16000	     23500 ns/op	  24000000 cycle-p99.9-ns	    240000 p50-ns	    410000 p99.9-ns	     129 B/op	       2 allocs/op
BenchmarkReleaseThenWork/pool=puddle-2       	   16000	     14000 ns/op	   5700000 cycle-p99.9-ns	    140000 p50-ns	   5700000 p99.9-ns	     168 B/op	       2 allocs/op
BenchmarkReleaseThenWork/pool=vitess         	   16000	     22900 ns/op	    120000 cycle-p99.9-ns	        53.00 p50-ns	       418.0 p99.9-ns	       1 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=vitess-2       	   16000	     13600 ns/op	  15000000 cycle-p99.9-ns	       204.0 p50-ns	  15000000 p99.9-ns	       2 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=channel        	   16000	     24600 ns/op	  26000000 cycle-p99.9-ns	    245000 p50-ns	    700000 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkReleaseThenWork/pool=channel-2      	   16000	     12300 ns/op	   4600000 cycle-p99.9-ns	    144000 p50-ns	    290000 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkOverload/pool=channel-2             	   64000	     10000 ns/op	    100000 leases/s	    500000 p50-ns	    400000 p99-ns	    550000 p99.9-ns	    900000 max-ns	     20000 work-ns	       0 B/op	       0 allocs/op
PASS
`

// baselineSample is a baseline's rounds of msl in the throughput
// workloads: Sequential 31 and 41 ns (-cpu 1, 2), Parallel 25 ns and
// Contended 300 ns (-cpu 2).
const baselineSample = `BenchmarkSequential/pool=msl 	 1000000	        31.00 ns/op
BenchmarkSequential/pool=msl-2 	 1000000	        41.00 ns/op
BenchmarkParallel/pool=msl-2 	 1000000	        25.00 ns/op
BenchmarkContended/pool=msl-2 	 1000000	       300.0 ns/op
`

func parseWithRTW(t *testing.T) *data {
	t.Helper()
	d, err := parse(strings.NewReader(sample+rtwSample), "sample.txt")
	require.NoError(t, err)
	return d
}

func TestParseReleaseThenWork(t *testing.T) {
	d := parseWithRTW(t)
	throughput, latency, cycle := d.split()
	assert.Equal(t, []string{"Sequential", "Parallel", "Contended"}, throughput, "ReleaseThenWork is not compared by ns/op")
	assert.Equal(t, []string{"Overload"}, latency)
	assert.Equal(t, []string{"ReleaseThenWork"}, cycle)

	// benchfmt reads cycle-p99.9-ns as cycle-p99.9-sec; parse turns it
	// back into ns.
	s := d.runs[key{"ReleaseThenWork", "msl", 1}]
	require.NotNil(t, s)
	assert.InDeltaSlice(t, []float64{23000, 23000}, s.ns, 1e-6)
	assert.InDeltaSlice(t, []float64{250000, 250000}, s.lat[latP50], 1e-6)
	assert.InDeltaSlice(t, []float64{400000, 440000}, s.lat[latP999], 1e-6, "each round's p99.9, in input order")
	assert.InDeltaSlice(t, []float64{500000, 500000}, s.lat[latCycleP999], 1e-6)
	assert.Nil(t, s.lat[latP99], "ReleaseThenWork reports no p99")

	c, ok := d.cell("ReleaseThenWork", "msl", 1)
	require.True(t, ok)
	assert.InDelta(t, 420000, c.lat[latP999], 1e-6, "the median of the rounds")
	c, ok = d.cell("Overload", "msl", 2)
	require.True(t, ok)
	assert.InDelta(t, -1, c.lat[latCycleP999], 1e-9, "Overload reports no cycle")
}

func TestReleaseThenWorkTargets(t *testing.T) {
	d := parseWithRTW(t)
	want := map[string]bool{
		// -cpu 1: msl's p99.9 420 µs, channel 700, puddle 410 µs, vitess
		// 418 ns; cycle 500 µs, channel 26 ms, puddle 24 ms, vitess 120 µs.
		"ReleaseThenWork, -cpu 1: ours p99.9 ≤ 1 × channel p99.9":             true,
		"ReleaseThenWork, -cpu 1: ours p99.9 < 1 × puddle p99.9":              false,
		"ReleaseThenWork, -cpu 1: ours p99.9 < 1 × vitess p99.9":              false,
		"ReleaseThenWork, -cpu 1: ours cycle p99.9 ≤ 1 × channel cycle p99.9": true,
		"ReleaseThenWork, -cpu 1: ours cycle p99.9 < 1 × puddle cycle p99.9":  true,
		"ReleaseThenWork, -cpu 1: ours cycle p99.9 < 1 × vitess cycle p99.9":  false,
		// -cpu 2: p99.9 300 µs, channel 290 µs, puddle 5.7 ms, vitess 15 ms;
		// cycle 4 ms, channel 4.6 ms, puddle 5.7 ms, vitess 15 ms.
		"ReleaseThenWork, -cpu 2: ours p99.9 ≤ 1 × channel p99.9":             false,
		"ReleaseThenWork, -cpu 2: ours p99.9 < 1 × puddle p99.9":              true,
		"ReleaseThenWork, -cpu 2: ours p99.9 < 1 × vitess p99.9":              true,
		"ReleaseThenWork, -cpu 2: ours cycle p99.9 ≤ 1 × channel cycle p99.9": true,
		"ReleaseThenWork, -cpu 2: ours cycle p99.9 < 1 × puddle cycle p99.9":  true,
		"ReleaseThenWork, -cpu 2: ours cycle p99.9 < 1 × vitess cycle p99.9":  true,
	}
	seen := 0
	for _, tg := range waitTargets {
		if tg.workload != "ReleaseThenWork" {
			continue
		}
		seen++
		met, ok := want[tg.String()]
		if !assert.True(t, ok, "unexpected target %s", tg) {
			continue
		}
		_, _, v := checkWait(d, tg)
		assert.Equal(t, verdict{have: true, met: met}, v, "%s", tg)
	}
	assert.Equal(t, len(want), seen, "every ReleaseThenWork target is in waitTargets")

	// Below means strictly below: equal figures miss it, as at most meets it.
	equal := waitTarget{workload: "ReleaseThenWork", procs: 1, metric: latP50, other: ours, otherMetric: latP50, factor: 1}
	_, _, v := checkWait(d, equal)
	assert.Equal(t, verdict{have: true, met: true}, v)
	equal.below = true
	_, _, v = checkWait(d, equal)
	assert.Equal(t, verdict{have: true, met: false}, v)
}

func TestRoundTargets(t *testing.T) {
	d := parseWithRTW(t)
	// Overload -cpu 2: msl's rounds 900 µs and 1.1 ms; the channel's median
	// p99.9 (450 + 550)/2 = 500 µs.
	worst, limit, over, rounds, v := checkRounds(d, roundTarget{workload: "Overload", procs: 2, metric: latP999, other: "channel", factor: 2})
	assert.Equal(t, verdict{have: true, met: false}, v, "the second round is over 1 ms")
	assert.InDelta(t, 1.1e6, worst, 1e-6)
	assert.InDelta(t, 1e6, limit, 1e-6)
	assert.Equal(t, 1, over)
	assert.Equal(t, 2, rounds)

	_, _, over, _, v = checkRounds(d, roundTarget{workload: "Overload", procs: 2, metric: latP999, other: "channel", factor: 2.2})
	assert.Equal(t, verdict{have: true, met: true}, v, "a round equal to the limit meets it")
	assert.Equal(t, 0, over)

	_, _, _, _, v = checkRounds(parseSample(t), roundTargets[0])
	assert.Equal(t, verdict{}, v, "no channel runs")
}

func TestBaseline(t *testing.T) {
	d := parseSample(t)
	base, err := parse(strings.NewReader(baselineSample), "base.txt")
	require.NoError(t, err)
	for _, tc := range []struct {
		workload string
		procs    int
		want     verdict
	}{
		{"Sequential", 1, verdict{have: true, met: false}}, // 32 > 1.03 × 31
		{"Sequential", 2, verdict{have: true, met: true}},  // 42 ≤ 1.03 × 41
		{"Parallel", 2, verdict{have: true, met: true}},    // 25 ≤ 1.03 × 25
		{"Contended", 2, verdict{have: true, met: false}},  // 320 > 1.03 × 300
		{"Parallel", 1, verdict{}},                         // neither has runs
	} {
		_, _, v := checkBaseline(d, base, tc.workload, tc.procs)
		assert.Equal(t, tc.want, v, "%s -cpu %d", tc.workload, tc.procs)
	}
}

func TestWriteResultsReleaseThenWork(t *testing.T) {
	d := parseWithRTW(t)
	base, err := parse(strings.NewReader(baselineSample), "base.txt")
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, writeResults(&buf, d, base, meta{count: "2", rtw: "16000", baseline: "base.txt"}, "", ""))
	out := buf.String()
	for _, want := range []string{
		"- **ReleaseThenWork**: 16 goroutines over 4 items",
		"### ReleaseThenWork: wait for an item, and the whole cycle",
		"| pool | -cpu 1: ns | p50 | p99.9 | cycle p99.9 | allocs | -cpu 2: ns | p50 | p99.9 | cycle p99.9 | allocs |",
		"| msl | 23000 | 250 µs | 420 µs | 500 µs | 0 | 12000 | 140 µs | 300 µs | 4 ms | 0 |",
		"| vitess | 22900 | 53 ns | 418 ns | 120 µs | 0 | 13600 | 204 ns | 15 ms | 15 ms | 0 |",
		"| syncpool | – | – | – | – | – | – | – | – | – | – |",
		"| ReleaseThenWork, -cpu 1: ours p99.9 ≤ 1 × channel p99.9 | 420 µs | 700 µs | PASS |",
		"| ReleaseThenWork, -cpu 1: ours p99.9 < 1 × vitess p99.9 | 420 µs | 418 ns | FAIL |",
		"| ReleaseThenWork, -cpu 2: ours cycle p99.9 < 1 × vitess cycle p99.9 | 4 ms | 15 ms | PASS |",
		"| Overload, -cpu 2: ours p99.9 in every round ≤ 2 × channel median p99.9 | 2 | 1.1 ms | 1 ms | 1 | FAIL |",
		"Against the baseline `base.txt`",
		"| Sequential, -cpu 1: ours ≤ 1.03 × baseline | 32.0 | 31.0 | 1.0323 | ≤ 1.03 | FAIL |",
		"| Sequential, -cpu 2: ours ≤ 1.03 × baseline | 42.0 | 41.0 | 1.0244 | ≤ 1.03 | PASS |",
		"| Parallel, -cpu 1: ours ≤ 1.03 × baseline | – | – | – | ≤ 1.03 | NO DATA |",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "Contended, -cpu 1: ours ≤ 1.03 × baseline", "the cell with a target of its own")
	assert.NotContains(t, out, "ReleaseThenWork, -cpu 1: ours ahead", "not among the ns/op comparisons")
	assert.NotContains(t, out, "ReleaseThenWork: ours 0 allocs/op")
}

func TestDrawChart(t *testing.T) {
	only := func(keep func(line string) bool) string {
		var b strings.Builder
		for line := range strings.Lines(sample) {
			if !strings.HasPrefix(line, "Benchmark") || keep(line) {
				b.WriteString(line)
			}
		}
		return b.String()
	}
	for name, in := range map[string]string{
		"both panels":     sample,
		"throughput only": only(func(l string) bool { return !strings.HasPrefix(l, "BenchmarkOverload") }),
		"latency only":    only(func(l string) bool { return strings.HasPrefix(l, "BenchmarkOverload") }),
	} {
		t.Run(name, func(t *testing.T) {
			d, err := parse(strings.NewReader(in), name)
			require.NoError(t, err)
			path := filepath.Join(t.TempDir(), "chart.png")
			require.NoError(t, drawChart(d, chartProcs(d), path))

			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			img, err := png.Decode(f)
			require.NoError(t, err)
			assert.Equal(t, chartWidthPx, img.Bounds().Dx())
			assert.Equal(t, chartHeightPx, img.Bounds().Dy())
		})
	}
}

func TestFmtDur(t *testing.T) {
	for ns, want := range map[float64]string{
		-1: "–", 42: "42 ns", 999: "999 ns", 1500: "1.5 µs", 19960: "20 µs",
		588000: "588 µs", 1.154e6: "1.15 ms", 450e6: "450 ms", 2.5e9: "2.5 s",
	} {
		assert.Equal(t, want, fmtDur(ns), "fmtDur(%g)", ns)
	}
	for ns, want := range map[float64]string{
		1: "1ns", 33: "33ns", 1e3: "1µs", 1460: "1.5µs", 588e3: "588µs",
		1e6: "1ms", 1.22e6: "1.2ms", 38.3e6: "38ms", 999.7e3: "1ms", 450e6: "450ms",
	} {
		assert.Equal(t, want, fmtDurShort(ns), "fmtDurShort(%g)", ns)
	}
	for v, want := range map[float64]string{-1: "–", 500: "500", 47727: "47.7k", 1.5e6: "1.50M"} {
		assert.Equal(t, want, fmtRate(v), "fmtRate(%g)", v)
	}
}

func TestLog10Ticks(t *testing.T) {
	ticks := log10Ticks(0, 2.5)
	var labels []string
	for _, tk := range ticks {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	assert.Equal(t, []string{"1", "10", "100"}, labels)
	assert.Len(t, ticks, 3+8+8+2, "majors, 2–9 × 1 and 10, 200 and 300")
}
