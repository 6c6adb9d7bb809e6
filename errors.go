package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
)

// Errors: the sentinels, panics raised again away from where they
// happened, and the errors that have no caller.
//
// The invariant: every failure reaches somebody. An error with a caller is
// returned to it, wrapped with the pool's name; a panic of user code
// reaches the caller whose call ran it, with the stack where it happened;
// what has no caller (a failed Destroy on Release, the upkeep, an
// abandoned creation) is counted in Stats and logged through
// Options.Logger, by warn.

// The sentinel errors. Every error the pool returns either is one of these,
// wraps one of them, is the caller's ctx.Err(), or wraps an error returned by
// user code (the Factory or the Preparer). Test with errors.Is.
var (
	// ErrClosed is returned, wrapped with the pool's name, by Lease and
	// TryLease on a closed pool, and to every lease that was waiting when
	// the pool closed.
	ErrClosed = errors.New("pool: closed")

	// ErrLeaseTimeout is returned when Options.LeaseTimeout, counted from
	// the Lease call, elapses while a lease waits for an item, all MaxSize
	// being in use. The returned error wraps it with what the pool was
	// doing: its name, MaxSize, the time since the call, and how many leases were waiting and items being created and
	// destroyed. It is not context.DeadlineExceeded: a wait ended by the
	// caller's own deadline returns ctx.Err() instead.
	ErrLeaseTimeout = errors.New("pool: lease timeout")

	// ErrExhausted is returned by TryLease when MaxSize items are in use (or
	// other leases are already waiting for one), and by Lease when
	// Options.MaxQueuedLeases leases are waiting already.
	ErrExhausted = errors.New("pool: exhausted")

	// ErrPreparationTimeout is returned, wrapped, when IsReady and Prepare
	// together take longer than Options.PreparationTimeout on a fresh item.
	ErrPreparationTimeout = errors.New("pool: preparation timeout")

	// ErrBroken marks an item broken: a function given to Pool.Do returns
	// an error that wraps it (fmt.Errorf("send: %w: %w", pool.ErrBroken,
	// err)) to have the item destroyed rather than reused. The pool never
	// returns it on its own.
	ErrBroken = errors.New("pool: item broken")

	// ErrInvalidOptions is returned, wrapped with the name of the offending
	// field, by New and SetMaxSize when they refuse the options, and by
	// Options.UnmarshalJSON when a configuration does not decode.
	ErrInvalidOptions = errors.New("pool: invalid options")
)

// errNilContext is what an entry point given a nil ctx panics with.
const errNilContext = "pool: nil Context"

// panicError is a panic of user code raised again away from where it
// happened (a factory's, on the goroutine of the Lease that waited for it),
// or reported there as an error (a Destroy's, which Close returns). The
// stack of the panic would be lost there, so it travels in the message;
// Unwrap gives the original value when it was an error.
type panicError struct {
	value any
	stack []byte
}

// newPanicError captures v with the current stack. Call it from the
// deferred function that recovered v: the stack then still holds the
// frames of the code that panicked.
func newPanicError(v any) *panicError {
	stack := debug.Stack()
	// The first line, "goroutine N [running]:", names a goroutine that may
	// be gone by the time anyone reads this.
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

// asError returns v as an error: itself, or an error that prints it.
func asError(v any) error {
	if err, ok := v.(error); ok {
		return err
	}
	return fmt.Errorf("%v", v)
}

// warn logs, through Options.Logger, an error that has no caller to go to.
// A Logger whose handler panics is not the pool's caller's problem either:
// the panic is dropped, so that it neither crashes the program from the
// pool's own goroutines nor stops a release or the upkeep half-way.
func (p *Pool[T]) warn(msg string, err error) {
	if l := p.opts.Logger; l != nil {
		defer func() { _ = recover() }()
		l.LogAttrs(context.Background(), slog.LevelWarn, "pool: "+msg,
			slog.String("pool.name", p.opts.Name), slog.Any("err", unprefixed{err, fmt.Sprintf("pool %q: ", p.opts.Name)}))
	}
}

// unprefixed is an error as warn logs it: without the `pool "name": ` its
// message starts with, which the record's pool.name attribute says already.
// It unwraps to the error itself, so a handler that looks into it finds
// everything.
type unprefixed struct {
	err    error
	prefix string
}

func (u unprefixed) Error() string {
	// Joined errors (a Close's, a Clear's) start every line so.
	return strings.ReplaceAll(strings.TrimPrefix(u.err.Error(), u.prefix), "\n"+u.prefix, "\n")
}
func (u unprefixed) Unwrap() error { return u.err }
