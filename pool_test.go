package pool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pool's entry points: the lease and release paths, TryLease, nil and
// ended contexts, Reset on release, Clear, Close, Shutdown and SetMaxSize
// (the package documentation's "Lifecycle of an item", "Leases and their
// rules" and, for SetMaxSize, "Upkeep").

func TestSequentialLeasesReuseOneItem(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 3})
	for range 6 {
		l, err := p.Lease(bg)
		require.NoError(t, err)
		assert.Equal(t, 1, l.Value().id)
		l.Release()
	}
	s := p.Stats()
	assert.EqualValues(t, 1, tr.created.Load())
	assert.EqualValues(t, 6, s.Leases)
	assert.Equal(t, 1, s.ItemsAvailable)
	assert.Equal(t, 0, s.ActiveLeases)
	assert.EqualValues(t, 0, s.Waits)
	assert.Zero(t, s.WaitTime)
}

func TestLeaseAndReleaseAllocateNothing(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 4, MinSize: 4})
	allocs := testing.AllocsPerRun(1000, func() {
		l, err := p.Lease(bg)
		if err != nil {
			panic(err)
		}
		l.Release()
	})
	assert.Zero(t, allocs)
	allocs = testing.AllocsPerRun(1000, func() {
		l, _ := p.TryLease(bg)
		l.Release()
	})
	assert.Zero(t, allocs)
}

func TestTryLeaseNeverWaits(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 2})
	a, err := p.TryLease(bg)
	require.NoError(t, err)
	b, err := p.TryLease(bg)
	require.NoError(t, err)
	_, err = p.TryLease(bg)
	require.ErrorIs(t, err, ErrExhausted)
	assert.Contains(t, err.Error(), "MaxSize 2")
	a.Release()
	c, err := p.TryLease(bg)
	require.NoError(t, err)
	assert.Same(t, a.e, c.e, "the released item is reused")
	b.Release()
	c.Release()
	assert.EqualValues(t, 0, p.Stats().Waits)
}

func TestTryLeaseDoesNotOvertakeQueuedLeases(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	held := mustLease(t, p)
	got := leaseAsync(bg, p)
	waitQueued(t, p, 1)
	held.Release() // goes straight to the waiter ...
	_, err := p.TryLease(bg)
	assert.ErrorIs(t, err, ErrExhausted, "... so no permit is free for TryLease")
	awaitLease(t, got).l.Release()
}

func TestNilContextPanicsAtEveryEntryPoint(t *testing.T) {
	var nilCtx context.Context // a nil interface, as a caller's mistake makes it
	f := FactoryFunc[*conn](func(context.Context) (*conn, error) { return &conn{}, nil })

	v, _ := catchPanic(func() { _, _ = New(nilCtx, f, Options[*conn]{}) })
	assert.Equal(t, errNilContext, fmt.Sprint(v), "New")
	v, _ = catchPanic(func() {
		_, _ = New(nilCtx, f, Options[*conn]{CreateTimeout: time.Second, MinSize: 1})
	})
	assert.Equal(t, errNilContext, fmt.Sprint(v), "New with CreateTimeout and MinSize")

	for _, state := range []string{"empty", "an item idle", "full"} {
		t.Run(state, func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
			switch state {
			case "an item idle":
				mustLease(t, p).Release()
			case "full":
				held := mustLease(t, p)
				defer held.Release()
			}
			before := p.Stats()
			v, _ := catchPanic(func() { _, _ = p.Lease(nilCtx) })
			assert.Equal(t, errNilContext, fmt.Sprint(v), "Lease")
			v, _ = catchPanic(func() { _, _ = p.TryLease(nilCtx) })
			assert.Equal(t, errNilContext, fmt.Sprint(v), "TryLease")
			after := p.Stats()
			assert.Equal(t, before.ItemsAvailable, after.ItemsAvailable, "no item was taken")
			assert.Equal(t, before.ActiveLeases, after.ActiveLeases, "nothing was leased")
			assert.Equal(t, before.Created, uint64(tr.created.Load()), "nothing was created")
		})
	}

	p, _ := newTracked(t, Options[*conn]{})
	v, _ = catchPanic(func() { _ = p.Shutdown(nilCtx) })
	assert.Equal(t, errNilContext, fmt.Sprint(v), "Shutdown")
}

