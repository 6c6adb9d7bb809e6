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
// FIFO queue of waiters and direct hand-off. The per-processor slots of the
// idle ring (ring.go) sit in front of it.
//
// A permit is the right to hold one item outside the idle queue: leased,
// being created or destroyed, or parked in a slot. A lease takes its permit
// in the same critical section as it looks at the idle queue and creates an
// item only when none is idle, so held + idle <= size bounds the items.
//
// A bare permit (no item yet) is the right to create one and takes one of
// maxCreating turns to create, until the creation ends or the holder takes
// an idle item instead (creating counts them).
//
// One mutex guards count, waiters and idle items, so a release decides
// "oldest waiter, or idle queue?" atomically (docs/DESIGN.md, "Why one
// mutex"). While waiters queue no permit is free, or no turn to create: a
// release hands its item, or its bare permit, straight to the oldest waiter,
// and a creation's end its turn, so no waiter wakes to nothing and no lease
// overtakes the queue.
//
// While the backend is down (down), the gate grants no right to create but
// the probe's (tryAcquireFill): a lease that would have to create is
// refused, and a waiter that would get a bare permit gets ErrBackendDown
// instead, so the permits and turns stay free for the probe.
//
// Critical sections and the wake-ups after them run unpreemptible (lock,
// unlock; docs/DESIGN.md, "Not preempted while holding the lock"), so
// nothing there may block.
type gate[T any] struct {
	slots slots[T]

	mu        sync.Mutex
	size      int // MaxSize; changed by resize
	maxQueued int // MaxQueuedLeases; 0: no limit
	held      int // permits held, including those of entries parked in slots
	// creating counts the bare permits, each a turn to create, up to
	// maxCreating (MaxConcurrentCreates, or no cap).
	creating, maxCreating int
	closed                bool
	// down: FailFastAfter's verdict that the backend is down (create.go,
	// "Fail fast"). Written under mu by setDown; read without it by the
	// creations and Stats.
	down atomic.Bool
	// dying: permits of items on their way to Destroy, counted as they
	// leave the idle ring or their holder, until Destroy returns. They count
	// against size, but a shrink need not shed them again.
	dying int
	idle  idleQueue[T]
	// fastLeases counts leases acquire completed, under the lock already
	// held (docs/DESIGN.md, "Stats without a second truth").
	fastLeases uint64
	waiters    waitQueue[T]
	settles    []settle  // what Close and Shutdown wait for: see whenSettled
	spare      sync.Pool // of *waiter[T]
	// woken: waiters granted under the lock, linked by wakeNext, for
	// unlock to wake after releasing it.
	woken *waiter[T]
}

// waiter is one lease queued for a permit, recycled through gate.spare.
type waiter[T any] struct {
	// ready receives exactly one token per grant, sent by gate.unlock.
	ready chan struct{}
	// The grant, written under gate.mu before the token is sent: the item,
	// or nil for a bare permit; or err (ErrClosed, ErrBackendDown) and no
	// permit.
	e       *entry[T]
	err     error
	granted bool
	// skipped: a grant found done closed and dequeued w without a grant or
	// a token; w's own wait ends with its ctx. Stored under gate.mu after
	// the grant's last touch of w, so that leave may read it without the
	// lock: a storm of ended leases does not queue on gate.mu ahead of the
	// Release that reaches the live one.
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

// waitQueue is an intrusive list of waiters in the order of their tickets,
// guarded by gate.mu. A lease's ticket is its place in line, taken when it
// first queues (pushBack: each a higher one) and kept when it queues again
// after its item failed its check (pushAgain); a lease that held a permit
// without waiting has ticket 0, since nobody waited when it took it.
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

// pushAgain queues w, keeping its ticket, behind the waiters whose tickets
// are not later: only leases queued again can be ahead of it, at most one
// per item.
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

// grantOldest grants the oldest waiter e (nil: the bare permit) or err,
// reporting false when no one waits. Caller holds g.mu and releases it
// with unlock, which wakes the waiter. A waiter whose ctx has ended is
// dequeued unwoken (skipped) instead: it is awake already, and its own
// leave returns its ctx's error, so a grant passes a storm of ended leases
// without a wake-up or a hand-off each.
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

// unlock releases g.mu, then wakes the waiters granted under it: waking
// takes the scheduler's locks, which must not hold up other processors'
// leases. It stays unpreemptible until the last wake-up, or a granted
// waiter could sleep on its item while we sit in the run queue. Each woken
// waiter is marked in this processor's slot (slot.woke) until it runs.
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

// stepAside lets the lease this processor woke last run first, once, if
// it has not run yet: a goroutine that handed its item to a waiter and
// leases again goes behind the lease it woke (docs/DESIGN.md, "The
// releaser's turn"). A Release never yields: whoever comes to the gate
// next on its processor does, and a releaser that ends or blocks yields
// nothing.
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
	// waitAgain: a Lease whose idle item failed its judgement. It keeps its
	// ticket (see waitQueue), so it queues ahead of the leases that queued
	// after it first did, whatever MaxQueuedLeases.
	waitAgain
)

// acquire takes a permit with the newest idle entry, or a bare permit when
// none is idle, without waiting. Otherwise (or when others wait: a newcomer
// never overtakes the queue) it queues the caller in the same critical
// section and returns its waiter for await, unless the lease is refused.
// completes: an idle entry completes the lease, counted in fastLeases.
// ticket: a waitAgain lease's place in line (see waitQueue).
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
	// ctx.Err, ctx.Done and sync.Pool.Get may take locks: call them
	// preemptible, still under g.mu.
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

