package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// meta says how a set of results was produced.
type meta struct {
	date      string
	goVersion string
	cpu       string // model name, from /proc/cpuinfo
	benchCPU  string // the cpu: line of go test's output
	ncpu      int    // logical processors
	goos      string
	goarch    string
	count     string // COUNT: rounds of the whole suite
	benchtime string // BENCHTIME: -test.benchtime of each benchmark
	overload  string // OVERLOAD_LEASES: leases per run of a latency workload
	command   string // the command that produced the results
}

// speedTarget is a goal of the form: in workload at procs, our median ns/op
// is at most factor × other's. A reported target is shown with its verdict
// but not counted in the summary.
type speedTarget struct {
	workload string
	procs    int
	other    string
	factor   float64
	reported bool
}

var speedTargets = []speedTarget{
	{workload: "Sequential", procs: 2, other: "puddle", factor: 0.2},
	{workload: "Sequential", procs: 1, other: "puddle", factor: 0.2, reported: true},
	{workload: "Parallel", procs: 2, other: "puddle", factor: 0.15},
	{workload: "Parallel", procs: 2, other: "syncpool", factor: 4},
	{workload: "Contended", procs: 2, other: "puddle", factor: 0.4},
	// At one processor: against the simplest bounded pool, the floor and
	// the channel (docs/DESIGN.md, "Floors").
	{workload: "Sequential", procs: 1, other: "semaphore", factor: 0.85},
	{workload: "Parallel", procs: 1, other: "semaphore", factor: 0.85},
	{workload: "Sequential", procs: 1, other: "syncpool", factor: 1.5},
	{workload: "Parallel", procs: 1, other: "syncpool", factor: 1.5},
	{workload: "Contended", procs: 1, other: "channel", factor: 0.9},
}

// waitTarget is a goal on a latency workload at procs: our metric is at
// most factor × other's otherMetric (other may be ours: a ratio of our own
// percentiles), or, with atLeast, at least that.
type waitTarget struct {
	workload    string
	procs       int
	metric      latMetric
	other       string
	otherMetric latMetric
	factor      float64
	atLeast     bool
}

// The wait under overload (docs/DESIGN.md, "The wait path"): as short in
// the tail as the channel's, with a tail close to its own median, as a FIFO
// queue's is, and at least the channel's throughput.
var waitTargets = []waitTarget{
	{workload: "Overload", procs: 2, metric: latP999, other: "channel", otherMetric: latP999, factor: 1.5},
	{workload: "Overload", procs: 2, metric: latP999, other: ours, otherMetric: latP50, factor: 2.5},
	{workload: "Overload", procs: 2, metric: latRate, other: "channel", otherMetric: latRate, factor: 1, atLeast: true},
	{workload: "Overload", procs: 1, metric: latP999, other: "channel", otherMetric: latP999, factor: 1},
	{workload: "Overload", procs: 1, metric: latRate, other: "channel", otherMetric: latRate, factor: 1, atLeast: true},
}

var latNames = [numLatMetrics]string{"p50", "p99", "p99.9", "max", "leases/s", "work"}

func (t waitTarget) String() string {
	rel := "≤"
	if t.atLeast {
		rel = "≥"
	}
	other := t.other
	if other == ours {
		other = "ours"
	}
	return fmt.Sprintf("%s, -cpu %d: ours %s %s %g × %s %s", t.workload, t.procs, latNames[t.metric], rel, t.factor, other, latNames[t.otherMetric])
}

// checkWait evaluates t against the medians in d.
func checkWait(d *data, t waitTarget) (have, limit float64, v verdict) {
	o, ok1 := d.cell(t.workload, ours, t.procs)
	th, ok2 := d.cell(t.workload, t.other, t.procs)
	if !ok1 || !ok2 || o.lat[t.metric] < 0 || th.lat[t.otherMetric] < 0 {
		return 0, 0, verdict{}
	}
	have, limit = o.lat[t.metric], t.factor*th.lat[t.otherMetric]
	met := have <= limit
	if t.atLeast {
		met = have >= limit
	}
	return have, limit, verdict{have: true, met: met}
}

// unbounded names the pools without a bound, which no lead target counts:
// the floor, not competitors.
var unbounded = []string{"syncpool"}

// leadExempt names the throughput cells a lead target skips: those with a
// target of their own against a named pool (Contended at -cpu 1, against
// the channel).
var leadExempt = []key{{workload: "Contended", pool: ours, procs: 1}}