func TestEndedContextTakesNothing(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()

	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"canceled", canceled, context.Canceled},
		{"past its deadline", expired, context.DeadlineExceeded},
	} {
		for _, try := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/try=%v", tc.name, try), func(t *testing.T) {
				p, tr := newTracked(t, Options[*conn]{MaxSize: 4, MinSize: 2})
				mustLease(t, p).Release() // one item in a slot, one in the queue
				before := p.Stats()
				require.Equal(t, 2, before.ItemsAvailable)

				lease := p.Lease
				if try {
					lease = p.TryLease
				}
				l, err := lease(tc.ctx)
				assert.ErrorIs(t, err, tc.want)
				assert.Equal(t, Lease[*conn]{}, l)

				after := p.Stats()
				assert.Equal(t, 2, after.ItemsAvailable, "the idle items stay idle")
				assert.Zero(t, after.ActiveLeases)
				assert.Equal(t, before.Leases, after.Leases, "no lease succeeded")
				assert.Equal(t, before.Canceled+1, after.Canceled, "counted as Canceled")
				assert.EqualValues(t, 2, tr.created.Load(), "nothing was created")
			})
		}
	}

	// Ended after the lease's first look at it, with every item in use:
	// the lease must not queue (LeaseTimeout ends it if it does, as
	// nothing ends a wait on endingCtx).
	t.Run("ending as the lease queues", func(t *testing.T) {
		p, _ := newTracked(t, Options[*conn]{MaxSize: 1, LeaseTimeout: testWait})
		held := mustLease(t, p)
		defer held.Release()
		_, err := p.Lease(&endingCtx{Context: bg})
		require.ErrorIs(t, err, context.Canceled)
		s := p.Stats()
		assert.Zero(t, s.Waits, "the lease never queued")
		assert.Zero(t, s.QueuedLeases)
		assert.EqualValues(t, 1, s.Canceled, "counted as Canceled")
		assert.Equal(t, 1, s.ActiveLeases, "only the held lease")
	})
}

// canceledCallerCtxs are a ctx that ended before the lease and one that
// ends as the lease runs, after its first look at the ctx: the lease gets
// as far as the check or the creation, and must stop there.
var canceledCallerCtxs = []struct {
	name string
	ctx  func() context.Context
}{
	{"ended before the lease", func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}},
	{"ending as the lease runs", func() context.Context { return &endingCtx{Context: context.Background()} }},
}

func TestLifecycleCanceledCallerLeavesIdleItemUnchecked(t *testing.T) {
	for _, tc := range canceledCallerCtxs {
		t.Run(tc.name, func(t *testing.T) {
			prep := &testPreparer{}
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: prep})
			l := mustLease(t, p) // fresh: checked once
			first := l.Value()
			l.Release()

			_, err := p.TryLease(tc.ctx()) // a permit is free: the lease gets as far as the check
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
		})
	}
}

func TestLifecycleCanceledCallerStartsNoCreation(t *testing.T) {
	for _, tc := range canceledCallerCtxs {
		t.Run(tc.name, func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
			_, err := p.TryLease(tc.ctx())
			require.ErrorIs(t, err, context.Canceled)
			assert.EqualValues(t, 0, tr.live.Load(), "no dial for a caller that had given up")
			assert.Equal(t, 0, p.Stats().ActiveLeases, "the permit came back")
			assertAtRest(t, p)
		})
	}
}

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

			v, _ := catchPanic(l.Release)
			assert.Equal(t, tt.wantPanic, v, "a panic in Reset reaches the Release caller")
			awaitDestroys(t, p)
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

func TestClearDuringLeases(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MinSize: 2, MaxSize: 4})
	var leases []Lease[*conn]
	for range 3 {
		l, err := p.Lease(bg)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	// 3 leased (2 seeded + 1 fresh), none idle: release one to have one idle.
	idle := leases[2].Value()
	leases[2].Release()
	leases = leases[:2]
	require.Equal(t, 1, p.Stats().ItemsAvailable)

	p.Clear()
	awaitDestroys(t, p)
	assert.True(t, idle.closed.Load(), "the idle item was destroyed")
	awaitBackground(t, p)
	s := p.Stats()
	assert.Equal(t, 2, s.ActiveLeases, "leased items are still out")
	assert.Equal(t, 2, s.ItemsAvailable, "refilled to MinSize: 2 permits were free")
	for _, l := range leases {
		assert.False(t, l.Value().closed.Load(), "a leased item is not destroyed under its lease")
	}
	assert.LessOrEqual(t, tr.peak.Load(), int64(4))

	// Their leases end: they are retired, not made idle again.
	for _, l := range leases {
		c := l.Value()
		l.Release()
		awaitDestroys(t, p)
		assert.True(t, c.closed.Load(), "an item leased at Clear is destroyed when its lease ends")
	}
	s = p.Stats()
	assert.Equal(t, 2, s.ItemsAvailable)
	assert.Zero(t, s.ActiveLeases)
	assert.Equal(t, s.Created, s.Destroyed+uint64(s.ItemsAllocated))
}

