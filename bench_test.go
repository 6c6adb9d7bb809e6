package pool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The baseline benchmarks: every change to the hot paths is measured against
// them with benchstat (-count 6 or more, -cpu 1,2). Items are *conn from
// testutil_test.go: allocated one by one and padded, so no two share a cache
// line, as real connections don't.

// bnReady is a Preparer that finds every item ready and costs nothing, so
// BenchmarkLeaseRelease/preparer measures the pool's share of the check.
type bnReady struct{}

func (bnReady) IsReady(context.Context, *conn) (bool, error) { return true, nil }
func (bnReady) Prepare(context.Context, *conn) error         { return nil }

// bnPool returns a pool over a counting factory, and a func that closes it
// and checks that Close destroyed everything without error.
func bnPool(b *testing.B, opts Options[*conn]) (*Pool[*conn], func()) {
	b.Helper()
	p, tr := newTracked(b, opts)
	return p, func() {
		b.Helper()
		require.NoError(b, p.Close())
		assert.Zero(b, tr.live.Load(), "items left alive after Close")
	}
}

// bnSequential leases and releases on one goroutine, b.Loop times.
func bnSequential(b *testing.B, p *Pool[*conn]) {
	b.Helper()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := p.Lease(ctx)
		if err != nil {
			b.Fatalf("Lease: %v", err)
		}
		l.Release()
	}
}

// bnParallel leases and releases on GOMAXPROCS×parallelism goroutines.
func bnParallel(b *testing.B, p *Pool[*conn]) {
	b.Helper()
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := p.Lease(ctx)
			if err != nil {
				b.Errorf("Lease: %v", err)
				return
			}
			l.Release()
		}
	})
}

// bnReportWaits reports the leases that queued for a permit per op: how
// often a benchmark exercised the wait and hand-off path rather than the
// fast path.
func bnReportWaits(b *testing.B, p *Pool[*conn], before uint64) {
	b.ReportMetric(float64(p.Stats().Waits-before)/float64(b.N), "waits/op")
}

func BenchmarkLeaseRelease(b *testing.B) {
	b.Run("sequential", func(b *testing.B) {
		p, done := bnPool(b, Options[*conn]{MinSize: 16, MaxSize: 16})
		defer done()
		bnSequential(b, p)
	})
	b.Run("parallel", func(b *testing.B) {
		p, done := bnPool(b, Options[*conn]{MinSize: 16, MaxSize: 16})
		defer done()
		bnParallel(b, p)
	})
	b.Run("contended", func(b *testing.B) {
		// 4 goroutines per P over 2 items: most leases queue, and most
		// releases hand their item straight to the oldest waiter.
		p, done := bnPool(b, Options[*conn]{MinSize: 2, MaxSize: 2})
		defer done()
		before := p.Stats().Waits
		b.SetParallelism(4)
		bnParallel(b, p)
		bnReportWaits(b, p, before)
	})
	b.Run("preparer", func(b *testing.B) {
		p, done := bnPool(b, Options[*conn]{MinSize: 16, MaxSize: 16, Preparer: bnReady{}})
		defer done()
		bnSequential(b, p)
		assert.Zero(b, p.Stats().PrepareFailed)
	})
	b.Run("leak-threshold", func(b *testing.B) {
		// The watcher scans every LeakThreshold/8, here several times a
		// run; no lease is ever reported.
		p, done := bnPool(b, Options[*conn]{MinSize: 16, MaxSize: 16, LeakThreshold: time.Second})
		defer done()
		bnSequential(b, p)
		assert.Zero(b, p.Stats().LongLeases)
	})
	b.Run("tracer", func(b *testing.B) {
		// A Tracer that does nothing: what tracing costs the pool itself,
		// two clock reads and three calls per lease and release.
		p, done := bnPool(b, Options[*conn]{MinSize: 16, MaxSize: 16, Tracer: bnNoopTracer{}})
		defer done()
		bnSequential(b, p)
	})
	b.Run("max-uses", func(b *testing.B) {
		// A MaxUses no item reaches: every release counts its uses.
		p, done := bnPool(b, Options[*conn]{MinSize: 16, MaxSize: 16, MaxUses: math.MaxInt})
		defer done()
		bnSequential(b, p)
	})
	b.Run("expiry", func(b *testing.B) {
		// Limits far beyond the benchmark's run: every lease and release
		// reads the clock and judges the item, and none expires.
		p, done := bnPool(b, Options[*conn]{MinSize: 16, MaxSize: 16, IdleTimeout: time.Hour, MaxLifetime: time.Hour})
		defer done()
		bnSequential(b, p)
		s := p.Stats()
		assert.Zero(b, s.IdleExpired+s.LifetimeExpired, "an item expired")
	})
}

