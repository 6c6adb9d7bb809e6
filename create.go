package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// The maker: the factory calls, CreateTimeout, abandoned creations, New's
// seeding and FailFastAfter's health record.
//
// A creation holds a bare permit from before the factory call until its
// item is handed on or it fails and frees it; exactly one of caller and
// creating goroutine owns it at any instant (creation.claimed). Its turn to
// create (gate.creating), which Close waits for, ends with the factory
// call (or create, if it calls none), or, for a creation made for nobody
// (abandoned, the keeper's, New's), once its item is handed on. The
// factory's context keeps the caller's values, not its cancellation;
// CreateTimeout bounds it and Close cancels it, so its errors never match
// the caller's ctx (ownCtxErr); New's seeding keeps New's ctx (seedCall).
type maker[T any] struct {
	factory   Factory[T]
	name      string
	nillable  bool          // T has a nil value, which a factory must not return as an item
	timeout   time.Duration // CreateTimeout
	done      context.Context
	errClosed error
	clk       *clock
	health    health

	pool     *Pool[T] // the pool its entries name, which takes the items made for nobody
	g        *gate[T]
	ob       *observer[T]
	ds       *destroyer[T]
	ex       *expiry[T]
	askProbe func() // keeper.ask, for a probe
}

// seedParallelism bounds the seeding's creations at once (New's and
// SeedInBackground's), lest a large MinSize dial one server that many times.
const seedParallelism = 32

// seedAll runs up to seedParallelism workers (within MaxConcurrentCreates)
// on goroutines of spawn's, each calling create for every bare permit that
// tryAcquireFill grants it toward n items, until create reports false; it
// returns once every worker has.
func (m *maker[T]) seedAll(n int, spawn func(func()), create func() bool) {
	var wg sync.WaitGroup
	for range min(n, seedParallelism, m.g.creationsCap()) {
		wg.Add(1)
		spawn(func() {
			defer wg.Done()
			for m.g.tryAcquireFill(n, allItems) && create() {
			}
		})
	}
	wg.Wait()
}

// seed is New's seeding of n items: seedAll's creations under ctx, the first
// failure canceling the rest; then every item made is destroyed and the
// failure returned, or its panic (a Goexit's too) raised again.
func (m *maker[T]) seed(ctx context.Context, n int) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var first atomic.Pointer[creation[T]]
	m.seedAll(n, func(f func()) { go f() }, func() bool {
		c := &creation[T]{panicVal: errFactoryGoexit}
		defer m.finish(c, "") // no log: New returns the failure
		defer func() {
			if c.err != nil || c.panicVal != nil {
				first.CompareAndSwap(nil, c)
				cancel() // before finish frees the permit: no creation starts after
			}
		}()
		c.e, c.err = m.seedCall(ctx, sctx)
		c.panicVal = nil
		return c.err == nil
	})
	c := first.Load()
	if c == nil {
		return nil
	}
	es, _ := m.g.close() // New fails: nobody else has the pool
	derr, _ := m.ds.all(context.Background(), es, reasonClose)
	if c.panicVal != nil {
		panic(c.panicVal)
	}
	return errors.Join(c.err, derr)
}

// seedCall is one of New's creations, under sctx (canceled at the first
// failure) and CreateTimeout, none once sctx has ended; its errors match
// ctx's sentinels only once ctx has ended.
func (m *maker[T]) seedCall(ctx, sctx context.Context) (*entry[T], error) {
	if err := sctx.Err(); err != nil {
		return nil, err // another creation failed: don't start
	}
	sctx, cancel := m.withTimeout(sctx)
	defer cancel()
	e, err := m.newEntry(sctx)
	if err != nil && ctx.Err() == nil {
		err = ownCtxErr(err) // CreateTimeout's, or the first failure's cancel: not New's ctx
	}
	return e, err
}

