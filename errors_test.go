package pool

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Errors, and user code that misbehaves: messages speak the user's words, a
// panic raised again carries the stack where it happened, runtime.Goexit in
// a callback loses nothing, and errors with no caller are logged and
// counted (the package documentation's "Waiting and errors").

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

// panickingFactory and panickingDestroy are the user code whose frames
// a panic raised again by the pool must show.
//
//go:noinline
func panickingFactory(context.Context) (*conn, error) {
	panic(errBoom)
}

//go:noinline
func panickingDestroy(*conn) error {
	panic("ed: Destroy panic")
}

func TestPanicRaisedAgainCarriesUserStack(t *testing.T) {
	t.Run("factory, on the creation goroutine", func(t *testing.T) {
		p, err := New(context.Background(), FactoryFunc[*conn](panickingFactory), Options[*conn]{})
		require.NoError(t, err)
		defer p.Close()
		ctx, cancel := context.WithCancel(context.Background()) // a ctx that can end: the factory runs on its own goroutine
		defer cancel()
		v, _ := catchPanic(func() { _, _ = p.Lease(ctx) })
		err, ok := v.(error)
		require.True(t, ok, "the panic value is an error: %T", v)
		assert.ErrorIs(t, err, errBoom, "it unwraps to the factory's own panic value")
		assert.Contains(t, err.Error(), "panickingFactory", "the message shows the factory's frame")
		assert.Zero(t, p.Stats().ActiveLeases, "the item slot went back")
	})
	t.Run("Destroy, in Close's batch", func(t *testing.T) {
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 2, MaxSize: 2, Destroy: panickingDestroy})
		require.NoError(t, err)
		err = p.Close() // Destroy runs on the pool's goroutines: Close returns its panic as an error
		require.Error(t, err)
		assert.Contains(t, err.Error(), "ed: Destroy panic")
		assert.Contains(t, err.Error(), "panickingDestroy", "the message shows Destroy's frame")
		s := p.Stats()
		assert.EqualValues(t, 2, s.Destroyed, "both items counted destroyed")
		assert.EqualValues(t, 2, s.DestroyErrors)
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
			onOwnGoroutine(t, func() {
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
				onOwnGoroutine(t, func() { _, _ = catchPanic(func() { _, _ = p.Lease(cancelable) }) })
			},
		},
		"IsReady": {
			opts: func(tr *tracker, goexit func()) Options[*conn] {
				return Options[*conn]{Preparer: &testPreparer{isReady: func(context.Context, *conn) (bool, error) { goexit(); return true, nil }}}
			},
			run: lease(context.Background()),
		},
		"Prepare": {
			opts: func(tr *tracker, goexit func()) Options[*conn] {
				return Options[*conn]{Preparer: &testPreparer{
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
				onOwnGoroutine(t, func() {
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
			awaitDestroys(t, p) // a Destroy runs on the pool's goroutine
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

func TestErrorsWithNoCallerAreLoggedAndCounted(t *testing.T) {
	errDestroy := errors.New("destroy failed")
	errReset := errors.New("reset failed")
	failingDestroy := func(tr *tracker) func(*conn) error {
		return func(c *conn) error { _ = tr.destroy(c); return errDestroy }
	}

	t.Run("Destroy on Discard", func(t *testing.T) {
		var log logBuffer
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(), Destroy: failingDestroy(tr)})
		require.NoError(t, err)
		defer p.Close()
		mustLease(t, p).Discard()
		awaitDestroys(t, p)
		assert.Contains(t, log.String(), `level=WARN msg="pool: destroy item" pool.name=edpool err="destroy item: destroy failed"`)
		assert.EqualValues(t, 1, p.Stats().DestroyErrors)
	})
	t.Run("Reset and then Destroy on Release", func(t *testing.T) {
		var log logBuffer
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(),
			Destroy: failingDestroy(tr), Reset: func(*conn) error { return errReset }})
		require.NoError(t, err)
		defer p.Close()
		mustLease(t, p).Release()
		awaitDestroys(t, p)
		out := log.String()
		assert.Contains(t, out, `msg="pool: reset item; destroying it" pool.name=edpool err="reset item: reset failed"`)
		assert.Contains(t, out, `msg="pool: destroy item"`)
		assert.EqualValues(t, 1, p.Stats().DestroyErrors)
	})
	t.Run("Destroy on expiry at release", func(t *testing.T) {
		var log logBuffer
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(),
			Destroy: failingDestroy(tr), MaxLifetime: time.Minute})
		require.NoError(t, err)
		defer p.Close()
		clk := setFakeClock(p)
		l := mustLease(t, p)
		clk.advance(minutes(2))
		l.Release()
		awaitDestroys(t, p)
		assert.Contains(t, log.String(), `msg="pool: destroy item"`)
		assert.EqualValues(t, 1, p.Stats().LifetimeExpired)
	})
	t.Run("a creation whose lease gave up", func(t *testing.T) {
		var log logBuffer
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger()})
		require.NoError(t, err)
		defer p.Close()
		block := make(chan struct{})
		setBlock(tr, block)
		tr.setFail(errBoom)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		_, err = p.Lease(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		close(block) // the abandoned creation fails now, with nobody to tell
		require.Eventually(t, func() bool { return strings.Contains(log.String(), "boom") }, testWait, time.Millisecond)
		assert.Contains(t, log.String(), `msg="pool: a creation whose lease gave up failed" pool.name=edpool err="create item: boom"`)
	})
	t.Run("Clear", func(t *testing.T) {
		var log logBuffer
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(),
			MinSize: 2, Destroy: failingDestroy(tr)})
		require.NoError(t, err)
		tr.setFail(errBoom)
		p.Clear()
		awaitBackground(t, p)
		awaitDestroys(t, p)
		out := log.String()
		assert.Contains(t, out, `msg="pool: destroy item" pool.name=edpool err="destroy item: destroy failed"`)
		assert.Contains(t, out, `msg="pool: clear: refill: create item" pool.name=edpool err="create item: boom"`)
		assert.EqualValues(t, 2, p.Stats().DestroyErrors)
		assert.NoError(t, p.Close())
	})
	t.Run("Close returns its errors too", func(t *testing.T) {
		var log logBuffer
		tr := &tracker{}
		mp, reader := mtProvider(t)
		p, err := New[*conn](context.Background(), tr, Options[*conn]{Name: "edpool", Logger: log.logger(),
			MinSize: 1, Destroy: failingDestroy(tr), MeterProvider: mp})
		require.NoError(t, err)
		assert.ErrorIs(t, p.Close(), errDestroy)
		assert.Contains(t, log.String(), `msg="pool: destroy item" pool.name=edpool err="destroy item: destroy failed"`,
			"logged as every failed Destroy is, and returned")
		assert.EqualValues(t, 1, p.Stats().DestroyErrors)
		points := mtCollect(t, reader).mtCounter(t, "pool.items.destroy_errors", "{error}")
		attrs := mtAttrs("edpool")
		assert.EqualValues(t, 1, points[attrs.Equivalent()], "the counter instrument")
	})
}

