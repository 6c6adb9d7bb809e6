package pool

import (
	"context"
	"errors"
	"time"
)

// Tracing: Options.Tracer sees each lease in the goroutine of the call
// that made it, with what the pool measured of it.
//
// The invariant: with Tracer nil nothing here runs, and the lease and
// release paths pay one byte's compare for it. With a Tracer, every Lease,
// TryLease and Do gets exactly one LeaseStart and one LeaseEnd, and every
// lease that LeaseEnd reported as granted exactly one Released, with the
// ctx that LeaseStart returned; the pool has accounted for the lease (its
// item leased, or given back) before each call, so a Tracer that panics
// loses no item and no permit. A Detach's Released runs while the pool still
// holds the item, so that when Released does not return, the item Detach
// cannot hand over is destroyed (Pool.releasedOrDestroy).

// Tracer sees each lease in the goroutine of the call that made it, so that
// a request's trace can say where its time went inside the pool: how long
// it queued, how long the factory and the check took, how long the item was
// held. Set it as Options.Tracer; examples/tracing adapts it to
// OpenTelemetry spans.
//
// Its methods run on the caller's goroutine, in the caller's time: keep
// them quick. A panic in one goes on to the caller, as a panic of the
// caller's own code would, once the pool has accounted for the lease: no
// item and no place under MaxSize is lost (a lease whose LeaseEnd panicked is
// given back, and sees no Released; the item of a Detach whose Released
// panicked, which its caller never receives, is destroyed).
type Tracer interface {
	// LeaseStart runs as a Lease, TryLease or Do begins, with the pool's
	// Name. The ctx it returns (ctx itself, or one derived from it, such
	// as ctx with a span) is the one the lease goes on with: its wait, the
	// factory and the Preparer see it, and so do LeaseEnd and Released. A
	// nil return stands for ctx.
	LeaseStart(ctx context.Context, pool string) context.Context
	// LeaseEnd runs as that call returns, with its outcome: once for every
	// LeaseStart, whether an item was leased or not. A call that panics
	// because code it called did (the factory, the Preparer) gets it too,
	// with an Err, as the panic goes on.
	LeaseEnd(ctx context.Context, t LeaseTrace)
	// Released runs as a lease that LeaseEnd reported as granted ends:
	// Release, Discard or Detach (also Do's end), in that call's goroutine,
	// once the item has been given back. A lease that failed gets none.
	// For a Detach it runs once the lease has ended, the item still in
	// the pool's hands (in Stats.ActiveLeases, not yet in Detached): the
	// item leaves the pool when Released returns, and when Released panics
	// or calls runtime.Goexit, Detach returns nothing and the pool destroys
	// the item as a discarded one (Stats.Destroyed, reason discard).
	Released(ctx context.Context, t ReleaseTrace)
}

// LeaseTrace is what the pool measured of one Lease, TryLease or Do, for
// Tracer.LeaseEnd. The durations are the pool's own and add up to no more
// than the call took; each is 0 when the lease did not do that step (and
// when the step panicked: it is measured as it returns).
type LeaseTrace struct {
	// Pool is the pool's Name.
	Pool string
	// Err is the call's error; nil when an item was leased.
	Err error
	// Wait is how long the lease queued for an item, MaxSize items being in
	// use; 0 when it was served at once (as Stats.WaitTime counts).
	Wait time.Duration
	// Create is how long the factory took to create an item for this
	// lease; 0 when an idle item was leased, or no creation started.
	Create time.Duration
	// Prepare is how long IsReady and Prepare took on the items this lease
	// checked (more than one when an idle item failed its check); 0 when
	// none was checked.
	Prepare time.Duration
	// Uses is how many leases the item has had, this one included (as
	// Lease.Uses); 0 when no item was leased.
	Uses int
}

// ReleaseTrace is what the pool measured of one lease as it ended, for
// Tracer.Released.
type ReleaseTrace struct {
	// Pool is the pool's Name.
	Pool string
	// Held is how long the lease was out: from the return of the Lease (or
	// TryLease, or Do's lease) that took it to its end.
	Held time.Duration
	// How is how the lease ended: "release", "discard" or "detach".
	How string
}

// leaseTimes is what a slow lease knows of itself: whether it queued, its
// waits (summed), since when its LeaseTimeout counts (the monotonic clock;
// 0: not read yet, which happens before its first wait or check: what it
// did before took too little to be worth a clock read per lease) and, when
// traced, how long its creation and checks took (see LeaseTrace).
type leaseTimes struct {
	traced                bool
	queued                bool
	since                 int64
	wait, create, prepare time.Duration
}

