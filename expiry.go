package pool

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Expiry: IdleTimeout and MaxLifetime, judged on the items leases meet and
// swept for the rest: a room of its own, the expiry. While leases or releases happen, every idle item is
// judged at least once per sweepEvery (half the smaller limit, at least a
// millisecond): the lease or release that first finds sweepAt passed moves
// it on by compare-and-swap and sweeps, taking out the expired idle items
// under the gate's lock and destroying them outside it. With the upkeep on,
// an item expired only by idling stays while MinSize or fewer items exist.

// expiry is a pool's IdleTimeout and MaxLifetime, and its sweeps.
type expiry[T any] struct {
	idleTimeout, lifetime, jitter int64
	// floor: with the upkeep, an item expired only by idling stays while
	// floor (MinSize) or fewer items exist; 0 without the upkeep.
	floor int
	// every is how often the idle items are swept (0: never: neither limit
	// is set); at, the clock at which the next lease or release that reads
	// the clock sweeps.
	every int64
	at    atomic.Int64

	g  *gate[T]
	ds *destroyer[T]
}

// expired says whether, and why, an idle item has expired.
func (x *expiry[T]) expired(e *entry[T], now int64) (reason, bool) {
	if now > e.deadline {
		return reasonLifetime, true
	}
	if x.idleTimeout > 0 && now-e.idleAt > x.idleTimeout {
		return reasonIdle, true
	}
	return 0, false
}

// judge says whether an idle item a lease met has expired by now, and why:
// not when only idle too long while the upkeep keeps the floor.
func (x *expiry[T]) judge(e *entry[T], now int64) (reason, bool) {
	why, gone := x.expired(e, now)
	if gone && why == reasonIdle && x.floor > 0 && x.g.items() <= x.floor {
		return 0, false
	}
	return why, gone
}

// minSweepEvery bounds how often idle items are swept, whatever the limits.
const minSweepEvery = int64(time.Millisecond)

// sweepPeriod is the sweeps' period for the given limits; 0 when neither
// is set.
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
func (x *expiry[T]) deadline(now int64) int64 {
	if x.lifetime == 0 {
		return math.MaxInt64
	}
	life := x.lifetime
	if x.jitter > 0 {
		life = addSaturating(life, rand.Int64N(x.jitter))
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

// sweepIfDue sweeps when a sweep is due at now: of the callers that find it
// due, exactly one sweeps, having moved at a period on.
func (x *expiry[T]) sweepIfDue(now int64) {
	at := x.at.Load()
	if x.every > 0 && now >= at && x.at.CompareAndSwap(at, now+x.every) {
		x.sweep(now)
	}
}

// sweep takes out every idle item expired at now, with a dying permit,
// and destroys it.
func (x *expiry[T]) sweep(now int64) {
	if x.every == 0 {
		return
	}
	var whys []reason
	es := x.g.takeWhere(func(e *entry[T], items int) bool {
		why, gone := x.expired(e, now)
		if !gone || why == reasonIdle && items <= x.floor {
			return false // an item only idle too long stays while floor or fewer exist
		}
		whys = append(whys, why)
		return true
	})
	for i, e := range es {
		x.ds.taken(e, whys[i], nil)
	}
}
