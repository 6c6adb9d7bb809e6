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
// ends. Whoever lets an item go hands it with its permit to later (or to
// taken, if the gate took it out of the idle ring as dying already) and
// returns at once; run calls Destroy and frees the permit (or hands it on,
// as the right to create) once Destroy returns, panics or calls
// runtime.Goexit, or DestroyTimeout passes, whichever comes first. Each
// destruction is counted once, by reason. gate.dying counts those not
// ended: Stats.Destroying, and what Close waits for.
type destroyer[T any] struct {
	destroy func(T) error // Options.Destroy, or closeItem
	timeout time.Duration // DestroyTimeout
	name    string
	g       *gate[T]
	ob      *observer[T]
}

// reason is why an item is destroyed: pool.items.destroyed's reason attribute.
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

// later destroys e, whose permit the caller holds, for why, without
// waiting. From this call on, e is no lease and no leak. A failed or
// panicking Destroy is logged and counted, in b too if not nil (its error
// kept if b keeps errors).
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

// destroyBatch: destructions someone waits for: Close and New after a
// failed seeding, which keep the errors, and Clear's refill.
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

// ended counts one Destroy of the batch ended, keeping err if b keeps errors.
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

// seal completes the batch: done closes once every Destroy of it has ended.
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

// all destroys the items the gate took out, as taken does, and returns the
// joined errors (a panic's with its stack) once each Destroy returned or timed
// out; if ctx ends first, werr is ctx.Err() and they go on (errors logged).
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

// A Destroy call's states: running until finished or timedOut, once.
const (
	destroyRunning int32 = iota
	destroyFinished
	destroyTimedOut
)

// run calls Destroy on e and ends the destruction (end) at its return,
// panic or Goexit, or at DestroyTimeout first, leaving Destroy to finish.
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

// end ends a destruction: counts it (failed if err), logs err, frees the
// permit, and last counts it in b, so a batch's waiter finds its permits free.
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
