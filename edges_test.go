package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// The edges: what SPEC.md's "Additions, second round" promises about
// contexts, cancellation, panics, typed nils, Stats snapshots, Shutdown,
// timers and errors with no caller. Each test guards one promise.

// edRecoverString calls f and returns what it panicked with, printed.
func edRecoverString(f func()) string {
	v := lcRecover(f)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func TestNilContextPanicsAtEveryEntryPoint(t *testing.T) {
	var nilCtx context.Context // a nil interface, as a caller's mistake makes it
	f := FactoryFunc[*conn](func(context.Context) (*conn, error) { return &conn{}, nil })

	assert.Equal(t, errNilContext, edRecoverString(func() { _, _ = New(nilCtx, f, Options[*conn]{}) }), "New")
	assert.Equal(t, errNilContext, edRecoverString(func() {
		_, _ = New(nilCtx, f, Options[*conn]{CreateTimeout: time.Second, MinSize: 1})
	}), "New with CreateTimeout and MinSize")

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
			assert.Equal(t, errNilContext, edRecoverString(func() { _, _ = p.Lease(nilCtx) }), "Lease")
			assert.Equal(t, errNilContext, edRecoverString(func() { _, _ = p.TryLease(nilCtx) }), "TryLease")
			after := p.Stats()
			assert.Equal(t, before.ItemsAvailable, after.ItemsAvailable, "no item was taken")
			assert.Equal(t, before.ActiveLeases, after.ActiveLeases, "nothing was leased")
			assert.Equal(t, before.Created, uint64(tr.created.Load()), "nothing was created")
		})
	}

	p, _ := newTracked(t, Options[*conn]{})
	assert.Equal(t, errNilContext, edRecoverString(func() { _ = p.Shutdown(nilCtx) }), "Shutdown")
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
}

// edGrantAndGiveUp makes the next await find its grant and its giving up
// ready at the same instant: the hook, which runs inside await before it
// waits, releases the lease that the waiter is queued for and then ends
// the wait's ctx (or lets its LeaseTimeout elapse).
func edGrantAndGiveUp(t *testing.T, release func(), giveUp func()) {
	t.Helper()
	var once sync.Once
	testHooks.beforeWait = func() {
		once.Do(func() {
			release()
			giveUp()
		})
	}
	t.Cleanup(func() { testHooks.beforeWait = nil })
}

func TestCancelAtGrantPassesItemOn(t *testing.T) {
	const rounds = 40 // a select with both cases ready picks either: 2^-40 to pass by luck
	for round := range rounds {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
		held := mustLease(t, p)

		// A second waiter, queued behind the one that gives up, must get
		// the item in FIFO order.
		ctx, cancel := context.WithCancel(context.Background())
		edGrantAndGiveUp(t, held.Release, cancel)
		first := leaseAsync(ctx, p)
		require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 || len(first) == 1 }, testWait, time.Millisecond)
		o := awaitLease(t, first)
		require.ErrorIs(t, o.err, context.Canceled, "round %d: the canceled waiter returns its ctx's error", round)
		assert.Equal(t, Lease[*conn]{}, o.l)

		s := p.Stats()
		assert.Equal(t, 1, s.ItemsAvailable, "round %d: the item went back, idle: %+v", round, s)
		assert.Zero(t, s.ActiveLeases, "round %d", round)
		assert.EqualValues(t, 1, tr.created.Load(), "round %d: nothing lost, nothing created", round)
		assert.EqualValues(t, 1, s.Canceled)
		testHooks.beforeWait = nil
		require.NoError(t, p.Close())
	}
}

func TestCancelAtGrantHandsItemToNextWaiter(t *testing.T) {
	for round := range 20 {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
		held := mustLease(t, p)
		item := held.Value()

		second := make(chan leaseOutcome, 1)
		ctx, cancel := context.WithCancel(context.Background())
		edGrantAndGiveUp(t, func() {
			// Queue the second waiter behind this one, then release.
			go func() {
				l, err := p.Lease(context.Background())
				second <- leaseOutcome{l, err}
			}()
			for p.Stats().QueuedLeases < 2 {
				runtime.Gosched()
			}
			held.Release()
		}, cancel)
		o := awaitLease(t, leaseAsync(ctx, p))
		require.ErrorIs(t, o.err, context.Canceled, "round %d", round)
		o2 := awaitLease(t, second)
		require.NoError(t, o2.err)
		assert.Same(t, item, o2.l.Value(), "round %d: the next waiter gets the item", round)
		o2.l.Release()
		assert.EqualValues(t, 1, tr.created.Load())
		testHooks.beforeWait = nil
		require.NoError(t, p.Close())
	}
}

