package pool

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// The pool: New, the lease and release paths, and the calls that change or
// end a pool's life (Clear, Close, Shutdown, SetMaxSize).
//
// The invariant: a lease takes a permit from the gate before it touches an
// item, and every way out of the lease path either hands the caller that
// permit with an item or returns it exactly once: on an error, and on a
// panic or runtime.Goexit of user code on the way (obtain's deferred call).
// Ending the lease (Release, Discard, Detach) gives the permit back with
// the item, or frees it once the item is destroyed or detached. The fast
// path, an idle item in this processor's slot with nothing to judge, is
// written out in lease and release; waiting, creation and preparation are
// out of line, in leaseSlow.

// Pool is a bounded pool of items of type T. It is safe for use by many
// goroutines. Create one with New; end it with Close or Shutdown.
type Pool[T any] struct {
	g       gate[T]
	factory Factory[T]
	opts    Options[T] // with defaults; immutable after New

	// nillable: T has a nil value (pointer, interface, map, slice, chan,
	// func), which a factory must not return as an item.
	nillable bool

	// judge: a lease must look at an idle item before handing it out
	// (expiry or preparation). stamp: a release must read the clock.
	// sites: each lease records where it was taken (TrackLeaseSites).
	// plain: neither judge nor sites, no LeakThreshold and no metrics, so
	// an idle item from a slot or the gate completes a lease as it is, and
	// a release parks it as it is: the fast path. light: neither judge nor
	// sites, but LeakThreshold or metrics, so an idle item from a slot
	// completes a lease with the little lent adds: the fast path's twin.
	// ends: the end of a lease has something to account for (LeakThreshold
	// or metrics: see leaseEnded). more: a release must do more than park
	// the item (stamp or ends); it sits where stamp did, so that release
	// reads the same byte. marks: the pool marks its own holds of an item
	// between leases, for the watcher (holders.go).
	judge, more, sites, plain, stamp, light, ends, marks bool

	epoch   int64        // monotime at New
	started time.Time    // time.Now at New, for Lease.CreatedAt
	clock   func() int64 // test hook: nanoseconds since epoch; nil: the real clock

	done   context.Context // canceled by Close: ends creations in flight
	cancel context.CancelFunc

	c counters

	m     *metrics  // nil without a MeterProvider: see metrics.go
	leaks *leakSink // what the entries' cleanups reach: see lease.go

	// Made once (exhausted again by SetMaxSize), so that a failing lease
	// allocates nothing.
	exhausted atomic.Pointer[exhaustedErrs]
	errClosed error
	// resizing serializes SetMaxSize calls, so that exhausted names the
	// size the last of them set.
	resizing sync.Mutex

	// sweepEvery is how often the idle items are swept for expiry (0: never:
	// neither IdleTimeout nor MaxLifetime is set); sweepAt, the pool clock
	// at which the next lease or release that reads the clock sweeps. See
	// "Sweeping" in expiry.go.
	sweepEvery int64
	sweepAt    atomic.Int64

	// awake is slots.trigger while no watcher sleeps, and the scrambled
	// count below which a lease is sampled for pool.lease.use_time (see
	// sampledForUse): useSampleBelow with metrics, else 0.
	awake uint64

	upkeep *upkeeper // nil without UpkeepInterval: see upkeep.go
	// Clear's refills, the seeding in the background, the watcher and its
	// reports: see create.go. Apart from the pool, so that a task can
	// outlive a pool dropped without Close without keeping it alive.
	tasks *tasks

	reg   registry[T]           // every entry in existence, held weakly: see holders.go
	watch *watcher              // nil without LeakThreshold: see holders.go
	self  weak.Pointer[Pool[T]] // for the watcher, which holds the pool weakly
}

