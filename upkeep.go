package pool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// The upkeep: one background goroutine per pool, when UpkeepInterval is
// set, that runs a round every interval (spread by ±10 %): it destroys the
// expired idle items (see expiry.go), checks the idle items due a check,
// and creates items until MinSize exist.
//
// The invariant: the upkeep never holds an item a lease could have, unless
// it holds that item's permit. An item it checks or creates counts against
// MaxSize and is out of the idle ring meanwhile, so no lease receives it
// mid-check and the cap holds; it creates nothing while leases queue, since
// those create items of their own and must not find their permits taken.
// Nothing of the upkeep runs on the lease and release fast path.

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
		p.quietly(func() { p.giveBackToGate(e) }) // a Destroy panic, if the pool closed or shrank meanwhile
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
		p.quietly(func() { p.destroyAndFreeLogged(e, reasonPrepare) })
	}()
	err = p.prepare(context.Background(), e)
	returned = true
	return err
}

// fillToMinSize creates items until MinSize exist, as far as MaxSize
// allows and while no lease waits. It reports false when a creation failed.
func (p *Pool[T]) fillToMinSize() bool {
	for p.g.tryAcquireRoom(p.opts.MinSize, allItems) {
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
			p.g.free()
		}
	}()
	var err error
	if e, err = p.createDetached(context.Background()); err != nil {
		if !errors.Is(err, ErrClosed) { // Close canceled it: nothing went wrong
			p.warn("upkeep: create item", err)
		}
		return false
	}
	p.quietly(func() { p.giveBackToGate(e) }) // a Destroy panic, if the pool closed or shrank meanwhile
	return true
}
