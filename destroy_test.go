package pool

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Destruction: Options.Destroy and the default disposal, on the pool's own
// goroutines, so that no caller but Close waits for one; DestroyTimeout;
// and Close and Clear, which destroy every item whatever one Destroy does
// (the package documentation's "Lifecycle of an item": Destroyed).

func TestLifecycleDefaultDestroyClosesCloser(t *testing.T) {
	tr := &tracker{}
	p, err := New[*conn](context.Background(), tr, Options[*conn]{MaxSize: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	l1, l2 := mustLease(t, p), mustLease(t, p)
	discarded, released := l1.Value(), l2.Value()
	l1.Discard()
	awaitDestroys(t, p)
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
	assert.ElementsMatch(t, []int{1, 2}, destroyed)
	mu.Unlock()
	for _, c := range items {
		assert.False(t, c.closed.Load(), "a custom Destroy is called instead of Close")
	}
	assert.Equal(t, uint64(2), p.Stats().Destroyed)
}

// TestLifecycleDestroyPanicOnDiscardIsLogged: a Destroy that panics on the
// pool's goroutine does not reach the caller of Discard: it is logged and
// counted in Stats.DestroyErrors, and the item's room comes back.
func TestLifecycleDestroyPanicOnDiscardIsLogged(t *testing.T) {
	log := &logBuffer{}
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Logger: log.logger(), Destroy: func(c *conn) error {
		if c.id == 1 {
			panic("lc: Destroy panic")
		}
		return c.Close()
	}})
	l := mustLease(t, p)

	_, panicked := catchPanic(l.Discard)
	assert.False(t, panicked, "a Destroy's panic reaches no caller")
	awaitDestroys(t, p)
	s := p.Stats()
	assert.Zero(t, s.ActiveLeases)
	assert.Equal(t, uint64(1), s.Destroyed)
	assert.Equal(t, uint64(1), s.DestroyErrors)
	assert.Contains(t, log.String(), "lc: Destroy panic")
	l2, err := p.TryLease(context.Background())
	require.NoError(t, err, "the permit is usable again")
	l2.Release()
	assertAtRest(t, p)
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

// TestLifecycleCloseDestroyPanicStillDestroysTheRest: Close destroys every
// idle item whatever one Destroy does, and returns a panic as an error.
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

	var err error
	_, panicked := catchPanic(func() { err = p.Close() })
	assert.False(t, panicked, "a Destroy's panic reaches no caller")
	assert.ErrorContains(t, err, "lc: Destroy panic", "Close returns it, with the rest of the idle items' errors")
	assert.ErrorContains(t, err, "destroy_test.go", "with the stack where it happened")
	mu.Lock()
	assert.ElementsMatch(t, []int{1, 2, 3}, destroyed, "every idle item is destroyed")
	mu.Unlock()
	assert.True(t, items[0].closed.Load())
	assert.True(t, items[2].closed.Load())
	s := p.Stats()
	assert.Zero(t, s.ActiveLeases, "every permit is freed")
	assert.Zero(t, s.ItemsAvailable)
	assert.Equal(t, uint64(3), s.Destroyed)
	assert.Equal(t, uint64(1), s.DestroyErrors)
	assertAtRest(t, p)
}

// goexitOnce returns a Destroy that calls runtime.Goexit the first time
// (as t.FailNow in a test's Destroy does) and destroys through tr.
func goexitOnce(tr *tracker) func(*conn) error {
	var done atomic.Bool
	return func(c *conn) error {
		err := tr.destroy(c)
		if done.CompareAndSwap(false, true) {
			runtime.Goexit()
		}
		return err
	}
}

