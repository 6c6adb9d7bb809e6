package pool

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"weak"

	"go.opentelemetry.io/otel/metric"
)

// Lease handles and leak detection.
//
// The invariant: of all the handles that name an entry, copies and stale
// ones alike, exactly one call ends each lease (the compare-and-swap on
// entry.gen), so an item is never given back twice or used after its
// lease ended; and while an item is leased only its handles reach its
// entry, so a lease dropped without ending is found by the garbage
// collector, at no cost per lease.

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
	era   uint64 // slots.era when the item's creation began: see retired

	// The fields below belong to whoever holds the entry: the lease holder,
	// or the pool while it is idle (guarded by gate.mu in the queue).
	// Passing the entry through the gate's mutex, a slot's atomic pointer or
	// a creation's done channel publishes them.
	createdAt int64 // clock at the end of the item's creation
	idleFor   int64 // how long the item sat idle before the current lease; set only when the pool reads the clock on release
	deadline  int64 // clock past which the item has outlived its lifetime; math.MaxInt64: never
	idleAt    int64 // clock at the last release, for IdleTimeout and CheckAfterIdle
	checkedAt int64 // clock at the upkeep's last successful check, for CheckAfterIdle
	checked   bool  // the Preparer has accepted the item at least once

	// cleanup reports the entry leaked when the garbage collector finds it
	// unreachable; destroying or detaching the item stops it first. site,
	// with TrackLeaseSites, is where the current lease was taken; the
	// cleanup reads it. Both are set at creation: see leak detection below.
	cleanup runtime.Cleanup
	site    *leakSite
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

// live returns the lease's entry, and panics, naming the method, when the
// lease has ended or is the zero Lease.
func (l Lease[T]) live(method string) *entry[T] {
	if l.e == nil || l.e.gen.Load() != l.gen {
		panic("pool: Lease." + method + " called after the lease ended (Release, Discard or Detach), or on a zero Lease")
	}
	return l.e
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
// whose first lease gave up on it) to this lease. It is 0 for an item
// created for this lease, and known only when the pool reads the clock on
// release, which it does when Options.IdleTimeout, MaxLifetime or (with a
// Preparer) CheckAfterIdle is set: otherwise it is always 0. It panics
// when the lease has ended, as Value does.
func (l Lease[T]) IdleFor() time.Duration {
	e := l.live("IdleFor")
	if !e.pool.stamp {
		return 0
	}
	return time.Duration(e.idleFor)
}

// Uses returns how many leases the item has had, this one included: 1 for
// a new item. It costs nothing: every lease of an item ends exactly once,
// and the lease's handle counts them. It panics when the lease has ended,
// as Value does.
func (l Lease[T]) Uses() int {
	l.live("Uses")
	return int(l.gen) + 1
}

// Release gives the item back for reuse. Options.Reset runs first (an error
// or panic destroys the item instead); an item past MaxLifetime, or
// released to a closed pool, is destroyed. Otherwise the item goes straight
// to the oldest waiting lease, or becomes idle. Release never waits and is
// safe to call more than once: calls after the first, on any copy, and on a
// zero Lease do nothing.
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
		l.e.pool.destroyAndFreeLogged(l.e, reasonDiscard)
	}
}

// Detach ends the lease and takes the item out of the pool for good: the
// pool no longer counts it against MaxSize and will never touch or destroy
// it; disposing of it is now the caller's job. It panics on an ended or
// zero lease, since it has no item to return.
func (l Lease[T]) Detach() T {
	if !l.end() {
		panic("pool: Lease.Detach called after the lease ended (Release, Discard or Detach), or on a zero Lease")
	}
	return l.e.pool.detach(l.e)
}

// # Leak detection
//
// The pool keeps no reference to a leased entry (see entry), so a lease
// dropped without Release, Discard or Detach leaves its entry unreachable.
// Each entry gets one runtime.AddCleanup at creation, nothing per lease;
// the cleanup runs once the garbage collector finds the entry unreachable,
// which happens in three cases:
//
//  1. A leaked lease: report it.
//  2. The item was destroyed or detached: destroy and detach stop the
//     cleanup first, so it never runs.
//  3. The pool itself was dropped without Close, and with it the idle ring
//     and the idle entries in it: not a leak, report nothing.
//
// The cleanup's argument, a leakArg, must reach neither the entry (or the
// entry would never become unreachable: the runtime keeps the argument
// alive as a root) nor the pool (the pool reaches its idle entries, so it
// could never be collected either). It reaches the pool's leakSink, which
// refers to the pool only through a weak pointer, and the entry's leakSite.
//
// Telling 1 from 3: an idle entry is reachable from its pool, so an idle
// entry dies with its pool, in the same cycle or later, never earlier. The
// runtime clears a weak pointer when it sweeps the dead object's span, and
// weak.Pointer.Value sweeps that span first if it has not been swept yet
// (runtime.makeStrongFromWeak calls ensureSwept): so a cleanup that runs
// for an entry that died with its pool always sees the weak pointer nil.
// When Value returns the pool, the pool is alive and the entry was not idle
// in it: a leaked lease. (A lease leaked from a pool that was itself
// dropped is not reported: nobody can use that pool any more.)
//
// The race detector sees the cleanup goroutine as synchronized with
// everything before it (runtime.runCleanups calls racefingo), which is what
// makes reading the site, written by the last Lease without atomics, sound;
// in the Go memory model the entry's unreachability orders the two.

