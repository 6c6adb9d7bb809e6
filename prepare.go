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
