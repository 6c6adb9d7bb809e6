package pool

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
	"weak"
)

// Who holds the items: the registry of every entry, the scan that finds the
// leases out now (for Outstanding and the watcher, watcher.go), and
// Outstanding. Nothing here writes on the fast path or keeps an entry
// alive: the registry holds entries weakly, from the end of their creation
// to the start of their destruction or Detach, so that a leaked lease still
// becomes unreachable (leaks.go).
//
// # Which entries are out
//
// A scan reads each entry's gen (bumped as each lease ends, lease.go) in
// two passes, and lists the entries whose gen did not move between them
// and which were out at the first. Each listed lease was then out for the
// whole instant between the passes: Outstanding never lists more leases
// than were out at one instant of its call.
//
// With LeakThreshold or TrackLeaseSites each lease records its start
// (leaseRecord): an entry is out at the first pass when its record is the
// current generation's. An item between two leases (judged, reset,
// destroyed) has no record for its generation, and is never listed.
//
// Without either, leases record nothing (a store on every lease would cost
// the fast path), and the first pass reads what changes anyway: besides
// gen, busy, which the pool flips to odd while it works on an entry of its
// own (flipBusy: a fresh item prepared, an idle one checked by the upkeep,
// one taken out of the idle ring to be destroyed, under the gate's lock),
// and the idle entries, copied under the gate's lock with the slots'
// bypass on (gate.idleEntries), so that no item moves between slots while
// the copy reads them. An entry is out at the copy when it is registered,
// not idle, and its busy mark even; the second pass finds busy or gen moved
// for one that left the idle ring or the registry (busyGone) meanwhile. An
// item a Lease call is judging or a Release call resetting is listed then.

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
	at   int64 // with a record: when the lease began
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

// scan looks at every registered entry, in the two passes of "Which
// entries are out", and returns what it saw and the pool's clock after it.
// The caller drops b once done with what it saw.
func (p *Pool[T]) scan(b *scanBufs[T]) ([]sighting[T], int64) {
	b.es = p.reg.list(b.es)
	for _, e := range b.es {
		x := sighting[T]{e: e, gen: e.gen.Load(), busy: e.busy.Load()}
		if e.rec != nil {
			x.at, x.out = e.rec.startOf(x.gen)
		}
		b.seen = append(b.seen, x)
		if testSighted != nil {
			testSighted(e)
		}
	}
	if !p.route.recorded {
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
			x.out = !idle && x.busy&1 == 0 && x.e.busy.Load() == x.busy
		}
	}
	for i := range b.seen {
		x := &b.seen[i]
		x.out = x.out && x.e.gen.Load() == x.gen
	}
	return b.seen, p.now()
}

// testSighted, set by tests only, runs after the first pass reads an entry.
var testSighted func(e any)

// LeaseInfo describes a lease out now: see Pool.Outstanding.
type LeaseInfo struct {
	// Age is how long the lease has been out, from the moment its Lease
	// call got the item; 0 unless Options.LeakThreshold or
	// Options.TrackLeaseSites is set.
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
// listed, without an age). Its length never exceeds the number of leases
// out at one instant of the call, counting each from the start of its
// Lease call to the end of the call that ends it, so it stays within
// MaxSize, but for a while after SetMaxSize shrank it: until the leases
// beyond the new MaxSize have ended. It is the tool behind "look for slow or
// leaked leases" when ErrLeaseTimeout appears, safe to call from a debug
// handler under load: it costs the leases nothing, and without LeakThreshold
// or TrackLeaseSites it holds the lock that leases and releases take when
// their processor's slot cannot serve them for a copy of the idle items,
// during which they all take it. A lease leaked and found by the garbage
// collector is listed until then, and no longer after. See "When leases
// time out" in the package documentation.
func (p *Pool[T]) Outstanding() []LeaseInfo {
	var b scanBufs[T]
	defer b.drop()
	seen, now := p.scan(&b)
	out := []LeaseInfo{}
	for _, x := range seen {
		if !x.out {
			continue
		}
		var li LeaseInfo
		if x.e.rec != nil {
			li.Age = time.Duration(max(now-x.at, 0))
			li.Stack = x.e.rec.stackOf(x.gen)
		}
		out = append(out, li)
	}
	slices.SortStableFunc(out, func(a, b LeaseInfo) int { return cmp.Compare(b.Age, a.Age) })
	return out
}