func TestLeaseTimeoutAtGrantPassesItemOn(t *testing.T) {
	for round := range 20 {
		p, _ := newTracked(t, Options[*conn]{MaxSize: 1, LeaseTimeout: time.Millisecond})
		held := mustLease(t, p)
		edGrantAndGiveUp(t, held.Release, func() { time.Sleep(5 * time.Millisecond) })
		o := awaitLease(t, leaseAsync(context.Background(), p))
		require.ErrorIs(t, o.err, ErrLeaseTimeout, "round %d: the elapsed LeaseTimeout wins", round)
		s := p.Stats()
		assert.Equal(t, 1, s.ItemsAvailable, "round %d: the item went back: %+v", round, s)
		assert.EqualValues(t, 1, s.Timeouts)
		testHooks.beforeWait = nil
		require.NoError(t, p.Close())
	}
}

// TestWaiterTimerReuse waits twice on one waiter record, whose timer fired
// during the first wait as the grant came. The second wait must last: a
// stale tick left in the timer's channel would end it at once with
// ErrLeaseTimeout "for 0s". TestWaiterTimerUnderAsyncTimerChan runs it
// again with the channels Go had before 1.23, where the tick does stay.
func TestWaiterTimerReuse(t *testing.T) {
	for round := range 20 {
		g := &gate[int]{size: 1, held: 1}
		g.slots.init()
		w := &waiter[int]{ready: make(chan struct{}, 1)}
		grant := func() {
			g.lock()
			g.grantOldest(nil, nil)
			g.unlock()
		}

		// The same waiter again: granted after 20 ms, well within its 10 s.
		waitAgain := func() {
			t.Helper()
			g.held = 1
			g.mu.Lock()
			g.enqueueLocked(w)
			g.mu.Unlock()
			time.AfterFunc(20*time.Millisecond, grant)
			_, waited, expired, err := g.await(context.Background(), w, 10*time.Second)
			require.NoError(t, err, "round %d: the wait lasted until the grant (waited %v), no stale tick ended it", round, waited)
			require.False(t, expired)
		}

		// Granted, and the 1 ms timer fired, before the wait looks: the
		// timeout wins.
		g.mu.Lock()
		g.enqueueLocked(w)
		g.mu.Unlock()
		testHooks.beforeWait = func() {
			grant()
			time.Sleep(3 * time.Millisecond)
		}
		_, _, expired, err := g.await(context.Background(), w, time.Millisecond)
		testHooks.beforeWait = nil
		require.ErrorIs(t, err, ErrLeaseTimeout, "round %d: the elapsed timeout wins over the grant", round)
		require.True(t, expired)
		require.Zero(t, g.held, "the granted permit was passed on")
		waitAgain()

		// Granted; the timer fires just after the wait took the grant.
		g.held = 1
		g.mu.Lock()
		g.enqueueLocked(w)
		g.mu.Unlock()
		testHooks.beforeWait = grant
		testHooks.afterWait = func() { time.Sleep(3 * time.Millisecond) }
		_, _, _, err = g.await(context.Background(), w, time.Millisecond)
		testHooks.beforeWait, testHooks.afterWait = nil, nil
		require.NoError(t, err, "round %d: granted before the timer fired", round)
		waitAgain()
	}
}

func TestWaiterTimerUnderAsyncTimerChan(t *testing.T) {
	if os.Getenv("POOL_TEST_CHILD") != "" {
		t.Skip("in the child already")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestWaiterTimerReuse$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=asynctimerchan=1", "POOL_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "under GODEBUG=asynctimerchan=1:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: TestWaiterTimerReuse", "the child ran the test:\n%s", out)
}

// edPanickingFactory and edPanickingDestroy are the user code whose frames
// a panic raised again by the pool must show.
//
//go:noinline
func edPanickingFactory(context.Context) (*conn, error) {
	panic(errBoom)
}

//go:noinline
func edPanickingDestroy(*conn) error {
	panic("ed: Destroy panic")
}

