// Package pool is a generic, bounded, thread-safe pool of items that are
// expensive to create and safe to reuse: database and SMTP connections,
// clients, sockets.
//
// A Pool lends items under a Lease and takes them back on Release. At most
// Options.MaxSize items exist at once; a lease beyond that waits, in FIFO
// order and bounded by Options.LeaseTimeout and its ctx, for an item to come
// back. Items are created on demand by a Factory, checked and restored on
// lease by an optional Preparer, reset on release and destroyed when they
// expire, fail, are discarded or the pool closes.
//
//	l, err := p.Lease(ctx)
//	if err != nil {
//		return err
//	}
//	defer l.Release()
//	return l.Value().Send(msg)
package pool

import (
	"context"
	"errors"
	"fmt"
	"reflect"
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

	errExhausted error // made once: a failing TryLease allocates nothing
}

// counters are the Stats figures that cannot be derived from the gate and
// that no lease writes on its way: those (Leases, Waits, WaitTime) are kept
// per processor in the idle ring's slots.
type counters struct {
	timeouts, canceled                        atomic.Uint64
	created, destroyed, detached              atomic.Uint64
	idleExpired, lifetimeExpired, prepareFail atomic.Uint64
}

// Stats is a snapshot of a pool's state and of what it has done since New.
// The gauges are derived from the capacity gate and the idle queue, never
// kept as a second count.
type Stats struct {
	Name             string
	MinSize, MaxSize int

	// ItemsAllocated is ActiveLeases + ItemsAvailable: the items the pool
	// accounts for (leased, idle, being created or being destroyed).
	ItemsAllocated int
	// ItemsAvailable is the number of idle items, in the idle queue or
	// parked in a processor's slot.
	ItemsAvailable int
	// ActiveLeases is the permits held, less those of items parked in
	// slots: leased items, plus creations and destructions in progress.
	// Items move in and out of the slots without a lock, so the split
	// between ActiveLeases and ItemsAvailable is a moment's estimate;
	// their sum is exact.
	ActiveLeases int
	// QueuedLeases is the number of leases waiting for a permit now.
	QueuedLeases int

	// Leases counts successful Lease and TryLease calls.
	Leases uint64
	// Waits counts leases that had to queue for a permit, whatever the
	// outcome; WaitTime is the total time they spent queued. A lease served
	// without queueing adds to neither.
	Waits    uint64
	WaitTime time.Duration
	// Timeouts counts leases that failed with ErrLeaseTimeout.
	Timeouts uint64
	// Canceled counts leases ended by the caller's ctx (canceled or past its
	// deadline): while queued, creating or preparing.
	Canceled uint64

	// Created counts successful factory calls; Destroyed, items the pool
	// destroyed (whatever Destroy returned); Detached, items taken out with
	// Lease.Detach. At rest, Created == Destroyed + Detached + ItemsAllocated;
	// at every instant Created - Destroyed - Detached <= MaxSize. (Stats
	// reads Created before the other two, so a snapshot never shows more.)
	Created, Destroyed, Detached uint64
	// IdleExpired and LifetimeExpired count items destroyed for exceeding
	// IdleTimeout and MaxLifetime; PrepareFailed, items destroyed because
	// IsReady or Prepare failed or timed out.
	IdleExpired, LifetimeExpired, PrepareFailed uint64

	// Leaked counts the leaked leases the garbage collector has found: ones
	// that became unreachable without Release, Discard or Detach. A leaked
	// lease keeps its permit, so it still counts in ActiveLeases.
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
)

