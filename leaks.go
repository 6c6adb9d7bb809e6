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

// Leaks found by the garbage collector: a lease dropped without Release,
// Discard or Detach.
//
// The invariant: while an item is leased only its Lease handles reach its
// entry (lease.go), so a dropped lease leaves the entry unreachable. Each
// entry gets one runtime.AddCleanup at creation, nothing per lease; the
// cleanup runs once the garbage collector finds the entry unreachable,
// which happens in three cases:
//
//  1. A leaked lease: report it.
//  2. The item was destroyed or detached: destroy and detach stop the
//     cleanup first, so it never runs.
//  3. The pool itself was dropped without Close, and with it the idle ring
//     and the idle entries in it: not a leak, report nothing.
//
// The cleanup's argument, a leakArg, must reach neither the entry (the
// runtime keeps the argument alive as a root, so the entry would never
// become unreachable) nor the pool (which reaches its idle entries). It
// reaches the pool's leakSink, which refers to the pool only through a
// weak pointer, and the entry's leakSite and watchMark, which refer to
// neither.
//
// Telling 1 from 3: an idle entry is reachable from its pool, so it dies
// with its pool, in the same cycle or later, never earlier. The runtime
// clears a weak pointer when it sweeps the dead object's span, and
// weak.Pointer.Value sweeps that span first if it has not been swept yet:
// so a cleanup that runs for an entry that died with its pool always sees
// the weak pointer nil. When Value returns the pool, the pool is alive and
// the entry was not idle in it: a leaked lease. (A lease leaked from a pool
// that was itself dropped is not reported: nobody can use that pool.)

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
	// truth by about that much, or be 0 for a lease the garbage collector
	// found before any scan saw it.
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

// newLeakSink returns the leak sink of the pool p, holding p weakly, with
// the pool's clock.
func newLeakSink[T any](p *Pool[T]) *leakSink {
	wp := weak.Make(p)
	clock, epoch := p.clock, p.epoch
	now := func() int64 { return monotime() - epoch }
	if clock != nil {
		now = clock
	}
	s := &leakSink{
		alive:  func() bool { return wp.Value() != nil },
		now:    now,
		name:   p.opts.Name,
		onLeak: p.opts.OnLeak,
	}
	if p.m != nil {
		s.counter, s.add = p.m.leaked, p.m.add
	}
	return s
}

// leakArg is the argument of an entry's cleanup.
type leakArg struct {
	sink *leakSink
	site *leakSite  // nil without TrackLeaseSites
	mark *watchMark // nil without LeakThreshold
}

// detectLeak registers e's cleanup, with the site and the mark it will
// read. Called once, at creation, after they are made.
func detectLeak[T any](s *leakSink, e *entry[T]) {
	e.cleanup = runtime.AddCleanup(e, leakFound, leakArg{sink: s, site: e.site, mark: e.mark})
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
// ends unfollows it (see watcher.go).
func (s *leakSink) report(site *leakSite, mark *watchMark) {
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

// # Lease sites
//
// With TrackLeaseSites, each entry has a leakSite, made with it, so that a
// lease allocates nothing. Only the lease holder writes it, under mu, as
// the lease begins; the watcher, Outstanding and the cleanup read it under
// mu's read lock. The scans only try that lock: a site being written
// describes a lease just beginning, not out yet for them, and no scan
// waits for a writer that may be descheduled mid-walk.

// leakStackDepth bounds the frames a leakSite records.
const leakStackDepth = 32

// leakSite is where an entry's current lease was taken.
type leakSite struct {
	mu    sync.RWMutex
	lease uint64 // the generation of the lease recorded, plus 1; 0: none yet
	at    int64  // the pool's clock at the lease
	n     int    // pcs in use
	pcs   [leakStackDepth]uintptr
}

// leakSiteSkip makes runtime.Callers start at the caller of Lease,
// TryLease or Do: it skips Callers, recordSite, leaseAtEdge, lease and
// Lease (or TryLease, or Do), which calls lease directly. The walk reads each
// frame's tables from the start of its function, so starting it near the
// caller, not from deep inside the lease path, keeps it cheap.
// TestLeakReportNamesTheLeasingFunction checks it.
const leakSiteSkip = 5

// recordSite notes when and where the lease of e was taken. The walk runs
// under the lock, straight into the site: a reader waits for one walk at
// most, and a lease copies no stack twice.
func recordSite[T any](e *entry[T]) {
	s := e.site
	s.mu.Lock()
	s.lease, s.at = e.gen.Load()+1, e.pool.now()
	s.n = runtime.Callers(leakSiteSkip, s.pcs[:])
	s.mu.Unlock()
}

// stackOf formats the stack the site recorded for the lease of generation
// gen, or returns "" when it describes another lease by now.
func (s *leakSite) stackOf(gen uint64) string {
	if !s.mu.TryRLock() {
		return "" // being written: it describes another lease now
	}
	ok, n, pcs := s.lease == gen+1, s.n, s.pcs
	s.mu.RUnlock()
	if !ok || n == 0 {
		return ""
	}
	return formatStack(pcs[:n])
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
