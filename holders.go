package pool

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
	"weak"
)

// Who holds the items: the registry of every entry, the scans that find
// the leases out now (for Outstanding and the watcher of LeakThreshold,
// watcher.go), and Outstanding.
//
// The invariant: nothing here writes on the lease and release fast path,
// and nothing here keeps an entry alive. The registry holds every entry
// weakly, from the end of its creation to the start of its destruction or
// Detach, so that a leaked lease still becomes unreachable (leaks.go); a
// scan holds the entries it looks at only until it returns.
//
// # Which entries are out
//
// A scan cannot ask a lease when it began: the fast path writes nothing
// for it (docs/DESIGN.md, "Who holds the items", says what a write there
// would cost). It reads what changes anyway:
//
//   - gen, bumped once as each lease ends (lease.go): a lease is an entry
//     and a generation;
//   - busy, flipped by the pool as it takes an entry for work of its own
//     between two leases and again as it lets go (flipBusy), so that it is
//     odd meanwhile: a fresh item being prepared, an idle one checked by
//     the upkeep and, when the pool marks its own work (route.marksOwnWork),
//     one being judged for a lease, reset, or waiting out a sweep on its
//     release;
//   - the idle entries, queued or parked, copied under the gate's lock
//     (gate.idleEntries).
//
// A scan reads gen and busy, then copies the idle entries, then reads gen
// and busy again: an entry is out when it is registered, not idle, its
// busy mark even and neither gen nor busy moved between the two reads. It is
// then out at the end of the copy, in the lease of the generation read
// (or in one of the windows below). Every path that takes an entry
// out of the idle ring to destroy it holds the entry in the critical
// section that takes it out (gate.drainIdle, takeWhere, resize, and
// takeIdleIf for the upkeep's checks), so a copy that no longer finds it
// finds its busy mark moved; an entry whose lease ended moved its gen; and an
// entry that left the registry after the scan listed it (destroyed or
// detached) has its busy mark at busyGone. So no entry waiting for its
// Destroy, nor one whose lease ended before the copy, is out, and each
// entry out is, at the end of the copy, leased or in one of the windows.
//
// The copy holds the gate's lock, which stops the queue but not the slots,
// and reads the slots one by one: a release could park its item in a slot
// already read and then it, or a goroutine after it, take one from a slot
// not read yet, two items neither idle in the copy nor ever leased at once.
// So the copy keeps bypass on (ring.go) while it reads the slots: a
// goroutine then moves an item into or out of a slot only if it loaded
// bypass before it came on, and only once, for its next lease or release
// waits for the lock. An item taken after its slot was read went to a Lease
// call begun before the copy; one parked after it belongs to a call still
// under way at the end of the copy, which loads bypass again before it
// returns and, while bypass is on, takes the item back for the gate; and no
// chain of goroutines, each parking and then taking, can form.
//
// Without TrackLeaseSites a scan can still list an item between two leases:
// one whose lease has ended but that is not idle yet, or on its way to its
// Destroy (gen has moved on before the first read), and one a lease has
// taken but not yet marked held to judge it. Such an item is in the hands
// of the Lease, Release, Discard or Detach call that moves it, not always
// for a few instructions only: a release may wait for the gate's lock,
// behind the scan itself, and log the end of a reported lease through the
// Logger. So Outstanding never lists more leases than are out, counting
// each from the start of its Lease call to the end of the call that ends
// it: whatever else may take long between two leases is marked busy. With
// TrackLeaseSites a scan knows exactly: the site records the generation of
// the lease it describes (recordSite), and an entry is out when its site
// describes its current generation.

// registry is every entry in existence, held weakly, for the scans.
type registry[T any] struct {
	mu  sync.Mutex
	all map[weak.Pointer[entry[T]]]struct{}
}

// add registers e, at the end of its creation.
func (r *registry[T]) add(e *entry[T]) {
	e.self = weak.Make(e)
	r.mu.Lock()
	if r.all == nil {
		r.all = make(map[weak.Pointer[entry[T]]]struct{})
	}
	r.all[e.self] = struct{}{}
	r.mu.Unlock()
}

// remove forgets e, as its destruction or Detach begins, and marks it
// gone for the scans that listed it before (see "Which entries are out").
func (r *registry[T]) remove(e *entry[T]) {
	e.busy.Store(busyGone)
	r.mu.Lock()
	delete(r.all, e.self)
	r.mu.Unlock()
}

// busyGone is entry.busy once the entry has left the registry: odd, and
// never even again.
const busyGone = math.MaxUint32

// list appends every registered entry to buf, and forgets those the
// garbage collector has taken: leaked leases, which their cleanups report.
func (r *registry[T]) list(buf []*entry[T]) []*entry[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	for wp := range r.all {
		if e := wp.Value(); e != nil {
			buf = append(buf, e)
		} else {
			delete(r.all, wp)
		}
	}
	return buf
}

// flipBusy marks the start, and then the end, of the pool's own work on e
// between two leases: busy is odd in between (see "Which entries are
// out"). Whoever holds e's permit calls it, in pairs.
func (e *entry[T]) flipBusy() { e.busy.Add(1) }

