package pool

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stats is a snapshot of a pool's state and of what it has done since New.
type Stats struct {
	// Name, MinSize, MinIdle and MaxSize are the pool's options (MaxSize as
	// SetMaxSize last set it).
	Name                      string
	MinSize, MinIdle, MaxSize int
	// Limit bounds the items in existence now, as MaxSize does: with
	// Options.AdaptiveSize, the limit the pool found, at most MaxSize; else
	// MaxSize.
	Limit int

	// ItemsAllocated is ActiveLeases + ItemsAvailable: the items the pool
	// accounts for. It exceeds MaxSize only after SetMaxSize shrank it, until
	// the leases beyond the new MaxSize have ended.
	ItemsAllocated int
	// ItemsAvailable is the number of idle items, ready to be leased.
	ItemsAvailable int
	// ActiveLeases is the items in use: leased (leaked too), being created,
	// checked by the upkeep or destroyed. An item released at the snapshot
	// may count here, not in ItemsAvailable; their sum is exact.
	ActiveLeases int
	// QueuedLeases is the leases waiting now; it is above 0 only when
	// ItemsAllocated has reached MaxSize or Creating MaxConcurrentCreates.
	QueuedLeases int
	// Creating is the items being created now (counted in ActiveLeases and
	// ItemsAllocated), at most MaxConcurrentCreates.
	Creating int
	// Destroying is the items whose Destroy the pool awaits now (at most
	// DestroyTimeout each); they count in ActiveLeases and ItemsAllocated.
	Destroying int

	// Leases counts successful Lease and TryLease calls.
	Leases uint64
	// Waits counts the waits of leases that had to wait, whatever the outcome
	// (a lease that queued again after a failed check counts each); WaitTime
	// is their total, creation and preparation excluded.
	Waits    uint64
	WaitTime time.Duration
	// Timeouts counts leases that failed with ErrLeaseTimeout.
	Timeouts uint64
	// Canceled counts leases ended by the caller's ctx, at whatever stage.
	Canceled uint64
	// Refused counts ErrExhausted refusals: by TryLease, and by Lease past MaxQueuedLeases.
	Refused uint64

	// Created counts successful factory calls; Destroyed, items the pool
	// destroyed (whatever Destroy did); Detached, items taken out by
	// Lease.Detach. Always Destroyed + Detached <= Created, and Created -
	// Destroyed - Detached <= MaxSize but after SetMaxSize shrank it; at
	// rest, Created == Destroyed + Detached + ItemsAllocated.
	Created, Destroyed, Detached uint64
	// IdleExpired and LifetimeExpired count items destroyed for exceeding
	// IdleTimeout and MaxLifetime; PrepareFailed, checks in which IsReady or
	// Prepare returned an error or timed out, each destroying its item (a
	// check that panicked destroys its item too, and is not counted here).
	IdleExpired, LifetimeExpired, PrepareFailed uint64
	// UsesExpired counts items destroyed after Options.MaxUses leases.
	UsesExpired uint64
	// DestroyErrors counts Destroy calls that returned an error, panicked
	// or outlasted DestroyTimeout. Each such item still counts as destroyed.
	DestroyErrors uint64
	// CreateErrors counts failed factory calls (an error or nil item, a panic
	// or runtime.Goexit), whoever made them: a lease, New, the upkeep, Clear's
	// refill, the seeding.
	CreateErrors uint64
	// BackendDown: Options.FailFastAfter creations in a row failed and none
	// has succeeded since, so leases that would create fail with
	// ErrBackendDown while one background creation probes the backend.
	BackendDown bool

	// Leaked counts the leases the garbage collector found dropped without
	// Release, Discard or Detach. Their items stay in use for good, in
	// ActiveLeases and against MaxSize.
	Leaked uint64
	// LongLeases counts the leases reported for being held past
	// Options.LeakThreshold, each once, whether they ended later or not.
	LongLeases uint64
}

// counters are the Stats figures not derived from the gate (gate.counts) or
// the ring's slots (Leases, Waits, WaitTime): no figure is kept twice.
type counters struct {
	failed                               [numErrTypes]atomic.Uint64 // failed leases, by error.type
	prepareFail, createFails, longLeases atomic.Uint64

	// The item counts are changed and read under mu, keeping Stats' relations.
	mu                              sync.Mutex
	destroyed                       [numReasons]uint64 // by reason: Destroyed is their sum
	created, detached, destroyFails uint64
}

// Stats returns a snapshot of the pool's figures.
func (p *Pool[T]) Stats() Stats {
	held, idle, queued, size, creating, dying, sums := p.g.counts()
	s := Stats{
		Name:           p.opts.Name,
		MinSize:        p.opts.MinSize,
		MinIdle:        p.opts.MinIdle,
		MaxSize:        p.sz.maxSize(size),
		Limit:          size,
		ItemsAllocated: held + idle,
		ItemsAvailable: idle,
		ActiveLeases:   held,
		QueuedLeases:   queued,
		Leases:         sums.leases,
		Waits:          sums.waits,
		WaitTime:       time.Duration(sums.waitTime),
		Creating:       creating,
		Destroying:     dying,
		BackendDown:    p.g.isDown(),
	}
	p.ob.stats(&s)
	return s
}

// stats fills in the figures the observer counts.
func (o *observer[T]) stats(s *Stats) {
	c := &o.c
	s.Timeouts, s.Canceled, s.Refused = c.failed[errTimeout].Load(), c.failed[errCanceled].Load(), c.failed[errExhausted].Load()
	s.PrepareFailed, s.CreateErrors = c.prepareFail.Load(), c.createFails.Load()
	s.Leaked, s.LongLeases = o.leaked.Load(), c.longLeases.Load()
	c.mu.Lock()
	s.Created, s.Detached, s.DestroyErrors = c.created, c.detached, c.destroyFails
	for _, n := range c.destroyed {
		s.Destroyed += n
	}
	s.IdleExpired, s.LifetimeExpired, s.UsesExpired = c.destroyed[reasonIdle], c.destroyed[reasonLifetime], c.destroyed[reasonUses]
	c.mu.Unlock()
}

// Outstanding returns the leases out now, oldest first, with how long each has
// been out and, with Options.TrackLeaseSites, where it was taken. Leases
// record their start only with Options.LeakThreshold or TrackLeaseSites set;
// without either it returns nil, and Stats.ActiveLeases gives the count. Items
// being created, checked or destroyed are not leases, nor is an item between
// two leases (being checked by a Lease call or reset by a Release). Its length
// never exceeds the number of leases out at one instant of the call, so it
// stays within MaxSize but after SetMaxSize shrank it, until the leases beyond
// the new MaxSize have ended. A leaked lease is listed until the garbage
// collector finds it. It costs the leases nothing, so a debug handler may call
// it under load, to look for slow or leaked leases when ErrLeaseTimeout
// appears: see "When leases time out" in the package documentation.
func (p *Pool[T]) Outstanding() []LeaseInfo { return p.ob.outstanding() }
