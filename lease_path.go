package pool

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lease returns a leased item. It reuses an idle item, creates one when
// fewer than MaxSize exist (and fewer than MaxConcurrentCreates are being
// created), or waits in FIFO order for one to be released or for its turn
// to create. The wait ends with ErrLeaseTimeout after Options.LeaseTimeout,
// with ctx.Err() when ctx ends first, and with ErrClosed when the pool
// closes. A ctx already ended gets ctx.Err() at once, even when an item is
// idle. A failed creation or preparation of a fresh item returns its error,
// wrapped; while the pool is down (Options.FailFastAfter), a lease that
// would create fails at once with ErrBackendDown.
// The caller must end the lease: defer l.Release(). Lease panics when ctx
// is nil.
func (p *Pool[T]) Lease(ctx context.Context) (Lease[T], error) {
	return p.lease(ctx, mayWait, nil)
}

// TryLease is Lease without the wait: when MaxSize items are in use, or
// other leases already wait for one, it returns ErrExhausted at once, and
// while the pool is down (Options.FailFastAfter) with no item idle,
// ErrBackendDown. It may still create and prepare an item, within ctx.
func (p *Pool[T]) TryLease(ctx context.Context) (Lease[T], error) {
	return p.lease(ctx, noWait, nil)
}

// Do leases an item, calls fn with it and ends the lease: Release when fn
// returns, Discard when fn's error wraps ErrBroken (the item is broken:
// destroy it, and make room for a fresh one) or when fn panics, in which
// case the panic goes on once the item is discarded. It returns fn's error
// as it is, or Lease's error when no item could be leased; ctx bounds the
// lease only, not fn. Do panics when ctx is nil.
//
//	err := p.Do(ctx, func(c *Conn) error {
//		if err := c.Send(msg); err != nil {
//			return fmt.Errorf("send: %w: %w", pool.ErrBroken, err)
//		}
//		return nil
//	})
func (p *Pool[T]) Do(ctx context.Context, fn func(item T) error) error {
	l, err := p.lease(ctx, mayWait, nil)
	if err != nil {
		return err
	}
	broken := true // until fn returns: a panic or runtime.Goexit may leave the item half-used
	defer func() {
		if broken {
			l.Discard()
		} else {
			l.Release()
		}
	}()
	err = fn(l.Value())
	broken = errors.Is(err, ErrBroken)
	return err
}

// lease serves Lease, TryLease and Do (lt nil); with slowLease, by way of
// leaseAtEdge, which calls back with its lt, the slow lease's measures (and
// samples use_time). It takes the item parked in this processor's slot,
// unless a Clear retired it or the lease judges it (lt.judge), as
// docs/DESIGN.md, "Take and park, written out", shows; else the gate.
func (p *Pool[T]) lease(ctx context.Context, wait waitChoice, lt *leaseTimes) (Lease[T], error) {
	if ctx == nil {
		panic(errNilContext)
	}
	if p.slowLease && lt == nil {
		return p.leaseAtEdge(ctx, wait)
	}
	if err := ctx.Err(); err != nil {
		return p.leaseFailed(ctx, errCanceled, err) // gave up already: take nothing
	}
	if r := &p.g.slots; !r.bypass.Load() {
		pid := procPin()
		s := &r.s[pid&r.mask]
		// Load first: a miss then costs no locked instruction.
		if e := s.e.Load(); e != nil && s.e.CompareAndSwap(e, nil) {
			a := admitted
			if e.era == r.era.Load() {
				if lt == nil { // the fast path
					r.countLease(pid) // still pinned: see countLease
					procUnpin()
					return Lease[T]{e: e, gen: e.gen.Load()}, nil
				}
				if !lt.judge {
					if k := r.countLease(pid); p.ob.sampled(k) {
						p.ob.sampleUse(e) // reads the clock, pinned: nothing that may block
					}
					procUnpin()
					return Lease[T]{e: e, gen: e.gen.Load()}, nil
				}
				a = admitParked
			}
			procUnpin()
			if lt == nil {
				lt = &leaseTimes{}
			}
			return p.leaseSlow(ctx, e, nil, a, wait, lt)
		}
		procUnpin()
	}
	return p.leaseFromGate(ctx, wait, lt)
}

// leaseFromGate gets an idle item, or a permit to create, from the gate
// (queuing if neither); an item needing no judgement or metrics is lent there.
func (p *Pool[T]) leaseFromGate(ctx context.Context, wait waitChoice, lt *leaseTimes) (Lease[T], error) {
	plain := (lt == nil || !lt.judge) && !p.ob.timesLeases()
	e, w, a := p.g.acquire(ctx, wait, plain, 0)
	if a == admitted && plain {
		if p.opts.MinIdle > 0 {
			p.kp.ask(wantSpares) // it may have taken the last spare
		}
		return Lease[T]{e: e, gen: e.gen.Load()}, nil // counted by acquire
	}
	if lt == nil {
		lt = &leaseTimes{}
	}
	return p.leaseSlow(ctx, e, w, a, wait, lt)
}

