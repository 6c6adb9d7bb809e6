package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
)

// Every failure reaches somebody: an error its caller, wrapped with the
// pool's name; a panic of user code the caller whose call ran it, with its
// stack; the rest is counted in Stats and logged by warn.

// The sentinel errors. Every error the pool returns is or wraps one of them,
// is the caller's ctx.Err(), or wraps an error of user code (the Factory or
// the Preparer). Test with errors.Is.
var (
	// ErrClosed is returned, wrapped with the pool's name, by Lease and
	// TryLease on a closed pool and to every lease waiting when it closed.
	ErrClosed = errors.New("pool: closed")

	// ErrLeaseTimeout is returned when Options.LeaseTimeout elapses while a
	// lease waits, wrapped with the pool's name, MaxSize, the time since the
	// call, how many leases were waiting and items being created and
	// destroyed, and the last creation error since the call, if any, for
	// errors.Is and errors.As. It is not context.DeadlineExceeded: a wait
	// ended by the caller's own deadline returns ctx.Err().
	ErrLeaseTimeout = errors.New("pool: lease timeout")

	// ErrExhausted is returned by TryLease when MaxSize items are in use (or
	// other leases are already waiting for one), and by Lease when
	// Options.MaxQueuedLeases leases are waiting already.
	ErrExhausted = errors.New("pool: exhausted")

	// ErrBackendDown is returned at once, wrapped with the pool's name and the
	// last creation's error, by a lease that must create an item (also one
	// waiting when a place came free) while the pool is down:
	// Options.FailFastAfter creations in a row failed, none succeeding since.
	ErrBackendDown = errors.New("pool: backend down")

	// ErrPreparationTimeout is returned, wrapped, when IsReady and Prepare
	// together take longer than Options.PreparationTimeout on a fresh item.
	ErrPreparationTimeout = errors.New("pool: preparation timeout")

	// ErrBroken marks an item broken: a function given to Pool.Do returns an
	// error wrapping it (fmt.Errorf("send: %w: %w", pool.ErrBroken, err)) to
	// have the item destroyed, not reused. The pool never returns it itself.
	ErrBroken = errors.New("pool: item broken")

	// ErrInvalidOptions is returned, wrapped with the name of the offending
	// field, by New and SetMaxSize when they refuse the options, and by
	// Options.UnmarshalJSON when a configuration does not decode.
	ErrInvalidOptions = errors.New("pool: invalid options")
)

// errNilContext is what an entry point given a nil ctx panics with.
const errNilContext = "pool: nil Context"

// panicError is a panic of user code raised again, or reported as an error,
// away from where it happened, with its stack; Unwrap gives an error value.
type panicError struct {
	value any
	stack []byte
}

// newPanicError captures v with the stack. Call it from the deferred function
// that recovered v, while the stack still holds the frames that panicked.
func newPanicError(v any) *panicError {
	stack := debug.Stack()
	// Drop "goroutine N [running]:": that goroutine may be gone when read.
	if i := bytes.IndexByte(stack, '\n'); i >= 0 {
		stack = stack[i+1:]
	}
	return &panicError{value: v, stack: stack}
}

func (p *panicError) Error() string {
	return fmt.Sprintf("%v\n\nthe panic was raised again by the pool; where it happened:\n%s", p.value, p.stack)
}

func (p *panicError) Unwrap() error {
	err, _ := p.value.(error)
	return err
}

// ownCtxErr hides context.Canceled and DeadlineExceeded from errors.Is in err,
// an error of user code under a ctx of the pool's own (CreateTimeout,
// PreparationTimeout, Close): they match a pool's error only when the caller's
// ctx ended (doc.go, "Waiting and errors"). Other errors.Is and errors.As
// reach into err; errors.Unwrap does not.
func ownCtxErr(err error) error { return &ownCtx{err} }

type ownCtx struct{ err error }

func (o *ownCtx) Error() string { return o.err.Error() }

func (o *ownCtx) Is(target error) bool {
	return target != context.Canceled && target != context.DeadlineExceeded && errors.Is(o.err, target)
}

func (o *ownCtx) As(target any) bool { return errors.As(o.err, target) }

// unprefixed is err without its `pool "name": ` prefix, which the record's
// pool.name says already; it unwraps to err.
type unprefixed struct {
	err    error
	prefix string
}

func (u unprefixed) Error() string {
	// Joined errors (a Close's, a Clear's) start every line so.
	return strings.ReplaceAll(strings.TrimPrefix(u.err.Error(), u.prefix), "\n"+u.prefix, "\n")
}
func (u unprefixed) Unwrap() error { return u.err }
