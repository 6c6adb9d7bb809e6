package pool

import "fmt"

// Whoever ended a lease owns its item and permit until it hands both on,
// once: to a slot, to the gate, or to Destroy; Detach frees the permit.
// Before that, the lease's end is accounted for (leaseEnded), once.

// release takes back a Released item. The fast path accounts for the
// lease's end (entry.atEnd) and parks the item as it is; the rest
// (slowRelease) is out of line, and so are retired items.
func (p *Pool[T]) release(e *entry[T]) {
	if p.slowRelease {
		p.releaseSlow(e)
		return
	}
	if e.atEnd.Load() != 0 { // a use_time sample, or a report of a held lease
		p.ob.leaseEnded(e)
	}
	if p.g.retired(e) {
		p.end(e, reasonClear, "release")
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

// releaseSlow is release with Reset, MaxUses, a Tracer or stamped releases;
// the Tracer sees the end once the item is back (even if Reset or Destroy panics).
func (p *Pool[T]) releaseSlow(e *entry[T]) {
	if p.g.retired(e) {
		p.end(e, reasonClear, "release")
		return
	}
	defer p.ob.released(p.ob.endTrace(e), "release")
	p.ob.leaseEnded(e) // the lease ended with Release, before Reset
	if p.opts.MaxUses > 0 && e.gen.Load() >= uint64(p.opts.MaxUses) {
		p.ds.later(e, reasonUses, nil) // its MaxUses-th lease: gen counts the ended leases
		return
	}
	if p.opts.Reset != nil && !p.reset(e) {
		return
	}
	if p.opts.stamps() {
		now := p.clk.now()
		p.ex.sweepIfDue(now)
		if now > e.deadline {
			p.ds.later(e, reasonLifetime, nil)
			return
		}
		e.idleAt = now
	}
	p.giveBack(e)
}

// end destroys the item of a lease that ended for why (a Discard, or a
// Release of an item a Clear retired), telling the Tracer how.
func (p *Pool[T]) end(e *entry[T], why reason, how string) {
	defer p.ob.released(p.ob.endTrace(e), how)
	p.ob.leaseEnded(e)
	p.ds.later(e, why, nil)
}

// detach takes e out of the pool. If Released panics or calls Goexit first,
// the pool, still holding e and its permit, destroys it.
func (p *Pool[T]) detach(e *entry[T]) T {
	p.ob.leaseEnded(e)
	p.ob.forget(e) // the entry is garbage from now on, not a leak
	reported := false
	defer func() {
		if !reported {
			p.ds.later(e, reasonDiscard, nil)
		}
	}()
	p.ob.released(p.ob.endTrace(e), "detach")
	reported = true
	p.ob.detached()
	p.g.free()
	return e.value
}

// reset runs Options.Reset. When Reset fails (logged: Release returns no
// error), panics or calls Goexit, the item is destroyed, freeing its permit.
func (p *Pool[T]) reset(e *entry[T]) (ok bool) {
	defer func() {
		if !ok {
			p.ds.later(e, reasonReset, nil)
		}
	}()
	if err := p.opts.Reset(e.value); err != nil {
		p.ob.warn("reset item; destroying it", fmt.Errorf("pool %q: reset item: %w", p.opts.Name, err))
		return false
	}
	return true
}

// giveBack makes e, whose permit the caller holds, idle: in this processor's
// slot when nobody waits, else through the gate, which destroys it if retired.
func (p *Pool[T]) giveBack(e *entry[T]) {
	if p.g.retired(e) || !p.g.slots.park(e) {
		p.giveBackToGate(e)
	}
}

// giveBackToGate gives e back through the gate (gate.giveBack), destroying it
// if retired or refused. A hand-off does not yield: the woken lease runs when
// this goroutine next blocks, ends or comes back to the gate (gate.stepAside).
func (p *Pool[T]) giveBackToGate(e *entry[T]) {
	switch {
	case p.g.retired(e):
		p.ds.later(e, reasonClear, nil)
	case !p.g.giveBack(e):
		p.ds.later(e, p.g.refusedWhy(), nil)
	}
}
