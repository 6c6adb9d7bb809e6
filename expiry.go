package pool

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Sweeping: leases judge the idle items they meet; the others are swept at
// least once a period while leases or releases happen (sweepIfDue).

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

// expired says whether, and why, an idle item has expired by now: not when
// only idle too long while floor or fewer items exist (items counts them).
func (x *expiry[T]) expired(e *entry[T], now int64, items func() int) (reason, bool) {
	if now > e.deadline {
		return reasonLifetime, true
	}
	idle := x.idleTimeout > 0 && now-e.idleAt > x.idleTimeout
	return reasonIdle, idle && (x.floor == 0 || items() > x.floor)
}

// sweepPeriod is the sweeps' period for these limits, at least a millisecond
// however short they are; 0 when neither is set.
func sweepPeriod(idleTimeout, maxLifetime time.Duration) int64 {
	limit := idleTimeout
	if limit == 0 || maxLifetime > 0 && maxLifetime < limit {
		limit = maxLifetime
	}
	if limit == 0 {
		return 0
	}
	return max(int64(limit)/2, int64(time.Millisecond))
}

// deadline is the clock past which an item created at now has outlived
// MaxLifetime plus its jitter, drawn here; never (math.MaxInt64) without
// MaxLifetime or past the clock's range.
func (x *expiry[T]) deadline(now int64) int64 {
	life := x.lifetime
	if x.jitter > 0 {
		life += rand.Int64N(x.jitter)
	}
	if life > 0 && now+life > now { // false when a sum wraps around
		return now + life
	}
	return math.MaxInt64
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
		why, gone := x.expired(e, now, func() int { return items })
		if gone {
			whys = append(whys, why)
		}
		return gone
	})
	for i, e := range es {
		x.ds.taken(e, whys[i], nil)
	}
}
