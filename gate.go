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
// permit is the right to hold one item outside the idle queue (leased,
// being created or destroyed, or parked); a lease takes it in the critical
// section where it looks at the idle queue, creating only if none is idle,
// so held + idle <= size bounds the items.
//
// One mutex guards count, waiters and idle items, so a release decides
// "oldest waiter, or idle queue?" atomically (docs/DESIGN.md, "Why one
// mutex"). While waiters queue, no permit, or no turn, is free: a release
// hands its item or bare permit to the oldest waiter, a creation's end its
// turn, so no waiter wakes to nothing and no lease overtakes the queue.
// Critical sections and their wake-ups run unpreemptible (lock, unlock;
// docs/DESIGN.md, "Not preempted while holding the lock"): nothing there
// may block.
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
	// down: FailFastAfter's verdict (create.go, "Fail fast"); while set only
	// the probe may create, so permits and turns stay free for it. Written
	// under mu by setDown; read without it by the creations and Stats.
	down atomic.Bool
	// dying: permits, in held, of items from leaving the idle ring or their
	// holder until Destroy returns; a shrink need not shed them again.
	dying int
	idle  idleQueue[T]
	// fastLeases counts leases acquire completed, under the lock already
	// held (docs/DESIGN.md, "Stats without a second truth").
	fastLeases uint64
	waiters    waitQueue[T]
	settles    []settle  // what Close and Shutdown wait for: see whenSettled
	spare      sync.Pool // of *waiter[T]
	// woken: the waiters granted under the lock, for unlock to wake after.
	woken *waiter[T]
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
// under gate.mu: issued on first queueing (pushBack), kept on queueing again
// after a failed check (pushAgain), 0 for a permit taken while none waited.
type waitQueue[T any] struct {
	head, tail *waiter[T]
	n          int
	issued     uint64 // the last ticket pushBack gave
}

// pushBack queues w last, with a new ticket.
func (q *waitQueue[T]) pushBack(w *waiter[T]) {
	q.issued++
	w.ticket = q.issued
	q.insertBefore(w, nil)
}

// pushAgain queues w behind the waiters whose tickets are not later: only
// leases queued again can be ahead of it, at most one per item.
func (q *waitQueue[T]) pushAgain(w *waiter[T]) {
	next := q.head
	for next != nil && next.ticket <= w.ticket {
		next = next.next
	}
	q.insertBefore(w, next)
}

// insertBefore links w in before next, or last when next is nil.
func (q *waitQueue[T]) insertBefore(w, next *waiter[T]) {
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
		if w.gaveUp() {
			w.skipped.Store(true) // the last touch: see leave
			continue
		}
		g.setBypass()
		w.e, w.err, w.granted = e, err, true
		w.wakeNext, g.woken = g.woken, w
		return true
	}
	return false
}

// gaveUp reports whether w's ctx has ended: a receive that never blocks
// (done is never written, only closed), safe under g.mu unpreemptible.
func (w *waiter[T]) gaveUp() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
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

