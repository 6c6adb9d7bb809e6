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
	"weak"
)

// Pool is a bounded pool of items of type T. It is safe for use by many
// goroutines. Create one with New; end it with Close or Shutdown.
type Pool[T any] struct {
	g       gate[T]
	factory Factory[T]
	opts    Options[T] // with defaults; immutable after New
	destroy func(T) error

	// nillable: T has a nil value (pointer, interface, map, slice, chan,
	// func), which a factory must not return as an item.
	nillable bool

	// judge: a lease must look at an idle item before handing it out
	// (expiry or preparation). stamp: a release must read the clock.
	// sites: each lease records where it was taken (TrackLeaseSites).
	// plain: neither judge nor sites, so an idle item from a slot or the
	// gate completes a lease as it is: the fast path.
	judge, stamp, sites, plain bool

	epoch int64        // monotime at New
	clock func() int64 // test hook: nanoseconds since epoch; nil: the real clock

	done   context.Context // canceled by Close: ends creations in flight
	cancel context.CancelFunc

	c counters

	m     *metrics  // nil without a MeterProvider: see metrics.go
	leaks *leakSink // what the entries' cleanups reach: see lease.go

	// Made once (errExhausted again by SetMaxSize), so that a failing
	// lease allocates nothing.
	errExhausted atomic.Pointer[error]
	errClosed    error
	// resizing serializes SetMaxSize calls, so that errExhausted names the
	// size the last of them set.
	resizing sync.Mutex

	// sweepEvery is how often the idle items are swept for expiry (0: never:
	// neither IdleTimeout nor MaxLifetime is set); sweepAt, the pool clock
	// at which the next lease or release that reads the clock sweeps. See
	// "Sweeping" in upkeep.go.
	sweepEvery int64
	sweepAt    atomic.Int64

	upkeep *upkeeper // nil without UpkeepInterval: see upkeep.go
}

// counters are the Stats figures that cannot be derived from the gate and
// that no lease writes on its way: those (Leases, Waits, WaitTime) are kept
// per processor in the idle ring's slots.
type counters struct {
	timeouts, canceled, prepareFail atomic.Uint64

	// The item counts change only under mu, and Stats reads them under it,
	// so that every snapshot keeps the relations Stats promises between
	// them. Separate atomics, read one after the other, cannot: a Destroyed
	// read after a Created can count an item created after that read. They
	// change on creation and destruction only, never on a lease of an idle
	// item, so the lock costs a fraction of what a factory call does.
	mu                                         sync.Mutex
	created, destroyed, detached               uint64
	idleExpired, lifetimeExpired, destroyFails uint64
}

// Stats is a snapshot of a pool's state and of what it has done since New.
// The figures about items in use are derived from the pool's own
// bookkeeping, never kept as a second count.
type Stats struct {
	Name             string
	MinSize, MaxSize int

	// ItemsAllocated is ActiveLeases + ItemsAvailable: the items the pool
	// accounts for (leased, idle, being created or being destroyed). It
	// never exceeds MaxSize, but for a while after SetMaxSize shrank it:
	// until the leases beyond the new MaxSize have ended.
	ItemsAllocated int
	// ItemsAvailable is the number of idle items, ready to be leased.
	ItemsAvailable int
	// ActiveLeases is the number of items in use: leased, or being created
	// or destroyed. An item released at the instant of the snapshot may be
	// counted here rather than in ItemsAvailable; their sum is exact.
	ActiveLeases int
	// QueuedLeases is the number of leases waiting now, MaxSize items being
	// in use.
	QueuedLeases int

	// Leases counts successful Lease and TryLease calls.
	Leases uint64
	// Waits counts leases that had to wait for an item, whatever the
	// outcome; WaitTime is the total time they waited. A lease served at
	// once adds to neither.
	Waits    uint64
	WaitTime time.Duration
	// Timeouts counts leases that failed with ErrLeaseTimeout.
	Timeouts uint64
	// Canceled counts leases ended by the caller's ctx (canceled or past its
	// deadline): before they started, while waiting, creating or preparing.
	Canceled uint64

	// Created counts successful factory calls; Destroyed, items the pool
	// destroyed (whatever Destroy did); Detached, items taken out with
	// Lease.Detach. In every snapshot Destroyed + Detached <= Created, and
	// Created - Destroyed - Detached (the items in existence) <= MaxSize
	// (but for a while after SetMaxSize shrank it, as for ItemsAllocated);
	// at rest, Created == Destroyed + Detached + ItemsAllocated.
	Created, Destroyed, Detached uint64
	// IdleExpired and LifetimeExpired count items destroyed for exceeding
	// IdleTimeout and MaxLifetime; PrepareFailed, items destroyed because
	// IsReady or Prepare failed or timed out.
	IdleExpired, LifetimeExpired, PrepareFailed uint64
	// DestroyErrors counts Destroy calls that returned an error or
	// panicked. Each such item still counts as destroyed.
	DestroyErrors uint64

	// Leaked counts the leaked leases the garbage collector has found: ones
	// that became unreachable without Release, Discard or Detach. A leaked
	// lease's item stays in use for good, so it still counts in
	// ActiveLeases and against MaxSize.
	Leaked uint64
}

