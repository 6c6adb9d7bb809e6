package pool

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The way of a lease: Lease, TryLease and Do, the fast path, and the slow
// lease, a ladder of steps each in one helper below:
//
//	refused at the gate?    fail with the reason          refused
//	queued at the gate?     wait for a permit             wait
//	a permit in hand:       the newest idle item that     takeReady, judge
//	                        passes judgement, else
//	                        a fresh item, checked         createReady
//	lent:                   counted, wait recorded,       leaseSlow
//	                        perhaps sampled
//
// The invariant: each step that holds the lease's permit either hands it
// on to the next step, with the item in hand if any, or returns it (and
// destroys that item) before it returns an error, also on a panic or
// runtime.Goexit of user code: each such step has a deferred call that
// lets go of what it holds unless it settled.

// Lease returns a leased item. It reuses an idle item, creates one when
// fewer than MaxSize exist, or waits in FIFO order for one to be released.
// The wait ends with ErrLeaseTimeout after Options.LeaseTimeout, with
// ctx.Err() when ctx ends first, and with ErrClosed when the pool closes.
// A ctx that has already ended gets ctx.Err() at once, even when an item
// is idle. A failed creation or preparation of a fresh item returns its
// error, wrapped. The caller must end the lease: defer l.Release().
// Lease panics when ctx is nil.
func (p *Pool[T]) Lease(ctx context.Context) (Lease[T], error) {
	return p.lease(ctx, mayWait, nil)
}

// TryLease is Lease without the wait: when MaxSize items are in use, or
// other leases already wait for one, it returns ErrExhausted at once. It
// may still create and prepare an item, within ctx.
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
	returned := false
	defer func() {
		if !returned {
			l.Discard() // fn panicked, or called runtime.Goexit: the item may be half-used
		}
	}()
	err = fn(l.Value())
	returned = true
	if errors.Is(err, ErrBroken) {
		l.Discard()
	} else {
		l.Release()
	}
	return err
}

// lease is the one entry of Lease, TryLease and Do, called by each with
// lt nil: the fast path, and the gate's admission for the slow lease. A
// pool with a Tracer or TrackLeaseSites first goes to the edge
// (leaseAtEdge), which calls it again with an lt for the slow lease to
// fill in; the fast path does nothing it would measure.
func (p *Pool[T]) lease(ctx context.Context, wait waitChoice, lt *leaseTimes) (Lease[T], error) {
	if ctx == nil {
		panic(errNilContext)
	}
	if p.route.edge && lt == nil {
		return p.leaseAtEdge(ctx, wait)
	}
	if err := ctx.Err(); err != nil {
		return p.leaseFailed(ctx, errCanceled, err) // gave up already: take nothing
	}
	// Best case: an idle item parked in this processor's slot (ring.go,
	// "take", written out here: docs/DESIGN.md, "Take and park, written
	// out"), not retired by a Clear, in a pool with nothing to judge.
	if r := &p.g.slots; !r.bypass.Load() {
		pid := procPin()
		s := &r.s[pid&r.mask]
		// Load first: a miss then costs no locked instruction.
		if e := s.e.Load(); e != nil && s.e.CompareAndSwap(e, nil) {
			// Not retired by a Clear: the one load and compare this costs is
			// on a line that the take has read already.
			switch p.route.lease {
			case leaseAsIs:
				if e.era == r.era.Load() {
					r.countLease(pid) // still pinned: see countLease
					procUnpin()
					return Lease[T]{e: e, gen: e.gen.Load()}, nil
				}
			case leaseSampled:
				if e.era == r.era.Load() {
					if k := r.countLease(pid); p.sampledForUse(k) {
						p.sampleUse(e) // the clock, read pinned: nothing that may block
					}
					procUnpin()
					return Lease[T]{e: e, gen: e.gen.Load()}, nil
				}
			}
			procUnpin()
			return p.leaseSlow(ctx, e, nil, admitted, wait, lt)
		}
		procUnpin()
	}
	return p.leaseFromGate(ctx, wait, lt)
}

