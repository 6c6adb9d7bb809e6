package pool

// Tests of an item's life, per SPEC.md's Behaviour section: the lease path
// (expiry, readiness check and preparation), the release path (Reset,
// MaxLifetime), creation (factory errors, panics, its context, abandoned
// creations), disposal, and misuse of Lease handles.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lcWait bounds every wait for something another goroutine must do (see
// testWait); it is a hang detector, not a timing assertion.
const lcWait = testWait

// lcPreparer is a Preparer whose behaviour a test sets, recording the ids of
// the items each method saw. nil hooks: IsReady reports ready, Prepare
// succeeds.
type lcPreparer struct {
	mu       sync.Mutex
	isReady  func(ctx context.Context, c *conn) (bool, error)
	prepare  func(ctx context.Context, c *conn) error
	checks   []int // ids passed to IsReady, in order
	prepares []int // ids passed to Prepare, in order
}

func (lp *lcPreparer) IsReady(ctx context.Context, c *conn) (bool, error) {
	lp.mu.Lock()
	lp.checks = append(lp.checks, c.id)
	f := lp.isReady
	lp.mu.Unlock()
	if f == nil {
		return true, nil
	}
	return f(ctx, c)
}

func (lp *lcPreparer) Prepare(ctx context.Context, c *conn) error {
	lp.mu.Lock()
	lp.prepares = append(lp.prepares, c.id)
	f := lp.prepare
	lp.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(ctx, c)
}

func (lp *lcPreparer) set(isReady func(context.Context, *conn) (bool, error), prepare func(context.Context, *conn) error) {
	lp.mu.Lock()
	lp.isReady, lp.prepare = isReady, prepare
	lp.mu.Unlock()
}

func (lp *lcPreparer) seen() (checks, prepares []int) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return append([]int(nil), lp.checks...), append([]int(nil), lp.prepares...)
}

// lcStubborn is a factory that ignores its context, as a careless dial
// does: each Create announces itself on started, then waits for proceed.
type lcStubborn struct {
	started chan struct{} // buffered
	proceed chan struct{}
	made    chan *conn // buffered: the items created
	next    atomic.Int64
}

func (f *lcStubborn) Create(context.Context) (*conn, error) {
	f.started <- struct{}{}
	<-f.proceed
	c := &conn{id: int(f.next.Add(1))}
	f.made <- c
	return c, nil
}

// lcRecv receives one value from ch or fails the test.
func lcRecv[V any](t *testing.T, ch <-chan V, what string) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(lcWait):
		t.Fatalf("timed out waiting for %s", what)
		var zero V
		return zero
	}
}

// lcRecover calls f and returns what it panicked with (nil: no panic).
func lcRecover(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// lcClock installs a fake clock; call it right after New.
func lcClock(p *Pool[*conn]) *fakeClock {
	clk := &fakeClock{}
	p.clock = clk.now
	return clk
}

// lcSetBlock sets the tracker's block channel under its lock.
func lcSetBlock(tr *tracker, ch chan struct{}) {
	tr.mu.Lock()
	tr.block = ch
	tr.mu.Unlock()
}

func lcMin(n int64) int64 { return n * int64(time.Minute) }

// --- the lease path: readiness check and preparation -----------------------

func TestLifecyclePreparerAlwaysChecksFreshItem(t *testing.T) {
	for _, cai := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("CheckAfterIdle=%v", cai), func(t *testing.T) {
			lp := &lcPreparer{}
			p, _ := newTracked(t, Options[*conn]{MaxSize: 2, Preparer: lp, CheckAfterIdle: cai})
			lcClock(p)

			l1 := mustLease(t, p)
			l2 := mustLease(t, p)
			checks, _ := lp.seen()
			assert.Equal(t, []int{1, 2}, checks, "each fresh item is checked once")
			l1.Release()
			l2.Release()
		})
	}
}

func TestLifecyclePreparerCheckAfterIdle(t *testing.T) {
	const cai = time.Minute
	tests := []struct {
		name              string
		checkAfterIdle    time.Duration
		heldFor, idleFor  time.Duration // leased before the release; idle before the second lease
		wantSecondChecked bool
	}{
		{"zero checks every lease", 0, 0, 0, true},
		{"not idle is not checked", cai, 0, 0, false},
		{"idle just short is not checked", cai, 0, cai - 1, false},
		{"idle exactly that long is checked", cai, 0, cai, true},
		{"idle longer is checked", cai, 0, 5 * cai, true},
		{"time spent leased does not count as idle", cai, 5 * cai, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lp := &lcPreparer{}
			p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp, CheckAfterIdle: tt.checkAfterIdle})
			clk := lcClock(p)

			l := mustLease(t, p)
			clk.advance(int64(tt.heldFor))
			l.Release()
			clk.advance(int64(tt.idleFor))
			l = mustLease(t, p)
			defer l.Release()

			assert.Equal(t, 1, l.Value().id, "the idle item is reused")
			want := []int{1} // the fresh item's check
			if tt.wantSecondChecked {
				want = append(want, 1)
			}
			checks, _ := lp.seen()
			assert.Equal(t, want, checks)
		})
	}
}

