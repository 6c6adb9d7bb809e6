package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Creation: New's seeding, a lease's creation and the context it gets, the
// factory's errors, panics and nil items, and the creations whose lease gave
// up (the package documentation's "Lifecycle of an item": Created).

func TestNewSeedsMinSizeItems(t *testing.T) {
	for _, minSize := range []int{0, 1, 3, 5} {
		t.Run(fmt.Sprintf("MinSize=%d", minSize), func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MinSize: minSize, MaxSize: 5})
			st := p.Stats()
			assert.Equal(t, int64(minSize), tr.created.Load())
			assert.Equal(t, int64(minSize), tr.live.Load())
			assert.Equal(t, uint64(minSize), st.Created)
			assert.Equal(t, minSize, st.ItemsAvailable)
			assert.Equal(t, minSize, st.ItemsAllocated)
			assert.Zero(t, st.ActiveLeases)
			assert.Zero(t, st.Destroyed)
		})
	}
}

func TestNewSeedsInParallel(t *testing.T) {
	const n = 16
	var inFlight, peak atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		k := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); k > p && !peak.CompareAndSwap(p, k); p = peak.Load() {
		}
		if k == n {
			once.Do(func() { close(all) })
		}
		select { // every creation waits until all n are under way
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(testWait):
			return nil, errors.New("the creations did not run at once")
		}
		time.Sleep(50 * time.Millisecond)
		return &conn{}, nil
	})
	start := time.Now()
	p, err := New(context.Background(), f, Options[*conn]{MinSize: n, MaxSize: n})
	require.NoError(t, err)
	t.Logf("MinSize %d with a 50 ms factory: New took %v", n, time.Since(start).Round(time.Millisecond))
	defer p.Close()
	assert.EqualValues(t, n, peak.Load(), "all MinSize creations ran at once")
	assert.Equal(t, n, p.Stats().ItemsAvailable)
}

// seedFactory wraps a tracker for seeding: its k-th call (from 1) fails
// with fail, or panics with panicVal when that is set. It remembers every
// conn it made, on whichever goroutine New's seeding called it.
type seedFactory struct {
	tr       *tracker
	k        int
	fail     error
	panicVal any

	mu    sync.Mutex // New seeds in parallel
	calls int
	conns []*conn
}

func (f *seedFactory) Create(ctx context.Context) (*conn, error) {
	f.mu.Lock()
	f.calls++
	call := f.calls
	f.mu.Unlock()
	if call == f.k {
		if f.panicVal != nil {
			panic(f.panicVal)
		}
		return nil, f.fail
	}
	c, err := f.tr.Create(ctx)
	if err == nil {
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
	}
	return c, err
}

var errSeed = errors.New("opt: seed dial refused")

func TestNewSeedFailureDestroysCreatedItems(t *testing.T) {
	for _, k := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("fails on call %d", k), func(t *testing.T) {
			tr := &tracker{}
			f := &seedFactory{tr: tr, k: k, fail: errSeed}
			p, err := New[*conn](context.Background(), f, Options[*conn]{MinSize: 4, MaxSize: 4, Destroy: tr.destroy})
			require.Error(t, err)
			assert.Nil(t, p)
			assert.ErrorIs(t, err, errSeed)
			assert.NotErrorIs(t, err, ErrInvalidOptions)
			// The creations run in parallel (TestNewSeedFailureCancelsTheRest
			// checks that a failure cancels the rest): every one may have run.
			assert.Zero(t, tr.live.Load(), "items created beside the failure leaked")
			for _, c := range f.conns {
				assert.True(t, c.closed.Load(), "conn %d not closed", c.id)
			}
		})
	}
}

func TestNewSeedFailureDestroysWithDefaultDisposal(t *testing.T) {
	tr := &tracker{}
	f := &seedFactory{tr: tr, k: 3, fail: errSeed}
	_, err := New[*conn](context.Background(), f, Options[*conn]{MinSize: 3}) // no Destroy: conn is an io.Closer
	require.ErrorIs(t, err, errSeed)
	require.Len(t, f.conns, 2)
	for _, c := range f.conns {
		assert.True(t, c.closed.Load(), "conn %d not closed", c.id)
	}
}