// A Logger whose handler panics on the pool's own goroutines (the upkeep,
// a creation its caller gave up on) never crashes the program (doc.go,
// "Errors"), and the work goes on: the upkeep keeps retrying, the abandoned
// creation's room comes back.
func TestLoggerPanicOnThePoolsGoroutinesIsDropped(t *testing.T) {
	t.Run("upkeep", func(t *testing.T) {
		h := &panicHandler{}
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 1, MaxSize: 2,
			UpkeepInterval: time.Millisecond, Logger: slog.New(h), Destroy: tr.destroy})
		require.NoError(t, err)
		defer p.Close()
		tr.setFail(errBoom)
		mustLease(t, p).Discard() // the upkeep's creations fail, and their log records panic
		require.Eventually(t, func() bool { return h.calls.Load() >= 3 }, testWait, time.Millisecond,
			"the upkeep went on logging failed creations")
		tr.setFail(nil)
		require.Eventually(t, func() bool { return p.Stats().ItemsAllocated == 1 }, testWait, time.Millisecond,
			"and refilled MinSize once the factory worked")
	})
	t.Run("abandoned creation", func(t *testing.T) {
		h := &panicHandler{}
		tr := &tracker{block: make(chan struct{}), fail: errBoom}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{MaxSize: 1, Logger: slog.New(h)})
		require.NoError(t, err)
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		_, err = p.Lease(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the caller gave up on the creation")
		close(tr.block) // the creation fails, with nobody to tell but the Logger
		require.Eventually(t, func() bool { return h.calls.Load() > 0 && p.Stats().ActiveLeases == 0 },
			testWait, time.Millisecond, "the failure was logged and its room came back")
	})
}

