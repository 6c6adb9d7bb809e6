package pool

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lkReports collects the LeakReports of a pool's OnLeak.
type lkReports struct {
	mu      sync.Mutex
	reports []LeakReport
}

func (r *lkReports) onLeak(rep LeakReport) {
	r.mu.Lock()
	r.reports = append(r.reports, rep)
	r.mu.Unlock()
}

func (r *lkReports) get() []LeakReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]LeakReport(nil), r.reports...)
}

// lkLeakOne takes a lease from p and drops it without ending it: the leak
// the tests look for, and the function its report must name.
//
//go:noinline
func lkLeakOne(t *testing.T, p *Pool[*conn]) {
	l, err := p.Lease(context.Background())
	require.NoError(t, err)
	_ = l.Value()
}

// lkEventually runs the garbage collector until cond holds, or fails the
// test after testWait. Cleanups run on a goroutine of their own after the
// cycle that found their object unreachable, so each round collects and
// then yields.
func lkEventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v of garbage collections: %s", testWait, msg)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// lkSettle runs the garbage collector a few times, so that every cleanup
// that was going to be queued has been queued, and lets them run.
func lkSettle() {
	for range 5 {
		runtime.GC()
		runtime.Gosched()
	}
}

// lkNewPool returns a pool whose leaks go to the returned reports, with
// metrics on.
func lkNewPool(t *testing.T, opts Options[*conn]) (*Pool[*conn], *tracker, *lkReports, func() mtCollected) {
	t.Helper()
	reps := &lkReports{}
	mp, r := mtProvider(t)
	opts.OnLeak = reps.onLeak
	opts.MeterProvider = mp
	p, tr := newTracked(t, opts)
	return p, tr, reps, func() mtCollected { return mtCollect(t, r) }
}

// lkLeakedMetric returns pool.leases.leaked for the pool named name, 0 when
// it has no point.
func lkLeakedMetric(t *testing.T, c mtCollected, name string) int64 {
	t.Helper()
	return c.mtPoolCounter(t, "pool.leases.leaked", "{lease}", name)
}

func TestLeakReportedOnceWithItsSite(t *testing.T) {
	p, _, reps, collect := lkNewPool(t, Options[*conn]{Name: "leaky", MaxSize: 1, TrackLeaseSites: true})
	lkLeakOne(t, p)
	lkEventually(t, func() bool { return len(reps.get()) > 0 }, "the leaked lease was not reported")
	lkSettle()

	got := reps.get()
	require.Len(t, got, 1, "reports")
	rep := got[0]
	assert.Equal(t, "leaky", rep.Pool)
	assert.Positive(t, rep.Age)
	assert.Less(t, rep.Age, testWait)
	first, _, _ := strings.Cut(rep.Stack, "\n")
	assert.Equal(t, "github.com/msl-armory/pool.lkLeakOne", first, "the stack starts at the caller of Lease:\n%s", rep.Stack)
	assert.Contains(t, rep.Stack, "leaks_test.go:")
	assert.Contains(t, rep.Stack, "\ngithub.com/msl-armory/pool.TestLeakReportedOnceWithItsSite\n", "the stack goes on to the test")

	s := p.Stats()
	assert.Equal(t, uint64(1), s.Leaked)
	assert.Equal(t, int64(1), lkLeakedMetric(t, collect(), "leaky"))
	// The leaked lease holds its permit forever: the pool of one is spent.
	assert.Equal(t, 1, s.ActiveLeases)
	_, err := p.TryLease(context.Background())
	assert.ErrorIs(t, err, ErrExhausted)
}

// TestLeakReportNamesTheLeasingFunction checks leakSiteSkip on every way
// into a lease: the fast path (an idle item from the slot, or from the
// gate) and the slow one (a fresh item), through Lease and TryLease.
func TestLeakReportNamesTheLeasingFunction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(p *Pool[*conn])
		lease  func(p *Pool[*conn]) (Lease[*conn], error)
		caller string // the function that called Lease or TryLease
	}{
		{"Lease, fresh item", func(*Pool[*conn]) {}, lkLease, "lkLease"},
		{"Lease, idle item", func(p *Pool[*conn]) { mustLease(t, p).Release() }, lkLease, "lkLease"},
		{"TryLease, fresh item", func(*Pool[*conn]) {}, lkTryLease, "lkTryLease"},
		{"TryLease, idle item", func(p *Pool[*conn]) { mustLease(t, p).Release() }, lkTryLease, "lkTryLease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, reps, _ := lkNewPool(t, Options[*conn]{TrackLeaseSites: true})
			tc.setup(p)
			lkDrop(t, p, tc.lease)
			lkEventually(t, func() bool { return len(reps.get()) > 0 }, "the leaked lease was not reported")
			stack := reps.get()[0].Stack
			frames := strings.Split(stack, "\n")
			require.GreaterOrEqual(t, len(frames), 4, "stack:\n%s", stack)
			assert.Equal(t, "github.com/msl-armory/pool."+tc.caller, frames[0], "stack:\n%s", stack)
			assert.Equal(t, "github.com/msl-armory/pool.lkDrop", frames[2], "stack:\n%s", stack)
		})
	}
}