func TestNewSeedFailureJoinsDestroyErrors(t *testing.T) {
	errDestroy := errors.New("opt: close failed")
	tr := &tracker{}
	f := &seedFactory{tr: tr, k: 3, fail: errSeed}
	destroy := func(c *conn) error {
		_ = tr.destroy(c)
		return errDestroy
	}
	_, err := New[*conn](context.Background(), f, Options[*conn]{MinSize: 3, Destroy: destroy})
	assert.ErrorIs(t, err, errSeed)
	assert.ErrorIs(t, err, errDestroy)
	assert.Zero(t, tr.live.Load())
}

func TestNewSeedPanicDestroysCreatedItems(t *testing.T) {
	for _, k := range []int{1, 3} {
		t.Run(fmt.Sprintf("panics on call %d", k), func(t *testing.T) {
			tr := &tracker{}
			f := &seedFactory{tr: tr, k: k, panicVal: "opt: factory panic"}
			v, _ := catchPanic(func() {
				_, _ = New[*conn](context.Background(), f, Options[*conn]{MinSize: 3, Destroy: tr.destroy})
			})
			assert.Equal(t, "opt: factory panic", panicValue(v), "the panic reaches New's caller")
			assert.LessOrEqual(t, len(f.conns), 2, "the creations run in parallel: the others may have finished")
			assert.Zero(t, tr.live.Load(), "items created beside the panic leaked")
			for _, c := range f.conns {
				assert.True(t, c.closed.Load(), "conn %d not closed", c.id)
			}
		})
	}
}

func TestNewSeedFailureCancelsTheRest(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	tr := &tracker{}
	var calls atomic.Int64
	var canceled atomic.Int64
	f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		if calls.Add(1) == 9 {
			return nil, errSeed
		}
		c, err := tr.Create(context.Background())
		select {
		case <-ctx.Done(): // the 9th failed: give up, as a dial would
			_ = tr.destroy(c)
			canceled.Add(1)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
			return c, err
		}
	})
	_, err := New(context.Background(), f, Options[*conn]{MinSize: 16, MaxSize: 16, Destroy: tr.destroy})
	require.ErrorIs(t, err, errSeed, "New returns the first failure")
	assert.NotErrorIs(t, err, context.Canceled, "not the cancellations it caused")
	assert.Zero(t, tr.live.Load(), "every item made was destroyed")
	assert.Positive(t, canceled.Load(), "the failure canceled the creations under way")
	goleak.VerifyNone(t, ignore)
}

// factoryCtxKinds are the two ways Lease runs a factory: inline when ctx cannot
// end, on a goroutine of its own when it can.
var factoryCtxKinds = []struct {
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
	for _, kind := range factoryCtxKinds {
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
	for _, kind := range factoryCtxKinds {
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
				v, _ := catchPanic(func() { _, _ = p.Lease(kind.ctx(t)) })
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

type factoryCtxKey struct{}

func TestLifecycleFactoryContextKeepsValuesNotCancellation(t *testing.T) {
	t.Run("inline", func(t *testing.T) {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
		tr.ctxs = make(chan context.Context, 1)
		l, err := p.Lease(context.WithValue(context.Background(), factoryCtxKey{}, "v"))
		require.NoError(t, err)
		l.Release()
		fctx := recvOrFail(t, tr.ctxs, "the factory's ctx")
		assert.Equal(t, "v", fctx.Value(factoryCtxKey{}))
	})
	t.Run("abandoned", func(t *testing.T) {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
		tr.ctxs = make(chan context.Context, 1)
		block := make(chan struct{})
		setBlock(tr, block)

		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), factoryCtxKey{}, "v"))
		defer cancel()
		ch := leaseAsync(ctx, p)
		fctx := recvOrFail(t, tr.ctxs, "the factory's ctx")
		assert.Equal(t, "v", fctx.Value(factoryCtxKey{}), "the caller's values reach the factory")
		cancel()
		require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
		assert.NoError(t, fctx.Err(), "the caller's cancellation does not reach the factory")

		close(block)
		require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 1 }, testWait, time.Millisecond,
			"the creation finished despite the caller's cancellation")
	})
}

