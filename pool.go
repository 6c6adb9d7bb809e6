package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"time"
	"weak"
)

// The pool: its type, New, and the calls that change or end its life
// (Clear, Close, Shutdown, SetMaxSize); a lease's way is in lease_path.go,
// the way back in release_path.go. The invariant: a lease takes a permit
// from the gate before it touches an item, and every way out of the lease
// path hands the caller that permit with an item or returns it exactly
// once, also on a panic or runtime.Goexit of user code. Ending the lease
// gives the permit back with the item, or frees it once the item is
// destroyed or detached.

// Pool is a bounded pool of items of type T. It is safe for use by many
// goroutines. Create one with New; end it with Close or Shutdown.
//
// It composes its rooms, each a type that owns its state (docs/DESIGN.md,
// "The rooms"), and keeps the lease and release paths.
type Pool[T any] struct {
	// Fixed by New from the options: slowLease, a lease does more than take
	// its processor's parked item (a Tracer, lease records, items to judge,
	// metrics); slowRelease, a release more than account for its end and
	// park it (Reset, MaxUses, the clock, a Tracer).
	slowLease, slowRelease bool

	g    gate[T]
	ob   observer[T]
	mk   maker[T]
	ds   destroyer[T]
	ex   expiry[T]
	ck   checker[T]
	kp   *keeper[T] // apart from the pool: its goroutine holds the pool weakly
	sz   *sizer     // with AdaptiveSize; else nil
	opts Options[T] // with defaults; immutable after New

	clk     *clock
	started time.Time // time.Now at New, for Lease.CreatedAt

	done   context.Context // canceled by Close: ends creations in flight
	cancel context.CancelFunc

	errClosed error

	self weak.Pointer[Pool[T]] // for the keeper and the gauges, which hold the pool weakly
}

// clock is a pool's monotonic clock, ns since New; testClock's when set.
type clock struct {
	epoch int64
	fake  func() int64
}

