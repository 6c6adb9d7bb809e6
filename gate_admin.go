package pool

import "slices"

// The gate's administration: Clear, Close and SetMaxSize, the expiry
// sweep's and the upkeep's takes of idle entries, and the counts Stats and
// the scans read. Each runs in one critical section of the gate's; those
// that take entries out to destroy hand each with a permit to the caller,
// and count the batch in takenOut (see gate.takenOut).

// takeWhere removes from the idle ring, parked entries included, the
// entries for which drop reports true, each with a permit and marked
// busy (see holders.go), for the caller to destroy. drop sees, with each
// entry, the items in existence, less those it dropped before. See
// "Sweeping" in expiry.go.
func (g *gate[T]) takeWhere(drop func(e *entry[T], items int) bool) (es []*entry[T]) {
	g.lock()
	defer g.unlock()
	g.unparkLocked()
	n := g.held + g.idle.len()
	g.idle.filter(func(e *entry[T]) bool {
		if !drop(e, n) {
			return false
		}
		n--
		e.flipBusy() // on its way to Destroy: no lease (holders.go)
		es = append(es, e)
		return true
	})
	g.held += len(es)
	if len(es) > 0 {
		g.takenOut.Add(1)
	}
	return es
}

// takeIdleIf removes and returns the oldest idle entry for which want
// reports true, with a permit and marked busy (see holders.go), or nil when there
// is none.
func (g *gate[T]) takeIdleIf(want func(*entry[T]) bool) (e *entry[T]) {
	g.lock()
	defer g.unlock()
	g.unparkLocked()
	g.idle.filter(func(c *entry[T]) (drop bool) {
		if e == nil && want(c) {
			e = c
			return true
		}
		return false
	})
	if e != nil {
		g.held++
		e.flipBusy()
	}
	return e
}

// drainIdle removes every idle entry, queued or parked, with a permit for
// each (taken for the queued ones: possible without waiting, as held + idle
// <= size), so that the items count against the cap until the caller has
// destroyed them and returned the permits; and held, so that no scan takes
// one for a lease while it waits for its Destroy (see holders.go).
func (g *gate[T]) drainIdle() []*entry[T] {
	g.lock()
	defer g.unlock()
	return g.drainIdleLocked()
}

func (g *gate[T]) drainIdleLocked() []*entry[T] {
	var es []*entry[T]
	for e := g.idle.pop(); e != nil; e = g.idle.pop() {
		es = append(es, e)
	}
	g.held += len(es)
	for e := g.slots.steal(); e != nil; e = g.slots.steal() {
		es = append(es, e)
	}
	for _, e := range es {
		e.flipBusy() // on its way to Destroy: no lease (holders.go)
	}
	return es
}

// clear starts a new era, so that every entry created before it is
// retired when it comes back (see slots.era), and drains the idle entries
// as drainIdle does, for the caller to destroy.
func (g *gate[T]) clear() []*entry[T] {
	g.lock()
	defer g.unlock()
	g.slots.era.Add(1)
	es := g.drainIdleLocked()
	if len(es) > 0 {
		g.takenOut.Add(1)
	}
	return es
}

// close marks the gate closed, wakes every waiter with ErrClosed and
// drains the idle queue as drainIdle does. Only the first call returns
// entries; later calls report false.
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

// settle is a wait of Close or Shutdown for the closed gate to reach a
// state: at most creations turns to create taken, or, with creations
// negative, no permit held (the gate's full weight free).
type settle struct {
	creations int
	done      chan struct{}
}

// whenSettled returns a channel closed once the gate is closed and holds
// what s.creations asks (see settle).
func (g *gate[T]) whenSettled(creations int) <-chan struct{} {
	g.lock()
	defer g.unlock()
	s := settle{creations: creations}
	if g.closed && g.settled(s) {
		return closedChan
	}
	s.done = make(chan struct{})
	g.settles = append(g.settles, s)
	return s.done
}

func (g *gate[T]) settled(s settle) bool {
	if s.creations < 0 {
		return g.held == 0
	}
	return g.creating <= s.creations
}

