package pool

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
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
// is leased only the Lease handles do (and, briefly, the goroutine creating
// or handing it over). The pool's list of all entries (holders.go) holds
// them weakly, so a lease dropped without Release leaves its entry
// unreachable, for the garbage collector to find.
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

	// useFrom is the clock at the start of a lease sampled for
	// pool.lease.use_time: written at the lease and read at its end by the
	// holder, when ends says so. See metrics.go.
	useFrom int64

	// cleanup reports the entry leaked when the garbage collector finds it
	// unreachable; destroying or detaching the item stops it first. site,
	// with TrackLeaseSites, is where the current lease was taken; mark, with
	// LeakThreshold, what the watcher knows of it. The cleanup reads both.
	// All three are set at creation: see leak detection below.
	cleanup runtime.Cleanup
	site    *leakSite
	mark    *holdMark

	// self is the registry's weak pointer to the entry, and holds counts
	// the pool's own holds of it between leases: see holders.go.
	self  weak.Pointer[entry[T]]
	holds atomic.Uint32

	// ends says whether the end of the current lease has something to do
	// (leaseEnded), so that a release tests one word for it: endSampled,
	// set by a lease that pool.lease.use_time samples, and endFollowed,
	// set by the watcher of LeakThreshold as it follows the lease (see
	// holders.go). Both are set and cleared with atomic or and and, since
	// the holder and the watcher write them at once.
	ends atomic.Uint32
}

// The bits of entry.ends.
const (
	endSampled  = 1 << iota // useFrom holds the start of a sampled lease
	endFollowed             // the mark may follow a lease: unfollow it
)

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
		l.e.pool.discard(l.e)
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
// The pool keeps no strong reference to a leased entry (see entry), so a
// lease dropped without Release, Discard or Detach leaves its entry
// unreachable.
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
// refers to the pool only through a weak pointer, and the entry's leakSite
// and holdMark, which refer to neither.
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
// The site is read under its own lock: the watcher of LeakThreshold reads
// it while the lease is out (see holders.go), and the cleanup after.

// LeakReport describes a lease that may have leaked: one held past
// Options.LeakThreshold (Held), or one that became unreachable without
// Release, Discard or Detach. Options.OnLeak receives it.
type LeakReport struct {
	// Pool is the pool's Name.
	Pool string
	// Age is how long the lease had been out when reported; 0 unless
	// Options.LeakThreshold or Options.TrackLeaseSites is set. With
	// TrackLeaseSites it is exact; without, the pool sees a lease only at
	// its scans, every LeakThreshold/8, and Age may fall short of the
	// truth by about that much (see "Leaks" in the package documentation),
	// or be 0 for a lease the garbage collector found before any scan saw
	// it.
	Age time.Duration
	// Stack is the stack of the Lease (or TryLease, or Do) call that took
	// the lease, innermost first, one "function\n\tfile:line" per frame;
	// "" unless Options.TrackLeaseSites is on.
	Stack string
	// Held is true for a lease still held LeakThreshold after it began (it
	// may yet end), and false for one the garbage collector found
	// unreachable. A lease is reported at most once as held, and once more,
	// with Held false, if the garbage collector finds it later.
	Held bool
}

// leakSink is a pool's share of leak detection: what the cleanups of its
// entries reach. It refers to the pool only weakly, through alive. It is not
// generic, so that leakFound is a plain function: a generic one would cost
// every creation one more allocation, for its dictionary.
type leakSink struct {
	alive  func() bool  // the pool has not been collected: see newLeakSink
	now    func() int64 // the pool's clock
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
// allocates nothing; only the lease holder writes it, under mu, and the
// watcher of LeakThreshold, Outstanding and the cleanup read it, under mu's
// read lock. The scans only try that lock: a site being written describes
// a lease just beginning, not out yet for them, and no scan waits for a
// writer that may be descheduled mid-walk (see holders.go).
type leakSite struct {
	mu    sync.RWMutex
	lease uint64 // the generation of the lease recorded, plus 1; 0: none yet
	at    int64  // the pool's clock at the lease
	n     int    // pcs in use
	pcs   [leakStackDepth]uintptr
}

// newLeakSink returns the leak sink of the pool p, holding p weakly. Its
// clock is the pool's as New set it (see upkeepTestHooks).
func newLeakSink[T any](p *Pool[T]) *leakSink {
	wp := weak.Make(p)
	clock, epoch := p.clock, p.epoch
	now := func() int64 { return monotime() - epoch }
	if clock != nil {
		now = clock
	}
	return &leakSink{
		alive:  func() bool { return wp.Value() != nil },
		now:    now,
		name:   p.opts.Name,
		onLeak: p.opts.OnLeak,
	}
}

// leakArg is the argument of an entry's cleanup.
type leakArg struct {
	sink *leakSink
	site *leakSite // nil without TrackLeaseSites
	mark *holdMark // nil without LeakThreshold
}

// watch registers e's cleanup, with the site and the mark it will read.
// Called once, at creation.
func watch[T any](s *leakSink, e *entry[T], trackSite, trackHold bool) {
	if trackSite {
		e.site = new(leakSite)
	}
	if trackHold {
		e.mark = new(holdMark)
	}
	e.cleanup = runtime.AddCleanup(e, leakFound, leakArg{sink: s, site: e.site, mark: e.mark})
}

// leakSiteSkip makes runtime.Callers start at the caller of Lease or
// TryLease: it skips Callers, recordSite and Lease (or TryLease), which
// calls recordSite itself. The walk reads each frame's tables from the
// start of its function, so starting it from Lease, a small function, and
// not from deep inside the lease path, keeps it cheap.
// TestLeakReportNamesTheLeasingFunction checks it.
const leakSiteSkip = 3

// recordSite notes when and where the lease of e was taken, then wakes the
// watcher of LeakThreshold if it sleeps: only now can it see this lease
// (see holders.go, "Waking the watcher").
func recordSite[T any](e *entry[T]) {
	p := e.pool
	s := e.site
	// The walk runs under the lock, straight into the site: a reader (the
	// watcher, Outstanding) waits for one walk at most, and a lease copies
	// no stack twice.
	s.mu.Lock()
	s.lease, s.at = e.gen.Load()+1, p.now()
	s.n = runtime.Callers(leakSiteSkip, s.pcs[:])
	s.mu.Unlock()
	if p.g.slots.trigger.Load() == watcherAsleep {
		p.wakeWatcher()
	}
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
		go a.sink.report(a.site, a.mark)
	}
}

// report builds the LeakReport of a leaked lease and calls OnLeak. Its Age
// comes from the site, else from what the watcher saw of the lease: the
// lease the mark follows is the last one the entry had, since a lease that
// ends unfollows it (see holders.go).
func (s *leakSink) report(site *leakSite, mark *holdMark) {
	r := LeakReport{Pool: s.name}
	switch {
	case site != nil:
		site.mu.RLock() // nobody writes it any more: the entry is unreachable
		at, n, pcs := site.at, site.n, site.pcs
		site.mu.RUnlock()
		if n > 0 {
			r.Age = time.Duration(max(s.now()-at, 0))
			r.Stack = formatStack(pcs[:n])
		}
	case mark != nil && mark.lease.Load() != 0:
		r.Age = time.Duration(max(s.now()-mark.since.Load(), 0))
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
