package pool

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Expiry: IdleTimeout and MaxLifetime on lease and release, the sweep that
// reaches every idle item, and MaxLifetimeJitter (the package
// documentation's "Lifecycle of an item": Expired, and "Upkeep").

func TestLifecycleIdleTimeoutEvictsOnNextLease(t *testing.T) {
	tests := []struct {
		name    string
		idleFor int64 // nanoseconds past IdleTimeout (negative: short of it)
		expired bool
	}{
		{"short of it is reused", -1, false},
		{"exactly it is reused", 0, false},
		{"longer is destroyed", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, IdleTimeout: time.Minute})
			clk := setFakeClock(p)
			l := mustLease(t, p)
			first := l.Value()
			l.Release()
			clk.advance(int64(time.Minute) + tt.idleFor)

			s := p.Stats()
			assert.Equal(t, 1, s.ItemsAvailable, "eviction is lazy")
			assert.Zero(t, s.Destroyed, "eviction is lazy")

			l = mustLease(t, p)
			defer l.Release()
			s = p.Stats()
			if tt.expired {
				assert.Equal(t, 2, l.Value().id, "a fresh item replaces the expired one")
				assert.True(t, first.closed.Load())
				assert.Equal(t, uint64(1), s.IdleExpired)
				assert.Equal(t, uint64(1), s.Destroyed)
				assert.Equal(t, int64(2), tr.created.Load())
			} else {
				assert.Same(t, first, l.Value())
				assert.Zero(t, s.IdleExpired)
				assert.Zero(t, s.Destroyed)
			}
			assert.Zero(t, s.LifetimeExpired)
		})
	}
}

// Idle items are judged as leases meet them: the slot of the lease's
// processor first, then the idle queue newest first, then other slots. Which
// expired items one lease meets depends on where they were parked, so the
// test leases until every item has been met.
func TestLifecycleIdleTimeoutDestroysEveryExpiredItem(t *testing.T) {
	var mu sync.Mutex
	var destroyed []int
	p, tr := newTracked(t, Options[*conn]{
		MaxSize:     3,
		IdleTimeout: 25 * time.Second,
		Destroy: func(c *conn) error {
			mu.Lock()
			destroyed = append(destroyed, c.id)
			mu.Unlock()
			return c.Close()
		},
	})
	clk := setFakeClock(p)
	ls := []Lease[*conn]{mustLease(t, p), mustLease(t, p), mustLease(t, p)}
	for _, l := range ls { // idle since 0s, 10s and 20s
		l.Release()
		clk.advance(int64(10 * time.Second))
	}
	clk.advance(int64(10 * time.Second)) // now 40s: idle 40s, 30s, 20s

	l := mustLease(t, p)
	assert.Equal(t, 3, l.Value().id, "the one idle item within IdleTimeout is leased")
	more := []Lease[*conn]{mustLease(t, p), mustLease(t, p)}
	assert.ElementsMatch(t, []int{4, 5}, []int{more[0].Value().id, more[1].Value().id}, "with no idle item left, fresh ones")
	mu.Lock()
	assert.ElementsMatch(t, []int{1, 2}, destroyed, "the expired items are destroyed when met")
	mu.Unlock()
	s := p.Stats()
	assert.Equal(t, uint64(2), s.IdleExpired)
	assert.Zero(t, s.ItemsAvailable)
	assert.Equal(t, 3, s.ActiveLeases)
	assert.Equal(t, int64(5), tr.created.Load())
	l.Release()
	for _, l := range more {
		l.Release()
	}
	assertAtRest(t, p)
}

func TestLifecycleMaxLifetimeOnRelease(t *testing.T) {
	tests := []struct {
		name    string
		age     int64 // nanoseconds past MaxLifetime at release
		expired bool
	}{
		{"younger is kept", -1, false},
		{"exactly it is kept", 0, false},
		{"older is destroyed", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newTracked(t, Options[*conn]{MaxSize: 1, MaxLifetime: time.Hour})
			clk := setFakeClock(p)
			l := mustLease(t, p)
			item := l.Value()
			clk.advance(int64(time.Hour) + tt.age)
			l.Release()
			awaitDestroys(t, p)

			s := p.Stats()
			assert.Zero(t, s.ActiveLeases)
			if tt.expired {
				assert.True(t, item.closed.Load())
				assert.Zero(t, s.ItemsAvailable)
				assert.Equal(t, uint64(1), s.LifetimeExpired)
				assert.Equal(t, uint64(1), s.Destroyed)
			} else {
				assert.False(t, item.closed.Load())
				assert.Equal(t, 1, s.ItemsAvailable)
				assert.Zero(t, s.LifetimeExpired)
			}
			assert.Zero(t, s.IdleExpired)
			assertAtRest(t, p)
		})
	}
}

