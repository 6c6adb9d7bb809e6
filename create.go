package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"
	"time"
)

// The maker: the factory calls, CreateTimeout, abandoned creations, New's
// seeding and FailFastAfter's health record.
//
// A creation holds a bare permit from before the factory call until its
// item is handed on or it fails and frees it; exactly one of caller and
// creating goroutine owns it at any instant (creation.state). Its turn to
// create (gate.creating), which Close waits for, ends with the factory
// call (or create, if it calls none), or, once abandoned, when its item is
// handed on. The factory's context keeps the caller's values, not its
// cancellation; CreateTimeout bounds it and Close cancels it, so its
// errors never match the caller's ctx (ownCtxErr).
type maker[T any] struct {
	factory   Factory[T]
	name      string
	nillable  bool          // T has a nil value, which a factory must not return as an item
	timeout   time.Duration // CreateTimeout
	failAfter int           // FailFastAfter
	done      context.Context
	errClosed error
	clk       *clock
	health    health

	pool *Pool[T] // the pool its entries name, for their Lease handles
	g    *gate[T]
	ob   *observer[T]
	ds   *destroyer[T]
	ex   *expiry[T]
	// handOn: Pool.giveBackToGate, for items made for nobody; askProbe: keeper.ask.
	handOn   func(*entry[T])
	askProbe func()
}

// seedParallelism bounds concurrent seeding creations, so a large MinSize
// does not dial one server that many times at once.
const seedParallelism = 32

type seedResult[T any] struct {
	e        *entry[T]
	err      error
	panicVal any // a *panicError, or errFactoryGoexit
}

// seed creates n idle items for New. The first failure cancels the rest
// and destroys every item made; seed returns it, or re-raises a panic.
func (m *maker[T]) seed(ctx context.Context, n int) error {
	if n == 0 {
		return nil
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan seedResult[T], n)
	sem := make(chan struct{}, min(seedParallelism, m.g.creationsCap()))
	for range n {
		go m.seedOne(ctx, sctx, sem, results)
	}
	var first error
	var panicVal any
	for range n {
		r := <-results
		switch {
		case r.panicVal != nil:
			if panicVal == nil {
				panicVal = r.panicVal
			}
			cancel()
		case r.err != nil:
			if first == nil {
				first = r.err
			}
			cancel()
		default:
			m.g.seed(r.e)
		}
	}
	if first == nil && panicVal == nil {
		return nil
	}
	es, _ := m.g.close() // New fails: nobody else has the pool
	derr, _ := m.ds.all(context.Background(), es, reasonClose)
	err := errors.Join(first, derr)
	if panicVal != nil {
		panic(panicVal)
	}
	return err
}

// seedOne is one of seed's creations, under sctx (canceled at the first
// failure) and sem; it sends its result, a factory panic or Goexit too.
func (m *maker[T]) seedOne(ctx, sctx context.Context, sem chan struct{}, results chan<- seedResult[T]) {
	r := seedResult[T]{panicVal: errFactoryGoexit} // until the factory returns
	defer func() {
		if v := recover(); v != nil {
			r.panicVal = newPanicError(v)
		}
		results <- r
	}()
	sem <- struct{}{}
	defer func() { <-sem }()
	if err := sctx.Err(); err != nil {
		r = seedResult[T]{err: err} // another creation failed: don't start
		return
	}
	cctx, cancelCreate := sctx, context.CancelFunc(func() {})
	if m.timeout > 0 {
		cctx, cancelCreate = context.WithTimeout(sctx, m.timeout)
	}
	defer cancelCreate()
	e, err := m.newEntry(cctx)
	if err != nil && ctx.Err() == nil {
		err = ownCtxErr(err) // CreateTimeout's, or the first failure's cancel: not New's ctx
	}
	r = seedResult[T]{e: e, err: err}
}

// creation is one factory call that its caller may abandon.
type creation[T any] struct {
	state atomic.Int32 // callRunning, then callTaken (by the finisher) or callAbandoned (by the caller)
	done  chan struct{}

	// Written by the creating goroutine before it closes done.
	e        *entry[T]
	err      error
	panicked bool
	panicVal any // a *panicError, or errFactoryGoexit
}

// The states of a creation's factory call.
const (
	callRunning int32 = iota
	callTaken
	callAbandoned
)

// create makes an item for a caller holding a permit; if ctx can end, on a
// goroutine of its own, which keeps the permit when the caller gives up
// (abandonedIt). A factory panic reaches a caller still waiting.
func (m *maker[T]) create(ctx context.Context) (e *entry[T], abandonedIt bool, err error) {
	if err := ctx.Err(); err != nil {
		m.g.createEnded()
		return nil, false, err // gave up already: don't start a dial for nobody
	}
	if m.g.isDown() {
		m.g.createEnded()
		return nil, false, m.backendDown()
	}
	if ctx.Done() == nil {
		e, err = m.createDetached(ctx) // nothing can abandon it
		return e, false, err
	}
	c := &creation[T]{done: make(chan struct{})}
	go m.createAsync(ctx, c)
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callRunning, callAbandoned) {
			// The creating goroutine owns the permit now.
			return nil, true, ctx.Err()
		}
		<-c.done // finished at this instant: take the result
	}
	if c.panicked {
		panic(c.panicVal) // a *panicError, with the factory's stack
	}
	return c.e, false, c.err
}