func TestLifecycleCloseCancelsFactoryContext(t *testing.T) {
	for _, kind := range factoryCtxKinds {
		t.Run(kind.name, func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
			tr.ctxs = make(chan context.Context, 1)
			setBlock(tr, make(chan struct{})) // never closed: only ctx ends Create

			ch := leaseAsync(kind.ctx(t), p)
			fctx := recvOrFail(t, tr.ctxs, "the factory's ctx")
			require.NoError(t, fctx.Err())
			require.NoError(t, p.Close())
			recvOrFail(t, fctx.Done(), "Close to cancel the factory's ctx")

			o := awaitLease(t, ch)
			assert.ErrorIs(t, o.err, ErrClosed)
			require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond)
			assert.Zero(t, tr.live.Load())
		})
	}
}

// lateCancelCtx is a ctx that nothing cancels (Done is nil, so the creation
// runs inline) but whose Err turns to context.Canceled once cancel is
// called: a caller's ctx that ends while its creation is in flight.
type lateCancelCtx struct {
	context.Context
	canceled atomic.Bool
}

func (c *lateCancelCtx) Err() error {
	if c.canceled.Load() {
		return context.Canceled
	}
	return nil
}

// A creation that Close cancels fails with ErrClosed, counted as closed,
// even when the factory wraps its ctx's error (as net.Dialer does) and the
// caller's ctx has ended too: Close ended it, not the caller, so the error
// does not match context.Canceled either.
func TestLifecycleCloseWinsOverCallersCancelForCreation(t *testing.T) {
	ctx := &lateCancelCtx{Context: context.Background()}
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
	recvOrFail(t, entered, "Create")
	require.NoError(t, p.Close())

	err = awaitLease(t, ch).err
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorContains(t, err, "dial: context canceled", "the factory's own error stays wrapped")
	assert.NotErrorIs(t, err, context.Canceled, "Close's cancellation is the pool's, not the caller's")
	s := p.Stats()
	assert.Zero(t, s.Canceled, "Close ended the lease, not the caller")
	assert.Zero(t, s.ActiveLeases)
}

func TestLifecycleCreateTimeoutBoundsFactory(t *testing.T) {
	t.Run("caller waits", func(t *testing.T) {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1, CreateTimeout: 20 * time.Millisecond})
		tr.ctxs = make(chan context.Context, 1)
		setBlock(tr, make(chan struct{})) // never closed: only ctx ends Create

		err := awaitLease(t, leaseAsync(context.Background(), p)).err
		require.Error(t, err)
		assert.ErrorContains(t, err, "context deadline exceeded", "the factory's error, wrapped")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "CreateTimeout is not the caller's deadline (doc.go, \"Waiting and errors\")")
		fctx := recvOrFail(t, tr.ctxs, "the factory's ctx")
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
		setBlock(tr, make(chan struct{}))

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := leaseAsync(ctx, p)
		fctx := recvOrFail(t, tr.ctxs, "the factory's ctx")
		cancel()
		require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
		recvOrFail(t, fctx.Done(), "CreateTimeout to end the abandoned creation")
		assert.ErrorIs(t, fctx.Err(), context.DeadlineExceeded)
		require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond,
			"the failed background creation frees its permit")
		assert.Zero(t, p.Stats().ItemsAvailable)
		assertAtRest(t, p)
	})
}

