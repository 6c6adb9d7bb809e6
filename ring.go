package pool

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// The idle ring holds the items waiting to be reused: a row of
// per-processor slots, each holding at most one idle entry, in front of a
// queue that leases take from newest first (see The queue).
//
// # The slots
//
// A release parks its entry in the slot of the processor (the runtime's P)
// it runs on, and the next lease on that processor takes it back. Each slot
// sits on a cache line of its own, so a lease and release that hit their
// slot write no cache line that another processor writes: under two-core
// contention that, not the count of atomic instructions, is the cost (see
// bench/JOURNAL.md, "Designs measured and rejected", design E). Anything
// else goes through the gate's mutex.
//
// A parked entry keeps the permit of the lease that released it: the gate
// counts it in held, not in idle. So parking and taking back touch no
// counter of the gate's, and held + idle <= size still bounds the items in
// existence. Stats subtract the parked entries, found by scanning the slots,
// from the permits held.
//
// Who writes a slot, and when:
//   - park, on release: nil → e, by compare-and-swap, so two goroutines that
//     share a slot (the portable build, or a processor past the row's end
//     after GOMAXPROCS grew) cannot overwrite each other.
//   - take, on lease: e → nil, by compare-and-swap after a load that
//     found e; finding nil, or losing the race, is a miss.
//   - steal, under gate.mu: e → nil, for leases that missed their own slot,
//     for waiters, Clear and Close.
//
// Every entry taken from a slot was taken exactly once, by whoever won the
// compare-and-swap, with the permit that came with it. An entry can be
// parked again in the same slot after being taken (a compare-and-swap on
// the pointer cannot tell the two parkings apart), which is harmless: any
// parked entry is an idle entry with its permit, whoever parked it.
//
// # Bypass: keeping waiters first and no entry stranded
//
// While a lease waits in the gate's queue, or the gate is closed, items
// must not sit in slots: a waiter would wait while an item idles, and a
// closed pool must destroy every item. The gate keeps bypass set in those
// states, and for a while after a wait ends: until an item goes idle, or
// its permit comes free, with nobody waiting (see gate.setBypass). It
// changes bypass under gate.mu, and:
//   - take and park do nothing while bypass is set;
//   - the gate, after setting bypass, steals every parked entry: hands it to
//     the oldest waiter, or destroys it on Close;
//   - park, after filling its slot, loads bypass again, and when it is set
//     takes its entry back (if still there) for the gate's slow path.
//
// A park racing with the setting of bypass therefore cannot strand its
// entry. The atomics are sequentially consistent, and each side writes
// (park: the slot; the gate: bypass) before it reads what the other wrote.
// If park's second load of bypass comes before the gate's store, then
// park's write to the slot comes before the gate's scan of the slots, which
// sees the entry. Otherwise park sees bypass set. Both may happen; then
// both try the compare-and-swap, and one wins.
//
// A lease that reads bypass clear just before a waiter queues may still
// take a parked entry: it came first, as far as anyone can tell.

// cacheLine is the padding between data that different processors write.
// It is two 64-byte lines, because the adjacent-line prefetcher of x86 pulls
// lines in pairs. The pads below are computed from unsafe.Sizeof, as
// sync.Pool's are, so that they hold on every GOARCH: the size of a type
// that depends on T is not a constant, so each pad measures a stand-in
// with T's pointer or slice replaced by one of the same size.
const cacheLine = 128

// slot is one processor's parking place, and its share of the counters
// that leases write on their way: kept per processor, on the slot's line,
// so that no counter is a cache line both processors write. Stats sums them.
type slot[T any] struct {
	e atomic.Pointer[entry[T]]
	slotCounters
	_ [cacheLine - unsafe.Sizeof(struct {
		_ atomic.Pointer[byte]
		slotCounters
	}{})%cacheLine]byte
}

