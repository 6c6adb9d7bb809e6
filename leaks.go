package pool

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

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

// leakSink is the part of the observer that a pool's cleanups reach (see
// observer.watch); it holds the pool only weakly, through alive. It is not
// generic, so that leakFound is a plain function: a generic one would cost
// each creation an allocation for its dictionary.
type leakSink struct {
	alive  func() bool // false once the pool has been collected
	name   string
	clk    *clock
	logger *slog.Logger
	onLeak func(LeakReport)
	m      *metrics      // the observer's, for pool.leases.leaked
	leaked atomic.Uint64 // Stats.Leaked
}

type leakArg struct {
	sink *leakSink
	rec  *leaseRecord // nil without LeakThreshold and TrackLeaseSites
}

// leakFound is an entry's cleanup. It runs for a leaked lease, and also for an
// idle entry of a pool dropped without Close, no leak: such an entry dies with
// its pool or later, and weak.Pointer.Value sweeps a dead object's span before
// it answers, so its cleanup finds the pool's weak pointer nil. One that finds
// the pool has found a leak; a lease leaked from a pool itself dropped goes
// unreported. OnLeak gets a goroutine of its own, to hold up no other cleanup.
// The leaked lease keeps its permit: the item may still be in use.
func leakFound(a leakArg) {
	if !a.sink.alive() {
		return
	}
	a.sink.leaked.Add(1)
	a.sink.m.inc(context.Background(), figLeaked, 0)
	if a.sink.onLeak != nil {
		go a.sink.report(a.rec)
	}
}

// report calls OnLeak with the entry's last lease, as its record has it.
func (s *leakSink) report(rec *leaseRecord) {
	r := LeakReport{Pool: s.name}
	if rec != nil {
		if w := rec.start.Load(); w != 0 {
			r.Age = time.Duration(max(s.clk.now()-(w>>8)*1000, 0))
		}
		r.Stack = rec.stackOf(rec.lease - 1) // nobody writes it any more: the entry is unreachable
	}
	s.callOnLeak(r)
}

// callOnLeak calls OnLeak; a panic has nobody to reach: logged, dropped.
func (s *leakSink) callOnLeak(r LeakReport) {
	defer func() {
		if v := recover(); v != nil {
			s.warn("OnLeak panicked", fmt.Errorf("pool %q: OnLeak: %w", s.name, newPanicError(v)))
		}
	}()
	s.onLeak(r)
}

// warn logs an error that has no caller.
func (s *leakSink) warn(msg string, err error) { s.log(slog.LevelWarn, msg, err) }

// log logs msg at level with attrs, and err unless nil. A handler's panic is
// dropped: it must not crash the pool's goroutines or stop a release or
// upkeep half-way.
func (s *leakSink) log(level slog.Level, msg string, err error, attrs ...slog.Attr) {
	if s.logger == nil {
		return
	}
	defer func() { _ = recover() }()
	attrs = append([]slog.Attr{slog.String("pool.name", s.name)}, attrs...)
	if err != nil {
		attrs = append(attrs, slog.Any("err", unprefixed{err, fmt.Sprintf("pool %q: ", s.name)}))
	}
	s.logger.LogAttrs(context.Background(), level, "pool: "+msg, attrs...)
}

const leakStackDepth = 32

// leaseRecord, with LeakThreshold or TrackLeaseSites, is what an entry's
// latest lease recorded of itself, made with the entry so that a lease
// allocates nothing; only the lease holder writes it, in the Lease call before
// it returns (observer.record).
type leaseRecord struct {
	// start is the pool's clock at the lease in microseconds, rounded up,
	// shifted left 8 bits over leaseTag(gen). Tags differ for two leases in a
	// row, and for the last recorded lease and a later one unless 255 between
	// them did not record (a Tracer's LeaseEnd panicked): a reader that sees
	// gen unchanged around its load knows whether the record is that lease's.
	start atomic.Int64
	// reported is the generation plus one of the lease reported as held
	// past LeakThreshold, while its end has not been logged (observer.go).
	reported atomic.Uint64

	// With TrackLeaseSites, the stack of the lease of generation lease-1;
	// readers only try mu: a stack being written is a new lease's.
	mu    sync.RWMutex
	lease uint64
	n     int
	pcs   [leakStackDepth]uintptr
}

// leaseTag is start's low byte for the lease of generation gen: 1 for the
// first, so a record never written reads as none.
func leaseTag(gen uint64) int64 { return int64(gen+1) & 0xff }

// record notes l's start and, sited, where: walked under the lock, into the
// record. Rounding the start up keeps an age read from it from ever
// exceeding the truth.
func (o *observer[T]) record(l Lease[T]) {
	r := l.e.rec
	r.start.Store((o.clk.now()+999)/1000<<8 | leaseTag(l.gen))
	if o.sited {
		r.mu.Lock()
		r.lease = l.gen + 1
		r.n = runtime.Callers(leakSiteSkip, r.pcs[:])
		r.mu.Unlock()
	}
}

// startOf returns when the lease of generation gen began, when the record
// is that lease's. The caller checks that gen did not move around the load.
func (r *leaseRecord) startOf(gen uint64) (at int64, ok bool) {
	w := r.start.Load()
	return (w >> 8) * 1000, w&0xff == leaseTag(gen)
}

// leakSiteSkip starts runtime.Callers at the caller of Lease, TryLease or Do,
// keeping the walk cheap: it skips Callers, record, leaseAtEdge, lease and the
// entry point. TestLeakReportNamesTheLeasingFunction checks it.
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
	var b strings.Builder
	frames := runtime.CallersFrames(pcs[:n])
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