func TestLifecyclePreparerNotReadyIsPrepared(t *testing.T) {
	lp := &lcPreparer{}
	lp.set(func(context.Context, *conn) (bool, error) { return false, nil }, nil)
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp})

	l, err := p.Lease(context.Background())
	require.NoError(t, err)
	defer l.Release()

	assert.Equal(t, 1, l.Value().id)
	checks, prepares := lp.seen()
	assert.Equal(t, []int{1}, checks)
	assert.Equal(t, []int{1}, prepares, "Prepare runs on the item IsReady found not ready")
	assert.Zero(t, p.Stats().PrepareFailed)
}

func TestLifecyclePreparerIdleItemFailingIsReplaced(t *testing.T) {
	errPrep := errors.New("lc: not ready")
	// The first item the Preparer looks at fails. Which idle item a lease
	// meets first depends on the slot it was parked in, so the test
	// remembers which one failed.
	type failFirst struct{ failed atomic.Int64 }
	fails := func(f *failFirst, c *conn) bool { return f.failed.CompareAndSwap(0, int64(c.id)) }
	failOne := map[string]func(*failFirst) (func(context.Context, *conn) (bool, error), func(context.Context, *conn) error){
		"IsReady error": func(f *failFirst) (func(context.Context, *conn) (bool, error), func(context.Context, *conn) error) {
			return func(_ context.Context, c *conn) (bool, error) {
				if fails(f, c) {
					return false, errPrep
				}
				return true, nil
			}, nil
		},
		"Prepare error": func(f *failFirst) (func(context.Context, *conn) (bool, error), func(context.Context, *conn) error) {
			return func(context.Context, *conn) (bool, error) { return false, nil },
				func(_ context.Context, c *conn) error {
					if fails(f, c) {
						return errPrep
					}
					return nil
				}
		},
	}
	tests := []struct {
		idle        int   // idle items before the failing lease
		wantCreated int64 // factory calls in all
		then        string
	}{
		{idle: 1, wantCreated: 2, then: "a fresh one"},
		{idle: 2, wantCreated: 2, then: "the next idle one"},
	}
	for mode, hooks := range failOne {
		for _, tt := range tests {
			t.Run(mode+" then "+tt.then, func(t *testing.T) {
				lp := &lcPreparer{}
				p, tr := newTracked(t, Options[*conn]{MaxSize: 2, Preparer: lp})
				var ls []Lease[*conn]
				items := map[int]*conn{}
				for range tt.idle {
					l := mustLease(t, p)
					ls = append(ls, l)
					items[l.Value().id] = l.Value()
				}
				for _, l := range ls {
					l.Release()
				}
				var f failFirst
				lp.set(hooks(&f))

				l, err := p.Lease(context.Background())
				require.NoError(t, err, "a failing idle item is no error for the lease")
				failed := int(f.failed.Load())
				require.Contains(t, items, failed, "an idle item was checked first")
				assert.NotEqual(t, failed, l.Value().id, "the failing item is not leased")
				assert.Equal(t, tt.wantCreated, tr.created.Load())
				assert.True(t, items[failed].closed.Load(), "the failing item is destroyed")
				s := p.Stats()
				assert.Equal(t, uint64(1), s.PrepareFailed)
				assert.Equal(t, uint64(1), s.Destroyed)
				l.Release()
				assertAtRest(t, p)
			})
		}
	}
}

func TestLifecyclePreparerFreshItemFailingReturnsError(t *testing.T) {
	errPrep := errors.New("lc: cannot prepare")
	tests := []struct {
		name    string
		isReady func(context.Context, *conn) (bool, error)
		prepare func(context.Context, *conn) error
	}{
		{
			name:    "IsReady error",
			isReady: func(context.Context, *conn) (bool, error) { return false, errPrep },
		},
		{
			name:    "Prepare error",
			isReady: func(context.Context, *conn) (bool, error) { return false, nil },
			prepare: func(context.Context, *conn) error { return errPrep },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lp := &lcPreparer{}
			lp.set(tt.isReady, tt.prepare)
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp})

			_, err := p.Lease(context.Background())
			require.Error(t, err)
			assert.ErrorIs(t, err, errPrep)
			assert.NotEqual(t, errPrep, err, "the error is wrapped")
			s := p.Stats()
			assert.Zero(t, s.ActiveLeases, "the permit is returned")
			assert.Zero(t, s.ItemsAvailable)
			assert.Equal(t, uint64(1), s.PrepareFailed)
			assert.Equal(t, uint64(1), s.Destroyed)
			assert.Zero(t, s.Canceled)
			assert.Zero(t, tr.live.Load(), "the item is destroyed")

			lp.set(nil, nil)
			l, err := p.TryLease(context.Background())
			require.NoError(t, err, "the permit is usable again")
			assert.Equal(t, 2, l.Value().id)
			l.Release()
			assertAtRest(t, p)
		})
	}
}

