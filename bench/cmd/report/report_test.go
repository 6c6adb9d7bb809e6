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
	throughput, latency := d.split()
	assert.Equal(t, []string{"Sequential", "Parallel", "Contended"}, throughput)
	assert.Equal(t, []string{"Overload"}, latency)
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
	assert.Equal(t, [numLatMetrics]float64{-1, -1, -1, -1, -1, -1}, c.lat, "not measured")
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
	require.NoError(t, writeResults(&buf, d, meta{
		date: "2026-01-02 03:04 UTC", goVersion: "go version go1.26 linux/amd64",
		cpu: "Test CPU", ncpu: 2, goos: "linux", goarch: "amd64",
		count: "2", benchtime: "1s", overload: "64000", command: "COUNT=2 BENCHTIME=1s bench/run.sh",
	}, "chart.png", bs))
	out := buf.String()

	for _, want := range []string{
		"`COUNT=2 BENCHTIME=1s bench/run.sh`",
		"go version go1.26 linux/amd64",
		"Test CPU (2 logical CPUs)",
		"2 runs of each benchmark",
		"![", "(chart.png)",
		"### Sequential", "### Parallel", "### Contended", "### Overload: wait for an item",
		"OVERLOAD_LEASES=64000 leases per run (`-test.benchtime 64000x`)",
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
		"| Contended, -cpu 1: ours ≤ 0.9 × channel | – | – | – | ≤ 0.90 | NO DATA |",
		// Overload -cpu 2, msl: p99.9 1 ms ≤ 2.5 × its p50 of 600 µs.
		"| Overload, -cpu 2: ours p99.9 ≤ 2.5 × ours p50 | 1 ms | 1.5 ms | PASS |",
		"| Overload, -cpu 2: ours p99.9 ≤ 1.5 × channel p99.9 | – | – | NO DATA |",
		// Contended -cpu 2: 320 ns against puddle's 620; syncpool, unbounded, is no rival.
		"| Contended, -cpu 2: ours ahead of every bounded pool | 320 | puddle | 620 | PASS |",
		"| Parallel, -cpu 1: ours ahead of every bounded pool | – | – | – | NO DATA |",
		// Contended -cpu 2, msl: runs of 300 and 340 ns.
		"| Contended, -cpu 2: ours, slowest run ≤ 1.5 × fastest | 320 | 300 | 340 | 1.13 | ≤ 1.50 | PASS |",
		"**9 of 23 targets met.**",
		"```\n" + bs + "```\n",
	} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, out, "(reported, not counted)")
	assert.NotContains(t, out, "Overload: ours 0 allocs/op", "a latency workload has no targets")
	assert.NotContains(t, out, "### Overload\n", "a latency workload has no ns/op table")
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