// leaseFromGate is a lease that missed its slot: an idle item, or the
// permit to create one, from the gate, in the critical section that
// queues the lease when there is neither.
func (p *Pool[T]) leaseFromGate(ctx context.Context, wait waitChoice, lt *leaseTimes) (Lease[T], error) {
	e, w, a := p.g.acquire(ctx, wait, p.route.lease == leaseAsIs)
	if a == admitted && p.route.lease == leaseAsIs {
		if p.opts.MinIdle > 0 {
			p.ask(wantSpares) // it took from the idle queue: perhaps the last spare
		}
		return Lease[T]{e: e, gen: e.gen.Load()}, nil // counted by acquire
	}
	return p.leaseSlow(ctx, e, w, a, wait, lt)
}

// leaseSlow finishes a lease that the fast path could not, after the gate's
// admission a: e came with the permit when a is admitted or admitRetired,
// and w is the lease's place in the queue when a is queued. An idle item
// that fails its judgement goes to its Destroy with the lease's permit, and
// the lease asks the gate for another (wait says whether it may queue for
// it). It keeps what it knows of itself in one leaseTimes, the caller's
// when traced (lt), else its own.
func (p *Pool[T]) leaseSlow(ctx context.Context, e *entry[T], w *waiter[T], a admission, wait waitChoice, lt *leaseTimes) (Lease[T], error) {
	var own leaseTimes
	if lt == nil {
		lt = &own
	}
	for {
		// Refused at the gate: the lease fails with the reason.
		if a.refused() {
			return p.refused(ctx, a)
		}
		// Queued: wait for a permit, which may come with an item.
		if a == queued {
			var err error
			if e, err = p.wait(ctx, w, lt); err != nil {
				return Lease[T]{}, err
			}
		}
		// A permit in hand: an idle item that passes judgement, else a fresh
		// one; or another permit, when the idle item failed.
		var t errType
		var why reason
		var err error
		e, t, why, err = p.takeReady(ctx, e, lt)
		if err == errAnotherPermit {
			failed := e
			e, w, a = p.anotherPermit(ctx, wait)
			p.destroyLater(failed, why, nil) // after: the permit it frees may be the lease's
			continue
		}
		if err == nil && e == nil {
			e, t, err = p.createReady(ctx, lt)
		}
		if err != nil {
			return p.leaseFailed(ctx, p.failedBy(ctx, t, err), err)
		}
		// Lent: counted on its processor (Stats.Leases) and, with metrics,
		// its wait recorded when it queued and perhaps sampled for
		// use_time; with MinIdle, it asks for spares: it may have taken
		// the last.
		k := p.g.slots.countLease(procPin())
		procUnpin()
		if p.opts.MinIdle > 0 {
			p.ask(wantSpares)
		}
		if p.m != nil {
			p.lentMetrics(ctx, e, k, lt.queued, lt.wait)
		}
		return Lease[T]{e: e, gen: e.gen.Load()}, nil
	}
}

// lentMetrics records, for a slow lease of e with k leases before it on its
// processor, its wait when it queued, and its use_time when sampled.
func (p *Pool[T]) lentMetrics(ctx context.Context, e *entry[T], k uint64, queued bool, waited time.Duration) {
	if queued {
		p.m.waitTime.Record(ctx, waited.Seconds(), p.m.rec...)
	}
	if p.sampledForUse(k) {
		p.sampleUse(e)
	}
}

// start reads the clock for LeaseTimeout, if needed and not read yet.
func (lt *leaseTimes) start(needed bool) {
	if needed && lt.since == 0 {
		lt.since = monotime()
	}
}

// left is what remains of LeaseTimeout d for the lease's next wait: at
// least a nanosecond, so that the gate's own timeout ends a wait begun
// late; 0 (none) when d is.
func (lt *leaseTimes) left(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	lt.start(true)
	return max(d-time.Duration(monotime()-lt.since), 1)
}

// anotherPermit asks the gate for another permit, for a lease whose idle item
// failed its judgement: one that may wait queues again ahead of the leases
// that came after it (waitAgain).
func (p *Pool[T]) anotherPermit(ctx context.Context, wait waitChoice) (*entry[T], *waiter[T], admission) {
	if wait == mayWait {
		wait = waitAgain
	}
	return p.g.acquire(ctx, wait, false)
}