// creation is one factory call: a lease's, which its caller may abandon, or
// one made for nobody (finish).
type creation[T any] struct {
	// claimed: by the caller giving up (abandoned) or by finish (the result
	// taken), whichever comes first; the winner owns the permit.
	claimed atomic.Bool
	done    chan struct{} // a lease's: closed once the result is taken

	// Written by the creating goroutine before it closes done.
	e        *entry[T]
	err      error
	panicVal any // a *panicError; errFactoryGoexit until the factory returns
}

// errFactoryGoexit is a waiting caller's panic when the factory called Goexit.
var errFactoryGoexit = errors.New("pool: the factory called runtime.Goexit")

// create makes an item for a caller holding a permit; if ctx can end, on a
// goroutine of its own, which keeps the permit when the caller gives up
// (abandonedIt). A factory panic reaches a caller still waiting.
func (m *maker[T]) create(ctx context.Context) (e *entry[T], abandonedIt bool, err error) {
	if err = ctx.Err(); err == nil && m.g.isDown() {
		err = m.backendDown()
	}
	if err != nil {
		m.g.createEnded()
		return nil, false, err // gave up already, or down: don't start a dial
	}
	if ctx.Done() == nil {
		defer m.g.createEnded() // nothing can abandon it
		e, err = m.createCall(ctx)
		return e, false, err
	}
	c := &creation[T]{done: make(chan struct{}), panicVal: errFactoryGoexit}
	go m.createAsync(ctx, c)
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.claimed.CompareAndSwap(false, true) { // abandoned: its permit is the creating goroutine's now
			return nil, true, ctx.Err()
		}
		<-c.done // finished at this instant: take the result
	}
	if c.panicVal != nil {
		panic(c.panicVal) // with the factory's stack
	}
	return c.e, false, c.err
}

// createAsync owns the permit once the caller abandons c. It finishes in a
// deferred call, so a factory panic or Goexit still reaches the waiting
// caller or frees the abandoned permit.
func (m *maker[T]) createAsync(ctx context.Context, c *creation[T]) {
	defer m.finish(c, "a creation whose lease gave up failed")
	c.e, c.err = m.createCall(ctx)
	c.panicVal = nil
}

// createIdle creates an item for the caller's bare permit and hands it on
// (finish); false on failure, panic or Goexit.
func (m *maker[T]) createIdle(who string) bool {
	c := &creation[T]{panicVal: errFactoryGoexit}
	defer m.finish(c, who+": create item")
	c.e, c.err = m.createCall(context.Background())
	c.panicVal = nil
	return c.err == nil
}

// finish, deferred by the creating goroutine, ends c, then its turn. It
// records a panic (a Goexit leaves panicVal as it was: recover returns nil
// for one). A caller still waiting takes the result; else c was made for
// nobody: its item is handed on, or its permit freed and its failure (a
// panic's as an error) logged as msg, but one that New returns (msg empty)
// and, in the background, one that Close caused or the down Warn said.
func (m *maker[T]) finish(c *creation[T], msg string) {
	if v := recover(); v != nil {
		c.panicVal = newPanicError(v)
	}
	if c.done != nil && c.claimed.CompareAndSwap(false, true) { // taken
		m.g.createEnded()
		close(c.done)
		return
	}
	defer m.g.createEnded()
	if c.panicVal != nil {
		c.err = fmt.Errorf("pool %q: create item: the factory panicked: %w", m.name, c.panicVal.(error))
	}
	if c.err == nil {
		m.pool.giveBackToGate(c.e)
		return
	}
	if msg != "" && (c.done != nil || !errors.Is(c.err, ErrClosed) && !m.g.isDown()) {
		m.ob.warn(msg, c.err)
	}
	m.g.free()
}

// createCall calls the factory in its own context (see maker).
func (m *maker[T]) createCall(ctx context.Context) (*entry[T], error) {
	cctx, cancel := m.withTimeout(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(m.done, cancel)
	defer stop()
	if m.done.Err() != nil {
		return nil, m.errClosed // no factory call starts once Close has begun
	}
	e, err := m.newEntry(cctx)
	if err == nil {
		m.succeeded()
		return e, nil
	}
	err = ownCtxErr(err)
	if m.done.Err() != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, err) // Close's cancellation: not the backend
	}
	m.failed(err)
	return nil, err
}