func TestGoexitInDestroyFinishesTheBatch(t *testing.T) {
	t.Run("Close", func(t *testing.T) {
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 4, MaxSize: 4})
		require.NoError(t, err)
		p.ds.destroy = goexitOnce(tr)

		onOwnGoroutine(t, func() { _ = p.Close() })
		assert.Zero(t, tr.live.Load(), "every idle item was destroyed")
		assert.NoError(t, p.Shutdown(context.Background()), "Shutdown finds the pool drained")
		lkSettle()
		assert.Zero(t, p.Stats().Leaked, "no destroyed item is taken for a leak")
		assert.EqualValues(t, 4, p.Stats().Destroyed)
	})
	t.Run("Clear", func(t *testing.T) {
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 3, MaxSize: 3})
		require.NoError(t, err)
		defer p.Close()
		p.ds.destroy = goexitOnce(tr)

		onOwnGoroutine(t, p.Clear)
		awaitBackground(t, p) // the refill to MinSize, which Clear starts even so
		s := p.Stats()
		assert.Zero(t, s.ActiveLeases, "every item slot came back: %+v", s)
		assert.EqualValues(t, 3, s.Destroyed)
		assert.EqualValues(t, 3-s.ItemsAllocated, 3-tr.live.Load())
		for range 3 { // all MaxSize items can be leased again
			l, err := p.TryLease(context.Background())
			require.NoError(t, err)
			defer l.Release()
		}
	})
}

// blockingDestroy is a Destroy that blocks until release is closed, and
// counts its calls.
type blockingDestroy struct {
	release chan struct{}
	calls   atomic.Int64
}

func newBlockingDestroy() *blockingDestroy { return &blockingDestroy{release: make(chan struct{})} }

func (d *blockingDestroy) destroy(c *conn) error {
	d.calls.Add(1)
	<-d.release
	return c.Close()
}

// TestDestroyRunsOffTheCallersPath: Release, Discard, a Lease that meets an
// expired item, Clear and SetMaxSize return while the Destroy they cause
// still runs, on the pool's own goroutine; until it returns, the item
// counts against MaxSize, in ActiveLeases, ItemsAllocated and
// Stats.Destroying (doc.go, "Lifecycle of an item": Destroyed).
func TestDestroyRunsOffTheCallersPath(t *testing.T) {
	cases := []struct {
		name string
		opts Options[*conn]
		// set up, then cause one destruction, and return the call that
		// causes it
		call func(t *testing.T, p *Pool[*conn], clk *fakeClock) func()
	}{
		{"Discard", Options[*conn]{}, func(t *testing.T, p *Pool[*conn], _ *fakeClock) func() {
			return mustLease(t, p).Discard
		}},
		{"Release, Reset failing", Options[*conn]{Reset: func(*conn) error { return errBoom }}, func(t *testing.T, p *Pool[*conn], _ *fakeClock) func() {
			return mustLease(t, p).Release
		}},
		{"Release past MaxLifetime", Options[*conn]{MaxLifetime: time.Minute}, func(t *testing.T, p *Pool[*conn], clk *fakeClock) func() {
			l := mustLease(t, p)
			clk.advance(minutes(2))
			return l.Release
		}},
		{"Lease meeting an expired item", Options[*conn]{IdleTimeout: time.Minute}, func(t *testing.T, p *Pool[*conn], clk *fakeClock) func() {
			mustLease(t, p).Release()
			clk.advance(minutes(2))
			return func() { mustLease(t, p).Release() } // creates a fresh item: MaxSize is 2
		}},
		{"Clear", Options[*conn]{}, func(t *testing.T, p *Pool[*conn], _ *fakeClock) func() {
			mustLease(t, p).Release()
			return p.Clear
		}},
		{"SetMaxSize", Options[*conn]{}, func(t *testing.T, p *Pool[*conn], _ *fakeClock) func() {
			a, b := mustLease(t, p), mustLease(t, p)
			a.Release()
			b.Release()
			return func() { require.NoError(t, p.SetMaxSize(1)) }
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newBlockingDestroy()
			opts := tc.opts
			opts.MaxSize, opts.Destroy = 2, d.destroy
			p, _ := newTracked(t, opts)
			clk := setFakeClock(p)
			call := tc.call(t, p, clk)
			returned := make(chan struct{})
			go func() { call(); close(returned) }()
			recvOrFail(t, returned, "the call, while its Destroy blocks")
			require.Eventually(t, func() bool { return d.calls.Load() == 1 }, testWait, time.Millisecond, "Destroy began")
			s := p.Stats()
			assert.Equal(t, 1, s.Destroying, "%+v", s)
			assert.GreaterOrEqual(t, s.ActiveLeases, 1, "the item being destroyed counts as in use: %+v", s)
			assert.Zero(t, s.Destroyed, "not destroyed until Destroy returns")
			close(d.release)
			awaitDestroys(t, p)
			s = p.Stats()
			assert.Zero(t, s.Destroying)
			assert.EqualValues(t, 1, s.Destroyed)
			assertAtRest(t, p)
		})
	}
}

