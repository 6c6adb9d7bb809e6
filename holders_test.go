package pool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of Pool.Outstanding (doc.go, "When leases time out"): which
// leases it lists, oldest first, with their ages and sites, and that it
// costs the leases nothing.

// TestOutstandingListsTheLeasesOldestFirst, with the age and stack each
// configuration gives.
func TestOutstandingListsTheLeasesOldestFirst(t *testing.T) {
	const gap = 30 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts Options[*conn]
	}{
		{"TrackLeaseSites", Options[*conn]{TrackLeaseSites: true}},
		{"LeakThreshold", Options[*conn]{LeakThreshold: 8 * gap / 3}}, // scans every gap/3
		{"neither", Options[*conn]{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.MinSize, opts.MaxSize = 2, 4
			p, _ := newTracked(t, opts)
			if tc.name == "neither" {
				l := hdHold(t, p)
				defer l.Release()
				assert.Nil(t, p.Outstanding(), "listed without records")
				assert.Equal(t, 1, p.Stats().ActiveLeases, "the count Outstanding points to")
				return
			}
			assert.Empty(t, p.Outstanding(), "idle items listed")
			var ls []Lease[*conn]
			for range 3 {
				ls = append(ls, hdHold(t, p))
				time.Sleep(gap)
			}
			out := p.Outstanding()
			require.Len(t, out, 3)
			assert.True(t, slices.IsSortedFunc(out, func(a, b LeaseInfo) int { return int(b.Age - a.Age) }), "not oldest first: %v", out)
			switch tc.name {
			case "TrackLeaseSites":
				for i, li := range out {
					assert.GreaterOrEqual(t, li.Age, time.Duration(3-i)*gap, "lease %d", i)
					first, _, _ := strings.Cut(li.Stack, "\n")
					assert.Equal(t, "github.com/msl-armory/pool.hdHold", first)
					assert.Contains(t, li.Stack, "testutil_test.go:")
				}
			case "LeakThreshold":
				// Known to within a scan: the oldest two have been seen.
				for i, li := range out[:2] {
					assert.Greater(t, li.Age, time.Duration(2-i)*gap-gap/2, "lease %d", i)
					assert.LessOrEqual(t, li.Age, time.Duration(3-i)*gap+gap/2, "lease %d", i)
				}
				for _, li := range out {
					assert.Empty(t, li.Stack)
				}
			}
			ls[1].Release()
			assert.Len(t, p.Outstanding(), 2)
			ls[0].Discard()
			_ = ls[2].Detach()
			assert.Empty(t, p.Outstanding())
		})
	}
}

// hdStuck is a configuration of pool in which one item is held, stuck, by
// something other than a lease (or, for "Preparer on lease" and "Reset"
// without LeakThreshold or TrackLeaseSites, by a Lease or Release call).
type hdStuck struct {
	name   string
	listed map[string]bool // by configuration: listed by Outstanding while stuck
	setup  func(t *testing.T, opts *Options[*conn], gate *hdGate)
	stick  func(t *testing.T, p *Pool[*conn], tr *tracker, gate *hdGate) (unstick func())
}

// hdGate blocks a callback, when armed, until it is opened.
type hdGate struct {
	armed   atomic.Bool
	entered chan struct{}
	open    chan struct{}
}

func newHdGate() *hdGate {
	return &hdGate{entered: make(chan struct{}, 1), open: make(chan struct{})}
}

// pass blocks while the gate is armed, until it is opened.
func (g *hdGate) pass() {
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.open
	}
}

