package pool

import (
	"context"
	"fmt"
)

// Preparing items on lease.
//
// The invariant: an item is seen by one Preparer call at a time, run by
// whoever holds its permit while the item is out of the idle ring; and an
// item whose preparation fails, panics or outlasts PreparationTimeout is
// never handed out: it is destroyed.

// Preparer checks an item's readiness when it is leased and restores it when
// it is not ready: an SMTP connection the server dropped while it sat idle,
// a session whose token expired.
//
// On a lease the pool calls IsReady and, when it reports false, Prepare;
// both within Options.PreparationTimeout. A fresh item is always checked; an
// idle one only when it has sat idle for at least Options.CheckAfterIdle.
// When either returns an error (or the timeout elapses) the item is
// destroyed: an idle item is replaced by the next idle item or a fresh one,
// while a fresh item's error is returned to the caller, wrapped.
//
// Both methods may be called from several goroutines at once, on different
// items; an item is seen by one call at a time.
type Preparer[T any] interface {
	IsReady(ctx context.Context, item T) (bool, error)
	Prepare(ctx context.Context, item T) error
}

// CheckFunc adapts a function that checks an item to the Preparer
// interface, for a Preparer that only checks: a ping. A nil error accepts
// the item; an error fails its preparation, so the pool destroys the item,
// then goes on with the next idle item or a fresh one when it was idle, and
// returns the error to the Lease caller, wrapped, when it was fresh. The
// function is called where IsReady would be: on every fresh item, and on an
// idle one that sat idle at least Options.CheckAfterIdle, within
// Options.PreparationTimeout. A nil CheckFunc accepts every item, as a nil
// Preparer does.
type CheckFunc[T any] func(ctx context.Context, item T) error

// IsReady calls f(ctx, item): true and nil when it returns nil, else false
// and its error. It never reports false without an error, so the pool never
// calls Prepare on a CheckFunc.
func (f CheckFunc[T]) IsReady(ctx context.Context, item T) (bool, error) {
	if f == nil {
		return true, nil
	}
	if err := f(ctx, item); err != nil {
		return false, err
	}
	return true, nil
}

// Prepare runs the check again, for callers other than the pool: a check
// cannot restore an item, so Prepare reports nil only for an item that
// passes it, and never claims a broken item restored.
func (f CheckFunc[T]) Prepare(ctx context.Context, item T) error {
	_, err := f.IsReady(ctx, item)
	return err
}

// prepareFresh prepares a fresh item for the lease that created it: held
// meanwhile (see holders.go), since the item is not out on a lease yet.
func (p *Pool[T]) prepareFresh(ctx context.Context, e *entry[T]) error {
	e.flipBusy()
	if err := p.prepare(ctx, e); err != nil {
		return err // destroyed by the caller: no longer registered
	}
	e.flipBusy()
	return nil
}

// prepare runs IsReady and, when the item is not ready, Prepare, within
// PreparationTimeout and ctx: the caller's on a lease, the pool's own (which
// Close cancels) in the upkeep.
func (p *Pool[T]) prepare(ctx context.Context, e *entry[T]) error {
	if p.m != nil {
		start := p.now()
		defer func() { p.m.prepTime.Record(ctx, seconds(p.now()-start), p.m.rec...) }()
	}
	pctx, limit := ctx, p.opts.PreparationTimeout
	var start int64
	if limit > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
		start = monotime()
	}
	ready, err := p.opts.Preparer.IsReady(pctx, e.value)
	if err == nil && !ready {
		err = p.opts.Preparer.Prepare(pctx, e.value)
	}
	// Read the clock rather than wait for pctx's timer to mark it done: a
	// Preparer that ignored its ctx may report success after the timeout,
	// too late all the same, before that timer has run.
	timedOut := limit > 0 && ctx.Err() == nil && (pctx.Err() != nil || monotime()-start >= int64(limit))
	if err == nil && timedOut {
		err = context.DeadlineExceeded
	}
	if err != nil {
		// A check of the upkeep's (which runs under the pool's own
		// context) that Close cut short says nothing about the item: not
		// counted as failed. A lease's is counted whatever ended it.
		if ctx != p.done || p.done.Err() == nil {
			p.c.prepareFail.Add(1)
			if p.m != nil {
				p.m.prepErrors.Add(ctx, 1, p.m.add...)
			}
		}
		if timedOut {
			return fmt.Errorf("pool %q: prepare item: %w after %v: %w", p.opts.Name, ErrPreparationTimeout, p.opts.PreparationTimeout, err)
		}
		return fmt.Errorf("pool %q: prepare item: %w", p.opts.Name, err)
	}
	e.checked = true
	return nil
}