// withTimeout is ctx bounded by CreateTimeout, if set, with its cancel.
func (m *maker[T]) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if m.timeout > 0 {
		return context.WithTimeout(ctx, m.timeout)
	}
	return context.WithCancel(ctx)
}

// newEntry calls the factory and wraps its item, watched for leaks.
func (m *maker[T]) newEntry(ctx context.Context) (*entry[T], error) {
	era := m.g.era() // before the factory: a Clear meanwhile retires the item
	v, err := m.callFactory(ctx)
	if err != nil {
		return nil, fmt.Errorf("pool %q: create item: %w", m.name, err)
	}
	now := m.clk.now()
	e := &entry[T]{value: v, pool: m.pool, era: era, createdAt: now, deadline: m.ex.deadline(now), idleAt: now}
	m.ob.watch(ctx, e)
	return e, nil
}

// callFactory calls the factory, timing each call (pool.items.create_time)
// and counting failures, nil item, panic or Goexit too (Stats.CreateErrors).
func (m *maker[T]) callFactory(ctx context.Context) (v T, err error) {
	start := m.ob.stamp(m.ob.measuring())
	returned := false
	defer func() { m.ob.factoryCalled(ctx, start, !returned || err != nil) }()
	v, err = m.factory.Create(ctx)
	if err == nil && m.nillable && isNil(any(v)) {
		err = fmt.Errorf("the factory returned a nil %v and no error", reflect.TypeFor[T]())
	}
	returned = true
	return v, err
}

// fill creates idle items, one at a time, while tryAcquireFill grants
// permits; false on a failure or while down (only the probe creates then).
func (m *maker[T]) fill(count fillCount, n int, who string) bool {
	for m.g.tryAcquireFill(n, count) {
		if !m.createIdle(who) {
			return false
		}
	}
	return !m.g.isDown()
}

// # Fail fast while the backend is down
//
// With FailFastAfter, that many failed creations in a row (not New's own
// seeding, which fails New) put the pool down; the next success brings it
// up. The gate counts them (gate.failures), so whether the pool is down is
// derived, kept nowhere else. health is what ErrBackendDown, ErrLeaseTimeout
// and the logs read of the creations: the last failure stays for the errors
// to wrap.
type health struct {
	last   atomic.Pointer[failedCreation]
	downAt atomic.Int64 // monotime of the last failure while up: the one that put the pool down, once it is
}

type failedCreation struct {
	err error
	at  int64 // monotime
}

// failed records a failure; the one that puts the pool down logs, asks a probe.
func (m *maker[T]) failed(err error) {
	at := monotime()
	m.health.last.Store(&failedCreation{err: err, at: at})
	if !m.g.isDown() {
		m.health.downAt.Store(at)
	}
	if n, wentDown := m.g.createFailed(); wentDown {
		m.ob.log(slog.LevelWarn, fmt.Sprintf("backend down: %d creations in a row failed; leases that must create fail fast until a creation in the background succeeds", n), err)
		m.askProbe()
	}
}

// succeeded: the backend is up.
func (m *maker[T]) succeeded() {
	if m.g.createSucceeded() {
		down := time.Duration(monotime() - m.health.downAt.Load()).Round(time.Millisecond)
		m.ob.log(slog.LevelInfo, fmt.Sprintf("backend up after %v down: a creation succeeded; leases create items again", down), nil)
	}
}

// backendDown is a creating lease's error while down: ErrBackendDown,
// wrapping the last creation's error (recorded before the pool went down).
func (m *maker[T]) backendDown() error {
	return fmt.Errorf("%w: %w", ErrBackendDown, m.health.last.Load().err)
}

// failedSince is the last creation's error if it failed at or after since.
func (m *maker[T]) failedSince(since int64) error {
	if last := m.health.last.Load(); last != nil && last.at >= since {
		return last.err
	}
	return nil
}