// Why an item is destroyed.
type reason int

const (
	reasonIdle reason = iota
	reasonLifetime
	reasonPrepare
	reasonReset
	reasonDiscard
	reasonClear
	reasonClose
	reasonResize
)

// New returns a pool that creates items with f, configured by opts, after
// creating opts.MinSize items. It returns an error wrapping
// ErrInvalidOptions when opts (or f) is invalid; when a factory call fails
// while seeding, it destroys the items already created and returns that
// error. ctx bounds only the seeding; New panics when it is nil.
func New[T any](ctx context.Context, f Factory[T], opts Options[T]) (*Pool[T], error) {
	if ctx == nil {
		panic(errNilContext)
	}
	if isNil(f) {
		return nil, fmt.Errorf("%w: the factory is nil", ErrInvalidOptions)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.MeterProvider, opts.Name)
	if err != nil {
		return nil, err
	}
	p := &Pool[T]{
		factory:  f,
		opts:     opts,
		destroy:  opts.Destroy,
		nillable: canBeNil(reflect.TypeFor[T]()),
		judge:    opts.Preparer != nil || opts.IdleTimeout > 0 || opts.MaxLifetime > 0,
		stamp:    opts.IdleTimeout > 0 || opts.MaxLifetime > 0 || opts.Preparer != nil && opts.CheckAfterIdle > 0,
		sites:    opts.TrackLeaseSites,
		epoch:    monotime(),
		m:        m,
	}
	p.plain = !p.judge && !p.sites
	if p.destroy == nil {
		p.destroy = closeItem[T]
	}
	p.leaks = newLeakSink(p)
	if m != nil {
		p.leaks.counter, p.leaks.add = m.leaked, m.add
	}
	p.g.size = opts.MaxSize
	p.g.slots.init()
	p.setErrExhausted(opts.MaxSize)
	p.errClosed = fmt.Errorf("%w: pool %q", ErrClosed, opts.Name)
	p.sweepEvery = sweepPeriod(opts.IdleTimeout, opts.MaxLifetime)
	p.sweepAt.Store(p.sweepEvery)
	p.done, p.cancel = context.WithCancel(context.Background())
	if err := p.seed(ctx); err != nil {
		p.cancel()
		return nil, err
	}
	if opts.UpkeepInterval > 0 {
		p.upkeep = startUpkeep(p)
	}
	if m != nil {
		// After seeding: the callback reads Stats, and seed fills the idle
		// queue without the gate's lock.
		if err := registerGauges(m, weak.Make(p)); err != nil {
			return nil, errors.Join(err, p.Close())
		}
	}
	return p, nil
}

// isNil reports whether v is nil or holds a nil pointer, func, map, slice,
// channel or interface: a typed nil, which an interface-valued option or
// the factory must not be taken for a value.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return canBeNil(rv.Type()) && rv.IsNil()
}

// canBeNil reports whether values of t can be nil.
func canBeNil(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return true
	}
	return false
}

// seedParallelism bounds the creations New runs at once, so that a large
// MinSize does not dial one server that many times in the same instant.
const seedParallelism = 32

// seedResult is one creation of New's seeding.
type seedResult[T any] struct {
	e        *entry[T]
	err      error
	panicVal any // a *panicError, or errFactoryGoexit
}

// seed creates MinSize idle items, up to seedParallelism at once. The first
// failure cancels the creations still under way; then every item made is
// destroyed, so nothing leaks, and seed returns that failure's error, or
// raises the first panic of the factory again.
func (p *Pool[T]) seed(ctx context.Context) error {
	n := p.opts.MinSize
	if n == 0 {
		return nil
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan seedResult[T], n)
	sem := make(chan struct{}, seedParallelism)
	for range n {
		go func() {
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
			if p.opts.CreateTimeout > 0 {
				cctx, cancelCreate = context.WithTimeout(sctx, p.opts.CreateTimeout)
			}
			defer cancelCreate()
			e, err := p.newEntry(cctx)
			r = seedResult[T]{e: e, err: err}
		}()
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
			p.g.idle.push(r.e) // only this goroutine can see the pool yet
		}
	}
	if first == nil && panicVal == nil {
		return nil
	}
	err := errors.Join(first, p.destroyAll(p.g.drainIdle(), reasonClose))
	if panicVal != nil {
		panic(panicVal)
	}
	return err
}