func TestLifecycleMaxLifetimeOnLease(t *testing.T) {
	tests := []struct {
		name             string
		heldFor, idleFor int64 // minutes; MaxLifetime is 60
		expired          bool
	}{
		{"young idle item is reused", 0, 30, false},
		{"idle item exactly MaxLifetime old is reused", 20, 40, false},
		{"idle item past MaxLifetime is destroyed", 0, 61, true},
		{"age counts from creation, not from release", 50, 11, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, MaxLifetime: time.Hour})
			clk := setFakeClock(p)
			l := mustLease(t, p)
			item := l.Value()
			clk.advance(minutes(tt.heldFor))
			l.Release()
			clk.advance(minutes(tt.idleFor))

			l = mustLease(t, p)
			defer l.Release()
			s := p.Stats()
			if tt.expired {
				assert.Equal(t, 2, l.Value().id)
				assert.True(t, item.closed.Load())
				assert.Equal(t, uint64(1), s.LifetimeExpired)
				assert.Equal(t, int64(2), tr.created.Load())
			} else {
				assert.Same(t, item, l.Value())
				assert.Zero(t, s.LifetimeExpired)
				assert.Equal(t, int64(1), tr.created.Load())
			}
			assert.Zero(t, s.IdleExpired)
		})
	}
}

func TestSweepPeriod(t *testing.T) {
	ms := int64(time.Millisecond)
	assert.Zero(t, sweepPeriod(0, 0), "no limit: no sweeping")
	assert.Equal(t, 25*ms, sweepPeriod(50*time.Millisecond, 0))
	assert.Equal(t, 25*ms, sweepPeriod(time.Hour, 50*time.Millisecond), "the smaller limit")
	assert.Equal(t, ms, sweepPeriod(time.Microsecond, 0), "at least a millisecond")
}

// lightLoad is the load after which, in the package documentation's
// "Upkeep", a lightly used pool shrinks back to what its load needs, while
// the processors' slots would serve it from the same items forever: a
// burst of 10 leases released together, then one lease every millisecond
// for a second, on the pool's fake clock. It returns the pool's Stats at the end, and how many items
// the load may keep in use: one, or in the portable build, where a
// goroutine's processor hint is not sticky under -race (sync.Pool drops
// the token at random there), one per slot and one more: each lease may
// land on another slot, and every slot may hold a recently used item.
func lightLoad(t *testing.T, opts Options[*conn]) (Stats, int) {
	t.Helper()
	opts.MaxSize = 16
	p, tr := newTracked(t, opts)
	clk := setFakeClock(p)
	burst := make([]Lease[*conn], 10)
	for i := range burst {
		burst[i] = mustLease(t, p)
	}
	for _, l := range burst {
		l.Release()
	}
	for range 1000 {
		clk.advance(int64(time.Millisecond))
		mustLease(t, p).Release()
		checkInvariants(t, p, func() int64 { return tr.live.Load() })
	}
	needs := 2
	if !pinsProcessor {
		needs = len(p.g.slots.s) + 1
	}
	awaitDestroys(t, p)
	return p.Stats(), needs
}

func TestIdleItemsExpireUnderLightLoad(t *testing.T) {
	for _, procs := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))

			s, needs := lightLoad(t, Options[*conn]{IdleTimeout: 50 * time.Millisecond})
			t.Logf("IdleTimeout: %d allocated, %d idle, IdleExpired %d", s.ItemsAllocated, s.ItemsAvailable, s.IdleExpired)
			assert.LessOrEqual(t, s.ItemsAllocated, needs, "the pool shrank to what the load needs: %+v", s)
			assert.GreaterOrEqual(t, s.IdleExpired, uint64(10-needs))

			s, needs = lightLoad(t, Options[*conn]{MaxLifetime: 50 * time.Millisecond})
			t.Logf("MaxLifetime: %d allocated, %d idle, LifetimeExpired %d", s.ItemsAllocated, s.ItemsAvailable, s.LifetimeExpired)
			assert.LessOrEqual(t, s.ItemsAllocated, needs, "%+v", s)
			assert.GreaterOrEqual(t, s.LifetimeExpired, uint64(10-needs))
		})
	}
}