// abandonCreation starts a Lease whose creation blocks, cancels it once the
// factory runs, and checks that Lease returned the ctx error while the
// factory still blocks. The caller closes block to let the factory finish.
func abandonCreation(t *testing.T, p *Pool[*conn], tr *tracker) (block chan struct{}) {
	t.Helper()
	block = make(chan struct{})
	setBlock(tr, block)
	tr.ctxs = make(chan context.Context, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := leaseAsync(ctx, p)
	recvOrFail(t, tr.ctxs, "Create")
	cancel()
	o := awaitLease(t, ch)
	require.ErrorIs(t, o.err, context.Canceled, "Lease returns without waiting for the factory")
	assert.Equal(t, uint64(1), p.Stats().Canceled)
	return block
}

func TestLifecycleAbandonedCreationGoesIdle(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	block := abandonCreation(t, p, tr)
	assert.Equal(t, 1, p.Stats().ActiveLeases, "the creation holds its permit")

	close(block)
	require.Eventually(t, func() bool {
		s := p.Stats()
		return s.ItemsAvailable == 1 && s.ActiveLeases == 0
	}, testWait, time.Millisecond, "the finished item goes idle")

	l := mustLease(t, p)
	assert.Equal(t, 1, l.Value().id)
	assert.Equal(t, int64(1), tr.created.Load(), "no second Create")
	l.Release()
	assertAtRest(t, p)
}

func TestLifecycleAbandonedCreationFailureFreesPermit(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	tr.setFail(errBoom) // read by Create before it blocks
	block := abandonCreation(t, p, tr)

	close(block)
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond)
	s := p.Stats()
	assert.Zero(t, s.ItemsAvailable)
	assert.Zero(t, s.Created)

	tr.setFail(nil)
	l, err := p.TryLease(context.Background())
	require.NoError(t, err)
	l.Release()
	assertAtRest(t, p)
}

// panickyFactory is a factory that announces each Create, waits for proceed and
// then panics, as a buggy dial might.
type panickyFactory struct {
	started chan struct{}
	proceed chan struct{}
	done    chan struct{} // closed when the panic has been raised
}

func (f *panickyFactory) Create(context.Context) (*conn, error) {
	f.started <- struct{}{}
	<-f.proceed
	defer close(f.done)
	panic("lc: factory panic nobody waits for")
}

func TestLifecycleAbandonedCreationPanicFreesPermit(t *testing.T) {
	f := &panickyFactory{started: make(chan struct{}, 1), proceed: make(chan struct{}), done: make(chan struct{})}
	p, err := New[*conn](context.Background(), f, Options[*conn]{MaxSize: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	ch := leaseAsync(ctx, p)
	recvOrFail(t, f.started, "Create")
	cancel()
	require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)

	close(f.proceed) // the panic happens on the pool's goroutine: it must not crash the process
	recvOrFail(t, f.done, "the panic")
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond,
		"the permit came back")
	s := p.Stats()
	assert.Zero(t, s.Created, "a panicking creation counts as failed")
	assert.Zero(t, s.ItemsAvailable)
}

// A Close called from inside a lease's factory call returns: it cannot wait
// for the creation it is part of, and waits for the others (Pool.Close).
func TestLifecycleCloseFromALeasesFactoryReturns(t *testing.T) {
	for _, how := range []string{"ctx that cannot end", "ctx that can end"} {
		t.Run(how, func(t *testing.T) {
			var p *Pool[*conn]
			closed := make(chan error, 1)
			tr := &tracker{}
			f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
				closed <- p.Close()
				return tr.Create(ctx)
			})
			var err error
			p, err = New[*conn](context.Background(), f, Options[*conn]{MaxSize: 2, Destroy: tr.destroy})
			require.NoError(t, err)
			ctx := context.Background()
			if how == "ctx that can end" {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			}
			ch := leaseAsync(ctx, p)
			require.NoError(t, recvOrFail(t, closed, "Close from inside the factory"))
			if o := awaitLease(t, ch); o.err == nil {
				o.l.Release() // a lease under way may still succeed; destroyed on release
			}
			awaitDestroys(t, p)
			assert.Zero(t, tr.live.Load())
		})
	}
}

func TestLifecycleWaiterGetsAbandonedCreationsItem(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	block := make(chan struct{})
	setBlock(tr, block)
	tr.ctxs = make(chan context.Context, 2)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := leaseAsync(ctx, p)
	recvOrFail(t, tr.ctxs, "Create")
	waiter := leaseAsync(context.Background(), p)
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, testWait, time.Millisecond)
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

