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

// Creating items. A creation holds a bare permit from before the factory
// call until its item is handed on or the creation fails and frees it;
// exactly one of caller and creating goroutine owns it at any instant
// (creation.state). Its turn to create (gate.creating) ends with the
// factory call, or with create when it does not call it, or, for a
// creation its caller abandoned, once its item is handed on: Close waits
// for the turns (Pool.waitBackground). The factory's context keeps the
// caller's values, not its cancellation; CreateTimeout bounds it and Close
// cancels it, so its errors never match the caller's ctx (ownCtxErr).

// seedParallelism bounds concurrent seeding creations, so a large MinSize
// does not dial one server that many times at once.
const seedParallelism = 32

type seedResult[T any] struct {
	e        *entry[T]
	err      error
	panicVal any // a *panicError, or errFactoryGoexit
}

// seed creates MinSize idle items. The first failure cancels the rest,
// every item made is destroyed, and seed returns the error or re-raises
// the factory's first panic.
func (p *Pool[T]) seed(ctx context.Context) error {
	n := p.opts.MinSize
	if n == 0 {
		return nil
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan seedResult[T], n)
	sem := make(chan struct{}, min(seedParallelism, p.g.maxCreating))
	for range n {
		go p.seedOne(ctx, sctx, sem, results)
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
	derr, _ := p.destroyAll(context.Background(), p.g.drainIdle(), reasonClose)
	err := errors.Join(first, derr)
	if panicVal != nil {
		panic(panicVal)
	}
	return err
}

// seedOne is one of seed's creations, under sctx (New's ctx, canceled at
// the first failure) and sem: it sends its result, a panic or Goexit of
// the factory included.
func (p *Pool[T]) seedOne(ctx, sctx context.Context, sem chan struct{}, results chan<- seedResult[T]) {
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
	if err != nil && ctx.Err() == nil {
		err = ownCtxErr(err) // CreateTimeout's, or the first failure's cancel: not New's ctx
	}
	r = seedResult[T]{e: e, err: err}
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

// create makes an item for a caller holding a permit. When ctx can end,
// the factory runs on its own goroutine: if the caller gives up, the
// creation finishes in the background and the permit goes with it
// (abandonedIt). A factory panic reaches the caller if it still waits.
func (p *Pool[T]) create(ctx context.Context) (e *entry[T], abandonedIt bool, err error) {
	if err := ctx.Err(); err != nil {
		p.g.createEnded()
		return nil, false, err // gave up already: don't start a dial for nobody
	}
	if p.g.down.Load() {
		p.g.createEnded()
		return nil, false, p.backendDown()
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

// createAsync owns the permit once the caller abandons c. It finishes in
// a deferred call, so a factory panic or runtime.Goexit still reaches the
// waiting caller or frees the abandoned permit. Its turn to create ends
// last, once an abandoned item is handed on: Close waits for it.
func (p *Pool[T]) createAsync(ctx context.Context, c *creation[T]) {
	c.panicked = true // until createCall returns
	defer func() {
		if c.panicked {
			if v := recover(); v != nil {
				c.panicVal = newPanicError(v)
			} else {
				c.panicVal = errFactoryGoexit // recover returns nil for a Goexit
			}
		}
		if c.state.CompareAndSwap(creating, finished) {
			p.g.createEnded()
			close(c.done)
			return
		}
		defer p.g.createEnded()
		p.adopt(c)
	}()
	c.e, c.err = p.createCall(ctx)
	c.panicked = false
}

// errFactoryGoexit is what a waiting caller panics with when the factory
// called runtime.Goexit on the creating goroutine.
var errFactoryGoexit = errors.New("pool: the factory called runtime.Goexit")

// adopt finishes an abandoned creation: a failure is logged and frees the
// permit; an item is given back as a release would.
func (p *Pool[T]) adopt(c *creation[T]) {
	if c.panicked || c.err != nil {
		err := c.err
		if c.panicked {
			err = fmt.Errorf("pool %q: create item: the factory panicked: %w", p.opts.Name, asError(c.panicVal))
		}
		p.warn("a creation whose lease gave up failed", err)
		p.g.free()
		return
	}
	p.giveBack(c.e)
}

// createDetached is createCall, and ends the caller's turn to create.
func (p *Pool[T]) createDetached(ctx context.Context) (*entry[T], error) {
	defer p.g.createEnded()
	return p.createCall(ctx)
}

// createCall calls the factory with ctx's values but not its cancellation,
// canceled by Close and bounded by CreateTimeout.
func (p *Pool[T]) createCall(ctx context.Context) (*entry[T], error) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(p.done, cancel)
	defer stop()
	if p.opts.CreateTimeout > 0 {
		var cancelT context.CancelFunc
		cctx, cancelT = context.WithTimeout(cctx, p.opts.CreateTimeout)
		defer cancelT()
	}
	if p.done.Err() != nil {
		return nil, p.errClosed // no factory call starts once Close has begun
	}
	e, err := p.newEntry(cctx)
	if err != nil {
		err = ownCtxErr(err)
	}
	switch {
	case err == nil:
		p.createSucceeded()
	case p.done.Err() != nil:
		return nil, fmt.Errorf("%w: %w", ErrClosed, err) // Close's cancellation: not the backend
	default:
		p.createFailed(err)
	}
	return e, err
}

// newEntry calls the factory and wraps its item, watched for leaks.
func (p *Pool[T]) newEntry(ctx context.Context) (*entry[T], error) {
	era := p.g.slots.era.Load() // before the factory: a Clear meanwhile retires the item
	v, err := p.callFactory(ctx)
	if err == nil && p.nillable && isNil(any(v)) {
		err = fmt.Errorf("the factory returned a nil %v and no error", reflect.TypeFor[T]())
	}
	if err != nil {
		return nil, fmt.Errorf("pool %q: create item: %w", p.opts.Name, err)
	}
	p.c.mu.Lock()
	p.c.created++
	p.c.mu.Unlock()
	if p.m != nil {
		p.m.created.Add(ctx, 1, p.m.add...)
	}
	now := p.now()
	e := &entry[T]{value: v, pool: p, era: era, createdAt: now, deadline: p.deadline(now), idleAt: now}
	if p.route.recorded {
		e.rec = new(leaseRecord)
	}
	if p.route.traced {
		e.trace = new(traceState)
	}
	detectLeak(p.leaks, e)
	p.reg.add(e)
	return e, nil
}

// callFactory calls the factory, counting failures (panic and Goexit too)
// in Stats.CreateErrors and timing every call in pool.items.create_time.
func (p *Pool[T]) callFactory(ctx context.Context) (v T, err error) {
	if p.m != nil {
		start := p.now()
		defer func() { p.m.createTime.Record(ctx, seconds(p.now()-start), p.m.rec...) }()
	}
	returned := false
	defer func() {
		if !returned || err != nil || p.nillable && isNil(any(v)) {
			p.c.createFails.Add(1)
		}
	}()
	v, err = p.factory.Create(ctx)
	returned = true
	return v, err
}

// # The filler
//
// One filler per pool creates items nobody waits for: SeedInBackground's
// seeding, Clear's refill and MinIdle's spares. An ask sets a bit of wants
// and signals asks. Failures are logged, never raised; failed seeding and
// spares rounds are retried with backoff, refills are not. Each creation
// holds a permit from tryAcquireFill, so waiting leases come first. Between
// rounds the filler holds the pool weakly, so an unclosed pool can be
// collected.

// The bits of Pool.wants: what the filler's next round fills.
const (
	wantSeed   uint32 = 1 << iota // MinSize items, several creations at once
	wantRefill                    // MinSize idle, once the last Clear's destroys end
	wantSpares                    // MinIdle idle
	wantProbe                     // one item while the pool is down
)

// fill creates idle items one at a time while tryAcquireFill allows, and
// reports false when a creation failed or the pool is down (only the probe
// creates then). who is for the log.
func (p *Pool[T]) fill(count fillCount, n int, who string) bool {
	for {
		if !p.g.tryAcquireFill(n, count) {
			return !p.g.down.Load()
		}
		if !p.createIdle(who) {
			return false
		}
	}
}

// createIdle creates an item for the caller's bare permit and puts it
// idle, or hands it to the oldest waiter; on failure, panic or Goexit it
// frees the permit and reports false.
func (p *Pool[T]) createIdle(who string) (ok bool) {
	var e *entry[T]
	defer func() {
		if e == nil {
			if v := recover(); v != nil {
				p.warn(who+": create item", fmt.Errorf("pool %q: create item: the factory panicked: %w", p.opts.Name, asError(newPanicError(v))))
			}
			p.g.free()
		}
	}()
	var err error
	if e, err = p.createDetached(context.Background()); err != nil {
		if !errors.Is(err, ErrClosed) && !p.g.down.Load() { // Close canceled it, or the down Warn said it
			p.warn(who+": create item", err)
		}
		return false
	}
	p.giveBackToGate(e)
	return true
}

// ask asks the filler, started at the first ask, for a round for want.
func (p *Pool[T]) ask(want uint32) {
	if !p.filling.Load() && p.filling.CompareAndSwap(false, true) {
		go fillLoop(p.self, p.done.Done(), p.asks, p.backoffLimit())
	}
	if p.wants.Load()&want != want {
		p.wants.Or(want)
	}
	select {
	case p.asks <- struct{}{}:
	default:
	}
}

// fillLoop is the filler: a round per ask, retried with backoff while it
// owes one, until Close or the pool is collected.
func fillLoop[T any](wp weak.Pointer[Pool[T]], done, asks <-chan struct{}, limit time.Duration) {
	var backoff time.Duration
	for {
		select {
		case <-done:
			return
		case <-asks:
		}
		for !fillApart(wp) {
			backoff = upkeepBackoff(backoff, limit)
			t := time.NewTimer(backoff)
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
		}
		backoff = 0
	}
}

// fillApart runs a round as a task, so Close waits for it and a factory's
// Goexit ends only that round, as a failure. It reports false when the
// round owes a retry, whose bits go back in wants before the task ends.
func fillApart[T any](wp weak.Pointer[Pool[T]]) bool {
	p := wp.Value()
	if p == nil {
		return true
	}
	owed := make(chan uint32, 1)
	started := p.tasks.start(func() {
		d := p.wants.Swap(0)
		left := d &^ wantRefill // until the round returns
		defer func() {
			p.wants.Or(left)
			owed <- left
		}()
		left = p.fillRound(d)
	})
	return !started || <-owed == 0
}

// fillRound fills for d and returns the bits to retry.
func (p *Pool[T]) fillRound(d uint32) (owed uint32) {
	if d&wantProbe != 0 && !p.probeRound() {
		return d // down still: the rest would not create
	}
	if d&wantSeed != 0 && !p.seedRound() {
		owed |= wantSeed
	}
	if d&wantRefill != 0 {
		p.refillRound()
	}
	if d&wantSpares != 0 && !p.sparesRound() {
		owed |= wantSpares
	}
	return owed
}

// refill asks for the idle items to be refilled to MinSize once after
// closes (Clear's destroys have ended).
func (p *Pool[T]) refill(after <-chan struct{}) {
	if p.opts.MinSize == 0 {
		return
	}
	p.refillAfter.Store(&after)
	p.ask(wantRefill)
}

// refillRound's failure is logged, not retried.
func (p *Pool[T]) refillRound() {
	if after := p.refillAfter.Swap(nil); after != nil && awaitOr(p.done, *after) != nil {
		return // closed
	}
	p.fill(idleItems, p.opts.MinSize, "clear: refill")
}

// probeRound creates one item while the pool is down, with a free permit
// even if leases wait: its first success brings the pool up (newEntry).
func (p *Pool[T]) probeRound() bool {
	if !p.g.down.Load() {
		return true
	}
	return p.g.tryAcquireFill(1, probeItem) && p.createIdle("probe")
}

func (p *Pool[T]) sparesRound() bool {
	return p.fill(idleItems, p.opts.MinIdle, "spares")
}

// seedRound runs up to seedParallelism fills at once toward MinSize items,
// and reports false when a creation failed or the fills stopped short,
// leases waiting for a turn to create while a permit was free.
func (p *Pool[T]) seedRound() bool {
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(p.opts.MinSize, seedParallelism, p.g.maxCreating) {
		wg.Add(1)
		started := p.tasks.start(func() {
			ok := false
			defer func() {
				if !ok { // a failure, or a Goexit in the factory
					failed.Store(true)
				}
				wg.Done()
			}()
			ok = p.fill(allItems, p.opts.MinSize, "seed")
		})
		if !started { // the pool closed
			failed.Store(true)
			wg.Done()
		}
	}
	wg.Wait()
	return !failed.Load() && !p.g.short(p.opts.MinSize)
}

func (p *Pool[T]) backoffLimit() time.Duration {
	if p.opts.UpkeepInterval > 0 {
		return p.opts.UpkeepInterval
	}
	return maxSeedBackoff
}

// maxSeedBackoff bounds the filler's backoff without the upkeep.
const maxSeedBackoff = 30 * time.Second

// # Fail fast while the backend is down
//
// With FailFastAfter, FailFastAfter failed creations in a row put the pool
// down, and the next success brings it up; New's own seeding, which fails
// New, does not count. While down, create fails at once
// and fill stops: only the filler's probe creates. The last failure stays for
// ErrBackendDown and ErrLeaseTimeout to wrap.

// health is what FailFastAfter and ErrLeaseTimeout read of the creations.
// Whether the pool is down is the gate's (gate.down), which grants the
// places and turns to create.
type health struct {
	inARow atomic.Int64 // failed creations since the last success
	last   atomic.Pointer[failedCreation]
	downAt atomic.Int64 // monotime, written before the gate goes down
}

type failedCreation struct {
	err error
	at  int64 // monotime
}

// createFailed records a creation's failure; the one that puts the pool
// down logs it and asks for the probe.
func (p *Pool[T]) createFailed(err error) {
	at := monotime()
	p.health.last.Store(&failedCreation{err: err, at: at})
	n := p.health.inARow.Add(1)
	if after := p.opts.FailFastAfter; after > 0 && n >= int64(after) && !p.g.down.Load() {
		p.health.downAt.Store(at)
		if !p.g.setDown(true) {
			return
		}
		p.logErr(slog.LevelWarn, fmt.Sprintf("backend down: %d creations in a row failed; leases that must create fail fast until a creation in the background succeeds", n), err)
		p.ask(wantProbe)
	}
}

// createSucceeded: the backend is up.
func (p *Pool[T]) createSucceeded() {
	if p.health.inARow.Load() != 0 {
		p.health.inARow.Store(0)
	}
	if p.g.down.Load() && p.g.setDown(false) {
		down := time.Duration(monotime() - p.health.downAt.Load()).Round(time.Millisecond)
		p.logErr(slog.LevelInfo, fmt.Sprintf("backend up after %v down: a creation succeeded; leases create items again", down), nil)
	}
}

// backendDown is what a lease that would create fails with while the pool
// is down: ErrBackendDown, wrapping the last creation's error (recorded
// before the pool went down).
func (p *Pool[T]) backendDown() error {
	return fmt.Errorf("%w: %w", ErrBackendDown, p.health.last.Load().err)
}

// failedSince returns the last creation's error if it failed at or after
// monotime since, or nil.
func (p *Pool[T]) failedSince(since int64) error {
	if last := p.health.last.Load(); last != nil && last.at >= since {
		return last.err
	}
	return nil
}