func TestMaxLifetimeJitterSpreadsExpiry(t *testing.T) {
	const n = 1000
	p, _ := newTracked(t, Options[*conn]{MaxSize: n, MaxLifetime: time.Second, MaxLifetimeJitter: time.Second})
	clk := setFakeClock(p)
	ls := make([]Lease[*conn], n)
	for i := range ls {
		ls[i] = mustLease(t, p) // n items created at the same instant
	}
	for _, l := range ls {
		l.Release()
	}

	// Step the clock 10 ms at a time and sweep: the items each step
	// destroys expired within those 10 ms.
	const step = 10 * time.Millisecond
	var perStep []int
	for now := time.Duration(0); now <= 2*time.Second+step; now += step {
		clk.ns.Store(int64(now))
		before := p.Stats().LifetimeExpired
		p.ex.sweep(p.clk.now())
		awaitDestroys(t, p)
		perStep = append(perStep, int(p.Stats().LifetimeExpired-before))
		if now <= time.Second {
			require.Zero(t, perStep[len(perStep)-1], "nothing expires before MaxLifetime (at %v)", now)
		}
	}
	assert.EqualValues(t, n, p.Stats().LifetimeExpired, "all expire within MaxLifetime + jitter")
	worst := 0
	for i := range perStep {
		window := 0
		for j := i; j < i+10 && j < len(perStep); j++ { // 100 ms
			window += perStep[j]
		}
		worst = max(worst, window)
	}
	t.Logf("the busiest 100 ms window held %d of %d expiries (%.1f %%)", worst, n, 100*float64(worst)/n)
	assert.LessOrEqual(t, worst, n*15/100, "no 100 ms window holds more than 15 %%")
}

// TestUpkeepLeaseKeepsMinSizeThroughIdleExpiry: with the upkeep on, a lease
// that meets an item that has only idled past IdleTimeout keeps it while
// MinSize or fewer items exist, as the upkeep's own sweep does.
func TestUpkeepLeaseKeepsMinSizeThroughIdleExpiry(t *testing.T) {
	p, tr, clk := upkeptPool(t, Options[*conn]{MinSize: 2, MaxSize: 4, IdleTimeout: time.Minute})
	clk.advance(minutes(2))
	l := mustLease(t, p)
	l.Release()
	s := p.Stats()
	assert.Zero(t, s.IdleExpired, "no item destroyed for idling at MinSize")
	assert.EqualValues(t, 2, tr.created.Load(), "the lease used a seeded item")
	assert.Equal(t, 2, s.ItemsAllocated)
}

// A Release that runs the sweep for expiry gives its own item back whatever
// the sweep's Destroy calls do (doc.go, "Waiting and errors"): here the Destroy of an
// expired item calls runtime.Goexit, or fails and the Logger's handler
// panics as the sweep logs it.
func TestReleaseThatSweepsLosesNoItem(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(tr *tracker, o *Options[*conn])
	}{
		{"Goexit in Destroy", func(tr *tracker, o *Options[*conn]) { o.Destroy = goexitOnce(tr) }},
		{"Logger panics on a failed Destroy", func(tr *tracker, o *Options[*conn]) {
			var failed atomic.Bool
			o.Destroy = func(c *conn) error {
				err := tr.destroy(c)
				if failed.CompareAndSwap(false, true) {
					return errBoom
				}
				return err
			}
			o.Logger = slog.New(&panicHandler{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &tracker{}
			opts := Options[*conn]{MaxSize: 3, IdleTimeout: time.Minute}
			tc.opts(tr, &opts)
			p, err := New[*conn](context.Background(), tr, opts)
			require.NoError(t, err)
			clk := setFakeClock(p)
			a, b, c := mustLease(t, p), mustLease(t, p), mustLease(t, p)
			a.Release()
			b.Release()
			clk.advance(int64(2 * time.Minute)) // a and b expire, and a sweep is due

			onOwnGoroutine(t, c.Release) // c's release sweeps: it destroys a and b
			awaitDestroys(t, p)
			s := p.Stats()
			assert.Zero(t, s.ActiveLeases, "c came back: %+v", s)
			assert.Equal(t, 1, s.ItemsAvailable, "c is idle: %+v", s)
			assert.EqualValues(t, 2, s.IdleExpired, "a and b were destroyed")
			var held []Lease[*conn]
			for range 3 {
				l, err := p.TryLease(context.Background())
				require.NoError(t, err, "the whole of MaxSize can be leased")
				held = append(held, l)
			}
			for _, l := range held {
				l.Release()
			}
			_ = p.Close()
			assert.Zero(t, tr.live.Load(), "Close destroyed every item")
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			assert.NoError(t, p.Shutdown(ctx), "Shutdown finds the pool drained")
		})
	}
}

// MaxLifetime plus its jitter never overflows the pool's clock (doc.go,
// "Lifecycle of an item"): a lifetime of math.MaxInt64 means items never expire of old
// age, even on a clock that has run for a while.
func TestMaxLifetimeNearTheTopOfDurationNeverExpires(t *testing.T) {
	for _, opts := range []Options[*conn]{
		{MaxLifetime: math.MaxInt64},
		{MaxLifetime: math.MaxInt64 - 1, MaxLifetimeJitter: time.Hour},
	} {
		p, _ := newTracked(t, opts)
		clk := setFakeClock(p)
		clk.advance(int64(time.Hour))
		l := mustLease(t, p)
		item := l.Value()
		l.Release()
		l = mustLease(t, p)
		assert.Same(t, item, l.Value(), "the released item was lent again")
		l.Release()
		assert.Zero(t, p.Stats().LifetimeExpired)
	}
}
