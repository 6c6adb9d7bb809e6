package bench

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// The overload workload: many more goroutines than items, each holding its
// item for a stretch of CPU work, so nearly every lease waits in the pool's
// queue. What it measures is the wait (the time from calling lease to
// holding an item) as a distribution, since a pool that is fair on average
// can still starve a few callers; the tail shows that, the mean does not.
const (
	overloadGoroutines = 64
	overloadItems      = 8
	overloadWork       = 20 * time.Microsecond // CPU work per lease, while holding the item
)

// spin is the work done while holding an item: n rounds of xorshift64, a
// chain of dependent shifts and xors that the compiler can neither fold nor
// vectorise, touching no memory. It returns x so the caller can keep the
// result live; otherwise the loop could be deleted.
func spin(n int, x uint64) uint64 {
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// spinRounds is the n for which spin(n) takes overloadWork on this machine,
// calibrated once per process by calibrateSpin.
var (
	spinOnce   sync.Once
	spinRounds int
	spinSink   uint64 // keeps calibration's spin results live
)

// calibrateSpin times a spin of trialRounds many times and takes the
// fastest run: spin is pure CPU work, so any run slower than the fastest
// was interrupted or slowed (by the scheduler, another process, the
// hypervisor), and the work overloadWork means is the undisturbed kind.
// Each run is about 65 µs, long enough that the clock's cost (tens of ns)
// is noise, and short enough that on a busy machine some of the 200 runs
// (13 ms in all) fall between disturbances: nine runs of 2 ms each once
// made the work 13 % short while another process was busy. time.Sleep
// cannot stand in for the work: it parks the goroutine (so the holder uses
// no CPU, unlike real work) and its granularity on Linux is tens of µs to
// a ms, not 20 µs.
func calibrateSpin() int {
	spinOnce.Do(func() {
		const trialRounds = 1 << 15
		x := uint64(0x9e3779b97f4a7c15)
		best := time.Duration(1<<63 - 1)
		for range 200 {
			t0 := time.Now()
			x = spin(trialRounds, x)
			best = min(best, time.Since(t0))
		}
		spinSink = x
		spinRounds = max(1, int(float64(trialRounds)*float64(overloadWork)/float64(best)))
	})
	return spinRounds
}

// overloadWorker is one goroutine of the workload. Its sample slices are
// allocated before the timer starts and written by index, so recording a
// sample allocates nothing, and shares a cache line with another worker's
// writes at most at the ends of its slices.
type overloadWorker struct {
	wait  []time.Duration // per lease: calling lease until holding an item
	cycle []time.Duration // per lease: calling lease until its release returned
	work  []time.Duration // per lease: the spin's duration as it ran (a check on the calibration)
	x     uint64          // spin's state, kept so the spin is not dead code
	spins int             // rounds of spin per lease
	_     [64]byte        // keeps neighbouring workers' x off one cache line
}

// hold does the work while holding an item and records how long it took.
func (w *overloadWorker) hold(i int) {
	t0 := time.Now()
	w.x = spin(w.spins, w.x)
	w.work[i] = time.Since(t0)
}

// runOverload runs b.N leases split over overloadGoroutines goroutines,
// each goroutine running loop over its own worker, and reports the wait's
// percentiles, the cycle's p99.9 (lease, work and release: a wait a pool
// moves into its Release shows there), the throughput and the median work
// per lease. loop does
// len(w.wait) leases (overload's, over one adapter).
func runOverload(b *testing.B, loop func(w *overloadWorker)) {
	b.Helper()
	spins := calibrateSpin()
	workers := make([]overloadWorker, overloadGoroutines)
	for g := range workers {
		n := share(b.N, g, overloadGoroutines)
		workers[g] = overloadWorker{
			wait:  make([]time.Duration, n),
			cycle: make([]time.Duration, n),
			work:  make([]time.Duration, n),
			x:     uint64(g) + 1, // xorshift state must not be 0
			spins: spins,
		}
	}
	elapsed := runTogether(b, len(workers), func(g int) { loop(&workers[g]) }, nil)

	wait := make([]time.Duration, 0, b.N)
	cycle := make([]time.Duration, 0, b.N)
	work := make([]time.Duration, 0, b.N)
	var sink uint64
	for g := range workers {
		wait = append(wait, workers[g].wait...)
		cycle = append(cycle, workers[g].cycle...)
		work = append(work, workers[g].work...)
		sink ^= workers[g].x
	}
	spinSink ^= sink
	if len(wait) == 0 {
		return
	}
	slices.Sort(wait)
	slices.Sort(cycle)
	slices.Sort(work)
	b.ReportMetric(float64(percentile(wait, 500)), "p50-ns")
	b.ReportMetric(float64(percentile(wait, 990)), "p99-ns")
	b.ReportMetric(float64(percentile(wait, 999)), "p99.9-ns")
	b.ReportMetric(float64(wait[len(wait)-1]), "max-ns")
	b.ReportMetric(float64(percentile(cycle, 999)), "cycle-p99.9-ns")
	b.ReportMetric(float64(len(wait))/elapsed.Seconds(), "leases/s")
	b.ReportMetric(float64(percentile(work, 500)), "work-ns")
}

// share is goroutine g's share of n leases split over goroutines:
// n/goroutines, and one more for the first n%goroutines.
func share(n, g, goroutines int) int {
	k := n / goroutines
	if g < n%goroutines {
		k++
	}
	return k
}

// runTogether runs body(g) for g in [0, goroutines), each on a goroutine of
// its own, all started together once the timer is running, and returns the
// wall time from their start to the end of the last; the timer is stopped
// when it returns. Every goroutine has been created and scheduled once
// before the timer starts, so the timer holds the bodies, not goroutine
// start-up.
//
// then, when not nil, runs on the calling goroutine as soon as the
// goroutines are released, inside the timer.
func runTogether(b *testing.B, goroutines int, body func(g int), then func()) time.Duration {
	b.Helper()
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			body(g)
		}()
	}
	ready.Wait()

	b.ResetTimer()
	t0 := time.Now()
	close(start)
	if then != nil {
		then()
	}
	done.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	return elapsed
}