// scanBufs are a scan's buffers, kept by the watcher from one scan to the
// next, emptied of entries in between (drop).
type scanBufs[T any] struct {
	es   []*entry[T]
	idle []*entry[T]
	set  map[*entry[T]]struct{}
	seen []sighting[T]
}

// sighting is what a scan saw of one entry.
type sighting[T any] struct {
	e    *entry[T]
	gen  uint64
	busy uint32
	out  bool
	at   int64 // with TrackLeaseSites: when the lease was taken
}

// drop lets go of the entries the last scan held, so that it keeps none
// alive.
func (b *scanBufs[T]) drop() {
	clear(b.es)
	clear(b.idle)
	clear(b.seen)
	clear(b.set)
	b.es, b.idle, b.seen = b.es[:0], b.idle[:0], b.seen[:0]
}

// scan looks at every registered entry once, and returns what it saw and
// the pool's clock after it: see "Which entries are out". The caller drops
// b once done with what it saw.
func (p *Pool[T]) scan(b *scanBufs[T]) ([]sighting[T], int64) {
	b.es = p.reg.list(b.es)
	for _, e := range b.es {
		b.seen = append(b.seen, sighting[T]{e: e, gen: e.gen.Load(), busy: e.busy.Load()})
	}
	if p.route.sited {
		for i := range b.seen {
			x := &b.seen[i]
			s := x.e.site
			if !s.mu.TryRLock() {
				continue // a lease being recorded: not out yet (see leakSite)
			}
			lease, at := s.lease, s.at
			s.mu.RUnlock()
			x.out, x.at = lease == x.gen+1 && x.e.gen.Load() == x.gen, at
		}
		return b.seen, p.now()
	}
	b.idle = p.g.idleEntries(b.idle)
	if b.set == nil {
		b.set = make(map[*entry[T]]struct{}, len(b.idle))
	}
	for _, e := range b.idle {
		b.set[e] = struct{}{}
	}
	for i := range b.seen {
		x := &b.seen[i]
		_, idle := b.set[x.e]
		// Read again: out at the instant of the idle copy, in the lease x
		// saw, only when neither gen nor busy moved around it.
		x.out = !idle && x.busy&1 == 0 && x.e.gen.Load() == x.gen && x.e.busy.Load() == x.busy
	}
	return b.seen, p.now()
}

// LeaseInfo describes a lease out now: see Pool.Outstanding.
type LeaseInfo struct {
	// Age is how long the lease has been out; 0 unless Options.LeakThreshold
	// or Options.TrackLeaseSites is set. With TrackLeaseSites it is exact.
	// With LeakThreshold alone it counts from the first of the pool's scans
	// that saw the lease out, every LeakThreshold/8: it may fall short of
	// the truth by about that much, and is 0 for a lease no scan has seen
	// yet.
	Age time.Duration
	// Stack is the stack of the Lease (or TryLease, or Do) call that took
	// the lease, as in LeakReport; "" unless Options.TrackLeaseSites is on.
	Stack string
}

// Outstanding returns the leases out now, oldest first: for each, how long
// it has been out and, with Options.TrackLeaseSites, where it was taken.
// Items being created, checked by the upkeep or destroyed are not leases,
// and neither is an item between two leases: with LeakThreshold or
// TrackLeaseSites, not even one that a Lease call is checking with the
// Preparer, or a Release call resetting (without either, such an item is
// listed, without an age). An item may be listed while the Lease call that
// takes it, or the Release, Discard or Detach call that gives it back, is
// under way. So its length never exceeds Stats.ActiveLeases taken when
// nothing moves, nor the number of leases out at some instant of the call,
// counting each from the start of its Lease call to the end of the call
// that ends it, and stays within MaxSize, but for a while after SetMaxSize
// shrank it: until the leases beyond the new MaxSize have ended. It is the
// tool behind "look for slow or leaked leases" when ErrLeaseTimeout
// appears: safe to call from a debug handler under load, it takes no lock
// that a lease takes for longer than a copy of the idle items (during
// which leases and releases go through that lock rather than their
// processors' slots), and costs the leases nothing else. A lease leaked
// and found by the garbage collector is listed until then, and no longer
// after. See "When leases time out" in the package documentation.
func (p *Pool[T]) Outstanding() []LeaseInfo {
	var b scanBufs[T]
	defer b.drop()
	seen, now := p.scan(&b)
	out := []LeaseInfo{}
	for i := range seen {
		x := &seen[i]
		if !x.out {
			continue
		}
		var li LeaseInfo
		switch {
		case p.route.sited:
			li.Age = time.Duration(max(now-x.at, 0))
			li.Stack = x.e.site.stackOf(x.gen)
		case x.e.mark != nil:
			mk := x.e.mark
			since := mk.since.Load()
			if mk.lease.Load()&^reportedBit == followed(x.gen) {
				li.Age = time.Duration(max(now-since, 0))
			}
		}
		out = append(out, li)
	}
	slices.SortStableFunc(out, func(a, b LeaseInfo) int { return cmp.Compare(b.Age, a.Age) })
	return out
}
