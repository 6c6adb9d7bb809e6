package pool

import "sync/atomic"

// entry is one item and the pool's bookkeeping for it. While the item is
// idle the idle ring (a slot or the queue) references its entry; while it
// is leased only the
// Lease handles do (and, briefly, the goroutine creating or handing it over).
// The pool keeps no list of all entries, so a lease dropped without Release
// leaves its entry unreachable, for the garbage collector to find.
type entry[T any] struct {
	// gen is the lease generation: a Lease is valid while gen equals the
	// value it was handed out with. Ending a lease (Release, Discard,
	// Detach) bumps it with a compare-and-swap, so of any number of copies
	// and stale handles exactly one call ends each lease.
	gen atomic.Uint64

	value T
	pool  *Pool[T]

	// The fields below belong to whoever holds the entry: the lease holder,
	// or the pool while it is idle (guarded by gate.mu in the queue).
	// Passing the entry through the gate's mutex, a slot's atomic pointer or
	// a creation's done channel publishes them.
	created int64 // clock at the end of creation, for MaxLifetime
	idleAt  int64 // clock at the last release, for IdleTimeout and CheckAfterIdle
	checked bool  // the Preparer has accepted the item at least once
}

// Lease is a leased item: the right to use Value until the lease ends with
// Release, Discard or Detach. End every lease exactly once, typically with
// defer l.Release() right after a successful Lease.
//
// A Lease is a small value. Copies are the same lease: ending it through
// one copy ends it for all of them, and ending it again (through any copy,
// or through a handle kept from an earlier lease of the same item) does
// nothing. The zero Lease is an ended lease.
type Lease[T any] struct {
	e   *entry[T]
	gen uint64
}

// end claims the right to end the lease; only one caller ever gets it.
func (l Lease[T]) end() bool {
	return l.e != nil && l.e.gen.CompareAndSwap(l.gen, l.gen+1)
}

// Value returns the leased item. It panics when the lease has ended (or is
// the zero Lease): using an item after giving it back would share it with
// its next borrower.
func (l Lease[T]) Value() T {
	if l.e == nil || l.e.gen.Load() != l.gen {
		panic("pool: Lease.Value called after the lease ended (Release, Discard or Detach), or on a zero Lease")
	}
	return l.e.value
}

// Release gives the item back for reuse. Options.Reset runs first (an error
// or panic destroys the item instead); an item past MaxLifetime, or
// released to a closed pool, is destroyed. Otherwise the item goes straight
// to the oldest waiting lease, or becomes idle. Release never waits for a
// permit and is safe to call more than once: calls after the first, on any
// copy, and on a zero Lease do nothing.
func (l Lease[T]) Release() {
	if l.end() {
		l.e.pool.release(l.e)
	}
}

// Discard destroys the item, for a caller that knows it is broken, and frees
// its permit: a waiting lease gets the right to create a fresh item. Like
// Release it does nothing on an ended lease.
func (l Lease[T]) Discard() {
	if l.end() {
		l.e.pool.destroyAndFree(l.e, reasonDiscard)
	}
}

// Detach ends the lease and takes the item out of the pool for good: the
// pool frees its permit and will never touch or destroy the item; disposing
// of it is now the caller's job. It panics on an ended or zero lease, since
// it has no item to return.
func (l Lease[T]) Detach() T {
	if !l.end() {
		panic("pool: Lease.Detach called after the lease ended (Release, Discard or Detach), or on a zero Lease")
	}
	return l.e.pool.detach(l.e)
}