// checkLead evaluates, for one throughput workload at procs, "ours is
// ahead of every bounded pool": our median ns/op is below each of theirs.
// It returns the fastest of them.
func checkLead(d *data, workload string, procs int) (o, best cell, bestPool string, v verdict) {
	o, ok := d.cell(workload, ours, procs)
	if !ok {
		return o, best, "", verdict{}
	}
	for _, pool := range d.pools {
		if pool == ours || slices.Contains(unbounded, pool) {
			continue
		}
		if c, ok := d.cell(workload, pool, procs); ok && (bestPool == "" || c.ns < best.ns) {
			best, bestPool = c, pool
		}
	}
	if bestPool == "" {
		return o, best, "", verdict{}
	}
	return o, best, bestPool, verdict{have: true, met: o.ns < best.ns}
}

// spreadTarget is a goal of the form: in workload at procs, our slowest run
// takes at most limit × our fastest: the figure does not swing from run to
// run.
type spreadTarget struct {
	workload string
	procs    int
	limit    float64
}

var spreadTargets = []spreadTarget{
	{workload: "Contended", procs: 2, limit: 1.5},
}

func (t spreadTarget) String() string {
	return fmt.Sprintf("%s, -cpu %d: ours, slowest run ≤ %g × fastest", t.workload, t.procs, t.limit)
}

// checkSpread evaluates t against our runs in d: their median, fastest and
// slowest ns/op. It needs two runs at least.
func checkSpread(d *data, t spreadTarget) (med, lo, hi float64, v verdict) {
	s := d.runs[key{t.workload, ours, t.procs}]
	if s == nil || len(s.ns) < 2 {
		return 0, 0, 0, verdict{}
	}
	lo, hi = slices.Min(s.ns), slices.Max(s.ns)
	return median(s.ns), lo, hi, verdict{have: true, met: hi <= t.limit*lo}
}

func (t speedTarget) String() string {
	return fmt.Sprintf("%s, -cpu %d: ours ≤ %g × %s", t.workload, t.procs, t.factor, t.other)
}

// verdict is a target's outcome. have is false when the data lacks a
// benchmark the target needs; such a target is not met.
type verdict struct {
	have, met bool
}

func (v verdict) String() string {
	switch {
	case !v.have:
		return "NO DATA"
	case v.met:
		return "PASS"
	}
	return "FAIL"
}

// checkSpeed evaluates t against the medians in d.
func checkSpeed(d *data, t speedTarget) (ourCell, theirCell cell, r ratio, v verdict) {
	o, ok1 := d.cell(t.workload, ours, t.procs)
	th, ok2 := d.cell(t.workload, t.other, t.procs)
	r, ok3 := d.compare(t.workload, t.other, t.procs)
	if !ok1 || !ok2 || !ok3 {
		return o, th, r, verdict{}
	}
	return o, th, r, verdict{have: true, met: o.ns <= t.factor*th.ns}
}

// checkAllocs evaluates "ours makes 0 allocs/op" for one workload over
// every GOMAXPROCS in d, from the medians.
func checkAllocs(d *data, workload string) (cells []cell, v verdict) {
	v = verdict{have: true, met: true}
	for _, p := range d.procs {
		c, ok := d.cell(workload, ours, p)
		if !ok || c.allocs < 0 {
			v.have = false
			c = cell{allocs: -1, maxAllocs: -1}
		} else if c.allocs != 0 {
			v.met = false
		}
		cells = append(cells, c)
	}
	if !v.have {
		v.met = false
	}
	return cells, v
}