// New returns a pool that creates items with f, configured by opts, after
// creating opts.MinSize items. It returns an error wrapping
// ErrInvalidOptions when opts (or f) is invalid (see Options.Validate);
// when a factory call fails while seeding, it destroys the items already
// created and returns that error. ctx bounds only the seeding; New panics
// when it is nil. With Options.SeedInBackground, New returns without
// waiting for any creation: the MinSize items are created in the
// background, and a failure there is logged and retried, never returned.
func New[T any](ctx context.Context, f Factory[T], opts Options[T]) (*Pool[T], error) {
	if ctx == nil {
		panic(errNilContext)
	}
	if isNil(f) {
		return nil, fmt.Errorf("%w: the factory is nil", ErrInvalidOptions)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts, _ = opts.withDefaults()
	m, err := newMetrics(opts.MeterProvider, opts.Name)
	if err != nil {
		return nil, err
	}
	p := &Pool[T]{
		factory:  f,
		opts:     opts,
		nillable: canBeNil(reflect.TypeFor[T]()),
		judge:    opts.Preparer != nil || opts.IdleTimeout > 0 || opts.MaxLifetime > 0,
		stamp:    opts.IdleTimeout > 0 || opts.MaxLifetime > 0 || opts.Preparer != nil && opts.CheckAfterIdle > 0,
		sites:    opts.TrackLeaseSites,
		epoch:    monotime(),
		started:  time.Now(),
		clock:    upkeepTestHooks.clock,
		m:        m,
		tasks:    new(tasks),
	}
	if opts.LeakThreshold > 0 {
		p.watch = newWatcher(opts.LeakThreshold)
	}
	p.plain = !p.judge && !p.sites && p.watch == nil && m == nil
	p.light = !p.judge && !p.sites && !p.plain
	p.ends = p.watch != nil || m != nil
	p.more = p.stamp || p.ends
	p.marks = p.watch != nil && !p.sites
	p.self = weak.Make(p)
	if m != nil {
		p.awake = useSampleBelow
	}
	p.g.slots.trigger.Store(p.awake)
	if p.watch != nil {
		p.g.slots.trigger.Store(watcherAsleep)
	}
	if p.opts.Destroy == nil {
		p.opts.Destroy = closeItem[T]
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
	if !opts.SeedInBackground {
		if err := p.seed(ctx); err != nil {
			p.cancel()
			return nil, err
		}
	}
	if opts.UpkeepInterval > 0 {
		p.upkeep = startUpkeep(p)
	}
	if opts.SeedInBackground && opts.MinSize > 0 {
		p.seedInBackground()
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
	// park is in release: see docs/DESIGN.md, "Take and park, written out",
	// for what the calls cost).
	if r := &p.g.slots; !r.bypass.Load() {
		pid := procPin()
		s := &r.s[pid&r.mask]
		// Load first: a miss then costs no locked instruction.
		if e := s.e.Load(); e != nil && s.e.CompareAndSwap(e, nil) {
			// An item from before the last Clear is never lent again
			// (see retired): the one load and compare this costs is on a
			// line that the take has read already.
			if p.plain {
				if e.era == r.era.Load() {
					r.countLease(pid) // still pinned: see countLease
					procUnpin()
					return Lease[T]{e: e, gen: e.gen.Load()}, nil
				}
			} else if p.light {
				if e.era == r.era.Load() {
					// The light pool's twin of the plain branch: one
					// compare says whether this lease is sampled or the
					// watcher sleeps (see slots.trigger, lentRare).
					if k := r.countLeaseN(pid); k*fibonacci < r.trigger.Load() {
						p.lentRare(e, k)
					}
					procUnpin()
					return Lease[T]{e: e, gen: e.gen.Load()}, nil
				}
			}
			procUnpin()
			return p.leaseSlow(ctx, e, nil, admitted)
		}
		procUnpin()
	}
	// The next fastest: an idle item from the gate, in the critical
	// section that queues the lease when no permit is free.
	var queue context.Context
	if wait {
		queue = ctx
	}
	e, w, a := p.g.acquire(p.plain, queue)
	if a == admitted && p.plain {
		return Lease[T]{e: e, gen: e.gen.Load()}, nil
	}
	return p.leaseSlow(ctx, e, w, a)
}

// lentRare is the rare part of a lease of e in a pool that is not plain,
// the one with k leases before it on its processor, which the caller has
// pinned (and finds pinned again when it returns): the lease is sampled
// for pool.lease.use_time, or the watcher of LeakThreshold sleeps and must
// be woken, or both.
func (p *Pool[T]) lentRare(e *entry[T], k uint64) {
	if k*fibonacci < p.awake {
		p.sampleUse(e) // the clock, read pinned: nothing that may block
	}
	// With TrackLeaseSites, recordSite wakes the watcher instead, once the
	// watcher can see the lease (see holders.go, "Waking the watcher").
	if !p.sites && p.g.slots.trigger.Load() == watcherAsleep {
		procUnpin() // starting a goroutine takes locks
		p.wakeWatcher()
		procPin()
	}
}

// sampleUse stamps the start of a lease of e that pool.lease.use_time
// samples, and notes on e that the lease's end has something to do.
func (p *Pool[T]) sampleUse(e *entry[T]) {
	e.useFrom = p.now()
	e.ends.Or(endSampled)
}

// Do leases an item, calls fn with it and ends the lease: Release when fn
// returns, Discard when fn's error wraps ErrBroken (the item is broken:
// destroy it, and make room for a fresh one) or when fn panics, in which
// case the panic goes on once the item is discarded. It returns fn's error
// as it is, or Lease's error when no item could be leased; ctx bounds the
// lease only, not fn. Do panics when ctx is nil.
//
//	err := p.Do(ctx, func(c *Conn) error {
//		if err := c.Send(msg); err != nil {
//			return fmt.Errorf("send: %w: %w", pool.ErrBroken, err)
//		}
//		return nil
//	})
func (p *Pool[T]) Do(ctx context.Context, fn func(item T) error) error {
	l, err := p.lease(ctx, true)
	if err != nil {
		return err
	}
	if p.sites {
		recordSite(l.e) // here, so that the stack walk starts right at Do's caller
	}
	returned := false
	defer func() {
		if !returned {
			l.Discard() // fn panicked, or called runtime.Goexit: the item may be half-used
		}
	}()
	err = fn(l.Value())
	returned = true
	if errors.Is(err, ErrBroken) {
		l.Discard()
	} else {
		l.Release()
	}
	return err
}

// leaseSlow finishes a lease that the fast path could not, after the gate's
// admission a: it waits for a permit when the lease queued (w), then
// obtains an item: e, when an idle one came with the permit, else another
// idle one or a fresh one.
func (p *Pool[T]) leaseSlow(ctx context.Context, e *entry[T], w *waiter[T], a admission) (Lease[T], error) {
	var waited time.Duration
	switch a {
	case admitted, admitRetired, admitRoom:
	case refusedClosed:
		return p.leaseFailed(ctx, errClosed, p.errClosed)
	case refusedCanceled:
		return p.leaseFailed(ctx, errCanceled, ctx.Err())
	case refusedInUse:
		return p.leaseFailed(ctx, errExhausted, p.exhausted.Load().inUse)
	case refusedQueue:
		return p.leaseFailed(ctx, errExhausted, p.exhausted.Load().queue)
	case queued:
		var expired bool
		var err error
		e, waited, expired, err = p.g.await(ctx, w, p.opts.LeaseTimeout)
		if err != nil && e != nil {
			// An item granted as we gave up, on a pool that closed or
			// shrank meanwhile: nobody else may have it.
			p.destroyAndFreeLogged(e, p.refusedWhy())
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
	k := p.g.slots.countLeaseN(procPin())
	procUnpin()
	if p.m != nil && a == queued {
		p.m.waitTime.Record(ctx, waited.Seconds(), p.m.rec...)
	}
	// The one compare the light branch makes, then lentRare's work,
	// unpinned here.
	if r := &p.g.slots; k*fibonacci < r.trigger.Load() {
		if k*fibonacci < p.awake {
			p.sampleUse(e)
		}
		if !p.sites && r.trigger.Load() == watcherAsleep {
			p.wakeWatcher() // with TrackLeaseSites, recordSite does
		}
	}
	return Lease[T]{e: e, gen: e.gen.Load()}, nil
}

// errType classifies a failed lease: the error.type of pool.lease.errors.
type errType int

const (
	errTimeout errType = iota
	errCanceled
	errClosed
	errExhausted
	errCreate
	errPrepare
	numErrTypes
)

var errTypeNames = [numErrTypes]string{"timeout", "canceled", "closed", "exhausted", "create", "prepare"}

// String returns the error.type that pool.lease.errors records.
func (t errType) String() string { return errTypeNames[t] }

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
				p.destroyAndFreeLogged(e, reasonPrepare)
			} else {
				p.g.free()
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
		if p.retired(e) {
			victim := e
			e = nil
			p.destroyLogged(victim, reasonClear)
			continue
		}
		if !p.judge {
			done = true
			return e, 0, nil
		}
		if p.marks {
			e.hold() // judged, checked or swept for: not a lease yet
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
				if p.marks {
					e.unhold()
				}
				p.giveBack(e)
				return nil, errCanceled, err
			}
			if err = p.prepare(ctx, e); err != nil {
				why, expired = reasonPrepare, true
			}
		}
		if !expired {
			done = true
			if p.stamp {
				e.idleFor = max(now-e.idleAt, 0)
			}
			if p.marks {
				e.unhold()
			}
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
		e.hold() // still being created, as far as Outstanding can tell
		if err = p.prepare(ctx, e); err != nil {
			victim := e
			e = nil
			p.destroyLogged(victim, reasonPrepare)
			return nil, errPrepare, err
		}
		e.unhold()
	}
	done = true
	return e, 0, nil
}

// release takes back the item of a lease that Release ended. The plain
// path is written out here; whatever else a pool does on release starts in
// a branch of its own (retired, Reset, more), so that it adds nothing to
// the plain path.
func (p *Pool[T]) release(e *entry[T]) {
	if p.retired(e) {
		p.releaseRetired(e)
		return
	}
	if p.opts.Reset != nil && !p.reset(e) {
		return
	}
	if p.more {
		// The light pool's twin of the park below, for the release whose
		// lease's end has nothing to account for (most: see entry.ends).
		// It pins first: a block that starts with a call
		// is laid out of line, so the plain path falls through to the park
		// as it did before this branch had more than a call in it.
		pid := procPin()
		if !p.light {
			procUnpin()
			p.releaseMore(e, pid)
			return
		}
		if e.ends.Load() != 0 {
			procUnpin()
			p.releaseMore(e, pid)
			return
		}
		procUnpin()
		if r := &p.g.slots; !r.bypass.Load() {
			s := &r.s[pid&r.mask]
			if s.e.CompareAndSwap(nil, e) && r.confirm(s, e) {
				return
			}
		}
		p.giveBackToGate(e)
		return
	}
	// slots.park, written out for the same reason as in lease.
	if r := &p.g.slots; !r.bypass.Load() {
		s := &r.s[procPin()&r.mask]
		procUnpin()
		if s.e.CompareAndSwap(nil, e) && r.confirm(s, e) {
			return
		}
	}
	p.giveBackToGate(e)
}

// releaseMore is release past Reset for a pool that does more than park
// the item: it accounts for the lease's end (reset did already, before
// Reset ran, when there is one), then stamps the release or parks the
// item as release does, in the slot of processor pid, which release
// pinned already: the goroutine may have moved since, which costs only
// locality (see ring.go).
func (p *Pool[T]) releaseMore(e *entry[T], pid int) {
	if p.ends && p.opts.Reset == nil {
		p.leaseEnded(e)
	}
	if p.stamp {
		// The sweep for expiry when one is due, else the judgement of the
		// item's lifetime and the stamp of its release.
		now := p.now()
		if p.sweepEvery > 0 && now >= p.sweepAt.Load() {
			p.sweepThenRelease(e, now)
			return
		}
		p.releaseAt(e, now)
		return
	}
	if r := &p.g.slots; !r.bypass.Load() {
		s := &r.s[pid&r.mask]
		if s.e.CompareAndSwap(nil, e) && r.confirm(s, e) {
			return
		}
	}
	p.giveBackToGate(e)
}

// releaseRetired destroys the item of a lease that Release ended, when the
// item was created before the last Clear.
func (p *Pool[T]) releaseRetired(e *entry[T]) {
	if p.ends {
		p.leaseEnded(e)
	}
	p.destroyAndFreeLogged(e, reasonClear)
}

// discard destroys the item of a lease that Discard ended.
func (p *Pool[T]) discard(e *entry[T]) {
	if p.ends {
		p.leaseEnded(e)
	}
	p.destroyAndFreeLogged(e, reasonDiscard)
}

// sweepThenRelease sweeps, then releases e as releaseAt does, also when a
// Destroy of the sweep calls runtime.Goexit (t.FailNow in a test): the
// released item is never lost on the way.
func (p *Pool[T]) sweepThenRelease(e *entry[T], now int64) {
	if p.marks {
		e.hold() // between two leases, for as long as the sweep's Destroys take
	}
	swept := false
	defer func() {
		if !swept {
			if p.marks {
				e.unhold()
			}
			p.releaseAt(e, now)
		}
	}()
	p.sweep(now)
	swept = true
	if p.marks {
		e.unhold()
	}
	p.releaseAt(e, now)
}

// releaseAt destroys e when it is past its lifetime at now, else stamps it
// released at now and gives it back.
func (p *Pool[T]) releaseAt(e *entry[T], now int64) {
	if now > e.deadline {
		p.destroyAndFreeLogged(e, reasonLifetime)
		return
	}
	e.idleAt = now
	p.giveBack(e)
}

// reset runs Options.Reset; when it fails (the error is logged: Release
// has no caller to return it to), panics or calls runtime.Goexit, the item
// is destroyed and its permit freed, and reset reports false (or the panic
// goes on).
func (p *Pool[T]) reset(e *entry[T]) (ok bool) {
	if p.ends {
		p.leaseEnded(e) // the lease ended with Release, before Reset
	}
	if p.marks {
		e.hold() // between two leases, for as long as Reset takes
	}
	defer func() {
		if !ok {
			p.destroyAndFreeLogged(e, reasonReset)
		}
	}()
	if err := p.opts.Reset(e.value); err != nil {
		p.warn("reset item; destroying it", fmt.Errorf("pool %q: reset item: %w", p.opts.Name, err))
		return false
	}
	if p.marks {
		e.unhold()
	}
	return true
}

// giveBack makes an item whose permit the caller holds idle: parked in this
// processor's slot, with its permit, when nobody waits; else through the
// gate, to the oldest waiter or the idle queue. On a closed pool, or one
// that holds more items than MaxSize after a shrink, it destroys the item.
func (p *Pool[T]) giveBack(e *entry[T]) {
	if p.retired(e) {
		p.destroyAndFreeLogged(e, reasonClear)
		return
	}
	if !p.g.slots.park(e) {
		p.giveBackToGate(e)
	}
}

// giveBackToGate is giveBack without the slot: the item goes to the oldest
// waiter or the idle queue, where the sweep and the upkeep see it.
func (p *Pool[T]) giveBackToGate(e *entry[T]) {
	if p.retired(e) {
		p.destroyAndFreeLogged(e, reasonClear)
		return
	}
	if !p.g.giveBack(e) {
		p.destroyAndFreeLogged(e, p.refusedWhy())
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
	if p.ends {
		p.leaseEnded(e)
	}
	e.cleanup.Stop() // the entry is garbage from now on, not a leak
	p.reg.remove(e)
	v := e.value
	p.c.mu.Lock()
	p.c.detached++
	p.c.mu.Unlock()
	p.g.free()
	return v
}

// Clear retires every item in the pool, as a failover asks: it destroys the
// idle items now, and every item leased when Clear is called, or being
// created then, when its lease ends, instead of lending it again. Items
// whose creation starts after Clear are untouched. Then it refills the
// idle items to MinSize in the background, as far as MaxSize allows, within
// CreateTimeout and until Close: Clear returns once the idle items are
// destroyed, without waiting for the refill or for the leases. Errors
// (and panics of the factory) have no caller to go to: they are counted
// and logged. A panic of Destroy reaches the caller, once every idle item
// is destroyed.
func (p *Pool[T]) Clear() {
	defer p.refill() // after a Destroy's panic or Goexit too
	if err := p.destroyAll(p.g.clear(), reasonClear); err != nil {
		p.warn("clear: destroy idle items", err)
	}
}

// retired reports whether e was created, or began its creation, before the
// last Clear: then it is destroyed where it would go idle or be lent.
func (p *Pool[T]) retired(e *entry[T]) bool {
	return e.era != p.g.slots.era.Load()
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
	return p.close(context.Background())
}

// close is Close, with ctx bounding its wait for the background work.
func (p *Pool[T]) close(ctx context.Context) error {
	es, first := p.g.close()
	if !first {
		return nil
	}
	p.cancel()
	if p.upkeep != nil {
		p.upkeep.stop()
	}
	p.tasks.stop()
	_ = p.waitBackground(ctx) // Shutdown reports it
	var unreg error
	if p.m != nil {
		unreg = p.m.unregister()
	}
	return errors.Join(p.destroyAll(es, reasonClose), unreg)
}

// waitBackground waits, after Close, until no callback of the pool's own
// work (the upkeep, Clear's refills, the seeding) runs, or ctx ends.
func (p *Pool[T]) waitBackground(ctx context.Context) error {
	if p.upkeep != nil {
		if err := p.upkeep.wait(ctx); err != nil {
			return err
		}
	}
	return p.tasks.wait(ctx)
}

// Shutdown closes the pool, then waits until every lease has ended, every
// creation has finished and the pool's background work has stopped, or
// until ctx ends, when it returns ctx.Err(). A leaked lease never ends, so
// only ctx ends such a Shutdown; so does a Shutdown called from a callback
// of the upkeep (a Preparer, factory or Destroy it runs), which waits for
// the item that callback holds. On a pool that has drained, Shutdown
// returns nil (plus Close's errors) even when ctx has already ended. Errors
// from Close are joined to the result. Shutdown panics when ctx is nil.
func (p *Pool[T]) Shutdown(ctx context.Context) error {
	if ctx == nil {
		panic(errNilContext)
	}
	err := p.close(ctx)
	if werr := p.waitBackground(ctx); werr != nil {
		return errors.Join(err, werr)
	}
	if werr := awaitOr(ctx, p.g.whenDrained()); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// awaitOr waits until done is closed, and returns nil, or until ctx ends,
// and returns ctx.Err(). When both are ready, done wins: the outcome never
// depends on a select's random choice.
func awaitOr(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done: // both at once: done it is
			return nil
		default:
			return ctx.Err()
		}
	}
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

// exhaustedErrs are the errors a refused TryLease returns: every item in
// use, or other leases waiting already.
type exhaustedErrs struct{ inUse, queue error }

// setErrExhausted makes the errors a refused TryLease returns, naming size.
func (p *Pool[T]) setErrExhausted(size int) {
	p.exhausted.Store(&exhaustedErrs{
		inUse: fmt.Errorf("%w: pool %q: every item is in use (MaxSize %d)", ErrExhausted, p.opts.Name, size),
		queue: fmt.Errorf("%w: pool %q: other leases are waiting for an item (MaxSize %d), and TryLease does not wait behind them", ErrExhausted, p.opts.Name, size),
	})
}