// mustCreateWhileDown reports whether a lease that found no idle item
// would have to create one, a permit being free, while the backend is
// down: it is refused at once rather than queued for a turn it could not
// use. Caller holds g.mu.
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

// acquireLocked, when nobody queues, takes a permit with the newest idle
// entry, else a parked one (which brings its permit), else a bare permit
// with a nil entry for the caller to create. Caller holds g.mu.
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

// setBypass turns the slots' bypass on when needed and reports whether it
// came on; then the caller must steal every parked entry. Called under g.mu
// after every change to closed or to the waiters, and by resize.
// Only bypassOff turns it off, once nobody waits, so leases still blocked
// on g.mu on their way into the queue are not overtaken by the fast path
// (docs/DESIGN.md, "The bypass protocol").
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
// the gate's closing. On success the caller holds a permit and e, if not
// nil. waited is the wait as Stats.Waits and WaitTime count it; expired,
// that the timeout ended it. On error e is nil except as giveUp says.
//
// Giving up wins over a simultaneous grant, whichever case the select
// chose: the grant is passed on, as x/sync/semaphore does since
// go.dev/issue/63615. A caller whose ctx ended must not walk away with an item.
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

// disarm stops w's timer. If it fired unreceived, under
// GODEBUG=asynctimerchan=1 a stale tick would end the next wait at once,
// so the timer is dropped for a new one.
func (w *waiter[T]) disarm(expired bool) {
	if w.timer != nil && !w.timer.Stop() && !expired {
		w.timer = nil
	}
}

// wait blocks until w is granted, ctx ends or timerC fires. When a grant
// and a way of giving up are ready at once it reports both, and the caller
// gives up.
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

// leave dequeues a waiter that gave up and reports whether a grant raced
// with it. A grant came first iff granted is set under the lock; otherwise
// removal under the lock (unless a grant skipped w, dequeuing it) makes
// every later grant pass w by. On true, the token is received and the
// caller must giveUp.
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

// giveUp passes on a grant that came as w gave up with err, so no permit
// is lost, or reports the grant's error (Close's, or the backend down). If
// the gate closed meanwhile, it returns the item, permit still held, for
// the caller to destroy.
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
// and the permit comes free. It reports false, with nothing done, when the
// gate is closed or shrinking: the caller destroys e and then frees its
// permit.
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

// giveBackLocked is giveBack without the refusal, also for the gate's own
// moves of parked entries. Caller holds g.mu.
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

// free frees a permit held with no item: to the oldest waiter, as the
// right to create one, or it comes free.
func (g *gate[T]) free() {
	g.lock()
	g.freeLocked()
	g.unlock()
}

// freeLocked frees a permit, then grants it as grantTurnsLocked does: while
// items exceed size it retires instead (its item was one too many), and
// without a turn to create for the waiter it stays free until the next
// creation's end grants it.
func (g *gate[T]) freeLocked() {
	g.dropPermitLocked()
	g.grantTurnsLocked()
}

// createEnded gives back a turn to create: the creation ended, or its
// holder did not create. With a permit free, the turn goes to the oldest
// waiter.
func (g *gate[T]) createEnded() {
	g.lock()
	g.creating--
	g.grantTurnsLocked()
	g.settleLocked()
	g.unlock()
}

// grantTurnsLocked grants waiters, oldest first, a bare permit each while
// a permit and a turn to create are free; while the backend is down, each
// waiter that a free permit would let create gets ErrBackendDown instead.
// Caller holds g.mu.
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

// setDown records FailFastAfter's verdict and reports whether it changed
// it. Down, the waiters that would create fail at once; up, they get their
// turns again.
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

// destroyed frees the permit of an item whose Destroy returned or passed
// DestroyTimeout.
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

// tryAcquireFill takes a bare permit to create an item while fewer than n
// items of kind count exist, a permit is free, and no lease waits (waiting
// leases create their own); while the backend is down, for the probe only.
// It leaves permits for the idle items too: held + idle stays within size.
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

// short reports whether fewer than n items exist (but the dying) while a
// permit is free, on an open gate: a fill stopped by waiting leases, or by
// the creations' cap, before MaxSize did.
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

// takeIdle returns the newest idle or a parked entry, or nil, for a caller
// holding a bare permit, which keeps its turn to create only on nil. A
// parked entry's own permit is freed.
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

// seed puts e idle: New's seeding, before anyone else can see the gate.
func (g *gate[T]) seed(e *entry[T]) {
	g.lock()
	g.idle.push(e)
	g.unlock()
}

// era is the count of Clears (see slots.era), read as a creation begins.
func (g *gate[T]) era() uint64 { return g.slots.era.Load() }

// isDown reports FailFastAfter's verdict, without the lock.
func (g *gate[T]) isDown() bool { return g.down.Load() }

// creationsCap is MaxConcurrentCreates, or math.MaxInt for no cap.
func (g *gate[T]) creationsCap() int { return g.maxCreating }

// init sizes a new gate for the options.
func (g *gate[T]) init(o Options[T]) {
	g.size, g.maxQueued, g.maxCreating = o.MaxSize, o.MaxQueuedLeases, o.MaxConcurrentCreates
	if g.maxCreating == 0 {
		g.maxCreating = math.MaxInt
	}
	g.slots.init()
}
