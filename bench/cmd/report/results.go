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
	overload  string // OVERLOAD_LEASES: leases per run of Overload
	rtw       string // RTW_LEASES: leases per run of ReleaseThenWork
	baseline  string // the baseline's file, or "" when none was given
	command   string // the command that produced the results
}

// speedTarget is a goal of the form: in workload at procs, our median ns/op
// is at most factor × other's. A target with an uncounted reason
// ("reported", "stretch") is shown with its verdict but not counted in the
// summary.
type speedTarget struct {
	workload  string
	procs     int
	other     string
	factor    float64
	uncounted string
}

var speedTargets = []speedTarget{
	{workload: "Sequential", procs: 2, other: "puddle", factor: 0.2},
	{workload: "Sequential", procs: 1, other: "puddle", factor: 0.2, uncounted: "reported"},
	{workload: "Parallel", procs: 2, other: "puddle", factor: 0.15},
	{workload: "Parallel", procs: 2, other: "syncpool", factor: 4},
	{workload: "Contended", procs: 2, other: "puddle", factor: 0.4},
	// At one processor: against the simplest bounded pool, the floor and
	// the channel (bench/JOURNAL.md, "Floors").
	{workload: "Sequential", procs: 1, other: "semaphore", factor: 0.85},
	{workload: "Parallel", procs: 1, other: "semaphore", factor: 0.85},
	{workload: "Sequential", procs: 1, other: "syncpool", factor: 1.5},
	{workload: "Parallel", procs: 1, other: "syncpool", factor: 1.5},
	{workload: "Contended", procs: 1, other: "channel", factor: 1},
	{workload: "Contended", procs: 1, other: "channel", factor: 0.9, uncounted: "stretch"},
}

// waitTarget is a goal on a latency workload at procs: our metric is at
// most factor × other's otherMetric (other may be ours: a ratio of our own
// percentiles), or, with atLeast, at least that, or, with below, less than
// that.
type waitTarget struct {
	workload    string
	procs       int
	metric      latMetric
	other       string
	otherMetric latMetric
	factor      float64
	atLeast     bool
	below       bool
}

// The wait under overload (docs/DESIGN.md, "The wait path"): as short in
// the tail as the channel's, with a tail close to its own median, as a FIFO
// queue's is, and at least the channel's throughput. Then ReleaseThenWork's.
var waitTargets = append([]waitTarget{
	{workload: "Overload", procs: 2, metric: latP999, other: "channel", otherMetric: latP999, factor: 1.5},
	{workload: "Overload", procs: 2, metric: latP999, other: ours, otherMetric: latP50, factor: 2.5},
	{workload: "Overload", procs: 2, metric: latRate, other: "channel", otherMetric: latRate, factor: 1, atLeast: true},
	{workload: "Overload", procs: 1, metric: latP999, other: "channel", otherMetric: latP999, factor: 1},
	{workload: "Overload", procs: 1, metric: latRate, other: "channel", otherMetric: latRate, factor: 1, atLeast: true},
}, rtwTargets()...)

// rtwTargets are the targets of the hand-off to a waiter that cannot run
// yet (bench/README.md, "The ReleaseThenWork workload"): at -cpu 1 and 2,
// the wait's and the cycle's p99.9 at most the channel's and below
// puddle's and vitess's.
func rtwTargets() []waitTarget {
	var ts []waitTarget
	for _, procs := range []int{1, 2} {
		for _, m := range []latMetric{latP999, latCycleP999} {
			ts = append(ts,
				waitTarget{workload: "ReleaseThenWork", procs: procs, metric: m, other: "channel", otherMetric: m, factor: 1},
				waitTarget{workload: "ReleaseThenWork", procs: procs, metric: m, other: "puddle", otherMetric: m, factor: 1, below: true},
				waitTarget{workload: "ReleaseThenWork", procs: procs, metric: m, other: "vitess", otherMetric: m, factor: 1, below: true})
		}
	}
	return ts
}

