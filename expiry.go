package pool

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Sweeping: leases judge the idle items they meet; the others are swept at
// least once a period while leases or releases happen: the first to pass x.at
// moves it on by compare-and-swap and sweeps, taking the expired out under the
// gate's lock and destroying them outside it.

// expiry is a pool's IdleTimeout and MaxLifetime, and its sweeps.
type expiry[T any] struct {
	idleTimeout, lifetime, jitter int64
	// floor: with the upkeep, an item expired only by idling stays while
	// floor (MinSize) or fewer items exist; 0 without the upkeep.
	floor int
	// every is the sweeps' period (0: neither limit is set); at, when the next
	// lease or release to read the clock sweeps.
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

// sweepPeriod is the sweeps' period for these limits; 0 when neither is set.
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

// sweepIfDue: of the callers that find a sweep due, exactly one sweeps.
func (x *expiry[T]) sweepIfDue(now int64) {
	at := x.at.Load()
	if x.every > 0 && now >= at && x.at.CompareAndSwap(at, now+x.every) {
		x.sweep(now)
	}
}

// sweep destroys the idle items expired at now, taken out with dying permits.
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