// slotCounters are a slot's counters.
type slotCounters struct {
	// leases counts the leases completed on this slot's processor: taken
	// from this slot, or through the gate. See countLease for who writes
	// it and how.
	leases atomic.Uint64
	// waits and waitTime count the leases that queued on this processor
	// and the time they spent queued; written as leases is (countWait).
	waits    atomic.Uint64
	waitTime atomic.Int64
}

// slots is the row of per-processor slots. Its header is read on every
// lease and release and written only when bypass changes, so it has a line
// of its own, apart from the gate's mutex.
type slots[T any] struct {
	s []slot[T] // immutable after init; len(s) is a power of two
	slotsHeader
	_ [cacheLine - unsafe.Sizeof(struct {
		_ []byte
		slotsHeader
	}{})%cacheLine]byte
}

// slotsHeader is the row's header but for the row itself.
type slotsHeader struct {
	mask   int // len(s) - 1
	bypass atomic.Bool
	// era counts the calls of Clear: an entry whose era is older was
	// created, or began its creation, before the last Clear, and is
	// retired instead of lent or made idle again. It sits here, on the
	// line every lease and release reads anyway, written once a Clear.
	era atomic.Uint64
	// overflowLeases, overflowWaits and overflowWaitTime count for the
	// processors past the row's end (GOMAXPROCS grew after init): see
	// countLease.
	overflowLeases   atomic.Uint64
	overflowWaits    atomic.Uint64
	overflowWaitTime atomic.Int64
}

// init makes a slot for every processor that can run at once now. If
// GOMAXPROCS grows later, processors share slots, which costs only speed.
func (r *slots[T]) init() {
	n := 1
	for n < max(runtime.GOMAXPROCS(0), runtime.NumCPU()) {
		n *= 2
	}
	r.s = make([]slot[T], n)
	r.mask = n - 1
}

// mine returns the calling processor's slot. The goroutine may move to
// another processor right after, which costs only locality.
func (r *slots[T]) mine() *slot[T] {
	s := &r.s[procPin()&r.mask]
	procUnpin()
	return s
}

// countLease counts a lease completed on processor pid, which the caller
// has pinned (procPin), and returns the processor's count of leases before
// it, which pool.lease.use_time samples by (sampledForUse). In the build
// that pins, a slot's lease counter is written by its own processor only,
// and only while pinned, so no two writes race and a plain load and store
// do, where a locked add would be one more locked instruction on every
// lease. A processor past the row's end shares a slot with another, so it
// counts in overflowLeases instead. The portable build pins nothing, and
// goroutines share slots: it adds.
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

// countWait counts a lease that waited for waited, on the processor it
// runs on, as countLease counts a lease: pinned, with plain loads and
// stores on the processor's own slot, where a locked add would take two
// more locked instructions on every wait.
func (r *slots[T]) countWait(waited int64) {
	pid := procPin()
	defer procUnpin()
	switch {
	case !pinsProcessor:
		s := &r.s[pid&r.mask]
		s.waits.Add(1)
		s.waitTime.Add(waited)
	case pid <= r.mask:
		s := &r.s[pid]
		s.waits.Store(s.waits.Load() + 1)
		s.waitTime.Store(s.waitTime.Load() + waited)
	default:
		r.overflowWaits.Add(1)
		r.overflowWaitTime.Add(waited)
	}
}

// take (on lease) is written out in Pool.lease, and park's fast path in
// Pool.release, to save a call each on the fast path (see docs/DESIGN.md,
// "Take and park, written out").

// park parks e, an idle entry whose permit the caller holds, in the calling
// processor's slot. It reports false, leaving e and its permit with the
// caller, when the slot is full or bypass is set.
func (r *slots[T]) park(e *entry[T]) bool {
	if r.bypass.Load() {
		return false
	}
	s := &r.s[procPin()&r.mask] // mine, without the call
	procUnpin()
	return s.e.CompareAndSwap(nil, e) && r.confirm(s, e)
}