// createAsync owns the permit once the caller abandons c. It finishes in a
// deferred call, so a factory panic or Goexit still reaches the waiting
// caller or frees the abandoned permit.
func (m *maker[T]) createAsync(ctx context.Context, c *creation[T]) {
	c.panicked = true // until createCall returns
	defer func() {
		if c.panicked {
			if v := recover(); v != nil {
				c.panicVal = newPanicError(v)
			} else {
				c.panicVal = errFactoryGoexit // recover returns nil for a Goexit
			}
		}
		if c.state.CompareAndSwap(callRunning, callTaken) {
			m.g.createEnded()
			close(c.done)
			return
		}
		defer m.g.createEnded()
		m.adopt(c)
	}()
	c.e, c.err = m.createCall(ctx)
	c.panicked = false
}

// errFactoryGoexit is a waiting caller's panic when the factory called Goexit.
var errFactoryGoexit = errors.New("pool: the factory called runtime.Goexit")

// adopt finishes an abandoned creation: a failure is logged and frees the
// permit; an item is handed on as one made for nobody.
func (m *maker[T]) adopt(c *creation[T]) {
	if c.panicked || c.err != nil {
		err := c.err
		if c.panicked {
			err = fmt.Errorf("pool %q: create item: the factory panicked: %w", m.name, c.panicVal.(error))
		}
		m.ob.warn("a creation whose lease gave up failed", err)
		m.g.free()
		return
	}
	m.handOn(c.e)
}

// createDetached is createCall, and ends the caller's turn to create.
func (m *maker[T]) createDetached(ctx context.Context) (*entry[T], error) {
	defer m.g.createEnded()
	return m.createCall(ctx)
}

// createCall calls the factory in its own context (see maker).
func (m *maker[T]) createCall(ctx context.Context) (*entry[T], error) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(m.done, cancel)
	defer stop()
	if m.timeout > 0 {
		var cancelT context.CancelFunc
		cctx, cancelT = context.WithTimeout(cctx, m.timeout)
		defer cancelT()
	}
	if m.done.Err() != nil {
		return nil, m.errClosed // no factory call starts once Close has begun
	}
	e, err := m.newEntry(cctx)
	if err != nil {
		err = ownCtxErr(err)
	}
	switch {
	case err == nil:
		m.succeeded()
	case m.done.Err() != nil:
		return nil, fmt.Errorf("%w: %w", ErrClosed, err) // Close's cancellation: not the backend
	default:
		m.failed(err)
	}
	return e, err
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
	for {
		if !m.g.tryAcquireFill(n, count) {
			return !m.g.isDown()
		}
		if !m.createIdle(who) {
			return false
		}
	}
}

// probe creates one item while down, with a free permit even if leases wait.
func (m *maker[T]) probe() bool {
	if !m.g.isDown() {
		return true
	}
	return m.g.tryAcquireFill(1, probeItem) && m.createIdle("probe")
}

// createIdle creates an item for the caller's bare permit and hands it on;
// on failure, panic or Goexit it frees the permit and reports false.
func (m *maker[T]) createIdle(who string) (ok bool) {
	var e *entry[T]
	defer func() {
		if e == nil {
			if v := recover(); v != nil {
				m.ob.warn(who+": create item", fmt.Errorf("pool %q: create item: the factory panicked: %w", m.name, newPanicError(v)))
			}
			m.g.free()
		}
	}()
	var err error
	if e, err = m.createDetached(context.Background()); err != nil {
		if !errors.Is(err, ErrClosed) && !m.g.isDown() { // Close canceled it, or the down Warn said it
			m.ob.warn(who+": create item", err)
		}
		return false
	}
	m.handOn(e)
	return true
}

// # Fail fast while the backend is down
//
// With FailFastAfter, that many failed creations in a row (not New's own
// seeding, which fails New) put the pool down; the next success brings it
// up. While down, the gate grants no turn to create but the keeper's probe.
// The last failure stays for ErrBackendDown and ErrLeaseTimeout to wrap.

// health is what FailFastAfter and ErrLeaseTimeout read of the creations;
// whether the pool is down is the gate's (gate.down).
type health struct {
	inARow atomic.Int64 // failed creations since the last success
	last   atomic.Pointer[failedCreation]
	downAt atomic.Int64 // monotime, written before the gate goes down
}

type failedCreation struct {
	err error
	at  int64 // monotime
}

// failed records a failure; the one that puts the pool down logs, asks a probe.
func (m *maker[T]) failed(err error) {
	at := monotime()
	m.health.last.Store(&failedCreation{err: err, at: at})
	n := m.health.inARow.Add(1)
	if m.failAfter > 0 && n >= int64(m.failAfter) && !m.g.isDown() {
		m.health.downAt.Store(at)
		if !m.g.setDown(true) {
			return
		}
		m.ob.log(slog.LevelWarn, fmt.Sprintf("backend down: %d creations in a row failed; leases that must create fail fast until a creation in the background succeeds", n), err)
		m.askProbe()
	}
}

// succeeded: the backend is up.
func (m *maker[T]) succeeded() {
	if m.health.inARow.Load() != 0 {
		m.health.inARow.Store(0)
	}
	if m.g.isDown() && m.g.setDown(false) {
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