// percentile returns the nearest-rank percentile of sorted at perMille
// thousandths (990 for p99): the smallest sample that at least that share
// of the samples do not exceed. Integer arithmetic keeps p99.9 of 1000
// samples the 999th, which float rounding of 99.9 would make the 1000th.
// sorted must be sorted and not empty.
func percentile(sorted []time.Duration, perMille int) time.Duration {
	rank := (len(sorted)*perMille + 999) / 1000 // 1-based, rounded up
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// BenchmarkOverload runs overloadGoroutines goroutines over a pool of
// overloadItems items, each lease followed by overloadWork of CPU work
// while holding the item. ns/op is wall time per lease (the inverse of
// leases/s); p50-ns, p99-ns and p99.9-ns are the wait for an item; work-ns
// is the median measured work per lease, which should be near 20 µs.
//
// max-ns is the longest wait. It is there because percentiles of waits
// per lease hide starvation: each goroutine makes the same number of
// leases, so a goroutine starved for most of the run waits long only
// once, and the 56 waiters of a pool that lets releasers take their items
// straight back contribute fewer long samples than p99.9's 64 of 64000.
//
// b.N is the total number of leases. run.sh runs this benchmark with a
// fixed count (-benchtime Nx) so that every pool's percentiles come from
// the same number of samples.
func BenchmarkOverload(b *testing.B) {
	for _, c := range contenders {
		b.Run("pool="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			c.overload(b, overloadItems)
		})
	}
}

// TestPercentile checks the nearest-rank definition on small cases.
func TestPercentile(t *testing.T) {
	s := make([]time.Duration, 1000)
	for i := range s {
		s[i] = time.Duration(i + 1)
	}
	for _, tc := range []struct {
		perMille int
		want     time.Duration
	}{{500, 500}, {990, 990}, {999, 999}, {1000, 1000}, {0, 1}} {
		if got := percentile(s, tc.perMille); got != tc.want {
			t.Errorf("percentile(1..1000, %d‰) = %d, want %d", tc.perMille, got, tc.want)
		}
	}
	if got := percentile(s[:10], 999); got != 10 {
		t.Errorf("percentile(1..10, 999‰) = %d, want 10", got)
	}
	if got := percentile([]time.Duration{7}, 999); got != 7 {
		t.Errorf("percentile([7], 999‰) = %d, want 7", got)
	}
}

// TestShare checks that the shares of n leases add up to n and differ by
// one at most.
func TestShare(t *testing.T) {
	for _, tc := range []struct{ n, goroutines int }{{0, 4}, {3, 4}, {64000, 64}, {64001, 64}, {2000, 16}} {
		sum, lo, hi := 0, tc.n, 0
		for g := range tc.goroutines {
			k := share(tc.n, g, tc.goroutines)
			sum, lo, hi = sum+k, min(lo, k), max(hi, k)
		}
		if sum != tc.n || hi-lo > 1 {
			t.Errorf("share(%d, g, %d): sum %d, from %d to %d; want sum %d, a spread of 1 at most", tc.n, tc.goroutines, sum, lo, hi, tc.n)
		}
	}
}

// TestSpinCalibration checks that the calibrated spin takes about
// overloadWork: its fastest of several runs within a factor of 2 either
// way (the machine is noisy; a miscalibration would be off by far more).
func TestSpinCalibration(t *testing.T) {
	n := calibrateSpin()
	best := time.Duration(1<<63 - 1)
	x := uint64(1)
	for range 50 {
		t0 := time.Now()
		x = spin(n, x)
		best = min(best, time.Since(t0))
	}
	spinSink ^= x
	if best < overloadWork/2 || best > 2*overloadWork {
		t.Errorf("spin(%d) took %v at best, want about %v", n, best, overloadWork)
	}
	t.Logf("spin: %d rounds, fastest of 50 runs %v", n, best)
}