// With SeedInBackground, New returns at once with the backend down, and the
// floor appears once the backend is up (doc.go, "Lifecycle of an item"):
// here a real TCP listener that starts late. Every failed dial is logged
// and counted.
func TestSeedInBackgroundWaitsForALateBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // the backend is down

	dial := FactoryFunc[net.Conn](func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})
	var log logBuffer
	start := time.Now()
	p, err := New[net.Conn](context.Background(), dial, Options[net.Conn]{MinSize: 3, MaxSize: 4,
		SeedInBackground: true, UpkeepInterval: 100 * time.Millisecond, Logger: log.logger()})
	require.NoError(t, err, "New does not wait for the backend")
	defer p.Close()
	assert.Less(t, time.Since(start), time.Second)
	require.Eventually(t, func() bool { return p.Stats().CreateErrors >= 2 }, testWait, time.Millisecond,
		"the seeding retried")

	ln, err = net.Listen("tcp", addr) // the backend comes up
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 3 }, testWait, time.Millisecond,
		"the floor of MinSize items appeared")
	assert.Contains(t, log.String(), "seed: create item")
	assert.Contains(t, log.String(), "connection refused")
}

// Close while the background seeding dials leaves no goroutine (goleak)
// and no item.
func TestSeedInBackgroundStopsAtClose(t *testing.T) {
	tr := &tracker{block: make(chan struct{})} // dials hang until their ctx ends
	p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 4, MaxSize: 4, SeedInBackground: true, Destroy: tr.destroy})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return tr.live.Load() == 4 }, testWait, time.Millisecond, "the seeding dials")
	require.NoError(t, p.Close())
	assert.Zero(t, tr.live.Load(), "no item left")
	assert.Zero(t, p.Stats().ItemsAllocated)
}

// TestMinIdleKeepsSpares: with MinIdle, a busy pool keeps that many items
// idle, created in the background, never past MaxSize (Options.MinIdle).
func TestMinIdleKeepsSpares(t *testing.T) {
	for _, tc := range []struct {
		name             string
		maxSize, leased  int
		wantIdle, wantIn int
	}{
		{"room for the spares", 10, 5, 2, 7},
		{"MaxSize caps them", 4, 3, 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, tr := newTracked(t, Options[*conn]{MinIdle: 2, MaxSize: tc.maxSize})
			ls := make([]Lease[*conn], tc.leased)
			for i := range ls {
				ls[i] = mustLease(t, p)
				checkInvariants(t, p, tr.live.Load)
			}
			require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == tc.wantIdle }, testWait, time.Millisecond,
				"spares: %+v", p.Stats())
			awaitSpares(t, p)
			s := p.Stats()
			assert.Equal(t, tc.wantIdle, s.ItemsAvailable)
			assert.Equal(t, tc.wantIn, s.ItemsAllocated)
			assert.LessOrEqual(t, tr.peak.Load(), int64(tc.maxSize))
			for _, l := range ls {
				l.Release()
			}
		})
	}
}

// TestMinIdleAtNew: New starts the spares after its MinSize items.
func TestMinIdleAtNew(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MinSize: 1, MinIdle: 3, MaxSize: 10})
	require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 3 }, testWait, time.Millisecond)
	awaitSpares(t, p)
	assert.Equal(t, 3, p.Stats().ItemsAllocated, "MinIdle idle items, no more")
}

// TestMinIdleRetriesFailuresAndStopsAtClose: a failed creation of a spare
// is logged, counted in Stats.CreateErrors and retried, backing off, until
// the factory works again; Close stops the spares.
func TestMinIdleRetriesFailuresAndStopsAtClose(t *testing.T) {
	log := &logBuffer{}
	tr := &tracker{}
	tr.setFail(errBoom)
	p, err := New[*conn](context.Background(), tr, Options[*conn]{MinIdle: 2, MaxSize: 4, Destroy: tr.destroy,
		UpkeepInterval: 40 * time.Millisecond, Logger: log.logger()})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Stats().CreateErrors >= 3 }, testWait, time.Millisecond, "the spares retry")
	assert.Contains(t, log.String(), `msg="pool: spares: create item"`)
	tr.setFail(nil)
	require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 2 }, testWait, time.Millisecond, "the spares, once the factory works")

	setBlock(tr, make(chan struct{})) // from now on every creation hangs until its ctx ends
	l := mustLease(t, p)              // asks for a spare: its creation hangs
	require.Eventually(t, func() bool { return tr.live.Load() == 3 }, testWait, time.Millisecond)
	l.Release()
	require.NoError(t, p.Close())
	assert.Zero(t, tr.live.Load(), "Close ended the spare's creation")
	created := tr.created.Load()
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, created, tr.created.Load(), "no spare after Close")
}