// refused fails a lease that the gate refused as a.
func (p *Pool[T]) refused(ctx context.Context, a admission) (Lease[T], error) {
	switch a {
	case refusedClosed:
		return p.leaseFailed(ctx, errClosed, p.errClosed)
	case refusedCanceled:
		return p.leaseFailed(ctx, errCanceled, ctx.Err())
	case refusedInUse:
		return p.leaseFailed(ctx, errExhausted, p.exhausted.Load().inUse)
	case refusedQueueFull:
		return p.leaseFailed(ctx, errExhausted, p.exhausted.Load().queueFull)
	default:
		return p.leaseFailed(ctx, errExhausted, p.exhausted.Load().queue)
	}
}

// wait waits, for the lease that the gate queued as w, until it grants a
// permit, which may come with an item (the gate counts the wait, and wait
// adds it to lt); when the wait ends otherwise, it fails the lease with
// the error its end calls for. Each wait gets what is left of LeaseTimeout
// (lt.left).
func (p *Pool[T]) wait(ctx context.Context, w *waiter[T], lt *leaseTimes) (*entry[T], error) {
	lt.queued = true
	e, d, expired, err := p.g.await(ctx, w, lt.left(p.opts.LeaseTimeout))
	lt.wait += d
	if err == nil {
		return e, nil
	}
	if e != nil {
		// An item granted as we gave up, on a pool that closed or shrank
		// meanwhile: nobody else may have it.
		p.destroyLater(e, p.refusedWhy(), nil)
	}
	var t errType
	switch {
	case expired:
		t, err = errTimeout, p.timeoutError(time.Duration(monotime()-lt.since))
	case err == ErrClosed:
		t, err = errClosed, p.errClosed
	default:
		t = errCanceled
	}
	_, err = p.leaseFailed(ctx, t, err)
	return nil, err
}

// timeoutError is ErrLeaseTimeout for a lease that has been waiting for
// waited, its waits and checks together: it says what the pool was doing.
func (p *Pool[T]) timeoutError(waited time.Duration) error {
	queued, size, dying := p.g.queueAndSize()
	return fmt.Errorf("%w: pool %q: every item stayed in use (MaxSize %d) for %v; %d leases waiting, %d items being created, %d being destroyed",
		ErrLeaseTimeout, p.opts.Name, size, waited.Round(time.Millisecond), queued, p.c.creating.Load(), dying)
}

// errAnotherPermit is what takeReady returns, with the idle item in hand,
// when that item failed its judgement: the caller asks the gate for another
// permit, then hands the item to its Destroy with the permit it held, so
// that a lease that queues again has its place before that permit is free.
var errAnotherPermit = errors.New("pool: another permit")

// takeReady decides, for the permit the caller holds, on e, the idle item
// that came with it, or, when there is none, the newest idle one now: lend
// it when it passes judgement (judge); else it returns the item, why it
// failed and errAnotherPermit, for the caller to destroy (see errAnotherPermit).
// It returns no item and no error when none is idle: the permit is the
// caller's still, to create one. On another error the permit has gone (with
// the item, or back), also on a panic or Goexit of user code; failed says
// which step failed.
func (p *Pool[T]) takeReady(ctx context.Context, e *entry[T], lt *leaseTimes) (_ *entry[T], failed errType, why reason, err error) {
	if e == nil {
		if e = p.g.takeIdle(); e == nil {
			return nil, 0, 0, nil
		}
	}
	settled := false
	defer func() {
		if !settled { // a panic or Goexit in the Preparer
			p.letGo(e)
		}
	}()
	var now int64 // the clock, in a pool that stamps releases; it may sweep
	if p.route.stamped {
		if now = p.now(); p.claimSweep(now) {
			p.destroyExpired(now)
		}
	}
	v, why, err := p.judge(ctx, e, now, lt)
	settled = true
	switch v {
	case lendIt:
		return e, 0, 0, nil
	case spareIt:
		p.giveBack(e) // the caller gave up before the check: the item is as good as it was
		return nil, errCanceled, 0, err
	}
	if err != nil && ctx.Err() != nil {
		p.destroyLater(e, why, nil)
		return nil, errCanceled, 0, ctx.Err() // the caller gave up: don't try another
	}
	return e, 0, why, errAnotherPermit
}

