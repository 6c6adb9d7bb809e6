package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// poolOrder is the order pools are listed in: ours first, as the base of
// every ratio, then the libraries, then the hand-written pools, then the
// floor. A pool not named here goes after them, in the order first seen.
var poolOrder = []string{"msl", "puddle", "commons", "vitess", "channel", "semaphore", "syncpool"}

// ours names the pool every ratio compares with.
const ours = "msl"

// key identifies one benchmark: a workload (the benchmark's name without
// "Benchmark" and without the pool), a pool and a GOMAXPROCS.
type key struct {
	workload string
	pool     string
	procs    int
}

// samples holds one benchmark's per-run measurements, in input order (a
// run a round, as run.sh runs them). The latency metrics (lat) are there
// only for workloads that report them, such as Overload and
// ReleaseThenWork; they are in ns, leases/s for the rate.
type samples struct {
	ns, allocs, bytes []float64
	lat               [numLatMetrics][]float64
}

// A latency workload reports, besides ns/op, the percentiles and the
// maximum of the wait for an item, its throughput and the work done per
// lease, through b.ReportMetric; a cycle workload (ReleaseThenWork)
// reports the wait's p50 and p99.9 and the p99.9 of the whole cycle, lease
// to the end of the work after the release. latMetric indexes them all.
type latMetric int

const (
	latP50 latMetric = iota
	latP99
	latP999
	latMax
	latRate // leases/s
	latWork // median work per lease, ns
	latCycleP999
	numLatMetrics
)

// latUnits are the units of the latency metrics as benchfmt gives them:
// it tidies "p50-ns" to "p50-sec" (a factor of 1e-9), as it does ns/op,
// and leaves "leases/s" alone. latScale turns them back into ns.
var (
	latUnits = [numLatMetrics]string{"p50-sec", "p99-sec", "p99.9-sec", "max-sec", "leases/s", "work-sec", "cycle-p99.9-sec"}
	latScale = [numLatMetrics]float64{1e9, 1e9, 1e9, 1e9, 1, 1e9, 1e9}
)

// data is everything read from a benchmark output file.
type data struct {
	runs      map[key]*samples
	workloads []string // in the order first seen
	pools     []string // in poolOrder, then the order first seen
	procs     []int    // ascending
	config    map[string]string
}

// cell is the summary of one benchmark: the median of each measurement over
// n runs. allocs and bytes are -1 when the runs did not report them, as is
// each lat entry (the median of that metric's per-run values).
type cell struct {
	n                 int
	ns, allocs, bytes float64
	maxAllocs         float64
	lat               [numLatMetrics]float64
}

