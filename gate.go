package pool

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// gate is the capacity gate: a weighted semaphore of size MaxSize with a
// FIFO queue of waiters and direct hand-off, behind ring.go's slots. A
// permit is the right to hold one item outside the idle queue; a lease takes
// it in the critical section where it looks at the idle queue, creating only
// if none is idle, so held + idle <= size bounds the items.
//
// One mutex guards count, waiters and idle items (docs/DESIGN.md, "Why one
// mutex"). While waiters queue, no permit, or no turn, is free: a release
// hands its item or bare permit to the oldest waiter, a creation's end its
// turn. Critical sections and their wake-ups run unpreemptible (lock,
// unlock): nothing there may block.
type gate[T any] struct {
	slots slots[T]

	mu   sync.Mutex
	size int // MaxSize; changed by resize
	// refusals name size: stored with it, under mu; read without it.
	refusals  atomic.Pointer[exhaustedErrs]
	maxQueued int // MaxQueuedLeases; 0: no limit
	held      int // permits held, including those of entries parked in slots
	// creating counts bare permits (no item yet), each a turn to create until
	// the creation ends or its holder takes an idle item; at most maxCreating.
	creating, maxCreating int
	closed                bool
	// failures: creations failed in a row since the last success, counted
	// only with failAfter (FailFastAfter). The pool is down while at least
	// failAfter have (isDown): then only the probe may create, so permits
	// and turns stay free for it. Written under mu; read without it by the
	// creations and Stats.
	failures  atomic.Int64
	failAfter int64
	// dying: permits, in held, of items from leaving the idle ring or their
	// holder until Destroy returns; a shrink need not shed them again.
	dying      int
	idle       idleQueue[T]
	fastLeases uint64 // leases acquire completed, counted under the lock it holds
	waiters    waitQueue[T]
	settles    []settle   // what Close and Shutdown wait for: see whenSettled
	spare      sync.Pool  // of *waiter[T]
	woken      *waiter[T] // granted under the lock, for unlock to wake after
}

// waiter is one lease queued for a permit, recycled through gate.spare.
type waiter[T any] struct {
	// ready receives exactly one token per grant, sent by gate.unlock.
	ready chan struct{}
	// The grant, written under gate.mu before the token is sent: the item,
	// nil for a bare permit, or err (ErrClosed, ErrBackendDown) and no permit.
	e       *entry[T]
	err     error
	granted bool
	// skipped: a grant found done closed and dequeued w with no grant or
	// token. Stored under gate.mu after the grant's last touch of w, so leave
	// reads it unlocked: ended leases do not queue on gate.mu ahead of the
	// Release that reaches a live one.
	skipped atomic.Bool
	// done is the lease's ctx.Done(), for grants to skip a lease that gave
	// up; ticket, its place in line (see waitQueue).
	done   <-chan struct{}
	ticket uint64

	prev, next *waiter[T]
	wakeNext   *waiter[T]  // in gate.woken
	timer      *time.Timer // LeaseTimeout; made on first use
	wokeOn     *slot[T]    // the slot of the processor its grant woke it on, until it runs
}

// waitQueue is an intrusive list of waiters by ticket, their place in line,
// under gate.mu: issued on first queueing, kept on queueing again after a
// failed check, 0 for a permit taken while none waited.
type waitQueue[T any] struct {
	head, tail *waiter[T]
	n          int
	issued     uint64 // the last ticket push gave
}

// push queues w last, with a new ticket; or, again, behind the waiters whose
// tickets are not later than its own: only leases queued again can be ahead
// of it, at most one per item.
func (q *waitQueue[T]) push(w *waiter[T], again bool) {
	var next *waiter[T]
	if again {
		for next = q.head; next != nil && next.ticket <= w.ticket; next = next.next {
		}
	} else {
		q.issued++
		w.ticket = q.issued
	}
	w.next = next
	if next == nil {
		w.prev, q.tail = q.tail, w
	} else {
		w.prev, next.prev = next.prev, w
	}
	if w.prev == nil {
		q.head = w
	} else {
		w.prev.next = w
	}
	q.n++
}