// Name returns the pool's name, Options.Name or its default.
func (p *Pool[T]) Name() string { return p.opts.Name }

// now reads the pool's clock: nanoseconds since New, monotonic.
func (p *Pool[T]) now() int64 {
	if p.clock != nil {
		return p.clock()
	}
	return monotime() - p.epoch
}

// Lease returns a leased item. It reuses an idle item, creates one when
// fewer than MaxSize exist, or waits in FIFO order for one to be released.
// The wait ends with ErrLeaseTimeout after Options.LeaseTimeout, with
// ctx.Err() when ctx ends first, and with ErrClosed when the pool closes.
// A ctx that has already ended gets ctx.Err() at once, even when an item
// is idle. A failed creation or preparation of a fresh item returns its
// error, wrapped. The caller must end the lease: defer l.Release().
// Lease panics when ctx is nil.
func (p *Pool[T]) Lease(ctx context.Context) (Lease[T], error) {
	l, err := p.lease(ctx, true)
	if p.sites && err == nil {
		recordSite(l.e) // here, so that the stack walk starts right at the caller
	}
	return l, err
}

// TryLease is Lease without the wait: when MaxSize items are in use, or
// other leases already wait for one, it returns ErrExhausted at once. It
// may still create and prepare an item, within ctx.
func (p *Pool[T]) TryLease(ctx context.Context) (Lease[T], error) {
	l, err := p.lease(ctx, false)
	if p.sites && err == nil {
		recordSite(l.e)
	}
	return l, err
}

func (p *Pool[T]) lease(ctx context.Context, wait bool) (Lease[T], error) {
	if ctx == nil {
		panic(errNilContext)
	}
	if err := ctx.Err(); err != nil {
		return p.leaseFailed(ctx, errCanceled, err) // gave up already: take nothing
	}
	// The fast path: an idle item parked in this processor's slot (see
	// ring.go for the protocol; this is its "take", written out here, as
	// park is in release: the two calls cost 1.5 ns of a 35 ns
	// lease+release).
	if r := &p.g.slots; !r.bypass.Load() {
		pid := procPin()
		s := &r.s[pid&r.mask]
		// Load first: a miss then costs no locked instruction.
		if e := s.e.Load(); e != nil && s.e.CompareAndSwap(e, nil) {
			if p.plain {
				r.countLease(pid) // still pinned: see countLease
				procUnpin()
				return Lease[T]{e: e, gen: e.gen.Load()}, nil
			}
			procUnpin()
			return p.leaseSlow(ctx, e, true, nil, nil)
		}
		procUnpin()
	}
	// The next fastest: an idle item from the gate, in the critical
	// section that queues the lease when no permit is free.
	var queue context.Context
	if wait {
		queue = ctx
	}
	e, ok, w, err := p.g.acquire(p.plain, queue)
	if ok && e != nil && p.plain {
		return Lease[T]{e: e, gen: e.gen.Load()}, nil
	}
	return p.leaseSlow(ctx, e, ok, w, err)
}

// leaseSlow finishes a lease that the fast path could not: it waits for a
// permit unless ok says one is held (with e, when not nil), then obtains an
// item. w is the waiter that acquire queued, err its refusal.
func (p *Pool[T]) leaseSlow(ctx context.Context, e *entry[T], ok bool, w *waiter[T], err error) (Lease[T], error) {
	var waited time.Duration
	switch {
	case err == ErrClosed:
		return p.leaseFailed(ctx, errClosed, p.errClosed)
	case err != nil: // ctx had ended before the lease could queue
		return p.leaseFailed(ctx, errCanceled, err)
	case !ok && w == nil:
		return p.leaseFailed(ctx, errExhausted, *p.errExhausted.Load())
	case !ok:
		var expired bool
		e, waited, expired, err = p.g.await(ctx, w, p.opts.LeaseTimeout)
		if err != nil && e != nil {
			// An item granted as we gave up, on a pool that closed or
			// shrank meanwhile: nobody else may have it.
			p.dispose(e, p.refusedWhy())
		}
		p.g.slots.countWait(procPin(), int64(waited)) // pinned: see countWait
		procUnpin()
		switch {
		case err == nil:
		case expired:
			return p.leaseFailed(ctx, errTimeout, fmt.Errorf("%w: pool %q: every item stayed in use (MaxSize %d) for %v",
				ErrLeaseTimeout, p.opts.Name, p.g.maxSize(), waited.Round(time.Millisecond)))
		case err == ErrClosed:
			return p.leaseFailed(ctx, errClosed, p.errClosed)
		default:
			return p.leaseFailed(ctx, errCanceled, err)
		}
	}
	e, failed, err := p.obtain(ctx, e)
	if err != nil {
		// ErrClosed first: a factory that wraps its ctx's error (as
		// net.Dialer does) makes a creation that Close canceled match
		// context.Canceled too, and Close is what ended it.
		if errors.Is(err, ErrClosed) {
			failed = errClosed
		} else if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			failed = errCanceled
		}
		return p.leaseFailed(ctx, failed, err)
	}
	p.g.slots.countLease(procPin())
	procUnpin()
	if p.m != nil && w != nil {
		p.m.waitTime.Record(ctx, waited.Seconds(), p.m.rec...)
	}
	return Lease[T]{e: e, gen: e.gen.Load()}, nil
}

