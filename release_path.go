package pool

import (
	"fmt"
	"runtime"
)

// The way back: what Release, Discard and Detach do with the item once the
// lease has ended (lease.go).
//
// The invariant: whoever ended a lease owns the item and its permit until
// it hands both on, exactly once: it parks the item in a slot, gives it to
// the gate (to the oldest waiter, or the idle queue), or destroys or
// detaches it and frees the permit. Before the item goes anywhere, the end
// of the lease is accounted for (leaseEnded), once.

// release takes back the item of a lease that Release ended. The fast path
// parks it as it is; whatever else a pool does on release (Reset, the
// clock, a retired item) is out of line.
func (p *Pool[T]) release(e *entry[T]) {
	if p.retired(e) {
		p.releaseRetired(e)
		return
	}
	switch p.route.release {
	case releaseParks:
	case releaseAccounts:
		if e.atEnd.Load() != 0 {
			p.leaseEnded(e)
		}
	case releaseSlowly:
		p.releaseSlow(e)
		return
	default:
		p.releaseTraced(e)
		return
	}
	// slots.park, written out as take is in lease: a call less on the
	// fast path (docs/DESIGN.md, "Take and park, written out").
	if r := &p.g.slots; !r.bypass.Load() {
		s := &r.s[procPin()&r.mask]
		procUnpin()
		if s.e.CompareAndSwap(nil, e) && r.confirm(s, e) {
			return
		}
	}
	p.giveBackToGate(e)
}

// releaseTraced is release with a Tracer, which sees the end once the item
// is given back (also when Reset or Destroy panics).
func (p *Pool[T]) releaseTraced(e *entry[T]) {
	defer p.released(p.endTrace(e), "release")
	p.releaseSlow(e)
}

// releaseSlow is release in a pool with Reset, or one that stamps
// releases: it accounts for the lease's end, runs Reset, and then sweeps
// when a sweep is due, judges the item's lifetime and stamps its release.
func (p *Pool[T]) releaseSlow(e *entry[T]) {
	if e.atEnd.Load() != 0 {
		p.leaseEnded(e) // the lease ended with Release, before Reset
	}
	if p.opts.Reset != nil && !p.reset(e) {
		return
	}
	if !p.route.stamped {
		p.giveBack(e)
		return
	}
	now := p.now()
	if p.claimSweep(now) {
		p.destroyExpired(now)
	}
	p.releaseAt(e, now)
}

// leaseEnded accounts for the end of a lease of e (Release, Discard or
// Detach, gen having moved on): it records a sampled lease's use_time
// (metrics.go) and logs the end of a lease reported as held (watcher.go).
// The holder calls it once per lease, before the item goes anywhere.
func (p *Pool[T]) leaseEnded(e *entry[T]) {
	w := e.atEnd.Load()
	if w&atEndSampled != 0 {
		p.recordUse(e)
	}
	if w&atEndReported != 0 {
		e.atEnd.And(^uint32(atEndReported))
		gen := e.gen.Load() - 1
		at, _ := e.rec.startOf(gen)
		p.reportedEnded(e, gen, at)
	}
}

// releaseRetired destroys the item of a lease that Release ended, when the
// item was created before the last Clear.
func (p *Pool[T]) releaseRetired(e *entry[T]) {
	defer p.released(p.endTrace(e), "release")
	p.leaseEnded(e)
	p.destroyLater(e, reasonClear, nil)
}

// discard destroys the item of a lease that Discard ended.
func (p *Pool[T]) discard(e *entry[T]) {
	defer p.released(p.endTrace(e), "discard")
	p.leaseEnded(e)
	p.destroyLater(e, reasonDiscard, nil)
}

// detach takes the item of a lease that Detach ended out of the pool.
// Released runs before the item leaves: when it panics or calls
// runtime.Goexit, Detach never returns the item, so the pool, which still
// holds it and its permit, destroys it instead.
func (p *Pool[T]) detach(e *entry[T]) T {
	p.leaseEnded(e)
	e.cleanup.Stop() // the entry is garbage from now on, not a leak
	p.reg.remove(e)
	if t := p.endTrace(e); t.ctx != nil {
		p.releasedOrDestroy(e, t)
	}
	v := e.value
	p.c.mu.Lock()
	p.c.detached++
	p.c.mu.Unlock()
	p.g.free()
	return v
}

// releasedOrDestroy reports the end of a traced Detach; when Released
// panics or calls runtime.Goexit, it destroys e, whose permit the caller
// holds, as a discarded item, and the panic goes on.
func (p *Pool[T]) releasedOrDestroy(e *entry[T], t tracedEnd) {
	returned := false
	defer func() {
		if !returned {
			p.destroyLater(e, reasonDiscard, nil)
		}
	}()
	p.released(t, "detach")
	returned = true
}

// reset runs Options.Reset; when it fails (the error is logged: Release
// has no caller to return it to), panics or calls runtime.Goexit, the item
// is destroyed and its permit freed, and reset reports false (or the panic
// goes on).
func (p *Pool[T]) reset(e *entry[T]) (ok bool) {
	defer func() {
		if !ok {
			p.destroyLater(e, reasonReset, nil)
		}
	}()
	if err := p.opts.Reset(e.value); err != nil {
		p.warn("reset item; destroying it", fmt.Errorf("pool %q: reset item: %w", p.opts.Name, err))
		return false
	}
	return true
}

// releaseAt destroys e when it is past its lifetime at now, else stamps it
// released at now and gives it back.
func (p *Pool[T]) releaseAt(e *entry[T], now int64) {
	if now > e.deadline {
		p.destroyLater(e, reasonLifetime, nil)
		return
	}
	e.idleAt = now
	p.giveBack(e)
}

// giveBack makes e idle, an item whose permit the caller holds: in this
// processor's slot, with its permit, when nobody waits (ring.go, "park");
// else through the gate. An item that a Clear has retired meanwhile is
// destroyed instead.
func (p *Pool[T]) giveBack(e *entry[T]) {
	if p.retired(e) {
		p.destroyLater(e, reasonClear, nil)
		return
	}
	if !p.g.slots.park(e) {
		p.giveBackToGate(e)
	}
}

// giveBackToGate is giveBack without the slot: the item goes to the oldest
// waiter or the idle queue, where the sweep and the upkeep see it; after a
// hand-off to a waiter it yields the processor to it. On a
// closed pool, or one that holds more items than MaxSize after a shrink,
// it destroys the item.
func (p *Pool[T]) giveBackToGate(e *entry[T]) {
	if p.retired(e) {
		p.destroyLater(e, reasonClear, nil)
		return
	}
	accepted, handed := p.g.giveBack(e)
	switch {
	case !accepted:
		p.destroyLater(e, p.refusedWhy(), nil)
	case handed:
		// The woken lease runs now, rather than when this goroutine next
		// blocks or is preempted (doc.go, "Waiting and errors").
		runtime.Gosched()
	}
}

// refusedWhy is why the gate refused an item: the pool closed, or it holds
// more items than MaxSize after SetMaxSize shrank it.
func (p *Pool[T]) refusedWhy() reason {
	if p.g.isClosed() {
		return reasonClose
	}
	return reasonResize
}
