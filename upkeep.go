package pool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Lifecycle over time: expiry that reaches every idle item, lifetimes
// spread by jitter, and the optional background upkeep.
//
// # Sweeping
//
// A lease takes the item in its processor's slot when there is one, so
// under a light load the same few items serve every lease and the items
// behind them, in the idle queue or in other processors' slots, are never
// met by a lease: judging only the items that leases meet would keep them
// forever. So expiry is also swept.
//
// The invariant: while leases or releases happen, every idle item is
// judged at least once every sweepEvery (half the smaller of IdleTimeout
// and MaxLifetime, and at least a millisecond). Each lease or release that
// already reads the clock (it does whenever IdleTimeout or MaxLifetime is
// set, to judge or stamp its item) compares it with sweepAt; the one that
// first finds it passed moves sweepAt a period on, by compare-and-swap, so
// exactly one goroutine sweeps per period, and sweeps: under the gate's
// lock, it moves the parked items into the idle queue (judging a parked
// item needs owning it: its fields belong to whoever holds it) and takes
// out every expired one, each with a permit; then, outside the lock, it
// destroys them. An expired idle item is so destroyed within a period of
// the first lease or release after its expiry.
//
// With IdleTimeout and MaxLifetime both 0, sweepEvery is 0 and the lease
// and release paths never read the clock for it: the fast path is as it
// was. With them set, a lease or release adds one atomic load of sweepAt,
// which is written once a period.
//
// With the upkeep on, an item that expired only by idling stays while
// MinSize or fewer items exist: the upkeep would create it again at once.

// minSweepEvery bounds how often idle items are swept, whatever the limits.
const minSweepEvery = int64(time.Millisecond)

// sweepPeriod is sweepEvery for the given limits; 0 when neither is set.
func sweepPeriod(idleTimeout, maxLifetime time.Duration) int64 {
	limit := int64(0)
	for _, d := range []time.Duration{idleTimeout, maxLifetime} {
		if d > 0 && (limit == 0 || int64(d) < limit) {
			limit = int64(d)
		}
	}
	if limit == 0 {
		return 0
	}
	return max(limit/2, minSweepEvery)
}

// deadline returns the pool clock past which an item created at now has
// outlived its lifetime: MaxLifetime plus its share of MaxLifetimeJitter,
// drawn once, here.
func (p *Pool[T]) deadline(now int64) int64 {
	if p.opts.MaxLifetime == 0 {
		return math.MaxInt64
	}
	d := now + int64(p.opts.MaxLifetime)
	if j := int64(p.opts.MaxLifetimeJitter); j > 0 {
		d += rand.Int64N(j)
	}
	return d
}

// sweep destroys the idle items that have expired, if a sweep is due at
// now and no other goroutine has claimed it. See Sweeping above.
func (p *Pool[T]) sweep(now int64) {
	at := p.sweepAt.Load()
	if now < at || !p.sweepAt.CompareAndSwap(at, now+p.sweepEvery) {
		return
	}
	p.destroyExpired(now)
}

// destroyExpired takes out and destroys every idle item expired at now.
// Nobody waits for these destroys, so their errors and panics are logged,
// not raised; the permits go back once all are destroyed, so that a lease
// they let in meets the pool as the sweep leaves it.
func (p *Pool[T]) destroyExpired(now int64) {
	floor := 0
	if p.opts.UpkeepInterval > 0 {
		floor = p.opts.MinSize
	}
	es := p.g.takeExpired(func(e *entry[T]) (expired, idleOnly bool) {
		why, expired := p.expired(e, now)
		return expired, why == reasonIdle
	}, floor)
	if len(es) == 0 {
		return
	}
	defer func() { // after a Goexit in Destroy too: see destroyAll
		for range es {
			p.g.passOn(nil)
		}
	}()
	b := destroyBatch[T]{p: p, es: es, why: func(e *entry[T]) reason {
		why, _ := p.expired(e, now)
		return why
	}}
	b.run()
	if b.panicked != nil {
		b.errs = append(b.errs, fmt.Errorf("pool %q: destroy item: Destroy panicked: %w", p.opts.Name, b.panicked))
	}
	for _, err := range b.errs {
		p.warn("destroy an expired item", err)
	}
}

// upkeeper is a pool's upkeep goroutine, as Close sees it.
type upkeeper struct {
	quit chan struct{} // closed by stop
	done chan struct{} // closed when the goroutine has returned
}

// startUpkeep starts p's upkeep goroutine.
func startUpkeep[T any](p *Pool[T]) *upkeeper {
	u := &upkeeper{quit: make(chan struct{}), done: make(chan struct{})}
	go p.runUpkeep(u)
	return u
}

// stop ends the upkeep and waits for its goroutine to return. A round under
// way finishes first; its creations are canceled with the pool's, so a
// factory that ignores its ctx delays stop by up to CreateTimeout.
func (u *upkeeper) stop() {
	close(u.quit)
	<-u.done
}