func TestPanicRaisedAgainCarriesUserStack(t *testing.T) {
	t.Run("factory, on the creation goroutine", func(t *testing.T) {
		p, err := New(context.Background(), FactoryFunc[*conn](edPanickingFactory), Options[*conn]{})
		require.NoError(t, err)
		defer p.Close()
		ctx, cancel := context.WithCancel(context.Background()) // a ctx that can end: the factory runs on its own goroutine
		defer cancel()
		v := lcRecover(func() { _, _ = p.Lease(ctx) })
		err, ok := v.(error)
		require.True(t, ok, "the panic value is an error: %T", v)
		assert.ErrorIs(t, err, errBoom, "it unwraps to the factory's own panic value")
		assert.Contains(t, err.Error(), "edPanickingFactory", "the message shows the factory's frame")
		assert.Zero(t, p.Stats().ActiveLeases, "the item slot went back")
	})
	t.Run("Destroy, in Close's batch", func(t *testing.T) {
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 2, MaxSize: 2, Destroy: edPanickingDestroy})
		require.NoError(t, err)
		v := lcRecover(func() { _ = p.Close() })
		require.NotNil(t, v)
		assert.Equal(t, "ed: Destroy panic", panicValue(v))
		assert.Contains(t, fmt.Sprint(v), "edPanickingDestroy", "the message shows Destroy's frame")
		s := p.Stats()
		assert.EqualValues(t, 2, s.Destroyed, "both items counted destroyed")
		assert.EqualValues(t, 2, s.DestroyErrors)
	})
}

// edGoexitOnce returns a Destroy that calls runtime.Goexit the first time
// (as t.FailNow in a test's Destroy does) and destroys through tr.
func edGoexitOnce(tr *tracker) func(*conn) error {
	var done atomic.Bool
	return func(c *conn) error {
		err := tr.destroy(c)
		if done.CompareAndSwap(false, true) {
			runtime.Goexit()
		}
		return err
	}
}

// edOnOwnGoroutine runs f on a goroutine of its own, which f may end with
// runtime.Goexit, and waits for it.
func edOnOwnGoroutine(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	lcRecv(t, done, "the goroutine to end")
}

func TestGoexitInDestroyFinishesTheBatch(t *testing.T) {
	t.Run("Close", func(t *testing.T) {
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 4, MaxSize: 4})
		require.NoError(t, err)
		p.opts.Destroy = edGoexitOnce(tr)

		edOnOwnGoroutine(t, func() { _ = p.Close() })
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
		p.opts.Destroy = edGoexitOnce(tr)

		edOnOwnGoroutine(t, p.Clear)
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

// TestGoexitInAnyCallbackLosesNothing calls runtime.Goexit from each user
// callback in turn, on a goroutine of its own, and checks that the pool
// ends at rest with every item accounted for and MaxSize leasable again.
func TestGoexitInAnyCallbackLosesNothing(t *testing.T) {
	type setup struct {
		opts func(tr *tracker, goexit func()) Options[*conn]
		run  func(t *testing.T, p *Pool[*conn])
	}
	lease := func(ctx context.Context) func(t *testing.T, p *Pool[*conn]) {
		return func(t *testing.T, p *Pool[*conn]) {
			edOnOwnGoroutine(t, func() {
				if l, err := p.Lease(ctx); err == nil {
					l.Release()
				}
			})
		}
	}
	cancelable, cancel := context.WithCancel(context.Background())
	defer cancel()
	cases := map[string]setup{
		"factory on the caller's goroutine": {
			opts: func(tr *tracker, goexit func()) Options[*conn] { return Options[*conn]{} },
			run:  lease(context.Background()),
		},
		"factory on its own goroutine": {
			opts: func(tr *tracker, goexit func()) Options[*conn] { return Options[*conn]{} },
			run: func(t *testing.T, p *Pool[*conn]) {
				edOnOwnGoroutine(t, func() { _ = lcRecover(func() { _, _ = p.Lease(cancelable) }) })
			},
		},
		"IsReady": {
			opts: func(tr *tracker, goexit func()) Options[*conn] {
				return Options[*conn]{Preparer: &lcPreparer{isReady: func(context.Context, *conn) (bool, error) { goexit(); return true, nil }}}
			},
			run: lease(context.Background()),
		},
		"Prepare": {
			opts: func(tr *tracker, goexit func()) Options[*conn] {
				return Options[*conn]{Preparer: &lcPreparer{
					isReady: func(context.Context, *conn) (bool, error) { return false, nil },
					prepare: func(context.Context, *conn) error { goexit(); return nil },
				}}
			},
			run: lease(context.Background()),
		},
		"Reset": {
			opts: func(tr *tracker, goexit func()) Options[*conn] {
				return Options[*conn]{Reset: func(*conn) error { goexit(); return nil }}
			},
			run: lease(context.Background()),
		},
		"Destroy on Discard": {
			opts: func(tr *tracker, goexit func()) Options[*conn] {
				return Options[*conn]{Destroy: func(c *conn) error { err := tr.destroy(c); goexit(); return err }}
			},
			run: func(t *testing.T, p *Pool[*conn]) {
				edOnOwnGoroutine(t, func() {
					if l, err := p.Lease(context.Background()); err == nil {
						l.Discard()
					}
				})
			},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			tr := &tracker{}
			var fired atomic.Bool
			goexit := func() {
				if fired.CompareAndSwap(false, true) {
					runtime.Goexit()
				}
			}
			opts := c.opts(tr, goexit)
			opts.MaxSize = 2
			if opts.Destroy == nil {
				opts.Destroy = tr.destroy
			}
			var f Factory[*conn] = tr
			if strings.HasPrefix(name, "factory") {
				f = FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
					goexit()
					return tr.Create(ctx)
				})
			}
			p, err := New(context.Background(), f, opts)
			require.NoError(t, err)
			defer p.Close()

			c.run(t, p)
			require.True(t, fired.Load(), "the callback ran")
			require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond,
				"every item slot comes back: %+v", p.Stats())
			s := p.Stats()
			assert.Equal(t, int64(s.ItemsAllocated), tr.live.Load(), "the items in existence are the pool's: %+v", s)
			for range 2 {
				l, err := p.TryLease(context.Background())
				require.NoError(t, err, "MaxSize items can be leased again")
				defer l.Release()
			}
		})
	}
}