// BenchmarkTryLeaseExhausted measures the refusal: TryLease on a pool whose
// only permit is held.
func BenchmarkTryLeaseExhausted(b *testing.B) {
	p, done := bnPool(b, Options[*conn]{MinSize: 1, MaxSize: 1})
	defer done()
	ctx := context.Background()
	held, err := p.Lease(ctx)
	require.NoError(b, err)
	defer held.Release()

	b.ReportAllocs()
	for b.Loop() {
		if _, err = p.TryLease(ctx); err == nil {
			b.Fatal("TryLease succeeded on an exhausted pool")
		}
	}
	assert.ErrorIs(b, err, ErrExhausted)
}

// BenchmarkHandoff measures a round trip of one item between two goroutines
// over a pool of one. Each side releases only once the other is queued for
// the item, so every release is a hand-off to a waiter and every lease a
// wait: an op is two hand-offs (and includes polling Stats for the queue).
func BenchmarkHandoff(b *testing.B) {
	p, done := bnPool(b, Options[*conn]{MinSize: 1, MaxSize: 1})
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	held, err := p.Lease(ctx)
	require.NoError(b, err)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			l, err := p.Lease(ctx) // queues: the benchmark holds the item
			if err != nil {
				return // stop ended the wait
			}
			bnAwaitQueued(ctx, p)
			l.Release()
		}
	}()

	before := p.Stats().Waits
	b.ReportAllocs()
	for b.Loop() {
		bnAwaitQueued(ctx, p)
		held.Release() // to the partner, which is queued
		if held, err = p.Lease(ctx); err != nil {
			b.Fatalf("Lease: %v", err)
		}
	}
	waits := p.Stats().Waits - before
	stop()
	wg.Wait()
	held.Release()
	assert.Equal(b, 2*uint64(b.N), waits, "a lease did not wait for a hand-off")
}

// BenchmarkGrantPastEndedLeases measures a timeout storm: dead leases
// queued ahead of one live lease, their ctx ended at the same instant (a
// stalled backend's deadline), and a Release at once. It reports
// ns/reach, the time from that Release's call until the live lease's Lease
// returned with the item, which should not grow with the number of dead
// leases (doc.go, "Waiting and errors": a grant skips leases whose ctx has
// ended); ns/op also counts the setup.
func BenchmarkGrantPastEndedLeases(b *testing.B) {
	for _, dead := range []int{0, 64, 2048} {
		b.Run(fmt.Sprintf("dead=%d", dead), func(b *testing.B) {
			p, done := bnPool(b, Options[*conn]{MinSize: 1, MaxSize: 1})
			defer done()
			held, err := p.Lease(context.Background())
			require.NoError(b, err)
			var reach time.Duration
			for b.Loop() {
				var d time.Duration
				held, d = bnStorm(b, p, held, dead)
				reach += d
			}
			held.Release()
			b.ReportMetric(float64(reach.Nanoseconds())/float64(b.N), "ns/reach")
		})
	}
}

