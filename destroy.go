package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The destroyer: the Destroy calls, on goroutines of their own.
//
// The invariant: an item counts against MaxSize until its destruction
// ends. Whoever lets an item go hands it, with its permit, to later (or,
// for the items the gate took out of the idle ring and counted as dying
// already, to taken) and returns at once; the Destroy call runs on a
// goroutine of its own (run), which frees the permit (or hands it on, as
// the right to create a fresh item) once Destroy has returned, panicked or
// called runtime.Goexit, or once DestroyTimeout has passed, whichever
// comes first. Every destruction is counted exactly once, by reason. The
// gate counts the destructions not ended (gate.dying): Stats.Destroying,
// and what Close waits for.
type destroyer[T any] struct {
	destroy func(T) error // Options.Destroy, or closeItem
	timeout time.Duration // DestroyTimeout
	name    string
	g       *gate[T]
	ob      *observer[T]
}

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

// later destroys e, an item whose permit the caller holds, for why, and
// frees the permit once that is done: the caller never waits for a
// Destroy. From this call on, e is no lease and no leak. A failed or
// panicking Destroy is logged and counted; with b, its end is counted in b
// too, and its error kept there when b keeps errors.
func (d *destroyer[T]) later(e *entry[T], why reason, b *destroyBatch) {
	d.g.toDestroy()
	d.taken(e, why, b)
}

// taken is later for an item the gate has counted as dying already.
func (d *destroyer[T]) taken(e *entry[T], why reason, b *destroyBatch) {
	d.ob.forget(e)
	if b != nil {
		b.pending.Add(1)
	}
	go d.run(e, why, b)
}

// destroyBatch is a batch of destructions that someone waits for:
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

// all destroys items the gate took out, as taken does, all at once, waits until each of their Destroy calls
// has returned or timed out, and returns their joined errors (a panic's
// among them, with its stack). When ctx ends first, it returns ctx.Err()
// as werr, and the Destroy calls go on (their errors logged).
func (d *destroyer[T]) all(ctx context.Context, es []*entry[T], why reason) (err, werr error) {
	b := newDestroyBatch(true)
	for _, e := range es {
		d.taken(e, why, b)
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

// run calls Destroy on e, and ends the destruction (end) when Destroy
// returns, panics or calls runtime.Goexit, or when DestroyTimeout passes
// first; a Destroy past its timeout is left to finish on its own.
func (d *destroyer[T]) run(e *entry[T], why reason, b *destroyBatch) {
	var state atomic.Int32
	if d.timeout > 0 {
		t := time.AfterFunc(d.timeout, func() {
			if state.CompareAndSwap(destroyRunning, destroyTimedOut) {
				d.end(why, fmt.Errorf("pool %q: destroy item: %w (%v); its place under MaxSize is free again", d.name, errDestroyTimeout, d.timeout), b)
			}
		})
		defer t.Stop()
	}
	err := errDestroyGoexit // until Destroy returns: what a Goexit leaves
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pool %q: destroy item: Destroy panicked: %w", d.name, asError(newPanicError(v)))
		}
		if state.CompareAndSwap(destroyRunning, destroyFinished) {
			d.end(why, err, b)
		}
	}()
	if derr := d.destroy(e.value); derr != nil {
		err = fmt.Errorf("pool %q: destroy item: %w", d.name, derr)
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

// end ends a destruction, once: it counts it (failed when err is not
// nil), logs err, frees the permit, and counts it in b (keeping err for a
// caller that returns it), last: a batch's waiter finds its permits free.
func (d *destroyer[T]) end(why reason, err error, b *destroyBatch) {
	d.ob.destroyed(why, err != nil)
	if err != nil {
		d.ob.warn("destroy item", err)
	}
	d.g.destroyed()
	if b != nil {
		b.ended(err)
	}
}
