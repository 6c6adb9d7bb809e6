package pool

import (
	"context"
	"sync"
	"time"
)

// gate is the capacity gate: a weighted semaphore of size MaxSize with a
// FIFO queue of waiters and direct hand-off, sharing one mutex with the idle
// queue. The per-processor slots of the idle ring sit in front of it (see
// ring.go): a lease or release that hits its slot never reaches the gate.
//
// A permit is the right to hold one item outside the idle queue: a leased
// item, one being created or destroyed, or one parked in a slot. Items in
// the idle queue hold none. A lease takes its permit before it touches the
// idle queue, in the same critical section, and creates an item only when
// none is idle; so held + idle never exceeds size, and that sum bounds the
// items in existence.
//
// One mutex over count, waiters and idle items: a release must decide
// "oldest waiter, or idle queue?" and act on it atomically, or a waiter can
// wake to nothing and a lease can overtake the queue (docs/DESIGN.md, "Why
// one mutex").
//
// Hand-off: when waiters are queued no permit is ever free; a release gives
// its item (or, for an item it destroyed, the bare permit: the right to
// create a fresh one) straight to the oldest waiter, keeping the permit
// held. So a woken waiter never wakes to nothing, and nobody can take a
// permit past the queue.
//
// The gate's critical sections, and the wake-ups that follow them, run with
// the goroutine kept on its processor (preemptOff, through lock and
// unlock), as the runtime's own channel locks do: a goroutine preempted
// there holds up every lease behind it (docs/DESIGN.md, "Not preempted
// while holding the lock"). Nothing done there may block: acquire calls
// the ctx's Err and sync.Pool preemptible.
type gate[T any] struct {
	slots slots[T] // the idle ring's per-processor slots: see ring.go

	mu        sync.Mutex
	size      int // MaxSize; changed by resize
	maxQueued int // MaxQueuedLeases; 0: no limit
	held      int // permits held, including those of entries parked in slots
	closed    bool
	// shrinking: resize made size smaller than the items alive (held but
	// dying, plus idle), and the items that come back are destroyed and
	// the permits that come back retire until they fit (see resize).
	shrinking bool
	// dying counts the permits held by items on their way to their
	// Destroy (toDestroy, destroyed): they count against size, as every
	// item does until its Destroy returns, but a shrink need not shed them
	// again. Stats.Destroying.
	dying int
	idle  idleQueue[T]
	// fastLeases counts the leases that acquire completed: here, under
	// the lock already held, rather than on a cache line of their own
	// (docs/DESIGN.md, "Stats without a second truth").
	fastLeases uint64
	waiters    waitQueue[T]
	drained    chan struct{} // made by the first Shutdown; closed when closed and held == 0
	spare      sync.Pool     // of *waiter[T], for reuse
	// woken lists the waiters granted under the lock, linked by wakeNext,
	// for unlock to wake once the lock is released.
	woken *waiter[T]
	// takenOut counts the batches of idle entries that clear, resize and
	// takeWhere took out to destroy, until their taker has handed them
	// to their Destroy: added to under mu, before close, which leaves no
	// idle entry to take, so Close's Wait sees every batch.
	takenOut sync.WaitGroup
}

// waiter is one lease queued for a permit. Waiters are recycled through
// spare, so a contended lease allocates nothing once warm.
type waiter[T any] struct {
	// ready receives exactly one token per grant, sent by gate.unlock
	// right after the lock that granted it is released.
	ready chan struct{}
	// The grant, written under gate.mu before the token is sent: the handed
	// item, or nil for the bare permit; or err (ErrClosed) and no permit.
	e       *entry[T]
	err     error
	granted bool

	prev, next *waiter[T]
	wakeNext   *waiter[T]  // in gate.woken, between the grant and the wake-up
	timer      *time.Timer // LeaseTimeout; made on first use, kept with the waiter
}