// ran clears w's mark in the slot of the processor that woke it: it runs.
func (w *waiter[T]) ran() {
	if s := w.wokeOn; s != nil {
		s.woke.CompareAndSwap(w, nil)
		w.wokeOn = nil
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
	refusedInUse                      // no permit free, and the caller would not wait
	refusedCreating                   // no turn to create free, and the caller would not wait
	refusedQueue                      // others wait already, and the caller would not wait behind them
	refusedClosed                     // the gate is closed
	refusedCanceled                   // the caller's ctx had ended before it could queue
	refusedQueueFull                  // maxQueued leases wait already
	refusedDown                       // the lease would have to create, and the backend is down
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
	if g.closed {
		g.unlock()
		return nil, nil, refusedClosed
	}
	var ok bool
	if e, ok = g.acquireLocked(); ok || wait == noWait || g.mustCreateWhileDown() {
		a = g.admissionLocked(e, ok, completes)
		g.unlock()
		return e, nil, a
	}
	if g.maxQueued > 0 && g.waiters.n >= g.maxQueued && wait != waitAgain {
		g.unlock()
		return nil, nil, refusedQueueFull
	}
	// ctx.Err, ctx.Done, sync.Pool.Get may take locks: preemptible, under g.mu.
	preemptOn()
	if ctx.Err() != nil {
		g.mu.Unlock()
		return nil, nil, refusedCanceled // already given up: don't queue
	}
	w = g.newWaiter()
	w.done = ctx.Done()
	preemptOff()
	if wait == waitAgain {
		w.ticket = ticket
		g.waiters.pushAgain(w)
		g.queuedLocked()
	} else {
		g.enqueueLocked(w)
	}
	g.unlock()
	return nil, w, queued
}

// mustCreateWhileDown reports whether a lease finding no idle item would
// create, a permit being free, while the backend is down: then it is refused,
// not queued for a turn it could not use. Caller holds g.mu.
func (g *gate[T]) mustCreateWhileDown() bool {
	return g.down.Load() && g.held+g.idle.len() < g.size
}

// admissionLocked is the admission of a lease that acquireLocked gave e
// (ok), or refused when it would not wait. Caller holds g.mu.
func (g *gate[T]) admissionLocked(e *entry[T], ok, completes bool) admission {
	switch {
	case !ok && g.mustCreateWhileDown():
		return refusedDown
	case !ok && g.waiters.n > 0:
		return refusedQueue
	case !ok && g.held < g.size:
		return refusedCreating
	case !ok:
		return refusedInUse
	case e == nil:
		return admitBare
	case e.era != g.slots.era.Load():
		return admitRetired
	}
	if completes {
		g.fastLeases++
	}
	return admitted
}

// newWaiter: caller holds g.mu, preemptible.
func (g *gate[T]) newWaiter() *waiter[T] {
	w, _ := g.spare.Get().(*waiter[T])
	if w == nil {
		w = &waiter[T]{ready: make(chan struct{}, 1)}
	}
	return w
}

// acquireLocked (caller holds g.mu), when nobody queues, takes a permit with
// the newest idle entry, else a parked one and its permit, else a bare permit.
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
	if g.held < g.size && g.creating < g.maxCreating && !g.down.Load() {
		g.held++
		g.creating++
		return nil, true
	}
	return nil, false
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
func (g *gate[T]) alive() int { return g.held - g.dying + g.idle.len() }

// shrinking: more items alive than size after a resize; returning items
// are destroyed and freed permits retire until they fit. Caller holds g.mu.
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
	switch {
	case granted && err == nil:
		w.ran()
		e, err = w.e, w.err // the grant: a permit, or Close's ErrClosed
	case granted:
		w.ran()
		e, err, expired = g.giveUp(w, err, expired)
	default:
		if g.leave(w) { // granted after all, as we gave up
			w.ran()
			e, err, expired = g.giveUp(w, err, expired)
		}
	}
	w.e, w.err, w.granted, w.done = nil, nil, false, nil
	w.skipped.Store(false)
	g.spare.Put(w)
	waited = time.Duration(monotime() - start)
	g.slots.countWait(int64(waited))
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
	if !w.granted {
		if !w.skipped.Load() {
			g.waiters.remove(w)
			g.setBypass()
		}
		g.unlock()
		return false
	}
	g.unlock()
	<-w.ready // the granter's unlock sends it, if it has not yet
	return true
}

// giveUp passes on a grant that came as w gave up with err, so no permit is
// lost, or reports the grant's own error. If the gate closed meanwhile it
// returns the item, permit still held, for the caller to destroy.
func (g *gate[T]) giveUp(w *waiter[T], err error, expired bool) (stranded *entry[T], _ error, _ bool) {
	if w.err != nil {
		return nil, w.err, false // Close, or the backend down, at this instant: say so
	}
	if w.e == nil {
		g.freeBare()
	} else if !g.giveBack(w.e) {
		return w.e, err, expired
	}
	return nil, err, expired
}

// enqueueLocked queues w. Caller holds g.mu.
func (g *gate[T]) enqueueLocked(w *waiter[T]) {
	g.waiters.pushBack(w)
	g.queuedLocked()
}

// queuedLocked: when the first waiter queues, bypass comes on and parked
// entries go to the waiters, which may grant the new one at once.
func (g *gate[T]) queuedLocked() {
	if g.setBypass() {
		g.unparkLocked()
	}
}