// leaseSlow finishes a lease after the gate's admission a: e came with the
// permit when a is admitted, admitParked or admitRetired; w is its place when a is
// queued; lt, the lease's measures. Each rung, one helper, that holds the
// permit hands it on, with its item, or lets it go (destroying the item)
// before returning an error, also on a panic or runtime.Goexit of user
// code: a deferred call lets go unless the rung settled.
func (p *Pool[T]) leaseSlow(ctx context.Context, e *entry[T], w *waiter[T], a admission, wait waitChoice, lt *leaseTimes) (Lease[T], error) {
	var ticket uint64 // its place in line, from its first wait
	for {
		if a.refused() {
			return p.refused(ctx, a)
		}
		if a == queued {
			ticket = w.ticket // before the wait, which recycles w
			var err error
			if e, err = p.wait(ctx, w, lt); err != nil {
				return Lease[T]{}, err
			}
		}
		// A permit in hand: a judged idle item, else a fresh one; or another permit.
		ready, t, why, err := p.takeReady(ctx, e, lt)
		if err == errAnotherPermit {
			if wait == mayWait {
				wait = waitAgain // queuing again, with its ticket
			}
			e, w, a = p.g.acquire(ctx, wait, false, ticket)
			p.ds.later(ready, why, nil) // after: the permit it frees may be the lease's
			continue
		}
		if err == nil && ready == nil {
			ready, t, err = p.createReady(ctx, lt)
		}
		if err != nil {
			return p.leaseFailed(ctx, failedBy(ctx, t, err), err)
		}
		// Lent: its use begins (before any spare's creation). Unless it
		// reused the parked item, it may have taken the last spare.
		k := p.g.slots.countLease(procPin())
		procUnpin()
		p.ob.lent(ctx, ready, k, lt)
		if p.opts.MinIdle > 0 && a != admitParked {
			p.kp.ask(wantSpares)
		}
		return Lease[T]{e: ready, gen: ready.gen.Load()}, nil
	}
}

// start reads the clock for LeaseTimeout, if needed and not read yet.
func (lt *leaseTimes) start(needed bool) {
	if needed && lt.since == 0 {
		lt.since = monotime()
	}
}

// left is what remains of LeaseTimeout d, at least 1ns so that the gate's
// own timeout ends a wait begun late; 0 (none) when d is.
func (lt *leaseTimes) left(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	lt.start(true)
	return max(d-time.Duration(monotime()-lt.since), 1)
}

// refused fails a lease that the gate refused as a.
func (p *Pool[T]) refused(ctx context.Context, a admission) (Lease[T], error) {
	switch a {
	case refusedClosed:
		return p.leaseFailed(ctx, errClosed, p.errClosed)
	case refusedCanceled:
		return p.leaseFailed(ctx, errCanceled, ctx.Err())
	case refusedDown:
		return p.leaseFailed(ctx, errDown, p.mk.backendDown())
	}
	return p.leaseFailed(ctx, errExhausted, p.g.refusal(a))
}

// wait waits, within what is left of LeaseTimeout, for w's permit, or fails the lease.
func (p *Pool[T]) wait(ctx context.Context, w *waiter[T], lt *leaseTimes) (*entry[T], error) {
	lt.queued = true
	e, d, expired, err := p.g.await(ctx, w, lt.left(p.opts.LeaseTimeout))
	lt.wait += d
	if err == nil {
		return e, nil
	}
	if e != nil {
		// Granted as we gave up, on a pool that closed or shrank: ours to destroy.
		p.ds.later(e, p.g.refusedWhy(), nil)
	}
	t := errCanceled // ctx ended, unless:
	switch {
	case expired:
		t, err = errTimeout, p.timeoutError(lt.since)
	case err == ErrClosed:
		t, err = errClosed, p.errClosed
	case err == ErrBackendDown:
		t, err = errDown, p.mk.backendDown()
	}
	_, err = p.leaseFailed(ctx, t, err)
	return nil, err
}

// timeoutError is ErrLeaseTimeout for a lease begun at monotime since: what
// the pool did meanwhile, and the last creation's error if one failed since.
func (p *Pool[T]) timeoutError(since int64) error {
	_, _, queued, size, creating, dying, _ := p.g.counts()
	what := "every item stayed in use (" + sizeText(size, p.sz.maxSize(size)) + ")"
	if creating >= p.g.creationsCap() {
		what = fmt.Sprintf("no item came free, and the creations stayed at MaxConcurrentCreates (%d)", creating)
	}
	err := fmt.Errorf("%w: pool %q: %s for %v; %d leases waiting, %d items being created, %d being destroyed",
		ErrLeaseTimeout, p.opts.Name, what, time.Duration(monotime()-since).Round(time.Millisecond), queued, creating, dying)
	if cause := p.mk.failedSince(since); cause != nil {
		err = fmt.Errorf("%w; the last creation failed: %w", err, cause)
	}
	return err
}