// TestOutstandingListsOnlyLeases: an item being created, checked by the
// upkeep, prepared while fresh or destroyed is no lease, however long that
// takes; with LeakThreshold or TrackLeaseSites neither is one that a Lease
// call checks or a Release call resets, and none of them is ever reported
// as held.
func TestOutstandingListsOnlyLeases(t *testing.T) {
	const lt = 30 * time.Millisecond
	configs := []struct {
		name string
		opts Options[*conn]
	}{
		{"LeakThreshold", Options[*conn]{LeakThreshold: lt}},
		{"LeakThreshold+TrackLeaseSites", Options[*conn]{LeakThreshold: lt, TrackLeaseSites: true}},
	}
	between := map[string]bool{} // a Lease or Release call's item, listed
	preparer := func(g *hdGate) CheckFunc[*conn] {
		return func(context.Context, *conn) error { g.pass(); return nil }
	}
	for _, sc := range []hdStuck{
		{name: "being created", stick: func(t *testing.T, p *Pool[*conn], tr *tracker, _ *hdGate) func() {
			block := make(chan struct{})
			tr.mu.Lock()
			tr.block = block
			tr.mu.Unlock()
			ch := leaseAsync(context.Background(), p)
			hdEventually(t, func() bool { return p.Stats().ActiveLeases == 1 }, "no creation under way")
			return func() {
				close(block)
				awaitLease(t, ch).l.Release()
			}
		}},
		{name: "fresh, prepared", setup: func(_ *testing.T, o *Options[*conn], g *hdGate) { o.Preparer = preparer(g) },
			stick: func(t *testing.T, p *Pool[*conn], _ *tracker, g *hdGate) func() {
				g.armed.Store(true)
				ch := leaseAsync(context.Background(), p)
				<-g.entered
				return func() {
					close(g.open)
					awaitLease(t, ch).l.Release()
				}
			}},
		{name: "checked by the upkeep", setup: func(_ *testing.T, o *Options[*conn], g *hdGate) {
			o.Preparer, o.CheckAfterIdle, o.UpkeepInterval = preparer(g), time.Millisecond, 5*time.Millisecond
		}, stick: func(t *testing.T, p *Pool[*conn], _ *tracker, g *hdGate) func() {
			hdHold(t, p).Release() // a checked item, idle
			g.armed.Store(true)
			<-g.entered
			return func() { close(g.open) }
		}},
		{name: "Preparer on lease", listed: between, setup: func(_ *testing.T, o *Options[*conn], g *hdGate) { o.Preparer = preparer(g) },
			stick: func(t *testing.T, p *Pool[*conn], _ *tracker, g *hdGate) func() {
				hdHold(t, p).Release() // idle and checked: checked again on every lease
				g.armed.Store(true)
				ch := leaseAsync(context.Background(), p)
				<-g.entered
				return func() {
					close(g.open)
					awaitLease(t, ch).l.Release()
				}
			}},
		{name: "Reset", listed: between, setup: func(_ *testing.T, o *Options[*conn], g *hdGate) {
			o.Reset = func(*conn) error { g.pass(); return nil }
		}, stick: func(t *testing.T, p *Pool[*conn], _ *tracker, g *hdGate) func() {
			l := hdHold(t, p)
			g.armed.Store(true)
			done := make(chan struct{})
			go func() { l.Release(); close(done) }()
			<-g.entered
			return func() {
				close(g.open)
				<-done
			}
		}},
		{name: "destroyed", setup: func(_ *testing.T, o *Options[*conn], g *hdGate) {
			o.Destroy = func(c *conn) error { g.pass(); return c.Close() }
		}, stick: func(t *testing.T, p *Pool[*conn], _ *tracker, g *hdGate) func() {
			l := hdHold(t, p)
			g.armed.Store(true)
			done := make(chan struct{})
			go func() { l.Discard(); close(done) }()
			<-g.entered
			return func() {
				close(g.open)
				<-done
			}
		}},
	} {
		for _, cfg := range configs {
			t.Run(sc.name+"/"+cfg.name, func(t *testing.T) {
				g := newHdGate()
				opts := cfg.opts
				opts.MaxSize = 2
				if sc.setup != nil {
					sc.setup(t, &opts, g)
				}
				reps := &lkReports{}
				opts.OnLeak = reps.onLeak
				tr := &tracker{}
				if opts.Destroy == nil {
					opts.Destroy = tr.destroy
				}
				p, err := New[*conn](context.Background(), tr, opts)
				require.NoError(t, err)
				defer func() { assert.NoError(t, p.Close()) }()

				unstick := sc.stick(t, p, tr, g)
				for range 3 { // across several of the watcher's scans
					assert.Equal(t, 1, p.Stats().ActiveLeases, "the item is in use")
					want := 0
					if sc.listed[cfg.name] {
						want = 1
					}
					assert.Len(t, p.Outstanding(), want)
					time.Sleep(lt)
				}
				unstick()
				assert.Empty(t, reps.get(), "reported as a long lease")
				hdEventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, "the item did not come back")
				assert.Empty(t, p.Outstanding())
			})
		}
	}
}