func TestLifecyclePreparationTimeoutFreshItem(t *testing.T) {
	lp := &lcPreparer{}
	lp.set(func(ctx context.Context, _ *conn) (bool, error) {
		<-ctx.Done()
		return false, ctx.Err()
	}, nil)
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp, PreparationTimeout: 20 * time.Millisecond})

	_, err := p.Lease(context.Background())
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrPreparationTimeout)
	s := p.Stats()
	assert.Zero(t, s.ActiveLeases)
	assert.Equal(t, uint64(1), s.PrepareFailed)
	assert.Zero(t, s.Canceled, "a preparation timeout is not the caller's cancellation")
	assert.Zero(t, tr.live.Load(), "the item is destroyed")
	assertAtRest(t, p)
}

func TestLifecyclePreparationCanceledByCaller(t *testing.T) {
	for _, idle := range []bool{false, true} {
		name := "fresh item"
		if idle {
			name = "idle item"
		}
		t.Run(name, func(t *testing.T) {
			entered := make(chan int, 1)
			lp := &lcPreparer{}
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp, PreparationTimeout: time.Hour})
			if idle {
				mustLease(t, p).Release()
			}
			lp.set(func(ctx context.Context, c *conn) (bool, error) {
				entered <- c.id
				<-ctx.Done()
				return false, ctx.Err()
			}, nil)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := leaseAsync(ctx, p)
			assert.Equal(t, 1, lcRecv(t, entered, "IsReady"))
			cancel()
			o := awaitLease(t, ch)

			require.Error(t, o.err)
			assert.ErrorIs(t, o.err, context.Canceled)
			assert.NotErrorIs(t, o.err, ErrPreparationTimeout)
			s := p.Stats()
			assert.Equal(t, uint64(1), s.Canceled)
			assert.Zero(t, s.ActiveLeases)
			assert.Zero(t, s.ItemsAvailable)
			assert.Equal(t, uint64(1), s.Destroyed)
			assert.Equal(t, int64(1), tr.created.Load(), "a caller that gave up gets no further item made")
			assertAtRest(t, p)
		})
	}
}

func TestLifecyclePreparerPanicReachesCaller(t *testing.T) {
	for _, idle := range []bool{false, true} {
		name := "fresh item"
		if idle {
			name = "idle item"
		}
		t.Run(name, func(t *testing.T) {
			lp := &lcPreparer{}
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp})
			if idle {
				mustLease(t, p).Release()
			}
			lp.set(func(context.Context, *conn) (bool, error) { panic("lc: IsReady panic") }, nil)

			v := lcRecover(func() { _, _ = p.Lease(context.Background()) })
			assert.Equal(t, "lc: IsReady panic", v)
			s := p.Stats()
			assert.Zero(t, s.ActiveLeases, "the permit is returned")
			assert.Zero(t, s.ItemsAvailable)
			assert.Zero(t, tr.live.Load(), "the item is destroyed")

			lp.set(nil, nil)
			l, err := p.TryLease(context.Background())
			require.NoError(t, err)
			l.Release()
			assertAtRest(t, p)
		})
	}
}

func TestLifecycleAbandonedItemIsPreparedWhenLeased(t *testing.T) {
	lp := &lcPreparer{}
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp, CheckAfterIdle: time.Hour})
	lcClock(p)
	block := make(chan struct{})
	lcSetBlock(tr, block)
	tr.ctxs = make(chan context.Context, 1)

	ctx, cancel := context.WithCancel(context.Background())
	ch := leaseAsync(ctx, p)
	lcRecv(t, tr.ctxs, "Create")
	cancel()
	require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
	close(block)
	require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 1 }, lcWait, time.Millisecond)
	checks, _ := lp.seen()
	assert.Empty(t, checks, "an abandoned item is not prepared until a lease takes it")

	l := mustLease(t, p)
	defer l.Release()
	assert.Equal(t, 1, l.Value().id)
	checks, _ = lp.seen()
	assert.Equal(t, []int{1}, checks, "its first lease checks it, CheckAfterIdle notwithstanding")
}

// --- the lease path: IdleTimeout and MaxLifetime ---------------------------

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
			clk := lcClock(p)
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
	clk := lcClock(p)
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
			clk := lcClock(p)
			l := mustLease(t, p)
			item := l.Value()
			clk.advance(int64(time.Hour) + tt.age)
			l.Release()

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
			clk := lcClock(p)
			l := mustLease(t, p)
			item := l.Value()
			clk.advance(lcMin(tt.heldFor))
			l.Release()
			clk.advance(lcMin(tt.idleFor))

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

// --- the release path: Reset -----------------------------------------------

func TestLifecycleResetRunsOnRelease(t *testing.T) {
	var mu sync.Mutex
	var resets []int
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Reset: func(c *conn) error {
		mu.Lock()
		resets = append(resets, c.id)
		mu.Unlock()
		return nil
	}})
	l := mustLease(t, p)
	mu.Lock()
	assert.Empty(t, resets, "Reset does not run on lease")
	mu.Unlock()
	l.Release()
	mu.Lock()
	assert.Equal(t, []int{1}, resets)
	mu.Unlock()

	l = mustLease(t, p)
	assert.Equal(t, 1, l.Value().id, "a reset item is reused")
	l.Release()
	assertAtRest(t, p)
}