// TestDestroyTimeoutFreesTheRoom: a Destroy that outlasts DestroyTimeout
// counts as destroyed, with a DestroyErrors and a Warn naming the timeout,
// and its room is free again while the call goes on; when it returns late,
// nothing is counted twice. Without DestroyTimeout the room stays taken
// (Options.DestroyTimeout).
func TestDestroyTimeoutFreesTheRoom(t *testing.T) {
	t.Run("with DestroyTimeout", func(t *testing.T) {
		d := newBlockingDestroy()
		log := &logBuffer{}
		p, _ := newTracked(t, Options[*conn]{MaxSize: 1, DestroyTimeout: 20 * time.Millisecond, Destroy: d.destroy, Logger: log.logger()})
		mustLease(t, p).Discard()
		_, err := p.TryLease(context.Background())
		require.ErrorIs(t, err, ErrExhausted, "the room is the Destroy's until it times out")
		l, err := p.Lease(context.Background()) // waits for the timeout, then creates
		require.NoError(t, err)
		l.Release()
		s := p.Stats()
		assert.EqualValues(t, 1, s.Destroyed)
		assert.EqualValues(t, 1, s.DestroyErrors)
		assert.Zero(t, s.Destroying)
		assert.Contains(t, log.String(), "DestroyTimeout (20ms)")
		close(d.release) // the late return
		awaitDestroys(t, p)
		assert.EqualValues(t, 1, p.Stats().Destroyed, "counted once")
	})
	t.Run("without", func(t *testing.T) {
		d := newBlockingDestroy()
		p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Destroy: d.destroy})
		mustLease(t, p).Discard()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := p.Lease(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the room stays taken while Destroy runs")
		assert.Equal(t, 1, p.Stats().Destroying)
		close(d.release)
		awaitDestroys(t, p)
		l, err := p.TryLease(context.Background())
		require.NoError(t, err, "the room is back once Destroy returned")
		l.Release()
	})
}

// TestCloseWaitsForTheDestroyCalls: Close returns once the Destroy calls of
// the idle items, and of those under way, have returned, and after it no
// Destroy starts but for an item whose lease ends later (Pool.Close).
func TestCloseWaitsForTheDestroyCalls(t *testing.T) {
	d := newBlockingDestroy()
	var closedAt atomic.Int64 // monotime when Close returned
	var lateStarts atomic.Int64
	p, _ := newTracked(t, Options[*conn]{MaxSize: 3, Destroy: func(c *conn) error {
		if at := closedAt.Load(); at != 0 && monotime() > at {
			lateStarts.Add(1)
		}
		return d.destroy(c)
	}})
	under, idle, late := mustLease(t, p), mustLease(t, p), mustLease(t, p)
	idle.Release()
	under.Discard() // a Destroy under way
	closed := make(chan struct{})
	go func() { assert.NoError(t, p.Close()); closedAt.Store(monotime()); close(closed) }()
	require.Eventually(t, func() bool { return d.calls.Load() == 2 }, testWait, time.Millisecond)
	select {
	case <-closed:
		t.Fatal("Close returned while Destroy calls ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(d.release)
	recvOrFail(t, closed, "Close, once the Destroy calls returned")
	assert.Zero(t, lateStarts.Load(), "a Destroy started after Close returned")
	late.Release() // its lease ends after Close: its Destroy runs now
	awaitDestroys(t, p)
	assert.EqualValues(t, 1, lateStarts.Load(), "the late lease's item is destroyed after Close")
	assert.EqualValues(t, 3, p.Stats().Destroyed)
}

// TestLeaseMeetingAnExpiredItemTakesAnotherRoom: a lease that meets an
// expired idle item leaves that item's room to its Destroy and takes
// another room, or queues like any lease when none is free (doc.go,
// "Lifecycle of an item").
func TestLeaseMeetingAnExpiredItemTakesAnotherRoom(t *testing.T) {
	d := newBlockingDestroy()
	p, tr := newTracked(t, Options[*conn]{MaxSize: 2, IdleTimeout: time.Minute, Destroy: d.destroy})
	clk := setFakeClock(p)
	a, b := mustLease(t, p), mustLease(t, p)
	a.Release()
	b.Release()
	clk.advance(minutes(2)) // both expire
	got := leaseAsync(context.Background(), p)
	waitQueued(t, p, 1) // both rooms are their Destroy calls'
	assert.Equal(t, 2, p.Stats().Destroying)
	close(d.release)
	o := awaitLease(t, got)
	require.NoError(t, o.err)
	assert.EqualValues(t, 3, tr.created.Load(), "a fresh item in a freed room")
	o.l.Release()
	awaitDestroys(t, p)
	s := p.Stats()
	assert.EqualValues(t, 2, s.IdleExpired)
	assert.EqualValues(t, 1, s.Waits)
}

// TestShutdownCtxBoundsTheWaitForDestroy: Shutdown returns ctx.Err() when
// its ctx ends while a Destroy blocks, whether the idle items' Destroy or
// one under way from a Discard, and the Destroy goes on (Pool.Shutdown).
func TestShutdownCtxBoundsTheWaitForDestroy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setUp func(t *testing.T, p *Pool[*conn])
	}{
		{"idle item", func(t *testing.T, p *Pool[*conn]) { mustLease(t, p).Release() }},
		{"Discard under way", func(t *testing.T, p *Pool[*conn]) { mustLease(t, p).Discard() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newBlockingDestroy()
			p, _ := newTracked(t, Options[*conn]{MaxSize: 2, Destroy: d.destroy})
			tc.setUp(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- p.Shutdown(ctx) }()
			err := recvOrFail(t, done, "Shutdown, once its ctx ended, while Destroy blocks")
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.EqualValues(t, 1, d.calls.Load())
			assert.Equal(t, 1, p.Stats().Destroying, "the Destroy goes on")
			close(d.release)
			awaitDestroys(t, p)
			assert.EqualValues(t, 1, p.Stats().Destroyed)
		})
	}
}

