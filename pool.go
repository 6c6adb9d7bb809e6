package pool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// The pool: its type, New, and the calls that change or end its life
// (Clear, Close, Shutdown, SetMaxSize). A lease's way is in lease_path.go,
// the way back in release_path.go.
//
// The invariant: a lease takes a permit from the gate before it touches an
// item, and every way out of the lease path either hands the caller that
// permit with an item or returns it exactly once, also on a panic or
// runtime.Goexit of user code on the way. Ending the lease gives the
// permit back with the item, or frees it once the item is destroyed or
// detached.

// Pool is a bounded pool of items of type T. It is safe for use by many
// goroutines. Create one with New; end it with Close or Shutdown.
type Pool[T any] struct {
	g       gate[T]
	factory Factory[T]
	opts    Options[T] // with defaults; immutable after New

	// nillable: T has a nil value (pointer, interface, map, slice, chan,
	// func), which a factory must not return as an item.
	nillable bool

	route route // which way leases and releases go: fixed by New

	// useSampleBelow is the scrambled count below which a lease is sampled
	// for pool.lease.use_time (sampledForUse): useSampleBelow, but in tests.
	useSampleBelow uint64

	epoch   int64        // monotime at New
	started time.Time    // time.Now at New, for Lease.CreatedAt
	clock   func() int64 // testClock at New: nanoseconds since epoch; nil: the real clock

	done   context.Context // canceled by Close: ends creations in flight
	cancel context.CancelFunc

	c      counters
	health health // the creations' failures: FailFastAfter, ErrLeaseTimeout's cause

	m     *metrics  // nil without a MeterProvider: see metrics.go
	leaks *leakSink // what the entries' cleanups reach: see leaks.go

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

	upkeep *upkeeper // nil without UpkeepInterval: see upkeep.go
	// The filler's rounds, the watcher and its reports: see tasks.go. Apart
	// from the pool, so that a task can outlive a pool dropped without
	// Close without keeping it alive.
	tasks *tasks
	// The filler (create.go, "Creating on the pool's own account"): asks
	// (nil without MinSize or MinIdle) wakes it, wants says what to fill,
	// filling that it has started, refillAfter when the last Clear's
	// destroys end.
	asks        chan struct{}
	wants       atomic.Uint32
	filling     atomic.Bool
	refillAfter atomic.Pointer[<-chan struct{}]
	// destroys runs the Destroy calls, on goroutines of their own (see
	// destroy.go); unlike tasks it is never stopped: a lease that ends
	// after Close still has its item destroyed.
	destroys *tasks

	reg     registry[T]           // every entry in existence, held weakly: see holders.go
	watcher *watcher              // nil without LeakThreshold: see watcher.go
	self    weak.Pointer[Pool[T]] // for the watcher, which holds the pool weakly
}

// route is which way a pool's leases and releases go, fixed by New from the
// options, so that the fast path does no more than the options ask.
type route struct {
	lease   leaseWay
	release releaseWay

	// judged: a lease looks at an idle item before lending it, which may
	// have expired (IdleTimeout, MaxLifetime) or need a check (Preparer).
	judged bool
	// stamped: a release reads the clock, to judge the item's lifetime and
	// stamp when it went idle (IdleTimeout, MaxLifetime, or a Preparer with
	// CheckAfterIdle).
	stamped bool
	// recorded: each lease records when it began (LeakThreshold or
	// TrackLeaseSites) and sited, where (TrackLeaseSites): leaks.go.
	recorded, sited bool
	// traced: every lease goes through leaseTraced, and every release
	// through releaseTraced, for Options.Tracer (trace.go).
	traced bool
	// edge: traced or recorded; a lease goes through leaseAtEdge.
	edge bool
}

// leaseWay is what a lease does with the idle item it takes from its
// processor's slot.
type leaseWay uint8

const (
	// leaseAsIs: the idle item is the lease, as it is (the fast path).
	leaseAsIs leaseWay = iota
	// leaseSampled: as leaseAsIs, and one lease in useSampleEvery is
	// sampled for pool.lease.use_time (a MeterProvider).
	leaseSampled
	// leaseJudged: every lease takes the slow path: its item is judged.
	leaseJudged
)