// confirm finishes a park of e in s: it loads bypass again and, when it came
// on as e was parked, takes e back if it is still there and reports false:
// the caller must give e to the gate. See the protocol above.
func (r *slots[T]) confirm(s *slot[T], e *entry[T]) bool {
	return !r.bypass.Load() || !s.e.CompareAndSwap(e, nil)
}

// steal takes any parked entry, with its permit, or returns nil when none is
// parked. Caller holds gate.mu.
func (r *slots[T]) steal() *entry[T] {
	for i := range r.s {
		s := &r.s[i]
		if e := s.e.Load(); e != nil && s.e.CompareAndSwap(e, nil) {
			return e
		}
	}
	return nil
}

// slotSums are the slots' figures summed up.
type slotSums struct {
	parked        int
	leases, waits uint64
	waitTime      int64
}

// scan counts the parked entries and sums the slots' counters. The slots
// change under it, so the figures are a moment's estimate.
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
	sums.waits += r.overflowWaits.Load()
	sums.waitTime += r.overflowWaitTime.Load()
	return sums
}

// # The queue
//
// Behind the slots is the queue: a circular buffer of entries, guarded by
// the gate's mutex (gate.mu), so that taking a permit and taking an idle
// item are one critical section and a release can choose between a waiter
// and the queue atomically. Items join at the tail. A lease takes the
// newest, from the tail: a lightly used pool then keeps reusing the same
// few items, and the ones beyond what its load needs stay at the head,
// idle longest, until the sweep for expiry (expiry.go) destroys them. Taken
// oldest first, they would all stay in use by turns, and never idle long
// enough to expire. Close, Clear and a shrink drain from the head.
//
// The queue never keeps a reference to an entry it gave out: pop and popNewest
// clear the slot they read. That matters beyond tidiness: a leased entry must
// be reachable only from its Lease handles, so that the garbage collector can
// find a lease that was dropped without being released.
type idleQueue[T any] struct {
	buf  []*entry[T] // len(buf) is a power of two, or zero before first use
	head int         // index of the oldest entry
	n    int         // entries in the queue
}

// len returns the number of idle entries. Caller holds gate.mu.
func (q *idleQueue[T]) len() int { return q.n }

// push appends e at the tail. Caller holds gate.mu.
func (q *idleQueue[T]) push(e *entry[T]) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = e
	q.n++
}

// pop removes and returns the oldest entry, or nil when the queue is empty.
// Caller holds gate.mu.
func (q *idleQueue[T]) pop() *entry[T] {
	if q.n == 0 {
		return nil
	}
	e := q.buf[q.head]
	q.buf[q.head] = nil // the queue keeps no reference to an entry it gave out
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return e
}

// filter removes the entries for which drop reports true, keeping the
// others in their order. Caller holds gate.mu.
func (q *idleQueue[T]) filter(drop func(*entry[T]) bool) {
	mask := len(q.buf) - 1
	kept := 0
	for i := range q.n {
		at := (q.head + i) & mask
		e := q.buf[at]
		q.buf[at] = nil
		if !drop(e) {
			q.buf[(q.head+kept)&mask] = e
			kept++
		}
	}
	q.n = kept
}

// popNewest removes and returns the newest entry, or nil when the queue is
// empty. Caller holds gate.mu.
func (q *idleQueue[T]) popNewest() *entry[T] {
	if q.n == 0 {
		return nil
	}
	q.n--
	at := (q.head + q.n) & (len(q.buf) - 1)
	e := q.buf[at]
	q.buf[at] = nil
	return e
}

// grow doubles the buffer. The queue never holds more than MaxSize entries,
// but MaxSize may be large and mostly unused, so it grows on demand rather
// than being sized up front.
func (q *idleQueue[T]) grow() {
	size := 2 * len(q.buf)
	if size == 0 {
		size = 8
	}
	buf := make([]*entry[T], size)
	for i := 0; i < q.n; i++ {
		buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	q.buf, q.head = buf, 0
}