func TestLifecycleResetFailureDestroysItem(t *testing.T) {
	tests := []struct {
		name      string
		reset     func(c *conn) error
		wantPanic any
	}{
		{"error", func(*conn) error { return errBoom }, nil},
		{"panic", func(*conn) error { panic("lc: Reset panic") }, "lc: Reset panic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Reset: func(c *conn) error {
				if c.id == 1 {
					return tt.reset(c)
				}
				return nil
			}})
			l := mustLease(t, p)
			item := l.Value()

			v := lcRecover(l.Release)
			assert.Equal(t, tt.wantPanic, v, "a panic in Reset reaches the Release caller")
			s := p.Stats()
			assert.True(t, item.closed.Load(), "the item is destroyed")
			assert.Equal(t, uint64(1), s.Destroyed)
			assert.Zero(t, s.ActiveLeases, "the permit is freed")
			assert.Zero(t, s.ItemsAvailable)

			l2, err := p.TryLease(context.Background())
			require.NoError(t, err)
			assert.Equal(t, 2, l2.Value().id, "the next lease creates a fresh item")
			assert.Equal(t, int64(2), tr.created.Load())
			l2.Release()
			assertAtRest(t, p)
		})
	}
}

// --- disposal --------------------------------------------------------------

func TestLifecycleDefaultDestroyClosesCloser(t *testing.T) {
	tr := &tracker{}
	p, err := New[*conn](context.Background(), tr, Options[*conn]{MaxSize: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	l1, l2 := mustLease(t, p), mustLease(t, p)
	discarded, released := l1.Value(), l2.Value()
	l1.Discard()
	assert.True(t, discarded.closed.Load(), "Discard closes an io.Closer item")
	l2.Release()
	assert.False(t, released.closed.Load())
	require.NoError(t, p.Close())
	assert.True(t, released.closed.Load(), "Close closes an idle io.Closer item")
}

func TestLifecycleCustomDestroyReplacesClose(t *testing.T) {
	var mu sync.Mutex
	var destroyed []int
	p, _ := newTracked(t, Options[*conn]{MaxSize: 2, Destroy: func(c *conn) error {
		mu.Lock()
		destroyed = append(destroyed, c.id)
		mu.Unlock()
		return nil
	}})
	l1, l2 := mustLease(t, p), mustLease(t, p)
	items := []*conn{l1.Value(), l2.Value()}
	l1.Discard()
	l2.Release()
	require.NoError(t, p.Close())

	mu.Lock()
	assert.Equal(t, []int{1, 2}, destroyed)
	mu.Unlock()
	for _, c := range items {
		assert.False(t, c.closed.Load(), "a custom Destroy is called instead of Close")
	}
	assert.Equal(t, uint64(2), p.Stats().Destroyed)
}

func TestLifecycleCloseJoinsDestroyErrors(t *testing.T) {
	errs := map[int]error{1: errors.New("lc: destroy 1"), 2: errors.New("lc: destroy 2")}
	p, _ := newTracked(t, Options[*conn]{MaxSize: 3, Destroy: func(c *conn) error {
		_ = c.Close()
		return errs[c.id]
	}})
	ls := []Lease[*conn]{mustLease(t, p), mustLease(t, p), mustLease(t, p)}
	for _, l := range ls {
		l.Release()
	}

	err := p.Close()
	require.Error(t, err)
	assert.ErrorIs(t, err, errs[1])
	assert.ErrorIs(t, err, errs[2])
	s := p.Stats()
	assert.Equal(t, uint64(3), s.Destroyed, "every idle item is destroyed, failing or not")
	assert.Zero(t, s.ActiveLeases)
	assert.Zero(t, s.ItemsAvailable)
	assertAtRest(t, p)
}

func TestLifecycleCloseDestroyPanicStillDestroysTheRest(t *testing.T) {
	var mu sync.Mutex
	var destroyed []int
	p, _ := newTracked(t, Options[*conn]{MaxSize: 3, Destroy: func(c *conn) error {
		mu.Lock()
		destroyed = append(destroyed, c.id)
		mu.Unlock()
		if c.id == 2 {
			panic("lc: Destroy panic")
		}
		return c.Close()
	}})
	ls := []Lease[*conn]{mustLease(t, p), mustLease(t, p), mustLease(t, p)}
	items := make([]*conn, len(ls))
	for i, l := range ls {
		items[i] = l.Value()
		l.Release()
	}

	v := lcRecover(func() { _ = p.Close() })
	assert.Equal(t, "lc: Destroy panic", panicValue(v), "the panic reaches Close's caller")
	mu.Lock()
	assert.ElementsMatch(t, []int{1, 2, 3}, destroyed, "every idle item is destroyed")
	mu.Unlock()
	assert.True(t, items[0].closed.Load())
	assert.True(t, items[2].closed.Load())
	s := p.Stats()
	assert.Zero(t, s.ActiveLeases, "every permit is freed")
	assert.Zero(t, s.ItemsAvailable)
	assert.Equal(t, uint64(3), s.Destroyed)
	assertAtRest(t, p)
}

func TestLifecycleDestroyPanicOnDiscardFreesPermit(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Destroy: func(c *conn) error {
		if c.id == 1 {
			panic("lc: Destroy panic")
		}
		return c.Close()
	}})
	l := mustLease(t, p)

	v := lcRecover(l.Discard)
	assert.Equal(t, "lc: Destroy panic", v)
	s := p.Stats()
	assert.Zero(t, s.ActiveLeases)
	assert.Equal(t, uint64(1), s.Destroyed)
	l2, err := p.TryLease(context.Background())
	require.NoError(t, err, "the permit is usable again")
	l2.Release()
	assertAtRest(t, p)
}