// releaseWay is what a release does before the item goes idle.
type releaseWay uint8

const (
	// releaseParks: nothing; the item is parked as it is (the fast path).
	releaseParks releaseWay = iota
	// releaseAccounts: the lease's end may have something to account for
	// (a use_time sample, a lease reported as held): one load of
	// entry.atEnd says.
	releaseAccounts
	// releaseSlowly: Reset runs, uses are counted, or the clock is read:
	// releaseSlow.
	releaseSlowly
	// releaseTraced: releaseSlow, and then the Tracer sees the end.
	releaseTraced
)

// routeFor is the route of a pool with the options o, with metrics or not.
func routeFor[T any](o Options[T], withMetrics bool) route {
	r := route{
		judged:  o.Preparer != nil || o.IdleTimeout > 0 || o.MaxLifetime > 0,
		stamped: o.IdleTimeout > 0 || o.MaxLifetime > 0 || o.Preparer != nil && o.CheckAfterIdle > 0,
		sited:   o.TrackLeaseSites,
		traced:  o.Tracer != nil,
	}
	watched := o.LeakThreshold > 0
	r.recorded = watched || r.sited
	r.edge = r.traced || r.recorded
	switch {
	case r.judged:
		r.lease = leaseJudged
	case withMetrics:
		r.lease = leaseSampled
	}
	r.release = releaseWayFor(r, o.Reset != nil || o.MaxUses > 0, withMetrics || watched)
	return r
}

