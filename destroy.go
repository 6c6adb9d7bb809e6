package pool

import (
	"errors"
	"fmt"
)

// Destroying items.
//
// The invariant: an item counts against MaxSize until its destruction
// ends. Whoever destroys an item holds its permit throughout, and frees it
// (or hands it on, as the right to create a fresh item) only once Destroy
// has returned, panicked or called runtime.Goexit. Every destruction is
// counted exactly once, by reason, however Destroy ends.
//
// One verb, two choices, spelled in the name:
//
//	                     the error returned     the error logged
//	the room stays held  destroy                destroyLogged
//	the room is freed    destroyAndFree         destroyAndFreeLogged
//
// A caller that has somebody to return a Destroy error to (Close, Clear,
// a Lease that failed) returns it; one that has nobody (a Release, the
// upkeep, an abandoned creation) logs it through Options.Logger.

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
	numReasons
)

var reasonNames = [numReasons]string{"idle", "lifetime", "prepare", "reset", "discard", "clear", "close", "resize"}

// String returns the reason as pool.items.destroyed names it.
func (r reason) String() string { return reasonNames[r] }

// destroy disposes of an item, with Options.Destroy, and counts it, also
// when Destroy panics or calls runtime.Goexit, which count as failed
// Destroy calls. The caller keeps the item's permit.
func (p *Pool[T]) destroy(e *entry[T], why reason) (err error) {
	e.cleanup.Stop() // the entry is garbage from now on, not a leak
	p.reg.remove(e)
	returned := false
	defer func() { p.countDestroyed(why, !returned || err != nil) }()
	err = p.opts.Destroy(e.value)
	returned = true
	if err != nil {
		return fmt.Errorf("pool %q: destroy item: %w", p.opts.Name, err)
	}
	return nil
}

// destroyAndFree destroys an item whose permit the caller holds, then frees
// the permit.
func (p *Pool[T]) destroyAndFree(e *entry[T], why reason) error {
	defer p.g.free()
	return p.destroy(e, why)
}

// destroyLogged is destroy for a caller that has nobody to return a
// Destroy error to: the error is logged.
func (p *Pool[T]) destroyLogged(e *entry[T], why reason) {
	if err := p.destroy(e, why); err != nil {
		p.warn("destroy item", err)
	}
}

// destroyAndFreeLogged is destroyAndFree for a caller that has nobody to
// return a Destroy error to: the error is logged.
func (p *Pool[T]) destroyAndFreeLogged(e *entry[T], why reason) {
	if err := p.destroyAndFree(e, why); err != nil {
		p.warn("destroy item", err)
	}
}

// quietly runs f, which may destroy an item, for a caller with nobody to
// raise a Destroy panic to: the panic is logged instead, and the item
// counts as destroyed all the same (destroy counts it either way).
func (p *Pool[T]) quietly(f func()) {
	defer func() {
		if v := recover(); v != nil {
			p.warn("destroy item", fmt.Errorf("pool %q: destroy item: Destroy panicked: %w", p.opts.Name, asError(newPanicError(v))))
		}
	}()
	f()
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

// destroyAll destroys items whose permits the caller holds and frees the
// permits. Every item is destroyed whatever a Destroy does: errors are
// joined into the result; the first panic is raised again, with its stack,
// once the rest are destroyed; a runtime.Goexit (t.FailNow in a test's
// Destroy) ends the calling goroutine, as Goexit must, but only after the
// rest are destroyed, by the deferred call that Goexit runs on its way out.
func (p *Pool[T]) destroyAll(es []*entry[T], why reason) error {
	b := destroyBatch[T]{p: p, es: es, why: why, free: true}
	b.run()
	if b.panicked != nil {
		panic(b.panicked)
	}
	return errors.Join(b.errs...)
}

// destroyBatch is the state of a destroyAll, kept where a deferred call
// can finish it.
type destroyBatch[T any] struct {
	p    *Pool[T]
	es   []*entry[T] // not destroyed yet
	whys []reason    // why each of es is destroyed, when they differ; else why
	why  reason
	free bool // free each item's permit right after its destroy; else the caller frees them

	errs     []error
	panicked *panicError // the first Destroy panic
}

func (b *destroyBatch[T]) run() {
	for len(b.es) > 0 {
		e, why := b.es[0], b.why
		b.es = b.es[1:]
		if len(b.whys) > 0 {
			why, b.whys = b.whys[0], b.whys[1:]
		}
		b.destroy(e, why)
	}
}

func (b *destroyBatch[T]) destroy(e *entry[T], why reason) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			if b.panicked == nil {
				b.panicked = newPanicError(v)
			}
			return
		}
		// runtime.Goexit: the goroutine is ending, and this is the last
		// code of the batch that runs on it.
		b.run()
	}()
	var err error
	if b.free {
		err = b.p.destroyAndFree(e, why)
	} else {
		err = b.p.destroy(e, why)
	}
	if err != nil {
		b.errs = append(b.errs, err)
	}
	returned = true
}