// dgDrop makes a pool with opts and drops it without Close, after do has
// run on it; it returns a weak pointer to the pool.
//
//go:noinline
func dgDrop(t *testing.T, f Factory[*conn], opts Options[*conn], do func(*Pool[*conn])) weak.Pointer[Pool[*conn]] {
	p, err := New[*conn](context.Background(), f, opts)
	require.NoError(t, err)
	if do != nil {
		do(p)
	}
	return weak.Make(p)
}

// TestDroppedPoolStopsBackground: a pool dropped without Close is
// collected, and then every goroutine of its background work (the spares
// of MinIdle, the seeding of SeedInBackground while it backs off, Clear's
// refill, the scans of LeakThreshold, the upkeep) returns (doc.go,
// "Upkeep").
func TestDroppedPoolStopsBackground(t *testing.T) {
	failing := func() Factory[*conn] {
		tr := &tracker{}
		tr.setFail(errBoom)
		return tr
	}
	for _, tc := range []struct {
		name string
		f    func() Factory[*conn]
		opts Options[*conn]
		do   func(*Pool[*conn])
	}{
		{"MinIdle", func() Factory[*conn] { return &tracker{} }, Options[*conn]{MinIdle: 2, MaxSize: 4}, func(p *Pool[*conn]) {
			require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 2 }, testWait, time.Millisecond)
		}},
		{"MinIdle backing off", failing, Options[*conn]{MinIdle: 2, MaxSize: 4}, func(p *Pool[*conn]) {
			require.Eventually(t, func() bool { return p.Stats().CreateErrors >= 1 }, testWait, time.Millisecond)
		}},
		{"SeedInBackground backing off", failing, Options[*conn]{MinSize: 2, MaxSize: 4, SeedInBackground: true}, func(p *Pool[*conn]) {
			require.Eventually(t, func() bool { return p.Stats().CreateErrors >= 2 }, testWait, time.Millisecond)
		}},
		{"Clear's refill", func() Factory[*conn] { return &tracker{} }, Options[*conn]{MinSize: 2, MaxSize: 4}, func(p *Pool[*conn]) {
			p.Clear()
		}},
		{"LeakThreshold", func() Factory[*conn] { return &tracker{} }, Options[*conn]{MaxSize: 4, LeakThreshold: time.Millisecond}, nil},
		{"UpkeepInterval", func() Factory[*conn] { return &tracker{} }, Options[*conn]{MinSize: 1, MaxSize: 4, UpkeepInterval: time.Millisecond}, nil},
		{"every background option", func() Factory[*conn] { return &tracker{} }, kpEveryOption(), func(p *Pool[*conn]) {
			require.Eventually(t, func() bool { return p.Stats().ItemsAvailable >= 2 }, testWait, time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			opts := tc.opts
			opts.Logger = slog.New(slog.DiscardHandler)
			wp := dgDrop(t, tc.f(), opts, tc.do)
			lkEventually(t, func() bool { return wp.Value() == nil }, "the pool dropped without Close was not collected")
			deadline := time.Now().Add(testWait)
			for goleak.Find(ignore) != nil && time.Now().Before(deadline) {
				runtime.GC()
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}

// awaitSpares waits until the spares of MinIdle are no longer being
// created: no factory call is under way.
func awaitSpares(t *testing.T, p *Pool[*conn]) {
	t.Helper()
	require.Eventually(t, func() bool { return creatingNow(p) == 0 }, testWait, time.Millisecond, "the spares' creations to end")
}

// ncLeaseKey is the ctx key under which the leases of
// TestNoFactoryCallStartsAfterClose say when their Lease call began: the
// factory's ctx keeps the caller's values.
type ncLeaseKey struct{}

// ncCall is one factory call of TestNoFactoryCallStartsAfterClose: when it
// began, and who made it: a lease, with the time its Lease call began, or
// the pool on its own account.
type ncCall struct {
	at, leased time.Time
	who        string // lease, seed, spares or refill
}

// ncFactory records every call it gets. A call takes a little while,
// unless its ctx ends first, and one in eight fails, so that Close meets
// the creations in the background backing off too.
type ncFactory struct {
	tr    tracker
	n     atomic.Int64
	mu    sync.Mutex
	calls []ncCall
}

func (f *ncFactory) Create(ctx context.Context) (*conn, error) {
	c := ncCall{at: time.Now(), who: ncWho()}
	if at, ok := ctx.Value(ncLeaseKey{}).(time.Time); ok {
		c.who, c.leased = "lease", at
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	if f.n.Add(1)%8 == 0 {
		return nil, errBoom
	}
	t := time.NewTimer(100 * time.Microsecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	return f.tr.Create(ctx)
}

func (f *ncFactory) recorded() []ncCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// ncWho names the work of the pool's own that calls the factory on this
// goroutine, from its stack; "lease" when it is none of them (a lease's
// ctx says so besides).
func ncWho() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		fr, more := frames.Next()
		for _, w := range [...]struct{ fn, who string }{
			{"maker[...]).seedAll", "seed"}, {"keeper[...]).spares", "spares"}, {"keeper[...]).refillRound", "refill"},
		} {
			if strings.Contains(fr.Function, w.fn) {
				return w.who
			}
		}
		if !more {
			return "lease"
		}
	}
}

// TestNoFactoryCallStartsAfterClose closes a pool while every kind of
// creation runs: leases creating their items (on the caller's goroutine,
// and on one of their own, some abandoned), the seeding of
// SeedInBackground, the spares of MinIdle and Clear's refills. Close
// refuses new leases, cancels the pool's own work and waits for it (the
// doc comments of Close and Options.MinIdle; "Lifecycle of an item": the
// seeding and Clear's refill run until Close), so no factory call starts
// after Close has returned, but that of a lease already under way (which
// Close does not wait for: "A lease already under way may still
// succeed"), whose Lease call began before Close returned. Many rounds,
// each with a fresh pool, so that Close meets each kind at every stage.
func TestNoFactoryCallStartsAfterClose(t *testing.T) {
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	kinds := map[string]int{}
	underWay := 0 // factory calls of leases under way that started after Close returned
	for round := range rounds {
		f := &ncFactory{}
		p, err := New[*conn](context.Background(), f, Options[*conn]{
			MinSize:          5,
			MaxSize:          6,
			MinIdle:          1,
			SeedInBackground: true,
			Destroy:          f.tr.destroy,
		})
		require.NoError(t, err)

		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					ctx, cancel := context.WithValue(context.Background(), ncLeaseKey{}, time.Now()), context.CancelFunc(func() {})
					if g%2 == 1 { // a ctx that can end: the factory runs on a goroutine of its own
						ctx, cancel = context.WithTimeout(ctx, time.Millisecond)
					}
					l, err := p.Lease(ctx)
					cancel()
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						continue // the factory failed, or the ctx ended
					}
					if i%2 == 0 {
						l.Discard() // the next lease creates
					} else {
						l.Release()
					}
				}
			})
		}
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Microsecond):
					p.Clear()
				}
			}
		})
		time.Sleep(5 * time.Millisecond) // the load runs a while before Close meets it
		require.NoError(t, p.Close())
		closed := time.Now()
		close(stop)
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		require.NoError(t, p.Shutdown(ctx), "round %d: every lease and creation ends", round)
		cancel()
		awaitDestroys(t, p)

		for _, c := range f.recorded() {
			kinds[c.who]++
			if !c.at.After(closed) {
				continue
			}
			if c.who != "lease" {
				t.Errorf("round %d: a factory call of the %s started %v after Close returned", round, c.who, c.at.Sub(closed))
				continue
			}
			underWay++
			assert.True(t, c.leased.Before(closed), "round %d: a Lease called %v after Close returned called the factory", round, c.leased.Sub(closed))
		}
		assert.Zero(t, f.tr.live.Load(), "round %d: every item made was destroyed", round)
	}
	t.Logf("%d rounds: factory calls %v; %d of leases under way started after Close returned", rounds, kinds, underWay)
	for _, who := range []string{"lease", "seed", "spares", "refill"} {
		assert.NotZero(t, kinds[who], "no factory call of the %s ran: Close never met it", who)
	}
}