// TestLeaseTimeoutSaysWhatThePoolWasDoing: ErrLeaseTimeout's message names
// MaxSize, the time waited and what held the pool meanwhile: the leases
// waiting, the items being created and those being destroyed ("Waiting and
// errors"; "When leases time out"). The three rooms of a pool of three are
// a lease, a creation whose factory blocks and a Destroy that blocks; four
// leases queue, and the one that times out says what it saw.
func TestLeaseTimeoutSaysWhatThePoolWasDoing(t *testing.T) {
	const leaseTimeout = 20 * time.Millisecond
	tr := &tracker{}
	destroyGate := make(chan struct{})
	p, err := New[*conn](context.Background(), tr, Options[*conn]{
		Name:         "busy",
		MaxSize:      3,
		LeaseTimeout: leaseTimeout,
		Destroy: func(c *conn) error {
			if c.id == 2 {
				<-destroyGate
			}
			return tr.destroy(c)
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	// The lease that times out, and three others queued with it. Each
	// stops in the gate's wait hook, queued, its timer running: the three
	// others stay there, queued, until the test is done, so that none of
	// them can time out and leave the queue before the first has said what
	// it saw; that one goes on once all four are queued.
	var first atomic.Uint64 // its goroutine
	firstGo, othersGo := make(chan struct{}), make(chan struct{})
	letFirstGo := sync.OnceFunc(func() { close(firstGo) })
	testHooks.beforeWait = func() {
		if goroutineID() == first.Load() {
			<-firstGo
		} else {
			<-othersGo
		}
	}
	creationGate := make(chan struct{})
	var held Lease[*conn]
	var wg sync.WaitGroup
	done := sync.OnceFunc(func() { // ends every wait and hold of the test, also after a failure
		letFirstGo()
		close(othersGo)
		close(creationGate)
		close(destroyGate)
		held.Release()
		wg.Wait()
		testHooks.beforeWait = nil
	})
	t.Cleanup(done)

	held = mustLease(t, p)
	mustLease(t, p).Discard() // item 2: its Destroy blocks
	setBlock(tr, creationGate)
	wg.Go(func() { // item 3: its factory blocks
		if l, err := p.Lease(context.Background()); err == nil {
			l.Release()
		}
	})
	require.Eventually(t, func() bool { return creatingNow(p) == 1 }, testWait, time.Millisecond)
	s := p.Stats()
	require.Equal(t, 3, s.ActiveLeases, "%+v", s)
	require.Equal(t, 1, s.Destroying, "%+v", s)

	timedOut := make(chan error, 1)
	wg.Go(func() {
		first.Store(goroutineID())
		_, err := p.Lease(context.Background())
		timedOut <- err
	})
	for range 3 {
		wg.Go(func() {
			if l, err := p.Lease(context.Background()); err == nil {
				l.Release()
			}
		})
	}
	waitQueued(t, p, 4)
	letFirstGo()
	err = recvOrFail(t, timedOut, "the lease to time out")

	require.ErrorIs(t, err, ErrLeaseTimeout)
	msg := err.Error()
	assert.Contains(t, msg, `pool "busy"`)
	assert.Contains(t, msg, "every item stayed in use (MaxSize 3) for ")
	m := regexp.MustCompile(`\(MaxSize 3\) for (\S+); ([34]) leases waiting, 1 items being created, 1 being destroyed$`).FindStringSubmatch(msg)
	if assert.NotNil(t, m, "the message says what the pool was doing, with 3 leases waiting (4 with the one that timed out): %q", msg) {
		waited, err := time.ParseDuration(m[1])
		if assert.NoError(t, err, "the time waited: %q", m[1]) {
			assert.GreaterOrEqual(t, waited, leaseTimeout, "it waited LeaseTimeout at least")
		}
	}

	done()
	awaitDestroys(t, p)
	assertAtRest(t, p)
}
