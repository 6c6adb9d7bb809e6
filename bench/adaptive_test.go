package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/msl-armory/pool"
	"github.com/msl-armory/pool/internal/usl"
)

// The scenarios of the root package's TestSimAdaptiveSize
// (adaptive_sim_test.go), copied: the same backend, load, patience and
// seed, but in real time, with real goroutines and timers, and runs of 60 s
// instead of 90.
const (
	rtLambda   = 200.0
	rtSigma    = 0.05
	rtKappa    = 0.004
	rtPatience = time.Second
	rtSeed     = 1
)

// rtSizes are the fixed sizes the adaptive size is judged against: the
// contenders near the best fixed size in TestSimAdaptiveSize (whose peak is
// at N = 15), not its whole range from 2 to 64, to keep the load on the CPU
// down.
var rtSizes = []int{8, 12, 16, 24, 32}

type rtScenario struct {
	name     string
	short    string        // for metric units
	load     float64       // open loop: fraction of the peak throughput; 0 in a closed loop
	clients  int           // closed loop: clients with no think time
	slowdown time.Duration // when λ falls to a third; 0 for never
}

func (sc rtScenario) rate() float64 {
	_, peak := usl.New(rtLambda, rtSigma, rtKappa).Peak()
	return sc.load * peak
}

// rtResult is one run: a pool (adaptive, or of a fixed size) on its own
// backend.
type rtResult struct {
	served *usl.Recorder
	gaveUp *usl.Recorder
	limits []int // Stats().Limit at the end of each second
}

type conn struct{ id int }