// parse reads `go test -bench` output (any number of runs, concatenated).
// Benchmarks must be named BenchmarkWORKLOAD/pool=NAME[-PROCS]; a
// benchmark without a pool= part is an error, as is any malformed
// benchmark line, so a broken run cannot pass for a short one.
func parse(r io.Reader, fileName string) (*data, error) {
	d := &data{runs: map[key]*samples{}, config: map[string]string{}}
	var errs []error
	br := benchfmt.NewReader(r, fileName)
	for br.Scan() {
		switch rec := br.Result().(type) {
		case *benchfmt.SyntaxError:
			errs = append(errs, rec)
		case *benchfmt.Result:
			k, err := keyOf(rec.Name)
			if err != nil {
				file, line := rec.Pos()
				errs = append(errs, fmt.Errorf("%s:%d: %w", file, line, err))
				continue
			}
			sec, ok := rec.Value("sec/op") // benchfmt tidies ns/op to sec/op
			if !ok {
				file, line := rec.Pos()
				errs = append(errs, fmt.Errorf("%s:%d: %s has no ns/op", file, line, rec.Name))
				continue
			}
			s := d.runs[k]
			if s == nil {
				s = &samples{}
				d.runs[k] = s
				d.note(k)
			}
			s.ns = append(s.ns, sec*1e9)
			if v, ok := rec.Value("allocs/op"); ok {
				s.allocs = append(s.allocs, v)
			}
			if v, ok := rec.Value("B/op"); ok {
				s.bytes = append(s.bytes, v)
			}
			for m, unit := range latUnits {
				if v, ok := rec.Value(unit); ok {
					s.lat[m] = append(s.lat[m], v*latScale[m])
				}
			}
			for _, c := range rec.Config {
				if c.File {
					d.config[c.Key] = strings.TrimSpace(string(c.Value))
				}
			}
		}
	}
	if err := br.Err(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 && len(d.runs) == 0 {
		errs = append(errs, fmt.Errorf("%s: no benchmark results", fileName))
	}
	d.sortPools()
	slices.Sort(d.procs)
	return d, errors.Join(errs...)
}

// keyOf splits a benchmark name such as
// "BenchmarkParallel/pool=msl-2" into its workload, pool and GOMAXPROCS.
// go test leaves out the -PROCS suffix when GOMAXPROCS is 1.
func keyOf(name benchfmt.Name) (key, error) {
	base, parts := name.Parts()
	k := key{workload: strings.TrimPrefix(string(base), "Benchmark"), procs: 1}
	for _, p := range parts {
		s := string(p)
		switch {
		case strings.HasPrefix(s, "-"):
			n, err := strconv.Atoi(s[1:])
			if err != nil || n < 1 {
				return key{}, fmt.Errorf("benchmark %s: bad GOMAXPROCS suffix %q", name, s)
			}
			k.procs = n
		case strings.HasPrefix(s, "/pool="):
			k.pool = strings.TrimPrefix(s, "/pool=")
		default:
			k.workload += s // another sub-benchmark level: part of the workload
		}
	}
	if k.pool == "" {
		return key{}, fmt.Errorf("benchmark %s has no /pool= part", name)
	}
	return k, nil
}

// note records a key's workload, pool and GOMAXPROCS the first time seen.
func (d *data) note(k key) {
	if !slices.Contains(d.workloads, k.workload) {
		d.workloads = append(d.workloads, k.workload)
	}
	if !slices.Contains(d.pools, k.pool) {
		d.pools = append(d.pools, k.pool)
	}
	if !slices.Contains(d.procs, k.procs) {
		d.procs = append(d.procs, k.procs)
	}
}

// sortPools puts d.pools in poolOrder; unknown pools keep their order after
// the known ones (a stable sort).
func (d *data) sortPools() {
	rank := func(p string) int {
		if i := slices.Index(poolOrder, p); i >= 0 {
			return i
		}
		return len(poolOrder)
	}
	slices.SortStableFunc(d.pools, func(a, b string) int { return cmp.Compare(rank(a), rank(b)) })
}

// cell summarises one benchmark; ok is false when it has no runs.
func (d *data) cell(workload, pool string, procs int) (c cell, ok bool) {
	s := d.runs[key{workload, pool, procs}]
	if s == nil || len(s.ns) == 0 {
		return cell{}, false
	}
	c = cell{n: len(s.ns), ns: median(s.ns), allocs: -1, bytes: -1, maxAllocs: -1}
	if len(s.allocs) > 0 {
		c.allocs = median(s.allocs)
		c.maxAllocs = slices.Max(s.allocs)
	}
	if len(s.bytes) > 0 {
		c.bytes = median(s.bytes)
	}
	for m, xs := range s.lat {
		c.lat[m] = -1
		if len(xs) > 0 {
			c.lat[m] = median(xs)
		}
	}
	return c, true
}

// reports says whether any run of workload reported metric m.
func (d *data) reports(workload string, m latMetric) bool {
	for k, s := range d.runs {
		if k.workload == workload && len(s.lat[m]) > 0 {
			return true
		}
	}
	return false
}

// isLatency reports whether any run of workload reported the wait's p99:
// such a workload gets a table of percentiles and a chart panel of its own
// rather than a place among the ns/op comparisons.
func (d *data) isLatency(workload string) bool { return d.reports(workload, latP99) }

// isCycle reports whether any run of workload reported the cycle's p99.9:
// such a workload gets a table of its wait and cycle, and no place among
// the ns/op comparisons.
func (d *data) isCycle(workload string) bool { return d.reports(workload, latCycleP999) }

// split returns d.workloads divided into those compared by ns/op, those
// reported by wait percentiles and those reported by wait and cycle
// percentiles, each in d.workloads' order.
func (d *data) split() (throughput, latency, cycle []string) {
	for _, wl := range d.workloads {
		switch {
		case d.isCycle(wl):
			cycle = append(cycle, wl)
		case d.isLatency(wl):
			latency = append(latency, wl)
		default:
			throughput = append(throughput, wl)
		}
	}
	return throughput, latency, cycle
}

// median returns the middle value of xs, or the mean of the two middle
// values when len(xs) is even. It does not modify xs. xs must not be empty.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// ratio is theirs/ours and ours/theirs for one benchmark's medians.
type ratio struct {
	theirsOverOurs, oursOverTheirs float64
}

// compare returns pool's ratio to ours in a workload at procs; ok is false
// when either has no runs.
func (d *data) compare(workload, pool string, procs int) (r ratio, ok bool) {
	o, ok1 := d.cell(workload, ours, procs)
	t, ok2 := d.cell(workload, pool, procs)
	if !ok1 || !ok2 || o.ns <= 0 || t.ns <= 0 {
		return ratio{}, false
	}
	return ratio{theirsOverOurs: t.ns / o.ns, oursOverTheirs: o.ns / t.ns}, true
}
