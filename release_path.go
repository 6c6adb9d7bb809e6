package pool

import "fmt"

// Whoever ended a lease owns its item and permit until it hands both on,
// once: to a slot, to the gate, or to Destroy; Detach frees the permit.
// Before that, the lease's end is accounted for (leaseEnded), once.

// release takes back a Released item. The fast path parks it as it is;
// Reset, the clock and retired items are out of line.
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
	// slots.park, written out: docs/DESIGN.md, "Take and park, written out".
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

// releaseSlow is release in a pool with Reset or MaxUses, or one that
// stamps releases.
func (p *Pool[T]) releaseSlow(e *entry[T]) {
	if e.atEnd.Load() != 0 {
		p.leaseEnded(e) // the lease ended with Release, before Reset
	}
	if p.usedUp(e) {
		p.destroyLater(e, reasonUses, nil)
		return
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

// leaseEnded accounts, once and before the item goes anywhere, for the end
// of e's lease (gen has moved on): a sampled use_time, a reported holder.
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

// releaseRetired destroys a Released item that a Clear retired.
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

// detach takes e out of the pool. Released runs first: if it panics or
// calls runtime.Goexit, Detach never returns the item, so the pool, still
// holding it and its permit, destroys it.
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

// releasedOrDestroy reports a traced Detach's end; if Released panics or
// calls Goexit, it destroys e, whose permit the caller holds.
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

// reset runs Options.Reset. When Reset fails (logged: Release returns no
// error), panics or calls Goexit, the item is destroyed, freeing its permit.
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

// releaseAt destroys e past its lifetime, else gives it back idle since now.
func (p *Pool[T]) releaseAt(e *entry[T], now int64) {
	if now > e.deadline {
		p.destroyLater(e, reasonLifetime, nil)
		return
	}
	e.idleAt = now
	p.giveBack(e)
}

// giveBack makes e, whose permit the caller holds, idle: in this processor's
// slot when nobody waits, else through the gate; if retired, it destroys e.
func (p *Pool[T]) giveBack(e *entry[T]) {
	if p.retired(e) {
		p.destroyLater(e, reasonClear, nil)
		return
	}
	if !p.g.slots.park(e) {
		p.giveBackToGate(e)
	}
}

// giveBackToGate hands e to the oldest waiter, or to the idle queue; a
// closed pool, or one over MaxSize after a shrink, destroys it. A hand-off
// does not yield: the woken lease runs when this goroutine next blocks,
// ends or comes back to the gate (gate.stepAside).
func (p *Pool[T]) giveBackToGate(e *entry[T]) {
	if p.retired(e) {
		p.destroyLater(e, reasonClear, nil)
		return
	}
	if !p.g.giveBack(e) {
		p.destroyLater(e, p.refusedWhy(), nil)
	}
}

// refusedWhy is why the gate refused an item: Close, or a SetMaxSize shrink.
func (p *Pool[T]) refusedWhy() reason {
	if p.g.isClosed() {
		return reasonClose
	}
	return reasonResize
}

// usedUp reports whether e's lease, just ended, was its MaxUses-th: gen
// counts the ended leases.
func (p *Pool[T]) usedUp(e *entry[T]) bool {
	return p.opts.MaxUses > 0 && e.gen.Load() >= uint64(p.opts.MaxUses)
}