// edSlowReady reports every item ready, after sleeping past any short
// PreparationTimeout and ignoring its ctx.
type edSlowReady struct{ d time.Duration }

func (r edSlowReady) IsReady(context.Context, *conn) (bool, error) {
	time.Sleep(r.d)
	return true, nil
}

func (edSlowReady) Prepare(context.Context, *conn) error { return nil }

func TestElapsedPreparationTimeoutFailsLateSuccess(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{PreparationTimeout: 5 * time.Millisecond, Preparer: edSlowReady{30 * time.Millisecond}})
	_, err := p.Lease(context.Background())
	require.ErrorIs(t, err, ErrPreparationTimeout, "a success reported after the timeout is still a timeout")
	s := p.Stats()
	assert.EqualValues(t, 1, s.PrepareFailed)
	assert.Zero(t, s.ActiveLeases)
	assert.Zero(t, tr.live.Load(), "the fresh item was destroyed")
}

// edNoopPreparer is a Preparer whose typed nil a caller may pass.
type edNoopPreparer struct{}

func (*edNoopPreparer) IsReady(context.Context, *conn) (bool, error) { return true, nil }
func (*edNoopPreparer) Prepare(context.Context, *conn) error         { return nil }

func TestTypedNilOptionsAreTreatedAsNil(t *testing.T) {
	var mp *sdkmetric.MeterProvider
	var prep *edNoopPreparer
	p, _ := newTracked(t, Options[*conn]{MeterProvider: mp, Preparer: prep})
	l, err := p.Lease(context.Background())
	require.NoError(t, err)
	l.Release()
	assert.Nil(t, p.m, "no metrics from a nil MeterProvider")
	assert.Nil(t, p.opts.Preparer)
}

func TestFactoryReturningNilItemFails(t *testing.T) {
	nilConn := FactoryFunc[*conn](func(context.Context) (*conn, error) { return nil, nil })
	p, err := New(context.Background(), nilConn, Options[*conn]{Name: "nils"})
	require.NoError(t, err)
	_, err = p.Lease(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `pool "nils": create item: the factory returned a nil *pool.conn and no error`)
	s := p.Stats()
	assert.Zero(t, s.Created)
	assert.Zero(t, s.ActiveLeases)
	assert.NoError(t, p.Close())

	_, err = New(context.Background(), nilConn, Options[*conn]{MinSize: 1})
	assert.ErrorContains(t, err, "nil", "seeding refuses it too")

	nilFunc := FactoryFunc[func()](func(context.Context) (func(), error) { return nil, nil })
	pf, err := New(context.Background(), nilFunc, Options[func()]{})
	require.NoError(t, err)
	_, err = pf.Lease(context.Background())
	assert.ErrorContains(t, err, "nil")
	assert.NoError(t, pf.Close())

	zero := FactoryFunc[int](func(context.Context) (int, error) { return 0, nil })
	pi, err := New(context.Background(), zero, Options[int]{})
	require.NoError(t, err)
	l, err := pi.Lease(context.Background())
	require.NoError(t, err, "a zero that is not nil is an item")
	l.Release()
	assert.NoError(t, pi.Close())
}

