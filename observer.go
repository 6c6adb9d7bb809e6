package pool

import (
	"cmp"
	"context"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// The observer: what the pool tells of itself. It keeps the counters Stats
// cannot derive from the gate or slots, records the OpenTelemetry metrics
// (metrics.go), logs through Options.Logger, calls the Tracer (trace.go), and
// keeps the leases' records: registry, the scans behind Outstanding and
// LeakThreshold's reports, the sink of the garbage collector's leak reports
// (leaks.go). Only the use_time sample's test runs on the fast path.
type observer[T any] struct {
	*leakSink // name, clock, Logger, OnLeak: the cleanups' too (leaks.go)
	tracer    Tracer
	// threshold is LeakThreshold in the clock's nanoseconds (0: none);
	// sited, TrackLeaseSites. With either, each lease records its start.
	threshold int64
	sited     bool
	// sampleBelow bounds the scrambled count for sampled; 0, none, without metrics.
	sampleBelow uint64
	// everyLease: with StandardMetricNames, every lease records its wait and
	// its use, and the checks under way are counted (checking), for the
	// conventions' used count.
	everyLease bool
	checking   atomic.Int64
	// sz, with AdaptiveSize, takes every lease's use time.
	sz *sizer

	// m is nil without a MeterProvider (metrics.go); the lease path reads
	// it here, not through leakSink.m.
	m   *metrics
	reg registry[T]
	c   counters
}

// tracing reports whether a Tracer sees the leases.
func (o *observer[T]) tracing() bool { return o.tracer != nil }

// recorded: each lease records its start (and, sited, where).
func (o *observer[T]) recorded() bool { return o.threshold > 0 || o.sited }

// # Counts

// leaseFailed counts a failed lease in Stats and pool.lease.errors.
func (o *observer[T]) leaseFailed(ctx context.Context, t errType) {
	o.c.failed[t].Add(1)
	o.m.inc(ctx, figLeaseErrors, int(t))
}

// stamp reads the clock for a measurement starting now, if need (metrics
// are recorded, or a traced lease's step timed); else it returns 0.
func (o *observer[T]) stamp(need bool) int64 {
	if !need {
		return 0
	}
	return o.clk.now()
}

// factoryCalled times a factory call begun at start, counting a failure.
func (o *observer[T]) factoryCalled(ctx context.Context, start int64, failed bool) {
	if failed {
		o.c.createFails.Add(1)
	}
	if o.m != nil {
		o.took(ctx, figCreateTime, start)
	}
}

// checkBegins reads the clock for a check's time and, with everyLease,
// counts the check under way.
func (o *observer[T]) checkBegins() int64 {
	if o.everyLease {
		o.checking.Add(1)
	}
	return o.clk.now()
}

// checkEnded records the time of a check begun at start, however it ended.
func (o *observer[T]) checkEnded(ctx context.Context, start int64) {
	if o.everyLease {
		o.checking.Add(-1)
	}
	o.took(ctx, figPrepTime, start)
}

// measuring reports whether the pool records metrics.
func (o *observer[T]) measuring() bool { return o.m != nil }

// checkFailed counts a failed check.
func (o *observer[T]) checkFailed(ctx context.Context) {
	o.c.prepareFail.Add(1)
	o.m.inc(ctx, figPrepErrors, 0)
}

// destroyed counts one destruction, for why, and whether Destroy failed.
func (o *observer[T]) destroyed(why reason, failed bool) {
	o.c.mu.Lock()
	o.c.destroyed[why]++
	if failed {
		o.c.destroyFails++
	}
	o.c.mu.Unlock()
	o.m.inc(context.Background(), figDestroyed, int(why))
	if failed {
		o.m.inc(context.Background(), figDestroyErrors, 0)
	}
}

// detached counts an item taken out by Lease.Detach.
func (o *observer[T]) detached() {
	o.c.mu.Lock()
	o.c.detached++
	o.c.mu.Unlock()
}

// # A lease's life

// sampled is the use_time sampling rule: the lease with k leases before it
// on its processor is sampled when Fibonacci hashing puts k below
// sampleBelow: one in useSampleEvery, evenly spread, never in step with
// periodic hold times, and each processor's first (k = 0), so a pool's
// first leases show.
func (o *observer[T]) sampled(k uint64) bool {
	return o.everyLease || o.sz != nil || k*fibonacci < o.sampleBelow
}

// timesLeases reports whether a lease that got an item is measured: its
// wait recorded, its use time sampled.
func (o *observer[T]) timesLeases() bool { return o.m != nil || o.sz != nil }

// sampleUse stamps the start of a sampled lease of e; its end records it.
func (o *observer[T]) sampleUse(e *entry[T]) {
	e.useFrom = o.clk.now()
	e.atEnd.Or(atEndSampled)
}

// lent records a slow lease's wait, if it queued (or everyLease), and
// samples e's use_time if k is.
func (o *observer[T]) lent(ctx context.Context, e *entry[T], k uint64, lt *leaseTimes) {
	if (lt.queued || o.everyLease) && o.m != nil {
		o.m.hist[figWaitTime].Record(ctx, lt.wait.Seconds(), o.m.recs[figWaitTime]...)
	}
	if o.sampled(k) {
		o.sampleUse(e)
	}
}

// leaseEnded accounts, once and before the item goes anywhere, for the end
// of e's lease (gen has moved on): a sampled use_time, a reported holder.
func (o *observer[T]) leaseEnded(e *entry[T]) {
	w := e.atEnd.Load()
	if w&atEndSampled != 0 {
		if o.sz != nil {
			o.sz.record(o.clk.now() - e.useFrom)
		}
		if o.m != nil {
			o.took(context.Background(), figUseTime, e.useFrom)
		}
		e.atEnd.And(^uint32(atEndSampled))
	}
	if w&atEndReported != 0 {
		e.atEnd.And(^uint32(atEndReported))
		gen := e.gen.Load() - 1
		at, _ := e.rec.startOf(gen)
		o.reportedEnded(e, gen, at)
	}
}

// watch counts e's creation, a successful factory call, and makes e's
// records as the creation ends: lease record and registry place, and trace
// state, as the options ask; its cleanup (leaks.go), once, after e.rec,
// stopped by forget. The cleanup's leakArg reaches neither e (that would
// keep it alive) nor the pool (which reaches its idle entries), only the
// leakSink, which holds the pool weakly, and e.rec.
func (o *observer[T]) watch(ctx context.Context, e *entry[T]) {
	o.c.mu.Lock()
	o.c.created++
	o.c.mu.Unlock()
	o.m.inc(ctx, figCreated, 0)
	if o.recorded() {
		e.rec = new(leaseRecord)
		e.self = weak.Make(e)
		o.reg.mu.Lock()
		o.reg.all[e.self] = struct{}{}
		o.reg.mu.Unlock()
	}
	if o.tracer != nil {
		e.trace = new(traceState)
	}
	e.cleanup = runtime.AddCleanup(e, leakFound, leakArg{sink: o.leakSink, rec: e.rec})
}

// forget lets go of e as its destruction or Detach begins: no lease, no leak.
func (o *observer[T]) forget(e *entry[T]) {
	e.cleanup.Stop()
	if e.rec != nil {
		o.reg.mu.Lock()
		delete(o.reg.all, e.self)
		o.reg.mu.Unlock()
	}
}

// # Lease records and their scans
//
// With LeakThreshold or TrackLeaseSites each lease records its start
// (leaseRecord, leaks.go) before Lease returns, and the registry holds each
// entry weakly from its creation's end to its destruction or Detach, so a
// leaked lease still becomes unreachable. A scan reads each entry's gen
// (bumped as a lease ends) twice, and lists those whose record is of the
// first read's generation and whose gen did not move: each was out for the
// whole instant between, so a scan never lists more leases than were out
// at once. An item between leases (judged, reset, destroyed) has no record
// for its generation.

// registry is every recorded entry in existence, held weakly: watch adds
// an entry, forget removes it, and scan lists them. New makes all.
type registry[T any] struct {
	mu  sync.Mutex
	all map[weak.Pointer[entry[T]]]struct{}
}

// scanBufs is a scan's buffer, kept by the keeper, emptied between scans (drop).
type scanBufs[T any] []sighting[T]

// sighting is what a scan saw of one entry.
type sighting[T any] struct {
	e   *entry[T]
	gen uint64
	out bool
	at  int64 // when the lease began
}

// drop lets go of the last scan's entries, so it keeps none alive.
func (b *scanBufs[T]) drop() {
	clear(*b)
	*b = (*b)[:0]
}

// scan finds the recorded leases out in two passes, after listing the
// registered entries, forgetting those the garbage collector has taken
// (leaked leases, which their cleanups report); the caller drops b.
func (o *observer[T]) scan(b *scanBufs[T]) ([]sighting[T], int64) {
	o.reg.mu.Lock()
	for wp := range o.reg.all {
		if e := wp.Value(); e != nil {
			*b = append(*b, sighting[T]{e: e})
		} else {
			delete(o.reg.all, wp)
		}
	}
	o.reg.mu.Unlock()
	seen := *b
	for i := range seen {
		x := &seen[i]
		x.gen = x.e.gen.Load()
		x.at, x.out = x.e.rec.startOf(x.gen)
		if testSighted != nil {
			testSighted(x.e)
		}
	}
	for i := range seen {
		x := &seen[i]
		x.out = x.out && x.e.gen.Load() == x.gen
	}
	return seen, o.clk.now()
}

// testSighted, set by tests only, runs after the first pass reads an entry.
var testSighted func(e any)

// LeaseInfo describes a lease out now: see Pool.Outstanding.
type LeaseInfo struct {
	// Age is how long the lease has been out, from the moment its Lease
	// call got the item.
	Age time.Duration
	// Stack is the stack of the Lease (or TryLease, or Do) call that took
	// the lease, as in LeakReport; "" unless Options.TrackLeaseSites is on.
	Stack string
}

// outstanding lists the leases out, oldest first; nil unless recorded.
func (o *observer[T]) outstanding() []LeaseInfo {
	if !o.recorded() {
		return nil
	}
	var b scanBufs[T] // garbage once it returns: no need to drop it
	seen, now := o.scan(&b)
	out := []LeaseInfo{}
	for _, x := range seen {
		if x.out {
			out = append(out, LeaseInfo{Age: time.Duration(max(now-x.at, 0)), Stack: x.e.rec.stackOf(x.gen)})
		}
	}
	slices.SortStableFunc(out, func(a, b LeaseInfo) int { return cmp.Compare(b.Age, a.Age) })
	return out
}

// # LeakThreshold's reports
//
// The keeper scans every LeakThreshold/8 (watchEvery) and reports each
// lease out past LeakThreshold once: never early, as a record's start is
// no earlier than the lease's, and within a period after. A reported
// lease's end is logged at Info exactly once, by whichever side sees it
// first: the report stores leaseRecord.reported, sets atEndReported, then
// loads gen; the lease's end bumps gen, then loads atEnd. The atomics are
// sequentially consistent, so at least one sees the other; each that does
// clears reported by compare-and-swap, and the winner logs.

// minWatchEvery bounds how often the keeper scans, whatever the threshold.
const minWatchEvery = time.Millisecond

// watchEvery is the period of LeakThreshold's scans; 0 without it.
func (o *observer[T]) watchEvery() time.Duration {
	if o.threshold == 0 {
		return 0
	}
	return max(time.Duration(o.threshold)/8, minWatchEvery)
}

// followAll scans the leases out and reports those held past LeakThreshold
// (OnLeak through apart), stopping once done has ended (Close).
func (o *observer[T]) followAll(b *scanBufs[T], done context.Context, apart func(func())) {
	defer b.drop()
	seen, now := o.scan(b)
	for i := range seen {
		if done.Err() != nil {
			return
		}
		if x := &seen[i]; x.out && now-x.at >= o.threshold && x.e.rec.reported.Load() != x.gen+1 {
			o.reportHeld(x, time.Duration(now-x.at), apart)
		}
	}
}

// reportHeld reports x's lease, held for age: counted, logged at Warn,
// marked reported, then given to OnLeak apart from the keeper, so a lease
// that OnLeak's report leads to end logs its end in its own Release.
func (o *observer[T]) reportHeld(x *sighting[T], age time.Duration, apart func(func())) {
	e, stack := x.e, x.e.rec.stackOf(x.gen)
	o.c.longLeases.Add(1)
	o.m.inc(context.Background(), figLong, 0)
	attrs := []slog.Attr{slog.Duration("age", age)}
	if stack != "" {
		attrs = append(attrs, slog.String("stack", stack))
	}
	o.log(slog.LevelWarn, "a lease has been held longer than LeakThreshold", nil, attrs...)
	e.rec.reported.Store(x.gen + 1)
	e.atEnd.Or(atEndReported)
	if e.gen.Load() != x.gen {
		o.reportedEnded(e, x.gen, x.at)
	}
	if o.onLeak != nil {
		r := LeakReport{Pool: o.name, Age: age, Stack: stack, Held: true}
		apart(func() { o.callOnLeak(r) })
	}
}

// reportedEnded logs at Info the end of the lease of generation gen of e,
// begun at at and reported as held, unless that has been logged already.
func (o *observer[T]) reportedEnded(e *entry[T], gen uint64, at int64) {
	if e.rec.reported.CompareAndSwap(gen+1, 0) {
		o.log(slog.LevelInfo, "a lease reported as held past LeakThreshold has ended", nil, slog.Duration("age", time.Duration(max(o.clk.now()-at, 0))))
	}
}

// # Traces

// endTrace reads e's traced lease as it ends; zero without a Tracer.
func (o *observer[T]) endTrace(e *entry[T]) (t tracedEnd) {
	if st := e.trace; st != nil && st.ctx != nil {
		t = tracedEnd{ctx: st.ctx, held: time.Duration(max(o.clk.now()-st.at, 0))}
		st.ctx = nil
	}
	return t
}

// released reports a traced lease's end, once the item has been given back.
func (o *observer[T]) released(t tracedEnd, how string) {
	if t.ctx != nil {
		o.tracer.Released(t.ctx, ReleaseTrace{Pool: o.name, Held: t.held, How: how})
	}
}

// stopTimer adds to d the time since start, stamp(lt.traced), when traced.
func (o *observer[T]) stopTimer(lt *leaseTimes, start int64, d *time.Duration) {
	if lt.traced {
		*d += time.Duration(max(o.clk.now()-start, 0))
	}
}