func lkLease(p *Pool[*conn]) (Lease[*conn], error)    { return p.Lease(context.Background()) }
func lkTryLease(p *Pool[*conn]) (Lease[*conn], error) { return p.TryLease(context.Background()) }

// lkDrop leases through lease and drops the lease.
//
//go:noinline
func lkDrop(t *testing.T, p *Pool[*conn], lease func(*Pool[*conn]) (Lease[*conn], error)) {
	l, err := lease(p)
	require.NoError(t, err)
	_ = l.Value()
}

func TestLeakWithoutSites(t *testing.T) {
	t.Run("OnLeak gets the pool's name only", func(t *testing.T) {
		p, _, reps, collect := lkNewPool(t, Options[*conn]{Name: "quiet"})
		lkLeakOne(t, p)
		lkEventually(t, func() bool { return len(reps.get()) > 0 }, "the leaked lease was not reported")
		lkSettle()
		assert.Equal(t, []LeakReport{{Pool: "quiet"}}, reps.get())
		assert.Equal(t, uint64(1), p.Stats().Leaked)
		assert.Equal(t, int64(1), lkLeakedMetric(t, collect(), "quiet"))
	})
	t.Run("without OnLeak a leak is still counted", func(t *testing.T) {
		p, _ := newTracked(t, Options[*conn]{})
		lkLeakOne(t, p)
		lkEventually(t, func() bool { return p.Stats().Leaked == 1 }, "the leaked lease was not counted")
		lkSettle()
		assert.Equal(t, uint64(1), p.Stats().Leaked)
	})
}

// TestLeakNeverReportsEndedLeases: released, discarded and detached leases,
// and items destroyed by eviction, Clear and Close, are never reported. One
// real leak, found after all of them, shows that the collector did run the
// cleanups of that time.
func TestLeakNeverReportsEndedLeases(t *testing.T) {
	clk := &fakeClock{}
	p, tr, reps, collect := lkNewPool(t, Options[*conn]{
		Name: "tidy", MaxSize: 8, IdleTimeout: time.Minute, TrackLeaseSites: true,
	})
	p.clk.fake = clk.now

	var detached []*conn
	func() {
		ls := make([]Lease[*conn], 8)
		for i := range ls {
			ls[i] = mustLease(t, p)
		}
		ls[0].Release() // idle, then evicted
		ls[1].Release() // idle, then cleared
		ls[2].Release() // idle, then closed
		ls[3].Discard()
		ls[4].Discard()
		detached = append(detached, ls[5].Detach(), ls[6].Detach())
		// ls[7] stays leased: released after Close, which destroys it.
		clk.advance(int64(2 * time.Minute))
		ev := mustLease(t, p) // evicts the three idle items, creates a fresh one
		ev.Release()
		ls[1] = mustLease(t, p) // reuse a handle variable: the old lease is stale
		ls[1].Release()
		p.Clear()
		ls[2] = mustLease(t, p)
		ls[2].Release() // idle when Close comes
		require.NoError(t, p.Close())
		ls[7].Release()
		// Every handle above is stale now; they all die here.
	}()
	lkSettle()
	assert.Empty(t, reps.get(), "an ended lease was reported")

	// The control: a lease leaked from the closed pool, taken before Close.
	q, _, qreps, _ := lkNewPool(t, Options[*conn]{Name: "control"})
	lkLeakOne(t, q)
	lkEventually(t, func() bool { return len(qreps.get()) > 0 }, "the control leak was not reported")
	lkSettle()

	assert.Empty(t, reps.get(), "an ended lease was reported")
	s := p.Stats()
	assert.Zero(t, s.Leaked)
	assert.Equal(t, uint64(3), s.IdleExpired)
	assert.Equal(t, uint64(2), s.Detached)
	assert.Zero(t, lkLeakedMetric(t, collect(), "tidy"))
	assert.Equal(t, int64(2), tr.live.Load(), "only the detached items are left")
	for _, c := range detached {
		assert.False(t, c.closed.Load(), "a detached item was destroyed")
	}
}

