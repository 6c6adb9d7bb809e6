package pool

import (
	"runtime"
	"sync/atomic"
	"time"
	"weak"
)

// entry is an item with its bookkeeping: the idle ring holds it while idle,
// the registry (observer.go) weakly; while it is leased only its Lease handles
// reach it, so the garbage collector finds a lease dropped unended (leaks.go).
type entry[T any] struct {
	// gen is the lease generation: a Lease is valid while gen equals its own.
	gen atomic.Uint64
	// atEnd is what the lease's end must account for (observer.leaseEnded),
	// one word every release tests; holder and watcher change its bits
	// atomically. Beside gen, on the line the release has just written: a
	// line of its own would be shared with the next entry in memory.
	atEnd atomic.Uint32

	value T
	pool  *Pool[T]
	era   uint64 // slots.era when the item's creation began: see gate.retired

	// The fields below belong to whoever holds the entry: the lease holder,
	// or the pool while it is idle (guarded by gate.mu in the queue).
	// Passing the entry through the gate's mutex, a slot's atomic pointer or
	// a creation's done channel publishes them.
	createdAt int64 // clock at the end of the item's creation
	idleFor   int64 // how long the item sat idle before the current lease; set only when the pool stamps releases
	deadline  int64 // clock past which the item has outlived its lifetime; math.MaxInt64: never
	idleAt    int64 // clock at the last release, for IdleTimeout and CheckAfterIdle
	checkedAt int64 // clock at the upkeep's last successful check, for CheckAfterIdle
	checked   bool  // the Preparer has accepted the item at least once

	useFrom int64 // a sampled lease's start (atEndSampled; metrics.go)

	// Made as the creation ends (observer.watch): cleanup reports a leak
	// (stopped before Destroy or Detach; leaks.go); as the options ask, rec is
	// the latest lease's record, trace what the lease's end reports to the
	// Tracer (trace.go), self the registry's weak pointer to the entry.
	cleanup runtime.Cleanup
	rec     *leaseRecord
	trace   *traceState
	self    weak.Pointer[entry[T]]
}

const (
	atEndSampled  = 1 << iota // the lease is sampled for pool.lease.use_time, from useFrom
	atEndReported             // LeakThreshold's scan reported the lease as held: log its end
)

// Lease is a leased item: the right to use Value until the lease ends with
// Release, Discard or Detach. End every lease exactly once, typically with
// defer l.Release() right after a successful Lease.
//
// A Lease is a small value; its copies are the same lease: ending it through
// one ends it for all, and ending it again, through any copy or a handle kept
// from an earlier lease of the item, does nothing. The zero Lease is ended.
type Lease[T any] struct {
	e   *entry[T]
	gen uint64
}

// end claims the right to end the lease, by compare-and-swap on gen: of all
// the handles naming the entry, copies and stale ones alike, one caller only
// wins, so an item is never given back twice or used after its lease ended.
func (l Lease[T]) end() bool {
	return l.e != nil && l.e.gen.CompareAndSwap(l.gen, l.gen+1)
}

// live returns the lease's entry, or panics if the lease has ended.
func (l Lease[T]) live(method string) *entry[T] {
	if l.e == nil || l.e.gen.Load() != l.gen {
		panicEnded(method)
	}
	return l.e
}

func panicEnded(method string) {
	panic("pool: Lease." + method + " called after the lease ended (Release, Discard or Detach), or on a zero Lease")
}

// Value returns the leased item. It panics when the lease has ended (or is
// the zero Lease): using an item after giving it back would share it with
// its next borrower.
func (l Lease[T]) Value() T {
	return l.live("Value").value
}

// CreatedAt returns when the item's creation finished, as time.Now would
// have read then (with a monotonic reading, so time.Since is exact). It
// panics when the lease has ended, as Value does.
func (l Lease[T]) CreatedAt() time.Time {
	e := l.live("CreatedAt")
	return e.pool.started.Add(time.Duration(e.createdAt))
}

// IdleFor returns how long the item sat idle before this lease: from the
// release that ended its previous lease (or from its creation, for an item
// whose first lease gave up on it) to this lease; 0 for an item created for
// this lease. It is always 0 unless the pool reads the clock on release, which
// it does when Options.IdleTimeout, MaxLifetime or (with a Preparer)
// CheckAfterIdle is set. It panics when the lease has ended, as Value does.
func (l Lease[T]) IdleFor() time.Duration {
	return time.Duration(l.live("IdleFor").idleFor)
}

// Uses returns how many leases the item has had, this one included: 1 for a
// new item. It costs nothing: the lease's handle counts them. It panics when
// the lease has ended, as Value does.
func (l Lease[T]) Uses() int {
	l.live("Uses")
	return int(l.gen) + 1
}

// Release gives the item back for reuse. Options.Reset runs first (an error or
// panic destroys the item instead); an item past MaxLifetime, or released to a
// closed pool, is destroyed. Otherwise it goes straight to the oldest waiting
// lease, or becomes idle. Release never waits and is safe to call more than
// once: calls after the first, on any copy, and on a zero Lease do nothing.
func (l Lease[T]) Release() {
	if l.end() {
		l.e.pool.release(l.e)
	}
}

// Discard destroys the item, for a caller that knows it is broken, and makes
// room for another: a waiting lease gets the right to create a fresh item.
// Like Release it does nothing on an ended lease.
func (l Lease[T]) Discard() {
	if l.end() {
		l.e.pool.end(l.e, reasonDiscard, "discard")
	}
}

// Detach ends the lease and takes the item out of the pool for good: the
// pool no longer counts it against MaxSize and will never touch or destroy
// it; disposing of it is now the caller's job. It panics on an ended or
// zero lease, since it has no item to return. When a Tracer's Released
// panics in it, Detach returns nothing and the pool destroys the item.
func (l Lease[T]) Detach() T {
	if !l.end() {
		panicEnded("Detach")
	}
	return l.e.pool.detach(l.e)
}