// bnStorm queues dead leases whose ctx then ends and a live one behind
// them, releases held, and returns the live lease and how long after the
// Release's call it got the item.
func bnStorm(b *testing.B, p *Pool[*conn], held Lease[*conn], dead int) (Lease[*conn], time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range dead {
		wg.Go(func() {
			if l, err := p.Lease(ctx); err == nil {
				b.Errorf("a lease whose ctx ended got an item")
				l.Release()
			}
		})
	}
	for p.Stats().QueuedLeases < dead {
		runtime.Gosched()
	}
	type got struct {
		l  Lease[*conn]
		at time.Time
	}
	live := make(chan got, 1)
	go func() {
		l, err := p.Lease(context.Background())
		at := time.Now()
		if err != nil {
			b.Errorf("the live lease: %v", err)
		}
		live <- got{l, at}
	}()
	for p.Stats().QueuedLeases < dead+1 {
		runtime.Gosched()
	}
	cancel()
	start := time.Now()
	held.Release()
	g := <-live
	wg.Wait()
	return g.l, g.at.Sub(start)
}

// bnAwaitQueued returns once a lease is queued on p, or ctx has ended.
func bnAwaitQueued(ctx context.Context, p *Pool[*conn]) {
	for p.Stats().QueuedLeases == 0 && ctx.Err() == nil {
		runtime.Gosched() // with one P, the waiter must get to run
	}
}

// BenchmarkCreate measures the creation path: every lease creates an item
// (Discard destroys it), with a ctx that cannot end, as most callers pass.
func BenchmarkCreate(b *testing.B) {
	bnCreate(b, Options[*conn]{MaxSize: 1})
}

// BenchmarkCreateCapped is BenchmarkCreate with MaxConcurrentCreates and the
// CreateTimeout it requires: what taking and giving back a turn to create,
// and the timer that bounds the creation, cost.
func BenchmarkCreateCapped(b *testing.B) {
	bnCreate(b, Options[*conn]{MaxSize: 1, MaxConcurrentCreates: 1, CreateTimeout: time.Hour})
}

func bnCreate(b *testing.B, opts Options[*conn]) {
	p, done := bnPool(b, opts)
	defer done()
	ctx := context.Background()
	before := p.Stats().Created

	b.ReportAllocs()
	for b.Loop() {
		l, err := p.Lease(ctx)
		if err != nil {
			b.Fatalf("Lease: %v", err)
		}
		l.Discard()
	}
	assert.Equal(b, uint64(b.N), p.Stats().Created-before, "a lease did not create")
}

// BenchmarkLeaseBackendDown measures a lease that fails fast: the pool is
// down (FailFastAfter) and no item is idle.
func BenchmarkLeaseBackendDown(b *testing.B) {
	f := FactoryFunc[*conn](func(context.Context) (*conn, error) { return nil, errBoom })
	p, err := New(context.Background(), f, Options[*conn]{MaxSize: 4, FailFastAfter: 1, CreateTimeout: time.Hour, UpkeepInterval: time.Hour})
	require.NoError(b, err)
	defer p.Close()
	ctx := context.Background()
	_, err = p.Lease(ctx) // the failure that puts the pool down
	require.ErrorIs(b, err, errBoom)
	b.ReportAllocs()
	for b.Loop() {
		if _, err = p.Lease(ctx); !errors.Is(err, ErrBackendDown) {
			b.Fatalf("Lease: %v, want ErrBackendDown", err)
		}
	}
}

// BenchmarkLeaseReleaseObserved measures what observability costs a
// sequential lease and release of an idle item: nothing configured (leak
// detection is always on), metrics on a real SDK provider, and
// TrackLeaseSites, which reads the clock and the caller's stack on every
// lease.
func BenchmarkLeaseReleaseObserved(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts func(b *testing.B) Options[*conn]
	}{
		{"nil-provider", func(*testing.B) Options[*conn] { return Options[*conn]{} }},
		{"sdk", bnSDK},
		{"leak-sites", bnSites},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := bc.opts(b)
			opts.MinSize, opts.MaxSize = 16, 16
			p, done := bnPool(b, opts)
			defer done()
			bnSequential(b, p)
		})
	}
	// runtime.Callers walks the stack up to the 32 frames a site keeps:
	// from deep in a program a lease costs more than from a benchmark.
	b.Run("leak-sites-deep", func(b *testing.B) {
		opts := bnSites(b)
		opts.MinSize, opts.MaxSize = 16, 16
		p, done := bnPool(b, opts)
		defer done()
		bnAtDepth(40, func() { bnSequential(b, p) })
	})
}