func TestClearRefillIsCappedByFreePermits(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MinSize: 3, MaxSize: 3})
	var leases []Lease[*conn]
	for range 2 {
		l, err := p.Lease(bg)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	p.Clear() // 1 idle destroyed; only 1 permit free once its Destroy returned: refill 1, not 3
	awaitDestroys(t, p)
	awaitBackground(t, p)
	s := p.Stats()
	assert.Equal(t, 1, s.ItemsAvailable)
	assert.Equal(t, 3, s.ItemsAllocated)
	assert.LessOrEqual(t, tr.peak.Load(), int64(3))
	for _, l := range leases {
		l.Release()
	}
}

// TestClearRefillStopsAtMinSize: Clears that come faster than a creation
// refill the idle items to MinSize, not past it: a Clear's refill counts
// the creations of the refills before it (doc.go, "Lifecycle of an item":
// Clear "refills the idle items to MinSize").
func TestClearRefillStopsAtMinSize(t *testing.T) {
	t.Run("slow factory", func(t *testing.T) {
		tr := &tracker{}
		p, err := New[*conn](context.Background(), FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
			time.Sleep(30 * time.Millisecond)
			return tr.Create(ctx)
		}), Options[*conn]{MinSize: 2, MaxSize: 10, Destroy: tr.destroy})
		require.NoError(t, err)
		defer p.Close()
		for range 10 {
			p.Clear()
			time.Sleep(3 * time.Millisecond)
		}
		awaitBackground(t, p)
		s := p.Stats()
		assert.Equal(t, 2, s.ItemsAvailable, "idle items at rest")
		assert.Equal(t, 2, s.ItemsAllocated)
		assert.Equal(t, int64(2), tr.live.Load())
	})
	t.Run("hanging factory", func(t *testing.T) {
		p, tr := newTracked(t, Options[*conn]{MinSize: 3, MaxSize: 10})
		tr.mu.Lock()
		tr.block = make(chan struct{}) // every dial from now on hangs until its ctx ends
		tr.mu.Unlock()
		for range 20 {
			p.Clear()
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		assert.LessOrEqual(t, tr.live.Load(), int64(3), "creations under way for MinSize 3 after 20 Clears")
		require.NoError(t, p.Close())
	})
}

func TestCloseWakesEveryWaiterWithErrClosed(t *testing.T) {
	const waiters = 6
	p, tr := newTracked(t, Options[*conn]{MaxSize: 2})
	a, err := p.Lease(bg)
	require.NoError(t, err)
	b, err := p.Lease(bg)
	require.NoError(t, err)
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := p.Lease(bg)
			errs <- err
		}()
	}
	waitQueued(t, p, waiters)
	require.NoError(t, p.Close())
	for range waiters {
		assert.ErrorIs(t, <-errs, ErrClosed)
	}
	assert.Equal(t, 0, p.Stats().QueuedLeases)

	// Leased items are destroyed as they come back.
	av, bv := a.Value(), b.Value()
	a.Release()
	b.Discard()
	awaitDestroys(t, p)
	assert.True(t, av.closed.Load())
	assert.True(t, bv.closed.Load())
	assert.EqualValues(t, 0, tr.live.Load())

	_, err = p.Lease(bg)
	assert.ErrorIs(t, err, ErrClosed)
	_, err = p.TryLease(bg)
	assert.ErrorIs(t, err, ErrClosed)
	assert.NoError(t, p.Close(), "Close is idempotent")
	s := p.Stats()
	assert.Equal(t, 0, s.ItemsAllocated)
	assert.Equal(t, s.Created, s.Destroyed)
}

// countingFactory counts items in existence by its own lights: one more
// from the start of Create, one fewer at the end of Destroy. Violations are
// counted, not asserted, so that the factory can be called from the pool's
// goroutines.
type countingFactory struct {
	mu         sync.Mutex
	live       int
	max        int
	violations atomic.Int64
	next       atomic.Int64
}

