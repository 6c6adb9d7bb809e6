package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Destroying items, on the pool's own goroutines.
//
// The invariant: an item counts against MaxSize until its destruction
// ends. Whoever lets an item go hands it, with its permit, to
// destroyLater and returns at once; the Destroy call runs on a task of
// p.destroys, which frees the permit (or hands it on, as the right to
// create a fresh item) once Destroy has returned, panicked or called
// runtime.Goexit, or once DestroyTimeout has passed, whichever comes
// first. Every destruction is counted exactly once, by reason. The tasks
// of p.destroys that have not returned or timed out are the Destroy calls
// the pool waits for: Stats.Destroying, and what Close waits for.

// reason is why an item is destroyed: the reason attribute of
// pool.items.destroyed.
type reason int

const (
	reasonIdle reason = iota
	reasonLifetime
	reasonPrepare
	reasonReset
	reasonDiscard
	reasonClear
	reasonClose
	reasonResize
	reasonUses
	numReasons
)

var reasonNames = [numReasons]string{"idle", "lifetime", "prepare", "reset", "discard", "clear", "close", "resize", "max_uses"}

// String returns the reason as pool.items.destroyed names it.
func (r reason) String() string { return reasonNames[r] }

// destroyLater destroys e, an item whose permit the caller holds, for why,
// on a goroutine of the pool's own, and frees the permit once that is
// done: the caller never waits for a Destroy. From this call on, e is no
// lease and no leak (the registry and the cleanup let go of it). A failed
// or panicking Destroy is logged and counted; with b, its end is counted
// in b too, and its error kept there when b keeps errors.
func (p *Pool[T]) destroyLater(e *entry[T], why reason, b *destroyBatch) {
	e.cleanup.Stop() // the entry is garbage from now on, not a leak
	p.reg.remove(e)
	p.g.toDestroy()
	if b != nil {
		b.pending.Add(1)
	}
	p.destroys.startID(func(id uint64) { p.runDestroy(e, why, b, id) }) // never stopped
}

// destroyBatch is a batch of destroyLater calls that someone waits for:
// Close and New after a failed seeding, which keep the errors to return
// them, and Clear's refill, which waits for the permit.
type destroyBatch struct {
	keep    bool         // keep the errors, for the caller to return them too
	pending atomic.Int32 // Destroy calls not ended yet
	mu      sync.Mutex
	errs    []error
	done    chan struct{} // closed by close once pending is 0 and sealed
	sealed  bool
}

func newDestroyBatch(keep bool) *destroyBatch {
	return &destroyBatch{keep: keep, done: make(chan struct{})}
}

// ended counts one Destroy of the batch ended, with err, which it keeps
// when the batch keeps errors.
func (b *destroyBatch) ended(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil && b.keep {
		b.errs = append(b.errs, err)
	}
	if b.pending.Add(-1) == 0 && b.sealed {
		close(b.done)
	}
}

// seal says that the batch is complete: done closes once every Destroy of
// it has ended (at once, when they all have).
func (b *destroyBatch) seal() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sealed = true
	if b.pending.Load() == 0 {
		close(b.done)
	}
	return b.done
}

func (b *destroyBatch) join() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return errors.Join(b.errs...)
}

// destroyAll destroys items whose permits the caller holds, as
// destroyLater does, all at once, waits until each of their Destroy calls
// has returned or timed out, and returns their joined errors (a panic's
// among them, with its stack). When ctx ends first, it returns ctx.Err()
// as werr, and the Destroy calls go on (their errors logged).
func (p *Pool[T]) destroyAll(ctx context.Context, es []*entry[T], why reason) (err, werr error) {
	b := newDestroyBatch(true)
	for _, e := range es {
		p.destroyLater(e, why, b)
	}
	if werr = awaitOr(ctx, b.seal()); werr != nil {
		return nil, werr
	}
	return b.join(), nil
}

// A Destroy call's states: running until Destroy returns (finished) or
// DestroyTimeout passes (timedOut), whichever comes first, once.
const (
	destroyRunning int32 = iota
	destroyFinished
	destroyTimedOut
)

// runDestroy is the task of destroyLater: it calls Destroy on e, and ends
// the destruction (endDestroy) when Destroy returns, panics or calls
// runtime.Goexit, or when DestroyTimeout passes first; a Destroy past its
// timeout is left to finish on its own.
func (p *Pool[T]) runDestroy(e *entry[T], why reason, b *destroyBatch, id uint64) {
	var state atomic.Int32
	if d := p.opts.DestroyTimeout; d > 0 {
		t := time.AfterFunc(d, func() {
			if state.CompareAndSwap(destroyRunning, destroyTimedOut) {
				p.endDestroy(why, fmt.Errorf("pool %q: destroy item: %w (%v); its place under MaxSize is free again", p.opts.Name, errDestroyTimeout, d), b, id)
			}
		})
		defer t.Stop()
	}
	err := errDestroyGoexit // until Destroy returns: what a Goexit leaves
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pool %q: destroy item: Destroy panicked: %w", p.opts.Name, asError(newPanicError(v)))
		}
		if state.CompareAndSwap(destroyRunning, destroyFinished) {
			p.endDestroy(why, err, b, id)
		}
	}()
	if derr := p.opts.Destroy(e.value); derr != nil {
		err = fmt.Errorf("pool %q: destroy item: %w", p.opts.Name, derr)
	} else {
		err = nil
	}
}

var (
	// errDestroyGoexit is the error of a Destroy that called runtime.Goexit.
	errDestroyGoexit = errors.New("pool: destroy item: Destroy called runtime.Goexit")
	// errDestroyTimeout is the error of a Destroy that outlasted DestroyTimeout.
	errDestroyTimeout = errors.New("no return from Destroy within DestroyTimeout")
)

// endDestroy ends a destruction, once: it counts it (failed when err is
// not nil), logs err (and keeps it in b, for a caller that returns it),
// frees the permit, and ends the wait for the batch and for the task id.
func (p *Pool[T]) endDestroy(why reason, err error, b *destroyBatch, id uint64) {
	p.countDestroyed(why, err != nil)
	if err != nil {
		p.warn("destroy item", err)
	}
	p.g.destroyed()
	if b != nil {
		b.ended(err)
	}
	p.destroys.done(id) // last: whoever waits for it finds the rest done
}

// countDestroyed counts one destruction, for why, and whether Destroy
// failed.
func (p *Pool[T]) countDestroyed(why reason, failed bool) {
	p.c.mu.Lock()
	switch why {
	case reasonIdle:
		p.c.idleExpired++
	case reasonLifetime:
		p.c.lifetimeExpired++
	case reasonUses:
		p.c.usesExpired++
	}
	p.c.destroyed++
	if failed {
		p.c.destroyFails++
	}
	p.c.mu.Unlock()
	if p.m != nil {
		p.m.itemDestroyed(why, failed)
	}
}
