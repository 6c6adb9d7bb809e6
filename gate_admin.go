package pool

import "slices"

// The gate's administration, each in one critical section: Clear, Close,
// SetMaxSize, the sweep's and upkeep's takes, Close's and Shutdown's waits,
// Stats' counts. Entries taken out to destroy carry a dying permit
// (gate.dying), so Close's wait sees them before their Destroy calls start.

// takeWhere removes the idle entries, parked ones included, that drop
// reports true for, given each entry and the items in existence less those
// dropped before ("Sweeping" in expiry.go).
func (g *gate[T]) takeWhere(drop func(e *entry[T], items int) bool) (es []*entry[T]) {
	g.lock()
	defer g.unlock()
	g.unparkLocked()
	n := g.held + len(g.idle)
	g.idle = slices.DeleteFunc(g.idle, func(e *entry[T]) bool {
		if !drop(e, n) {
			return false
		}
		n--
		es = append(es, e)
		return true
	})
	g.held += len(es)
	g.dying += len(es)
	return es
}

// takeIdleIf takes, with a permit, the oldest idle entry want accepts, or nil.
func (g *gate[T]) takeIdleIf(want func(*entry[T]) bool) *entry[T] {
	g.lock()
	defer g.unlock()
	g.unparkLocked()
	i := slices.IndexFunc(g.idle, want)
	if i < 0 {
		return nil
	}
	e := g.idle[i]
	g.idle = slices.Delete(g.idle, i, i+1)
	g.held++
	return e
}

// drainIdleLocked removes every idle entry, queued or parked, with a dying
// permit each, so they count against the cap until destroyed; a queued one's
// permit is free to take, as held + idle <= size. Caller holds g.mu.
func (g *gate[T]) drainIdleLocked() []*entry[T] {
	g.unparkLocked()
	es := g.idle.popOldest(nil, len(g.idle))
	g.held += len(es)
	g.dying += len(es)
	return es
}

// clear starts a new era, retiring every entry created before it as it comes
// back (see slots.era), and drains the idle entries (drainIdleLocked).
func (g *gate[T]) clear() []*entry[T] {
	g.lock()
	defer g.unlock()
	g.slots.era.Add(1)
	return g.drainIdleLocked()
}

// close marks the gate closed, wakes every waiter with ErrClosed and drains
// the idle entries (drainIdleLocked); calls after the first report false.
func (g *gate[T]) close() ([]*entry[T], bool) {
	g.lock()
	defer g.unlock()
	if g.closed {
		return nil, false
	}
	g.closed = true
	g.setBypass() // before the drain: see ring.go, bypass
	for g.grantOldest(nil, ErrClosed) {
	}
	return g.drainIdleLocked(), true
}

// settle is a wait of Close or Shutdown until the closed gate has at most
// creations turns taken and dying items on their way to Destroy, or, with
// all, no permit held.
type settle struct {
	creations, dying int
	all              bool
	done             chan struct{}
}

// whenSettled returns a channel closed once the gate is closed and holds
// what s asks.
func (g *gate[T]) whenSettled(s settle) <-chan struct{} {
	g.lock()
	defer g.unlock()
	s.done = make(chan struct{})
	g.settles = append(g.settles, s)
	g.settleLocked()
	return s.done
}

// settleLocked ends the waits that hold now, after a permit or a turn came
// back: no permit held holds them all, as creations and the dying hold one
// each. Caller holds g.mu.
func (g *gate[T]) settleLocked() {
	if !g.closed || len(g.settles) == 0 {
		return
	}
	g.settles = slices.DeleteFunc(g.settles, func(s settle) bool {
		settled := g.held == 0 || !s.all && g.creating <= s.creations && g.dying <= s.dying
		if settled {
			close(s.done)
		}
		return settled
	})
}

// counts returns the permits held less the parked, the idle (queued or
// parked), the waiters, size, creating, dying and the slots' sums with
// fastLeases added. Parked entries move without the lock, so the leased/idle
// split is a moment's estimate, each within size unless a shrink has not settled.
func (g *gate[T]) counts() (leased, idle, queued, size, creating, dying int, sums slotSums) {
	g.lock()
	defer g.unlock()
	sums = g.slots.scan()
	sums.parked = min(sums.parked, g.held) // an entry seen in two slots as it moved
	sums.leases += g.fastLeases
	return g.held - sums.parked, len(g.idle) + sums.parked, g.waiters.n, g.size, g.creating, g.dying, sums
}

// items returns the items in existence as the gate counts them: held plus idle.
func (g *gate[T]) items() int {
	g.lock()
	defer g.unlock()
	return g.held + len(g.idle)
}

// resize sets the size to n, with the refusals that name it, or returns
// ErrClosed. Growing grants waiters, oldest first, bare permits as far as n
// allows. Shrinking below the items alive takes out idle items, up to the
// excess, with dying permits for the caller to destroy; for the leased rest
// the gate stays shrinking (slots bypassed, giveBack refusing, freed permits
// retiring) until held + idle fits.
func (g *gate[T]) resize(n int, refusals *exhaustedErrs) (excess []*entry[T], err error) {
	g.lock()
	defer g.unlock()
	if g.closed {
		return nil, ErrClosed
	}
	g.size = n
	g.refusals.Store(refusals) // made by the caller: nothing allocates under the lock
	g.grantTurnsLocked()
	if g.setBypass() {
		g.unparkLocked() // nobody waits: parked entries join the idle queue
	}
	excess = g.idle.popOldest(nil, g.alive()-g.size) // the rest of the excess is leased
	g.held += len(excess)
	g.dying += len(excess)
	return excess, nil
}
