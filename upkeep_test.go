package pool

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The upkeep goroutine of Options.UpkeepInterval. The tests run its rounds
// themselves, on the fake clock (the package documentation's "Upkeep").

func TestUpkeepDestroysExpiredIdleItemsWithoutALease(t *testing.T) {
	p, tr, clk := upkeptPool(t, Options[*conn]{MaxSize: 8, IdleTimeout: time.Minute})
	putIdle(t, p, 5)
	clk.advance(minutes(2))
	require.True(t, p.kp.upkeepRound(p))
	awaitDestroys(t, p)
	s := p.Stats()
	assert.EqualValues(t, 5, s.IdleExpired)
	assert.Zero(t, s.ItemsAllocated)
	assert.Zero(t, tr.live.Load())
	assert.Zero(t, s.Leases-5, "no lease ran")
}

func TestUpkeepKeepsMinSizeThroughIdleExpiry(t *testing.T) {
	p, tr, clk := upkeptPool(t, Options[*conn]{MinSize: 2, MaxSize: 8, IdleTimeout: time.Minute})
	putIdle(t, p, 5)
	clk.advance(minutes(2))
	require.True(t, p.kp.upkeepRound(p))
	awaitDestroys(t, p)
	s := p.Stats()
	assert.EqualValues(t, 3, s.IdleExpired, "idle expiry stops at MinSize")
	assert.Equal(t, 2, s.ItemsAllocated)
	assert.EqualValues(t, 2, tr.live.Load())
}

func TestUpkeepReplacesItemsPastTheirLifetime(t *testing.T) {
	p, tr, clk := upkeptPool(t, Options[*conn]{MinSize: 2, MaxSize: 8, MaxLifetime: time.Minute})
	old := putIdle(t, p, 2)
	clk.advance(minutes(2))
	require.True(t, p.kp.upkeepRound(p))
	awaitDestroys(t, p)
	s := p.Stats()
	assert.EqualValues(t, 2, s.LifetimeExpired, "MaxLifetime applies below MinSize too")
	assert.Equal(t, 2, s.ItemsAvailable, "and the upkeep replaced them")
	assert.EqualValues(t, 2, tr.live.Load())
	for _, c := range old {
		assert.True(t, c.closed.Load())
	}
}

func TestUpkeepChecksIdleItemsBeforeALeaseMeetsThem(t *testing.T) {
	prep := &testPreparer{}
	p, tr, clk := upkeptPool(t, Options[*conn]{MaxSize: 4, Preparer: prep, CheckAfterIdle: time.Minute})
	cs := putIdle(t, p, 3)
	dead := cs[1]
	prep.set(func(_ context.Context, c *conn) (bool, error) {
		if c == dead {
			return false, errBoom
		}
		return true, nil
	}, nil)
	checksBefore, _ := prep.seen()

	require.True(t, p.kp.upkeepRound(p))
	checks, _ := prep.seen()
	assert.Empty(t, checks[len(checksBefore):], "nothing is due before CheckAfterIdle")

	clk.advance(minutes(2))
	require.True(t, p.kp.upkeepRound(p))
	checks, _ = prep.seen()
	assert.ElementsMatch(t, []int{cs[0].id, cs[1].id, cs[2].id}, checks[len(checksBefore):], "each idle item checked once")
	awaitDestroys(t, p)
	s := p.Stats()
	assert.EqualValues(t, 1, s.PrepareFailed)
	assert.True(t, dead.closed.Load(), "the dead item was destroyed before any lease met it")
	assert.Equal(t, 2, s.ItemsAvailable)
	assert.EqualValues(t, 2, tr.live.Load())

	// The items the upkeep just checked are not checked again on lease.
	n := len(checks)
	l := mustLease(t, p)
	checks, _ = prep.seen()
	assert.Len(t, checks, n, "a checked item is lent without a second check")
	l.Release()
}

func TestUpkeepNeverLendsAnItemMidCheck(t *testing.T) {
	prep := &testPreparer{}
	p, _, clk := upkeptPool(t, Options[*conn]{MaxSize: 1, Preparer: prep, CheckAfterIdle: time.Minute})
	item := putIdle(t, p, 1)[0]
	clk.advance(minutes(2))

	inCheck, finish := make(chan struct{}), make(chan struct{})
	prep.set(func(context.Context, *conn) (bool, error) {
		close(inCheck)
		<-finish
		return true, nil
	}, nil)
	roundDone := make(chan bool)
	go func() { roundDone <- p.kp.upkeepRound(p) }()
	recvOrFail(t, inCheck, "the upkeep's check")

	// The only item is under check: a lease must wait for it.
	_, err := p.TryLease(context.Background())
	require.ErrorIs(t, err, ErrExhausted, "the item under check counts against MaxSize")
	got := leaseAsync(context.Background(), p)
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, testWait, time.Millisecond)
	prep.set(nil, nil)
	close(finish)
	assert.True(t, recvOrFail(t, roundDone, "the round"))
	o := awaitLease(t, got)
	require.NoError(t, o.err)
	assert.Same(t, item, o.l.Value(), "the lease got the item once its check passed")
	o.l.Release()
}