// --- creation ----------------------------------------------------------------

// lcCtxKinds are the two ways Lease runs a factory: inline when ctx cannot
// end, on a goroutine of its own when it can.
var lcCtxKinds = []struct {
	name string
	ctx  func(t *testing.T) context.Context
}{
	{"inline (ctx cannot end)", func(*testing.T) context.Context { return context.Background() }},
	{"on a goroutine (cancelable ctx)", func(t *testing.T) context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		return ctx
	}},
}

func TestLifecycleFactoryErrorReturnsPermit(t *testing.T) {
	for _, kind := range lcCtxKinds {
		t.Run(kind.name, func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
			tr.setFail(errBoom)

			_, err := p.Lease(kind.ctx(t))
			require.Error(t, err)
			assert.ErrorIs(t, err, errBoom)
			assert.NotEqual(t, errBoom, err, "the error is wrapped")
			s := p.Stats()
			assert.Zero(t, s.ActiveLeases, "the permit is returned")
			assert.Zero(t, s.Created)
			assert.Zero(t, s.Canceled)

			tr.setFail(nil)
			l, err := p.TryLease(kind.ctx(t))
			require.NoError(t, err)
			l.Release()
			assertAtRest(t, p)
		})
	}
}

func TestLifecycleFactoryPanicReachesCaller(t *testing.T) {
	const maxSize = 2
	for _, kind := range lcCtxKinds {
		t.Run(kind.name, func(t *testing.T) {
			var panicking atomic.Bool
			var n atomic.Int64
			panicking.Store(true)
			f := FactoryFunc[*conn](func(context.Context) (*conn, error) {
				if panicking.Load() {
					panic("lc: factory panic")
				}
				return &conn{id: int(n.Add(1))}, nil
			})
			p, err := New(context.Background(), f, Options[*conn]{MaxSize: maxSize})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })

			for i := range maxSize + 1 { // more panics than permits
				v := lcRecover(func() { _, _ = p.Lease(kind.ctx(t)) })
				assert.Equal(t, "lc: factory panic", panicValue(v), "panic %d reaches the caller", i)
				require.Zero(t, p.Stats().ActiveLeases, "after panic %d every permit is in place", i)
			}

			panicking.Store(false)
			var ls []Lease[*conn]
			for range maxSize {
				l, err := p.TryLease(kind.ctx(t))
				require.NoError(t, err, "MaxSize leases succeed after the panics")
				ls = append(ls, l)
			}
			for _, l := range ls {
				l.Release()
			}
			assert.Equal(t, uint64(maxSize), p.Stats().Created)
			assertAtRest(t, p)
		})
	}
}

type lcCtxKey struct{}

func TestLifecycleFactoryContextKeepsValuesNotCancellation(t *testing.T) {
	t.Run("inline", func(t *testing.T) {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
		tr.ctxs = make(chan context.Context, 1)
		l, err := p.Lease(context.WithValue(context.Background(), lcCtxKey{}, "v"))
		require.NoError(t, err)
		l.Release()
		fctx := lcRecv(t, tr.ctxs, "the factory's ctx")
		assert.Equal(t, "v", fctx.Value(lcCtxKey{}))
	})
	t.Run("abandoned", func(t *testing.T) {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
		tr.ctxs = make(chan context.Context, 1)
		block := make(chan struct{})
		lcSetBlock(tr, block)

		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), lcCtxKey{}, "v"))
		defer cancel()
		ch := leaseAsync(ctx, p)
		fctx := lcRecv(t, tr.ctxs, "the factory's ctx")
		assert.Equal(t, "v", fctx.Value(lcCtxKey{}), "the caller's values reach the factory")
		cancel()
		require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
		assert.NoError(t, fctx.Err(), "the caller's cancellation does not reach the factory")

		close(block)
		require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 1 }, lcWait, time.Millisecond,
			"the creation finished despite the caller's cancellation")
	})
}

func TestLifecycleCloseCancelsFactoryContext(t *testing.T) {
	for _, kind := range lcCtxKinds {
		t.Run(kind.name, func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
			tr.ctxs = make(chan context.Context, 1)
			lcSetBlock(tr, make(chan struct{})) // never closed: only ctx ends Create

			ch := leaseAsync(kind.ctx(t), p)
			fctx := lcRecv(t, tr.ctxs, "the factory's ctx")
			require.NoError(t, fctx.Err())
			require.NoError(t, p.Close())
			lcRecv(t, fctx.Done(), "Close to cancel the factory's ctx")

			o := awaitLease(t, ch)
			assert.ErrorIs(t, o.err, ErrClosed)
			require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, lcWait, time.Millisecond)
			assert.Zero(t, tr.live.Load())
		})
	}
}