// ncCloseInErr is a caller's ctx whose Err closes the pool at its second
// call: by then the lease holds its room and is on its way to create, so
// its factory call comes after Close has returned. Done is nil, so the
// factory runs on the caller's goroutine.
type ncCloseInErr struct {
	context.Context
	calls atomic.Int32
	close func()
}

func (c *ncCloseInErr) Err() error {
	if c.calls.Add(1) == 2 {
		c.close()
	}
	return nil
}

// TestCloseEndsTheCreationOfALeaseUnderWay: a lease that holds its room
// when Close comes, and reaches the factory only once Close has returned,
// makes no factory call, or one whose ctx has ended already: a lease's
// creation gets a context "canceled by Pool.Close" ("Lifecycle of an
// item": Created), and Close cancels "the creations in flight" (the doc
// comment of Close). Else a factory that heeds its ctx, as a dialer does,
// dials for a pool that has closed.
func TestCloseEndsTheCreationOfALeaseUnderWay(t *testing.T) {
	for round := range 20 {
		var live atomic.Int32
		tr := &tracker{}
		f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
			if ctx.Err() == nil {
				live.Add(1)
			}
			return tr.Create(ctx)
		})
		p, err := New[*conn](context.Background(), f, Options[*conn]{MaxSize: 1, Destroy: tr.destroy})
		require.NoError(t, err)
		closed := false
		ctx := &ncCloseInErr{Context: context.Background(), close: func() {
			require.NoError(t, p.Close())
			closed = true
		}}
		l, err := p.Lease(ctx)
		require.True(t, closed, "round %d: Close ran inside the lease, before its creation", round)
		ended := assert.Zero(t, live.Load(), "round %d: a factory call that began after Close returned had a live ctx", round)
		if err == nil {
			l.Release() // destroyed: the pool has closed
		}
		awaitDestroys(t, p)
		assert.Zero(t, tr.live.Load(), "round %d", round)
		if !ended {
			return // once is enough to tell
		}
	}
}

