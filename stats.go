package pool

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stats and the counters behind them.
//
// The invariant: a figure that can be derived from the gate and the idle
// ring is derived, never kept as a second count. ActiveLeases, QueuedLeases,
// ItemsAvailable and ItemsAllocated come from the gate's permits, waiters
// and idle items (gate.counts); Leases, Waits and WaitTime from the slots'
// per-processor counters (ring.go). What is left is counted here: failures
// by kind, and the item counts, which change together under one lock so
// that every snapshot keeps the relations Stats promises between them.

// Stats is a snapshot of a pool's state and of what it has done since New.
// The figures about items in use are derived from the pool's own
// bookkeeping, never kept as a second count.
type Stats struct {
	Name             string
	MinSize, MaxSize int

	// ItemsAllocated is ActiveLeases + ItemsAvailable: the items the pool
	// accounts for (leased, idle, being created or being destroyed). It
	// never exceeds MaxSize, but for a while after SetMaxSize shrank it:
	// until the leases beyond the new MaxSize have ended.
	ItemsAllocated int
	// ItemsAvailable is the number of idle items, ready to be leased.
	ItemsAvailable int
	// ActiveLeases is the number of items in use: leased, or being created,
	// checked by the upkeep or destroyed; a leaked lease's item stays here. An item released at the instant of the snapshot may be
	// counted here rather than in ItemsAvailable; their sum is exact.
	ActiveLeases int
	// QueuedLeases is the number of leases waiting now, MaxSize items being
	// in use: it is above 0 only when ItemsAllocated has reached MaxSize.
	QueuedLeases int
	// Destroying is the number of items whose Destroy the pool is waiting
	// for now (at most DestroyTimeout each): they count in ActiveLeases and
	// ItemsAllocated, against MaxSize, until it returns.
	Destroying int

	// Leases counts successful Lease and TryLease calls.
	Leases uint64
	// Waits counts the waits of leases that had to wait for an item,
	// whatever the outcome (a lease that queued again, when its item failed
	// its check, counts each); WaitTime is the total time they waited. A
	// lease served at once adds to neither, and creation and preparation
	// are not part of WaitTime.
	Waits    uint64
	WaitTime time.Duration
	// Timeouts counts leases that failed with ErrLeaseTimeout.
	Timeouts uint64
	// Canceled counts leases ended by the caller's ctx (canceled or past its
	// deadline): before they started, while waiting, creating or preparing.
	Canceled uint64
	// Refused counts leases refused with ErrExhausted: by TryLease, and by
	// Lease when MaxQueuedLeases leases were waiting already.
	Refused uint64

	// Created counts successful factory calls; Destroyed, items the pool
	// destroyed (whatever Destroy did); Detached, items taken out with
	// Lease.Detach. In every snapshot Destroyed + Detached <= Created, and
	// Created - Destroyed - Detached (the items in existence) <= MaxSize
	// (but for a while after SetMaxSize shrank it, as for ItemsAllocated);
	// at rest, Created == Destroyed + Detached + ItemsAllocated.
	Created, Destroyed, Detached uint64
	// IdleExpired and LifetimeExpired count items destroyed for exceeding
	// IdleTimeout and MaxLifetime; PrepareFailed, items destroyed because
	// IsReady or Prepare failed or timed out.
	IdleExpired, LifetimeExpired, PrepareFailed uint64
	// DestroyErrors counts Destroy calls that returned an error, panicked
	// or outlasted DestroyTimeout. Each such item still counts as destroyed.
	DestroyErrors uint64
	// CreateErrors counts factory calls that failed: returned an error (or
	// a nil item), panicked or called runtime.Goexit, whoever made them (a
	// lease, New, the upkeep, Clear's refill, the seeding in the
	// background).
	CreateErrors uint64

	// Leaked counts the leaked leases the garbage collector has found: ones
	// that became unreachable without Release, Discard or Detach. A leaked
	// lease's item stays in use for good, so it still counts in
	// ActiveLeases and against MaxSize.
	Leaked uint64
	// LongLeases counts the leases reported for being held past
	// Options.LeakThreshold, each once, whether they ended later or not.
	LongLeases uint64
}

// counters are the Stats figures that cannot be derived from the gate and
// that no lease writes on its way: those (Leases, Waits, WaitTime) are kept
// per processor in the idle ring's slots.
type counters struct {
	timeouts, canceled, refused, prepareFail, createFails atomic.Uint64
	// creating counts the factory calls under way, for ErrLeaseTimeout's
	// message.
	creating   atomic.Int64
	longLeases atomic.Uint64

	// The item counts change only under mu, and Stats reads them under it,
	// so that every snapshot keeps the relations Stats promises between
	// them. Separate atomics, read one after the other, cannot: a Destroyed
	// read after a Created can count an item created after that read. They
	// change on creation and destruction only, never on a lease of an idle
	// item, so the lock costs a fraction of what a factory call does.
	mu                                         sync.Mutex
	created, destroyed, detached               uint64
	idleExpired, lifetimeExpired, destroyFails uint64
}

// Stats returns a snapshot of the pool's figures.
func (p *Pool[T]) Stats() Stats {
	held, idle, queued, size, dying, sums := p.g.counts()
	s := Stats{
		Name:           p.opts.Name,
		MinSize:        p.opts.MinSize,
		MaxSize:        size,
		ItemsAllocated: held + idle,
		ItemsAvailable: idle,
		ActiveLeases:   held,
		QueuedLeases:   queued,
		Leases:         sums.leases,
		Waits:          sums.waits,
		WaitTime:       time.Duration(sums.waitTime),
		Timeouts:       p.c.timeouts.Load(),
		Canceled:       p.c.canceled.Load(),
		Refused:        p.c.refused.Load(),
		Destroying:     dying,
		PrepareFailed:  p.c.prepareFail.Load(),
		CreateErrors:   p.c.createFails.Load(),
		Leaked:         p.leaks.leaked.Load(),
		LongLeases:     p.c.longLeases.Load(),
	}
	p.c.mu.Lock()
	s.Created, s.Destroyed, s.Detached = p.c.created, p.c.destroyed, p.c.detached
	s.IdleExpired, s.LifetimeExpired, s.DestroyErrors = p.c.idleExpired, p.c.lifetimeExpired, p.c.destroyFails
	p.c.mu.Unlock()
	return s
}
