package pool

import (
	"context"
	"errors"
	"time"
)

// Tracer sees each lease, so that a request's trace can say where its time
// went inside the pool: how long it queued, how long the factory and the
// check took, how long the item was held. Set it as Options.Tracer;
// examples/tracing adapts it to OpenTelemetry spans.
//
// Its methods run on the caller's goroutine, in the caller's time: keep them
// quick. A panic in one goes on to the caller once the pool has accounted
// for the lease: no item and no place under MaxSize is lost (a lease whose
// LeaseEnd panicked is given back, and sees no Released; the item of a
// Detach whose Released panicked is destroyed).
type Tracer interface {
	// LeaseStart runs as a Lease, TryLease or Do begins, with the pool's
	// Name. The ctx it returns (ctx, or one derived from it, such as with a
	// span; nil stands for ctx) is the one the lease goes on with: its wait,
	// the factory and the Preparer see it, and so do LeaseEnd and Released.
	LeaseStart(ctx context.Context, pool string) context.Context
	// LeaseEnd runs as that call returns, with its outcome: once for every
	// LeaseStart, leased or not, and with an Err when the call panics because
	// the factory or the Preparer did, as the panic goes on.
	LeaseEnd(ctx context.Context, t LeaseTrace)
	// Released runs once, only for a lease that LeaseEnd reported as granted,
	// as it ends by Release, Discard or Detach (also Do's end), in that
	// call's goroutine, once the item has been given back. For a Detach the
	// item is still in the pool's hands (in Stats.ActiveLeases, not yet in
	// Detached) and leaves when Released returns; when Released panics or
	// calls runtime.Goexit, Detach returns nothing and the pool destroys the
	// item as a discarded one (Stats.Destroyed, reason discard).
	Released(ctx context.Context, t ReleaseTrace)
}

// LeaseTrace is what the pool measured of one Lease, TryLease or Do, for
// Tracer.LeaseEnd. Its durations, the pool's own, add up to no more than the
// call took; each is 0 for a step the lease did not do, or that panicked.
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
	// checked (several when an idle item failed); 0 when none was checked.
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

// leaseTimes is what a slow lease knows of itself. judge: its idle item is
// judged (a Preparer, IdleTimeout or MaxLifetime). since, the monotime its
// LeaseTimeout counts from, is read at its first wait or check: what came
// before is not worth a clock read per lease. create and prepare: if traced.
type leaseTimes struct {
	traced, judge         bool
	queued                bool
	since                 int64
	wait, create, prepare time.Duration
}

// traceState is a traced lease's, while it is out: made with the entry, so
// that a lease allocates nothing, and touched only by the lease holder.
type traceState struct {
	ctx context.Context // nil: the lease is not traced (its LeaseEnd panicked)
	at  int64           // the pool's clock when the lease was granted
}

// errLeaseEscaped is the Err of a traced lease that user code ended.
var errLeaseEscaped = errors.New("pool: the lease did not return: code it called (the factory, the Preparer) panicked or called runtime.Goexit")

// leaseAtEdge runs, leakSiteSkip frames below the caller of Lease, TryLease
// or Do, the lease of a slowLease pool: traced, recorded, or judged.
func (p *Pool[T]) leaseAtEdge(ctx context.Context, wait waitChoice) (l Lease[T], err error) {
	if p.ob.tracing() {
		l, err = p.leaseTraced(ctx, wait)
	} else {
		l, err = p.lease(ctx, wait, &leaseTimes{judge: p.opts.judges() || p.ob.everyLease})
	}
	if err == nil && p.ob.recorded() {
		p.ob.record(l)
	}
	return l, err
}

// leaseTraced runs LeaseEnd also when user code panics (the panic goes on).
func (p *Pool[T]) leaseTraced(ctx context.Context, wait waitChoice) (l Lease[T], err error) {
	tr := p.ob.tracer
	if c := tr.LeaseStart(ctx, p.opts.Name); c != nil {
		ctx = c
	}
	tm := leaseTimes{traced: true, judge: p.opts.judges() || p.ob.everyLease}
	leased, reported := false, false // the lease returned; then LeaseEnd did
	defer func() {
		switch {
		case !leased: // the lease panicked, or called runtime.Goexit: LeaseEnd is still due
			tr.LeaseEnd(ctx, LeaseTrace{Pool: p.opts.Name, Err: errLeaseEscaped, Wait: tm.wait, Create: tm.create, Prepare: tm.prepare})
		case !reported && err == nil: // LeaseEnd panicked, or called runtime.Goexit: the lease is still out
			l.e.trace.ctx = nil
			l.Release()
		}
	}()
	l, err = p.lease(ctx, wait, &tm)
	leased = true
	t := LeaseTrace{Pool: p.opts.Name, Err: err, Wait: tm.wait, Create: tm.create, Prepare: tm.prepare}
	if err == nil {
		l.e.trace.ctx = ctx
		t.Uses = l.Uses()
	}
	tr.LeaseEnd(ctx, t)
	reported = true
	if err == nil {
		l.e.trace.at = p.clk.now() // the lease's return, from which Held counts
	}
	return l, err
}

// tracedEnd is read before the item moves on: a next lease rewrites its trace.
type tracedEnd struct {
	ctx  context.Context // nil: nothing to report
	held time.Duration
}