// waitQueue is an intrusive FIFO list of waiters. Guarded by gate.mu.
//
// The waiters queued again (pushAhead) form a run at its head, in the
// order they came back: ahead is the last of that run, nil when there is
// none. pushBack adds at the tail, pushAhead at the end of the run, and
// remove keeps the run unbroken at the head.
type waitQueue[T any] struct {
	head, tail *waiter[T]
	ahead      *waiter[T]
	n          int
}

func (q *waitQueue[T]) pushBack(w *waiter[T]) {
	w.prev, w.next = q.tail, nil
	if q.tail == nil {
		q.head = w
	} else {
		q.tail.next = w
	}
	q.tail = w
	q.n++
}

// pushAhead queues w ahead of every waiter but those queued ahead before
// it: at the end of the run at the head.
func (q *waitQueue[T]) pushAhead(w *waiter[T]) {
	w.prev = q.ahead
	if w.prev == nil {
		w.next, q.head = q.head, w
	} else {
		w.next, w.prev.next = w.prev.next, w
	}
	if w.next == nil {
		q.tail = w
	} else {
		w.next.prev = w
	}
	q.ahead = w
	q.n++
}

func (q *waitQueue[T]) remove(w *waiter[T]) {
	if w == q.ahead {
		q.ahead = w.prev // in the run too, or nil: the run is at the head
	}
	if w.prev == nil {
		q.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
	q.n--
}

// grantOldest removes the oldest waiter and grants it e (nil: the bare
// permit) or err. It reports false when no one waits. Caller holds g.mu and
// must release it with unlock, which wakes the waiter.
func (g *gate[T]) grantOldest(e *entry[T], err error) bool {
	w := g.waiters.head
	if w == nil {
		return false
	}
	g.waiters.remove(w)
	g.setBypass()
	w.e, w.err, w.granted = e, err, true
	w.wakeNext, g.woken = g.woken, w
	return true
}

// lock takes g.mu, and keeps the goroutine on its processor until unlock:
// see docs/DESIGN.md, "Not preempted while holding the lock".
func (g *gate[T]) lock() {
	g.mu.Lock()
	preemptOff()
}

// unlock releases g.mu, then wakes the waiters granted under it. Waking a
// goroutine makes it runnable, which takes the scheduler's locks; outside
// the critical section, that no longer holds up the other processor's
// leases and releases. The goroutine stays unpreemptible until the last
// wake-up is sent: preempted in between, it would keep a granted waiter
// asleep, holding its item, for as long as it sat in the run queue. A
// waiter that gives up between its grant and its wake-up sees granted set
// and waits for the token (see leave).
func (g *gate[T]) unlock() {
	w := g.woken
	g.woken = nil
	g.mu.Unlock()
	for w != nil {
		next := w.wakeNext
		w.wakeNext = nil
		w.ready <- struct{}{} // never blocks: cap 1, one grant per wait; w is not ours after
		w = next
	}
	preemptOn()
}

// admission is what acquire did with a lease.
type admission uint8

const (
	admitted         admission = iota // a permit, with an idle entry
	admitRetired                      // a permit, with an idle entry from before the last Clear, to destroy
	admitBare                         // a bare permit and no idle entry: the right to create one
	queued                            // no permit yet: the lease waits, in await
	refusedInUse                      // no permit free, and the caller would not wait
	refusedQueue                      // others wait already, and the caller would not wait behind them
	refusedClosed                     // the gate is closed
	refusedCanceled                   // the caller's ctx had ended before it could queue
	refusedQueueFull                  // maxQueued leases wait already
)

// refused reports whether a is a refusal: the lease fails.
func (a admission) refused() bool { return a > queued }

// waitChoice says whether a lease that finds no permit free waits for one,
// and where.
type waitChoice uint8

const (
	mayWait waitChoice = iota // Lease, Do: at the tail, within MaxQueuedLeases
	noWait                    // TryLease: not at all
	// waitAgain: a Lease whose idle item failed its judgement. Holding a
	// permit, it came before every lease that waits now (nobody takes a
	// permit past the queue), so it queues ahead of them, behind those
	// that queued again before it, and MaxQueuedLeases does not refuse it.
	waitAgain
)

// acquire takes a permit and the newest idle entry (admitted), or a bare
// permit when none is idle (admitBare), without waiting; completes says
// that an idle entry completes the lease, which acquire then counts in
// fastLeases. When no permit is free, or others already wait (the queue is
// FIFO: a newcomer never overtakes it), it queues the caller in the same
// critical section and returns its waiter, for await (queued); unless the
// caller would not wait, when the lease is refused, or maxQueued leases
// wait already (refusedQueueFull), or its ctx has ended (refusedCanceled).
// A lease that waits again queues ahead (pushAhead), whatever maxQueued.
// A closed gate refuses every lease.
func (g *gate[T]) acquire(ctx context.Context, wait waitChoice, completes bool) (e *entry[T], w *waiter[T], a admission) {
	g.lock()
	if g.closed {
		g.unlock()
		return nil, nil, refusedClosed
	}
	var ok bool
	if e, ok = g.acquireLocked(); ok || wait == noWait {
		switch {
		case !ok && g.waiters.n > 0:
			a = refusedQueue
		case !ok:
			a = refusedInUse
		case e == nil:
			a = admitBare
		case e.era != g.slots.era.Load():
			a = admitRetired
		default:
			a = admitted
			if completes {
				g.fastLeases++
			}
		}
		g.unlock()
		return e, nil, a
	}
	if g.maxQueued > 0 && g.waiters.n >= g.maxQueued && wait != waitAgain {
		g.unlock()
		return nil, nil, refusedQueueFull
	}
	// A Context's Err may take a lock, and so may sync.Pool's first Get
	// after a collection: calls that may block, which an unpreemptible
	// goroutine must not make. Still under g.mu, they run preemptible.
	preemptOn()
	if ctx.Err() != nil {
		g.mu.Unlock()
		return nil, nil, refusedCanceled // already given up: don't queue
	}
	w = g.newWaiter()
	preemptOff()
	if wait == waitAgain {
		g.waiters.pushAhead(w)
		g.queuedLocked()
	} else {
		g.enqueueLocked(w)
	}
	g.unlock()
	return nil, w, queued
}

// newWaiter returns a recycled waiter, or a new one. Caller holds g.mu,
// preemptible.
func (g *gate[T]) newWaiter() *waiter[T] {
	w, _ := g.spare.Get().(*waiter[T])
	if w == nil {
		w = &waiter[T]{ready: make(chan struct{}, 1)}
	}
	return w
}

// acquireLocked takes a permit with an idle entry, when nobody queues: the
// newest in the idle queue, else one parked in any slot (which brings its
// permit). With none idle it takes a bare permit, if one is free, and
// returns a nil entry: the caller creates the item. Caller holds g.mu.
func (g *gate[T]) acquireLocked() (e *entry[T], ok bool) {
	if g.waiters.n > 0 {
		return nil, false
	}
	if e = g.idle.popNewest(); e != nil {
		g.held++ // free: idle entries hold no permit, and held + idle <= size
		return e, true
	}
	if e = g.slots.steal(); e != nil {
		return e, true
	}
	if g.held < g.size {
		g.held++
		return nil, true
	}
	return nil, false
}

// setBypass turns the slots' bypass flag on when leases queue, the gate is
// closed or a shrink has not finished, and reports whether it came on: then
// the caller must steal every parked entry (see ring.go, bypass). Called
// under g.mu after every change to closed, to the waiters' count or, while
// shrinking, to the permits held.
//
// It never turns bypass off: bypassOff does, once an item goes idle, or
// its permit comes free, with nobody waiting, so that the leases still on
// their way into the queue (blocked on g.mu) are not overtaken by the fast
// path (docs/DESIGN.md, "The bypass protocol"). Bypass on longer than
// needed costs speed only.
func (g *gate[T]) setBypass() (cameOn bool) {
	g.shrinking = g.alive() > g.size
	if !g.bypassNeeded() || g.slots.bypass.Load() {
		return false // the common case: no write to the slots' header
	}
	g.slots.bypass.Store(true)
	return true
}

// alive returns the items in existence but those on their way to their
// Destroy. Caller holds g.mu.
func (g *gate[T]) alive() int { return g.held - g.dying + g.idle.len() }

// bypassNeeded reports whether the slots must be bypassed now. Caller holds
// g.mu.
func (g *gate[T]) bypassNeeded() bool {
	return g.closed || g.waiters.n > 0 || g.shrinking
}

// bypassOff turns the slots' bypass flag off when nothing needs it: called
// when an item went idle, or its permit came free, with nobody waiting, so
// the demand that queued leases has passed. Caller holds g.mu.
func (g *gate[T]) bypassOff() {
	if g.slots.bypass.Load() && !g.bypassNeeded() {
		g.slots.bypass.Store(false)
	}
}

// await waits, for w that acquire queued, until a permit is granted, ctx
// ends, timeout (if positive) elapses, or the gate closes. On success the
// caller holds a permit and, when e is not nil, the item that came with it.
// waited says for how long it waited, whatever the outcome, as Stats.Waits
// and WaitTime count it; expired, that the timeout, not ctx, ended the
// wait. On error e is nil but in one case (see giveUp): an item
// granted as the caller gave up, on a gate that closed meanwhile; the
// caller holds its permit and must destroy it.
//
// Giving up wins over a grant that arrives at the same instant: a waiter
// that finds its grant and its ended ctx (or elapsed timeout) both ready
// passes the grant on and returns the error, whichever case the select
// chose, as x/sync/semaphore does since go.dev/issue/63615. A caller whose
// ctx has ended must not walk away with an item.
func (g *gate[T]) await(ctx context.Context, w *waiter[T], timeout time.Duration) (e *entry[T], waited time.Duration, expired bool, err error) {
	start := monotime() // outside the lock: this clock is slow on some VMs
	timerC := w.arm(timeout)
	if testHooks.beforeWait != nil {
		testHooks.beforeWait()
	}
	granted, expired, err := w.wait(ctx, timerC)
	if testHooks.afterWait != nil {
		testHooks.afterWait()
	}
	w.disarm(expired)
	switch {
	case granted && err == nil:
		e, err = w.e, w.err // the grant: a permit, or Close's ErrClosed
	case granted:
		e, err, expired = g.giveUp(w, err, expired)
	default:
		if g.leave(w) { // granted after all, as we gave up
			e, err, expired = g.giveUp(w, err, expired)
		}
	}
	w.e, w.err, w.granted = nil, nil, false
	g.spare.Put(w)
	waited = time.Duration(monotime() - start)
	g.slots.countWait(int64(waited))
	return e, waited, expired, err
}

// arm sets w's timer to fire after timeout, when it is positive, and
// returns its channel; nil, when there is no timeout.
func (w *waiter[T]) arm(timeout time.Duration) <-chan time.Time {
	if timeout <= 0 {
		return nil
	}
	if w.timer == nil {
		w.timer = time.NewTimer(timeout)
	} else {
		w.timer.Reset(timeout)
	}
	return w.timer.C
}

// disarm stops w's timer after a wait. The timer fired and nobody received
// its tick when Stop fails and the wait did not expire. With Go 1.23's
// synchronous timer channels no stale tick survives Stop, but under
// GODEBUG=asynctimerchan=1 it would wait in the channel and end the next
// wait on this waiter at once: disarm drops that timer for a new one.
func (w *waiter[T]) disarm(expired bool) {
	if w.timer != nil && !w.timer.Stop() && !expired {
		w.timer = nil
	}
}

// wait blocks until w is granted, ctx ends or timerC fires, and says
// which: granted, or the error of giving up (ctx.Err(), or ErrLeaseTimeout
// with expired). When the grant and a way of giving up are ready at once,
// it reports both, and the caller gives up.
func (w *waiter[T]) wait(ctx context.Context, timerC <-chan time.Time) (granted, expired bool, err error) {
	done := ctx.Done()
	if done == nil && timerC == nil {
		// Only a grant (or Close) ends this wait: a plain receive costs
		// less than a select.
		<-w.ready
		return true, false, nil
	}
	select {
	case <-w.ready:
		select { // both ready? then giving up wins
		case <-done:
			return true, false, ctx.Err()
		case <-timerC:
			return true, true, ErrLeaseTimeout
		default:
			return true, false, nil
		}
	case <-done:
		return false, false, ctx.Err()
	case <-timerC:
		return false, true, ErrLeaseTimeout
	}
}

// testHooks, set by tests only, run in await: beforeWait after the timer
// is armed and before the wait, afterWait right after it. A test uses them
// to make a grant and a cancellation ready at the same instant, or to let
// the timer fire just after a grant. slotRead runs in idleEntries right
// after it read slot i, under the lock and unpreemptible: it must not
// block. A test uses it to move items between slots mid-copy.
var testHooks struct {
	beforeWait, afterWait func()
	slotRead              func(i int)
}

// leave takes a waiter that gave up (canceled or timed out) out of the
// queue, and reports whether a grant raced with the giving up. A grant
// happened before leave took the lock if and only if granted is set;
// otherwise removing the waiter under the lock makes every later grant
// skip it. When it reports true the grant is w's, token received, for the
// caller to give up with giveUp.
func (g *gate[T]) leave(w *waiter[T]) (granted bool) {
	g.lock()
	if !w.granted {
		g.waiters.remove(w)
		g.setBypass()
		g.unlock()
		return false
	}
	g.unlock()
	<-w.ready // the granter's unlock sends it, if it has not yet
	return true
}

// giveUp ends the wait of w, granted as it gave up with err (expired: by
// the timeout). A granted permit, with or without an item, is passed on,
// so it is never lost. When the grant was Close's ErrClosed, giveUp says
// so instead of err. When the gate closed between the grant and the
// passing on, the item cannot join the idle queue: giveUp returns it, with
// its permit still held, for the caller to destroy.
func (g *gate[T]) giveUp(w *waiter[T], err error, expired bool) (stranded *entry[T], _ error, _ bool) {
	if w.err != nil {
		return nil, ErrClosed, false // Close woke us at this instant: say so
	}
	if w.e == nil {
		g.free()
	} else if ok, _ := g.giveBack(w.e); !ok {
		return w.e, err, expired
	}
	return nil, err, expired
}

// enqueueLocked queues w. When w is the first waiter, the slots' bypass
// comes on and every parked entry goes to the waiters, w first: w may be
// granted at once. Caller holds g.mu.
func (g *gate[T]) enqueueLocked(w *waiter[T]) {
	g.waiters.pushBack(w)
	g.queuedLocked()
}

// queuedLocked follows a waiter's queuing: when it is the first, the
// bypass comes on and the parked entries go to the waiters. Caller holds
// g.mu.
func (g *gate[T]) queuedLocked() {
	if g.setBypass() {
		g.unparkLocked()
	}
}

// giveBack gives back an idle-ready item e and the permit the caller holds
// for it: to the oldest waiter, if any, with the permit (handed); else e
// joins the idle queue and the permit comes free. It reports accepted
// false, doing nothing, when the gate is closed, or holds more items than
// its size after a shrink: the caller must destroy e and then free its
// permit.
func (g *gate[T]) giveBack(e *entry[T]) (accepted, handed bool) {
	g.lock()
	if g.closed || g.shrinking {
		g.unlock()
		return false, false
	}
	handed = g.giveBackLocked(e)
	g.unlock()
	return true, handed
}

// giveBackLocked is giveBack without the refusal: for an open gate, and
// for the gate's own moves of a parked entry, which holds a permit, to a
// waiter or into the idle queue (a steal, an unpark, a resize). It reports
// whether a waiter got e. Caller holds g.mu.
func (g *gate[T]) giveBackLocked(e *entry[T]) (handed bool) {
	if g.grantOldest(e, nil) {
		return true
	}
	g.idle.push(e)
	g.dropPermitLocked()
	return false
}

// free frees a permit the caller holds with no item (the item was
// destroyed or detached, or its creation failed): to the oldest waiter, if
// any, as the right to create a fresh item; else it comes free.
func (g *gate[T]) free() {
	g.lock()
	g.freeLocked()
	g.unlock()
}

// freeLocked is free. Caller holds g.mu. While the items in existence
// exceed size (a shrink, or items dying past it), the permit retires
// instead of going to a waiter: the item it stood for was one too many.
func (g *gate[T]) freeLocked() {
	if g.held+g.idle.len() <= g.size && g.grantOldest(nil, nil) {
		return
	}
	g.dropPermitLocked()
}

// toDestroy counts a permit the caller holds as one of an item on its way
// to its Destroy: see dying.
func (g *gate[T]) toDestroy() {
	g.lock()
	g.dying++
	if g.shrinking {
		g.shrinking = g.alive() > g.size
		g.bypassOff()
	}
	g.unlock()
}

// destroyed frees the permit of an item whose Destroy has ended (returned,
// or past DestroyTimeout), as free does.
func (g *gate[T]) destroyed() {
	g.lock()
	g.dying--
	g.freeLocked()
	g.unlock()
}

// dropPermitLocked counts one permit fewer held, after giveBackLocked or
// freeLocked found no waiter to hand it to. Caller holds g.mu.
func (g *gate[T]) dropPermitLocked() {
	g.held--
	if g.shrinking {
		g.setBypass() // updates shrinking: false once the items fit
	}
	g.bypassOff()
	if g.held == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
}

// fillCount says which items tryAcquireFill counts against its bound.
type fillCount int

const (
	idleItems fillCount = iota // the idle items, queued or parked: Clear's refill, MinIdle
	allItems                   // the items in existence but those dying: the upkeep's floor
)

// tryAcquireFill takes a bare permit without waiting, for the caller to
// create an item, while fewer than n items of the kind count says exist,
// a permit is free, and no lease waits: waiting leases
// create items of their own, and must not find their permits taken. The
// permit is for creating an item, not for taking an idle one, so it must
// leave permits for the queued idle items too: held + idle stays within size.
func (g *gate[T]) tryAcquireFill(n int, count fillCount) bool {
	g.lock()
	defer g.unlock()
	have := g.alive()
	if count == idleItems {
		have = g.idle.len() + g.slots.scan().parked
	}
	if g.closed || g.waiters.n > 0 || g.held+g.idle.len() >= g.size || have >= n {
		return false
	}
	g.held++
	return true
}

// unparkLocked moves every parked entry into the idle queue (or to a
// waiter), so that a sweep or the upkeep can see it. Caller holds g.mu.
func (g *gate[T]) unparkLocked() {
	for e := g.slots.steal(); e != nil; e = g.slots.steal() {
		g.giveBackLocked(e)
	}
}

// takeIdle removes and returns the newest idle entry, or a parked one, for a
// caller that holds a permit; or nil when none is idle. A parked entry
// brings a permit of its own, which takeIdle frees (or hands on).
func (g *gate[T]) takeIdle() *entry[T] {
	g.lock()
	defer g.unlock()
	if e := g.idle.popNewest(); e != nil {
		return e
	}
	e := g.slots.steal()
	if e != nil {
		g.freeLocked()
	}
	return e
}