// settleLocked ends the waits that hold now, after a permit or a turn came
// back. Caller holds g.mu.
func (g *gate[T]) settleLocked() {
	if !g.closed || len(g.settles) == 0 {
		return
	}
	g.settles = slices.DeleteFunc(g.settles, func(s settle) bool {
		if !g.settled(s) {
			return false
		}
		close(s.done)
		return true
	})
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// counts returns the permits held by leases (and creations and
// destructions), the idle entries (queued or parked), the queued waiters,
// the size, the permits of the items dying and the slots' sums, with fastLeases added to their leases. Parked entries
// come and go without the lock, so the split between leased and idle is a
// moment's estimate, but neither figure exceeds size, unless a shrink has
// not settled yet.
func (g *gate[T]) counts() (leased, idle, queued, size, creating, dying int, sums slotSums) {
	g.lock()
	defer g.unlock()
	sums = g.slots.scan()
	sums.parked = min(sums.parked, g.held) // an entry seen in two slots as it moved
	sums.leases += g.fastLeases
	return g.held - sums.parked, g.idle.len() + sums.parked, g.waiters.n, g.size, g.creating, g.dying, sums
}

// idleEntries appends every idle entry, queued or parked, to buf, for the
// scans of holders.go. It holds the lock for that copy and nothing more:
// buf grows outside it. Parked entries come and go without the lock (see
// ring.go), so it reads the slots with bypass on, turning it on if it was
// off and off again after, under the lock: only the fast path sees it
// change. holders.go, "Which entries are out", says why its scans need that.
func (g *gate[T]) idleEntries(buf []*entry[T]) []*entry[T] {
	for {
		g.lock()
		if need := len(buf) + g.idle.len() + len(g.slots.s); cap(buf) < need {
			g.unlock()
			buf = slices.Grow(buf, need-len(buf))
			continue
		}
		for i := range g.idle.n {
			buf = append(buf, g.idle.buf[(g.idle.head+i)&(len(g.idle.buf)-1)])
		}
		bypassed := g.slots.bypass.Load()
		if !bypassed {
			g.slots.bypass.Store(true)
		}
		for i := range g.slots.s {
			if e := g.slots.s[i].e.Load(); e != nil {
				buf = append(buf, e)
			}
			if testHooks.slotRead != nil {
				testHooks.slotRead(i)
			}
		}
		if !bypassed {
			g.slots.bypass.Store(false)
		}
		g.unlock()
		return buf
	}
}

// items returns the items in existence as the gate counts them: permits
// held (leased, parked, being created, checked or destroyed) plus idle.
func (g *gate[T]) items() int {
	g.lock()
	defer g.unlock()
	return g.held + g.idle.len()
}

// maxSize returns the gate's size now.
func (g *gate[T]) maxSize() int {
	g.lock()
	defer g.unlock()
	return g.size
}

// queueAndSize returns the waiters queued now, the gate's size, the turns
// to create taken and the items dying.
func (g *gate[T]) queueAndSize() (queued, size, creating, dying int) {
	g.lock()
	defer g.unlock()
	return g.waiters.n, g.size, g.creating, g.dying
}

// isClosed reports whether close has run.
func (g *gate[T]) isClosed() bool {
	g.lock()
	defer g.unlock()
	return g.closed
}

// resize sets the gate's size to n. Growing grants the queued waiters, in
// FIFO order, the right to create an item as far as the new size goes.
// Shrinking below the items in existence (held + idle) takes idle items out
// to destroy, each with a permit, as many as the excess and idle items
// allow; the caller destroys them and frees their permits. The rest
// of the excess is leased: shrinking stays set, so the slots are bypassed,
// giveBack refuses an item (its holder destroys it) and a bare permit retires
// instead of reaching a waiter, until held + idle fits. It returns ErrClosed
// on a closed gate.
func (g *gate[T]) resize(n int) (excess []*entry[T], err error) {
	g.lock()
	defer g.unlock()
	if g.closed {
		return nil, ErrClosed
	}
	g.size = n
	g.grantTurnsLocked()
	over := g.alive() - g.size
	if g.setBypass() {
		// Parked entries hold permits of their own; those not to destroy
		// join the idle queue, as bypass requires.
		for e := g.slots.steal(); e != nil; e = g.slots.steal() {
			if over > 0 {
				e.flipBusy() // on its way to Destroy: no lease (holders.go)
				excess = append(excess, e)
				over--
			} else {
				g.giveBackLocked(e)
			}
		}
	}
	for ; over > 0; over-- {
		e := g.idle.pop()
		if e == nil {
			break // the rest of the excess is leased
		}
		g.held++
		e.flipBusy()
		excess = append(excess, e)
	}
	if len(excess) > 0 {
		g.takenOut.Add(1)
	}
	return excess, nil
}