// TestStatsRelationsHoldInEverySnapshot takes snapshots while items are
// created, discarded and detached as fast as 8 goroutines can: every one
// must keep Destroyed + Detached <= Created <= that + MaxSize.
func TestStatsRelationsHoldInEverySnapshot(t *testing.T) {
	const maxSize = 4
	p, _ := newTracked(t, Options[*conn]{MaxSize: maxSize})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
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
				if (i+w)%7 == 0 {
					_ = l.Detach().Close()
				} else {
					l.Discard()
				}
			}
		})
	}
	var snaps, bad int
	deadline := time.Now().Add(time.Second)
	for snaps < 200_000 && time.Now().Before(deadline) || snaps < 1000 {
		s := p.Stats()
		snaps++
		if s.Destroyed+s.Detached > s.Created || s.Created-s.Destroyed-s.Detached > maxSize {
			if bad++; bad <= 3 {
				t.Errorf("snapshot %d: Created %d, Destroyed %d, Detached %d (MaxSize %d)", snaps, s.Created, s.Destroyed, s.Detached, maxSize)
			}
		}
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, bad, "of %d snapshots", snaps)
	t.Logf("%d snapshots under churn, %d items created", snaps, p.Stats().Created)
}

func TestShutdownOnDrainedPoolIgnoresEndedCtx(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		p, _ := newTracked(t, Options[*conn]{MinSize: 1})
		mustLease(t, p).Release()
		require.NoError(t, p.Shutdown(ended), "call %d: the pool drained, whatever ctx says", i)
	}
	// Not drained: ctx ends it.
	p, _ := newTracked(t, Options[*conn]{})
	held := mustLease(t, p)
	assert.ErrorIs(t, p.Shutdown(ended), context.Canceled)
	held.Release()
}

// edLog captures a pool's log records.
type edLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *edLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *edLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *edLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

func TestErrorsWithNoCallerAreLoggedAndCounted(t *testing.T) {
	errDestroy := errors.New("destroy failed")
	errReset := errors.New("reset failed")
	failingDestroy := func(tr *tracker) func(*conn) error {
		return func(c *conn) error { _ = tr.destroy(c); return errDestroy }
	}

	t.Run("Destroy on Discard", func(t *testing.T) {
		var log edLog
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(), Destroy: failingDestroy(tr)})
		require.NoError(t, err)
		defer p.Close()
		mustLease(t, p).Discard()
		assert.Contains(t, log.String(), `level=WARN msg="pool: destroy item" pool.name=edpool err="pool \"edpool\": destroy item: destroy failed"`)
		assert.EqualValues(t, 1, p.Stats().DestroyErrors)
	})
	t.Run("Reset and then Destroy on Release", func(t *testing.T) {
		var log edLog
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(),
			Destroy: failingDestroy(tr), Reset: func(*conn) error { return errReset }})
		require.NoError(t, err)
		defer p.Close()
		mustLease(t, p).Release()
		out := log.String()
		assert.Contains(t, out, `msg="pool: reset item; destroying it" pool.name=edpool err="pool \"edpool\": reset item: reset failed"`)
		assert.Contains(t, out, `msg="pool: destroy item"`)
		assert.EqualValues(t, 1, p.Stats().DestroyErrors)
	})
	t.Run("Destroy on expiry at release", func(t *testing.T) {
		var log edLog
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(),
			Destroy: failingDestroy(tr), MaxLifetime: time.Minute})
		require.NoError(t, err)
		defer p.Close()
		clk := lcClock(p)
		l := mustLease(t, p)
		clk.advance(lcMin(2))
		l.Release()
		assert.Contains(t, log.String(), `msg="pool: destroy item"`)
		assert.EqualValues(t, 1, p.Stats().LifetimeExpired)
	})
	t.Run("a creation whose lease gave up", func(t *testing.T) {
		var log edLog
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger()})
		require.NoError(t, err)
		defer p.Close()
		block := make(chan struct{})
		lcSetBlock(tr, block)
		tr.setFail(errBoom)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		_, err = p.Lease(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		close(block) // the abandoned creation fails now, with nobody to tell
		require.Eventually(t, func() bool { return strings.Contains(log.String(), "boom") }, testWait, time.Millisecond)
		assert.Contains(t, log.String(), `msg="pool: a creation whose lease gave up failed" pool.name=edpool err="pool \"edpool\": create item: boom"`)
	})
	t.Run("Clear", func(t *testing.T) {
		var log edLog
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(),
			MinSize: 2, Destroy: failingDestroy(tr)})
		require.NoError(t, err)
		tr.setFail(errBoom)
		p.Clear()
		out := log.String()
		assert.Contains(t, out, `msg="pool: clear: destroy idle items"`)
		assert.Contains(t, out, `msg="pool: clear: refill to MinSize" pool.name=edpool err="pool \"edpool\": create item: boom"`)
		assert.EqualValues(t, 2, p.Stats().DestroyErrors)
		assert.NoError(t, p.Close())
	})
	t.Run("Close returns its errors instead", func(t *testing.T) {
		var log edLog
		tr := &tracker{}
		mp, reader := mtProvider(t)
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(),
			MinSize: 1, Destroy: failingDestroy(tr), MeterProvider: mp})
		require.NoError(t, err)
		assert.ErrorIs(t, p.Close(), errDestroy)
		assert.Empty(t, log.String(), "nothing logged: Close's caller has the error")
		assert.EqualValues(t, 1, p.Stats().DestroyErrors)
		points := mtCollect(t, reader).mtCounter(t, "pool.items.destroy_errors", "{error}")
		attrs := mtAttrs("edpool")
		assert.EqualValues(t, 1, points[attrs.Equivalent()], "the counter instrument")
	})
}