// LeakReport describes a leaked lease: one that became unreachable without
// Release, Discard or Detach. Options.OnLeak receives it.
type LeakReport struct {
	// Pool is the pool's Name.
	Pool string
	// Age is how long the lease had been out when the garbage collector
	// found it; 0 unless Options.TrackLeaseSites is on.
	Age time.Duration
	// Stack is the stack of the Lease (or TryLease) call that took the
	// lease, innermost first, one "function\n\tfile:line" per frame; ""
	// unless Options.TrackLeaseSites is on.
	Stack string
}

// leakSink is a pool's share of leak detection: what the cleanups of its
// entries reach. It refers to the pool only weakly, through alive. It is not
// generic, so that leakFound is a plain function: a generic one would cost
// every creation one more allocation, for its dictionary.
type leakSink struct {
	alive  func() bool // the pool has not been collected: see newLeakSink
	name   string
	onLeak func(LeakReport)
	leaked atomic.Uint64 // Stats.Leaked

	counter metric.Int64Counter // pool.leases.leaked; nil without metrics
	add     []metric.AddOption
}

// leakStackDepth bounds the frames a leakSite records.
const leakStackDepth = 32

// leakSite is where an entry's current lease was taken, written by each
// Lease when TrackLeaseSites is on. It is made with the entry, so a lease
// allocates nothing; only the lease holder writes it, only the cleanup
// (once the entry is unreachable) reads it.
type leakSite struct {
	at  int64 // monotime at the lease
	n   int   // pcs in use
	pcs [leakStackDepth]uintptr
}

// newLeakSink returns the leak sink of the pool p, holding p weakly.
func newLeakSink[T any](p *Pool[T]) *leakSink {
	wp := weak.Make(p)
	return &leakSink{
		alive:  func() bool { return wp.Value() != nil },
		name:   p.opts.Name,
		onLeak: p.opts.OnLeak,
	}
}

// leakArg is the argument of an entry's cleanup.
type leakArg struct {
	sink *leakSink
	site *leakSite // nil without TrackLeaseSites
}

// watch registers e's cleanup. Called once, at creation.
func watch[T any](s *leakSink, e *entry[T], trackSite bool) {
	if trackSite {
		e.site = new(leakSite)
	}
	e.cleanup = runtime.AddCleanup(e, leakFound, leakArg{sink: s, site: e.site})
}

// leakSiteSkip makes runtime.Callers start at the caller of Lease or
// TryLease: it skips Callers, recordSite and Lease (or TryLease), which
// calls recordSite itself. The walk reads each frame's tables from the
// start of its function, so starting it from Lease, a small function, and
// not from deep inside the lease path, keeps it cheap.
// TestLeakReportNamesTheLeasingFunction checks it.
const leakSiteSkip = 3

// recordSite notes when and where the lease of e was taken.
func recordSite[T any](e *entry[T]) {
	e.site.at = monotime()
	e.site.n = runtime.Callers(leakSiteSkip, e.site.pcs[:])
}

// leakFound is the cleanup of an entry: it runs on the runtime's cleanup
// goroutine once the entry is unreachable, and counts and reports a leak
// unless the pool is gone too (see above). OnLeak runs on a goroutine of
// its own, so a slow or blocking OnLeak holds up no other cleanup. The
// permit of the leaked lease stays held: the item may still be in use.
func leakFound(a leakArg) {
	if !a.sink.alive() {
		return
	}
	a.sink.leaked.Add(1)
	if a.sink.counter != nil {
		a.sink.counter.Add(context.Background(), 1, a.sink.add...)
	}
	if a.sink.onLeak != nil {
		go a.sink.report(a.site)
	}
}

// report builds the LeakReport of a leaked lease and calls OnLeak.
func (s *leakSink) report(site *leakSite) {
	r := LeakReport{Pool: s.name}
	if site != nil && site.n > 0 {
		r.Age = time.Duration(monotime() - site.at)
		r.Stack = formatStack(site.pcs[:site.n])
	}
	s.onLeak(r)
}

// formatStack writes one "function\n\tfile:line\n" per frame.
func formatStack(pcs []uintptr) string {
	var b strings.Builder
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function != "" {
			fmt.Fprintf(&b, "%s\n\t%s:%d\n", f.Function, f.File, f.Line)
		}
		if !more {
			break
		}
	}
	return b.String()
}