// verdict is what judge decided of an idle item taken for a lease.
type verdict uint8

const (
	lendIt    verdict = iota
	spareIt           // put it back idle, unjudged: the lease gave up before its check
	destroyIt         // for the reason judge gave
)

// judge decides what a lease does with the idle item e: destroy it when a
// Clear retired it, or when it has expired at now, the lease's clock (but
// for an item only idle too long that keepsFloor keeps); else check it with
// the Preparer when it is due a check (needsCheck), and destroy it when the
// check fails. The error is the check's, or the ctx's when it ended before
// the check. A check is time the lease's LeaseTimeout counts (lt.start).
func (p *Pool[T]) judge(ctx context.Context, e *entry[T], now int64, lt *leaseTimes) (verdict, reason, error) {
	if p.retired(e) {
		return destroyIt, reasonClear, nil
	}
	if !p.route.judged {
		return lendIt, 0, nil
	}
	if why, expired := p.expired(e, now); expired && (why != reasonIdle || !p.keepsFloor()) {
		return destroyIt, why, nil
	}
	if p.needsCheck(e, now) {
		if err := ctx.Err(); err != nil {
			return spareIt, 0, err
		}
		lt.start(p.opts.LeaseTimeout > 0)
		start := p.startTimer(lt)
		err := p.prepare(ctx, e)
		p.stopTimer(lt, start, &lt.prepare)
		if err != nil {
			return destroyIt, reasonPrepare, err
		}
	}
	if p.route.stamped {
		e.idleFor = max(now-e.idleAt, 0)
	}
	return lendIt, 0, nil
}

// createReady creates a fresh item for the permit the caller holds and, with
// a Preparer, checks it. On error, and on a panic or Goexit of user code,
// the permit has gone (back, or with the item to its Destroy, or with a
// creation its caller gave up on); failed says which step failed.
func (p *Pool[T]) createReady(ctx context.Context, lt *leaseTimes) (_ *entry[T], failed errType, err error) {
	var e *entry[T]
	settled := false
	defer func() {
		if !settled {
			p.letGo(e)
		}
	}()
	var abandoned bool
	start := p.startTimer(lt)
	e, abandoned, err = p.create(ctx)
	p.stopTimer(lt, start, &lt.create)
	if err != nil {
		settled = abandoned // the permit went with the creation
		return nil, errCreate, err
	}
	if p.opts.Preparer != nil {
		start = p.startTimer(lt)
		err = p.prepareFresh(ctx, e)
		p.stopTimer(lt, start, &lt.prepare)
		if err != nil {
			return nil, errPrepare, err // the deferred letGo destroys it
		}
	}
	settled = true
	return e, 0, nil
}

// letGo gives up the permit of a slow lease that fails: with the item in
// hand, if any, to its Destroy; else back to the gate.
func (p *Pool[T]) letGo(e *entry[T]) {
	if e != nil {
		p.destroyLater(e, reasonPrepare, nil)
		return
	}
	p.g.free()
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
	numErrTypes
)

var errTypeNames = [numErrTypes]string{"timeout", "canceled", "closed", "exhausted", "create", "prepare"}

// String returns the error.type that pool.lease.errors records.
func (t errType) String() string { return errTypeNames[t] }

// failedBy classifies the failure err of the step t of a slow lease: t,
// unless Close or the caller's ctx ended it. ErrClosed first: a factory
// that wraps its ctx's error (as net.Dialer does) makes a creation that
// Close canceled match context.Canceled too, and Close is what ended it.
func (p *Pool[T]) failedBy(ctx context.Context, t errType, err error) errType {
	switch {
	case errors.Is(err, ErrClosed):
		return errClosed
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return errCanceled
	}
	return t
}

// leaseFailed counts a failed lease of type t, in Stats and in
// pool.lease.errors, and returns err.
func (p *Pool[T]) leaseFailed(ctx context.Context, t errType, err error) (Lease[T], error) {
	switch t {
	case errCanceled:
		p.c.canceled.Add(1)
	case errTimeout:
		p.c.timeouts.Add(1)
	case errExhausted:
		p.c.refused.Add(1)
	}
	if p.m != nil {
		p.m.leaseFailed(ctx, t)
	}
	return Lease[T]{}, err
}