// lcLateCancel is a ctx that nothing cancels (Done is nil, so the creation
// runs inline) but whose Err turns to context.Canceled once cancel is
// called: a caller's ctx that ends while its creation is in flight.
type lcLateCancel struct {
	context.Context
	canceled atomic.Bool
}

func (c *lcLateCancel) Err() error {
	if c.canceled.Load() {
		return context.Canceled
	}
	return nil
}

// A creation that Close cancels fails with ErrClosed, counted as closed,
// even when the factory wraps its ctx's error (as net.Dialer does, so the
// error also matches context.Canceled) and the caller's ctx has ended too:
// Close ended it, not the caller.
func TestLifecycleCloseWinsOverCallersCancelForCreation(t *testing.T) {
	ctx := &lcLateCancel{Context: context.Background()}
	entered := make(chan struct{})
	f := FactoryFunc[*conn](func(fctx context.Context) (*conn, error) {
		close(entered)
		<-fctx.Done() // Close cancels it
		ctx.canceled.Store(true)
		return nil, fmt.Errorf("dial: %w", fctx.Err())
	})
	p, err := New[*conn](context.Background(), f, Options[*conn]{MaxSize: 1})
	require.NoError(t, err)
	ch := leaseAsync(ctx, p)
	lcRecv(t, entered, "Create")
	require.NoError(t, p.Close())

	err = awaitLease(t, ch).err
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, err, context.Canceled, "the factory's own error stays wrapped")
	s := p.Stats()
	assert.Zero(t, s.Canceled, "Close ended the lease, not the caller")
	assert.Zero(t, s.ActiveLeases)
}

func TestLifecycleCreateTimeoutBoundsFactory(t *testing.T) {
	t.Run("caller waits", func(t *testing.T) {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1, CreateTimeout: 20 * time.Millisecond})
		tr.ctxs = make(chan context.Context, 1)
		lcSetBlock(tr, make(chan struct{})) // never closed: only ctx ends Create

		err := awaitLease(t, leaseAsync(context.Background(), p)).err
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		fctx := lcRecv(t, tr.ctxs, "the factory's ctx")
		_, hasDeadline := fctx.Deadline()
		assert.True(t, hasDeadline)
		s := p.Stats()
		assert.Zero(t, s.ActiveLeases)
		assert.Zero(t, s.Canceled, "CreateTimeout is not the caller's cancellation")
	})
	t.Run("in the background", func(t *testing.T) {
		// Long enough for the caller to give up first; the test only waits
		// for it, it does not time it.
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1, CreateTimeout: time.Second})
		tr.ctxs = make(chan context.Context, 1)
		lcSetBlock(tr, make(chan struct{}))

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := leaseAsync(ctx, p)
		fctx := lcRecv(t, tr.ctxs, "the factory's ctx")
		cancel()
		require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
		lcRecv(t, fctx.Done(), "CreateTimeout to end the abandoned creation")
		assert.ErrorIs(t, fctx.Err(), context.DeadlineExceeded)
		require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, lcWait, time.Millisecond,
			"the failed background creation frees its permit")
		assert.Zero(t, p.Stats().ItemsAvailable)
		assertAtRest(t, p)
	})
}

// --- abandoned creations ---------------------------------------------------

// lcAbandon starts a Lease whose creation blocks, cancels it once the
// factory runs, and checks that Lease returned the ctx error while the
// factory still blocks. The caller closes block to let the factory finish.
func lcAbandon(t *testing.T, p *Pool[*conn], tr *tracker) (block chan struct{}) {
	t.Helper()
	block = make(chan struct{})
	lcSetBlock(tr, block)
	tr.ctxs = make(chan context.Context, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := leaseAsync(ctx, p)
	lcRecv(t, tr.ctxs, "Create")
	cancel()
	o := awaitLease(t, ch)
	require.ErrorIs(t, o.err, context.Canceled, "Lease returns without waiting for the factory")
	assert.Equal(t, uint64(1), p.Stats().Canceled)
	return block
}

func TestLifecycleAbandonedCreationGoesIdle(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	block := lcAbandon(t, p, tr)
	assert.Equal(t, 1, p.Stats().ActiveLeases, "the creation holds its permit")

	close(block)
	require.Eventually(t, func() bool {
		s := p.Stats()
		return s.ItemsAvailable == 1 && s.ActiveLeases == 0
	}, lcWait, time.Millisecond, "the finished item goes idle")

	l := mustLease(t, p)
	assert.Equal(t, 1, l.Value().id)
	assert.Equal(t, int64(1), tr.created.Load(), "no second Create")
	l.Release()
	assertAtRest(t, p)
}

func TestLifecycleAbandonedCreationFailureFreesPermit(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	tr.setFail(errBoom) // read by Create before it blocks
	block := lcAbandon(t, p, tr)

	close(block)
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, lcWait, time.Millisecond)
	s := p.Stats()
	assert.Zero(t, s.ItemsAvailable)
	assert.Zero(t, s.Created)

	tr.setFail(nil)
	l, err := p.TryLease(context.Background())
	require.NoError(t, err)
	l.Release()
	assertAtRest(t, p)
}