// BenchmarkStandardMetricNames measures what Options.StandardMetricNames
// costs a sequential lease and release of an idle item on a real SDK
// provider: every lease records its wait and its use, where the pool's own
// names record one lease in 512. Compare with benchstat -col /names.
func BenchmarkStandardMetricNames(b *testing.B) {
	for _, standard := range []bool{false, true} {
		b.Run(map[bool]string{false: "names=pool", true: "names=standard"}[standard], func(b *testing.B) {
			opts := bnSDK(b)
			opts.MinSize, opts.MaxSize, opts.StandardMetricNames = 16, 16, standard
			p, done := bnPool(b, opts)
			defer done()
			bnSequential(b, p)
		})
	}
}

// BenchmarkAdaptiveSize is a sequential lease and release of an idle item
// with Options.AdaptiveSize off and on (MinSize and MaxSize 16, so the limit
// is 16 from the start): what the option costs a lease that never waits.
func BenchmarkAdaptiveSize(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "adaptive=off", true: "adaptive=on"}[on], func(b *testing.B) {
			p, done := bnPool(b, Options[*conn]{MinSize: 16, MaxSize: 16, AdaptiveSize: on})
			defer done()
			bnSequential(b, p)
		})
	}
}

func bnSites(*testing.B) Options[*conn] { return Options[*conn]{TrackLeaseSites: true} }

// bnAtDepth calls f n frames deeper than its caller.
//
//go:noinline
func bnAtDepth(n int, f func()) {
	if n == 0 {
		f()
		return
	}
	bnAtDepth(n-1, f)
}

// bnSDK returns Options with an SDK meter provider, read by a ManualReader
// that the benchmark never collects: what a lease records is what it costs.
func bnSDK(b *testing.B) Options[*conn] {
	mp, _ := mtProvider(b)
	return Options[*conn]{MeterProvider: mp}
}

// BenchmarkOutstanding measures Outstanding called in a loop, as a debug
// handler under load would, while 64 goroutines lease and release over 16
// items; leases/op says how far the load went on meanwhile.
func BenchmarkOutstanding(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts Options[*conn]
	}{
		{"neither", Options[*conn]{}},
		{"leak-threshold", Options[*conn]{LeakThreshold: time.Second}},
		{"leak-sites", Options[*conn]{TrackLeaseSites: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := bc.opts
			opts.MinSize, opts.MaxSize = 16, 16
			p, done := bnPool(b, opts)
			defer done()
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for ctx.Err() == nil {
						l, err := p.Lease(ctx)
						if err != nil {
							return // stop ended the wait
						}
						l.Release()
					}
				})
			}
			before := p.Stats().Leases
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n += len(p.Outstanding())
			}
			leases := p.Stats().Leases - before
			stop()
			wg.Wait()
			b.ReportMetric(float64(leases)/float64(b.N), "leases/op")
			b.ReportMetric(float64(n)/float64(b.N), "listed/op")
		})
	}
}

// BenchmarkWatcherScan measures one scan of LeakThreshold's over a pool's
// items, none leased: what the keeper's scans cost the process every
// LeakThreshold/8 while nothing is out (docs/DESIGN.md, "Who holds the
// items").
func BenchmarkWatcherScan(b *testing.B) {
	for _, n := range []int{16, 1000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			p, done := bnPool(b, Options[*conn]{MinSize: n, MaxSize: n, LeakThreshold: time.Hour})
			defer done()
			var buf scanBufs[*conn]
			b.ReportAllocs()
			for b.Loop() {
				p.ob.followAll(&buf, p.done, func(f func()) { f() })
			}
		})
	}
}

// bnNoopTracer is a Tracer that does nothing.
type bnNoopTracer struct{}

func (bnNoopTracer) LeaseStart(ctx context.Context, _ string) context.Context { return ctx }
func (bnNoopTracer) LeaseEnd(context.Context, LeaseTrace)                     {}
func (bnNoopTracer) Released(context.Context, ReleaseTrace)                   {}
