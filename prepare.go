package pool

import "context"

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
