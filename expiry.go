package pool

import (
	"math"
	"math/rand/v2"
	"time"
)

// Expiry: IdleTimeout and MaxLifetime, judged on the items leases meet and
// swept for the rest. While leases or releases happen, every idle item is
// judged at least once per sweepEvery (half the smaller limit, at least a
// millisecond): the lease or release that first finds sweepAt passed moves
// it on by compare-and-swap and sweeps, taking out the expired idle items
// under the gate's lock and destroying them outside it. With the upkeep on,
// an item expired only by idling stays while MinSize or fewer items exist.

// expired says whether, and why, an idle item has expired.
func (p *Pool[T]) expired(e *entry[T], now int64) (reason, bool) {
	if now > e.deadline {
		return reasonLifetime, true
	}
	if p.opts.IdleTimeout > 0 && now-e.idleAt > int64(p.opts.IdleTimeout) {
		return reasonIdle, true
	}
	return 0, false
}

// keepsFloor says whether an item expired only by idling stays: with the
// upkeep on, idling never takes the pool below MinSize.
func (p *Pool[T]) keepsFloor() bool {
	return p.opts.UpkeepInterval > 0 && p.g.items() <= p.opts.MinSize
}

// needsCheck says whether the Preparer must see an idle item: one it never
// accepted, or one idle CheckAfterIdle since its release or last check.
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

// deadline is the clock past which an item created at now has outlived
// MaxLifetime plus its jitter, drawn here; it saturates, never expiring.
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

// addSaturating returns a + b for b >= 0, saturating at math.MaxInt64.
func addSaturating(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// claimSweep reports whether a sweep is due at now: of the callers that find
// it due, exactly one gets true, having moved sweepAt a period on.
func (p *Pool[T]) claimSweep(now int64) bool {
	at := p.sweepAt.Load()
	return p.sweepEvery > 0 && now >= at && p.sweepAt.CompareAndSwap(at, now+p.sweepEvery)
}

// destroyExpired takes out every idle item expired at now, with its permit,
// for destroyLater.
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