// runUpkeep runs a round every UpkeepInterval, spread, until u stops.
// After a round whose creation failed, the next comes sooner, backing off
// (see upkeepBackoff).
func (p *Pool[T]) runUpkeep(u *upkeeper) {
	defer close(u.done)
	interval := p.opts.UpkeepInterval
	t := time.NewTimer(spread(interval))
	defer t.Stop()
	var backoff time.Duration
	for {
		select {
		case <-u.quit:
			return
		case <-t.C:
		}
		next := spread(interval)
		if p.upkeepRound() {
			backoff = 0
		} else {
			backoff = upkeepBackoff(backoff, interval)
			next = backoff
		}
		t.Reset(next)
	}
}

// upkeepBackoff is the delay before the round after a failed one: a
// sixteenth of the interval after the first failure, doubling with each
// failure after it, up to the interval.
func upkeepBackoff(prev, interval time.Duration) time.Duration {
	return min(max(2*prev, interval/16), interval)
}

// spread returns d moved by a random amount within ±10 %, so that many
// pools started together do not tick in step.
func spread(d time.Duration) time.Duration {
	tenth := int64(d) / 10
	if tenth <= 0 {
		return d
	}
	return d - time.Duration(tenth) + time.Duration(rand.Int64N(2*tenth+1))
}

// upkeepRound runs one round of the upkeep: it destroys the expired idle
// items, checks the idle items due a check, and creates items up to
// MinSize. It reports false when a creation failed, for the caller to
// retry sooner; every failure is logged.
func (p *Pool[T]) upkeepRound() (ok bool) {
	now := p.now()
	if p.sweepEvery > 0 {
		p.destroyExpired(now)
	}
	if p.opts.Preparer != nil && p.opts.CheckAfterIdle > 0 {
		p.checkIdle(now)
	}
	return p.fillToMinSize()
}

// checkIdle runs the Preparer on each idle item that sat idle at least
// CheckAfterIdle, one item at a time: the item under check holds a permit
// and is out of the idle ring, so no lease can receive it meanwhile, and
// the others stay leasable. An item that fails is destroyed (and logged);
// one that passes goes back idle, not due again for CheckAfterIdle.
func (p *Pool[T]) checkIdle(now int64) {
	due := func(e *entry[T]) bool { return p.needsCheck(e, now) }
	for range p.g.maxSize() { // each item at most once: a checked one is not due
		e := p.g.takeIdleIf(due)
		if e == nil {
			return
		}
		if err := p.checkOne(e); err != nil {
			p.warn("upkeep: an idle item failed its check", err)
			continue
		}
		e.checkedAt = p.now()
		p.quietly(func() { p.toGate(e) }) // a Destroy panic, if the pool closed or shrank meanwhile
	}
}

// checkOne prepares e for the upkeep, destroying it (and freeing its
// permit) when it fails, panics or calls runtime.Goexit; a panic is
// returned as an error, since the upkeep has no caller to raise it to, and
// so is a panic of the Destroy that follows (logged by quietly).
func (p *Pool[T]) checkOne(e *entry[T]) (err error) {
	returned := false
	defer func() {
		if returned && err == nil {
			return
		}
		if v := recover(); v != nil {
			err = asError(newPanicError(v))
		}
		p.quietly(func() { p.dispose(e, reasonPrepare) })
	}()
	err = p.prepare(context.Background(), e)
	returned = true
	return err
}

// fillToMinSize creates items until MinSize exist, as far as MaxSize
// allows and while no lease waits. It reports false when a creation failed.
func (p *Pool[T]) fillToMinSize() bool {
	for p.g.tryAcquireToFloor(p.opts.MinSize) {
		if !p.createIdle() {
			return false
		}
	}
	return true
}

// createIdle creates an item for a permit the caller holds and puts it
// idle; on failure (logged), panic or Goexit it frees the permit and
// reports false.
func (p *Pool[T]) createIdle() (ok bool) {
	var e *entry[T]
	defer func() {
		if e == nil {
			if v := recover(); v != nil {
				p.warn("upkeep: create item", fmt.Errorf("pool %q: create item: the factory panicked: %w", p.opts.Name, asError(newPanicError(v))))
			}
			p.g.passOn(nil)
		}
	}()
	var err error
	if e, err = p.createDetached(context.Background()); err != nil {
		if !errors.Is(err, ErrClosed) { // Close canceled it: nothing went wrong
			p.warn("upkeep: create item", err)
		}
		return false
	}
	p.quietly(func() { p.toGate(e) }) // a Destroy panic, if the pool closed or shrank meanwhile
	return true
}

// quietly runs f, which may destroy an item, for a caller with nobody to
// raise a Destroy panic to: the panic is logged instead, and the item
// counts as destroyed all the same (destroyItem counts it either way).
func (p *Pool[T]) quietly(f func()) {
	defer func() {
		if v := recover(); v != nil {
			p.warn("destroy item", fmt.Errorf("pool %q: destroy item: Destroy panicked: %w", p.opts.Name, asError(newPanicError(v))))
		}
	}()
	f()
}
