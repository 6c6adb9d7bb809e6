package pool

import (
	"math"
	"math/rand/v2"
	"time"
)

// Expiry: IdleTimeout, MaxLifetime and its jitter, judged on the items
// leases meet and swept for the ones they do not.
//
// # Sweeping
//
// Under a light load the same few items serve every lease, from their
// processors' slots, and the items behind them are never met. So expiry is
// also swept, with this invariant: while leases or releases happen, every
// idle item is judged at least once every sweepEvery (half the smaller of
// IdleTimeout and MaxLifetime, at least a millisecond). A lease or release
// that reads the clock anyway compares it with sweepAt; the one that first
// finds it passed moves it a period on, by compare-and-swap, and sweeps:
// under the gate's lock it moves the parked items into the idle queue
// (judging an item needs owning it) and takes out every expired one with a
// permit, then hands them to their Destroy outside the lock. Without either
// limit none of this is on the lease path; with one, it costs an atomic
// load. With the upkeep on, an item that expired only by idling stays while
// MinSize or fewer items exist: the upkeep would create it again at once.

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

// keepsFloor says whether an idle item that expired only by idling is
// kept all the same: with the upkeep on, idling never takes the pool below
// MinSize, since the upkeep would create the item again at once.
func (p *Pool[T]) keepsFloor() bool {
	return p.opts.UpkeepInterval > 0 && p.g.items() <= p.opts.MinSize
}

// needsCheck says whether the Preparer must see an idle item: always when it
// has never accepted the item, else when it sat idle for CheckAfterIdle
// since its release or the upkeep's last check of it.
func (p *Pool[T]) needsCheck(e *entry[T], now int64) bool {
	return p.opts.Preparer != nil &&
		(!e.checked || p.opts.CheckAfterIdle == 0 || now-max(e.idleAt, e.checkedAt) >= int64(p.opts.CheckAfterIdle))
}

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
// drawn once, here. The sum saturates: a lifetime too long for the clock to
// reach (MaxLifetime math.MaxInt64, say) never expires.
func (p *Pool[T]) deadline(now int64) int64 {
	if p.opts.MaxLifetime == 0 {
		return math.MaxInt64
	}
	life := int64(p.opts.MaxLifetime)
	if j := int64(p.opts.MaxLifetimeJitter); j > 0 {
		life = addSaturating(life, rand.Int64N(j))
	}
	return addSaturating(now, life)
}

// addSaturating returns a + b for b >= 0, or math.MaxInt64 where the sum
// would overflow.
func addSaturating(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// claimSweep reports whether a sweep is due at now, and claims it: of the
// leases and releases that find it due, exactly one gets true, and moves
// the next one a period on. See Sweeping above.
func (p *Pool[T]) claimSweep(now int64) bool {
	at := p.sweepAt.Load()
	return p.sweepEvery > 0 && now >= at && p.sweepAt.CompareAndSwap(at, now+p.sweepEvery)
}

// destroyExpired takes out every idle item expired at now, each with a
// permit, for its Destroy (destroyLater): nobody waits for these.
func (p *Pool[T]) destroyExpired(now int64) {
	floor := 0
	if p.opts.UpkeepInterval > 0 {
		floor = p.opts.MinSize
	}
	var whys []reason
	es := p.g.takeWhere(func(e *entry[T], items int) bool {
		why, gone := p.expired(e, now)
		if !gone || why == reasonIdle && items <= floor {
			return false // an item only idle too long stays while floor or fewer exist
		}
		whys = append(whys, why)
		return true
	})
	for i, e := range es {
		p.destroyLater(e, whys[i], nil)
	}
	if len(es) > 0 {
		p.g.takenOut.Done()
	}
}