// lcPanicky is a factory that announces each Create, waits for proceed and
// then panics, as a buggy dial might.
type lcPanicky struct {
	started chan struct{}
	proceed chan struct{}
	done    chan struct{} // closed when the panic has been raised
}

func (f *lcPanicky) Create(context.Context) (*conn, error) {
	f.started <- struct{}{}
	<-f.proceed
	defer close(f.done)
	panic("lc: factory panic nobody waits for")
}

func TestLifecycleAbandonedCreationPanicFreesPermit(t *testing.T) {
	f := &lcPanicky{started: make(chan struct{}, 1), proceed: make(chan struct{}), done: make(chan struct{})}
	p, err := New[*conn](context.Background(), f, Options[*conn]{MaxSize: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	ch := leaseAsync(ctx, p)
	lcRecv(t, f.started, "Create")
	cancel()
	require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)

	close(f.proceed) // the panic happens on the pool's goroutine: it must not crash the process
	lcRecv(t, f.done, "the panic")
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, lcWait, time.Millisecond,
		"the permit came back")
	s := p.Stats()
	assert.Zero(t, s.Created, "a panicking creation counts as failed")
	assert.Zero(t, s.ItemsAvailable)
}

func TestLifecycleAbandonedCreationFinishingAfterCloseIsDestroyed(t *testing.T) {
	f := &lcStubborn{started: make(chan struct{}, 1), proceed: make(chan struct{}), made: make(chan *conn, 1)}
	p, err := New[*conn](context.Background(), f, Options[*conn]{MaxSize: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := leaseAsync(ctx, p)
	lcRecv(t, f.started, "Create")
	cancel()
	require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
	require.NoError(t, p.Close())

	close(f.proceed)
	item := lcRecv(t, f.made, "the item")
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, lcWait, time.Millisecond)
	assert.True(t, item.closed.Load(), "the item is destroyed")
	s := p.Stats()
	assert.Zero(t, s.ItemsAvailable)
	assert.Equal(t, uint64(1), s.Destroyed)
	assertAtRest(t, p)
}

func TestLifecycleWaiterGetsAbandonedCreationsItem(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	block := make(chan struct{})
	lcSetBlock(tr, block)
	tr.ctxs = make(chan context.Context, 2)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := leaseAsync(ctx, p)
	lcRecv(t, tr.ctxs, "Create")
	waiter := leaseAsync(context.Background(), p)
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, lcWait, time.Millisecond)
	cancel()
	require.ErrorIs(t, awaitLease(t, first).err, context.Canceled)

	close(block)
	o := awaitLease(t, waiter)
	require.NoError(t, o.err)
	assert.Equal(t, 1, o.l.Value().id, "the waiter receives the abandoned creation's item")
	assert.Equal(t, int64(1), tr.created.Load())
	o.l.Release()
	assertAtRest(t, p)
}

// --- misuse ----------------------------------------------------------------

func TestLifecycleValueAndDetachPanicOnEndedLease(t *testing.T) {
	states := []struct {
		name   string
		end    func(Lease[*conn])
		phrase string // what the message must say about the mistake
	}{
		{"zero lease", nil, "zero Lease"},
		{"released", Lease[*conn].Release, "ended"},
		{"discarded", Lease[*conn].Discard, "ended"},
		{"detached", func(l Lease[*conn]) { l.Detach() }, "ended"},
	}
	methods := []struct {
		name string
		call func(Lease[*conn])
	}{
		{"Value", func(l Lease[*conn]) { l.Value() }},
		{"Detach", func(l Lease[*conn]) { l.Detach() }},
	}
	for _, st := range states {
		for _, m := range methods {
			t.Run(m.name+" on "+st.name, func(t *testing.T) {
				p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
				var l Lease[*conn]
				if st.end != nil {
					l = mustLease(t, p)
					st.end(l)
				}
				before := p.Stats()

				v := lcRecover(func() { m.call(l) })
				require.NotNil(t, v, "%s panics", m.name)
				msg := fmt.Sprint(v)
				assert.Contains(t, msg, "Lease."+m.name)
				assert.Contains(t, msg, st.phrase)
				after := p.Stats()
				assert.Equal(t, before, after, "the panic leaves the pool as it was")
			})
		}
	}
}

func TestLifecycleReleaseAndDiscardOnZeroLeaseDoNothing(t *testing.T) {
	var l Lease[*conn]
	assert.NotPanics(t, l.Release)
	assert.NotPanics(t, l.Discard)
}