// releaseWayFor is the release way of the route r: slow, that a release
// runs Reset or counts uses; accounts, that the end of a lease may have
// something to account for.
func releaseWayFor(r route, slow, accounts bool) releaseWay {
	switch {
	case r.traced:
		return releaseTraced
	case r.stamped || slow:
		return releaseSlowly
	case accounts:
		return releaseAccounts
	}
	return releaseParks
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
	opts, err := opts.withDefaults() // Validate's checks
	if err != nil {
		return nil, err
	}
	p, err := newPool(f, opts)
	if err != nil {
		return nil, err
	}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// testClock, set by tests only, becomes the pool clock of every pool New
// makes while it is set: so that it is in place before anything of the
// pool's runs (set after New, it would race with the upkeep).
var testClock func() int64

// newPool derives a pool's state from f and valid options: nothing runs
// yet.
func newPool[T any](f Factory[T], opts Options[T]) (*Pool[T], error) {
	m, err := newMetrics(opts.MeterProvider, opts.Name)
	if err != nil {
		return nil, err
	}
	if opts.Destroy == nil {
		opts.Destroy = closeItem[T]
	}
	p := &Pool[T]{
		factory:        f,
		opts:           opts,
		nillable:       canBeNil(reflect.TypeFor[T]()),
		route:          routeFor(opts, m != nil),
		useSampleBelow: useSampleBelow,
		epoch:          monotime(),
		started:        time.Now(),
		clock:          testClock,
		m:              m,
		tasks:          new(tasks),
		destroys:       &tasks{othersOnly: true},
		errClosed:      fmt.Errorf("%w: pool %q", ErrClosed, opts.Name),
		sweepEvery:     sweepPeriod(opts.IdleTimeout, opts.MaxLifetime),
	}
	if opts.LeakThreshold > 0 {
		p.watcher = newWatcher(opts.LeakThreshold)
	}
	if opts.MinSize > 0 || opts.MinIdle > 0 || opts.FailFastAfter > 0 {
		p.asks = make(chan struct{}, 1)
	}
	p.self = weak.Make(p)
	p.leaks = newLeakSink(p)
	p.g.size, p.g.maxQueued, p.g.maxCreating = opts.MaxSize, opts.MaxQueuedLeases, opts.MaxConcurrentCreates
	if p.g.maxCreating == 0 {
		p.g.maxCreating = math.MaxInt
	}
	p.g.slots.init()
	p.setErrExhausted(opts.MaxSize)
	p.sweepAt.Store(p.sweepEvery)
	p.done, p.cancel = context.WithCancel(context.Background())
	// A pool dropped without Close ends, once collected, what waits for
	// its end: the cleanup holds the cancel function, not the pool.
	runtime.AddCleanup(p, func(cancel context.CancelFunc) { cancel() }, p.cancel)
	return p, nil
}

// start seeds the pool (now, or in the background) and starts its own
// goroutines: the upkeep, the watcher, and the gauges' callback.
func (p *Pool[T]) start(ctx context.Context) error {
	if !p.opts.SeedInBackground {
		if err := p.seed(ctx); err != nil {
			p.cancel()
			return err
		}
	}
	if p.opts.UpkeepInterval > 0 {
		p.upkeep = startUpkeep(p)
	}
	if p.watcher != nil {
		p.startWatcher()
	}
	if p.opts.SeedInBackground && p.opts.MinSize > 0 {
		p.ask(wantSeed)
	}
	if p.opts.MinIdle > 0 {
		p.ask(wantSpares)
	}
	if p.m != nil {
		// After seeding: the callback reads Stats, and seed fills the idle
		// queue without the gate's lock.
		if err := registerGauges(p.m, p.self); err != nil {
			return errors.Join(err, p.Close())
		}
	}
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

// Clear retires every item in the pool, as a failover asks: it destroys the
// idle items now, and every item leased when Clear is called, or being
// created then, when its lease ends, instead of lending it again. Items
// whose creation starts after Clear are untouched. Then it refills the
// idle items to MinSize in the background, as far as MaxSize allows, within
// CreateTimeout and until Close, once the idle items' Destroy calls have
// returned. Clear returns once the idle items have left the pool, without
// waiting for their Destroy calls (which run on the pool's own goroutines,
// each item counting against MaxSize until its Destroy returns), for the
// refill or for the leases. Errors and panics of
// the factory and of Destroy have no caller to go to: they are counted and
// logged.
func (p *Pool[T]) Clear() {
	b := newDestroyBatch(false)
	es := p.g.clear()
	for _, e := range es {
		p.destroyLater(e, reasonClear, b)
	}
	if len(es) > 0 {
		p.g.takenOut.Done()
	}
	p.refill(b.seal())
}

// retired reports whether e was created, or began its creation, before the
// last Clear: then it is destroyed where it would go idle or be lent.
func (p *Pool[T]) retired(e *entry[T]) bool {
	return e.era != p.g.slots.era.Load()
}

// Close closes the pool: new leases fail with ErrClosed, every waiting
// lease is woken with ErrClosed, idle items are destroyed now and leased
// items when they come back; creations in flight are canceled through their
// context. Close returns once every creation under way has ended, also one
// whose lease gave up (a factory that ignores its ctx is waited for until
// it returns), and once the Destroy calls of the idle items, of such
// creations' items and of the items whose destruction was under way have
// returned (each waited for at most Options.DestroyTimeout), with the
// joined errors of the idle items' Destroy calls (a panic's among them;
// each is also logged, as every failed Destroy is); after it, no Destroy
// starts but for the items of leases that end later. Called from inside a
// Destroy, or a creation (its factory, its ctx's methods), Close cannot
// wait for that call, and waits for every other. The pool's gauges stop
// reporting; its counters and histograms go on recording what the leases
// still out do. A lease already under way may still succeed; its item is
// destroyed on release. Close is idempotent: later calls do nothing and
// return nil.
func (p *Pool[T]) Close() error {
	err, _ := p.close(context.Background()) // waits in full
	return err
}

// close is Close, with ctx bounding its waits: it returns Close's errors,
// and werr, ctx.Err(), when ctx ended before the background work and the
// Destroy calls did (they go on).
func (p *Pool[T]) close(ctx context.Context) (err, werr error) {
	es, first := p.g.close()
	if !first {
		return nil, nil
	}
	p.cancel()
	if p.upkeep != nil {
		p.upkeep.stop()
	}
	p.tasks.stop()
	werr = p.waitBackground(ctx)
	var unreg error
	if p.m != nil {
		unreg = p.m.unregister()
	}
	// Items that a Clear, a shrink or a sweep took out of the idle ring
	// before the gate closed are on their way to destroyLater, with no
	// user code in between: once they are there, the wait below sees
	// their Destroy calls.
	p.g.takenOut.Wait()
	derr, werr2 := p.destroyAll(ctx, es, reasonClose)
	if werr == nil {
		werr = werr2
	}
	if werr == nil {
		werr = p.destroys.wait(ctx)
	}
	return errors.Join(derr, unreg), werr
}

// waitBackground waits, after Close, until no callback of the pool's own
// work (the upkeep, the filler) runs and every creation under way has
// ended, abandoned ones too, with its item handed on; or until ctx ends.
// From inside a creation (its factory, its ctx's methods, the Logger) it
// cannot wait for that one: it waits for the others.
func (p *Pool[T]) waitBackground(ctx context.Context) error {
	if p.upkeep != nil {
		if err := p.upkeep.wait(ctx); err != nil {
			return err
		}
	}
	if err := p.tasks.wait(ctx); err != nil {
		return err
	}
	return awaitOr(ctx, p.g.whenSettled(turnsOnStack()))
}

// Shutdown closes the pool as Close does, then waits until every lease has
// ended, every creation has finished, every Destroy has returned (or
// outlasted DestroyTimeout) and the pool's background work has stopped, or
// until ctx ends, when it returns ctx.Err(): the Destroy calls and the
// background work still under way then go on, and the errors of Destroy
// calls that end later are logged, not returned. A leaked lease never
// ends, so only ctx ends such a Shutdown; so does a Shutdown called from a
// callback of the upkeep (a Preparer, factory or Destroy it runs), which
// waits for the item that callback holds. On a pool with no item left (no
// lease out, none idle, no Destroy under way), Shutdown returns nil (plus
// Close's errors) even when ctx has already ended. Errors from Close are
// joined to the result. Shutdown panics when ctx is nil.
func (p *Pool[T]) Shutdown(ctx context.Context) error {
	if ctx == nil {
		panic(errNilContext)
	}
	err, werr := p.close(ctx)
	if werr != nil {
		return errors.Join(err, werr)
	}
	if werr := p.waitBackground(ctx); werr != nil {
		return errors.Join(err, werr)
	}
	if werr := awaitOr(ctx, p.g.whenSettled(-1)); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// SetMaxSize changes the pool's MaxSize to n, as a configuration reload
// may. Growing serves the leases waiting now at once, in FIFO order, each
// with the right to create an item. Shrinking creates nothing past the new
// MaxSize: idle items beyond it are destroyed now (on the pool's own
// goroutines, their errors logged) and leased items beyond it when they
// come back, until the items in existence fit; new leases wait meanwhile. Stats, the gauges and
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
	for _, e := range excess {
		p.destroyLater(e, reasonResize, nil)
	}
	if len(excess) > 0 {
		p.g.takenOut.Done()
	}
	return nil
}

// exhaustedErrs are the errors a refused lease returns: every item in use,
// or other leases waiting already (TryLease), or MaxQueuedLeases waiting
// already (Lease).
type exhaustedErrs struct{ inUse, creating, queue, queueFull error }

// setErrExhausted makes the errors a refused TryLease returns, naming size.
func (p *Pool[T]) setErrExhausted(size int) {
	p.exhausted.Store(&exhaustedErrs{
		inUse:    fmt.Errorf("%w: pool %q: every item is in use (MaxSize %d)", ErrExhausted, p.opts.Name, size),
		creating: fmt.Errorf("%w: pool %q: no item is idle, and MaxConcurrentCreates (%d) items are being created", ErrExhausted, p.opts.Name, p.opts.MaxConcurrentCreates),
		queue:    fmt.Errorf("%w: pool %q: other leases are waiting for an item (MaxSize %d), and TryLease does not wait behind them", ErrExhausted, p.opts.Name, size),
		queueFull: fmt.Errorf("%w: pool %q: every item is in use (MaxSize %d) and MaxQueuedLeases (%d) leases are waiting already",
			ErrExhausted, p.opts.Name, size, p.opts.MaxQueuedLeases),
	})
}