func (c *clock) now() int64 {
	if c.fake != nil {
		return c.fake()
	}
	return monotime() - c.epoch
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
	if !opts.SeedInBackground {
		if err := p.mk.seed(ctx, opts.MinSize); err != nil {
			p.cancel()
			return nil, err
		}
	} else if opts.MinSize > 0 {
		p.kp.ask(wantSeed) // which starts the keeper
	}
	if opts.UpkeepInterval > 0 || opts.LeakThreshold > 0 || opts.AdaptiveSize {
		p.kp.start()
	}
	if opts.MinIdle > 0 {
		p.kp.ask(wantSpares)
	}
	// After seeding: the gauges' callback reads Stats. It holds the pool
	// weakly, so the provider does not keep a pool dropped without Close.
	wp := p.self
	if err := p.ob.startGauges(func() (reading, bool) {
		if q := wp.Value(); q != nil {
			return q.ob.observe(q.Stats()), true
		}
		return reading{}, false
	}); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

// testClock, for tests, is the clock of pools New makes while it is set, in
// place before they run anything (set after, it would race the upkeep).
var testClock func() int64

// newPool derives a pool's state from f and valid options; nothing runs yet.
func newPool[T any](f Factory[T], opts Options[T]) (*Pool[T], error) {
	m, err := newMetrics(opts.MeterProvider, opts.Name, opts.StandardMetricNames)
	if err != nil {
		return nil, err
	}
	if opts.Destroy == nil {
		opts.Destroy = closeItem[T]
	}
	p := &Pool[T]{
		opts:      opts,
		clk:       &clock{epoch: monotime(), fake: testClock},
		started:   time.Now(),
		errClosed: fmt.Errorf("%w: pool %q", ErrClosed, opts.Name),
	}
	p.self = weak.Make(p)
	p.done, p.cancel = context.WithCancel(context.Background())
	// A pool dropped without Close ends, once collected, what waits for
	// its end: the cleanup holds the cancel function, not the pool.
	runtime.AddCleanup(p, func(cancel context.CancelFunc) { cancel() }, p.cancel)

	wp := p.self
	p.ob = observer[T]{
		tracer: opts.Tracer, threshold: int64(opts.LeakThreshold), sited: opts.TrackLeaseSites, m: m,
		reg:      registry[T]{all: make(map[weak.Pointer[entry[T]]]struct{})},
		leakSink: &leakSink{alive: func() bool { return wp.Value() != nil }, name: opts.Name, clk: p.clk, logger: opts.Logger, onLeak: opts.OnLeak, m: m},
	}
	if m != nil {
		p.ob.sampleBelow, p.ob.everyLease = useSampleBelow, opts.StandardMetricNames
	}
	p.g.init(opts, exhaustedFor(&opts, opts.MaxSize, opts.MaxSize))
	if opts.AdaptiveSize {
		p.sz = newSizer(opts.MinSize, opts.MaxSize, p.clk.now(), p.resize)
		p.ob.sz = p.sz
		_ = p.resize(p.sz.floor, opts.MaxSize) // the limit starts at max(MinSize, 1)
	}
	p.ds = destroyer[T]{destroy: opts.Destroy, timeout: opts.DestroyTimeout, name: opts.Name, g: &p.g, ob: &p.ob}
	p.ex = expiry[T]{
		idleTimeout: int64(opts.IdleTimeout), lifetime: int64(opts.MaxLifetime), jitter: int64(opts.MaxLifetimeJitter),
		every: sweepPeriod(opts.IdleTimeout, opts.MaxLifetime), g: &p.g, ds: &p.ds,
	}
	if opts.UpkeepInterval > 0 {
		p.ex.floor = opts.MinSize
	}
	p.ex.at.Store(p.ex.every)
	p.ck = checker[T]{
		preparer: opts.Preparer, timeout: opts.PreparationTimeout, after: int64(opts.CheckAfterIdle),
		name: opts.Name, done: p.done, clk: p.clk, ob: &p.ob,
	}
	p.kp = newKeeper(p)
	p.mk = maker[T]{
		factory: f, name: opts.Name, nillable: canBeNil(reflect.TypeFor[T]()), timeout: opts.CreateTimeout,
		done: p.done, errClosed: p.errClosed, clk: p.clk,
		pool: p, g: &p.g, ob: &p.ob, ds: &p.ds, ex: &p.ex,
		askProbe: func() { p.kp.ask(wantProbe) },
	}
	p.slowLease = opts.Tracer != nil || p.ob.recorded() || opts.judges() || m != nil || p.sz != nil
	p.slowRelease = opts.Reset != nil || opts.MaxUses > 0 || opts.stamps() || opts.Tracer != nil
	return p, nil
}

// Name returns the pool's name, Options.Name or its default.
func (p *Pool[T]) Name() string { return p.opts.Name }

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
	b := p.ds.batch(p.g.clear(), reasonClear)
	if p.opts.MinSize > 0 {
		p.kp.refill(b.done)
	}
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
// Destroy, a creation (its factory, its ctx's methods) or a callback of
// the pool's background goroutine, Close cannot wait for that call, and
// waits for every other. The pool's gauges stop
// reporting; its counters and histograms go on recording what the leases
// still out do. A lease already under way may still succeed; its item is
// destroyed on release. Close is idempotent: later calls do nothing and
// return nil.
func (p *Pool[T]) Close() error {
	err, _ := p.close(context.Background()) // waits in full
	return err
}

// close is Close with ctx bounding its waits: werr is ctx.Err() when ctx
// ended first (the background work and the Destroy calls go on).
func (p *Pool[T]) close(ctx context.Context) (err, werr error) {
	es, first := p.g.close()
	if !first {
		return nil, nil
	}
	p.cancel()
	// From inside the pool's own work, Close cannot wait for that work, so
	// it walks its stack to find it (framesOnStack, paid only here).
	mine := framesOnStack()
	werr = p.kp.wait(ctx, mine[workKeeper] > 0)
	unreg := p.ob.stopGauges()
	derr, werr2 := p.ds.all(ctx, es, reasonClose)
	if werr = cmp.Or(werr, werr2); werr == nil {
		werr = awaitOr(ctx, p.g.whenSettled(settle{creations: mine[workTurn], dying: mine[workDestroy]}))
	}
	return errors.Join(derr, unreg), werr
}

// awaitOr waits until done is closed (nil) or ctx ends (ctx.Err()). Done
// wins when both are ready, not a select's random choice.
func awaitOr(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
	case <-ctx.Done():
	}
	select {
	case <-done: // also when both were ready
		return nil
	default:
		return ctx.Err()
	}
}

// framesOnStack counts, by work, the caller's stack's frames of the pool's
// own work that calls user code. Frames name the pool's type, not the pool:
// from inside another pool's work, Close waits for one piece fewer.
func framesOnStack() (n [numWorks]int) {
	pcs := make([]uintptr, 64)
	k := runtime.Callers(2, pcs)
	for k == len(pcs) {
		pcs = make([]uintptr, 2*len(pcs))
		k = runtime.Callers(2, pcs)
	}
	frames := runtime.CallersFrames(pcs[:k])
	for more := true; more; {
		var f runtime.Frame
		f, more = frames.Next()
		n[workFrames[f.Function]]++
	}
	return n
}