func (q *waitQueue[T]) remove(w *waiter[T]) {
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

// grantOldest grants the oldest waiter e (nil: a bare permit) or err, else
// reports false; caller holds g.mu, whose unlock wakes the waiter. Waiters
// whose ctx ended are dequeued unwoken (skipped): awake already, their own
// leave returns the ctx's error, so ended leases cost no wake-up or hand-off.
func (g *gate[T]) grantOldest(e *entry[T], err error) bool {
	for w := g.waiters.head; w != nil; w = g.waiters.head {
		g.waiters.remove(w)
		select {
		case <-w.done: // its ctx ended (done is closed, never sent on)
			w.skipped.Store(true) // the last touch: see leave
			continue
		default:
		}
		g.setBypass()
		w.e, w.err, w.granted = e, err, true
		w.wakeNext, g.woken = g.woken, w
		return true
	}
	return false
}

func (g *gate[T]) lock() {
	g.mu.Lock()
	preemptOff()
}

// unlock releases g.mu, then wakes the waiters granted under it: waking takes
// scheduler locks that must not hold up other leases. Unpreemptible till the
// last wake-up: preempted, we would leave a granted waiter asleep on its item.
func (g *gate[T]) unlock() {
	w := g.woken
	g.woken = nil
	g.mu.Unlock()
	if w != nil {
		s := &g.slots.s[procPin()&g.slots.mask] // pinned already: the processor the wake-ups go to
		procUnpin()
		for w != nil {
			next := w.wakeNext
			w.wakeNext, w.wokeOn = nil, s
			s.woke.Store(w)
			w.ready <- struct{}{} // never blocks: cap 1, one grant per wait; w is not ours after
			w = next
		}
	}
	preemptOn()
}

// stepAside yields once if the lease this processor woke last has not run,
// so a releaser leasing again goes behind it (docs/DESIGN.md, "The releaser's
// turn"). A Release never yields; the next acquire on its processor does.
func (g *gate[T]) stepAside() {
	s := &g.slots.s[procPin()&g.slots.mask]
	woken := s.woke.Load() != nil
	procUnpin()
	if woken {
		runtime.Gosched()
	}
}

// admission is what acquire did with a lease.
type admission uint8

const (
	admitted         admission = iota // a permit, with an idle entry
	admitRetired                      // a permit, with an idle entry from before the last Clear, to destroy
	admitBare                         // a bare permit and no idle entry: the right to create one
	admitParked                       // a permit, with the entry parked in the lease's processor's slot
	queued                            // no permit yet: the lease waits, in await
	refusedClosed                     // the gate is closed
	refusedCanceled                   // the caller's ctx had ended before it could queue
	refusedDown                       // the lease would have to create, and the backend is down
	refusedInUse                      // no permit free, and the caller would not wait
	refusedCreating                   // no turn to create free, and the caller would not wait
	refusedQueue                      // others wait already, and the caller would not wait behind them
	refusedQueueFull                  // maxQueued leases wait already
	numAdmissions
)

func (a admission) refused() bool { return a > queued }

// waitChoice says whether, and where, a lease finding no permit free waits.
type waitChoice uint8

const (
	mayWait waitChoice = iota // Lease, Do: at the tail, within MaxQueuedLeases
	noWait                    // TryLease: not at all
	// waitAgain: a Lease whose idle item failed its judgement; it keeps its
	// place in line (see waitQueue), whatever MaxQueuedLeases.
	waitAgain
)

// acquire takes, without waiting, a permit with the newest idle entry, or a
// bare permit if none is idle; else, or if others wait, it queues the caller
// in the same critical section and returns its waiter for await, unless
// refused. completes: an idle entry completes the lease. ticket: see waitAgain.
func (g *gate[T]) acquire(ctx context.Context, wait waitChoice, completes bool, ticket uint64) (e *entry[T], w *waiter[T], a admission) {
	g.stepAside()
	g.lock()
	if e, a = g.acquireLocked(wait, completes); a != queued {
		g.unlock()
		return e, nil, a
	}
	// ctx.Err, ctx.Done, sync.Pool.Get may take locks: preemptible, under g.mu.
	preemptOn()
	if ctx.Err() != nil {
		g.mu.Unlock()
		return nil, nil, refusedCanceled // already given up: don't queue
	}
	w, _ = g.spare.Get().(*waiter[T])
	if w == nil {
		w = &waiter[T]{ready: make(chan struct{}, 1)}
	}
	w.done, w.ticket = ctx.Done(), ticket
	preemptOff()
	g.enqueueLocked(w, wait == waitAgain)
	g.unlock()
	return nil, w, queued
}

// acquireLocked is acquire under g.mu: while nobody queues, a permit with the
// newest idle entry, else a parked one, else a bare permit; else refusedLocked.
func (g *gate[T]) acquireLocked(wait waitChoice, completes bool) (e *entry[T], a admission) {
	switch {
	case g.closed:
		return nil, refusedClosed
	case g.waiters.n > 0:
		return nil, g.refusedLocked(wait)
	}
	if e = g.idle.popNewest(); e != nil {
		g.held++ // free: idle entries hold no permit, and held + idle <= size
	} else if e = g.slots.steal(); e == nil {
		if g.held >= g.size || g.creating >= g.maxCreating || g.isDown() {
			return nil, g.refusedLocked(wait)
		}
		g.held++
		g.creating++
		return nil, admitBare
	}
	switch {
	case e.era != g.slots.era.Load():
		return e, admitRetired
	case completes:
		g.fastLeases++
	}
	return e, admitted
}

// refusedLocked is queued for a lease that finds no permit free and may
// wait, else why it is refused. Caller holds g.mu.
func (g *gate[T]) refusedLocked(wait waitChoice) admission {
	switch {
	case g.isDown() && g.held+len(g.idle) < g.size:
		return refusedDown // it would create: refused, not queued for a turn it could not use
	case wait == waitAgain, wait == mayWait && (g.maxQueued == 0 || g.waiters.n < g.maxQueued):
		return queued
	case wait == mayWait:
		return refusedQueueFull
	case g.waiters.n > 0:
		return refusedQueue
	case g.held < g.size:
		return refusedCreating
	}
	return refusedInUse
}

// setBypass turns the slots' bypass on when needed, reporting whether it
// came on: then the caller must steal every parked entry. Called under g.mu
// after every change to closed or the waiters, and by resize. Only bypassOff
// turns it off, once nobody waits, so leases blocked on g.mu on their way
// into the queue are not overtaken (docs/DESIGN.md, "The bypass protocol").
func (g *gate[T]) setBypass() (cameOn bool) {
	if !g.bypassNeeded() || g.slots.bypass.Load() {
		return false // the common case: no write to the slots' header
	}
	g.slots.bypass.Store(true)
	return true
}

// alive counts the items in existence but the dying. Caller holds g.mu.
func (g *gate[T]) alive() int { return g.held - g.dying + len(g.idle) }

// shrinking: more items alive than size after a resize (see resize). Caller holds g.mu.
func (g *gate[T]) shrinking() bool { return g.alive() > g.size }

func (g *gate[T]) bypassNeeded() bool {
	return g.closed || g.waiters.n > 0 || g.shrinking()
}

// bypassOff: called when an item went idle or its permit came free with
// nobody waiting. Caller holds g.mu.
func (g *gate[T]) bypassOff() {
	if g.slots.bypass.Load() && !g.bypassNeeded() {
		g.slots.bypass.Store(false)
	}
}

// await waits for a grant to w, the end of ctx or timeout (if positive), or
// the gate's closing. On success the caller holds a permit and e, if not nil;
// on error e is nil except as giveUp says. waited is the wait Stats.Waits and
// WaitTime count; expired, that the timeout ended it. Giving up beats a
// simultaneous grant, passed on as in x/sync/semaphore since
// go.dev/issue/63615: a caller whose ctx ended must not walk away with an item.
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
	if granted || g.leave(w) { // leave: granted after all, as we gave up
		if s := w.wokeOn; s != nil { // it runs: clear its mark (see stepAside)
			s.woke.CompareAndSwap(w, nil)
			w.wokeOn = nil
		}
		if err == nil {
			e, err = w.e, w.err // the grant: a permit, or Close's ErrClosed
		} else {
			e, err, expired = g.giveUp(w, err, expired)
		}
	}
	w.e, w.err, w.granted, w.done = nil, nil, false, nil
	w.skipped.Store(false)
	g.spare.Put(w)
	waited = time.Duration(monotime() - start)
	s := &g.slots.s[procPin()&g.slots.mask] // the slot the wait ended on; atomic adds, off the fast path
	procUnpin()
	s.waits.Add(1)
	s.waitTime.Add(int64(waited))
	return e, waited, expired, err
}