// TestOutstandingUnderLoad: while leases come and go, Outstanding never
// lists more than MaxSize leases, always oldest first; once nothing moves,
// it lists exactly the leases out.
func TestOutstandingUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options[*conn]
	}{
		{"LeakThreshold", Options[*conn]{LeakThreshold: 10 * time.Millisecond}},
		{"TrackLeaseSites", Options[*conn]{TrackLeaseSites: true}},
		{"upkeep and Preparer", Options[*conn]{LeakThreshold: 10 * time.Millisecond, MinSize: 2, UpkeepInterval: time.Millisecond,
			CheckAfterIdle: time.Millisecond, Preparer: CheckFunc[*conn](func(context.Context, *conn) error { return nil })}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const maxSize = 4
			opts := tc.opts
			opts.MaxSize = maxSize
			p, tr := newTracked(t, opts)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 12 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						l, err := p.Lease(context.Background())
						if !assert.NoError(t, err) {
							return
						}
						if rand.IntN(8) == 0 {
							time.Sleep(time.Duration(rand.Int64N(int64(time.Millisecond))))
						}
						l.Release()
					}
				})
			}
			calls := 0
			for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); calls++ {
				out := p.Outstanding()
				if len(out) > maxSize {
					t.Errorf("Outstanding listed %d leases, MaxSize %d", len(out), maxSize)
				}
				if !slices.IsSortedFunc(out, func(a, b LeaseInfo) int { return int(b.Age - a.Age) }) {
					t.Errorf("not oldest first: %v", out)
				}
				checkInvariants(t, p, tr.live.Load)
			}
			close(stop)
			wg.Wait()
			t.Logf("%d calls of Outstanding under load", calls)

			held := []Lease[*conn]{hdHold(t, p), hdHold(t, p)}
			hdEventually(t, func() bool { return p.Stats().ActiveLeases == len(held) }, "the upkeep still holds an item")
			assert.Len(t, p.Outstanding(), len(held))
			for _, l := range held {
				l.Release()
			}
			assert.Empty(t, p.Outstanding())
		})
	}
}

// TestOutstandingAllocatesNothingOnTheLease: the registry Outstanding
// reads costs the lease and release nothing, as leak detection does.
func TestOutstandingAllocatesNothingOnTheLease(t *testing.T) {
	if !pinsProcessor {
		// The portable build's processor hint comes from a sync.Pool, which
		// under -race drops a share of what it is given back, so a lease
		// there may allocate a new hint: not this feature's allocation.
		t.Skip("the portable build's processor hint may allocate under -race")
	}
	for _, opts := range []Options[*conn]{{}, {LeakThreshold: time.Hour}, {LeakThreshold: time.Hour, TrackLeaseSites: true}} {
		opts.MinSize, opts.MaxSize = 1, 1
		p, _ := newTracked(t, opts)
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			l, err := p.Lease(ctx)
			if err != nil {
				panic(err)
			}
			l.Release()
		})
		assert.Zero(t, allocs, "allocations per lease and release, %s", fmt.Sprint(opts.LeakThreshold, opts.TrackLeaseSites))
	}
}

// TestOutstandingSparesItemsWaitingForDestroy: items that Clear, a
// shrinking SetMaxSize, a sweep for expiry or Close took out of the idle
// items, and that wait their turn for a slow Destroy, are not leases: while
// they wait, Outstanding lists only the one lease a goroutine holds at a
// time, and LeakThreshold reports none of them (doc.go, "Leaks": never
// reported as held "however long it takes: an item ... being ...
// destroyed").
func TestOutstandingSparesItemsWaitingForDestroy(t *testing.T) {
	const (
		idle  = 8
		slow  = 25 * time.Millisecond // each Destroy: the last waits 8 × that
		short = 2 * time.Millisecond  // the leases that go on meanwhile
	)
	paths := []struct {
		name  string
		opts  Options[*conn]
		start func(p *Pool[*conn]) // takes the idle items out to destroy them; may block
	}{
		{"Clear", Options[*conn]{}, func(p *Pool[*conn]) { p.Clear() }},
		{"SetMaxSize", Options[*conn]{}, func(p *Pool[*conn]) { _ = p.SetMaxSize(1) }},
		{"sweep", Options[*conn]{IdleTimeout: 30 * time.Millisecond}, func(p *Pool[*conn]) {
			time.Sleep(40 * time.Millisecond) // past IdleTimeout, and a sweep due
			l, err := p.Lease(context.Background())
			if err == nil {
				l.Release()
			}
		}},
		{"Close", Options[*conn]{}, func(p *Pool[*conn]) { _ = p.Close() }},
	}
	for _, path := range paths {
		for _, cfg := range hdConfigs {
			t.Run(path.name+"/"+cfg.name, func(t *testing.T) {
				opts := path.opts
				opts.MaxSize = idle + 1
				if path.name != "SetMaxSize" { // which cannot shrink below MinSize
					opts.MinSize = idle
				}
				opts.LeakThreshold, opts.TrackLeaseSites = 4*slow, cfg.sites
				var destroying atomic.Bool
				opts.Destroy = func(c *conn) error {
					if destroying.Load() {
						time.Sleep(slow)
					}
					return c.Close()
				}
				p, _, _, _ := hdNewPool(t, opts)
				warm := make([]Lease[*conn], idle)
				for i := range warm {
					warm[i] = mustLease(t, p)
				}
				for _, l := range warm {
					l.Release()
				}
				require.Equal(t, idle, p.Stats().ItemsAvailable)
				destroying.Store(true)
				stop := make(chan struct{})
				var heldLong atomic.Uint64
				var wg sync.WaitGroup
				wg.Go(func() { // one lease at a time, as a light load does
					for {
						select {
						case <-stop:
							return
						default:
						}
						from := time.Now()
						l, err := p.TryLease(context.Background())
						if err != nil {
							time.Sleep(short)
							continue
						}
						time.Sleep(short)
						l.Release()
						if time.Since(from) >= opts.LeakThreshold {
							heldLong.Add(1) // a stall of this goroutine: a long lease indeed
						}
					}
				})
				done := make(chan struct{})
				go func() { defer close(done); path.start(p) }()
				most := 0
				for deadline := time.Now().Add(idle * slow); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					most = max(most, len(p.Outstanding()))
				}
				<-done
				close(stop)
				wg.Wait()
				// The load holds one lease at a time; the sweep's path takes
				// one more, its own, that meets the expired items.
				leases := 1
				if path.name == "sweep" {
					leases = 2
				}
				assert.LessOrEqual(t, most, leases, "Outstanding listed items waiting for their Destroy as leases")
				// Only the load's leases that a stalled host held past
				// LeakThreshold may be reported.
				assert.LessOrEqual(t, p.Stats().LongLeases, heldLong.Load(), "an item waiting for its Destroy was reported as a long lease")
			})
		}
	}
}