// giveBack gives e and its permit to the oldest waiter, else e goes idle
// and the permit comes free. On a closed or shrinking gate it does nothing
// and reports false: the caller destroys e, then frees its permit.
func (g *gate[T]) giveBack(e *entry[T]) (accepted bool) {
	g.lock()
	if g.closed || g.shrinking() {
		g.unlock()
		return false
	}
	g.giveBackLocked(e)
	g.unlock()
	return true
}

// giveBackLocked: giveBack under g.mu without refusal (also for unparking).
func (g *gate[T]) giveBackLocked(e *entry[T]) {
	if g.grantOldest(e, nil) {
		return
	}
	g.idle.push(e)
	g.dropPermitLocked()
}

// freeBare frees a bare permit whose holder will not create.
func (g *gate[T]) freeBare() {
	g.lock()
	g.creating--
	g.freeLocked()
	g.unlock()
}

// free frees a permit held with no item, as freeLocked does.
func (g *gate[T]) free() {
	g.lock()
	g.freeLocked()
	g.unlock()
}

// freeLocked frees a permit and grants it as grantTurnsLocked does: while
// items exceed size it retires (its item was one too many); with no turn for
// the waiter it stays free until a creation's end grants it.
func (g *gate[T]) freeLocked() {
	g.dropPermitLocked()
	g.grantTurnsLocked()
}

// createEnded gives back a turn to create, as the creation ended or its
// holder did not create; with a permit free, it goes to the oldest waiter.
func (g *gate[T]) createEnded() {
	g.lock()
	g.creating--
	g.grantTurnsLocked()
	g.settleLocked()
	g.unlock()
}

// grantTurnsLocked grants waiters, oldest first, a bare permit each while a
// permit and a turn are free; while the backend is down, each waiter a free
// permit would let create gets ErrBackendDown instead. Caller holds g.mu.
func (g *gate[T]) grantTurnsLocked() {
	for g.waiters.n > 0 && g.held+g.idle.len() < g.size {
		switch {
		case g.down.Load():
			g.grantOldest(nil, ErrBackendDown)
		case g.creating < g.maxCreating && g.grantOldest(nil, nil):
			g.held++ // a waiter exists only while no item is idle: a bare permit
			g.creating++
		default:
			return
		}
	}
}

// setDown records FailFastAfter's verdict and reports a change: down, the
// waiters that would create fail at once; up, they get their turns again.
func (g *gate[T]) setDown(down bool) (changed bool) {
	g.lock()
	defer g.unlock()
	if g.down.Load() == down {
		return false
	}
	g.down.Store(down)
	g.grantTurnsLocked()
	return true
}

// toDestroy counts a held permit as dying.
func (g *gate[T]) toDestroy() {
	g.lock()
	g.dying++
	g.bypassOff() // it may have been one too many
	g.unlock()
}

// destroyed frees the permit of an item whose Destroy returned or timed out.
func (g *gate[T]) destroyed() {
	g.lock()
	g.dying--
	g.freeLocked()
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
		have = g.idle.len() + g.slots.scan().parked
	case probeItem:
		have, waiting = 0, false
	}
	if g.closed || waiting || g.held+g.idle.len() >= g.size || g.creating >= g.maxCreating || have >= n ||
		g.down.Load() && count != probeItem {
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
	return !g.closed && g.alive() < n && g.held+g.idle.len() < g.size
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
		g.freeLocked()
	}
	g.creating--
	g.grantTurnsLocked()
	return e
}

// exhausted returns the errors of a refused lease, naming the size now.
func (g *gate[T]) exhausted() *exhaustedErrs { return g.refusals.Load() }

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

// isDown reports FailFastAfter's verdict, without the lock.
func (g *gate[T]) isDown() bool { return g.down.Load() }

// creationsCap is MaxConcurrentCreates, or math.MaxInt for no cap.
func (g *gate[T]) creationsCap() int { return g.maxCreating }

// init sizes a new gate for the options, with the refusals that name its size.
func (g *gate[T]) init(o Options[T], refusals *exhaustedErrs) {
	g.size, g.maxQueued, g.maxCreating = o.MaxSize, o.MaxQueuedLeases, o.MaxConcurrentCreates
	g.refusals.Store(refusals)
	if g.maxCreating == 0 {
		g.maxCreating = math.MaxInt
	}
	g.slots.init()
}