// leaseFailed counts a failed lease of type t, in Stats and in
// pool.lease.errors, and returns err.
func (p *Pool[T]) leaseFailed(ctx context.Context, t errType, err error) (Lease[T], error) {
	switch t {
	case errCanceled:
		p.c.canceled.Add(1)
	case errTimeout:
		p.c.timeouts.Add(1)
	}
	if p.m != nil {
		p.m.leaseFailed(ctx, t)
	}
	return Lease[T]{}, err
}

// obtain turns a held permit into a ready item: e (an item that came with
// the permit) or the idle items, newest first, judged against one clock
// read; else a fresh one. On error, and when user code panics, the permit
// is returned and any item in hand destroyed; failed says which step
// failed, for pool.lease.errors (the caller tells a ctx that ended, or a
// Close, from the factory's or the Preparer's own failure).
func (p *Pool[T]) obtain(ctx context.Context, e *entry[T]) (_ *entry[T], failed errType, err error) {
	done := false
	defer func() {
		if !done { // an error, or a panic or Goexit on its way out
			if e != nil {
				p.dispose(e, reasonPrepare)
			} else {
				p.g.passOn(nil)
			}
		}
	}()

	var now int64
	clockRead := false
	for {
		if e == nil {
			e = p.g.takeIdle()
		}
		if e == nil {
			break
		}
		if !p.judge {
			done = true
			return e, 0, nil
		}
		if !clockRead && p.stamp {
			now, clockRead = p.now(), true
			if p.sweepEvery > 0 && now >= p.sweepAt.Load() {
				p.sweep(now)
			}
		}
		why, expired := p.expired(e, now)
		if expired && why == reasonIdle && p.opts.UpkeepInterval > 0 && p.g.items() <= p.opts.MinSize {
			expired = false // with the upkeep on, idling never takes the pool below MinSize
		}
		if !expired && p.needsCheck(e, now) {
			if err = ctx.Err(); err != nil {
				// Gave up before the check: the item is as good as it was.
				done = true
				p.putBack(e)
				return nil, errCanceled, err
			}
			if err = p.prepare(ctx, e); err != nil {
				why, expired = reasonPrepare, true
			}
		}
		if !expired {
			done = true
			return e, 0, nil
		}
		victim := e
		e = nil
		p.destroyLogged(victim, why)
		if err != nil && ctx.Err() != nil {
			return nil, errCanceled, ctx.Err() // the caller gave up: don't try the next one
		}
		err = nil
	}

	var abandonedIt bool
	if e, abandonedIt, err = p.create(ctx); err != nil {
		done = abandonedIt // the permit went with the creation
		return nil, errCreate, err
	}
	if p.opts.Preparer != nil {
		if err = p.prepare(ctx, e); err != nil {
			victim := e
			e = nil
			p.destroyLogged(victim, reasonPrepare)
			return nil, errPrepare, err
		}
	}
	done = true
	return e, 0, nil
}

// expired says whether an idle item has outlived its lifetime or
// IdleTimeout.
func (p *Pool[T]) expired(e *entry[T], now int64) (reason, bool) {
	if now > e.deadline {
		return reasonLifetime, true
	}
	if p.opts.IdleTimeout > 0 && now-e.idleAt > int64(p.opts.IdleTimeout) {
		return reasonIdle, true
	}
	return 0, false
}

// needsCheck says whether the Preparer must see an idle item: always when it
// has never accepted the item, else when it sat idle for CheckAfterIdle
// since its release or the upkeep's last check of it.
func (p *Pool[T]) needsCheck(e *entry[T], now int64) bool {
	return p.opts.Preparer != nil &&
		(!e.checked || p.opts.CheckAfterIdle == 0 || now-max(e.idleAt, e.checkedAt) >= int64(p.opts.CheckAfterIdle))
}