// TestCloseFromADestroyWaitsForTheOtherDestroys: Close called from inside a
// Destroy cannot wait for that Destroy, but waits for every other one under
// way (Pool.Close).
func TestCloseFromADestroyWaitsForTheOtherDestroys(t *testing.T) {
	d := newBlockingDestroy()
	var closer, other *conn
	closeReturned := make(chan struct{})
	var p *Pool[*conn]
	p, _ = newTracked(t, Options[*conn]{MaxSize: 2, Destroy: func(c *conn) error {
		if c == closer {
			assert.NoError(t, p.Close())
			close(closeReturned)
			return c.Close()
		}
		return d.destroy(c)
	}})
	lc, lo := mustLease(t, p), mustLease(t, p)
	closer, other = lc.Value(), lo.Value()
	lo.Discard() // its Destroy blocks
	require.Eventually(t, func() bool { return d.calls.Load() == 1 }, testWait, time.Millisecond)
	lc.Discard() // its Destroy calls Close
	select {
	case <-closeReturned:
		t.Fatal("Close, called from a Destroy, returned while another Destroy ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(d.release)
	recvOrFail(t, closeReturned, "Close, once the other Destroy returned")
	assert.True(t, other.closed.Load())
	awaitDestroys(t, p)
}

// TestCloseLogsTheIdleItemsDestroyErrors: a Destroy that fails, panics or
// outlasts DestroyTimeout is logged, also for the idle items whose errors
// Close returns (doc.go, "Waiting and errors").
func TestCloseLogsTheIdleItemsDestroyErrors(t *testing.T) {
	var logs logBuffer
	errDestroy := errors.New("lc: destroy failed")
	hang := make(chan struct{})
	defer close(hang)
	p, _ := newTracked(t, Options[*conn]{MaxSize: 3, Logger: logs.logger(), DestroyTimeout: 50 * time.Millisecond,
		Destroy: func(c *conn) error {
			switch c.id {
			case 1:
				return errDestroy
			case 2:
				panic("lc: destroy panicked")
			default:
				<-hang
				return nil
			}
		}})
	putIdle(t, p, 3)
	err := p.Close()
	assert.ErrorIs(t, err, errDestroy)
	assert.ErrorContains(t, err, "lc: destroy panicked")
	assert.ErrorContains(t, err, "DestroyTimeout")
	out := logs.String()
	assert.Equal(t, 3, strings.Count(out, "level=WARN"), "one Warn for each: %s", out)
	assert.Contains(t, out, "lc: destroy failed")
	assert.Contains(t, out, "lc: destroy panicked")
	assert.Contains(t, out, "DestroyTimeout")
}

// TestClearAndCloseStartNoDestroyAfterClose: with Clear, SetMaxSize and
// Close at once, no Destroy starts after Close has returned but for leases
// that end later (Pool.Close).
func TestClearAndCloseStartNoDestroyAfterClose(t *testing.T) {
	const items = 200
	for round := range 100 {
		var closed, late atomic.Bool
		p, _ := newTracked(t, Options[*conn]{MaxSize: items, Destroy: func(c *conn) error {
			if closed.Load() {
				late.Store(true)
			}
			return c.Close()
		}})
		putIdle(t, p, items)
		var wg sync.WaitGroup
		wg.Go(p.Clear)
		wg.Go(func() { _ = p.SetMaxSize(items / 2) })
		wg.Go(func() {
			assert.NoError(t, p.Close())
			closed.Store(true)
		})
		wg.Wait()
		awaitDestroys(t, p)
		require.False(t, late.Load(), "round %d: a Destroy started after Close returned", round)
		assert.EqualValues(t, items, p.Stats().Destroyed, "round %d", round)
	}
}

// TestCloseWaitsForItemsOnTheirWayToDestroy: items that Clear, SetMaxSize or
// an expiry sweep running at the same time as Close took out of the pool
// are destroyed before Close returns: after it, no Destroy starts but for
// the items of leases that end later (Pool.Close). Each round races one of
// them with Close over many idle items, and counts the Destroy calls that
// start after Close returned.
func TestCloseWaitsForItemsOnTheirWayToDestroy(t *testing.T) {
	const items, rounds = 200, 100
	cases := []struct {
		name string
		opts Options[*conn]
		// race returns the call to race with Close, and the item of a lease
		// that call ends, whose Destroy may start after Close (nil: none)
		race func(t *testing.T, p *Pool[*conn]) (call func(), leased *conn)
	}{
		{"Clear", Options[*conn]{}, func(t *testing.T, p *Pool[*conn]) (func(), *conn) {
			putIdle(t, p, items)
			return p.Clear, nil
		}},
		{"SetMaxSize", Options[*conn]{}, func(t *testing.T, p *Pool[*conn]) (func(), *conn) {
			putIdle(t, p, items)
			return func() { _ = p.SetMaxSize(1) }, nil // ErrClosed after Close
		}},
		{"an expiry sweep", Options[*conn]{IdleTimeout: time.Minute}, func(t *testing.T, p *Pool[*conn]) (func(), *conn) {
			clk := setFakeClock(p)
			l := mustLease(t, p)
			putIdle(t, p, items-1)
			clk.advance(minutes(2)) // the idle items expire; the release sweeps
			return l.Release, l.Value()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var lateRounds int
			var mostLate int64
			for round := range rounds {
				var exempt atomic.Pointer[conn]
				var starts atomic.Int64 // Destroy calls begun, but for exempt's
				opts := tc.opts
				opts.MaxSize = items
				opts.Destroy = func(c *conn) error {
					if c != exempt.Load() {
						starts.Add(1)
					}
					return c.Close()
				}
				p, _ := newTracked(t, opts)
				call, leased := tc.race(t, p)
				exempt.Store(leased)
				ready := make(chan struct{})
				raced := make(chan struct{})
				closed := make(chan int64, 1) // starts, when Close returned
				go func() { <-ready; call(); close(raced) }()
				go func() { <-ready; assert.NoError(t, p.Close()); closed <- starts.Load() }()
				close(ready)
				atClose := recvOrFail(t, closed, "Close")
				recvOrFail(t, raced, "the call raced with Close")
				awaitDestroys(t, p)
				if n := starts.Load() - atClose; n > 0 {
					lateRounds++
					mostLate = max(mostLate, n)
				}
				require.EqualValues(t, items, p.Stats().Destroyed, "round %d", round)
			}
			assert.Zero(t, lateRounds, "Destroy calls started after Close returned in %d of %d rounds, up to %d of %d items", lateRounds, rounds, mostLate, items)
		})
	}
}