func TestErrorsSpeakTheUsersWords(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{Name: "words", MaxSize: 1, LeaseTimeout: time.Millisecond})
	held := mustLease(t, p)
	_, exhausted := p.TryLease(context.Background())
	_, timeout := p.Lease(context.Background())
	held.Release()
	require.NoError(t, p.Close())
	_, closed := p.Lease(context.Background())

	for _, err := range []error{exhausted, timeout, closed} {
		require.Error(t, err)
		msg := err.Error()
		assert.Contains(t, msg, `pool "words"`, "the error names the pool")
		for _, word := range []string{"permit", "slot", "park"} {
			assert.NotContains(t, msg, word, "%q speaks the implementation's words", msg)
		}
	}
	assert.ErrorIs(t, closed, ErrClosed)
	assert.Contains(t, timeout.Error(), "MaxSize 1")
	assert.Contains(t, exhausted.Error(), "MaxSize 1")
}

// blockingErrCtx is a Context whose Err, from its second call on, waits for
// a mutex: a Context's Err may take a lock (cancelCtx's does), and the
// gate calls it while holding its own.
type blockingErrCtx struct {
	context.Context
	calls atomic.Int32
	mu    *sync.Mutex
}

func (c *blockingErrCtx) Err() error {
	if c.calls.Add(1) > 1 {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	return c.Context.Err()
}

// TestLeaseWithAContextWhoseErrBlocks: the gate's critical sections run
// unpreemptible (see gate.go), and a goroutine in that state must not park,
// or the runtime throws. acquire calls the ctx's Err there, as the lease
// queues, so it must call it preemptible: here that Err parks for 20 ms
// while the gate's mutex is held, and the lease still waits and gets the
// item.
func TestLeaseWithAContextWhoseErrBlocks(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	first, err := p.Lease(context.Background())
	require.NoError(t, err)

	var mu sync.Mutex
	mu.Lock()
	ctx := &blockingErrCtx{Context: context.Background(), mu: &mu}
	got := leaseAsync(ctx, p)
	time.Sleep(20 * time.Millisecond) // the lease's Err call waits on mu, the gate's mutex held
	mu.Unlock()
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, 5*time.Second, time.Millisecond,
		"the lease queued after its ctx's Err returned")
	first.Release()
	o := awaitLease(t, got)
	require.NoError(t, o.err)
	o.l.Release()
	assert.GreaterOrEqual(t, ctx.calls.Load(), int32(2), "Err was called as the lease queued")
}
