package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// result is one pool's run of one round, analysed.
type result struct {
	n        int              // requests
	resp     [3]time.Duration // response time p50, p99, p99.9
	ideal    [3]time.Duration // the ideal queue's, on this run's arrivals and holds
	late     [3]time.Duration // the generator's lateness in starting requests: p50, p99, max
	meanHold time.Duration
	span     time.Duration // the span the arrivals were drawn over
	load     float64       // the load the run carried: its holds' sum over items × span
	waited   float64       // the share of the requests whose lease waited in the pool
	allocs   float64       // heap allocations per request during the run
	gcs      uint32        // collections during the run
	gc       gcUse         // the collector's pauses and CPU during the run
	gcCPU    float64       // the share of the processors' time the collector took, idle workers' excluded
}

// analyze computes a run's figures from its scheduled arrivals and its
// samples, for a pool of servers items and arrivals over span.
func analyze(arrivals []time.Duration, samples []sample, servers int, span time.Duration) result {
	n := len(arrivals)
	holds := make([]time.Duration, n)
	resp := make([]time.Duration, n)
	late := make([]time.Duration, n)
	var sum time.Duration
	for i, a := range arrivals {
		s := &samples[i]
		holds[i] = s.held - s.leased
		resp[i] = s.done - a
		late[i] = s.spawned - a
		sum += holds[i]
	}
	ideal := make([]time.Duration, n)
	idealResponses(ideal, arrivals, holds, servers)
	res := result{
		n:        n,
		span:     span,
		resp:     tail(resp),
		ideal:    tail(ideal),
		late:     tail(late),
		meanHold: sum / time.Duration(n),
		load:     float64(sum) / (float64(servers) * float64(span)),
	}
	res.late[2] = late[n-1] // tail sorted it: the maximum, not p99.9
	return res
}

// The table's columns: a label, then per percentile the two pools' ideal
// and actual figures and the three ratios.
const (
	labelW = 8
	colW   = 12
)

var columns = []string{"ideal(msl)", "msl", "ideal(chan)", "channel", "msl/chan", "msl/ideal", "chan/ideal"}

// header is the table's column line.
var header = func() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s", labelW, "")
	for _, c := range columns {
		fmt.Fprintf(&b, "%*s", colW, c)
	}
	return b.String()
}()