// TestLeakFromClosedPoolReported: a lease taken before Close and dropped
// after it is still a leak, since the pool is alive.
func TestLeakFromClosedPoolReported(t *testing.T) {
	p, _, reps, _ := lkNewPool(t, Options[*conn]{Name: "closing"})
	lkLeakAfterClose(t, p)
	lkEventually(t, func() bool { return len(reps.get()) > 0 }, "the leaked lease was not reported")
	assert.Equal(t, uint64(1), p.Stats().Leaked)
}

//go:noinline
func lkLeakAfterClose(t *testing.T, p *Pool[*conn]) {
	l := mustLease(t, p)
	require.NoError(t, p.Close())
	_ = l.Value()
}

// TestLeakPoolDroppedWithoutClose: a pool dropped without Close, with idle
// items and metrics on, is collected, and its idle items are not reported.
func TestLeakPoolDroppedWithoutClose(t *testing.T) {
	var reported atomic.Int64
	collected := make(chan struct{})
	mp, r := mtProvider(t)
	func() {
		p, err := New[*conn](context.Background(), &tracker{}, Options[*conn]{
			Name: "dropped", MinSize: 3, MaxSize: 4, TrackLeaseSites: true, MeterProvider: mp,
			OnLeak: func(LeakReport) { reported.Add(1) },
		})
		require.NoError(t, err)
		l := mustLease(t, p)
		l.Release() // parked in a slot
		require.Equal(t, 3, p.Stats().ItemsAvailable)
		runtime.AddCleanup(p, func(ch chan struct{}) { close(ch) }, collected)
	}()
	c := mtCollect(t, r) // the gauges' callback holds the pool only weakly
	require.Contains(t, c, "pool.items.available")

	lkEventually(t, func() bool {
		select {
		case <-collected:
			return true
		default:
			return false
		}
	}, "the pool dropped without Close was not collected")
	lkSettle()
	assert.Zero(t, reported.Load(), "idle items of a dropped pool were reported as leaks")
	c = mtCollect(t, r)
	assert.NotContains(t, c, "pool.leases.leaked")
	assert.NotContains(t, c, "pool.items.available", "a collected pool still reports gauges")
}

// TestLeakOnLeakRunsOnItsOwnGoroutine: an OnLeak that blocks holds up no
// other report, as it would on the runtime's cleanup goroutine.
func TestLeakOnLeakRunsOnItsOwnGoroutine(t *testing.T) {
	started := make(chan LeakReport)
	unblock := make(chan struct{})
	var done sync.WaitGroup
	p, _ := newTracked(t, Options[*conn]{Name: "blocking", OnLeak: func(r LeakReport) {
		done.Add(1)
		defer done.Done()
		started <- r
		<-unblock
	}})
	defer done.Wait()
	defer close(unblock)

	lkLeakOne(t, p)
	lkLeakOne(t, p)
	for range 2 {
		lkEventually(t, func() bool {
			select {
			case <-started:
				return true
			default:
				return false
			}
		}, "a leak was not reported while another OnLeak blocked")
	}
	assert.Equal(t, uint64(2), p.Stats().Leaked)
}

// TestLeakOnLeakPanicIsLogged: OnLeak's panic for a lease the garbage
// collector found, on a goroutine of its own, has nobody to reach: it is
// logged, not raised, and the pool goes on.
func TestLeakOnLeakPanicIsLogged(t *testing.T) {
	p, _, log, _ := hdNewPool(t, Options[*conn]{Name: "panicky", OnLeak: func(LeakReport) { panic("onleak boom") }})
	lkLeakOne(t, p)
	lkEventually(t, func() bool { return len(log.find("pool: OnLeak panicked")) == 1 }, "the panic was not logged")
	rec := log.find("pool: OnLeak panicked")[0]
	assert.Equal(t, slog.LevelWarn, rec.level)
	assert.Contains(t, rec.attrs["err"].String(), "onleak boom")
	assert.Equal(t, uint64(1), p.Stats().Leaked)
	mustLease(t, p).Release()
}

// TestLeakDetectionAllocatesNothingPerLease: leak detection is on in every
// pool; with TrackLeaseSites too, a lease and release allocate nothing.
func TestLeakDetectionAllocatesNothingPerLease(t *testing.T) {
	for _, sites := range []bool{false, true} {
		p, _ := newTracked(t, Options[*conn]{MinSize: 1, MaxSize: 1, TrackLeaseSites: sites, OnLeak: func(LeakReport) {}})
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			l, err := p.Lease(ctx)
			if err != nil {
				panic(err)
			}
			l.Release()
		})
		assert.Zero(t, allocs, "allocations per lease and release, TrackLeaseSites %v", sites)
	}
}