// rtRunOne runs sc on a fresh backend and pool from start to start+run. All
// the runs of a scenario share start and arrivals: the same sample path.
func rtRunOne(b *testing.B, sc rtScenario, o pool.Options[*conn], start time.Time, run time.Duration, arrivals []usl.Arrival) rtResult {
	backend := usl.New(rtLambda, rtSigma, rtKappa)
	p, err := pool.New[*conn](context.Background(), pool.FactoryFunc[*conn](func(context.Context) (*conn, error) {
		return &conn{}, nil
	}), o)
	if err != nil {
		b.Fatal(err)
	}
	r := rtResult{served: usl.NewRecorder(), gaveUp: usl.NewRecorder()}
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(run))
	defer cancel()
	load := usl.Load{Arrivals: arrivals, Clients: sc.clients, Seed: rtSeed, Patience: rtPatience}
	if sc.slowdown > 0 {
		load.SlowAt, load.SlowLambda = sc.slowdown, rtLambda/3
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for s := time.Second; s <= run; s += time.Second {
			time.Sleep(time.Until(start.Add(s)))
			r.limits = append(r.limits, p.Stats().Limit)
		}
	})
	// The recorders count from their creation, a little before start, when
	// Run begins the load: the offsets agree to within that.
	if err := load.Run(ctx, start, backend, func(ctx context.Context) (func(), error) {
		l, err := p.Lease(ctx)
		return l.Release, err
	}, r.served, r.gaveUp); err != nil {
		b.Errorf("%s: a request failed: %v", sc.name, err)
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		b.Error(err)
	}
	return r
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAdaptiveSize runs the four scenarios of TestSimAdaptiveSize in
// real time: for each, the adaptive pool (MaxSize 64) and fixed MaxSize 8,
// 12, 16, 24 and 32, each on its own backend, concurrently and on the same
// sample path; all the scenarios concurrently too (ADAPTIVE_RT_SERIAL=1
// runs them one after the other). A run lasts 60 s (ADAPTIVE_RT_RUN, in
// seconds), judged after a warm-up of the first half; the slowdown comes
// halfway. It prints a table a scenario and reports the adaptive size's
// ratios to the best fixed size. It runs once, whatever b.N, and only with
// ADAPTIVE_RT=1: it takes a minute or more.
func BenchmarkAdaptiveSize(b *testing.B) {
	if os.Getenv("ADAPTIVE_RT") != "1" {
		b.Skip("set ADAPTIVE_RT=1 to run: it takes a minute of real time")
	}
	run := 60 * time.Second
	if s, err := strconv.Atoi(os.Getenv("ADAPTIVE_RT_RUN")); err == nil && s > 0 {
		run = time.Duration(s) * time.Second
	}
	warmup := run / 2
	scenarios := []rtScenario{
		{name: "open 70%", short: "open70", load: 0.70},
		{name: "open 95%", short: "open95", load: 0.95},
		{name: "closed 64", short: "closed64", clients: 64},
		{name: "open 30% slows 3x", short: "slow3x", load: 0.30, slowdown: run / 2},
	}
	serial := os.Getenv("ADAPTIVE_RT_SERIAL") == "1"

	results := make([]map[int]rtResult, len(scenarios)) // size 0 is the adaptive pool
	var mu sync.Mutex
	cpu0, wall0 := cpuTime(), time.Now()
	var all sync.WaitGroup
	for i, sc := range scenarios {
		results[i] = map[int]rtResult{}
		arrivals := usl.Arrivals(rtSeed, sc.rate(), run)
		start := time.Now().Add(100 * time.Millisecond)
		var wg sync.WaitGroup
		for _, size := range append([]int{0}, rtSizes...) {
			o := pool.Options[*conn]{MaxSize: size}
			if size == 0 {
				o = pool.Options[*conn]{MaxSize: 64, AdaptiveSize: true}
			}
			wg.Go(func() {
				r := rtRunOne(b, sc, o, start, run, arrivals)
				mu.Lock()
				results[i][size] = r
				mu.Unlock()
			})
		}
		if serial {
			wg.Wait()
		} else {
			all.Go(wg.Wait)
		}
	}
	all.Wait()
	cpu, wall := cpuTime()-cpu0, time.Since(wall0)
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cpu-cores")

	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }
	for i, sc := range scenarios {
		rs := results[i]
		sum := func(r rtResult) usl.Summary { return r.served.Summary(warmup, run) }
		var most float64
		for _, size := range rtSizes {
			most = max(most, sum(rs[size]).PerSecond)
		}
		best := 0
		for _, size := range rtSizes {
			s := sum(rs[size])
			if s.PerSecond >= 0.99*most && (best == 0 || s.P99 < sum(rs[best]).P99) {
				best = size
			}
		}
		var out strings.Builder
		fmt.Fprintf(&out, "%s (%.0f/s offered): after the warm-up (%v of %v)\n", sc.name, sc.rate(), warmup, run)
		tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "pool\tserved/s\tp50\tp99\tgave up/s\t")
		for _, size := range append(slices.Sorted(maps.Keys(rs))[1:], 0) {
			s := sum(rs[size])
			name := strconv.Itoa(size)
			if size == 0 {
				name = "adaptive"
			} else if size == best {
				name += " (best)"
			}
			fmt.Fprintf(tw, "%s\t%.1f\t%s\t%s\t%.1f\t\n", name, s.PerSecond, ms(s.P50), ms(s.P99),
				float64(rs[size].gaveUp.Summary(warmup, run).Count)/(run-warmup).Seconds())
		}
		tw.Flush()
		a, bs := sum(rs[0]), sum(rs[best])
		tput, p99 := a.PerSecond/bs.PerSecond, a.P99.Seconds()/bs.P99.Seconds()
		lim := slices.Clone(rs[0].limits[int(warmup/time.Second):])
		slices.Sort(lim)
		fmt.Fprintf(&out, "adaptive/best (%d): throughput %.3f, p99 %.2f; limit after the warm-up: median %d, min %d, max %d",
			best, tput, p99, lim[len(lim)/2], lim[0], lim[len(lim)-1])
		b.ReportMetric(tput, "tput-ratio-"+sc.short)
		b.ReportMetric(p99, "p99-ratio-"+sc.short)
		if sc.slowdown > 0 {
			after := sc.slowdown + 5*time.Second
			ap, bp := rs[0].served.Summary(after, run).P99, rs[best].served.Summary(after, run).P99
			lowest := time.Duration(0)
			for _, size := range rtSizes {
				if p := rs[size].served.Summary(after, run).P99; lowest == 0 || p < lowest {
					lowest = p
				}
			}
			fmt.Fprintf(&out, "\nfrom %v to %v: adaptive p99 %s, best fixed (%d) p99 %s, ratio %.2f; lowest fixed p99 %s",
				after, run, ms(ap), best, ms(bp), ap.Seconds()/bp.Seconds(), ms(lowest))
			b.ReportMetric(ap.Seconds()/bp.Seconds(), "p99-after-slowdown-ratio")
		}
		fmt.Fprintf(&out, "\nlimits each second: %v", rs[0].limits)
		fmt.Println(out.String())
	}
}