// TestUpkeepLogsADestroyPanic: the upkeep has no caller to raise a panic
// to, and on its own goroutine a panic would end the program. An item that
// fails its check and whose Destroy panics is logged, counted, and the
// round goes on.
func TestUpkeepLogsADestroyPanic(t *testing.T) {
	var log logBuffer
	prep := &testPreparer{}
	p, _, clk := upkeptPool(t, Options[*conn]{MaxSize: 2, Preparer: prep, CheckAfterIdle: time.Minute, Logger: log.logger(),
		Destroy: func(*conn) error { panic("uk: Destroy panic") }})
	putIdle(t, p, 2)
	prep.set(func(context.Context, *conn) (bool, error) { return false, errBoom }, nil)
	clk.advance(minutes(2))
	require.NotPanics(t, func() { assert.True(t, p.kp.upkeepRound(p)) })
	awaitDestroys(t, p)
	s := p.Stats()
	assert.EqualValues(t, 2, s.PrepareFailed, "the round went on to the second item")
	assert.EqualValues(t, 2, s.DestroyErrors)
	assert.Zero(t, s.ItemsAllocated)
	assert.Contains(t, log.String(), "uk: Destroy panic")
}

func TestUpkeepCreatesUpToMinSizeAndBacksOff(t *testing.T) {
	var log logBuffer
	p, tr, _ := upkeptPool(t, Options[*conn]{MinSize: 0, MaxSize: 3, Logger: log.logger()})
	p.opts.MinSize = 3 // as if New had seeded nothing: the floor is the upkeep's to keep
	tr.setFail(errBoom)
	assert.False(t, p.kp.upkeepRound(p), "a failed creation reports the round failed")
	assert.Contains(t, log.String(), `msg="pool: upkeep: create item" pool.name=conn.Pool err="create item: boom"`)
	assert.Zero(t, p.Stats().ActiveLeases, "the failed creation gave its room back")

	tr.setFail(nil)
	assert.True(t, p.kp.upkeepRound(p))
	s := p.Stats()
	assert.Equal(t, 3, s.ItemsAvailable, "MinSize items exist")
	assert.True(t, p.kp.upkeepRound(p))
	assert.EqualValues(t, 3, tr.created.Load(), "never past MinSize")

	iv := time.Second
	var seq []time.Duration
	var b time.Duration
	for range 7 {
		b = backoff(b, iv)
		seq = append(seq, b)
	}
	assert.Equal(t, []time.Duration{iv / 16, iv / 8, iv / 4, iv / 2, iv, iv, iv}, seq, "retries double up to UpkeepInterval")
}

func TestUpkeepCreatesNothingPastMaxSize(t *testing.T) {
	p, tr, _ := upkeptPool(t, Options[*conn]{MinSize: 0, MaxSize: 2})
	p.opts.MinSize = 2
	held := []Lease[*conn]{mustLease(t, p), mustLease(t, p)}
	assert.True(t, p.kp.upkeepRound(p))
	assert.EqualValues(t, 2, tr.created.Load(), "MaxSize items are leased: no room for more")
	for _, l := range held {
		l.Release()
	}
}