func (f *countingFactory) Create(ctx context.Context) (*conn, error) {
	f.mu.Lock()
	f.live++
	if f.live > f.max {
		f.violations.Add(1)
	}
	f.mu.Unlock()
	return &conn{id: int(f.next.Add(1))}, nil
}

func (f *countingFactory) destroy(c *conn) error {
	err := c.Close()
	f.mu.Lock()
	f.live--
	f.mu.Unlock()
	return err
}

// TestCloseWhileWaitersWaitUnderLoad closes (or shuts down) a pool while
// leases are queued and items are in flight, and checks that every
// goroutine gets out, every item is destroyed, and no lease started after
// the close succeeds.
func TestCloseWhileWaitersWaitUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*Pool[*conn]) error
		// drained: when stop returns, every lease has ended and every
		// item has been destroyed.
		drained bool
	}{
		{"Close", (*Pool[*conn]).Close, false},
		{"Shutdown", func(p *Pool[*conn]) error { return p.Shutdown(bg) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const maxSize, workers = 3, 32
			f := &countingFactory{max: maxSize}
			p, err := New[*conn](bg, f, Options[*conn]{MaxSize: maxSize, Destroy: f.destroy})
			require.NoError(t, err)
			var closed atomic.Bool
			var leasedAfterClose atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for {
						late := closed.Load() // this Lease starts after stop returned
						l, err := p.Lease(bg)
						if err != nil {
							assert.ErrorIs(t, err, ErrClosed)
							return
						}
						if late {
							leasedAfterClose.Add(1)
						}
						time.Sleep(10 * time.Microsecond)
						l.Release()
					}
				})
			}
			require.Eventually(t, func() bool { return p.Stats().QueuedLeases > workers/2 },
				testWait, time.Millisecond)
			require.NoError(t, tc.stop(p))
			closed.Store(true)
			if tc.drained {
				f.mu.Lock()
				assert.Zero(t, f.live, "Shutdown returned with items alive")
				f.mu.Unlock()
				assert.Equal(t, 0, p.Stats().ActiveLeases)
			}
			wg.Wait()
			awaitDestroys(t, p) // of the leases that ended after Close
			assert.Zero(t, leasedAfterClose.Load(), "no lease started after Close returned succeeds")
			assert.Zero(t, f.violations.Load())
			f.mu.Lock()
			assert.Zero(t, f.live, "every item destroyed")
			f.mu.Unlock()
			s := p.Stats()
			assert.Equal(t, 0, s.ItemsAllocated)
			assert.Equal(t, s.Created, s.Destroyed)
		})
	}
}

func TestShutdownWaitsForEveryLease(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 2})
	l, err := p.Lease(bg)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- p.Shutdown(bg) }()
	require.Eventually(t, func() bool {
		l, err := p.TryLease(bg)
		l.Release() // a lease won before Shutdown closed the pool
		return errors.Is(err, ErrClosed)
	}, 5*time.Second, time.Millisecond, "Shutdown closes the pool at once")
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a lease out", err)
	default:
	}
	v := l.Value()
	l.Release()
	require.NoError(t, <-done)
	assert.True(t, v.closed.Load())
	assert.EqualValues(t, 0, tr.live.Load())
}

func TestShutdownEndsWithCtxWhenALeaseNeverReturns(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 2})
	l, err := p.Lease(bg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(bg, 10*time.Millisecond)
	defer cancel()
	err = p.Shutdown(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	l.Release()
	assert.NoError(t, p.Shutdown(bg), "a second Shutdown finds nothing left")
}

func TestShutdownWaitsForAbandonedCreation(t *testing.T) {
	tr := &tracker{block: make(chan struct{}), ctxs: make(chan context.Context, 1)}
	p, err := New[*conn](bg, tr, Options[*conn]{MaxSize: 1, Destroy: tr.destroy})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(bg)
	go func() { <-tr.ctxs; cancel() }() // give up once the factory runs
	_, err = p.Lease(ctx)
	require.ErrorIs(t, err, context.Canceled)

	assert.Equal(t, 1, p.Stats().ActiveLeases, "the creation holds its permit")
	// Shutdown cancels the creation through its ctx (the factory honours
	// it) and returns once the creation has given its permit back.
	assert.NoError(t, p.Shutdown(bg))
	assert.EqualValues(t, 0, tr.live.Load())
	assert.Equal(t, 0, p.Stats().ActiveLeases)
}

// TestShutdownOnDrainedPoolIgnoresEndedCtx: a pool with no item left (no
// lease out, no item idle, no Destroy under way) shuts down with nil,
// whatever its ctx says (Pool.Shutdown).
func TestShutdownOnDrainedPoolIgnoresEndedCtx(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		p, _ := newTracked(t, Options[*conn]{MinSize: 1})
		mustLease(t, p).Discard()
		awaitDestroys(t, p)
		require.NoError(t, p.Shutdown(ended), "call %d: the pool drained, whatever ctx says", i)
	}
	// Not drained: ctx ends it.
	p, _ := newTracked(t, Options[*conn]{})
	held := mustLease(t, p)
	assert.ErrorIs(t, p.Shutdown(ended), context.Canceled)
	held.Release()
}