// prepare runs IsReady and, when the item is not ready, Prepare, within
// PreparationTimeout.
func (p *Pool[T]) prepare(ctx context.Context, e *entry[T]) error {
	if p.m != nil {
		start := p.now()
		defer func() { p.m.prepTime.Record(ctx, seconds(p.now()-start), p.m.rec...) }()
	}
	pctx, limit := ctx, p.opts.PreparationTimeout
	var start int64
	if limit > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
		start = monotime()
	}
	ready, err := p.opts.Preparer.IsReady(pctx, e.value)
	if err == nil && !ready {
		err = p.opts.Preparer.Prepare(pctx, e.value)
	}
	// Read the clock rather than wait for pctx's timer to mark it done: a
	// Preparer that ignored its ctx may report success after the timeout,
	// too late all the same, before that timer has run.
	timedOut := limit > 0 && ctx.Err() == nil && (pctx.Err() != nil || monotime()-start >= int64(limit))
	if err == nil && timedOut {
		err = context.DeadlineExceeded
	}
	if err != nil {
		p.c.prepareFail.Add(1)
		if p.m != nil {
			p.m.prepErrors.Add(ctx, 1, p.m.add...)
		}
		if timedOut {
			return fmt.Errorf("pool %q: prepare item: %w after %v: %w", p.opts.Name, ErrPreparationTimeout, p.opts.PreparationTimeout, err)
		}
		return fmt.Errorf("pool %q: prepare item: %w", p.opts.Name, err)
	}
	e.checked = true
	return nil
}

// creation is one factory call that its caller may abandon.
type creation[T any] struct {
	state atomic.Int32 // creating, then taken (by the finisher) or abandoned (by the caller)
	done  chan struct{}

	// Written by the creating goroutine before it closes done.
	e        *entry[T]
	err      error
	panicked bool
	panicVal any // a *panicError, or errFactoryGoexit
}

const (
	creating int32 = iota
	finished
	abandoned
)

// create makes a fresh item for a caller that holds a permit. When ctx can
// end, the factory runs on a goroutine of its own: if the caller gives up,
// the creation finishes in the background and its item goes idle (or to a
// waiter), so one impatient caller never costs a second dial. A panic in the
// factory reaches the caller if it still waits.
// abandoned reports that the caller gave up and the permit went with the
// creation.
func (p *Pool[T]) create(ctx context.Context) (e *entry[T], abandonedIt bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err // gave up already: don't start a dial for nobody
	}
	if ctx.Done() == nil {
		e, err = p.createDetached(ctx) // nothing can abandon it
		return e, false, err
	}
	c := &creation[T]{done: make(chan struct{})}
	go p.createAsync(ctx, c)
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(creating, abandoned) {
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

// createAsync runs one creation for create. It holds the caller's permit
// from the moment the caller abandons the creation.
//
// It finishes in a deferred call, so that a factory that panics, or calls
// runtime.Goexit (t.FailNow in a test's factory does), still either
// reaches the waiting caller or frees the abandoned creation's permit.
func (p *Pool[T]) createAsync(ctx context.Context, c *creation[T]) {
	c.panicked = true // until createDetached returns
	defer func() {
		if c.panicked {
			if v := recover(); v != nil {
				c.panicVal = newPanicError(v)
			} else {
				c.panicVal = errFactoryGoexit // recover returns nil for a Goexit
			}
		}
		if c.state.CompareAndSwap(creating, finished) {
			close(c.done)
			return
		}
		p.adopt(c)
	}()
	c.e, c.err = p.createDetached(ctx)
	c.panicked = false
}

// errFactoryGoexit is what a caller waiting for a creation panics with when
// the factory called runtime.Goexit on the creating goroutine.
var errFactoryGoexit = errors.New("pool: the factory called runtime.Goexit")

// adopt finishes a creation that its caller abandoned: nobody waits for
// this item. A failure (or a panic) counts as a failed creation, is logged
// and frees the permit; an item goes idle, or to a waiter. On a closed
// pool the item is destroyed here, on the pool's own goroutine: a Destroy
// panic has no caller to reach, so it is logged and dropped (the item
// counts as destroyed and its permit is freed all the same) rather than
// crash the program.
func (p *Pool[T]) adopt(c *creation[T]) {
	if c.panicked || c.err != nil {
		err := c.err
		if c.panicked {
			err = fmt.Errorf("pool %q: create item: the factory panicked: %w", p.opts.Name, asError(c.panicVal))
		}
		p.warn("a creation whose lease gave up failed", err)
		p.g.passOn(nil)
		return
	}
	p.quietly(func() { p.putBack(c.e) })
}

// asError returns v as an error: itself, or an error that prints it.
func asError(v any) error {
	if err, ok := v.(error); ok {
		return err
	}
	return fmt.Errorf("%v", v)
}

// createDetached calls the factory with a context that keeps ctx's values
// but not its cancellation, is canceled by Close and bounded by
// CreateTimeout.
func (p *Pool[T]) createDetached(ctx context.Context) (*entry[T], error) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(p.done, cancel)
	defer stop()
	if p.opts.CreateTimeout > 0 {
		var cancelT context.CancelFunc
		cctx, cancelT = context.WithTimeout(cctx, p.opts.CreateTimeout)
		defer cancelT()
	}
	e, err := p.newEntry(cctx)
	if err != nil && p.done.Err() != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return e, err
}