// errAnotherPermit: takeReady's idle item failed judgement. The caller asks
// for another permit before the item goes to Destroy with the old one, so a
// lease that queues again has its place before that permit is free.
var errAnotherPermit = errors.New("pool: another permit")

// takeReady returns e (else the newest idle item), judged against one clock
// read: it fails if a Clear retired it, it expired (but an item only idle too
// long that the upkeep's floor keeps), or the Preparer's due check fails,
// timed against LeaseTimeout. A failed item comes back with why and
// errAnotherPermit. No item, no error: none is idle, the permit still the
// caller's. On any other error, also on a panic or Goexit of user code, the
// permit has gone (with the item, or back).
func (p *Pool[T]) takeReady(ctx context.Context, e *entry[T], lt *leaseTimes) (_ *entry[T], failed errType, why reason, err error) {
	if e == nil {
		if e = p.g.takeIdle(); e == nil {
			return nil, 0, 0, nil
		}
	}
	var now int64
	if p.opts.stamps() {
		now = p.clk.now()
		p.ex.sweepIfDue(now)
	}
	if p.g.retired(e) {
		return e, 0, reasonClear, errAnotherPermit
	}
	if !lt.judge {
		return e, 0, 0, nil
	}
	if why, expired := p.ex.expired(e, now, p.g.items); expired {
		return e, 0, why, errAnotherPermit
	}
	if p.ck.due(e, now) {
		if err := ctx.Err(); err != nil {
			p.giveBack(e) // unchecked, it is as good as it was
			return nil, errCanceled, 0, err
		}
		checked := false
		defer func() {
			if !checked { // a panic or Goexit in the Preparer
				p.ds.later(e, reasonPrepare, nil)
			}
		}()
		lt.start(p.opts.LeaseTimeout > 0)
		start := p.ob.stamp(lt.traced)
		err := p.ck.check(ctx, e)
		checked = true
		p.ob.stopTimer(lt, start, &lt.prepare)
		if err != nil && ctx.Err() != nil {
			p.ds.later(e, reasonPrepare, nil)
			return nil, errCanceled, 0, ctx.Err() // the caller gave up: don't try another
		}
		if err != nil {
			return e, 0, reasonPrepare, errAnotherPermit
		}
	}
	if p.opts.stamps() {
		e.idleFor = max(now-e.idleAt, 0)
	}
	return e, 0, 0, nil
}

// createReady creates and prepares a fresh item for the caller's permit. On
// error, also on a panic or Goexit of user code, the permit has gone: back,
// with the item to its Destroy, or with an abandoned creation.
func (p *Pool[T]) createReady(ctx context.Context, lt *leaseTimes) (_ *entry[T], failed errType, err error) {
	var e *entry[T]
	settled := false
	defer func() {
		switch {
		case settled:
		case e != nil:
			p.ds.later(e, reasonPrepare, nil)
		default:
			p.g.free()
		}
	}()
	var abandoned bool
	start := p.ob.stamp(lt.traced)
	e, abandoned, err = p.mk.create(ctx)
	p.ob.stopTimer(lt, start, &lt.create)
	if err != nil {
		settled = abandoned // the permit went with the creation
		return nil, errCreate, err
	}
	if p.opts.Preparer != nil {
		start = p.ob.stamp(lt.traced)
		err = p.ck.check(ctx, e)
		p.ob.stopTimer(lt, start, &lt.prepare)
		if err != nil {
			return nil, errPrepare, err // the deferred call destroys it
		}
	}
	settled = true
	return e, 0, nil
}

// errType classifies a failed lease: the error.type of pool.lease.errors.
type errType int

const (
	errTimeout errType = iota
	errCanceled
	errClosed
	errExhausted
	errCreate
	errPrepare
	errDown
	numErrTypes
)

var errTypeNames = [numErrTypes]string{"timeout", "canceled", "closed", "exhausted", "create", "prepare", "backend_down"}

// String returns the error.type that pool.lease.errors records.
func (t errType) String() string { return errTypeNames[t] }

// failedBy classifies err of step t: t, unless Close or ctx ended it; Close
// first: a creation Close canceled may wrap context.Canceled (net.Dialer does).
func failedBy(ctx context.Context, t errType, err error) errType {
	switch {
	case errors.Is(err, ErrClosed):
		return errClosed
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return errCanceled
	case errors.Is(err, ErrBackendDown):
		return errDown
	}
	return t
}

// leaseFailed counts a failed lease in Stats and pool.lease.errors.
func (p *Pool[T]) leaseFailed(ctx context.Context, t errType, err error) (Lease[T], error) {
	p.ob.leaseFailed(ctx, t)
	return Lease[T]{}, err
}
