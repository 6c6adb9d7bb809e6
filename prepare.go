package pool

import (
	"context"
	"fmt"
	"time"
)

// Preparer checks an item's readiness when it is leased and restores it when
// it is not ready: an SMTP connection the server dropped while it sat idle,
// a session whose token expired.
//
// On a lease the pool calls IsReady and, when it reports false, Prepare,
// within Options.PreparationTimeout: on every fresh item, and on an idle one
// that sat idle at least Options.CheckAfterIdle. When either returns an error
// or times out, the item is destroyed: an idle one is replaced by the next
// idle item or a fresh one; a fresh one's error goes to the caller, wrapped.
// Both methods may run on several goroutines at once, on different items;
// an item is seen by one call at a time.
type Preparer[T any] interface {
	IsReady(ctx context.Context, item T) (bool, error)
	Prepare(ctx context.Context, item T) error
}

// CheckFunc adapts a function that only checks an item, such as a ping, to
// the Preparer interface. It is called where IsReady would be; a nil error
// accepts the item, an error fails it as a Preparer's does. A nil CheckFunc
// accepts every item, as a nil Preparer does.
type CheckFunc[T any] func(ctx context.Context, item T) error

// IsReady reports whether f(ctx, item) returns nil, with f's error: never
// false without an error, so the pool never calls Prepare on a CheckFunc.
func (f CheckFunc[T]) IsReady(ctx context.Context, item T) (bool, error) {
	if f == nil {
		return true, nil
	}
	err := f(ctx, item)
	return err == nil, err
}

// Prepare runs the check again, for callers other than the pool: it reports
// nil only for an item that passes, never claiming a broken item restored.
func (f CheckFunc[T]) Prepare(ctx context.Context, item T) error {
	_, err := f.IsReady(ctx, item)
	return err
}

// checker runs the Preparer, for the leases and the upkeep.
type checker[T any] struct {
	preparer Preparer[T]
	timeout  time.Duration // PreparationTimeout
	after    int64         // CheckAfterIdle, in the clock's nanoseconds
	name     string
	done     context.Context // Close's: ends the upkeep's checks
	clk      *clock
	ob       *observer[T]
}

func (c *checker[T]) checksIdle() bool { return c.preparer != nil && c.after > 0 }

// due says whether the Preparer must see an idle item: one it never
// accepted, or one idle CheckAfterIdle since its release or last check.
func (c *checker[T]) due(e *entry[T], now int64) bool {
	return c.preparer != nil && (!e.checked || c.after == 0 || now-max(e.idleAt, e.checkedAt) >= c.after)
}

// check runs the Preparer on e within PreparationTimeout and ctx. The caller
// holds e's permit, e out of the idle ring: one call sees e at a time.
func (c *checker[T]) check(ctx context.Context, e *entry[T]) error {
	if c.ob.measuring() {
		defer c.ob.checkEnded(ctx, c.ob.checkBegins()) // a panic's too
	}
	pctx, limit := ctx, c.timeout
	var began int64
	if limit > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
		began = monotime()
	}
	ready, err := c.preparer.IsReady(pctx, e.value)
	if err == nil && !ready {
		err = c.preparer.Prepare(pctx, e.value)
	}
	// Read the clock: a Preparer that ignored its ctx may report success
	// after the timeout but before pctx's timer has run.
	timedOut := limit > 0 && ctx.Err() == nil && (pctx.Err() != nil || monotime()-began >= int64(limit))
	if err == nil && timedOut {
		err = context.DeadlineExceeded
	}
	if err != nil {
		// An upkeep check that Close cut short says nothing about the
		// item; a lease's counts whatever ended it.
		if ctx != c.done || c.done.Err() == nil {
			c.ob.checkFailed(ctx)
		}
		return c.failed(ctx, err, timedOut)
	}
	e.checked = true
	return nil
}

// failed wraps a failed check's error: ErrPreparationTimeout when it timed
// out, and neither ctx sentinel unless the caller's ctx ended (ownCtxErr).
func (c *checker[T]) failed(ctx context.Context, err error, timedOut bool) error {
	if ctx.Err() == nil {
		err = ownCtxErr(err) // PreparationTimeout's, or the Preparer's own: not the caller's ctx
	}
	if timedOut {
		return fmt.Errorf("pool %q: prepare item: %w after %v: %w", c.name, ErrPreparationTimeout, c.timeout, err)
	}
	return fmt.Errorf("pool %q: prepare item: %w", c.name, err)
}