var latNames = [numLatMetrics]string{"p50", "p99", "p99.9", "max", "leases/s", "work", "cycle p99.9"}

func (t waitTarget) String() string {
	rel := "≤"
	switch {
	case t.atLeast:
		rel = "≥"
	case t.below:
		rel = "<"
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
	switch {
	case t.atLeast:
		met = have >= limit
	case t.below:
		met = have < limit
	}
	return have, limit, verdict{have: true, met: met}
}

// roundTarget is a goal on every round of a latency workload at procs: in
// each of our runs, metric is at most factor × the median over the rounds
// of other's. A median target lets one slow round pass; this one does not,
// so a tail that is short only on the good rounds fails it.
type roundTarget struct {
	workload string
	procs    int
	metric   latMetric
	other    string
	factor   float64
}

var roundTargets = []roundTarget{
	{workload: "Overload", procs: 2, metric: latP999, other: "channel", factor: 2},
}

func (t roundTarget) String() string {
	return fmt.Sprintf("%s, -cpu %d: ours %s in every round ≤ %g × %s median %s", t.workload, t.procs, latNames[t.metric], t.factor, t.other, latNames[t.metric])
}

// checkRounds evaluates t against our runs in d: the slowest round's
// value, the limit, and how many rounds exceeded it of how many.
func checkRounds(d *data, t roundTarget) (worst, limit float64, over, rounds int, v verdict) {
	o := d.runs[key{t.workload, ours, t.procs}]
	th, ok := d.cell(t.workload, t.other, t.procs)
	if o == nil || len(o.lat[t.metric]) == 0 || !ok || th.lat[t.metric] < 0 {
		return 0, 0, 0, 0, verdict{}
	}
	limit = t.factor * th.lat[t.metric]
	for _, x := range o.lat[t.metric] {
		if x > limit {
			over++
		}
	}
	return slices.Max(o.lat[t.metric]), limit, over, len(o.lat[t.metric]), verdict{have: true, met: over == 0}
}

// baselineSlack is how much slower than the baseline our ns/op in a cell
// may be: 3 %, about what rounds of one build differ by in the quieter
// cells.
const baselineSlack = 1.03

// checkBaseline evaluates "ours, in workload at procs, is no more than 3 %
// slower than in the baseline" from the medians of d and of base.
func checkBaseline(d, base *data, workload string, procs int) (o, b cell, v verdict) {
	o, ok1 := d.cell(workload, ours, procs)
	b, ok2 := base.cell(workload, ours, procs)
	if !ok1 || !ok2 || b.ns <= 0 {
		return o, b, verdict{}
	}
	return o, b, verdict{have: true, met: o.ns <= baselineSlack*b.ns}
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
// targets and benchstat's own output. base is the baseline's results, or
// nil when none was given (m.baseline names its file).
func writeResults(w io.Writer, d, base *data, m meta, chart, benchstat string) error {
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
	p("- COUNT=%s rounds, BENCHTIME=%s per benchmark, Overload a fixed OVERLOAD_LEASES=%s leases per run (`-test.benchtime %sx`), ReleaseThenWork a fixed RTW_LEASES=%s (`-test.benchtime %sx`); %s\n", m.count, m.benchtime, m.overload, m.overload, m.rtw, m.rtw, runsPerCell(d))
	p("- Each round runs every benchmark once (`-test.count 1 -test.cpu 1,2`), so the pools are interleaved in time; each figure below is the median over the rounds.\n\n")
	p("Workloads (items are separately allocated 128-byte structs, one cache line apart at least):\n\n")
	p("- **Sequential**: one goroutine leases and releases in a `b.Loop()` loop; 16 items, created before the timer starts.\n")
	p("- **Parallel**: `b.RunParallel`, one goroutine per P; 16 items.\n")
	p("- **Contended**: `b.RunParallel` with `b.SetParallelism(4)` over 2 items: most leases wait for a release.\n")
	p("- **Overload**: 64 goroutines over 8 items, each holding its item for about 20 µs of CPU work (a spin loop calibrated when the benchmark starts): nearly every lease waits. Reported as the wait for an item, from calling lease to holding it.\n")
	p("- **ReleaseThenWork**: 16 goroutines over 4 items, each holding its item for about 2 µs of CPU work, then releasing it and computing for about 20 µs before its next lease; each run starts with every item held until all goroutines have called lease. Reported as the wait for an item and as the whole cycle, lease to the end of the work after the release.\n\n")
	p("Pools: **msl** is this module; **puddle** is github.com/jackc/puddle/v2; **commons** is github.com/jolestar/go-commons-pool/v2; **vitess** is vitess.io/vitess/go/pools/smartconnpool; **channel** is a buffered channel of items; **semaphore** is golang.org/x/sync/semaphore plus a mutex-guarded stack; **syncpool** is sync.Pool, unbounded and ctx-less: the floor, not a competitor.\n\n")
	if chart != "" {
		p("![ns/op per pool and workload, and the Overload wait percentiles, at the highest -cpu, log scale](%s)\n\n", chart)
	}

	throughput, latency, cycle := d.split()
	p("## Results\n\n")
	p("Medians per pool. ns = ns/op; allocs = allocs/op; B = B/op; theirs/ours = the pool's ns/op over msl's (above 1: msl is faster); ours/theirs is its inverse.\n\n")
	for _, wl := range throughput {
		p("### %s\n\n", wl)
		writeTable(p, d, wl, []string{"ns", "allocs", "B", "theirs/ours", "ours/theirs"}, func(pool string, procs int, c cell) []string {
			cols := []string{fmtNs(c.ns), fmtCount(c.allocs), fmtCount(c.bytes)}
			if pool == ours {
				return append(cols, "base", "base")
			}
			if r, ok := d.compare(wl, pool, procs); ok {
				return append(cols, fmt.Sprintf("%.2f", r.theirsOverOurs), fmt.Sprintf("%.2f", r.oursOverTheirs))
			}
			return append(cols, "–", "–")
		})
	}
	for _, wl := range latency {
		writeLatency(p, d, wl)
	}
	for _, wl := range cycle {
		writeCycle(p, d, wl)
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
		if t.uncounted != "" {
			label += " (" + t.uncounted + ", not counted)"
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
	p("\n| target | rounds | slowest round | limit | rounds over | result |\n")
	p("| --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, t := range roundTargets {
		worst, limit, over, rounds, v := checkRounds(d, t)
		tally(v)
		if !v.have {
			p("| %s | – | – | – | – | %s |\n", t, v)
			continue
		}
		p("| %s | %d | %s | %s | %d | %s |\n", t, rounds, fmtDur(worst), fmtDur(limit), over, v)
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
	writeBaseline(p, d, base, m.baseline, throughput, tally)
	p("\n| target | ours allocs/op, median per -cpu | max over runs | result |\n")
	p("| --- | --- | --- | --- |\n")
	// The latency and cycle workloads have no allocation targets: their
	// allocs/op are in their tables.
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

// writeBaseline writes the baseline targets, for the cells the lead
// targets cover: ours no more than 3 % slower than in base. Without a
// baseline it says they were skipped, and counts nothing.
func writeBaseline(p func(string, ...any), d, base *data, file string, throughput []string, tally func(verdict)) {
	if base == nil {
		p("\nNo baseline given (`-baseline`): the targets against a baseline were skipped.\n")
		return
	}
	p("\nAgainst the baseline `%s`, our ns/op in every cell the lead targets cover (a baseline from another day or machine compares the machines, not the builds):\n\n", file)
	p("| target | ours ns/op | baseline ns/op | ours/baseline | limit | result |\n")
	p("| --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, wl := range throughput {
		for _, procs := range d.procs {
			if slices.Contains(leadExempt, key{wl, ours, procs}) {
				continue
			}
			o, b, v := checkBaseline(d, base, wl, procs)
			tally(v)
			label := fmt.Sprintf("%s, -cpu %d: ours ≤ %g × baseline", wl, procs, baselineSlack)
			if !v.have {
				p("| %s | – | – | – | ≤ %.2f | %s |\n", label, baselineSlack, v)
				continue
			}
			p("| %s | %s | %s | %.4f | ≤ %.2f | %s |\n", label, fmtNs(o.ns), fmtNs(b.ns), o.ns/b.ns, baselineSlack, v)
		}
	}
}

// writeCycle writes the table of a cycle workload: per pool and -cpu, the
// medians over the runs of ns/op, each run's p50 and p99.9 of the wait,
// its p99.9 of the cycle, and allocs/op.
func writeCycle(p func(string, ...any), d *data, wl string) {
	p("### %s: wait for an item, and the whole cycle\n\n", wl)
	p("Medians over the runs. ns = ns/op, wall time per lease (per cycle); p50, p99.9 = each run's percentiles of the wait, from calling lease to holding an item; cycle p99.9 = each run's p99.9 of the whole cycle, from calling lease to the end of the work after the release, what a caller's request sees (about 22 µs when nothing waits); allocs = allocs/op. A pool that hands a released item to a waiter that cannot run yet keeps its waits long (a convoy); one that yields its processor to the waiter moves the delay into the releaser's cycle. While no goroutine waits in the pool, the goroutines share the processors by the scheduler's time slice, which puts tens of ms into the cycle's tail whatever the pool: compare the cycle between pools within a run.\n\n")
	writeTable(p, d, wl, []string{"ns", "p50", "p99.9", "cycle p99.9", "allocs"}, func(_ string, _ int, c cell) []string {
		return []string{fmtNs(c.ns), fmtDur(c.lat[latP50]), fmtDur(c.lat[latP999]), fmtDur(c.lat[latCycleP999]), fmtCount(c.allocs)}
	})
}

// writeLatency writes the table of a latency workload: per pool and -cpu,
// the medians over the runs of each run's wait percentiles and maximum,
// throughput,
// work per lease and allocs/op.
func writeLatency(p func(string, ...any), d *data, wl string) {
	p("### %s: wait for an item\n\n", wl)
	p("Medians over the runs of each run's percentiles of the wait, from calling lease (Lease, Acquire, BorrowObject, Get) to holding an item; max = the longest wait, which shows starvation that the percentiles cannot (each goroutine makes the same number of leases, so a goroutine starved for most of the run adds one long wait, not many); leases/s = leases completed per second of wall time; work = the median measured work per lease while holding the item (the spin calibrated to 20 µs); allocs = allocs/op. syncpool has no bound, so it never waits: its figures are the cost of `Get`, the floor, not a competitor.\n\n")
	writeTable(p, d, wl, []string{"p50", "p99", "p99.9", "max", "leases/s", "work", "allocs"}, func(_ string, _ int, c cell) []string {
		return []string{fmtDur(c.lat[latP50]), fmtDur(c.lat[latP99]), fmtDur(c.lat[latP999]),
			fmtDur(c.lat[latMax]), fmtRate(c.lat[latRate]), fmtDur(c.lat[latWork]), fmtCount(c.allocs)}
	})
}

// writeTable writes one workload's table: a row per pool, and per -cpu the
// columns cols, which row fills from the pool's cell (a dash for each
// column of a cell with no runs).
func writeTable(p func(string, ...any), d *data, wl string, cols []string, row func(pool string, procs int, c cell) []string) {
	p("| pool |")
	for _, procs := range d.procs {
		p(" -cpu %d: %s |", procs, strings.Join(cols, " | "))
	}
	p("\n| --- |")
	for range d.procs {
		p("%s", strings.Repeat(" ---: |", len(cols)))
	}
	p("\n")
	for _, pool := range d.pools {
		p("| %s |", pool)
		for _, procs := range d.procs {
			vals := slices.Repeat([]string{"–"}, len(cols))
			if c, ok := d.cell(wl, pool, procs); ok {
				vals = row(pool, procs, c)
			}
			p(" %s |", strings.Join(vals, " | "))
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