// printConfig prints c's block: three lines on the harness (the rate, the
// mean hold it was set from, allocations and collections; the load the
// runs carried and the share of leases that waited in each pool; how late
// the generator started requests: medians over the runs, but the GCs, a
// sum), each run's line with verbose, and a row per percentile of the
// medians over the rounds.
// results[0] are msl's runs and results[1] the channel's, round by round.
func printConfig(w io.Writer, c config, perSec float64, meanHold time.Duration, results [][]result, verbose bool) {
	msl, ch := results[0], results[1]
	both := append(append([]result(nil), msl...), ch...)
	fmt.Fprintf(w, "%v: λ %.4gk/s from a mean hold of %s, %d requests a run, %.2f allocs/request\n",
		c, perSec/1000, dur(meanHold), msl[0].n,
		medianOf(both, func(r result) float64 { return r.allocs }))
	fmt.Fprintf(w, "  load carried: msl %.3f, chan %.3f; leases that waited: msl %.1f%%, chan %.1f%%\n",
		medianOf(msl, func(r result) float64 { return r.load }),
		medianOf(ch, func(r result) float64 { return r.load }),
		100*medianOf(msl, func(r result) float64 { return r.waited }),
		100*medianOf(ch, func(r result) float64 { return r.waited }))
	printGC(w, msl, ch)
	fmt.Fprintf(w, "  arrivals started late: p50 %s, p99 %s, max %s\n",
		dur(medDur(both, func(r result) time.Duration { return r.late[0] })),
		dur(medDur(both, func(r result) time.Duration { return r.late[1] })),
		dur(medDur(both, func(r result) time.Duration { return r.late[2] })))
	if verbose {
		for r := range msl {
			printRun(w, r, "msl", msl[r])
			printRun(w, r, "chan", ch[r])
		}
	}
	for k, pm := range percentiles {
		fmt.Fprintf(w, "%-*s", labelW, "  "+pctName(pm))
		for _, d := range []time.Duration{
			medDur(msl, func(r result) time.Duration { return r.ideal[k] }),
			medDur(msl, func(r result) time.Duration { return r.resp[k] }),
			medDur(ch, func(r result) time.Duration { return r.ideal[k] }),
			medDur(ch, func(r result) time.Duration { return r.resp[k] }),
		} {
			fmt.Fprintf(w, "%*s", colW, dur(d))
		}
		for _, x := range []float64{
			medianRatio(msl, ch, func(a, b result) (time.Duration, time.Duration) { return a.resp[k], b.resp[k] }),
			medianRatio(msl, msl, func(a, _ result) (time.Duration, time.Duration) { return a.resp[k], a.ideal[k] }),
			medianRatio(ch, ch, func(a, _ result) (time.Duration, time.Duration) { return a.resp[k], a.ideal[k] }),
		} {
			fmt.Fprintf(w, "%*.2f", colW, x)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// printRun prints one run's line for -v.
func printRun(w io.Writer, round int, name string, r result) {
	fmt.Fprintf(w, "  round %d %-4s load %.3f, waited %.1f%%, late p50 %s p99 %s max %s | ideal %s %s %s | %s %s %s %s\n",
		round+1, name, r.load, 100*r.waited, dur(r.late[0]), dur(r.late[1]), dur(r.late[2]),
		dur(r.ideal[0]), dur(r.ideal[1]), dur(r.ideal[2]), name, dur(r.resp[0]), dur(r.resp[1]), dur(r.resp[2]))
}

// pctName names a percentile given in thousandths: p50, p99, p99.9.
func pctName(perMille int) string {
	if perMille%10 == 0 {
		return fmt.Sprintf("p%d", perMille/10)
	}
	return fmt.Sprintf("p%g", float64(perMille)/10)
}

// medianOf is the median over runs of f.
func medianOf(runs []result, f func(result) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	return median(xs)
}

// medDur is medianOf for a duration.
func medDur(runs []result, f func(result) time.Duration) time.Duration {
	return time.Duration(medianOf(runs, func(r result) float64 { return float64(f(r)) }))
}

// medianRatio is the median over rounds of num/den, f giving both from
// round i's runs of a and b: a ratio within a round compares runs over one
// arrival sample path, so the noise of the path divides out.
func medianRatio(a, b []result, f func(a, b result) (num, den time.Duration)) float64 {
	xs := make([]float64, len(a))
	for i := range a {
		num, den := f(a[i], b[i])
		xs[i] = float64(num) / float64(max(den, 1))
	}
	return median(xs)
}

func sumGCs(runs []result) uint32 {
	var n uint32
	for _, r := range runs {
		n += r.gcs
	}
	return n
}

// printGC prints the collector's line: per pool, over all its runs, the
// collections a second of arrivals and the p99 and the longest of their
// stop-the-world pauses; and the median over the runs of the share of
// the processors' time the collector took from the requests.
func printGC(w io.Writer, msl, ch []result) {
	var parts [2]string
	for i, runs := range [][]result{msl, ch} {
		uses := make([]gcUse, len(runs))
		for j, r := range runs {
			uses[j] = r.gc
		}
		p99, most := pauseTail(uses)
		parts[i] = fmt.Sprintf("%.1f/s, pauses p99 %s max %s, CPU %.1f%%",
			float64(sumGCs(runs))/float64(len(runs))/runs[0].span.Seconds(), dur(p99), dur(most),
			100*medianOf(runs, func(r result) float64 { return r.gcCPU }))
	}
	fmt.Fprintf(w, "  GC: msl %s; chan %s\n", parts[0], parts[1])
}
