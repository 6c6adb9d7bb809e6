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

// Creating items: New's seeding, a lease's creation, the adoption of
// creations their caller gave up on, and the filler.
//
// The invariant: a creation holds a permit from before the factory is
// called until its item is handed on (to a lease, a waiter or the idle
// ring) or the creation fails, when the permit is freed; exactly one of the
// caller and the creating goroutine owns it at every instant (see
// creation.state). The factory gets a context that keeps the caller's
// values but not its cancellation, that CreateTimeout bounds and Close
// cancels: so a caller that gives up never costs a second dial, and a
// closed pool ends its dials.

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
	derr, _ := p.destroyAll(context.Background(), p.g.drainIdle(), reasonClose)
	err := errors.Join(first, derr)
	if panicVal != nil {
		panic(panicVal)
	}
	return err
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
// and frees the permit; an item goes idle, or to a waiter, or, on a closed
// pool, to its Destroy.
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
	if p.done.Err() != nil {
		return nil, p.errClosed // no factory call starts once Close has begun
	}
	e, err := p.newEntry(cctx)
	if err != nil && p.done.Err() != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return e, err
}

// newEntry calls the factory and wraps its item, watched for leaks.
func (p *Pool[T]) newEntry(ctx context.Context) (*entry[T], error) {
	era := p.g.slots.era.Load() // before the factory: a Clear meanwhile retires the item
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

// callFactory makes one factory call, counted in Stats.CreateErrors when it
// fails (also by a panic or runtime.Goexit) and timed in
// pool.items.create_time when there are metrics, also when it fails.
func (p *Pool[T]) callFactory(ctx context.Context) (v T, err error) {
	if p.m != nil {
		start := p.now()
		defer func() { p.m.createTime.Record(ctx, seconds(p.now()-start), p.m.rec...) }()
	}
	p.c.creating.Add(1)
	returned := false
	defer func() {
		p.c.creating.Add(-1)
		if !returned || err != nil || p.nillable && isNil(any(v)) {
			p.c.createFails.Add(1)
		}
	}()
	v, err = p.factory.Create(ctx)
	returned = true
	return v, err
}

// # Creating on the pool's own account
//
// One filler per pool creates the items nobody waits for: the seeding of
// SeedInBackground, Clear's refill and the spares of MinIdle (the upkeep
// fills to MinSize in its own round, with fill). Each ask sets a bit of
// wants and signals asks; the filler's round takes the bits and fills
// for each. A failed creation (an error, a panic or a runtime.Goexit of
// the factory) is logged, never raised; a failed seeding or spares round
// is retried, backing off, and a failed refill is not. Each creation holds
// a permit from tryAcquireFill, so the cap holds and waiting leases come
// first; the factory's context is the pool's (createDetached). Between
// rounds the filler holds the pool only weakly, so that a pool dropped
// without Close can be collected; it returns then, or at Close.

// The bits of Pool.wants: what the filler's next round fills.
const (
	wantSeed   uint32 = 1 << iota // MinSize items, several creations at once
	wantRefill                    // MinSize idle, once the last Clear's destroys end
	wantSpares                    // MinIdle idle
)

// fill creates idle items, one at a time, while fewer than n items of the
// kind count says exist (the items being destroyed, on their way out, not
// counted among all the items), as far as MaxSize allows and while no
// lease waits. It reports false when a creation failed; who says who
// fills, for the log.
func (p *Pool[T]) fill(count fillCount, n int, who string) bool {
	for p.g.tryAcquireFill(n, count) {
		if !p.createIdle(who) {
			return false
		}
	}
	return true
}

// createIdle creates an item for a permit the caller holds and puts it
// idle; on failure (logged), panic (logged) or Goexit it frees the permit
// and reports false.
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
		if !errors.Is(err, ErrClosed) { // Close canceled it: nothing went wrong
			p.warn(who+": create item", err)
		}
		return false
	}
	p.giveBackToGate(e)
	return true
}

// ask asks the filler, started at the first ask, for a round that fills
// for the bits of want, without waiting.
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

// fillLoop is the filler: a round for each ask, and again after a round
// that owes a retry, backing off as the upkeep does (upkeepBackoff), until
// Close or the pool is collected.
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

// fillApart runs a round on a task of its own, so that Close waits for it
// and a runtime.Goexit in the factory ends that task only, as a failed
// round. It reports false when the round owes a retry, whose bits it puts
// back in wants before its task ends; true when the pool is gone or closed.
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

// fillRound fills for the bits of d, and returns those whose fill failed
// and is retried.
func (p *Pool[T]) fillRound(d uint32) (owed uint32) {
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

// refill asks for the idle items to be refilled to MinSize, once after
// has closed: when the Destroy calls of the items Clear took out end.
func (p *Pool[T]) refill(after <-chan struct{}) {
	if p.opts.MinSize == 0 {
		return
	}
	p.refillAfter.Store(&after)
	p.ask(wantRefill)
}

// refillRound waits for the last Clear's destroys, then fills the idle
// items to MinSize: its failure is logged, not retried.
func (p *Pool[T]) refillRound() {
	if after := p.refillAfter.Swap(nil); after != nil && awaitOr(p.done, *after) != nil {
		return // closed
	}
	p.fill(idleItems, p.opts.MinSize, "clear: refill")
}

// sparesRound fills the idle items to MinIdle, and reports false when a
// creation failed.
func (p *Pool[T]) sparesRound() bool {
	return p.fill(idleItems, p.opts.MinIdle, "spares")
}

// seedRound runs one round of background seeding: up to seedParallelism
// fills at once, toward MinSize items. It reports false when a creation
// failed.
func (p *Pool[T]) seedRound() bool {
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(p.opts.MinSize, seedParallelism) {
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
	return !failed.Load()
}

// backoffLimit is how far the filler backs off after failures:
// UpkeepInterval, or maxSeedBackoff without the upkeep.
func (p *Pool[T]) backoffLimit() time.Duration {
	if p.opts.UpkeepInterval > 0 {
		return p.opts.UpkeepInterval
	}
	return maxSeedBackoff
}

// maxSeedBackoff bounds the filler's backoff without the upkeep; with it,
// UpkeepInterval does.
const maxSeedBackoff = 30 * time.Second