// writeResults writes RESULTS.md: provenance, a table per workload, the
// targets and benchstat's own output.
func writeResults(w io.Writer, d *data, m meta, chart, benchstat string) error {
	ew := &errWriter{w: w}
	p := ew.printf

	p("# Benchmarks: msl vs other Go pools\n\n")
	p("Generated by `bench/cmd/report` from `bench/raw.txt`; do not edit by hand.\n\n")

	p("## How this was produced\n\n")
	p("- Command: `%s` (from the repository root; any directory works)\n", m.command)
	p("- Date: %s\n", m.date)
	p("- Go: %s\n", m.goVersion)
	p("- CPU: %s (%d logical CPUs)", m.cpu, m.ncpu)
	if m.benchCPU != "" && m.benchCPU != m.cpu {
		p("; go test calls it %q", m.benchCPU)
	}
	p("\n")
	p("- GOOS/GOARCH: %s/%s\n", m.goos, m.goarch)
	p("- COUNT=%s rounds, BENCHTIME=%s per benchmark, Overload a fixed OVERLOAD_LEASES=%s leases per run (`-test.benchtime %sx`); %s\n", m.count, m.benchtime, m.overload, m.overload, runsPerCell(d))
	p("- Each round runs every benchmark once (`-test.count 1 -test.cpu 1,2`), so the pools are interleaved in time; each figure below is the median over the rounds.\n\n")
	p("Workloads (items are separately allocated 128-byte structs, one cache line apart at least):\n\n")
	p("- **Sequential**: one goroutine leases and releases in a `b.Loop()` loop; 16 items, created before the timer starts.\n")
	p("- **Parallel**: `b.RunParallel`, one goroutine per P; 16 items.\n")
	p("- **Contended**: `b.RunParallel` with `b.SetParallelism(4)` over 2 items: most leases wait for a release.\n")
	p("- **Overload**: 64 goroutines over 8 items, each holding its item for about 20 µs of CPU work (a spin loop calibrated when the benchmark starts): nearly every lease waits. Reported as the wait for an item, from calling lease to holding it.\n\n")
	p("Pools: **msl** is this module; **puddle** is github.com/jackc/puddle/v2; **commons** is github.com/jolestar/go-commons-pool/v2; **vitess** is vitess.io/vitess/go/pools/smartconnpool; **channel** is a buffered channel of items; **semaphore** is golang.org/x/sync/semaphore plus a mutex-guarded stack; **syncpool** is sync.Pool, unbounded and ctx-less: the floor, not a competitor.\n\n")
	if chart != "" {
		p("![ns/op per pool and workload, and the Overload wait percentiles, at the highest -cpu, log scale](%s)\n\n", chart)
	}

	throughput, latency := d.split()
	p("## Results\n\n")
	p("Medians per pool. ns = ns/op; allocs = allocs/op; B = B/op; theirs/ours = the pool's ns/op over msl's (above 1: msl is faster); ours/theirs is its inverse.\n\n")
	for _, wl := range throughput {
		p("### %s\n\n", wl)
		p("| pool |")
		for _, procs := range d.procs {
			p(" -cpu %d: ns | allocs | B | theirs/ours | ours/theirs |", procs)
		}
		p("\n| --- |")
		for range d.procs {
			p(" ---: | ---: | ---: | ---: | ---: |")
		}
		p("\n")
		for _, pool := range d.pools {
			p("| %s |", pool)
			for _, procs := range d.procs {
				c, ok := d.cell(wl, pool, procs)
				if !ok {
					p(" – | – | – | – | – |")
					continue
				}
				p(" %s | %s | %s |", fmtNs(c.ns), fmtCount(c.allocs), fmtCount(c.bytes))
				if pool == ours {
					p(" base | base |")
				} else if r, ok := d.compare(wl, pool, procs); ok {
					p(" %.2f | %.2f |", r.theirsOverOurs, r.oursOverTheirs)
				} else {
					p(" – | – |")
				}
			}
			p("\n")
		}
		p("\n")
	}
	for _, wl := range latency {
		writeLatency(p, d, wl)
	}

	p("## Targets\n\n")
	p("Computed from the medians above each time the report runs.\n\n")
	p("| target | ours ns/op | theirs ns/op | ours/theirs | limit | result |\n")
	p("| --- | ---: | ---: | ---: | ---: | --- |\n")
	met, counted := 0, 0
	tally := func(v verdict) { // a counted target's verdict
		counted++
		if v.met {
			met++
		}
	}
	for _, t := range speedTargets {
		o, th, r, v := checkSpeed(d, t)
		label := t.String()
		if t.reported {
			label += " (reported, not counted)"
		} else {
			tally(v)
		}
		if !v.have {
			p("| %s | – | – | – | ≤ %.2f | %s |\n", label, t.factor, v)
			continue
		}
		p("| %s | %s | %s | %.4f | ≤ %.2f | %s |\n", label, fmtNs(o.ns), fmtNs(th.ns), r.oursOverTheirs, t.factor, v)
	}
	p("\n| target | ours ns/op, median | fastest run | slowest run | slowest/fastest | limit | result |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, t := range spreadTargets {
		med, lo, hi, v := checkSpread(d, t)
		tally(v)
		if !v.have {
			p("| %s | – | – | – | – | ≤ %.2f | %s |\n", t, t.limit, v)
			continue
		}
		p("| %s | %s | %s | %s | %.2f | ≤ %.2f | %s |\n", t, fmtNs(med), fmtNs(lo), fmtNs(hi), hi/lo, t.limit, v)
	}
	p("\n| target | ours | limit | result |\n")
	p("| --- | ---: | ---: | --- |\n")
	for _, t := range waitTargets {
		have, limit, v := checkWait(d, t)
		tally(v)
		if !v.have {
			p("| %s | – | – | %s |\n", t, v)
			continue
		}
		f := fmtDur
		if t.metric == latRate {
			f = fmtRate
		}
		p("| %s | %s | %s | %s |\n", t, f(have), f(limit), v)
	}
	p("\n| target | ours ns/op | fastest bounded pool | its ns/op | result |\n")
	p("| --- | ---: | --- | ---: | --- |\n")
	for _, wl := range throughput {
		for _, procs := range d.procs {
			if slices.Contains(leadExempt, key{wl, ours, procs}) {
				continue
			}
			o, best, pool, v := checkLead(d, wl, procs)
			tally(v)
			if !v.have {
				p("| %s, -cpu %d: ours ahead of every bounded pool | – | – | – | %s |\n", wl, procs, v)
				continue
			}
			p("| %s, -cpu %d: ours ahead of every bounded pool | %s | %s | %s | %s |\n", wl, procs, fmtNs(o.ns), pool, fmtNs(best.ns), v)
		}
	}
	p("\n| target | ours allocs/op, median per -cpu | max over runs | result |\n")
	p("| --- | --- | --- | --- |\n")
	// The latency workloads have no targets: their allocs/op are in their
	// tables.
	for _, wl := range throughput {
		cells, v := checkAllocs(d, wl)
		tally(v)
		var meds, maxes []string
		for i, c := range cells {
			meds = append(meds, fmt.Sprintf("%s (-cpu %d)", fmtCount(c.allocs), d.procs[i]))
			maxes = append(maxes, fmtCount(c.maxAllocs))
		}
		p("| %s: ours 0 allocs/op | %s | %s | %s |\n", wl, strings.Join(meds, ", "), strings.Join(maxes, ", "), v)
	}
	p("\n**%d of %d targets met.**\n\n", met, counted)

	p("## benchstat\n\n")
	p("`benchstat -col /pool` over the same raw.txt (msl is the base column):\n\n")
	p("```\n%s", benchstat)
	if !strings.HasSuffix(benchstat, "\n") {
		p("\n")
	}
	p("```\n")
	return ew.err
}