func TestSetMaxSizeRefusesBadSizes(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MinSize: 2, MaxSize: 4})
	for _, n := range []int{0, -1, 1} {
		assert.ErrorIs(t, p.SetMaxSize(n), ErrInvalidOptions, "SetMaxSize(%d)", n)
	}
	assert.Equal(t, 4, p.Stats().MaxSize)
	require.NoError(t, p.Close())
	assert.ErrorIs(t, p.SetMaxSize(8), ErrClosed)
}

func TestSetMaxSizeGrowingServesWaitersInOrder(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 2})
	held := []Lease[*conn]{mustLease(t, p), mustLease(t, p)}
	outs := make([]<-chan leaseOutcome, 3)
	for i := range outs {
		outs[i] = leaseAsync(context.Background(), p)
		require.Eventually(t, func() bool { return p.Stats().QueuedLeases == i+1 }, testWait, time.Millisecond)
	}
	require.NoError(t, p.SetMaxSize(4))
	o0, o1 := awaitLease(t, outs[0]), awaitLease(t, outs[1])
	require.NoError(t, o0.err, "the oldest waiter is served")
	require.NoError(t, o1.err, "and the next")
	assert.Empty(t, outs[2], "the newest still waits: no room for it")
	assert.Equal(t, 1, p.Stats().QueuedLeases)
	assert.EqualValues(t, 4, tr.created.Load())
	held[0].Release()
	o2 := awaitLease(t, outs[2])
	require.NoError(t, o2.err)
	for _, l := range []Lease[*conn]{held[1], o0.l, o1.l, o2.l} {
		l.Release()
	}
}

func TestSetMaxSizeShrinkingDestroysIdleAndReturningItems(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 6, LeaseTimeout: 10 * time.Millisecond})
	ls := []Lease[*conn]{mustLease(t, p), mustLease(t, p), mustLease(t, p)}
	putIdle(t, p, 3) // 3 leased, 3 idle: 6 items
	require.EqualValues(t, 6, tr.live.Load())

	require.NoError(t, p.SetMaxSize(2))
	awaitDestroys(t, p)
	s := p.Stats()
	assert.Equal(t, 2, s.MaxSize)
	assert.Zero(t, s.ItemsAvailable, "the idle items beyond MaxSize were destroyed")
	assert.EqualValues(t, 3, tr.live.Load(), "the leased ones are still out")

	_, err := p.Lease(context.Background())
	require.ErrorIs(t, err, ErrLeaseTimeout, "new leases wait while the items exceed MaxSize")
	assert.Contains(t, err.Error(), "MaxSize 2", "the message follows the new size")
	_, err = p.TryLease(context.Background())
	assert.ErrorContains(t, err, "MaxSize 2")

	ls[0].Release() // one too many: destroyed
	awaitDestroys(t, p)
	assert.EqualValues(t, 2, tr.live.Load())
	ls[1].Release() // fits now: idle
	assert.EqualValues(t, 2, tr.live.Load())
	assert.Equal(t, 1, p.Stats().ItemsAvailable)
	l := mustLease(t, p)
	assert.EqualValues(t, 2, tr.live.Load(), "reused, not created")
	l.Release()
	ls[2].Release()
	awaitDestroys(t, p)
	s = p.Stats()
	assert.EqualValues(t, 4, s.Destroyed)
	assert.Equal(t, 2, s.ItemsAllocated)
}