// newEntry calls the factory and wraps its item, watched for leaks.
func (p *Pool[T]) newEntry(ctx context.Context) (*entry[T], error) {
	v, err := p.callFactory(ctx)
	if err != nil {
		return nil, fmt.Errorf("pool %q: create item: %w", p.opts.Name, err)
	}
	if p.nillable && isNil(any(v)) {
		// Nothing to destroy, and nothing a lease could use.
		return nil, fmt.Errorf("pool %q: create item: the factory returned a nil %v and no error", p.opts.Name, reflect.TypeFor[T]())
	}
	p.c.mu.Lock()
	p.c.created++
	p.c.mu.Unlock()
	if p.m != nil {
		p.m.created.Add(ctx, 1, p.m.add...)
	}
	now := p.now()
	e := &entry[T]{value: v, pool: p, deadline: p.deadline(now), idleAt: now}
	watch(p.leaks, e, p.sites)
	return e, nil
}

// callFactory makes one factory call, timed in pool.items.create_time when
// there are metrics, also when it fails or panics.
func (p *Pool[T]) callFactory(ctx context.Context) (T, error) {
	if p.m != nil {
		start := p.now()
		defer func() { p.m.createTime.Record(ctx, seconds(p.now()-start), p.m.rec...) }()
	}
	return p.factory.Create(ctx)
}

// release takes back the item of a lease that Release ended.
func (p *Pool[T]) release(e *entry[T]) {
	if p.opts.Reset != nil && !p.reset(e) {
		return
	}
	if p.stamp {
		now := p.now()
		if p.sweepEvery > 0 && now >= p.sweepAt.Load() {
			p.sweep(now)
		}
		if now > e.deadline {
			p.dispose(e, reasonLifetime)
			return
		}
		e.idleAt = now
	}
	// slots.park, written out for the same reason as in lease.
	if r := &p.g.slots; !r.bypass.Load() {
		s := &r.s[procPin()&r.mask]
		procUnpin()
		if s.e.CompareAndSwap(nil, e) && r.confirm(s, e) {
			return
		}
	}
	p.toGate(e)
}

// reset runs Options.Reset; when it fails (the error is logged: Release
// has no caller to return it to), panics or calls runtime.Goexit, the item
// is destroyed and its permit freed, and reset reports false (or the panic
// goes on).
func (p *Pool[T]) reset(e *entry[T]) (ok bool) {
	defer func() {
		if !ok {
			p.dispose(e, reasonReset)
		}
	}()
	if err := p.opts.Reset(e.value); err != nil {
		p.warn("reset item; destroying it", fmt.Errorf("pool %q: reset item: %w", p.opts.Name, err))
		return false
	}
	return true
}

// putBack makes an item whose permit the caller holds idle: parked in this
// processor's slot, with its permit, when nobody waits; else through the
// gate, to the oldest waiter or the idle queue. On a closed pool it
// destroys the item.
func (p *Pool[T]) putBack(e *entry[T]) {
	if !p.g.slots.park(e) {
		p.toGate(e)
	}
}

// toGate is putBack without the slots.
func (p *Pool[T]) toGate(e *entry[T]) {
	if !p.g.passOn(e) {
		p.dispose(e, p.refusedWhy())
	}
}

// refusedWhy is why the gate refused an item: the pool closed, or it holds
// more items than MaxSize after SetMaxSize shrank it.
func (p *Pool[T]) refusedWhy() reason {
	if p.g.isClosed() {
		return reasonClose
	}
	return reasonResize
}

// detach takes the item of a lease that Detach ended out of the pool.
func (p *Pool[T]) detach(e *entry[T]) T {
	e.cleanup.Stop() // the entry is garbage from now on, not a leak
	v := e.value
	p.c.mu.Lock()
	p.c.detached++
	p.c.mu.Unlock()
	p.g.passOn(nil)
	return v
}