// TestOutstandingNeverListsEndedLeases: while 64 goroutines lease over 128
// items and discard one lease in four, Outstanding never lists more leases
// than the goroutines can hold at once: a lease that ended while the scan
// ran, its item destroyed and replaced, is not listed (doc.go, "When
// leases time out"; Outstanding's doc: never more than the leases out).
func TestOutstandingNeverListsEndedLeases(t *testing.T) {
	const workers, items = 64, 128
	for _, cfg := range []struct {
		name string
		opts Options[*conn]
	}{
		{"LeakThreshold", Options[*conn]{LeakThreshold: time.Hour}},
		{"TrackLeaseSites", Options[*conn]{TrackLeaseSites: true}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			opts := cfg.opts
			opts.MinSize, opts.MaxSize = items, items
			p, _ := newTracked(t, opts)
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						l, err := p.Lease(ctx)
						if err != nil {
							return
						}
						runtime.Gosched()
						if (i+w)%4 == 0 {
							l.Discard()
						} else {
							l.Release()
						}
					}
				})
			}
			most, scans := 0, 0
			for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); scans++ {
				most = max(most, len(p.Outstanding()))
			}
			stop()
			wg.Wait()
			t.Logf("%d scans, at most %d leases listed", scans, most)
			assert.LessOrEqual(t, most, workers, "Outstanding listed more leases than %d goroutines can hold", workers)
		})
	}
}

// TestOutstandingAfterAShrink: after SetMaxSize shrank the pool below the
// leases out, Outstanding lists them all, more than the new MaxSize, until
// they end (Outstanding's doc: within MaxSize but for a while after a
// shrink).
func TestOutstandingAfterAShrink(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 4, LeakThreshold: time.Hour})
	ls := make([]Lease[*conn], 4)
	for i := range ls {
		ls[i] = mustLease(t, p)
	}
	require.NoError(t, p.SetMaxSize(2))
	assert.Len(t, p.Outstanding(), 4, "the leases beyond the new MaxSize are still out")
	for _, l := range ls[:2] {
		l.Release()
	}
	assert.Len(t, p.Outstanding(), 2)
	for _, l := range ls[2:] {
		l.Release()
	}
	assert.Empty(t, p.Outstanding())
}

// outGauge counts the leases out, each from the start of its Lease call to
// the end of the call that ends it, and the most counted since reset. Both
// share one word, changed by compare-and-swap, so that the most is exact:
// no count between a reset and a read of most escapes it.
type outGauge struct{ w atomic.Uint64 } // most<<32 | now

func (g *outGauge) add(d int) {
	for {
		old := g.w.Load()
		now := uint64(uint32(int64(uint32(old)) + int64(d)))
		if g.w.CompareAndSwap(old, max(old>>32, now)<<32|now) {
			return
		}
	}
}

// reset makes the count now the most.
func (g *outGauge) reset() {
	for {
		old := g.w.Load()
		now := uint64(uint32(old))
		if g.w.CompareAndSwap(old, now<<32|now) {
			return
		}
	}
}

