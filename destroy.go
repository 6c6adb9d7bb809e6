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
// ends. Whoever lets an item go hands it with its permit to later (or
// taken) and returns at once; run frees the permit (or hands it on, as the
// right to create) as the destruction ends. Each destruction is counted
// once, by reason. gate.dying counts those not ended: Stats.Destroying,
// and what Close waits for.
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

// later destroys e, whose permit the caller holds, for why, without waiting
// (run, end). From this call on, e is no lease and no leak.
func (d *destroyer[T]) later(e *entry[T], why reason, b *destroyBatch) {
	d.g.toDestroy()
	d.taken(e, why, b)
}

// taken is later for an item the gate has counted as dying already.
func (d *destroyer[T]) taken(e *entry[T], why reason, b *destroyBatch) {
	d.ob.forget(e)
	go d.run(e, why, b)
}

// destroyBatch: destructions someone waits for, all known when they start:
// Close's and New's after a failed seeding, which return the errors, and
// Clear's, which its refill waits for.
type destroyBatch struct {
	mu      sync.Mutex
	pending int           // Destroy calls not ended yet
	errs    []error       // complete once done is closed
	done    chan struct{} // closed when pending reaches 0
}

// batch destroys es as taken does, as one batch.
func (d *destroyer[T]) batch(es []*entry[T], why reason) *destroyBatch {
	b := &destroyBatch{pending: len(es), done: make(chan struct{})}
	if len(es) == 0 {
		close(b.done)
	}
	for _, e := range es {
		d.taken(e, why, b)
	}
	return b
}

// ended counts one Destroy of the batch ended, with its error.
func (b *destroyBatch) ended(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.errs = append(b.errs, err)
	}
	b.pending--
	if b.pending == 0 {
		close(b.done)
	}
}

// all destroys the items the gate took out, as taken does, and returns the
// joined errors (a panic's with its stack) once each Destroy returned or timed
// out; if ctx ends first, werr is ctx.Err() and they go on (errors logged).
func (d *destroyer[T]) all(ctx context.Context, es []*entry[T], why reason) (err, werr error) {
	b := d.batch(es, why)
	if werr = awaitOr(ctx, b.done); werr != nil {
		return nil, werr
	}
	return errors.Join(b.errs...), nil
}

// run calls Destroy on e and ends the destruction (end) at its return,
// panic or Goexit, or at DestroyTimeout first, leaving Destroy to finish.
func (d *destroyer[T]) run(e *entry[T], why reason, b *destroyBatch) {
	var ended atomic.Bool // by Destroy's end or the timeout, whichever is first
	if d.timeout > 0 {
		t := time.AfterFunc(d.timeout, func() {
			if !ended.Swap(true) {
				d.end(why, fmt.Errorf("%w (%v); its place under MaxSize is free again", errDestroyTimeout, d.timeout), b)
			}
		})
		defer t.Stop()
	}
	err := errDestroyGoexit // until Destroy returns: what a Goexit leaves
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic in Destroy: %w", newPanicError(v))
		}
		if !ended.Swap(true) {
			d.end(why, err, b)
		}
	}()
	err = d.destroy(e.value)
}

// The errors of a Destroy that called runtime.Goexit or outlasted DestroyTimeout.
var (
	errDestroyGoexit  = errors.New("runtime.Goexit in Destroy")
	errDestroyTimeout = errors.New("no return from Destroy within DestroyTimeout")
)

// end ends a destruction: counts it (failed if err), logs err, frees the
// permit, and last counts it in b, so a batch's waiter finds its permits free.
func (d *destroyer[T]) end(why reason, err error, b *destroyBatch) {
	d.ob.destroyed(why, err != nil)
	if err != nil {
		err = fmt.Errorf("pool %q: destroy item: %w", d.name, err)
		d.ob.warn("destroy item", err)
	}
	d.g.destroyed()
	if b != nil {
		b.ended(err)
	}
}