// destroyItem disposes of an item and counts it, also when Destroy panics
// or calls runtime.Goexit, which count as failed Destroy calls.
func (p *Pool[T]) destroyItem(e *entry[T], why reason) (err error) {
	e.cleanup.Stop() // the entry is garbage from now on, not a leak
	returned := false
	defer func() { p.countDestroyed(why, !returned || err != nil) }()
	err = p.destroy(e.value)
	returned = true
	if err != nil {
		return fmt.Errorf("pool %q: destroy item: %w", p.opts.Name, err)
	}
	return nil
}

// destroyAndFree destroys an item whose permit the caller holds, then frees
// the permit: the item counts against MaxSize until its destruction ends.
func (p *Pool[T]) destroyAndFree(e *entry[T], why reason) error {
	defer p.g.passOn(nil)
	return p.destroyItem(e, why)
}

// destroyLogged is destroyItem for a caller that has nobody to return a
// Destroy error to: the error is logged.
func (p *Pool[T]) destroyLogged(e *entry[T], why reason) {
	if err := p.destroyItem(e, why); err != nil {
		p.warn("destroy item", err)
	}
}

// dispose is destroyAndFree for a caller that has nobody to return a
// Destroy error to: the error is logged.
func (p *Pool[T]) dispose(e *entry[T], why reason) {
	if err := p.destroyAndFree(e, why); err != nil {
		p.warn("destroy item", err)
	}
}

// warn logs, through Options.Logger, an error that has no caller to go to.
func (p *Pool[T]) warn(msg string, err error) {
	if l := p.opts.Logger; l != nil {
		l.LogAttrs(context.Background(), slog.LevelWarn, "pool: "+msg,
			slog.String("pool.name", p.opts.Name), slog.Any("err", err))
	}
}

// destroyAll destroys items whose permits the caller holds and frees the
// permits. Every item is destroyed whatever a Destroy does: errors are
// joined into the result; the first panic is raised again, with its stack,
// once the rest are destroyed; a runtime.Goexit (t.FailNow in a test's
// Destroy) ends the calling goroutine, as Goexit must, but only after the
// rest are destroyed, by the deferred call that Goexit runs on its way out.
func (p *Pool[T]) destroyAll(es []*entry[T], why reason) error {
	b := destroyBatch[T]{p: p, es: es, why: func(*entry[T]) reason { return why }, free: true}
	b.run()
	if b.panicked != nil {
		panic(b.panicked)
	}
	return errors.Join(b.errs...)
}

// destroyBatch is the state of a destroyAll, kept where a deferred call
// can finish it.
type destroyBatch[T any] struct {
	p    *Pool[T]
	es   []*entry[T] // not destroyed yet
	why  func(*entry[T]) reason
	free bool // free each item's permit right after its destroy; else the caller frees them

	errs     []error
	panicked *panicError // the first Destroy panic
}

func (b *destroyBatch[T]) run() {
	for len(b.es) > 0 {
		e := b.es[0]
		b.es = b.es[1:]
		b.destroy(e)
	}
}

func (b *destroyBatch[T]) destroy(e *entry[T]) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			if b.panicked == nil {
				b.panicked = newPanicError(v)
			}
			return
		}
		// runtime.Goexit: the goroutine is ending, and this is the last
		// code of the batch that runs on it.
		b.run()
	}()
	var err error
	if b.free {
		err = b.p.destroyAndFree(e, b.why(e))
	} else {
		err = b.p.destroyItem(e, b.why(e))
	}
	if err != nil {
		b.errs = append(b.errs, err)
	}
	returned = true
}

func (p *Pool[T]) countDestroyed(why reason, failed bool) {
	p.c.mu.Lock()
	switch why {
	case reasonIdle:
		p.c.idleExpired++
	case reasonLifetime:
		p.c.lifetimeExpired++
	}
	p.c.destroyed++
	if failed {
		p.c.destroyFails++
	}
	p.c.mu.Unlock()
	if p.m != nil {
		p.m.itemDestroyed(why, failed)
	}
}

// Clear destroys the idle items, then creates idle items until MinSize are
// idle, as far as MaxSize allows. Leased items are untouched. Errors have
// no caller to go to: they are counted and logged. A failed creation ends
// the refill; leases create items on demand.
func (p *Pool[T]) Clear() {
	if err := p.destroyAll(p.g.drainIdle(), reasonClear); err != nil {
		p.warn("clear: destroy idle items", err)
	}
	for p.refillOne() {
	}
}

