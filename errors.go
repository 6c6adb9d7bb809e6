package pool

import "errors"

// The sentinel errors. Every error the pool returns either is one of these,
// wraps one of them, is the caller's ctx.Err(), or wraps an error returned by
// user code (the Factory or the Preparer). Test with errors.Is.
var (
	// ErrClosed is returned by Lease and TryLease on a closed pool, and to
	// every waiter that Close wakes.
	ErrClosed = errors.New("pool: closed")

	// ErrLeaseTimeout is returned when Options.LeaseTimeout elapses before a
	// permit is free. The returned error wraps it with the pool's name,
	// MaxSize and the time waited. It is not context.DeadlineExceeded: a wait
	// ended by the caller's own deadline returns ctx.Err() instead.
	ErrLeaseTimeout = errors.New("pool: lease timeout")

	// ErrExhausted is returned by TryLease when every permit is held (or
	// other leases are already queued for one).
	ErrExhausted = errors.New("pool: exhausted")

	// ErrPreparationTimeout is returned, wrapped, when IsReady and Prepare
	// together take longer than Options.PreparationTimeout on a fresh item.
	ErrPreparationTimeout = errors.New("pool: preparation timeout")

	// ErrInvalidOptions is returned, wrapped with the name of the offending
	// field, by New when it refuses the options.
	ErrInvalidOptions = errors.New("pool: invalid options")
)
