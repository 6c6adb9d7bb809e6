package bench

import (
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msl-armory/pool/bench/internal/work"
)

// The release-then-work workload: each goroutine leases an item, holds it
// for a short stretch of CPU work, releases it, and computes for a longer
// stretch before its next lease, as a handler does that queries a
// connection and then works on the answer. What it shows is a waiter
// handed an item by a releaser that goes on running: the waiter holds the
// item but still needs a processor, and if the releaser keeps its own for
// the work after the release, the waiter, and the item in its hands, wait
// behind that work. Once every item is in the hands of a goroutine that is
// not running, the next lease waits too, and so on: a convoy, although a
// running goroutine needs an item for a tenth of its time.
//
// The sizes:
//
//   - rtwGoroutines over rtwItems, four callers an item, and many more
//     goroutines than processors at -cpu 1 and 2, so a woken waiter
//     usually finds the processors taken.
//   - rtwHold, 2 µs, a tenth of rtwWork: four items are ample for two
//     processors, so a wait longer than a few holds is the pool's hand-off,
//     not a shortage, and a waiter stuck behind a releaser's work waits
//     20 µs at least, ten holds.
//   - rtwWork, 20 µs, Overload's work: long against a pool's own cost (tens
//     of ns), short against the scheduler's time slice (10 ms).
//
// Each run starts with a burst: the workload holds every item while the
// goroutines start, so that each one's first lease waits, and releases
// them once all have called lease. Without it a run meets the pool's
// hand-offs only when the scheduler happens to preempt four holders at
// once, which in a run may happen early or never; with it every run shows
// whether the pool's hand-offs keep the convoy the burst began or let it
// dissolve. Each goroutine's first lease, the burst's own, is left out of
// the percentiles.
//
// The cycle, from calling lease to the end of the work after releasing,
// is what a caller's request sees. A pool that yields its processor to the
// waiter it woke (vitess) moves the delay from the waiter to the releaser,
// whose work waits instead; only the cycle shows that. While no goroutine
// waits in the pool, the goroutines share the processors by the
// scheduler's time slice, and a cycle preempted (about one in a thousand)
// waits out the other goroutines' slices, tens of ms, whatever the pool.
const (
	rtwGoroutines = 16
	rtwItems      = 4
	rtwHold       = 2 * time.Microsecond  // CPU work per lease while holding the item
	rtwWork       = 20 * time.Microsecond // CPU work per lease after releasing it
)

// spinFor is the rounds of spin that take d on this machine, from
// calibrateSpin's rounds for overloadWork (spin's time is linear in its
// rounds).
func spinFor(d time.Duration) int {
	return max(1, int(int64(calibrateSpin())*int64(d)/int64(overloadWork)))
}

// rtwWorker is one goroutine of the workload. Its sample slices are
// allocated before the timer starts and written by index, so recording a
// sample allocates nothing.
type rtwWorker struct {
	wait  []time.Duration // per lease: calling lease until holding an item
	cycle []time.Duration // per lease: calling lease until the end of the work after releasing
	x     uint64          // spin's state, kept so the spin is not dead code
	hold  int             // rounds of spin while holding the item
	work  int             // rounds of spin after releasing it
	_     [64]byte        // keeps neighbouring workers' x off one cache line
}

// runReleaseThenWork runs b.N leases split over rtwGoroutines goroutines,
// each goroutine running loop over its own worker, and reports the wait's
// p50 and p99.9 and the cycle's p99.9, leaving out each goroutine's first
// lease. loop does len(w.wait) cycles (releaseThenWork's, over one
// adapter); burst releases the items the workload held while the
// goroutines started, and runs once every goroutine has begun its loop.
func runReleaseThenWork(b *testing.B, loop func(w *rtwWorker), burst func()) {
	b.Helper()
	hold, after := spinFor(rtwHold), spinFor(rtwWork)
	workers := make([]rtwWorker, rtwGoroutines)
	for g := range workers {
		n := share(b.N, g, rtwGoroutines)
		workers[g] = rtwWorker{
			wait:  make([]time.Duration, n),
			cycle: make([]time.Duration, n),
			x:     uint64(g) + 1, // xorshift state must not be 0
			hold:  hold,
			work:  after,
		}
	}
	var begun atomic.Int32
	runTogether(b, len(workers), func(g int) {
		begun.Add(1)
		loop(&workers[g])
	}, func() {
		// Yielding lets the goroutines run up to their first lease, where
		// they wait for the held items; one more yield lets the last one
		// to count itself get there too.
		for begun.Load() < rtwGoroutines {
			runtime.Gosched()
		}
		runtime.Gosched()
		burst()
	})

	wait := make([]time.Duration, 0, b.N)
	cycle := make([]time.Duration, 0, b.N)
	var sink uint64
	for g := range workers {
		w := &workers[g]
		first := min(1, len(w.wait)) // the burst's lease
		wait = append(wait, w.wait[first:]...)
		cycle = append(cycle, w.cycle[first:]...)
		sink ^= w.x
	}
	spinSink ^= sink
	if len(wait) == 0 {
		return
	}
	slices.Sort(wait)
	slices.Sort(cycle)
	b.ReportMetric(float64(work.Percentile(wait, 500)), "p50-ns")
	b.ReportMetric(float64(work.Percentile(wait, 999)), "p99.9-ns")
	b.ReportMetric(float64(work.Percentile(cycle, 999)), "cycle-p99.9-ns")
}

// BenchmarkReleaseThenWork runs rtwGoroutines goroutines over a pool of
// rtwItems items, each cycle a lease, rtwHold of CPU work holding the
// item, its release and rtwWork of CPU work after it. ns/op is wall time
// per lease (per cycle); p50-ns and p99.9-ns are the wait for an item,
// from calling lease to holding one; cycle-p99.9-ns is the p99.9 of the
// whole cycle, about rtwHold + rtwWork when nothing waits.
//
// b.N is the total number of leases. run.sh runs this benchmark with a
// fixed count (-benchtime Nx) so that every pool's percentiles come from
// the same number of samples.
func BenchmarkReleaseThenWork(b *testing.B) {
	for _, c := range contenders {
		b.Run("pool="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			c.releaseThenWork(b, rtwItems)
		})
	}
}

// TestSpinFor checks that spinFor scales calibrateSpin's rounds by the
// duration, so that the workload's hold and work keep the ratio of their
// durations.
func TestSpinFor(t *testing.T) {
	n := calibrateSpin()
	if got := spinFor(overloadWork); got != n {
		t.Errorf("spinFor(%v) = %d, want calibrateSpin's %d", overloadWork, got, n)
	}
	hold, work := spinFor(rtwHold), spinFor(rtwWork)
	if want := work * int(rtwHold) / int(rtwWork); hold < want-1 || hold > want+1 {
		t.Errorf("spinFor(%v) = %d, want about %d (spinFor(%v) = %d scaled)", rtwHold, hold, want, rtwWork, work)
	}
	if got := spinFor(time.Nanosecond); got < 1 {
		t.Errorf("spinFor(1ns) = %d, want 1 at least", got)
	}
}
