package pool

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Leaks found by the garbage collector: a lease dropped without Release,
// Discard or Detach.
//
// The invariant: while an item is leased only its Lease handles reach its
// entry (lease.go), so a dropped lease leaves the entry unreachable. Each
// entry gets one runtime.AddCleanup at creation, nothing per lease.
// Destroy and Detach stop it; otherwise it runs for a leaked lease (report
// it) or for an idle entry of a pool dropped without Close (not a leak).
// Its argument, a leakArg, reaches neither the entry (a root would keep it
// alive) nor the pool (which reaches its idle entries): only the pool's
// leakSink, which holds the pool weakly, and the entry's leaseRecord.
//
// Telling the two apart: an idle entry dies with its pool or later, and
// weak.Pointer.Value sweeps a dead object's span before it answers, so the
// cleanup of an entry that died with its pool sees the pool's weak pointer
// nil. When Value returns the pool, the entry was not idle: a leak. (A
// lease leaked from a pool itself dropped is not reported.)

// LeakReport describes a lease that may have leaked: one held past
// Options.LeakThreshold (Held), or one that became unreachable without
// Release, Discard or Detach. Options.OnLeak receives it.
type LeakReport struct {
	// Pool is the pool's Name.
	Pool string
	// Age is how long the lease had been out when reported, from the
	// moment its Lease call got the item; 0 unless Options.LeakThreshold or
	// Options.TrackLeaseSites is set.
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

// newLeakSink returns the leak sink of a pool that alive reports not yet
// collected, with the pool's clock.
func newLeakSink(alive func() bool, clk *clock, name string, onLeak func(LeakReport), m *metrics) *leakSink {
	s := &leakSink{alive: alive, now: clk.now, name: name, onLeak: onLeak}
	if m != nil {
		s.counter, s.add = m.leaked, m.add
	}
	return s
}

// leakArg is the argument of an entry's cleanup.
type leakArg struct {
	sink *leakSink
	rec  *leaseRecord // nil without LeakThreshold and TrackLeaseSites
}

// detectLeak registers e's cleanup, with the record it will read. Called
// once, at creation, after the record is made.
func detectLeak[T any](s *leakSink, e *entry[T]) {
	e.cleanup = runtime.AddCleanup(e, leakFound, leakArg{sink: s, rec: e.rec})
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
		go a.sink.report(a.rec)
	}
}

// report builds the LeakReport of a leaked lease, the last its entry's
// record describes, and calls OnLeak.
func (s *leakSink) report(rec *leaseRecord) {
	r := LeakReport{Pool: s.name}
	if rec != nil {
		if w := rec.start.Load(); w != 0 {
			r.Age = time.Duration(max(s.now()-(w>>8)*1000, 0))
		}
		rec.mu.RLock() // nobody writes it any more: the entry is unreachable
		r.Stack = formatStack(rec.pcs[:rec.n])
		rec.mu.RUnlock()
	}
	s.onLeak(r)
}

// # Lease records
//
// With LeakThreshold or TrackLeaseSites, each entry has a leaseRecord, made
// with it, so that a lease allocates nothing. Only the lease holder writes
// it, in the Lease call, before the handle is returned (observer.record);
// the watcher, Outstanding and the cleanup read it.

// leakStackDepth bounds the frames a leaseRecord keeps.
const leakStackDepth = 32

// leaseRecord is what an entry's latest lease recorded of itself.
type leaseRecord struct {
	// start is the pool's clock at the lease, in microseconds rounded up,
	// shifted left eight bits, with the lease's tag (leaseTag) in the low
	// eight. Two leases in a row have different tags, and so do the last
	// recorded lease and a later one unless 255 leases between them did not
	// record (a Tracer's LeaseEnd that panicked): a reader that sees gen
	// unchanged around its load knows whether the record is that lease's.
	start atomic.Int64
	// reported is the generation plus one of the lease reported as held
	// past LeakThreshold, while its end has not been logged (observer.go).
	reported atomic.Uint64

	// With TrackLeaseSites, the stack of the lease of generation lease-1,
	// under mu. Readers only try the lock: a stack being written belongs
	// to a lease just beginning.
	mu    sync.RWMutex
	lease uint64
	n     int
	pcs   [leakStackDepth]uintptr
}

// leaseTag is the low byte of leaseRecord.start for the lease of
// generation gen: 1 for the first lease, so a record never written reads
// as none.
func leaseTag(gen uint64) int64 { return int64(gen+1) & 0xff }

// startWord is leaseRecord.start for the lease of generation gen begun at
// now; rounding up keeps an age read from it from ever exceeding the truth.
func startWord(now int64, gen uint64) int64 {
	return (now+999)/1000<<8 | leaseTag(gen)
}

// startOf returns when the lease of generation gen began, when the record
// is that lease's. The caller checks that gen did not move around the load.
func (r *leaseRecord) startOf(gen uint64) (at int64, ok bool) {
	w := r.start.Load()
	return (w >> 8) * 1000, w&0xff == leaseTag(gen)
}

// leakSiteSkip makes runtime.Callers start at the caller of Lease,
// TryLease or Do: it skips Callers, record, leaseAtEdge, lease and Lease
// (or TryLease, or Do). Starting the walk near the caller keeps it cheap.
// TestLeakReportNamesTheLeasingFunction checks it.
const leakSiteSkip = 5

// stackOf formats the stack recorded for the lease of generation gen, or
// returns "" when there is none, or it describes another lease by now.
func (r *leaseRecord) stackOf(gen uint64) string {
	if !r.mu.TryRLock() {
		return ""
	}
	ok, n, pcs := r.lease == gen+1, r.n, r.pcs
	r.mu.RUnlock()
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