// TestSetMaxSizeUnderLoad resizes 16 → 4 → 12 → 2 → 8 while 64 goroutines
// lease and release, and checks from the test factory's own count that the
// items in existence never exceed max(new MaxSize, items at the moment of
// the shrink), and that the count never grows while over the cap.
func TestSetMaxSizeUnderLoad(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 16})
	var size atomic.Int64 // the MaxSize the monitor holds the pool to
	size.Store(16)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := p.Lease(context.Background())
				if err != nil {
					t.Errorf("Lease: %v", err)
					return
				}
				runtime.Gosched()
				l.Release()
			}
		})
	}
	var violations atomic.Int64
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		prev := p.Stats().ItemsAllocated
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := p.Stats() // ItemsAllocated: the items the pool counts, exactly
			live := tr.live.Load()
			n := int(size.Load())
			if s.MaxSize == n {
				if bound := max(n, s.ItemsAllocated); int(live) > bound {
					violations.Add(1)
					t.Errorf("%d items exist; MaxSize %d, the pool counted %d", live, n, s.ItemsAllocated)
				}
				if prev > n && s.ItemsAllocated > prev {
					violations.Add(1)
					t.Errorf("over MaxSize %d the items grew from %d to %d", n, prev, s.ItemsAllocated)
				}
			}
			prev = s.ItemsAllocated
		}
	}()
	for _, n := range []int{4, 12, 2, 8} {
		time.Sleep(30 * time.Millisecond)
		require.NoError(t, p.SetMaxSize(n))
		size.Store(int64(n))
		require.Eventually(t, func() bool { return p.Stats().ItemsAllocated <= n }, testWait, time.Millisecond,
			"the items come down to MaxSize %d", n)
	}
	time.Sleep(30 * time.Millisecond)
	close(stop)
	wg.Wait()
	<-monitorDone
	assert.Zero(t, violations.Load())
	s := p.Stats()
	assert.Equal(t, 8, s.MaxSize)
	assert.LessOrEqual(t, tr.peak.Load(), int64(16))
	t.Logf("%d leases through the resizes; created %d, destroyed %d", s.Leases, s.Created, s.Destroyed)
}

// Clear retires the items leased when it is called (doc.go, "Lifecycle of
// an item"): they are destroyed when their lease ends, not lent again; an
// item created after Clear is untouched.
func TestClearRetiresLeasedItems(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 4})
	a, b := mustLease(t, p), mustLease(t, p)
	idle := mustLease(t, p)
	idle.Release()
	p.Clear()
	awaitDestroys(t, p)
	s := p.Stats()
	assert.Zero(t, s.ItemsAvailable, "the idle item was destroyed now")
	assert.EqualValues(t, 2, tr.live.Load(), "the leased ones are still in use")

	after := mustLease(t, p) // created after Clear
	a.Release()
	b.Discard()
	awaitDestroys(t, p)
	assert.EqualValues(t, 1, tr.live.Load(), "a and b were destroyed as their leases ended")
	item := after.Value()
	after.Release()
	again := mustLease(t, p)
	assert.Same(t, item, again.Value(), "an item created after Clear is lent again")
	again.Release()
	awaitDestroys(t, p)
	assert.EqualValues(t, 3, p.Stats().Destroyed)
}

// An item whose creation began before Clear is retired too: here the
// factory is still dialing when Clear is called.
func TestClearRetiresAnItemBeingCreated(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 2})
	block := make(chan struct{})
	tr.mu.Lock()
	tr.block = block
	tr.mu.Unlock()
	got := leaseAsync(context.Background(), p)
	require.Eventually(t, func() bool { return tr.live.Load() == 1 }, testWait, time.Millisecond, "the dial began")
	p.Clear()
	close(block)
	o := awaitLease(t, got)
	require.NoError(t, o.err)
	o.l.Release()
	awaitDestroys(t, p)
	assert.Zero(t, tr.live.Load(), "the item created across Clear was destroyed on release")
}

// Clear does not wait for the refill to MinSize: with a factory that hangs
// and no CreateTimeout, it still returns at once, and Close ends the refill.
func TestClearReturnsWithoutWaitingForTheRefill(t *testing.T) {
	tr := &tracker{}
	p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 2, MaxSize: 4, Destroy: tr.destroy})
	require.NoError(t, err)
	tr.mu.Lock()
	tr.block = make(chan struct{}) // every dial from now on hangs until its ctx ends
	tr.mu.Unlock()
	start := time.Now()
	p.Clear()
	took := time.Since(start)
	t.Logf("Clear returned after %v", took)
	assert.Less(t, took, 100*time.Millisecond, "Clear waited for the refill")
	require.Eventually(t, func() bool { return tr.live.Load() >= 1 }, testWait, time.Millisecond, "the refill dials in the background")
	require.NoError(t, p.Close())
	assert.Zero(t, tr.live.Load(), "Close ended the refill's dials, and nothing is left")
}