func TestLifecycleEndingAnEndedLeaseDoesNothing(t *testing.T) {
	detach := func(l Lease[*conn]) { l.Detach() }
	tests := []struct {
		name          string
		first, second func(Lease[*conn])
		wantIdle      int
		wantDestroyed uint64
		wantDetached  uint64
	}{
		{"Release twice", Lease[*conn].Release, Lease[*conn].Release, 1, 0, 0},
		{"Discard after Release", Lease[*conn].Release, Lease[*conn].Discard, 1, 0, 0},
		{"Release after Discard", Lease[*conn].Discard, Lease[*conn].Release, 0, 1, 0},
		{"Discard twice", Lease[*conn].Discard, Lease[*conn].Discard, 0, 1, 0},
		{"Release after Detach", detach, Lease[*conn].Release, 0, 0, 1},
		{"Discard after Detach", detach, Lease[*conn].Discard, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name+", through a copy", func(t *testing.T) {
			p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
			l := mustLease(t, p)
			item := l.Value()
			cp := l
			tt.first(l)
			require.NotPanics(t, func() { tt.second(cp) })
			require.NotPanics(t, func() { tt.second(l) })

			s := p.Stats()
			assert.Zero(t, s.ActiveLeases, "the permit was returned once")
			assert.Equal(t, tt.wantIdle, s.ItemsAvailable)
			assert.Equal(t, tt.wantDestroyed, s.Destroyed)
			assert.Equal(t, tt.wantDetached, s.Detached)
			assert.Equal(t, tt.wantDestroyed == 1, item.closed.Load())
			assertAtRest(t, p)
		})
	}
}

func TestLifecycleStaleLeaseCannotEndCurrentLease(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	l1 := mustLease(t, p)
	first := l1.Value()
	stale := l1
	l1.Release()
	current := mustLease(t, p)
	item := current.Value()
	require.Same(t, first, item, "the same item is leased again")

	stale.Release()
	stale.Discard()
	assert.Panics(t, func() { stale.Value() })
	assert.Panics(t, func() { stale.Detach() })

	assert.NotPanics(t, func() { assert.Same(t, item, current.Value()) }, "the current holder keeps its lease")
	s := p.Stats()
	assert.Equal(t, 1, s.ActiveLeases)
	assert.Zero(t, s.ItemsAvailable)
	assert.Zero(t, s.Destroyed)
	assert.Zero(t, s.Detached)
	assert.False(t, item.closed.Load())

	current.Release()
	assert.Equal(t, 1, p.Stats().ItemsAvailable)
	assertAtRest(t, p)
}

// --- Discard and Detach ----------------------------------------------------

func TestLifecycleDiscardGivesWaiterRightToCreate(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	l := mustLease(t, p)
	item := l.Value()
	waiter := leaseAsync(context.Background(), p)
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, lcWait, time.Millisecond)

	l.Discard()
	assert.True(t, item.closed.Load(), "Discard destroys the item")
	o := awaitLease(t, waiter)
	require.NoError(t, o.err)
	assert.Equal(t, 2, o.l.Value().id, "the waiter creates a fresh item with the freed permit")
	assert.Equal(t, int64(2), tr.created.Load())
	s := p.Stats()
	assert.Equal(t, uint64(1), s.Destroyed)
	assert.Equal(t, 1, s.ActiveLeases)
	o.l.Release()
	assertAtRest(t, p)
}

func TestLifecycleDetachTakesItemOutOfPool(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	l := mustLease(t, p)
	want := l.Value()

	got := l.Detach()
	assert.Same(t, want, got)
	s := p.Stats()
	assert.Equal(t, uint64(1), s.Detached)
	assert.Zero(t, s.Destroyed)
	assert.Zero(t, s.ActiveLeases, "the permit is freed")
	assert.Zero(t, s.ItemsAllocated)
	assertAtRest(t, p)

	l2, err := p.TryLease(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, l2.Value().id)
	l2.Release()

	require.NoError(t, p.Close())
	assert.False(t, got.closed.Load(), "the pool never destroys a detached item")
	assert.Equal(t, int64(1), tr.live.Load(), "only the detached item is still alive")
	s = p.Stats()
	assert.Equal(t, uint64(1), s.Destroyed)
	assertAtRest(t, p)
}

// --- a caller that has already given up -------------------------------------

func TestLifecycleCanceledCallerLeavesIdleItemUnchecked(t *testing.T) {
	prep := &lcPreparer{}
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: prep})
	l := mustLease(t, p) // fresh: checked once
	first := l.Value()
	l.Release()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.TryLease(ctx) // a permit is free: the lease gets as far as the check
	require.ErrorIs(t, err, context.Canceled)

	checks, _ := prep.seen()
	assert.Equal(t, []int{first.id}, checks, "no check ran for a caller that had given up")
	s := p.Stats()
	assert.Equal(t, 1, s.ItemsAvailable, "the idle item went back, unharmed")
	assert.Equal(t, 0, s.ActiveLeases)
	assert.EqualValues(t, 0, s.PrepareFailed)
	assert.EqualValues(t, 1, s.Canceled)
	assert.False(t, first.closed.Load())
	assert.EqualValues(t, 1, tr.created.Load())
}

func TestLifecycleCanceledCallerStartsNoCreation(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.TryLease(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.EqualValues(t, 0, tr.live.Load(), "no dial for a caller that had given up")
	assert.Equal(t, 0, p.Stats().ActiveLeases, "the permit came back")
	assertAtRest(t, p)
}