// traceState is what an entry keeps of a traced lease while it is out:
// the ctx LeaseStart returned and when the lease was granted. Made with the
// entry when Options.Tracer is set, so that a lease allocates nothing;
// only the lease holder reads and writes it.
type traceState struct {
	ctx context.Context // nil: the lease is not traced (its LeaseEnd panicked)
	at  int64           // the pool's clock when the lease was granted
}

// errLeaseEscaped is the Err of a traced lease that did not return: user
// code it called panicked or called runtime.Goexit, which goes on.
var errLeaseEscaped = errors.New("pool: the lease did not return: code it called (the factory, the Preparer) panicked or called runtime.Goexit")

// traceStep is how far leaseTraced has got, for its deferred call: a panic
// or runtime.Goexit of user code may end it at any step.
type traceStep uint8

const (
	stepLeasing   traceStep = iota // in the lease: LeaseEnd is still due
	stepReporting                  // in LeaseEnd for a granted lease: the lease is still out
	stepDone                       // LeaseEnd has been called (and, for a granted lease, returned)
)

// leaseAtEdge is a lease in a pool with a Tracer (leaseTraced), or whose
// leases record themselves (LeakThreshold, TrackLeaseSites): here,
// leakSiteSkip frames below the caller of Lease, TryLease or Do.
func (p *Pool[T]) leaseAtEdge(ctx context.Context, wait waitChoice) (l Lease[T], err error) {
	if p.route.traced {
		l, err = p.leaseTraced(ctx, wait)
	} else {
		l, err = p.lease(ctx, wait, &leaseTimes{})
	}
	if p.route.recorded && err == nil {
		p.record(l)
	}
	return l, err
}

// leaseTraced is lease with Options.Tracer: LeaseStart, the lease on the
// ctx it returned, LeaseEnd with what the lease measured, also when user
// code the lease called panics (the panic goes on).
func (p *Pool[T]) leaseTraced(ctx context.Context, wait waitChoice) (l Lease[T], err error) {
	tr := p.opts.Tracer
	if c := tr.LeaseStart(ctx, p.opts.Name); c != nil {
		ctx = c
	}
	tm := leaseTimes{traced: true}
	step := stepLeasing
	defer func() {
		switch step {
		case stepLeasing: // the lease panicked, or called runtime.Goexit
			tr.LeaseEnd(ctx, LeaseTrace{Pool: p.opts.Name, Err: errLeaseEscaped, Wait: tm.wait, Create: tm.create, Prepare: tm.prepare})
		case stepReporting: // LeaseEnd panicked, or called runtime.Goexit
			l.e.trace.ctx = nil
			l.Release()
		}
	}()
	l, err = p.lease(ctx, wait, &tm)
	t := LeaseTrace{Pool: p.opts.Name, Err: err, Wait: tm.wait, Create: tm.create, Prepare: tm.prepare}
	if err != nil {
		step = stepDone
		tr.LeaseEnd(ctx, t)
		return l, err
	}
	st := l.e.trace
	st.ctx = ctx
	t.Uses = l.Uses()
	step = stepReporting
	tr.LeaseEnd(ctx, t)
	step = stepDone
	st.at = p.now() // the lease's return, from which Held counts
	return l, nil
}

// tracedEnd is what Released needs of a lease that has just ended, read
// before its item goes anywhere (the next lease of the item writes its
// traceState).
type tracedEnd struct {
	ctx  context.Context // nil: nothing to report
	held time.Duration
}

// endTrace reads the traced lease of e as it ends; the zero tracedEnd in a
// pool without Tracer.
func (p *Pool[T]) endTrace(e *entry[T]) tracedEnd {
	if !p.route.traced || e.trace.ctx == nil {
		return tracedEnd{}
	}
	st := e.trace
	t := tracedEnd{ctx: st.ctx, held: time.Duration(max(p.now()-st.at, 0))}
	st.ctx = nil
	return t
}

// released reports the end of a traced lease, how it ended, once the item
// has been given back.
func (p *Pool[T]) released(t tracedEnd, how string) {
	if t.ctx != nil {
		p.opts.Tracer.Released(t.ctx, ReleaseTrace{Pool: p.opts.Name, Held: t.held, How: how})
	}
}

// startTimer reads the pool's clock for a step that a traced lease
// measures; 0, and no clock read, for a lease not traced.
func (p *Pool[T]) startTimer(lt *leaseTimes) int64 {
	if !lt.traced {
		return 0
	}
	return p.now()
}

// stopTimer adds to d the time since start, lt's startTimer, when traced.
func (p *Pool[T]) stopTimer(lt *leaseTimes, start int64, d *time.Duration) {
	if lt.traced {
		*d += time.Duration(max(p.now()-start, 0))
	}
}
