package pool

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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
	done chan struct{} // closed when the last goroutine of the upkeep has returned
	// round is held while a round runs, so that wait can tell a round under
	// way, whose callbacks it must wait for, from a goroutine about to see
	// quit.
	round sync.Mutex
	// gid is the id of the goroutine that runs the rounds now: a new one
	// takes over after a callback calls runtime.Goexit. See wait.
	gid atomic.Uint64
}

// upkeepTestHooks are set by tests only: scheduled sees each wait the
// upkeep sets before its next round.
var upkeepTestHooks struct {
	scheduled func(time.Duration)
}

// startUpkeep starts p's upkeep goroutine.
func startUpkeep[T any](p *Pool[T]) *upkeeper {
	u := &upkeeper{quit: make(chan struct{}), done: make(chan struct{})}
	go p.runUpkeep(u, spread(p.opts.UpkeepInterval))
	return u
}

// stop ends the upkeep: no round starts after it. Close calls it once;
// wait then waits for the round under way.
func (u *upkeeper) stop() { close(u.quit) }

// wait waits, after stop, until no callback of the upkeep runs: for the
// round under way, if any. Its creations and checks are canceled with the
// pool's context, so a factory or Preparer that ignores its ctx delays wait
// until it returns (or CreateTimeout, PreparationTimeout). ctx bounds the
// wait: when ctx ends first, wait returns ctx.Err() and the round finishes
// on its own. Called from a callback of the round under way (a Preparer,
// factory or Destroy that calls Close), wait cannot wait for its own
// caller: it returns at once, and the upkeep returns once the callback
// does.
func (u *upkeeper) wait(ctx context.Context) error {
	if id := goroutineID(); id != 0 && id == u.gid.Load() {
		return nil
	}
	select {
	case <-u.done:
		return nil
	case <-ctx.Done():
	}
	if !u.round.TryLock() {
		return ctx.Err() // a round's callbacks still run
	}
	// No round runs, and none can start: the upkeep is returning.
	u.round.Unlock()
	<-u.done
	return nil
}

// runUpkeep runs a round first after the given delay and then every
// UpkeepInterval (spread), measured from the start of the previous round:
// a round that outlasts the interval is followed by the next at once.
// After a round whose creation failed, the next comes sooner, backing off
// (see upkeepBackoff). When a callback calls runtime.Goexit, which ends
// this goroutine, the upkeep goes on on a new one.
func (p *Pool[T]) runUpkeep(u *upkeeper, first time.Duration) {
	u.gid.Store(goroutineID())
	returned := false
	defer func() {
		if !returned {
			go p.runUpkeep(u, spread(p.opts.UpkeepInterval))
			return
		}
		close(u.done)
	}()
	interval := p.opts.UpkeepInterval
	t := time.NewTimer(first)
	defer t.Stop()
	var backoff time.Duration
	for {
		select {
		case <-u.quit:
			returned = true
			return
		case <-t.C:
		}
		start := p.now()
		ok, stopped := p.runRound(u)
		if stopped {
			returned = true
			return
		}
		next := spread(interval)
		if ok {
			backoff = 0
		} else {
			backoff = upkeepBackoff(backoff, interval)
			next = backoff
		}
		wait := max(next-time.Duration(p.now()-start), 0)
		if upkeepTestHooks.scheduled != nil {
			upkeepTestHooks.scheduled(wait)
		}
		t.Reset(wait)
	}
}

// runRound runs one round, holding u.round throughout (also through a
// runtime.Goexit in a callback), unless stop has been called: then it
// reports stopped and runs nothing.
func (p *Pool[T]) runRound(u *upkeeper) (ok, stopped bool) {
	u.round.Lock()
	defer u.round.Unlock()
	select {
	case <-u.quit:
		return false, true
	default:
	}
	return p.upkeepRound(), false
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
	if p.opts.MinIdle > 0 {
		p.ask(wantSpares)
	}
	return p.fill(allItems, p.opts.MinSize, "upkeep")
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
			if p.done.Err() == nil { // else Close cut it short: nothing went wrong
				p.warn("upkeep: an idle item failed its check", err)
			}
			continue
		}
		e.checkedAt = p.now()
		e.flipBusy()
		p.giveBackToGate(e)
	}
}

// checkOne prepares e for the upkeep, destroying it (and freeing its
// permit) when it fails, panics or calls runtime.Goexit; a panic is
// returned as an error, since the upkeep has no caller to raise it to, and
// and the item goes to its Destroy.
func (p *Pool[T]) checkOne(e *entry[T]) (err error) {
	returned := false
	defer func() {
		if returned && err == nil {
			return
		}
		if v := recover(); v != nil {
			err = asError(newPanicError(v))
		}
		why := reasonPrepare
		if p.done.Err() != nil {
			why = reasonClose // Close cut the check short: not the item's fault
		}
		p.destroyLater(e, why, nil)
	}()
	err = p.prepare(p.done, e)
	returned = true
	return err
}