// New returns a pool that creates items with f, configured by opts, after
// creating opts.MinSize items. It returns an error wrapping
// ErrInvalidOptions when opts (or f) is invalid; when a factory call fails
// while seeding, it destroys the items already created and returns that
// error. ctx bounds only the seeding.
func New[T any](ctx context.Context, f Factory[T], opts Options[T]) (*Pool[T], error) {
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
		factory: f,
		opts:    opts,
		destroy: opts.Destroy,
		judge:   opts.Preparer != nil || opts.IdleTimeout > 0 || opts.MaxLifetime > 0,
		stamp:   opts.IdleTimeout > 0 || opts.MaxLifetime > 0 || opts.Preparer != nil && opts.CheckAfterIdle > 0,
		sites:   opts.TrackLeaseSites,
		epoch:   monotime(),
		m:       m,
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
	p.errExhausted = fmt.Errorf("%w: pool %q: every permit is held (MaxSize %d)", ErrExhausted, opts.Name, opts.MaxSize)
	p.done, p.cancel = context.WithCancel(context.Background())
	if err := p.seed(ctx); err != nil {
		p.cancel()
		return nil, err
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

// isNil reports whether f is nil or holds a nil pointer, func, map, slice,
// channel or interface, which would panic on the first creation.
func isNil[T any](f Factory[T]) bool {
	if f == nil {
		return true
	}
	switch v := reflect.ValueOf(f); v.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// seed creates MinSize idle items. On failure (or a panic) it destroys the
// ones already made, so nothing leaks.
func (p *Pool[T]) seed(ctx context.Context) (err error) {
	ok := false
	defer func() {
		if !ok {
			es := p.g.drainIdle()
			err = errors.Join(err, p.destroyAll(es, reasonClose))
		}
	}()
	for range p.opts.MinSize {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if p.opts.CreateTimeout > 0 {
			cctx, cancel = context.WithTimeout(ctx, p.opts.CreateTimeout)
		}
		e, err := p.newEntry(cctx)
		cancel()
		if err != nil {
			return err
		}
		p.g.idle.push(e) // nobody else can see the pool yet
	}
	ok = true
	return nil
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
// A failed creation or preparation of a fresh item returns its error,
// wrapped. The caller must end the lease: defer l.Release().
func (p *Pool[T]) Lease(ctx context.Context) (Lease[T], error) {
	return p.lease(ctx, true)
}

// TryLease is Lease without the wait for a permit: when every permit is
// held, or other leases already queue for one, it returns ErrExhausted at
// once. It may still create and prepare an item, within ctx.
func (p *Pool[T]) TryLease(ctx context.Context) (Lease[T], error) {
	return p.lease(ctx, false)
}

func (p *Pool[T]) lease(ctx context.Context, wait bool) (Lease[T], error) {
	// The fast path: an idle item parked in this processor's slot (see
	// ring.go for the protocol; this is its "take", written out here, as
	// park is in release: the two calls cost 1.5 ns of a 35 ns
	// lease+release).
	if r := &p.g.slots; !r.bypass.Load() {
		s := &r.s[procPin()&r.mask]
		procUnpin()
		// Load first: a miss then costs no locked instruction.
		if e := s.e.Load(); e != nil && s.e.CompareAndSwap(e, nil) {
			if !p.plain {
				return p.leaseSlow(ctx, e, true, nil, nil)
			}
			s.leases.Add(1)
			return Lease[T]{e: e, gen: e.gen.Load()}, nil
		}
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
		p.leaseFailed(ctx, errClosed)
		return Lease[T]{}, err
	case err != nil: // ctx had ended before the lease could queue
		p.c.canceled.Add(1)
		p.leaseFailed(ctx, errCanceled)
		return Lease[T]{}, err
	case !ok && w == nil:
		p.leaseFailed(ctx, errExhausted)
		return Lease[T]{}, p.errExhausted
	case !ok:
		var expired bool
		e, waited, expired, err = p.g.await(ctx, w, p.opts.LeaseTimeout)
		if err != nil && e != nil {
			p.destroyAndFree(e, reasonClose) // stranded by Close as we gave up
		}
		s := p.g.slots.mine()
		s.waits.Add(1)
		s.waitTime.Add(int64(waited))
		switch {
		case err == nil:
		case expired:
			p.c.timeouts.Add(1)
			p.leaseFailed(ctx, errTimeout)
			return Lease[T]{}, fmt.Errorf("%w: pool %q: every item stayed leased (MaxSize %d) for %v", ErrLeaseTimeout, p.opts.Name, p.opts.MaxSize, waited.Round(time.Millisecond))
		case err == ErrClosed:
			p.leaseFailed(ctx, errClosed)
			return Lease[T]{}, err
		default:
			p.c.canceled.Add(1)
			p.leaseFailed(ctx, errCanceled)
			return Lease[T]{}, err
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
			p.c.canceled.Add(1)
			failed = errCanceled
		}
		p.leaseFailed(ctx, failed)
		return Lease[T]{}, err
	}
	p.g.slots.mine().leases.Add(1)
	if p.m != nil && w != nil {
		p.m.waitTime.Record(ctx, waited.Seconds(), p.m.rec...)
	}
	if p.sites {
		recordSite(e)
	}
	return Lease[T]{e: e, gen: e.gen.Load()}, nil
}

// leaseFailed counts a failed lease in pool.lease.errors.
func (p *Pool[T]) leaseFailed(ctx context.Context, t errType) {
	if p.m != nil {
		p.m.leaseFailed(ctx, t)
	}
}

// obtain turns a held permit into a ready item: e (an item that came with
// the permit) or the idle items, oldest first, judged against one clock
// read; else a fresh one. On error, and when user code panics, the permit
// is returned and any item in hand destroyed; failed says which step
// failed, for pool.lease.errors (the caller tells a ctx that ended, or a
// Close, from the factory's or the Preparer's own failure).
func (p *Pool[T]) obtain(ctx context.Context, e *entry[T]) (_ *entry[T], failed errType, err error) {
	done := false
	defer func() {
		if !done { // an error, or a panic on its way to the caller
			if e != nil {
				p.destroyAndFree(e, reasonPrepare)
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
		}
		why, expired := p.expired(e, now)
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
		p.destroyItem(victim, why)
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
			p.destroyItem(victim, reasonPrepare)
			return nil, errPrepare, err
		}
	}
	done = true
	return e, 0, nil
}

// expired says whether an idle item has outlived MaxLifetime or IdleTimeout.
func (p *Pool[T]) expired(e *entry[T], now int64) (reason, bool) {
	if p.opts.MaxLifetime > 0 && now-e.created > int64(p.opts.MaxLifetime) {
		return reasonLifetime, true
	}
	if p.opts.IdleTimeout > 0 && now-e.idleAt > int64(p.opts.IdleTimeout) {
		return reasonIdle, true
	}
	return 0, false
}

// needsCheck says whether the Preparer must see an idle item: always when it
// has never accepted the item, else when it sat idle for CheckAfterIdle.
func (p *Pool[T]) needsCheck(e *entry[T], now int64) bool {
	return p.opts.Preparer != nil &&
		(!e.checked || p.opts.CheckAfterIdle == 0 || now-e.idleAt >= int64(p.opts.CheckAfterIdle))
}

// prepare runs IsReady and, when the item is not ready, Prepare, within
// PreparationTimeout.
func (p *Pool[T]) prepare(ctx context.Context, e *entry[T]) error {
	if p.m != nil {
		start := p.now()
		defer func() { p.m.prepTime.Record(ctx, seconds(p.now()-start), p.m.rec...) }()
	}
	pctx := ctx
	if p.opts.PreparationTimeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, p.opts.PreparationTimeout)
		defer cancel()
	}
	ready, err := p.opts.Preparer.IsReady(pctx, e.value)
	if err == nil && !ready {
		err = p.opts.Preparer.Prepare(pctx, e.value)
	}
	if err != nil {
		p.c.prepareFail.Add(1)
		if p.m != nil {
			p.m.prepErrors.Add(ctx, 1, p.m.add...)
		}
		if ctx.Err() == nil && pctx.Err() != nil {
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
	panicVal any
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
		panic(c.panicVal)
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
			if c.panicVal = recover(); c.panicVal == nil {
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
// this item. A failure (or a panic) counts as a failed creation and frees
// the permit; an item goes idle, or to a waiter. On a closed pool the item
// is destroyed here, on the pool's own goroutine: a Destroy panic has no
// caller to reach, so it is dropped (the item counts as destroyed and its
// permit is freed all the same) rather than crash the program.
func (p *Pool[T]) adopt(c *creation[T]) {
	if c.panicked || c.err != nil {
		p.g.passOn(nil)
		return
	}
	defer func() { _ = recover() }()
	p.putBack(c.e)
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
	p.c.created.Add(1)
	if p.m != nil {
		p.m.created.Add(ctx, 1, p.m.add...)
	}
	now := p.now()
	e := &entry[T]{value: v, pool: p, created: now, idleAt: now}
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
		if p.opts.MaxLifetime > 0 && now-e.created > int64(p.opts.MaxLifetime) {
			p.destroyAndFree(e, reasonLifetime)
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

// reset runs Options.Reset; when it fails or panics the item is destroyed
// and its permit freed, and reset reports false (or the panic goes on).
func (p *Pool[T]) reset(e *entry[T]) (ok bool) {
	defer func() {
		if !ok {
			p.destroyAndFree(e, reasonReset)
		}
	}()
	return p.opts.Reset(e.value) == nil
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
		p.destroyAndFree(e, reasonClose)
	}
}

// detach takes the item of a lease that Detach ended out of the pool.
func (p *Pool[T]) detach(e *entry[T]) T {
	e.cleanup.Stop() // the entry is garbage from now on, not a leak
	v := e.value
	p.c.detached.Add(1)
	p.g.passOn(nil)
	return v
}

// destroyItem disposes of an item and counts it, also when Destroy panics.
func (p *Pool[T]) destroyItem(e *entry[T], why reason) error {
	e.cleanup.Stop() // the entry is garbage from now on, not a leak
	defer p.countDestroyed(why)
	if err := p.destroy(e.value); err != nil {
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

// destroyAll destroys items whose permits the caller holds and frees the
// permits. Every item is destroyed even when a Destroy panics; the first
// panic is raised again at the end.
func (p *Pool[T]) destroyAll(es []*entry[T], why reason) error {
	var errs []error
	var panicVal any
	panicked := false
	for _, e := range es {
		func() {
			defer func() {
				if r := recover(); r != nil && !panicked {
					panicked, panicVal = true, r
				}
			}()
			if err := p.destroyAndFree(e, why); err != nil {
				errs = append(errs, err)
			}
		}()
	}
	if panicked {
		panic(panicVal)
	}
	return errors.Join(errs...)
}

func (p *Pool[T]) countDestroyed(why reason) {
	switch why {
	case reasonIdle:
		p.c.idleExpired.Add(1)
	case reasonLifetime:
		p.c.lifetimeExpired.Add(1)
	}
	p.c.destroyed.Add(1)
	if p.m != nil {
		p.m.itemDestroyed(why)
	}
}

// Clear destroys the idle items, then creates idle items until MinSize are
// idle, as far as free permits allow: it never creates past MaxSize. Leased
// items are untouched. A failed creation ends the refill quietly; leases
// create items on demand.
func (p *Pool[T]) Clear() {
	_ = p.destroyAll(p.g.drainIdle(), reasonClear) // errors have no one to go to
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
			p.g.passOn(nil) // failed or panicked: the permit goes back
		}
	}()
	var err error
	if e, err = p.createDetached(context.Background()); err != nil {
		return false
	}
	p.putBack(e)
	return true
}

// Close closes the pool: new leases fail with ErrClosed, every waiter is
// woken with ErrClosed, idle items are destroyed now and leased items when
// they come back; creations in flight are canceled through their context.
// The pool's gauges stop reporting; its counters and histograms go on
// recording what the leases still out do. It returns the joined errors of
// the destroys it ran. A lease already past the gate may still succeed; its
// item is destroyed on release. Close is idempotent: later calls do nothing
// and return nil.
func (p *Pool[T]) Close() error {
	es, first := p.g.close()
	if !first {
		return nil
	}
	p.cancel()
	var unreg error
	if p.m != nil {
		unreg = p.m.unregister()
	}
	return errors.Join(p.destroyAll(es, reasonClose), unreg)
}

// Shutdown closes the pool, then waits until every lease has ended and every
// creation has finished (the gate's full weight is free), or until ctx ends,
// when it returns ctx.Err(). A leaked lease holds its permit forever, so only
// ctx ends such a Shutdown. Errors from Close are joined to the result.
func (p *Pool[T]) Shutdown(ctx context.Context) error {
	err := p.Close()
	select {
	case <-p.g.whenDrained():
		return err
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}

// Stats returns a snapshot of the pool's figures.
func (p *Pool[T]) Stats() Stats {
	created := p.c.created.Load() // before Destroyed and Detached: see Stats
	held, idle, queued, sums := p.g.counts()
	return Stats{
		Name:            p.opts.Name,
		MinSize:         p.opts.MinSize,
		MaxSize:         p.opts.MaxSize,
		ItemsAllocated:  held + idle,
		ItemsAvailable:  idle,
		ActiveLeases:    held,
		QueuedLeases:    queued,
		Leases:          sums.leases,
		Waits:           sums.waits,
		WaitTime:        time.Duration(sums.waitTime),
		Timeouts:        p.c.timeouts.Load(),
		Canceled:        p.c.canceled.Load(),
		Created:         created,
		Destroyed:       p.c.destroyed.Load(),
		Detached:        p.c.detached.Load(),
		IdleExpired:     p.c.idleExpired.Load(),
		LifetimeExpired: p.c.lifetimeExpired.Load(),
		PrepareFailed:   p.c.prepareFail.Load(),
		Leaked:          p.leaks.leaked.Load(),
	}
}