// refillOne creates one idle item for Clear, if MinSize are not idle yet and
// a permit is free.
func (p *Pool[T]) refillOne() (more bool) {
	if !p.g.tryAcquireBelow(p.opts.MinSize) {
		return false
	}
	var e *entry[T]
	defer func() {
		if e == nil {
			p.g.passOn(nil) // failed, panicked or Goexit: the permit goes back
		}
	}()
	var err error
	if e, err = p.createDetached(context.Background()); err != nil {
		p.warn("clear: refill to MinSize", err)
		return false
	}
	p.putBack(e)
	return true
}

// Close closes the pool: new leases fail with ErrClosed, every waiting
// lease is woken with ErrClosed, idle items are destroyed now and leased
// items when they come back; creations in flight are canceled through their
// context. The pool's gauges stop reporting; its counters and histograms go
// on recording what the leases still out do. It returns the joined errors
// of the destroys it ran. A lease already under way may still succeed; its
// item is destroyed on release. Close is idempotent: later calls do nothing
// and return nil.
func (p *Pool[T]) Close() error {
	es, first := p.g.close()
	if !first {
		return nil
	}
	p.cancel()
	if p.upkeep != nil {
		p.upkeep.stop()
	}
	var unreg error
	if p.m != nil {
		unreg = p.m.unregister()
	}
	return errors.Join(p.destroyAll(es, reasonClose), unreg)
}

// Shutdown closes the pool, then waits until every lease has ended and every
// creation has finished, or until ctx ends, when it returns ctx.Err(). A
// leaked lease never ends, so only ctx ends such a Shutdown. On a pool
// that has drained, Shutdown returns nil (plus Close's errors) even when
// ctx has already ended. Errors from Close are joined to the result.
// Shutdown panics when ctx is nil.
func (p *Pool[T]) Shutdown(ctx context.Context) error {
	if ctx == nil {
		panic(errNilContext)
	}
	err := p.Close()
	drained := p.g.whenDrained()
	select {
	case <-drained:
		return err
	case <-ctx.Done():
		select {
		case <-drained: // both at once: the pool did drain
			return err
		default:
			return errors.Join(err, ctx.Err())
		}
	}
}

// Stats returns a snapshot of the pool's figures.
func (p *Pool[T]) Stats() Stats {
	held, idle, queued, size, sums := p.g.counts()
	s := Stats{
		Name:           p.opts.Name,
		MinSize:        p.opts.MinSize,
		MaxSize:        size,
		ItemsAllocated: held + idle,
		ItemsAvailable: idle,
		ActiveLeases:   held,
		QueuedLeases:   queued,
		Leases:         sums.leases,
		Waits:          sums.waits,
		WaitTime:       time.Duration(sums.waitTime),
		Timeouts:       p.c.timeouts.Load(),
		Canceled:       p.c.canceled.Load(),
		PrepareFailed:  p.c.prepareFail.Load(),
		Leaked:         p.leaks.leaked.Load(),
	}
	p.c.mu.Lock()
	s.Created, s.Destroyed, s.Detached = p.c.created, p.c.destroyed, p.c.detached
	s.IdleExpired, s.LifetimeExpired, s.DestroyErrors = p.c.idleExpired, p.c.lifetimeExpired, p.c.destroyFails
	p.c.mu.Unlock()
	return s
}

// SetMaxSize changes the pool's MaxSize to n, as a configuration reload
// may. Growing serves the leases waiting now at once, in FIFO order, each
// with the right to create an item. Shrinking creates nothing past the new
// MaxSize: idle items beyond it are destroyed now (their Destroy errors are
// logged) and leased items beyond it when they come back, until the items
// in existence fit; new leases wait meanwhile. Stats, the gauges and
// ErrLeaseTimeout's message follow the new value. It returns an error
// wrapping ErrInvalidOptions when n is below 1 or below MinSize, and
// ErrClosed on a closed pool.
func (p *Pool[T]) SetMaxSize(n int) error {
	if n < 1 || n < p.opts.MinSize {
		return fmt.Errorf("%w: pool %q: SetMaxSize(%d): MaxSize must be at least 1 and at least MinSize (%d)", ErrInvalidOptions, p.opts.Name, n, p.opts.MinSize)
	}
	p.resizing.Lock()
	excess, err := p.g.resize(n)
	if err == nil {
		p.setErrExhausted(n)
	}
	p.resizing.Unlock()
	if err != nil {
		return p.errClosed
	}
	if err := p.destroyAll(excess, reasonResize); err != nil {
		p.warn("SetMaxSize: destroy idle items beyond MaxSize", err)
	}
	return nil
}

// setErrExhausted makes the error a refused TryLease returns, naming size.
func (p *Pool[T]) setErrExhausted(size int) {
	err := fmt.Errorf("%w: pool %q: every item is in use (MaxSize %d), or other leases are waiting", ErrExhausted, p.opts.Name, size)
	p.errExhausted.Store(&err)
}