// Under load, with Clear called again and again: no item leased before a
// Clear began is lent after that Clear returned, and the cap holds
// throughout.
func TestClearUnderLoadNeverLendsARetiredItem(t *testing.T) {
	const workers, maxSize = 64, 8
	p, tr := newTracked(t, Options[*conn]{MinSize: 2, MaxSize: maxSize, LeaseTimeout: testWait})
	var (
		started, finished atomic.Int64 // Clear calls begun and returned
		mu                sync.Mutex
		leasedBefore      = map[*conn]int64{} // item → Clears begun by the time its last lease returned
		violations        atomic.Int64
	)
	deadline := time.Now().Add(time.Second)
	if testing.Short() {
		deadline = time.Now().Add(200 * time.Millisecond)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				doneBefore := finished.Load()
				l, err := p.Lease(context.Background())
				if !assert.NoError(t, err) {
					return
				}
				c := l.Value()
				mu.Lock()
				if prev, ok := leasedBefore[c]; ok && doneBefore > prev {
					violations.Add(1)
				}
				leasedBefore[c] = started.Load()
				mu.Unlock()
				if c.inUse.Swap(true) {
					t.Error("an item is held by two leases")
				}
				time.Sleep(10 * time.Microsecond)
				c.inUse.Store(false)
				l.Release()
			}
		}()
	}
	for time.Now().Before(deadline) {
		started.Add(1)
		p.Clear()
		finished.Add(1)
		checkInvariants(t, p, func() int64 { return tr.live.Load() })
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	assert.Zero(t, violations.Load(), "items leased before a Clear were lent after it")
	t.Logf("%d Clears, %d items created", finished.Load(), tr.created.Load())
}

// Do releases the item when fn returns, discards it when fn's error wraps
// ErrBroken or fn panics, and returns fn's error as it is.
func TestDo(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	var first *conn
	require.NoError(t, p.Do(context.Background(), func(c *conn) error { first = c; return nil }))
	errPlain := errors.New("a reply the caller did not like")
	err := p.Do(context.Background(), func(c *conn) error {
		assert.Same(t, first, c, "the released item is lent again")
		return errPlain
	})
	assert.Same(t, errPlain, err, "fn's error, as it is")
	assert.EqualValues(t, 1, tr.live.Load(), "a plain error keeps the item")

	err = p.Do(context.Background(), func(*conn) error { return fmt.Errorf("send: %w: %w", ErrBroken, errPlain) })
	assert.ErrorIs(t, err, ErrBroken)
	awaitDestroys(t, p)
	assert.Zero(t, tr.live.Load(), "a broken item is destroyed")

	v, panicked := catchPanic(func() { _ = p.Do(context.Background(), func(*conn) error { panic("fn panicked") }) })
	assert.True(t, panicked)
	assert.Equal(t, "fn panicked", v, "the panic goes on")
	awaitDestroys(t, p)
	s := p.Stats()
	assert.Zero(t, s.ActiveLeases, "the item was discarded: %+v", s)
	assert.Zero(t, tr.live.Load())

	require.NoError(t, p.Close())
	assert.ErrorIs(t, p.Do(context.Background(), func(*conn) error { return nil }), ErrClosed, "Lease's error")
}

// TryLease says which case refused it.
func TestTryLeaseSaysWhyItWasRefused(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Name: "mail"})
	l := mustLease(t, p)
	_, err := p.TryLease(context.Background())
	assert.EqualError(t, err, `pool: exhausted: pool "mail": every item is in use (MaxSize 1)`)
	got := leaseAsync(context.Background(), p)
	waitQueued(t, p, 1)
	_, err = p.TryLease(context.Background())
	assert.EqualError(t, err, `pool: exhausted: pool "mail": other leases are waiting for an item (MaxSize 1), and TryLease does not wait behind them`)
	l.Release()
	o := awaitLease(t, got)
	require.NoError(t, o.err)
	o.l.Release()
}