// TestMinIdleSurvivesAGoexitInTheFactory: a runtime.Goexit in a spare's
// creation counts as a failed creation, and the spares are retried, backing
// off, as for any failure (Options.MinIdle).
func TestMinIdleSurvivesAGoexitInTheFactory(t *testing.T) {
	var goexits atomic.Int32
	tr := &tracker{}
	f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		if goexits.Add(1) <= 2 {
			runtime.Goexit()
		}
		return tr.Create(ctx)
	})
	p, err := New[*conn](context.Background(), f, Options[*conn]{MinIdle: 2, MaxSize: 4, Destroy: tr.destroy,
		UpkeepInterval: 40 * time.Millisecond})
	require.NoError(t, err)
	defer func() { assert.NoError(t, p.Close()) }()
	require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 2 }, testWait, time.Millisecond,
		"the spares, created after the factory's Goexits")
	assert.GreaterOrEqual(t, p.Stats().CreateErrors, uint64(2), "each Goexit counts as a failed creation")
}

// TestMinIdleEndsWhenThePoolIsCollected: a pool with MinIdle dropped
// without Close stops its background work once it is collected (Pool.Close).
func TestMinIdleEndsWhenThePoolIsCollected(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	collected := make(chan struct{})
	func() {
		p, err := New[*conn](context.Background(), &tracker{}, Options[*conn]{MinIdle: 1, MaxSize: 2})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 1 }, testWait, time.Millisecond)
		runtime.AddCleanup(p, func(ch chan struct{}) { close(ch) }, collected)
	}()
	require.Eventually(t, func() bool {
		runtime.GC()
		select {
		case <-collected:
			return true
		default:
			return false
		}
	}, testWait, 10*time.Millisecond, "the pool dropped without Close was not collected")
}