func TestUpkeepStopsBeforeCloseReturns(t *testing.T) {
	for _, end := range []string{"Close", "Shutdown"} {
		t.Run(end, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			prep := &testPreparer{}
			p, err := New[*conn](context.Background(), &tracker{}, Options[*conn]{
				MinSize: 2, MaxSize: 4, UpkeepInterval: time.Millisecond,
				IdleTimeout: time.Millisecond, Preparer: prep, CheckAfterIdle: time.Millisecond,
			})
			require.NoError(t, err)
			require.Eventually(t, func() bool { checks, _ := prep.seen(); return len(checks) > 4 }, testWait, time.Millisecond,
				"the upkeep runs rounds on its own")
			if end == "Close" {
				require.NoError(t, p.Close())
			} else {
				require.NoError(t, p.Shutdown(context.Background()))
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}

// armedOnce is a callback's trigger: it fires once, after arm.
type armedOnce struct{ armed, fired atomic.Bool }

func (a *armedOnce) arm()       { a.armed.Store(true) }
func (a *armedOnce) fire() bool { return a.armed.Load() && a.fired.CompareAndSwap(false, true) }

// The upkeep's checks get a context that Close cancels (doc.go, "Upkeep"):
// a Preparer that waits on a dead peer until its ctx ends, with
// PreparationTimeout 0, holds up neither Close nor Shutdown.
func TestCloseCancelsTheUpkeepsCheck(t *testing.T) {
	for _, shutdown := range []bool{false, true} {
		var trigger armedOnce
		entered := make(chan struct{})
		prep := CheckFunc[*conn](func(ctx context.Context, _ *conn) error {
			if !trigger.fire() {
				return nil
			}
			close(entered)
			<-ctx.Done() // a ping to a peer that never answers
			return ctx.Err()
		})
		p, tr := newTracked(t, Options[*conn]{MaxSize: 2, UpkeepInterval: time.Millisecond,
			Preparer: prep, CheckAfterIdle: time.Millisecond})
		mustLease(t, p).Release() // one idle item, accepted once
		trigger.arm()
		recvOrFail(t, entered, "the upkeep to check the idle item")

		closed := make(chan error, 1)
		go func() {
			if shutdown {
				closed <- p.Shutdown(context.Background())
			} else {
				closed <- p.Close()
			}
		}()
		assert.NoError(t, recvOrFail(t, closed, "Close or Shutdown to return"))
		assert.Zero(t, tr.live.Load(), "the item under check was destroyed")
		assert.Zero(t, p.Stats().PrepareFailed, "a check that Close cut short is not a failed preparation")
	}
}

// Shutdown's ctx bounds its wait for the upkeep, as it bounds its wait for
// leases (doc.go, "Lifecycle of an item"): here the upkeep's factory ignores its ctx.
func TestShutdownCtxBoundsTheWaitForTheUpkeep(t *testing.T) {
	var trigger armedOnce
	entered, unblock := make(chan struct{}), make(chan struct{})
	f := FactoryFunc[*conn](func(context.Context) (*conn, error) {
		if trigger.fire() {
			close(entered)
			<-unblock // a dial that ignores its ctx
		}
		return &conn{}, nil
	})
	p, err := New[*conn](context.Background(), f, Options[*conn]{MinSize: 1, MaxSize: 2, UpkeepInterval: time.Millisecond})
	require.NoError(t, err)
	trigger.arm()
	mustLease(t, p).Discard() // the upkeep creates the floor again
	recvOrFail(t, entered, "the upkeep to create an item")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- p.Shutdown(ctx) }()
	returned := true
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Shutdown returns its ctx's error")
		assert.Less(t, time.Since(start), 2*time.Second)
	case <-time.After(2 * time.Second):
		t.Error("Shutdown waited for the upkeep's factory past its ctx")
		returned = false
	}
	close(unblock)
	recvOrFail(t, p.kp.stopped, "the upkeep to stop once its factory returns")
	if !returned {
		recvOrFail(t, done, "Shutdown to return")
	}
}

// The upkeep's rounds start every UpkeepInterval from the start of the
// previous one (doc.go, "Upkeep"), on the pool's fake clock: a round that
// takes 5 ms of a 20 ms interval is followed by the next 13–17 ms later
// (20 ms spread by ±10 %, less 5), and one that outlasts the interval by
// the next at once.
func TestUpkeepRoundsStartAnIntervalApart(t *testing.T) {
	clk := &fakeClock{}
	waits := make(chan time.Duration, 64)
	testClock = clk.now
	upkeepScheduled = func(d time.Duration) {
		select {
		case waits <- d:
		default:
		}
	}
	t.Cleanup(func() { testClock, upkeepScheduled = nil, nil })
	var dial atomic.Int64 // how long a creation takes, on the fake clock
	f := FactoryFunc[*conn](func(context.Context) (*conn, error) {
		clk.advance(dial.Load())
		return &conn{}, nil
	})
	const interval = 20 * time.Millisecond
	p, err := New[*conn](context.Background(), f, Options[*conn]{MinSize: 1, MaxSize: 2, UpkeepInterval: interval})
	require.NoError(t, err)
	defer p.Close()

	next := func(what string) time.Duration { return recvOrFail(t, waits, what) }
	dial.Store(int64(30 * time.Millisecond))
	mustLease(t, p).Discard() // the first round creates the floor again, for 30 ms
	assert.Zero(t, next("the wait after a round that outlasts the interval"))
	idle := next("the wait after a round that does nothing")
	assert.GreaterOrEqual(t, idle, interval*9/10)
	assert.LessOrEqual(t, idle, interval*11/10)

	dial.Store(int64(5 * time.Millisecond))
	mustLease(t, p).Discard()
	short := next("the wait after a 5 ms round")
	assert.GreaterOrEqual(t, short, interval*9/10-5*time.Millisecond)
	assert.LessOrEqual(t, short, interval*11/10-5*time.Millisecond)
}

// Close, Clear and SetMaxSize called from a callback the upkeep runs (a
// Preparer, the factory or Destroy) return (doc.go, "Upkeep"); after Close
// the upkeep stops once the callback returns, and goleak sees no goroutine
// left.
func TestPoolCallsFromAnUpkeepCallbackReturn(t *testing.T) {
	type site int
	const (
		inCheck site = iota
		inFactory
		inDestroy
	)
	calls := map[string]func(*Pool[*conn]) error{
		"Close":      func(p *Pool[*conn]) error { return p.Close() },
		"Clear":      func(p *Pool[*conn]) error { p.Clear(); return nil },
		"SetMaxSize": func(p *Pool[*conn]) error { return p.SetMaxSize(3) },
	}
	for name, call := range calls {
		for _, at := range []site{inCheck, inFactory, inDestroy} {
			t.Run(name+[]string{" from IsReady", " from the factory", " from Destroy"}[at], func(t *testing.T) {
				var (
					trigger  armedOnce
					pp       atomic.Pointer[Pool[*conn]]
					returned = make(chan error, 1)
				)
				callback := func() {
					if trigger.fire() {
						returned <- call(pp.Load())
					}
				}
				tr := &tracker{}
				opts := Options[*conn]{MaxSize: 2, UpkeepInterval: time.Millisecond, Destroy: tr.destroy}
				var f Factory[*conn] = tr
				switch at {
				case inCheck:
					opts.Preparer = CheckFunc[*conn](func(context.Context, *conn) error { callback(); return nil })
					opts.CheckAfterIdle = time.Millisecond
				case inFactory:
					opts.MinSize = 1
					f = FactoryFunc[*conn](func(ctx context.Context) (*conn, error) { callback(); return tr.Create(ctx) })
				case inDestroy:
					opts.IdleTimeout = time.Millisecond
					opts.Destroy = func(c *conn) error { defer callback(); return tr.destroy(c) }
				}
				p, err := New(context.Background(), f, opts)
				require.NoError(t, err)
				pp.Store(p)
				l := mustLease(t, p)
				trigger.arm()
				if at == inFactory {
					l.Discard() // the upkeep creates the floor again
				} else {
					l.Release() // idle: the upkeep checks it, or destroys it once expired
				}
				assert.NoError(t, recvOrFail(t, returned, name+" called from the upkeep's callback to return"))
				assert.NoError(t, p.Close())
				recvOrFail(t, p.kp.stopped, "the upkeep to stop")
				awaitDestroys(t, p) // of the item the factory that called Close made
				assert.Zero(t, tr.live.Load(), "every item destroyed")
			})
		}
	}
}

// A callback of the upkeep that calls runtime.Goexit (t.FailNow in a
// test's factory) ends the upkeep's goroutine, not the upkeep (doc.go,
// "Upkeep"): MinSize is kept.
func TestUpkeepGoesOnAfterGoexitInACallback(t *testing.T) {
	var trigger armedOnce
	tr := &tracker{}
	f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		if trigger.fire() {
			runtime.Goexit()
		}
		return tr.Create(ctx)
	})
	p, err := New[*conn](context.Background(), f, Options[*conn]{MinSize: 2, MaxSize: 4, UpkeepInterval: time.Millisecond, Destroy: tr.destroy})
	require.NoError(t, err)
	defer p.Close()
	trigger.arm()
	mustLease(t, p).Discard() // the upkeep's next creation calls Goexit
	mustLease(t, p).Discard()
	require.Eventually(t, func() bool { return trigger.fired.Load() && p.Stats().ItemsAllocated == 2 },
		testWait, time.Millisecond, "the upkeep went on and refilled MinSize")
}

// TestUpkeepStartsBesideMinIdleWithoutARace: New starts the upkeep and the
// task that keeps MinIdle items idle, and every round of the upkeep asks
// that task to look ("Upkeep"; the doc comment of Options.MinIdle). The
// upkeep's first round must not race with New setting that task up. Only
// the race detector sees the fault, so this fails under -race only.
func TestUpkeepStartsBesideMinIdleWithoutARace(t *testing.T) {
	rounds := make(chan struct{}, 1)
	upkeepScheduled = func(time.Duration) {
		select {
		case rounds <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() { upkeepScheduled = nil })
	for round := range 20 {
		p, _ := newTracked(t, Options[*conn]{MaxSize: 2, MinIdle: 1, UpkeepInterval: time.Millisecond})
		recvOrFail(t, rounds, fmt.Sprintf("round %d: the upkeep's first round", round))
		require.NoError(t, p.Close())
		select { // a round that ended as Close began
		case <-rounds:
		default:
		}
	}
}