func (g *outGauge) most() int { return int(g.w.Load() >> 32) }

// TestOutstandingNeverListsMoreThanAreOut: while 64 goroutines lease over
// 128 items, discard one lease in 50 and rest between leases, with leases
// recording themselves (LeakThreshold, or TrackLeaseSites), Outstanding never lists more
// leases than were out at some instant of its call, counting each from the
// start of its Lease call to the end of its Release or Discard
// (Outstanding's doc).
func TestOutstandingNeverListsMoreThanAreOut(t *testing.T) {
	const workers, items, rounds = 64, 128, 4
	for round := range rounds {
		opts := Options[*conn]{MinSize: items, MaxSize: items, LeakThreshold: 100 * time.Millisecond}
		if round%2 == 0 {
			opts.LeakThreshold, opts.TrackLeaseSites = 0, true
		}
		p, _ := newTracked(t, opts)
		var out outGauge
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := 0; ; i++ {
					out.add(1)
					l, err := p.Lease(ctx)
					if err != nil {
						out.add(-1)
						return
					}
					runtime.Gosched()
					if (i+w)%50 == 0 {
						l.Discard()
					} else {
						l.Release()
					}
					out.add(-1)
					runtime.Gosched()
				}
			})
		}
		scans, over, worst := 0, 0, ""
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); scans++ {
			out.reset()
			n := len(p.Outstanding())
			if most := out.most(); n > most {
				over++
				worst = fmt.Sprintf("%d listed, at most %d out", n, most)
			}
		}
		stop()
		wg.Wait()
		t.Logf("round %d: %d scans", round, scans)
		assert.Zero(t, over, "round %d: Outstanding listed more leases than were out in %d of %d calls; the last: %s", round, over, scans, worst)
	}
}

// TestOutstandingWhenLeasesChangeHandsMidScan: a scan reads lease A out,
// then A ends and a lease takes B, which the scan then reads out too. Never
// were both out at once, so Outstanding lists one at most (Outstanding's
// doc): the second read of A's generation drops it. A hook after each read
// arranges it, whichever order the scan reads the two entries in.
func TestOutstandingWhenLeasesChangeHandsMidScan(t *testing.T) {
	for _, opts := range []Options[*conn]{{LeakThreshold: time.Hour}, {TrackLeaseSites: true}} {
		opts.MinSize, opts.MaxSize = 2, 2
		p, _ := newTracked(t, opts)
		arranged := 0
		for range 50 {
			a, b := mustLease(t, p), mustLease(t, p)
			b.Release() // B idle, in this processor's slot or the queue
			var taken Lease[*conn]
			testSighted = func(e any) {
				if e == any(a.e) && taken.e == nil {
					a.Release()
					if taken = mustLease(t, p); taken.e != a.e {
						arranged++
					}
				}
			}
			n := len(p.Outstanding())
			testSighted = nil
			assert.LessOrEqual(t, n, 1, "listed two leases never out at once")
			a.Release()
			taken.Release()
		}
		t.Logf("LeakThreshold %v, TrackLeaseSites %v: arranged %d in 50", opts.LeakThreshold, opts.TrackLeaseSites, arranged)
		assert.Positive(t, arranged)
	}
}

// hdPanicTracer's LeaseEnd panics while armed: the lease it reports is
// released by the pool and never recorded.
type hdPanicTracer struct{ armed atomic.Bool }

func (tr *hdPanicTracer) LeaseStart(ctx context.Context, _ string) context.Context { return ctx }
func (tr *hdPanicTracer) LeaseEnd(context.Context, LeaseTrace) {
	if tr.armed.CompareAndSwap(true, false) {
		panic("LeaseEnd")
	}
}
func (tr *hdPanicTracer) Released(context.Context, ReleaseTrace) {}

// TestOutstandingAfterALeaseThatDidNotRecord: a lease whose Tracer's
// LeaseEnd panicked ends without recording its start; the item, idle again,
// is not listed, though its record is two leases old (Outstanding's doc:
// idle items are not leases).
func TestOutstandingAfterALeaseThatDidNotRecord(t *testing.T) {
	tr := &hdPanicTracer{}
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, LeakThreshold: time.Hour, Tracer: tr})
	mustLease(t, p).Release() // recorded
	tr.armed.Store(true)
	assert.PanicsWithValue(t, "LeaseEnd", func() { _, _ = p.Lease(context.Background()) })
	assert.Empty(t, p.Outstanding(), "an idle item listed")
	l := mustLease(t, p)
	assert.Len(t, p.Outstanding(), 1)
	l.Release()
}
