package pool

import (
	"runtime"
	"slices"
	"sync/atomic"
	"unsafe"
)

// The idle ring: a row of per-processor slots, each holding at most one
// idle entry, in front of a queue that leases take from newest first.
//
// A release parks its entry in its processor's slot and the next lease there
// takes it back, on a cache line of the slot's own; anything else goes
// through gate.mu. A parked entry keeps its permit (in held, not idle), so
// parking touches no gate counter and held + idle <= size holds.
//
// Who writes a slot, and when:
//   - park, on release: nil → e by compare-and-swap, so goroutines sharing a
//     slot (portable build, or GOMAXPROCS grew) cannot overwrite each other.
//   - take, on lease: e → nil by compare-and-swap after a load found e;
//     nil or a lost race is a miss.
//   - steal, under gate.mu: e → nil, for missed leases, waiters, Clear, Close.
//
// The compare-and-swap's winner takes each parked entry, once, with its
// permit; ABA (taken and parked again in the same slot) is harmless, as any
// parked entry is an idle entry with its permit.
//
// Bypass, so waiters go first and no entry is stranded: while a lease waits
// or the gate is closed no item may sit in a slot, so the gate keeps bypass
// set, under gate.mu, until an item goes idle or a permit comes free with
// nobody waiting (gate.setBypass). While it is set, take and park do
// nothing; the gate, having set it, steals every parked entry; and park,
// having filled its slot, loads bypass again and, if set, takes its entry
// back (if still there) for the slow path.
//
// So a racing park cannot strand its entry. The atomics are sequentially
// consistent and each side writes (park: the slot; the gate: bypass) before
// reading the other's: if park's second load precedes the gate's store, its
// slot write precedes the gate's scan, which sees the entry; otherwise park
// sees bypass; if both, one compare-and-swap wins. A lease that read bypass
// clear just before a waiter queued may take a parked entry: it came first.

// cacheLine pads data different processors write: two 64-byte lines, for
// x86's adjacent-line prefetcher. Pads are computed from unsafe.Sizeof of a
// stand-in of the same size, as the size of a T-dependent type is not constant.
const cacheLine = 128

// slot is one processor's parking place and its share of the lease
// counters, on the slot's line; Stats sums them.
type slot[T any] struct {
	e atomic.Pointer[entry[T]]
	// woke: the waiter last woken here, until it runs (gate.stepAside). Set by
	// gate.unlock, pinned here, before the wake-up; cleared by the waiter, on
	// any processor, by compare-and-swap, lest it clear a later wake.
	woke atomic.Pointer[waiter[T]]
	slotCounters
	_ [cacheLine - unsafe.Sizeof(struct {
		_, _ atomic.Pointer[byte]
		slotCounters
	}{})%cacheLine]byte
}

type slotCounters struct {
	leases   atomic.Uint64 // leases completed on this processor: see countLease
	waits    atomic.Uint64 // leases whose wait ended on this processor (gate.await)
	waitTime atomic.Int64
}

// slots is the row of per-processor slots. Its header, read on every lease
// and release and written only when bypass changes, has a line of its own.
type slots[T any] struct {
	s []slot[T] // immutable after init; len(s) is a power of two
	slotsHeader
	_ [cacheLine - unsafe.Sizeof(struct {
		_ []byte
		slotsHeader
	}{})%cacheLine]byte
}

type slotsHeader struct {
	mask   int // len(s) - 1
	bypass atomic.Bool
	// era counts Clears: an entry of an older era is retired instead of
	// lent or made idle again. Here, as every lease reads this line anyway.
	era atomic.Uint64
	// overflowLeases: for processors past the row's end (see countLease).
	overflowLeases atomic.Uint64
}

// init makes a slot per processor (shared, slower, if GOMAXPROCS grows).
func (r *slots[T]) init() {
	n := 1
	for n < max(runtime.GOMAXPROCS(0), runtime.NumCPU()) {
		n *= 2
	}
	r.s = make([]slot[T], n)
	r.mask = n - 1
}

// countLease counts a lease on pinned processor pid and returns the prior
// count, for observer.sampled. When pinning, only a slot's own processor
// writes its counter, so an atomic load then store loses no count; past the
// row's end, or in the portable build, counters are shared: atomic adds.
func (r *slots[T]) countLease(pid int) (k uint64) {
	if pinsProcessor && pid <= r.mask {
		s := &r.s[pid]
		k = s.leases.Load()
		s.leases.Store(k + 1)
		return k
	}
	c := &r.overflowLeases
	if !pinsProcessor {
		c = &r.s[pid&r.mask].leases
	}
	return c.Add(1) - 1
}

// take is written out in Pool.lease, and park's fast path in Pool.release
// (docs/DESIGN.md, "Take and park, written out").

// park parks e, whose permit the caller holds, in its processor's slot. On
// false (slot full or bypass set) e and its permit stay with the caller.
func (r *slots[T]) park(e *entry[T]) bool {
	if r.bypass.Load() {
		return false
	}
	s := &r.s[procPin()&r.mask] // mine, without the call
	procUnpin()
	return s.e.CompareAndSwap(nil, e) && r.confirm(s, e)
}

// confirm finishes a park: if bypass came on, it takes e back if still
// there and reports false, for the caller to give e to the gate.
func (r *slots[T]) confirm(s *slot[T], e *entry[T]) bool {
	return !r.bypass.Load() || !s.e.CompareAndSwap(e, nil)
}

// steal takes any parked entry, with its permit, or nil, under gate.mu.
func (r *slots[T]) steal() *entry[T] {
	for i := range r.s {
		s := &r.s[i]
		if e := s.e.Load(); e != nil && s.e.CompareAndSwap(e, nil) {
			return e
		}
	}
	return nil
}

type slotSums struct {
	parked        int
	leases, waits uint64
	waitTime      int64
}

// scan sums the slots; they change under it, so the sums are an estimate.
func (r *slots[T]) scan() (sums slotSums) {
	for i := range r.s {
		s := &r.s[i]
		if s.e.Load() != nil {
			sums.parked++
		}
		sums.leases += s.leases.Load()
		sums.waits += s.waits.Load()
		sums.waitTime += s.waitTime.Load()
	}
	sums.leases += r.overflowLeases.Load()
	return sums
}

// idleQueue, the ring's queue, holds the idle entries oldest first, under
// gate.mu. Items join at the tail and leases take the newest, so items beyond
// the load's need stay at the head long enough to expire (expiry.go); Close,
// Clear and a shrink take from the head. It keeps no reference to an entry it
// gave out (slices.Delete and DeleteFunc clear the cells they vacate): a
// leased entry must be reachable only from its Lease handles, so the garbage
// collector can find a lease dropped unreleased.
type idleQueue[T any] []*entry[T]

func (q *idleQueue[T]) push(e *entry[T]) { *q = append(*q, e) }

// popNewest removes and returns the newest entry, or nil.
func (q *idleQueue[T]) popNewest() *entry[T] {
	n := len(*q) - 1
	if n < 0 {
		return nil
	}
	e := (*q)[n]
	*q = slices.Delete(*q, n, n+1)
	return e
}

// popOldest appends up to n of the oldest entries to es, removing them.
func (q *idleQueue[T]) popOldest(es []*entry[T], n int) []*entry[T] {
	n = max(min(n, len(*q)), 0)
	es = append(es, (*q)[:n]...)
	*q = slices.Delete(*q, 0, n)
	return es
}