// writeLatency writes the table of a latency workload: per pool and -cpu,
// the medians over the runs of each run's wait percentiles and maximum,
// throughput,
// work per lease and allocs/op.
func writeLatency(p func(string, ...any), d *data, wl string) {
	p("### %s: wait for an item\n\n", wl)
	p("Medians over the runs of each run's percentiles of the wait, from calling lease (Lease, Acquire, BorrowObject, Get) to holding an item; max = the longest wait, which shows starvation that the percentiles cannot (each goroutine makes the same number of leases, so a goroutine starved for most of the run adds one long wait, not many); leases/s = leases completed per second of wall time; work = the median measured work per lease while holding the item (the spin calibrated to 20 µs); allocs = allocs/op. syncpool has no bound, so it never waits: its figures are the cost of `Get`, the floor, not a competitor.\n\n")
	p("| pool |")
	for _, procs := range d.procs {
		p(" -cpu %d: p50 | p99 | p99.9 | max | leases/s | work | allocs |", procs)
	}
	p("\n| --- |")
	for range d.procs {
		p(" ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	}
	p("\n")
	for _, pool := range d.pools {
		p("| %s |", pool)
		for _, procs := range d.procs {
			c, ok := d.cell(wl, pool, procs)
			if !ok {
				p(" – | – | – | – | – | – | – |")
				continue
			}
			p(" %s | %s | %s | %s | %s | %s | %s |", fmtDur(c.lat[latP50]), fmtDur(c.lat[latP99]), fmtDur(c.lat[latP999]),
				fmtDur(c.lat[latMax]), fmtRate(c.lat[latRate]), fmtDur(c.lat[latWork]), fmtCount(c.allocs))
		}
		p("\n")
	}
	p("\n")
}

// runsPerCell describes how many runs each benchmark has: "6 runs each", or
// a range when they differ.
func runsPerCell(d *data) string {
	lo, hi := -1, -1
	for _, s := range d.runs {
		n := len(s.ns)
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	switch {
	case lo == 1 && hi == 1:
		return "1 run of each benchmark"
	case lo == hi:
		return fmt.Sprintf("%d runs of each benchmark", lo)
	}
	return fmt.Sprintf("%d to %d runs of each benchmark", lo, hi)
}

// fmtNs formats nanoseconds with about three significant digits.
func fmtNs(ns float64) string {
	switch {
	case ns < 10:
		return fmt.Sprintf("%.2f", ns)
	case ns < 100:
		return fmt.Sprintf("%.1f", ns)
	}
	return fmt.Sprintf("%.0f", ns)
}

// fmtDur formats nanoseconds as a duration with about three significant
// digits in the unit that suits it; a negative value means not measured.
func fmtDur(ns float64) string {
	switch {
	case ns < 0:
		return "–"
	case ns < 1e3:
		return fmt.Sprintf("%.0f ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	}
	return fmt.Sprintf("%.3g s", ns/1e9)
}

// fmtRate formats a rate per second; a negative value means not measured.
func fmtRate(v float64) string {
	switch {
	case v < 0:
		return "–"
	case v < 1e3:
		return fmt.Sprintf("%.0f", v)
	case v < 1e6:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.2fM", v/1e6)
}

// fmtCount formats allocs/op or B/op; a negative value means not measured.
func fmtCount(v float64) string {
	switch {
	case v < 0:
		return "–"
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.1f", v) // a median of two differing runs
}

// errWriter keeps the first write error, so writeResults can print freely
// and check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