// TestRecoveryFromSaturation: a burst saturates the pool (four times
// MaxSize goroutines, a factory slow for the burst, a short LeaseTimeout:
// leases time out, discarded items are created again slowly), then a load
// below capacity runs (fewer goroutines than MaxSize, a fast factory).
// Once the burst has drained the pool is whole, so the load finds an item
// or a room every time: no lease of it waits, let alone times out
// ("Waiting and errors"; "Stats": QueuedLeases > 0 only when ItemsAllocated
// has reached MaxSize). The invariants hold throughout.
func TestRecoveryFromSaturation(t *testing.T) {
	const maxSize = 4
	const burst, load = 4 * maxSize, maxSize - 1
	tr := &tracker{}
	var slow atomic.Bool
	slow.Store(true)
	f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		c, err := tr.Create(ctx)
		if err == nil && slow.Load() {
			time.Sleep(5 * time.Millisecond) // a dial to a struggling backend
		}
		return c, err
	})
	p, err := New[*conn](context.Background(), f, Options[*conn]{
		MaxSize:      maxSize,
		LeaseTimeout: 2 * time.Millisecond,
		Destroy:      tr.destroy,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	stop := make(chan struct{})
	var checker sync.WaitGroup
	checker.Go(func() {
		for {
			checkInvariants(t, p, tr.live.Load)
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	})
	defer func() {
		close(stop)
		checker.Wait()
	}()

	// The burst.
	var timeouts atomic.Int64
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() {
			for i := range 15 {
				l, err := p.Lease(context.Background())
				if errors.Is(err, ErrLeaseTimeout) {
					timeouts.Add(1)
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				time.Sleep(time.Millisecond)
				if i%3 == 0 {
					l.Discard() // its room is created again, slowly
				} else {
					l.Release()
				}
			}
		})
	}
	wg.Wait()
	require.NotZero(t, timeouts.Load(), "the burst saturated the pool")
	awaitDestroys(t, p)
	s := p.Stats()
	assert.Zero(t, s.QueuedLeases, "the burst has drained: %+v", s)
	assert.Zero(t, s.ActiveLeases, "%+v", s)
	assert.Zero(t, s.Destroying, "%+v", s)
	assert.Equal(t, uint64(timeouts.Load()), s.Timeouts, "%+v", s)
	assertAtRest(t, p)

	// The load below capacity: each goroutine holds one item at most, so
	// an item or a room is free for every lease.
	slow.Store(false)
	before := p.Stats()
	var failed atomic.Int64
	for range load {
		wg.Go(func() {
			for range 300 {
				l, err := p.Lease(context.Background())
				if !assert.NoError(t, err, "a lease below capacity") {
					failed.Add(1)
					return
				}
				runtime.Gosched()
				l.Release()
			}
		})
	}
	wg.Wait()
	after := p.Stats()
	assert.Zero(t, failed.Load())
	assert.Equal(t, before.Timeouts, after.Timeouts, "no lease below capacity timed out")
	assert.Equal(t, before.Waits, after.Waits, "no lease below capacity waited: %+v", after)
	assert.Equal(t, before.Leases+load*300, after.Leases, "%+v", after)
	assert.Zero(t, after.QueuedLeases, "%+v", after)
	assert.Zero(t, after.ActiveLeases, "%+v", after)
	assertAtRest(t, p)
	for i := range maxSize { // no room was lost
		l, err := p.TryLease(context.Background())
		require.NoError(t, err, "lease %d of MaxSize %d at once", i+1, maxSize)
		defer l.Release()
	}
}

// TestSetMaxSizeRefusalsNameTheSize: a refused lease names the MaxSize in
// force (the doc comment of SetMaxSize: ErrExhausted's message, like Stats,
// follows the new value), also after SetMaxSize calls that raced: the last
// size set is the one the refusal names.
func TestSetMaxSizeRefusalsNameTheSize(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 4})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				require.NoError(t, p.SetMaxSize(1+(g+i)%4))
			}
		})
	}
	wg.Wait()
	size := p.Stats().MaxSize
	held := make([]Lease[*conn], size)
	for i := range held {
		held[i] = mustLease(t, p)
	}
	_, err := p.TryLease(context.Background())
	require.ErrorIs(t, err, ErrExhausted)
	assert.Contains(t, err.Error(), fmt.Sprintf("every item is in use (MaxSize %d)", size))
	for _, l := range held {
		l.Release()
	}
}