// arm returns the channel of w's timer set to timeout, or nil for none.
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

// disarm stops w's timer, dropping one that fired unreceived: under
// GODEBUG=asynctimerchan=1 its stale tick would end the next wait at once.
func (w *waiter[T]) disarm(expired bool) {
	if w.timer != nil && !w.timer.Stop() && !expired {
		w.timer = nil
	}
}

// wait blocks until w is granted, ctx ends or timerC fires; if a grant and
// a way of giving up are ready at once it reports both (the caller gives up).
func (w *waiter[T]) wait(ctx context.Context, timerC <-chan time.Time) (granted, expired bool, err error) {
	done := ctx.Done()
	if done == nil && timerC == nil {
		<-w.ready // cheaper than a select
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

// testHooks are set by tests only: they run in await around the wait.
var testHooks struct {
	beforeWait, afterWait func()
}

// leave dequeues a waiter that gave up, reporting whether a grant came first:
// iff granted is set under the lock, else removal (or a grant's skip) keeps
// later grants off w. On true it has the token and the caller must giveUp.
func (g *gate[T]) leave(w *waiter[T]) (granted bool) {
	if w.skipped.Load() {
		return false // dequeued, and never to be granted
	}
	g.lock()
	granted = w.granted
	if !granted && !w.skipped.Load() {
		g.waiters.remove(w)
		g.setBypass()
	}
	g.unlock()
	if granted {
		<-w.ready // the granter's unlock sends it, if it has not yet
	}
	return granted
}

// giveUp passes on a grant that came as w gave up with err, so no permit is
// lost, or reports the grant's own error. If the gate closed meanwhile it
// returns the item, permit still held, for the caller to destroy.
func (g *gate[T]) giveUp(w *waiter[T], err error, expired bool) (stranded *entry[T], _ error, _ bool) {
	if w.err != nil {
		return nil, w.err, false // Close, or the backend down, at this instant: say so
	}
	if w.e == nil {
		g.end(1, 1, 0) // a bare permit, not to create with
	} else if !g.giveBack(w.e) {
		return w.e, err, expired
	}
	return nil, err, expired
}

// enqueueLocked queues w, again or not (see waitQueue.push). When the first
// waiter queues, bypass comes on and parked entries go to the waiters, which
// may grant w at once. Caller holds g.mu.
func (g *gate[T]) enqueueLocked(w *waiter[T], again bool) {
	g.waiters.push(w, again)
	if g.setBypass() {
		g.unparkLocked()
	}
}

// giveBack gives e and its permit to the oldest waiter, else e goes idle
// and the permit comes free. On a closed or shrinking gate it does nothing
// and reports false: the caller destroys e, then frees its permit.
func (g *gate[T]) giveBack(e *entry[T]) (accepted bool) {
	g.lock()
	accepted = !g.closed && !g.shrinking()
	if accepted {
		g.giveBackLocked(e)
	}
	g.unlock()
	return accepted
}

// giveBackLocked: giveBack under g.mu without refusal (also for unparking).
func (g *gate[T]) giveBackLocked(e *entry[T]) {
	if g.grantOldest(e, nil) {
		return
	}
	g.idle.push(e)
	g.dropPermitLocked()
}

// free frees a permit held with no item; createEnded gives back a turn to
// create, as the creation ended or its holder did not create; destroyed frees
// the permit of an item whose Destroy returned or timed out.
func (g *gate[T]) free()        { g.end(1, 0, 0) }
func (g *gate[T]) createEnded() { g.end(0, 1, 0) }
func (g *gate[T]) destroyed()   { g.end(1, 0, 1) }

// end gives back permits held with no item, turns to create and dying marks,
// then grants what came free (grantTurnsLocked); a freed permit retires while
// items exceed size (its item was one too many).
func (g *gate[T]) end(permits, turns, dying int) {
	g.lock()
	g.creating -= turns
	g.dying -= dying
	for range permits {
		g.dropPermitLocked()
	}
	g.grantTurnsLocked()
	g.settleLocked()
	g.unlock()
}

// grantTurnsLocked grants waiters, oldest first, a bare permit each while a
// permit and a turn are free; while the backend is down, each waiter a free
// permit would let create gets ErrBackendDown instead. Caller holds g.mu.
func (g *gate[T]) grantTurnsLocked() {
	for g.waiters.n > 0 && g.held+len(g.idle) < g.size {
		switch {
		case g.isDown():
			g.grantOldest(nil, ErrBackendDown)
		case g.creating < g.maxCreating && g.grantOldest(nil, nil):
			g.held++ // a waiter exists only while no item is idle: a bare permit
			g.creating++
		default:
			return
		}
	}
}

// createFailed counts a failed creation, the n-th in a row, and reports
// whether it put the pool down: then the waiters that would create fail at once.
func (g *gate[T]) createFailed() (n int64, wentDown bool) {
	if g.failAfter == 0 {
		return 0, false // never down: nothing to count
	}
	g.lock()
	defer g.unlock()
	n = g.failures.Add(1)
	if n == g.failAfter {
		g.grantTurnsLocked()
	}
	return n, n == g.failAfter
}

// createSucceeded ends a run of failures and reports whether the pool was
// down: then the waiters get their turns again.
func (g *gate[T]) createSucceeded() (cameUp bool) {
	if g.failures.Load() == 0 {
		return false // the common case: no lock
	}
	g.lock()
	defer g.unlock()
	cameUp = g.isDown()
	g.failures.Store(0)
	if cameUp {
		g.grantTurnsLocked()
	}
	return cameUp
}

// toDestroy counts a held permit as dying.
func (g *gate[T]) toDestroy() {
	g.lock()
	g.dying++
	g.bypassOff() // it may have been one too many
	g.unlock()
}

// dropPermitLocked: a permit found no waiter. Caller holds g.mu.
func (g *gate[T]) dropPermitLocked() {
	g.held--
	g.bypassOff()
	g.settleLocked()
}

// fillCount says which items tryAcquireFill counts against its bound.
type fillCount int

const (
	idleItems fillCount = iota // the idle items, queued or parked: Clear's refill, MinIdle
	allItems                   // the items in existence but those dying: the upkeep's floor
	probeItem                  // none, and waiting leases do not stop it: FailFastAfter's probe
)

// tryAcquireFill takes a bare permit to create an item if fewer than n items
// of kind count exist, a permit is free (held + idle < size) and no lease
// waits (waiting leases create their own); while down, for the probe only.
func (g *gate[T]) tryAcquireFill(n int, count fillCount) bool {
	g.lock()
	defer g.unlock()
	have, waiting := g.alive(), g.waiters.n > 0
	switch count {
	case idleItems:
		have = len(g.idle) + g.slots.scan().parked
	case probeItem:
		have, waiting = 0, false
	}
	if g.closed || waiting || g.held+len(g.idle) >= g.size || g.creating >= g.maxCreating || have >= n ||
		g.isDown() && count != probeItem {
		return false
	}
	g.held++
	g.creating++
	return true
}

// short reports whether, on an open gate, fewer than n items live while a
// permit is free: a fill cut short by waiting leases or the creations' cap.
func (g *gate[T]) short(n int) bool {
	g.lock()
	defer g.unlock()
	return !g.closed && g.alive() < n && g.held+len(g.idle) < g.size
}

// unparkLocked moves every parked entry to a waiter or the idle queue,
// where sweeps see it. Caller holds g.mu.
func (g *gate[T]) unparkLocked() {
	for e := g.slots.steal(); e != nil; e = g.slots.steal() {
		g.giveBackLocked(e)
	}
}

// takeIdle gives a bare permit's holder the newest idle entry, or a parked
// one (freeing its own permit), or nil: only then is the turn to create kept.
func (g *gate[T]) takeIdle() *entry[T] {
	g.lock()
	defer g.unlock()
	e := g.idle.popNewest()
	if e == nil {
		if e = g.slots.steal(); e == nil {
			return nil
		}
		g.dropPermitLocked() // it came with its own
	}
	g.creating--
	g.grantTurnsLocked()
	return e
}

// refusal is the error of a lease refused for want of room, naming the size
// now; nil for the other refusals.
func (g *gate[T]) refusal(a admission) error { return g.refusals.Load()[a] }

// retired reports whether e was created, or began its creation, before the
// last Clear: then it is destroyed where it would go idle or be lent.
func (g *gate[T]) retired(e *entry[T]) bool { return e.era != g.slots.era.Load() }

// refusedWhy is why giveBack refused an item: Close, or a SetMaxSize shrink.
func (g *gate[T]) refusedWhy() reason {
	g.lock()
	defer g.unlock()
	if g.closed {
		return reasonClose
	}
	return reasonResize
}

// era is the count of Clears (see slots.era), read as a creation begins.
func (g *gate[T]) era() uint64 { return g.slots.era.Load() }

// isDown reports FailFastAfter's verdict: that many creations in a row
// failed, none since succeeded. Without the lock, a moment's answer.
func (g *gate[T]) isDown() bool { return g.failAfter > 0 && g.failures.Load() >= g.failAfter }

// creationsCap is MaxConcurrentCreates, or math.MaxInt for no cap.
func (g *gate[T]) creationsCap() int { return g.maxCreating }

// init sizes a new gate for the options, with the refusals that name its size.
func (g *gate[T]) init(o Options[T], refusals *exhaustedErrs) {
	g.size, g.maxQueued, g.maxCreating = o.MaxSize, o.MaxQueuedLeases, o.MaxConcurrentCreates
	g.failAfter = int64(o.FailFastAfter)
	g.refusals.Store(refusals)
	if g.maxCreating == 0 {
		g.maxCreating = math.MaxInt
	}
	g.slots.init()
}