// work is a kind of the pool's own work that calls user code.
type work uint8

const (
	workNone    work = iota // any other frame
	workTurn                // a turn to create
	workDestroy             // a Destroy call
	workKeeper              // the keeper
	numWorks
)

// workFrames names the frames framesOnStack counts, as the runtime does for every T.
var workFrames = func() map[string]work {
	pkg := reflect.TypeFor[Pool[int]]().PkgPath() + ".(*"
	return map[string]work{
		pkg + "maker[...]).create":       workTurn,
		pkg + "maker[...]).createAsync":  workTurn,
		pkg + "maker[...]).createIdle":   workTurn,
		pkg + "destroyer[...]).run":      workDestroy,
		pkg + "keeper[...]).run":         workKeeper,
		pkg + "keeper[...]).apart.func1": workKeeper,
	}
}()

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
	if werr == nil {
		werr = awaitOr(ctx, p.g.whenSettled(settle{all: true}))
	}
	if werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// SetMaxSize changes the pool's MaxSize to n, as a configuration reload may.
// Growing serves the leases waiting now at once, in FIFO order, each with the
// right to create an item. Shrinking creates nothing past the new MaxSize: idle
// items beyond it are destroyed now (on the pool's own goroutines, their errors
// logged) and leased items beyond it when they come back, until the items in
// existence fit; new leases wait meanwhile. Stats, the gauges and
// ErrLeaseTimeout's message follow the new value. With Options.AdaptiveSize,
// n is the limit's ceiling: a limit above it comes down to it at once. It
// returns an error wrapping ErrInvalidOptions when n is below 1 or below
// MinSize, and ErrClosed on a closed pool.
func (p *Pool[T]) SetMaxSize(n int) error {
	if n < 1 || n < p.opts.MinSize {
		return fmt.Errorf("%w: pool %q: SetMaxSize(%d): MaxSize must be at least 1 and at least MinSize (%d)", ErrInvalidOptions, p.opts.Name, n, p.opts.MinSize)
	}
	if p.sz != nil {
		return p.sz.setMax(n)
	}
	return p.resize(n, n)
}

// resize makes limit the bound on the items in existence (MaxSize, or the
// adaptive limit under it), destroying the idle items beyond it; ErrClosed
// on a closed pool.
func (p *Pool[T]) resize(limit, maxSize int) error {
	excess, err := p.g.resize(limit, exhaustedFor(&p.opts, limit, maxSize))
	if err != nil {
		return p.errClosed
	}
	for _, e := range excess {
		p.ds.taken(e, reasonResize, nil)
	}
	return nil
}

// exhaustedErrs are the errors of leases refused for want of room, by
// admission: for TryLease, every item in use, no turn to create, or others
// waiting already; for Lease, MaxQueuedLeases waiting already. Made with the
// size they name and kept by the gate beside it, so that a failing lease
// allocates nothing.
type exhaustedErrs [numAdmissions]error

// exhaustedFor makes the errors of a pool with the options o, MaxSize
// maxSize and the limit in force.
func exhaustedFor[T any](o *Options[T], limit, maxSize int) *exhaustedErrs {
	bound := sizeText(limit, maxSize)
	return &exhaustedErrs{
		refusedInUse:    fmt.Errorf("%w: pool %q: every item is in use (%s)", ErrExhausted, o.Name, bound),
		refusedCreating: fmt.Errorf("%w: pool %q: no item is idle, and MaxConcurrentCreates (%d) items are being created", ErrExhausted, o.Name, o.MaxConcurrentCreates),
		refusedQueue:    fmt.Errorf("%w: pool %q: other leases are waiting for an item (%s), and TryLease does not wait behind them", ErrExhausted, o.Name, bound),
		refusedQueueFull: fmt.Errorf("%w: pool %q: every item is in use (%s) and MaxQueuedLeases (%d) leases are waiting already",
			ErrExhausted, o.Name, bound, o.MaxQueuedLeases),
	}
}

// sizeText names the bound on items in an error: MaxSize, or the adaptive
// limit under it.
func sizeText(limit, maxSize int) string {
	if limit < maxSize {
		return fmt.Sprintf("adaptive limit %d, MaxSize %d", limit, maxSize)
	}
	return fmt.Sprintf("MaxSize %d", maxSize)
}
