package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// # FuzzPool: the pool against a model of its documentation
//
// The fuzz input is a script: two bytes of configuration (three, in the
// extended configurations: see newFzRun), then operations of two bytes
// each (an opcode and an argument). fzRun plays the script on a real pool
// and, step by step, on fzModel, a sequential model of what the package
// documentation promises, written as plainly as the contract reads:
// permits counted by hand, idle items in a list, waiters in a FIFO, items
// on their way to their Destroy in a list of their own. After every step
// it compares the outcome (error class, item, panic), Stats, the set of
// items in existence (by the faults harness's own count, which also
// checks that no item is held by two leases or destroyed twice) and the
// idle order; and, while Destroy calls are held back (see Destruction
// below), the same with Stats.Destroying accounted.
//
// The operations cover leasing (Lease, TryLease, with a live or canceled
// ctx, and leases that queue and wait on goroutines of their own), every
// way to end a lease (Release, a double Release, a Release through a stale
// copy, Discard, Detach, Value on an ended lease), Clear, Close, Shutdown,
// cancelling a waiter, time passing on the pool's clock hook, and faults
// scheduled for the next factory call, readiness check, Reset or Destroy:
// a failure or a panic.
//
// Lifecycle over time (doc.go, "Lifecycle of an item" and "Upkeep"):
//
//   - The sweep for expiry that a lease or release runs once a period:
//     the parked item joins the queue, and every expired queued item goes
//     to its Destroy; with the upkeep on, one that expired only by idling
//     stays while MinSize or fewer items exist (fzModel.destroyExpired).
//   - Upkeep rounds (opUpkeep, with the upkeep on: see newFzRun), run by
//     the script on its own goroutine with p.kp.upkeepRound(p), on the fake
//     clock: that sweep; then, with a Preparer and CheckAfterIdle, the
//     idle items due a check (by max(idleAt, checkedAt)) checked oldest
//     first, a failure destroyed and a success stamped and put back at the
//     queue's tail; then, with MinIdle, an ask for spares; then items
//     created up to MinSize (not counting those on their way to their
//     Destroy) while no lease waits (a failed creation ends the round,
//     which reports false).
//   - SetMaxSize(1–4) (opResize): refused below MinSize, ErrClosed on a
//     closed pool; growing grants the oldest waiters bare permits;
//     shrinking below the items alive (those on their way to their Destroy
//     left out) destroys the parked item and the oldest queued ones beyond
//     the new size (reason resize), and until the items fit, an item
//     released is destroyed (reason resize), a permit given back retires
//     instead of going to a waiter, the slot is bypassed and new leases
//     queue.
//   - MinIdle (extended configurations): the spares, kept idle by a task
//     of the pool's. The script plays that task itself, as it does the
//     upkeep: the pool gets its MinIdle and its channel of asks after New,
//     so no task of its own runs, and at the end of each step the script
//     checks that an ask is pending exactly when the model says one was
//     made (New; every lease that did not take its item from the slot on
//     the fast path, that is every successful lease but a slot hit in a
//     pool that judges nothing and records no sites; every upkeep round),
//     and then runs the task's round (fillRound) and the model its own
//     (fillIdle): idle items created up to MinIdle while no lease waits and
//     MaxSize allows. A failed round is run again at the end of the next
//     step, as the task's backoff would, some time later.
//   - MaxQueuedLeases (extended configurations): a Lease that would wait
//     behind that many fails with ErrExhausted, naming the cap, and counts
//     in Stats.Refused, as TryLease's refusals do.
//
// Opcodes 12 and 13 were Close and Shutdown with an argument divisible by
// 4 and did nothing otherwise; their other arguments are now opUpkeep and
// opResize, so the committed corpus keeps its meaning but where it had
// those no-ops (opUpkeep does nothing with the upkeep off, which no
// committed script has on).
//
// # Destruction
//
// Every Destroy runs on a goroutine of the pool's, and the item keeps its
// room, counted against MaxSize and in Stats.Destroying, until its Destroy
// ends (doc.go, "Lifecycle of an item": Destroyed); a Destroy's error or
// panic is counted and logged, and reaches no caller but Close, which
// returns those of the idle items it destroys. When a Destroy ends would
// be up to the scheduler, so the script decides: the faults harness holds
// every Destroy back (fzScheduled.awaitGate) while the step's call runs and
// its granted waiters go on, and the model keeps those items in dying,
// their permits held. So a lease that hands an expired or failed idle item
// to its Destroy finds that item's room still taken when it asks the gate
// for another: TryLease may be refused, and Lease queue behind the
// Destroy. Then the script checks the pool against the model, Destroying
// included, once every held Destroy has started (the item counts as
// destroyed by the harness from the start of its Destroy); then lets the
// Destroy calls end, waits for them (awaitDestroys) and ends them in the
// model, whose permits go to the oldest waiters or come free; and so on
// until no waiter is granted and no Destroy is held. Close and Shutdown
// run with the Destroy calls free, since Close waits for them. Destroy
// calls that end at once, within the call that let the item go, are left
// to the unit tests.
//
// Determinism. The model predicts which item each lease gets, so the test
// gives the pool's idle ring a single slot: whichever processor (or, in the
// poolportable build, whichever hint) a goroutine runs on, the slot holds
// the most recently released item, in front of the idle queue, as the
// documented idle order says (doc.go, "Lifecycle of an item": Leased); the
// model keeps it so. Every goroutine the script starts is waited for
// before the next step, so one goroutine at a time uses the pool, and the
// order in which user code runs (and so which scheduled fault it meets) is
// the model's order. Several slots, and interleavings across
// processors, are left to the ring, stress and soak tests.
//
// Several waiters granted at once (SetMaxSize growing, or Destroy calls
// ending) go on with their leases concurrently. So a queued lease's ctx
// carries its waiter, and the factory and the Preparer wait for that
// waiter's turn (fzAwaitTurn): the model goes on with the granted leases
// after the step, in the order of their grants (runGranted), and settle
// gives the real ones their turns in that order, one after another, so
// they call user code, and meet the scheduled faults, in the model's
// order. A granted lease whose item fails its check queues again, behind
// that item's Destroy; it gets a new turn for its next grant. Destroy
// calls ended together take their scheduled faults in the scheduler's
// order, which changes no count.

// fzFault is what the next call of a hook does.
type fzFault uint8

const (
	fzFine         fzFault = iota // succeed (IsReady: ready)
	fzFail                        // return an error (IsReady: an error)
	fzBoom                        // panic
	fzNotReady                    // IsReady: not ready, and Prepare succeeds
	fzNotReadyFail                // IsReady: not ready, and Prepare fails
)

// fzPlan holds the faults scheduled for the next calls of each hook, oldest
// first; a hook with nothing scheduled succeeds.
type fzPlan struct {
	create, prep, reset, destroy []fzFault
}

func fzNext(q *[]fzFault) fzFault {
	if len(*q) == 0 {
		return fzFine
	}
	f := (*q)[0]
	*q = (*q)[1:]
	return f
}

// fzPanic is what the model says a hook panicked with: "create",
// "prepare" (IsReady or Prepare) or "reset". A Destroy's panic reaches no
// caller.
type fzPanic string

// fzPanicNames are the harness's hooks, as the model names their panics.
var fzPanicNames = [numHooks]fzPanic{onCreate: "create", onIsReady: "prepare", onPrepare: "prepare",
	onReset: "reset", onDestroy: "destroy"}

// fzScheduled is the script's say over the faults harness, whose decide it
// is: the pool's copy of the plan, each hook's next call taking the oldest
// fault scheduled for it. The factory and the Preparer take theirs in
// their lease's turn (see fzAwaitTurn), so in the model's order; Destroy
// takes its own once the script lets it go on (see awaitGate).
type fzScheduled struct {
	mu          sync.Mutex
	plan        fzPlan
	prepareFail bool // IsReady said not ready, and Prepare must fail
	// gate, when not nil, holds back every Destroy call until it is
	// closed; held counts the Destroy calls waiting at it now.
	gate chan struct{}
	held int
}

func (s *fzScheduled) decide(ctx context.Context, h faultHook) faultKind {
	fzAwaitTurn(ctx)
	if h == onDestroy {
		s.awaitGate()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var f fzFault
	switch h {
	case onCreate:
		f = fzNext(&s.plan.create)
	case onIsReady:
		f = fzNext(&s.plan.prep)
		s.prepareFail = f == fzNotReadyFail
	case onPrepare:
		if s.prepareFail {
			return faultFail
		}
	case onReset:
		f = fzNext(&s.plan.reset)
	case onDestroy:
		f = fzNext(&s.plan.destroy)
	}
	return [...]faultKind{fzFine: faultNone, fzFail: faultFail, fzBoom: faultPanic,
		fzNotReady: faultNotReady, fzNotReadyFail: faultNotReady}[f]
}

func (s *fzScheduled) schedule(f func(*fzPlan)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.plan)
}

// awaitGate holds a Destroy call back while the gate is up. The harness
// has counted the item destroyed by then (faults.destroy): it is no
// longer alive, but its Destroy has not ended.
func (s *fzScheduled) awaitGate() {
	s.mu.Lock()
	g := s.gate
	if g != nil {
		s.held++
	}
	s.mu.Unlock()
	if g == nil {
		return
	}
	<-g
	s.mu.Lock()
	s.held--
	s.mu.Unlock()
}

// holdDestroys puts the gate up: the Destroy calls that start from now on
// wait at it.
func (s *fzScheduled) holdDestroys() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
}

// releaseDestroys takes the gate down: the Destroy calls waiting at it go
// on, and those that start from now on do not wait.
func (s *fzScheduled) releaseDestroys() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

// heldDestroys returns how many Destroy calls wait at the gate.
func (s *fzScheduled) heldDestroys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// fzTurnKey keys, in a queued lease's ctx, its fzWaiter. The factory and
// the Preparer, whose ctx carries the lease's values, wait for the waiter's
// turn before they do anything: when several waiters are granted at once
// (SetMaxSize growing, Destroy calls ending), their leases go on
// concurrently, and the turns make them call user code in the model's
// order, one lease after another.
type fzTurnKey struct{}

// fzAwaitTurn waits, when ctx is a queued lease's, until settle gives that
// lease its turn (or the script ends).
func fzAwaitTurn(ctx context.Context) {
	if w, ok := ctx.Value(fzTurnKey{}).(*fzWaiter); ok {
		select {
		case <-w.currentTurn():
		case <-w.abort:
		}
	}
}

// fzKind classifies an outcome.
type fzKind int

const (
	fzOK          fzKind = iota
	fzClosed             // ErrClosed
	fzExhausted          // ErrExhausted: TryLease found no room, or leases waiting
	fzQueueFull          // ErrExhausted, naming MaxQueuedLeases: Lease found that many waiting
	fzTimeout            // ErrLeaseTimeout
	fzCanceled           // context.Canceled
	fzCreateErr          // the factory's error, wrapped
	fzPrepareErr         // the Preparer's error, wrapped
	fzDestroyErr         // Close or Shutdown: the joined Destroy errors (panics as errors)
	fzPanicked           // user code panicked, and the panic reached the caller
	fzMisuse             // Value or Detach on an ended lease panicked
	fzQueued             // the lease queued: it goes on on a goroutine of its own
	fzInvalid            // ErrInvalidOptions (SetMaxSize)
	fzRoundFailed        // an upkeep round reported a failed creation
	fzOther              // anything else: never expected
)

var fzKindNames = [...]string{"ok", "ErrClosed", "ErrExhausted", "ErrExhausted (MaxQueuedLeases)", "ErrLeaseTimeout", "Canceled",
	"create error", "prepare error", "destroy error", "panic", "misuse panic", "queued",
	"ErrInvalidOptions", "round failed", "other"}

func (k fzKind) String() string { return fzKindNames[k] }

// fzOutcome is what an operation returned: its kind, the item (for a
// lease, Value or Detach) and the panic value (for fzPanicked).
type fzOutcome struct {
	kind  fzKind
	id    int
	panic fzPanic
}

func (o fzOutcome) String() string {
	switch o.kind {
	case fzOK:
		return fmt.Sprintf("ok(item %d)", o.id)
	case fzPanicked:
		return fmt.Sprintf("panic(%s)", string(o.panic))
	}
	return o.kind.String()
}

// fzClassify turns what a call returned (or, when panicked, panicked with)
// into an outcome.
func fzClassify(err error, recovered any, panicked bool) fzOutcome {
	if panicked {
		switch v := panicValue(recovered).(type) {
		case injectedFault:
			if v.kind == faultPanic {
				return fzOutcome{kind: fzPanicked, panic: fzPanicNames[v.hook]}
			}
		case string:
			if strings.HasPrefix(v, "pool: Lease.") {
				return fzOutcome{kind: fzMisuse}
			}
		}
		return fzOutcome{kind: fzOther, panic: fzPanic(fmt.Sprint(recovered))}
	}
	switch {
	case err == nil:
		return fzOutcome{kind: fzOK}
	case errors.Is(err, ErrClosed):
		return fzOutcome{kind: fzClosed}
	case errors.Is(err, ErrExhausted) && strings.Contains(err.Error(), "MaxQueuedLeases"):
		return fzOutcome{kind: fzQueueFull}
	case errors.Is(err, ErrExhausted):
		return fzOutcome{kind: fzExhausted}
	case errors.Is(err, ErrLeaseTimeout):
		return fzOutcome{kind: fzTimeout}
	case errors.Is(err, context.Canceled):
		return fzOutcome{kind: fzCanceled}
	case errors.Is(err, injectedFault{onCreate, faultFail}):
		return fzOutcome{kind: fzCreateErr}
	case errors.Is(err, injectedFault{onIsReady, faultFail}), errors.Is(err, injectedFault{onPrepare, faultFail}):
		return fzOutcome{kind: fzPrepareErr}
	case errors.Is(err, injectedFault{onDestroy, faultFail}), errors.Is(err, injectedFault{onDestroy, faultPanic}):
		return fzOutcome{kind: fzDestroyErr}
	case errors.Is(err, ErrInvalidOptions):
		return fzOutcome{kind: fzInvalid}
	}
	return fzOutcome{kind: fzOther, panic: fzPanic(err.Error())}
}

// fzCall is the outcome of a call that returns no error, given what
// catchPanic returned.
func fzCall(recovered any, panicked bool) fzOutcome { return fzClassify(nil, recovered, panicked) }

// fzItem is the model's view of one item.
type fzItem struct {
	era             int   // the Clears before its creation began: see clear
	created, idleAt int64 // on the pool's clock
	checkedAt       int64 // the upkeep's last successful check, on the pool's clock
	checked         bool  // the Preparer has accepted it once
	uses            int   // its leases
}

// fzLeaseRec is one lease in the model; every handle to it shares it.
type fzLeaseRec struct {
	id    int
	it    *faultItem // the real item, which the script holds (faults.hold) until the lease ends
	ended bool
}

// fzHandle is a Lease value the script kept, and the lease it belongs to.
type fzHandle struct {
	l   Lease[*faultItem]
	rec *fzLeaseRec
}

// fzWaiter is a lease that queued, once or more: the model's and the real
// one. The model makes it when the lease queues; the run starts the real
// Lease and gives it its turns.
type fzWaiter struct {
	ticket uint64 // its place in line, from its first wait (see fzModel.acquire)
	cancel context.CancelFunc
	done   chan fzGot // the real Lease's result
	abort  chan struct{}
	// turn is closed when the waiter's lease may call user code: at
	// first (a lease may check an idle item before it queues) and then
	// for each grant (see giveTurn, newTurn); abort, when the script ends.
	mu   sync.Mutex
	turn chan struct{}
}

// currentTurn returns the channel of the waiter's turn now.
func (w *fzWaiter) currentTurn() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.turn
}

// newTurn makes the waiter wait for its next turn: once it has queued,
// for its next grant.
func (w *fzWaiter) newTurn() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.turn = make(chan struct{})
}

// giveTurn lets the waiter's lease call user code.
func (w *fzWaiter) giveTurn() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.turn:
	default:
		close(w.turn)
	}
}

// fzGrant is one grant to a waiter: the item handed over (0: a bare
// permit), and what the model's lease did with it, once it has gone on
// (runGranted): its outcome, or fzQueued when it queued again, then with
// queuedAt, the waiters queued right after it did.
type fzGrant struct {
	w        *fzWaiter
	item     int
	pending  bool
	want     fzOutcome
	queuedAt int
}

// fzGot is what a queued Lease returned on its goroutine.
type fzGot struct {
	l         Lease[*faultItem]
	err       error
	recovered any
	panicked  bool
}

// fzModel is the documented pool, sequential and counted by hand.
type fzModel struct {
	maxSize, minSize                         int
	minIdle, maxQueued, maxUses              int
	idleTimeout, maxLifetime, checkAfterIdle int64
	prep, reset, leaseTimeout                bool
	judge, stamp, plain                      bool
	upkeep                                   bool // UpkeepInterval is set: the floor applies to idle expiry

	plan   fzPlan
	now    int64
	era    int // the Clears so far: an item of an older era is retired
	nextID int
	items  map[int]*fzItem // every item in existence, but those on their way to their Destroy
	slot   int             // the item parked in the (one) processor's slot; 0: none
	queue  []int           // the idle queue, oldest first; leases take the newest
	// held counts the permits held: leased items, the parked one, work in
	// progress and the items in dying.
	held int
	// dying holds, by reason, the items handed to their Destroy that has
	// not ended: each keeps its permit, in held (Stats.Destroying).
	dying  []reason
	closed bool
	// bypassOn: the slots' bypass flag stayed on after its need passed
	// (see bypass).
	bypassOn bool
	waiters  []*fzWaiter // queued, in the order of their tickets
	// issued: the last ticket a lease queuing for the first time got (see
	// acquire); queued: the waiter that the last lease to queue got.
	issued  uint64
	queued  *fzWaiter
	granted []*fzGrant // granted during the current step, in the order of the grants
	// sparesAsked: an ask for spares is pending (MinIdle); sparesOwed: the
	// last spares round failed, and runs again.
	sparesAsked, sparesOwed bool
	st                      Stats // the counters
	// What the metrics must show, when on: items destroyed by reason,
	// failed leases by error.type, factory and Preparer calls, and leases
	// that queued and succeeded (the wait_time histogram's count).
	destroyedBy             [numReasons]int64
	leaseErrs               [numErrTypes]int64
	factoryCalls, prepCalls int64
	waitedOK                int64
	faults                  int // faults injected: failures and panics of user code
	// sweepEvery and sweepAt: the first lease or release that judges or
	// stamps an item at sweepAt or later sweeps the idle items for expiry.
	sweepEvery, sweepAt int64
}

// sweep is the sweep for expiry that a lease or release reading the clock
// runs when one is due: destroyExpired, and the next sweep a period on.
func (m *fzModel) sweep() {
	if m.sweepEvery == 0 || m.now < m.sweepAt {
		return
	}
	m.sweepAt = m.now + m.sweepEvery
	m.destroyExpired()
}

// destroyExpired is the sweep's work, and the upkeep round's first step:
// the parked item joins the queue (or goes to a waiter), and every expired
// queued item is taken out with a permit, oldest first, and handed to its
// Destroy. With the upkeep on, an item that expired only by idling stays
// while MinSize or fewer items exist, counted as held + idle (those on
// their way to their Destroy among them), one fewer for each item taken.
func (m *fzModel) destroyExpired() {
	if id := m.slot; id != 0 {
		m.slot = 0
		m.giveBackLocked(id)
	}
	floor := 0
	if m.upkeep {
		floor = m.minSize
	}
	n := m.held + len(m.queue)
	var swept, kept []int
	for _, id := range m.queue {
		why, expired := m.expired(m.items[id])
		if !expired || why == reasonIdle && n <= floor {
			kept = append(kept, id)
			continue
		}
		n--
		swept = append(swept, id)
	}
	m.queue = kept
	m.held += len(swept)
	for _, id := range swept {
		why, _ := m.expired(m.items[id])
		m.toDestroy(id, why)
	}
}

// next takes the fault scheduled for a hook's next call, counting the
// ones that make it fail or panic.
func (m *fzModel) next(q *[]fzFault) fzFault {
	f := fzNext(q)
	if f == fzFail || f == fzBoom || f == fzNotReadyFail {
		m.faults++
	}
	return f
}

// bypass says whether the slots are bypassed: the pool is closed, leases
// queue, or a shrink has not finished.
func (m *fzModel) bypass() bool { return m.bypassOn || m.bypassNeeded() }

// bypassNeeded says whether the slots must be bypassed now. The flag comes
// on with the need, and goes off only when an item goes idle, or its room
// comes free, with nothing needing it, or an item goes to its Destroy
// during a shrink (see gate.setBypass): bypassOn keeps it on in between.
func (m *fzModel) bypassNeeded() bool { return m.closed || len(m.waiters) > 0 || m.shrinking() }

// alive counts the items in existence that are not on their way to their
// Destroy: held + idle (the parked one among the held), less dying.
func (m *fzModel) alive() int { return m.held - len(m.dying) + len(m.queue) }

// shrinking says whether SetMaxSize left more items alive than MaxSize:
// then an item that comes back is refused and destroyed, until the items
// fit. The items on their way to their Destroy are not shed again.
func (m *fzModel) shrinking() bool { return m.alive() > m.maxSize }

// wouldWait says whether a Lease now would have to queue for a permit.
func (m *fzModel) wouldWait() bool {
	return !m.closed && (len(m.waiters) > 0 || m.slot == 0 && len(m.queue) == 0 && m.held >= m.maxSize)
}

func (m *fzModel) parked() int {
	if m.slot != 0 {
		return 1
	}
	return 0
}

// expectedStats are the figures Stats must show now. WaitTime is real time:
// the caller checks it apart.
func (m *fzModel) expectedStats() Stats {
	s := m.st
	s.ItemsAvailable = len(m.queue) + m.parked()
	s.ActiveLeases = m.held - m.parked()
	s.ItemsAllocated = s.ItemsAvailable + s.ActiveLeases
	s.QueuedLeases = len(m.waiters)
	s.Destroying = len(m.dying)
	return s
}

// leaseEnded counts a lease's outcome for the metrics; waited says it
// queued.
func (m *fzModel) leaseEnded(o fzOutcome, waited bool) {
	t, ok := map[fzKind]errType{fzTimeout: errTimeout, fzCanceled: errCanceled, fzClosed: errClosed,
		fzExhausted: errExhausted, fzQueueFull: errExhausted, fzCreateErr: errCreate, fzPrepareErr: errPrepare}[o.kind]
	switch {
	case ok:
		m.leaseErrs[t]++
	case o.kind == fzOK && waited:
		m.waitedOK++
	}
}

func (m *fzModel) newItem() int {
	m.nextID++
	m.items[m.nextID] = &fzItem{era: m.era, created: m.now, idleAt: m.now}
	m.st.Created++
	return m.nextID
}

// create is a factory call's fault, counted in CreateErrors when it fails.
func (m *fzModel) create() fzFault {
	m.factoryCalls++
	f := m.next(&m.plan.create)
	if f == fzFail || f == fzBoom {
		m.st.CreateErrors++
	}
	return f
}

// retired says that item id began its creation before the last Clear: the
// pool destroys it where it would lend it or make it idle again.
func (m *fzModel) retired(id int) bool { return m.items[id].era != m.era }

// leased completes a lease of id. A lease that did not take its item from
// the slot on the fast path asks for spares (see lease).
func (m *fzModel) leased(id int, asks bool) fzOutcome {
	m.st.Leases++
	m.items[id].uses++
	if asks && m.minIdle > 0 {
		m.sparesAsked = true
	}
	return fzOutcome{kind: fzOK, id: id}
}

// lease is Lease (try: TryLease) with a live or a canceled ctx. A lease
// that queues gets a waiter of its own, m.queued.
func (m *fzModel) lease(try, canceled bool) fzOutcome {
	if canceled { // an ended ctx takes nothing, even with an item idle
		m.st.Canceled++
		return fzOutcome{kind: fzCanceled}
	}
	if !m.bypass() && m.slot != 0 { // the fast path: this processor's slot
		id := m.slot
		m.slot = 0
		return m.obtain(nil, id, try, true) // reusing it, the lease asks for no spares
	}
	id, o, ok := m.acquire(nil, try, false)
	switch {
	case !ok:
		return o
	case id != 0 && m.plain:
		return m.leased(id, true)
	}
	return m.obtain(nil, id, try, false)
}

// acquire is the gate's acquire, for the lease of w (nil: one that has not
// queued yet): when nobody queues, the newest queued idle item or the
// parked one, with a permit, or a bare permit when one is free; ok then.
// Otherwise the lease is refused (TryLease; or MaxQueuedLeases waiting
// already, unless it asks again), times out (LeaseTimeout: nobody can
// release within its microsecond), or queues, in w or a fresh waiter: its
// outcome then. It queues at the tail with a new ticket or, when it asks
// again after the item it held failed its judgement, with the ticket of
// its first wait (0: it never waited), ahead of the leases that first
// queued after it ("Waiting and errors").
func (m *fzModel) acquire(w *fzWaiter, try, again bool) (id int, o fzOutcome, ok bool) {
	if m.closed {
		return 0, fzOutcome{kind: fzClosed}, false
	}
	if len(m.waiters) == 0 { // nobody queues: a newcomer may not overtake them
		if n := len(m.queue); n > 0 {
			id = m.queue[n-1] // the newest: see ring.go
			m.queue = m.queue[:n-1]
			m.held++
			return id, fzOutcome{}, true
		}
		if id = m.slot; id != 0 { // it brings its permit
			m.slot = 0
			return id, fzOutcome{}, true
		}
		if m.held < m.maxSize {
			m.held++
			return 0, fzOutcome{}, true
		}
	}
	switch {
	case try:
		m.st.Refused++
		return 0, fzOutcome{kind: fzExhausted}, false
	case !again && m.maxQueued > 0 && len(m.waiters) >= m.maxQueued:
		m.st.Refused++
		return 0, fzOutcome{kind: fzQueueFull}, false
	case m.leaseTimeout:
		m.st.Waits++
		m.st.Timeouts++
		m.bypassOn = true // it queued for that microsecond: see bypass
		return 0, fzOutcome{kind: fzTimeout}, false
	}
	if w == nil {
		w = &fzWaiter{}
	}
	if again {
		i := 0
		for i < len(m.waiters) && m.waiters[i].ticket <= w.ticket {
			i++
		}
		m.waiters = slices.Insert(m.waiters, i, w)
	} else {
		m.issued++
		w.ticket = m.issued
		m.waiters = append(m.waiters, w)
	}
	m.queued = w
	m.bypassOn = true
	return 0, fzOutcome{kind: fzQueued}, false
}

// obtain turns a held permit, with item id or none (0), into a leased item
// for the lease of w (nil: one that has not queued): the documented lease
// after the permit (doc.go, "Lifecycle of an item": Leased). An idle item
// that is expired or fails its check goes to its Destroy with the permit,
// once the lease has asked the gate for another (acquire, again), which
// comes to the same here: a Destroy ends only in endDestroys. parked: id
// came from this processor's slot; a lease that reuses it asks for no
// spares (the doc comment of Options.MinIdle).
func (m *fzModel) obtain(w *fzWaiter, id int, try, parked bool) fzOutcome {
	for ; ; parked = false {
		if id == 0 {
			id = m.takeIdle()
		}
		if id == 0 {
			return m.createFresh()
		}
		if !m.judge {
			return m.leased(id, !parked)
		}
		if m.stamp {
			m.sweep()
		}
		it := m.items[id]
		why, expired := m.expired(it)
		if expired && why == reasonIdle && m.upkeep && m.held+len(m.queue) <= m.minSize {
			expired = false // with the upkeep on, idling never takes the pool below MinSize
		}
		if !expired && m.needsCheck(it) {
			switch m.prepare(it) {
			case fzBoom:
				m.toDestroy(id, reasonPrepare)
				return fzOutcome{kind: fzPanicked, panic: "prepare"}
			case fzFail:
				why, expired = reasonPrepare, true
			}
		}
		if !expired {
			return m.leased(id, !parked)
		}
		m.toDestroy(id, why)
		var o fzOutcome
		var ok bool
		if id, o, ok = m.acquire(w, try, true); !ok {
			return o
		}
	}
}

// createFresh creates an item for the permit the lease holds and, with a
// Preparer, checks it: a failure or panic of either frees the permit, or
// hands the fresh item to its Destroy with it.
func (m *fzModel) createFresh() fzOutcome {
	switch m.create() {
	case fzFail:
		m.free()
		return fzOutcome{kind: fzCreateErr}
	case fzBoom:
		m.free()
		return fzOutcome{kind: fzPanicked, panic: "create"}
	}
	id := m.newItem()
	if m.prep {
		switch m.prepare(m.items[id]) {
		case fzBoom:
			m.toDestroy(id, reasonPrepare)
			return fzOutcome{kind: fzPanicked, panic: "prepare"}
		case fzFail:
			m.toDestroy(id, reasonPrepare)
			return fzOutcome{kind: fzPrepareErr}
		}
	}
	return m.leased(id, true)
}

func (m *fzModel) expired(it *fzItem) (reason, bool) {
	if m.maxLifetime > 0 && m.now-it.created > m.maxLifetime {
		return reasonLifetime, true
	}
	if m.idleTimeout > 0 && m.now-it.idleAt > m.idleTimeout {
		return reasonIdle, true
	}
	return 0, false
}

func (m *fzModel) needsCheck(it *fzItem) bool {
	return m.prep && (!it.checked || m.checkAfterIdle == 0 || m.now-max(it.idleAt, it.checkedAt) >= m.checkAfterIdle)
}

// prepare runs IsReady (and Prepare) on it: fzFine, fzFail or fzBoom.
func (m *fzModel) prepare(it *fzItem) fzFault {
	m.prepCalls++
	switch m.next(&m.plan.prep) {
	case fzBoom:
		return fzBoom
	case fzFail, fzNotReadyFail:
		m.st.PrepareFailed++
		return fzFail
	}
	it.checked = true
	return fzFine
}

// takeIdle takes the newest queued item for a caller that holds a permit,
// else a parked one (whose own permit it frees), else none.
func (m *fzModel) takeIdle() int {
	if len(m.queue) > 0 {
		id := m.queue[len(m.queue)-1]
		m.queue = m.queue[:len(m.queue)-1]
		return id
	}
	if id := m.slot; id != 0 {
		m.slot = 0
		m.free()
		return id
	}
	return 0
}

// The model's gate, named after the pool's (the model, sequential, has no
// lock to hold: the names are the gate's).

// giveBackLocked is the gate's giveBackLocked: idle item id and the permit
// the caller holds for it go to the oldest waiter, whose lease then goes
// on, or the item joins the queue and the permit comes free. The gate is
// open (see giveBackToGate), or the gate moves a parked item.
func (m *fzModel) giveBackLocked(id int) {
	if len(m.waiters) > 0 {
		m.grant(id)
		return
	}
	m.queue = append(m.queue, id)
	m.held--
	m.bypassOn = m.bypassNeeded()
}

// free is the gate's free: a permit the caller holds with no item (it was
// destroyed or detached, or its creation failed) goes to the oldest
// waiter, as the right to create a fresh item, or comes free. While the
// items in existence, those on their way to their Destroy among them,
// exceed MaxSize, it retires instead of going to a waiter.
func (m *fzModel) free() {
	if m.held+len(m.queue) <= m.maxSize && len(m.waiters) > 0 {
		m.grant(0)
		return
	}
	m.held--
	m.bypassOn = m.bypassNeeded()
}

// grant gives the oldest waiter item id, or a bare permit (0). Its lease
// goes on on its own goroutine, which calls user code only in its turn,
// after the step (see fzAwaitTurn): so the model goes on with it then too,
// in runGranted.
func (m *fzModel) grant(id int) {
	w := m.waiters[0]
	m.waiters = m.waiters[1:]
	m.st.Waits++
	m.granted = append(m.granted, &fzGrant{w: w, item: id, pending: true})
}

// runGranted goes on with the leases of the waiters granted during the
// step, in the order of their grants; a grant made on the way joins the
// end. A lease that queues again records how many waiters queued then.
func (m *fzModel) runGranted() {
	for i := 0; i < len(m.granted); i++ {
		if g := m.granted[i]; g.pending {
			g.pending = false
			g.want = m.obtain(g.w, g.item, false, false)
			g.queuedAt = len(m.waiters)
		}
	}
}

// toDestroy is the pool's destroyer.later: item id, whose permit the caller
// holds, goes to its Destroy with that permit, which it keeps until the
// Destroy ends (endDestroys). During a shrink, its leaving may let the
// items fit.
func (m *fzModel) toDestroy(id int, why reason) {
	delete(m.items, id)
	shrinking := m.shrinking()
	m.dying = append(m.dying, why)
	if shrinking {
		m.bypassOn = m.bypassNeeded()
	}
}

// endDestroys ends every Destroy under way. Each takes the fault scheduled
// for the next Destroy (a failure or a panic is counted in DestroyErrors,
// and reaches no caller), counts as destroyed, for its reason, and frees
// its permit. It returns how many failed or panicked: Close returns those
// as errors.
func (m *fzModel) endDestroys() (failed int) {
	for _, why := range m.dying {
		m.st.Destroyed++
		m.destroyedBy[why]++
		switch why {
		case reasonIdle:
			m.st.IdleExpired++
		case reasonLifetime:
			m.st.LifetimeExpired++
		case reasonUses:
			m.st.UsesExpired++
		}
		if f := m.next(&m.plan.destroy); f == fzFail || f == fzBoom {
			m.st.DestroyErrors++
			failed++
		}
	}
	for len(m.dying) > 0 {
		m.dying = m.dying[1:]
		m.free()
	}
	return failed
}

// giveBackToGate is the pool's giveBackToGate: item id, whose permit the
// caller holds, goes through the gate (to the oldest waiter or the queue's
// tail), unless the pool is closed or shrinking: then the gate refuses it,
// and it goes to its Destroy.
func (m *fzModel) giveBackToGate(id int) {
	switch {
	case m.closed:
		m.toDestroy(id, reasonClose)
	case m.shrinking():
		m.toDestroy(id, reasonResize)
	default:
		m.giveBackLocked(id)
	}
}

// release ends the lease rec with Release.
func (m *fzModel) release(rec *fzLeaseRec) fzOutcome {
	if rec.ended {
		return fzOutcome{}
	}
	rec.ended = true
	id := rec.id
	if m.retired(id) { // leased before a Clear: retired, not reset or reused
		m.toDestroy(id, reasonClear)
		return fzOutcome{}
	}
	if m.maxUses > 0 && m.items[id].uses >= m.maxUses { // its last lease: not reset
		m.toDestroy(id, reasonUses)
		return fzOutcome{}
	}
	if m.reset {
		switch m.next(&m.plan.reset) {
		case fzFail:
			m.toDestroy(id, reasonReset)
			return fzOutcome{}
		case fzBoom:
			m.toDestroy(id, reasonReset)
			return fzOutcome{kind: fzPanicked, panic: "reset"}
		}
	}
	if m.stamp {
		m.sweep()
		it := m.items[id]
		if m.maxLifetime > 0 && m.now-it.created > m.maxLifetime {
			m.toDestroy(id, reasonLifetime)
			return fzOutcome{}
		}
		it.idleAt = m.now
	}
	if !m.bypass() && m.slot == 0 {
		m.slot = id
		return fzOutcome{}
	}
	m.giveBackToGate(id)
	return fzOutcome{}
}

func (m *fzModel) discard(rec *fzLeaseRec) fzOutcome {
	if rec.ended {
		return fzOutcome{}
	}
	rec.ended = true
	m.toDestroy(rec.id, reasonDiscard)
	return fzOutcome{}
}

func (m *fzModel) detach(rec *fzLeaseRec) fzOutcome {
	if rec.ended {
		return fzOutcome{kind: fzMisuse}
	}
	rec.ended = true
	delete(m.items, rec.id)
	m.st.Detached++
	m.free()
	return fzOutcome{kind: fzOK, id: rec.id}
}

// drain takes every idle item, queued then parked, with a permit each, and
// hands them to their Destroy: Clear's and Close's first half.
func (m *fzModel) drain(why reason) {
	ids := append(m.queue, m.slot)
	m.held += len(m.queue)
	m.queue, m.slot = nil, 0
	for _, id := range ids {
		if id != 0 {
			m.toDestroy(id, why)
		}
	}
}

// clear is Clear: a new era, and the idle items drained. Clear raises
// nothing: the Destroy calls run on the pool's goroutines, and so does the
// refill, once they have ended (refill).
func (m *fzModel) clear() fzOutcome {
	m.era++
	m.drain(reasonClear)
	return fzOutcome{}
}

// refill is Clear's refill, in the background once the Destroy calls of
// the items Clear took out have ended (the run waits for it): the idle
// items up to MinSize, through the gate; a failure or panic of the
// factory ends it, logged.
func (m *fzModel) refill() { m.fillIdle(m.minSize) }

// fillIdle creates idle items, one at a time, while fewer than n are idle,
// no lease waits and MaxSize allows (held + idle, those on their way to
// their Destroy among them); each goes through the gate. A failed or
// panicking creation gives its permit back and ends it: false. Clear's
// refill (n: MinSize) and the spares task (n: MinIdle) fill so.
func (m *fzModel) fillIdle(n int) bool {
	for !m.closed && len(m.waiters) == 0 && m.held+len(m.queue) < m.maxSize && len(m.queue)+m.parked() < n {
		m.held++
		if f := m.create(); f == fzFail || f == fzBoom {
			m.free()
			return false
		}
		m.giveBackToGate(m.newItem())
	}
	return true
}

// spares is the spares task's round, when asked or owed one by a failed
// round (see FuzzPool's MinIdle): the idle items filled up to MinIdle. It
// reports whether the round ran and its outcome.
func (m *fzModel) spares() (ran, ok bool) {
	if !m.sparesAsked && !m.sparesOwed {
		return false, false
	}
	m.sparesAsked = false
	ok = m.fillIdle(m.minIdle)
	m.sparesOwed = !ok
	return true, ok
}

// close is Close: the waiters get ErrClosed, the idle items are destroyed,
// and Close waits for their Destroy calls, whose failures and panics it
// returns.
func (m *fzModel) close() fzOutcome {
	if m.closed {
		return fzOutcome{}
	}
	m.closed = true
	for _, w := range m.waiters {
		m.st.Waits++
		m.granted = append(m.granted, &fzGrant{w: w, want: fzOutcome{kind: fzClosed}})
	}
	m.waiters = nil
	m.drain(reasonClose)
	if m.endDestroys() > 0 {
		return fzOutcome{kind: fzDestroyErr}
	}
	return fzOutcome{}
}

// setMaxSize is SetMaxSize(n): the gate's resize, then the excess handed
// to its Destroy. Growing grants the oldest waiters, while the items in
// existence (held + idle) are fewer than n, a bare permit each: their
// leases go on to create. Shrinking below the items alive (those on their
// way to their Destroy left out) moves the parked item to the queue's tail
// (the slots' bypass comes on), then takes the excess from the queue's
// head, oldest first, a permit each, and destroys them all (reason resize).
// The rest of the excess is leased: see shrinking.
func (m *fzModel) setMaxSize(n int) fzOutcome {
	if n < 1 || n < m.minSize {
		return fzOutcome{kind: fzInvalid}
	}
	if m.closed {
		return fzOutcome{kind: fzClosed}
	}
	m.maxSize, m.st.MaxSize, m.st.Limit = n, n, n
	for len(m.waiters) > 0 && m.held+len(m.queue) < m.maxSize {
		m.held++
		m.grant(0)
	}
	over := m.alive() - m.maxSize
	if over > 0 {
		m.bypassOn = true
	}
	var excess []int
	if over > 0 && m.slot != 0 { // bypass comes on: the parked item goes idle, freeing its permit
		m.queue = append(m.queue, m.slot)
		m.slot = 0
		m.held--
	}
	for ; over > 0 && len(m.queue) > 0; over-- {
		excess = append(excess, m.queue[0])
		m.queue = m.queue[1:]
		m.held++
	}
	for _, id := range excess {
		m.toDestroy(id, reasonResize)
	}
	return fzOutcome{}
}

// upkeepRound is one round of the upkeep, run by the script: the expired
// idle items destroyed (with IdleTimeout or MaxLifetime), the idle items
// due a check checked (with a Preparer and CheckAfterIdle), spares asked
// for (with MinIdle), and items created up to MinSize. Its outcome is
// fzRoundFailed when a creation failed (upkeepRound reports false).
func (m *fzModel) upkeepRound() fzOutcome {
	if m.sweepEvery > 0 {
		m.destroyExpired()
	}
	if m.prep && m.checkAfterIdle > 0 {
		m.checkIdle()
	}
	if m.minIdle > 0 {
		m.sparesAsked = true
	}
	if !m.fillToMinSize() {
		return fzOutcome{kind: fzRoundFailed}
	}
	return fzOutcome{}
}

// checkIdle is the upkeep's check, at most MaxSize times: after unparking,
// take the oldest queued item due a check, with a permit, and prepare it. A
// failure or panic hands it to its Destroy (reason prepare) and the round
// goes on; a success stamps checkedAt and puts it through the gate: to the
// oldest waiter or the queue's tail.
func (m *fzModel) checkIdle() {
	for range m.maxSize {
		if id := m.slot; id != 0 {
			m.slot = 0
			m.giveBackLocked(id)
		}
		at := slices.IndexFunc(m.queue, func(id int) bool { return m.needsCheck(m.items[id]) })
		if at < 0 {
			return
		}
		id := m.queue[at]
		m.queue = slices.Delete(slices.Clone(m.queue), at, at+1)
		m.held++
		if m.prepare(m.items[id]) != fzFine {
			m.toDestroy(id, reasonPrepare)
			continue
		}
		m.items[id].checkedAt = m.now
		m.giveBackToGate(id)
	}
}

// fillToMinSize is the upkeep's creation: while no lease waits, fewer than
// MaxSize items exist (held + idle) and fewer than MinSize are alive (those
// on their way to their Destroy left out), take a permit and create an
// item, which goes through the gate. A failed or panicking creation gives
// the permit back and ends the round: false.
func (m *fzModel) fillToMinSize() bool {
	for !m.closed && len(m.waiters) == 0 && m.held+len(m.queue) < m.maxSize && m.alive() < m.minSize {
		m.held++
		if f := m.create(); f == fzFail || f == fzBoom {
			m.free()
			return false
		}
		m.giveBackToGate(m.newItem())
	}
	return true
}

// fzRun plays one script on a pool and on the model.
type fzRun struct {
	t       *testing.T
	p       *Pool[*faultItem]
	f       *faults
	sch     *fzScheduled // the faults harness's decide
	clk     *fakeClock
	m       *fzModel
	handles []fzHandle
	steps   int
	checks  int // comparisons of the whole state with the model's
	// timeouts counts the leases that timed out: each waits for a real
	// timer, which takes a millisecond, so a script gets fzMaxTimeouts.
	timeouts int
	reader   *sdkmetric.ManualReader // the metrics, when on
	abort    chan struct{}           // closed when the script ends: no waiter waits for its turn
}

const (
	fzIdleTimeout    = 10 * time.Millisecond
	fzMaxLifetime    = 25 * time.Millisecond
	fzCheckAfterIdle = 5 * time.Millisecond
	fzUpkeepInterval = time.Hour // never elapses during a script
	fzMaxOps         = 300
	fzMaxTimeouts    = 8
	fzMaxUses        = 2 // MaxUses, when the extended configuration sets it
)

// fzConfig is a script's configuration, as its first bytes give it.
type fzConfig struct {
	c0, c1 byte
	// c2 is the third byte of an extended configuration, which has one
	// when c0's top two bits are 11 (see newFzRun).
	c2       byte
	extended bool
}

// fzConfigOf splits a script into its configuration and its operations.
func fzConfigOf(script []byte) (fzConfig, []byte) {
	for len(script) < 2 {
		script = append(script, 0)
	}
	c := fzConfig{c0: script[0], c1: script[1]}
	ops := script[2:]
	if c.c0>>6 == 3 {
		c.extended = true
		if len(ops) > 0 {
			c.c2, ops = ops[0], ops[1:]
		}
	}
	return c, ops
}

// newFzRun makes a pool and its model from the script's configuration
// bytes: MaxSize 1–4 and MinSize from the first; from the second,
// IdleTimeout, MaxLifetime, a Preparer, CheckAfterIdle, Reset, a
// LeaseTimeout (then a lease that would queue times out instead),
// TrackLeaseSites and metrics (an SDK MeterProvider), one bit each.
//
// The upkeep: every bit of both bytes was taken, so it is on when the
// first byte's top two bits are 10 (128–191), a range where no script of
// the committed corpus had its first byte: they all decode as before, and
// MinSize's formula is unchanged. UpkeepInterval is then an hour, so that
// its goroutine never runs a round during a script; the script runs
// rounds itself (opUpkeep), on the fake clock.
//
// The extended configurations: when the first byte's top two bits are 11
// (192–255), a third byte follows: MinIdle from its low three bits (modulo
// MaxSize + 1), MaxQueuedLeases 0–3 from the next two, the upkeep from the
// next, and MaxUses fzMaxUses from the next (the top one is left for later). The committed scripts that
// had their first byte there were rewritten with one in 0–127 that
// decodes to the same MaxSize and MinSize.
func newFzRun(t *testing.T, c fzConfig) *fzRun {
	maxSize := 1 + int(c.c0%4)
	minSize := int(c.c0>>2) % (maxSize + 1)
	upkeep := c.c0>>6 == 2
	var minIdle, maxQueued, maxUses int
	if c.extended {
		minIdle = int(c.c2&7) % (maxSize + 1)
		maxQueued = int(c.c2>>3) & 3
		upkeep = c.c2&32 != 0
		if c.c2&64 != 0 {
			maxUses = fzMaxUses
		}
	}
	c1 := c.c1
	sch := &fzScheduled{}
	f := newFaults(t, 0)
	f.max = 4 // the largest MaxSize a script can set
	f.decide = sch.decide
	f.on.Store(true)
	opts := Options[*faultItem]{Name: "fuzz", MaxSize: maxSize, MinSize: minSize, MaxQueuedLeases: maxQueued, MaxUses: maxUses, Destroy: f.destroy}
	m := &fzModel{maxSize: maxSize, minSize: minSize, minIdle: minIdle, maxQueued: maxQueued, maxUses: maxUses, items: map[int]*fzItem{}, upkeep: upkeep}
	if upkeep {
		opts.UpkeepInterval = fzUpkeepInterval
	}
	m.st.Name, m.st.MaxSize, m.st.Limit, m.st.MinSize, m.st.MinIdle = opts.Name, maxSize, maxSize, minSize, minIdle
	if c1&1 != 0 {
		opts.IdleTimeout, m.idleTimeout = fzIdleTimeout, int64(fzIdleTimeout)
	}
	if c1&2 != 0 {
		opts.MaxLifetime, m.maxLifetime = fzMaxLifetime, int64(fzMaxLifetime)
	}
	if c1&4 != 0 {
		opts.Preparer, m.prep = f, true
		if c1&8 != 0 {
			opts.CheckAfterIdle, m.checkAfterIdle = fzCheckAfterIdle, int64(fzCheckAfterIdle)
		}
	}
	if c1&16 != 0 {
		opts.Reset, m.reset = f.reset, true
	}
	if c1&32 != 0 {
		// Real time, as short as a timer goes: nothing else runs while a
		// lease waits, so nothing can reach it in time anyway.
		opts.LeaseTimeout, m.leaseTimeout = time.Microsecond, true
	}
	opts.TrackLeaseSites = c1&64 != 0
	m.sweepEvery = sweepPeriod(time.Duration(m.idleTimeout), time.Duration(m.maxLifetime))
	m.sweepAt = m.sweepEvery
	var reader *sdkmetric.ManualReader
	if c1&128 != 0 {
		opts.MeterProvider, reader = mtProvider(t)
	}
	m.judge = m.prep || m.idleTimeout > 0 || m.maxLifetime > 0
	m.stamp = m.idleTimeout > 0 || m.maxLifetime > 0 || m.prep && m.checkAfterIdle > 0
	m.plain = !m.judge

	p, err := New[*faultItem](context.Background(), f, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p.g.slots.s, p.g.slots.mask = p.g.slots.s[:1], 0 // one slot: see Determinism above
	clk := &fakeClock{}
	p.clk.fake = clk.now
	// Seeding read the real clock: put the seeded items on the fake one,
	// at 0, as the model has them; and it ran the creations in parallel:
	// put the items in the order of their ids, as the model has them.
	p.g.mu.Lock()
	for _, e := range p.g.idle {
		e.deadline, e.idleAt = p.ex.deadline(0), 0
	}
	slices.SortFunc(p.g.idle, func(a, b *entry[*faultItem]) int { return a.value.id - b.value.id })
	p.g.mu.Unlock()
	for range minSize {
		m.factoryCalls++
		m.queue = append(m.queue, m.newItem())
	}
	r := &fzRun{t: t, p: p, f: f, sch: sch, clk: clk, m: m, reader: reader, abort: make(chan struct{})}
	// The keeper's creations, played by the script (see MinIdle above, and
	// Clear's refill): the keeper New started sleeps until Close
	// (UpkeepInterval is an hour); asks go to one that never starts, and
	// Close finds it ended.
	p.kp = newKeeper(p)
	p.kp.started.Store(true)
	close(p.kp.stopped)

	if minIdle > 0 {
		// New asks the keeper for a first round of spares.
		p.opts.MinIdle = minIdle
		p.kp.ask(wantSpares)
		m.sparesAsked = true
		r.spares()
	}
	sch.holdDestroys()
	return r
}

// fail reports a mismatch between the pool and the model, with the step.
func (r *fzRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("step %d: "+format, append([]any{r.steps}, args...)...)
}

// expect compares an operation's outcome with the model's.
func (r *fzRun) expect(what string, got, want fzOutcome) {
	r.t.Helper()
	if got != want {
		r.fail("%s: got %v, the model says %v", what, got, want)
	}
}

// lease runs Lease or TryLease and the model's, then settles the waiters.
func (r *fzRun) lease(try, canceled bool) {
	ctx := context.Background()
	if canceled {
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	}
	if !try && !canceled && r.m.leaseTimeout && r.m.wouldWait() {
		if r.timeouts == fzMaxTimeouts {
			return // each costs a timer's real millisecond: enough of them
		}
		r.timeouts++
	}
	want := r.m.lease(try, canceled)
	if want.kind == fzQueued {
		r.queue(r.m.queued)
		return
	}
	var l Lease[*faultItem]
	var err error
	rec, panicked := catchPanic(func() {
		if try {
			l, err = r.p.TryLease(ctx)
		} else {
			l, err = r.p.Lease(ctx)
		}
	})
	r.expect(fmt.Sprintf("Lease(try %v, canceled %v)", try, canceled), r.leased(l, err, rec, panicked), want)
	r.m.leaseEnded(want, false)
}

// leased classifies what a lease returned and, for a lease, holds its item
// and keeps the handle.
func (r *fzRun) leased(l Lease[*faultItem], err error, recovered any, panicked bool) fzOutcome {
	o := fzClassify(err, recovered, panicked)
	if o.kind != fzOK {
		return o
	}
	if it, ok := r.f.take(l); ok {
		o.id = it.id
		r.handles = append(r.handles, fzHandle{l: l, rec: &fzLeaseRec{id: o.id, it: it}})
	}
	return o
}

// ending is what the holder of rec does before it ends the lease: unhold
// the item, unless the lease has ended already.
func (r *fzRun) ending(rec *fzLeaseRec) {
	if !rec.ended {
		r.f.unhold(rec.it)
	}
}

// fzTurnOpen is a waiter's first turn: open, so that a lease may check an
// idle item before it queues.
var fzTurnOpen = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// queue starts, on a goroutine, a Lease that the model says queues, as w,
// and waits until the pool counts it queued; from then on it waits for its
// turn.
func (r *fzRun) queue(w *fzWaiter) {
	w.done, w.abort, w.turn = make(chan fzGot, 1), r.abort, fzTurnOpen
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), fzTurnKey{}, w))
	w.cancel = cancel
	go func() {
		var got fzGot
		got.recovered, got.panicked = catchPanic(func() { got.l, got.err = r.p.Lease(ctx) })
		w.done <- got
	}()
	r.awaitQueued(len(r.m.waiters), w)
}

// awaitQueued waits until the pool counts n leases queued, w's among
// them, and gives w a new turn for its grant.
func (r *fzRun) awaitQueued(n int, w *fzWaiter) {
	deadline := time.Now().Add(testWait)
	for r.p.Stats().QueuedLeases != n {
		select {
		case got := <-w.done:
			r.fail("a lease the model queues returned %v", fzClassify(got.err, got.recovered, got.panicked))
		default:
		}
		if time.Now().After(deadline) {
			r.fail("a lease did not queue (want %d queued): %+v", n, r.p.Stats())
		}
		runtime.Gosched()
	}
	w.newTurn()
}

// settle ends the step: it goes on with the leases granted during it, one
// turn each in the model's order (settleGranted), then lets the Destroy
// calls held back during it end (endDestroys), whose permits may grant
// more waiters; until no Destroy is held back.
func (r *fzRun) settle() {
	for {
		r.settleGranted()
		if len(r.m.dying) == 0 {
			return
		}
		r.check() // with the Destroy calls under way
		r.endDestroys()
	}
}

// settleGranted goes on, in the model, with the leases of the waiters
// granted during the step, then gives each real one its turn, in the order
// of the grants, and collects its result and compares it; or, when the
// model says it queued again, waits until the pool counts it queued.
func (r *fzRun) settleGranted() {
	r.m.runGranted()
	for _, g := range r.m.granted {
		w := g.w
		w.giveTurn()
		if g.want.kind == fzQueued {
			r.awaitQueued(g.queuedAt, w)
			continue
		}
		var got fzGot
		select {
		case got = <-w.done:
		case <-time.After(testWait):
			r.fail("a granted waiter did not return")
		}
		w.cancel() // the lease is over: its ctx no longer matters
		r.expect("queued Lease", r.leased(got.l, got.err, got.recovered, got.panicked), g.want)
		r.m.leaseEnded(g.want, true)
	}
	r.m.granted = r.m.granted[:0]
}

// endDestroys lets the Destroy calls held back end, waits for them, and
// ends them in the model; the Destroy calls that start from then on are
// held back again.
func (r *fzRun) endDestroys() {
	r.sch.releaseDestroys()
	awaitDestroys(r.t, r.p)
	r.sch.holdDestroys()
	r.m.endDestroys()
}

// awaitHeld waits until every Destroy call the model has under way waits
// at the gate: then each has counted its item destroyed (faults.destroy),
// and the items in existence are the model's.
func (r *fzRun) awaitHeld() {
	deadline := time.Now().Add(testWait)
	for r.sch.heldDestroys() != len(r.m.dying) {
		if time.Now().After(deadline) {
			r.fail("%d Destroy calls held back, the model has %d under way: %+v", r.sch.heldDestroys(), len(r.m.dying), r.p.Stats())
		}
		runtime.Gosched()
	}
}

// refill plays the keeper's round for Clear's refill, which Clear asked
// for when MinSize is set, once the Destroy calls it waits for have ended.
func (r *fzRun) refill() {
	if r.p.opts.MinSize == 0 {
		return
	}
	if r.p.kp.wants.And(^wantRefill)&wantRefill == 0 {
		r.fail("Clear asked for no refill: %+v", r.p.Stats())
	}
	r.p.kp.fillRound(r.p, wantRefill)
}

// spares plays the spares task at the end of a step (see MinIdle above):
// an ask must be pending exactly when the model made one, and then, or
// when the last round failed, the task's round runs, and the model's.
func (r *fzRun) spares() {
	if r.m.minIdle == 0 {
		return
	}
	asked := r.p.kp.wants.And(^wantSpares)&wantSpares != 0
	select {
	case <-r.p.kp.wake: // the wake-up, which nothing reads here
	default:
	}
	if asked != r.m.sparesAsked {
		r.fail("an ask for spares pending: %v; the model says %v", asked, r.m.sparesAsked)
	}
	ran, want := r.m.spares()
	if !ran {
		return
	}
	if ok := r.p.kp.fillRound(r.p, wantSpares) == 0; ok != want {
		r.fail("spares round: ok %v, the model says %v", ok, want)
	}
	r.settle()
}

// cancelWaiter cancels the i-th waiter while it waits.
func (r *fzRun) cancelWaiter(i int) {
	if len(r.m.waiters) == 0 {
		return
	}
	i %= len(r.m.waiters)
	w := r.m.waiters[i]
	r.m.waiters = slices.Delete(r.m.waiters, i, i+1)
	r.m.st.Waits++
	r.m.st.Canceled++
	w.cancel()
	select {
	case got := <-w.done:
		r.expect("canceled queued Lease", r.leased(got.l, got.err, got.recovered, got.panicked), fzOutcome{kind: fzCanceled})
		r.m.leaseEnded(fzOutcome{kind: fzCanceled}, true)
	case <-time.After(testWait):
		r.fail("a canceled waiter did not return")
	}
}

// handle picks a kept handle by the argument, or nil when there is none.
func (r *fzRun) handle(arg byte) *fzHandle {
	if len(r.handles) == 0 {
		return nil
	}
	return &r.handles[int(arg)%len(r.handles)]
}

// staleHandle picks a handle whose lease has ended, if any.
func (r *fzRun) staleHandle(arg byte) *fzHandle {
	var stale []int
	for i, h := range r.handles {
		if h.rec.ended {
			stale = append(stale, i)
		}
	}
	if len(stale) == 0 {
		return r.handle(arg)
	}
	return &r.handles[stale[int(arg)%len(stale)]]
}

func (r *fzRun) release(h *fzHandle) {
	r.ending(h.rec)
	want := r.m.release(h.rec)
	r.expect("Release", fzCall(catchPanic(h.l.Release)), want)
}

// step plays one operation, then settles the step, plays the spares task
// and compares the whole state.
func (r *fzRun) step(op, arg byte) {
	r.steps++
	m := r.m
	switch op % 20 {
	case 0, 1: // the common case twice as often
		r.lease(false, arg%4 == 3)
	case 2:
		r.lease(true, arg%4 == 3)
	case 3, 4:
		if h := r.handle(arg); h != nil {
			r.release(h)
		}
	case 5: // a double Release
		if h := r.handle(arg); h != nil {
			r.release(h)
			r.settle()
			r.release(h)
		}
	case 6: // a Release through a stale copy
		if h := r.staleHandle(arg); h != nil {
			r.release(h)
		}
	case 7: // a copy of a handle: the same lease
		if h := r.handle(arg); h != nil {
			r.handles = append(r.handles, *h)
		}
	case 8:
		if h := r.handle(arg); h != nil {
			r.ending(h.rec)
			want := m.discard(h.rec)
			r.expect("Discard", fzCall(catchPanic(h.l.Discard)), want)
		}
	case 9:
		if h := r.handle(arg); h != nil {
			held := !h.rec.ended
			if held { // the item leaves the pool: see faults.detaching
				r.f.unhold(h.rec.it)
				r.f.detaching(h.rec.it)
			}
			want := m.detach(h.rec)
			var it *faultItem
			got := fzCall(catchPanic(func() { it = h.l.Detach() }))
			if it != nil {
				got.id = it.id
				if held {
					r.f.disposed(it)
				}
			}
			r.expect("Detach", got, want)
		}
	case 10:
		if h := r.handle(arg); h != nil {
			want := fzOutcome{kind: fzMisuse}
			if !h.rec.ended {
				want = fzOutcome{kind: fzOK, id: h.rec.id}
			}
			var it *faultItem
			got := fzCall(catchPanic(func() { it = h.l.Value() }))
			if it != nil {
				got.id = it.id
			}
			r.expect("Value", got, want)
		}
	case 11:
		want := m.clear()
		got := fzCall(catchPanic(r.p.Clear))
		r.expect("Clear", got, want)
		// The refill starts once the Destroy calls of the idle items
		// Clear took out have ended; the model's is part of its Clear.
		r.settle()
		r.refill()
		m.refill()
	case 12:
		if arg%4 == 0 { // rarely: the script ends soon after
			r.close(false)
		} else if m.upkeep { // the other arguments: an upkeep round, with the upkeep on
			want := m.upkeepRound()
			var ok bool
			got := fzCall(catchPanic(func() { ok = r.p.kp.upkeepRound(r.p) }))
			if got.kind == fzOK && !ok {
				got.kind = fzRoundFailed
			}
			r.expect("upkeep round", got, want)
		}
	case 13:
		if arg%4 == 0 {
			r.close(true)
		} else { // the other arguments: SetMaxSize(1–4)
			n := 1 + int(arg>>2)%4
			want := m.setMaxSize(n)
			var err error
			got := fzCall(catchPanic(func() { err = r.p.SetMaxSize(n) }))
			if got.kind == fzOK {
				got = fzClassify(err, nil, false)
			}
			r.expect(fmt.Sprintf("SetMaxSize(%d)", n), got, want)
		}
	case 14: // time passes, 0–31 ms
		d := int64(arg%32) * int64(time.Millisecond)
		m.now += d
		r.clk.advance(d)
	case 15:
		f := []fzFault{fzFine, fzFail, fzBoom}[arg%3]
		m.plan.create = append(m.plan.create, f)
		r.sch.schedule(func(p *fzPlan) { p.create = append(p.create, f) })
	case 16:
		f := []fzFault{fzFine, fzFail, fzBoom, fzNotReady, fzNotReadyFail}[arg%5]
		m.plan.prep = append(m.plan.prep, f)
		r.sch.schedule(func(p *fzPlan) { p.prep = append(p.prep, f) })
	case 17:
		f := []fzFault{fzFine, fzFail, fzBoom}[arg%3]
		m.plan.reset = append(m.plan.reset, f)
		r.sch.schedule(func(p *fzPlan) { p.reset = append(p.reset, f) })
	case 18:
		f := []fzFault{fzFine, fzFail, fzBoom}[arg%3]
		m.plan.destroy = append(m.plan.destroy, f)
		r.sch.schedule(func(p *fzPlan) { p.destroy = append(p.destroy, f) })
	case 19:
		r.cancelWaiter(int(arg))
	}
	r.settle()
	r.spares()
	r.check()
}

// close runs Close, or Shutdown: with a live ctx when the model says no
// permit stays held (it must return), else with a canceled one (it must
// return ctx.Err(), joined to the Destroy errors of the idle items whose
// Destroy ended before it saw the ctx ended; the others go on, and the
// script waits for them). The Destroy calls run free meanwhile: Close
// waits for those of the idle items, and returns their failures and
// panics as errors.
func (r *fzRun) close(shutdown bool) {
	r.sch.releaseDestroys()
	defer r.sch.holdDestroys()
	want := r.m.close()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	wantCanceled := shutdown && r.m.held > 0
	if wantCanceled {
		cancel()
	}
	var err error
	rec, panicked := catchPanic(func() {
		if shutdown {
			err = r.p.Shutdown(ctx)
		} else {
			err = r.p.Close()
		}
	})
	what := map[bool]string{false: "Close", true: "Shutdown"}[shutdown]
	if panicked {
		r.expect(what, fzCall(rec, panicked), want)
		return
	}
	wantDestroy := want.kind == fzDestroyErr
	gotDestroy := errors.Is(err, injectedFault{onDestroy, faultFail}) || errors.Is(err, injectedFault{onDestroy, faultPanic})
	if wantCanceled {
		awaitDestroys(r.t, r.p) // the idle items' Destroy calls went on
	}
	destroyOK := gotDestroy == wantDestroy || wantCanceled && !gotDestroy
	if errors.Is(err, context.Canceled) != wantCanceled || !destroyOK ||
		(err != nil) != (wantCanceled || wantDestroy) {
		r.fail("%s returned %v; the model says: ctx error %v, destroy errors %v", what, err, wantCanceled, wantDestroy)
	}
}

// check compares the pool's state with the model's: after a step, and
// while Destroy calls are held back (then once each has started).
func (r *fzRun) check() {
	r.t.Helper()
	r.checks++
	m := r.m
	r.awaitHeld()
	got, want := r.p.Stats(), m.expectedStats()
	if got.Waits == 0 && got.WaitTime != 0 || got.WaitTime < 0 {
		r.fail("WaitTime %v with %d waits", got.WaitTime, got.Waits)
	}
	want.WaitTime = got.WaitTime // real time
	if got != want {
		r.fail("Stats:\n got  %+v\n want %+v", got, want)
	}
	var ids []int
	for id := range m.items {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if live := r.f.liveIDs(); !slices.Equal(live, ids) {
		r.fail("items in existence: the factory counts %v, the model %v", live, ids)
	}
	// The idle order: the queue oldest first, and what is parked.
	g := &r.p.g
	g.mu.Lock()
	var queue []int
	for _, e := range g.idle {
		queue = append(queue, e.value.id)
	}
	var parked []int
	for i := range g.slots.s {
		if e := g.slots.s[i].e.Load(); e != nil {
			parked = append(parked, e.value.id)
		}
	}
	g.mu.Unlock()
	wantParked := []int{}
	if m.slot != 0 {
		wantParked = append(wantParked, m.slot)
	}
	if !slices.Equal(queue, m.queue) || !slices.Equal(parked, wantParked) {
		r.fail("idle items: queue %v parked %v, the model says queue %v parked %v", queue, parked, m.queue, wantParked)
	}
}

// finish ends every lease and waiter, closes the pool and checks that
// everything created was destroyed or detached and no permit is held.
func (r *fzRun) finish() {
	m := r.m
	m.plan = fzPlan{}
	r.sch.schedule(func(p *fzPlan) { *p = fzPlan{} })
	for len(m.waiters) > 0 {
		r.cancelWaiter(0)
	}
	for i := range r.handles {
		r.release(&r.handles[i])
		r.settle()
	}
	r.check()
	r.close(true)
	r.check()
	s := r.p.Stats()
	if m.held != 0 || s.ItemsAllocated != 0 || s.Created != s.Destroyed+s.Detached {
		r.fail("at the end: %d permits held, %+v", m.held, s)
	}
	if r.reader != nil {
		r.checkMetrics()
	}
}

// checkMetrics compares what the metrics recorded with the model's counts.
func (r *fzRun) checkMetrics() {
	m, c := r.m, mtCollect(r.t, r.reader)
	// byAttr sums a counter's points by the value of one attribute.
	byAttr := func(name, key string) map[string]int64 {
		sums := map[string]int64{}
		if data, ok := c[name]; ok {
			for _, dp := range data.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(key))
				sums[v.AsString()] += dp.Value
			}
		}
		return sums
	}
	count := func(name string) int64 {
		var n uint64
		if data, ok := c[name]; ok {
			for _, dp := range data.Data.(metricdata.Histogram[float64]).DataPoints {
				n += dp.Count
			}
		}
		return int64(n)
	}
	got, want := map[string]int64{}, map[string]int64{}
	for reason, n := range byAttr("pool.items.destroyed", "reason") {
		got["destroyed "+reason] = n
	}
	for i, n := range m.destroyedBy {
		if n > 0 {
			want["destroyed "+reasonNames[i]] = n
		}
	}
	for typ, n := range byAttr("pool.lease.errors", "error.type") {
		got["lease error "+typ] = n
	}
	for i, n := range m.leaseErrs {
		if n > 0 {
			want["lease error "+errTypeNames[i]] = n
		}
	}
	add := func(what string, g, w int64) {
		if g != 0 {
			got[what] = g
		}
		if w != 0 {
			want[what] = w
		}
	}
	add("created", byAttr("pool.items.created", "pool.name")["fuzz"], int64(m.st.Created))
	add("preparation errors", byAttr("pool.preparation.errors", "pool.name")["fuzz"], int64(m.st.PrepareFailed))
	add("leaked", byAttr("pool.leases.leaked", "pool.name")["fuzz"], 0)
	add("factory calls timed", count("pool.items.create_time"), m.factoryCalls)
	add("preparations timed", count("pool.preparation.time"), m.prepCalls)
	add("queued leases timed", count("pool.lease.wait_time"), m.waitedOK)
	if !maps.Equal(got, want) {
		r.fail("metrics:\n got  %v\n want %v", got, want)
	}
}

// fzScriptLimit bounds one script's run: see fzPlay.
const fzScriptLimit = 30 * time.Second

// fzPlay runs a whole script.
func fzPlay(t *testing.T, script []byte) {
	// A script takes milliseconds. One that hangs is a deadlock, in the
	// pool or in the harness's turns: crash with every goroutine's stack,
	// which the fuzzer prints, rather than leave it to hang the fuzzer.
	watchdog := time.AfterFunc(fzScriptLimit, func() {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		panic(fmt.Sprintf("FuzzPool: a script ran for %v, a hang:\n%s", fzScriptLimit, buf[:n]))
	})
	defer watchdog.Stop()
	cfg, ops := fzConfigOf(script)
	r := newFzRun(t, cfg)
	defer func() { // also when a step failed: then no fault may go off in Close
		close(r.abort)
		r.sch.schedule(func(p *fzPlan) { *p = fzPlan{} })
		r.sch.releaseDestroys() // Close waits for them
		_, _ = catchPanic(func() { _ = r.p.Close() })
	}()
	for i := 0; i+1 < len(ops) && i < 2*fzMaxOps; i += 2 {
		r.step(ops[i], ops[i+1])
	}
	r.finish()
	fzTally(r)
}

// fzTally appends, when the environment variable POOL_FUZZ_TALLY names a
// file, one line per script played: its steps, the faults it injected and
// the comparisons of the whole state made. Fuzzing runs scripts in worker
// processes that are killed at the end, so this is how its figures are
// counted (see docs/TESTING.md).
func fzTally(r *fzRun) {
	name := os.Getenv("POOL_FUZZ_TALLY")
	if name == "" {
		return
	}
	f, err := os.OpenFile(name, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatalf("POOL_FUZZ_TALLY: %v", err)
	}
	defer f.Close()
	fmt.Fprintf(f, "%d %d %d\n", r.steps, r.m.faults, r.checks)
}

// fzScript builds a script: two configuration bytes, then (opcode,
// argument) pairs.
func fzScript(c0, c1 byte, ops ...byte) []byte {
	return append([]byte{c0, c1}, ops...)
}

// fzExtScript builds a script of an extended configuration: MaxSize and
// MinSize, the second byte, the third byte (fzExt), then (opcode,
// argument) pairs.
func fzExtScript(maxSize, minSize int, c1, c2 byte, ops ...byte) []byte {
	return append([]byte{fzExtCfg(maxSize, minSize), c1, c2}, ops...)
}

// fzUses sets MaxUses fzMaxUses in the third configuration byte.
const fzUses = 64

// fzExt is the third configuration byte, for MinIdle minIdle,
// MaxQueuedLeases maxQueued (0–3) and the upkeep (or it with fzUses).
func fzExt(minIdle, maxQueued int, upkeep bool) byte {
	c := byte(minIdle) | byte(maxQueued)<<3
	if upkeep {
		c |= 32
	}
	return c
}

// The configuration bits of the second byte, for the seeds.
const (
	fzIdle     = 1
	fzLifetime = 2
	fzPrep     = 4
	fzCAI      = 8
	fzReset    = 16
	fzLT       = 32
	fzSites    = 64
	fzMetrics  = 128
)

// Opcodes, for the seeds (see step).
const (
	opLease      = 0
	opTryLease   = 2
	opRelease    = 3
	opDouble     = 5
	opStale      = 6
	opCopy       = 7
	opDiscard    = 8
	opDetach     = 9
	opValue      = 10
	opClear      = 11
	opClose      = 12 // with an argument divisible by 4
	opShutdown   = 13 // with an argument divisible by 4
	opUpkeep     = 12 // with an argument not divisible by 4: fzArgUpkeep
	opResize     = 13 // with an argument not divisible by 4: fzArgResize(n)
	opTime       = 14
	opCreate     = 15
	opPrep       = 16
	opReset      = 17
	opDestroy    = 18
	opCancelWait = 19

	fzArgUpkeep = 1
)

// fzArgResize is opResize's argument for SetMaxSize(n), n in 1–4.
func fzArgResize(n int) byte { return byte(1 | (n-1)<<2) }

// fzUpkeepCfg is the first configuration byte with the upkeep on, for
// MaxSize maxSize and MinSize minSize.
func fzUpkeepCfg(maxSize, minSize int) byte { return fzCfgIn(128, maxSize, minSize) }

// fzExtCfg is the first configuration byte of an extended configuration
// (a third byte follows), for MaxSize maxSize and MinSize minSize.
func fzExtCfg(maxSize, minSize int) byte { return fzCfgIn(192, maxSize, minSize) }

// fzCfgIn is the first configuration byte in [from, from+64) for MaxSize
// maxSize and MinSize minSize.
func fzCfgIn(from, maxSize, minSize int) byte {
	for c := from; c < from+64; c++ {
		if 1+c%4 == maxSize && (c>>2)%(maxSize+1) == minSize {
			return byte(c)
		}
	}
	panic("fzCfgIn: no such configuration")
}

// FuzzPool plays scripts on the pool and its model. The seeds below are
// written by hand, one per area; testdata/fuzz/FuzzPool holds 46 scripts
// the fuzzer found: the 9 that together cover every block of the package
// that any of 328 found scripts covered, and the longest script of each of
// 31 other configurations; then, with upkeep rounds and SetMaxSize, the 3
// that add blocks to those and the seeds (of 176 found: a failing and a
// panicking creation in a round, a Destroy error in a shrink, a waiter
// leaving from mid-queue), the longest with the upkeep on and the longest
// with most resizes; and one that once hung. The six whose first byte was
// in 192–255 now have one in 0–127 with the same MaxSize and MinSize, so
// that they do not read as extended configurations (see newFzRun). To fuzz
// on:
//
//	go test -run '^$' -fuzz '^FuzzPool$' -fuzztime 10m .
func FuzzPool(f *testing.F) {
	seeds := [][]byte{
		// MaxSize 2: lease, lease, a third queues; a release hands over.
		fzScript(1, 0, opLease, 0, opLease, 0, opLease, 0, opRelease, 0, opRelease, 1, opRelease, 2),
		// Canceled leases and TryLease on an exhausted pool.
		fzScript(0, 0, opLease, 0, opLease, 3, opTryLease, 0, opTryLease, 3, opRelease, 0, opLease, 3),
		// Double release, a stale copy, a copy, Value after the end, Detach twice.
		fzScript(1, 0, opLease, 0, opCopy, 0, opDouble, 0, opStale, 0, opValue, 1, opLease, 0, opDetach, 0, opDetach, 0),
		// Idle expiry and lifetime, with time passing.
		fzScript(3|2<<2, fzIdle|fzLifetime, opLease, 0, opLease, 0, opRelease, 0, opTime, 11, opRelease, 1, opLease, 0, opTime, 30, opRelease, 2, opLease, 0),
		// A Preparer: not ready, failing, panicking; CheckAfterIdle.
		fzScript(2|1<<2, fzPrep|fzCAI|fzMetrics, opPrep, 3, opLease, 0, opRelease, 0, opPrep, 1, opTime, 6, opLease, 0, opPrep, 2, opLease, 0, opPrep, 4, opLease, 0),
		// Faults in the factory, Reset and Destroy.
		fzScript(1, fzReset|fzMetrics, opCreate, 1, opLease, 0, opCreate, 2, opLease, 0, opLease, 0, opReset, 1, opRelease, 0, opReset, 2, opLease, 0, opRelease, 1, opDestroy, 1, opLease, 0, opDiscard, 2),
		// Waiters: a fault in a granted waiter's creation passes the permit on.
		fzScript(0, fzMetrics, opLease, 0, opLease, 0, opLease, 0, opCreate, 1, opDiscard, 0, opCancelWait, 0, opLease, 0),
		// Clear with MinSize and leases out, then Close with waiters and Shutdown.
		fzScript(3|2<<2, 0, opLease, 0, opClear, 0, opDestroy, 1, opClear, 0, opLease, 0, opLease, 0, opLease, 0, opLease, 0, opLease, 0, opClose, 0, opRelease, 1, opShutdown, 0),
		// Shutdown with a lease out, a Destroy error at Close.
		fzScript(2|2<<2, fzLT|fzSites|fzMetrics, opLease, 0, opDestroy, 1, opLease, 0, opLease, 0, opLease, 0, opShutdown, 0, opRelease, 0),
		// A destroy that panics while a lease evicts, and in Clear: on the
		// pool's goroutines, where no caller sees it.
		fzScript(3|3<<2, fzIdle, opTime, 20, opDestroy, 2, opLease, 0, opDestroy, 2, opClear, 0, opCreate, 2, opClear, 0),
		// The upkeep: idle expiry stops at MinSize, lifetime does not, and
		// the round creates up to MinSize; a creation fails, then panics.
		fzScript(fzUpkeepCfg(3, 2), fzIdle|fzLifetime|fzMetrics, opLease, 0, opLease, 0, opLease, 0, opRelease, 0, opRelease, 1,
			opRelease, 2, opTime, 11, opUpkeep, fzArgUpkeep, opTime, 20, opUpkeep, fzArgUpkeep, opCreate, 1, opUpkeep, fzArgUpkeep,
			opCreate, 2, opUpkeep, fzArgUpkeep, opUpkeep, fzArgUpkeep, opTime, 11, opLease, 0),
		// The upkeep's checks: failing, panicking, not ready; then a lease
		// that the check spared a check of its own.
		fzScript(fzUpkeepCfg(2, 1), fzPrep|fzCAI|fzMetrics, opTime, 6, opPrep, 1, opUpkeep, fzArgUpkeep, opPrep, 2, opTime, 6,
			opUpkeep, fzArgUpkeep, opLease, 0, opLease, 0, opRelease, 0, opTime, 6, opPrep, 3, opUpkeep, fzArgUpkeep, opTime, 3, opLease, 0),
		// SetMaxSize: shrinking with leases out (their items are destroyed
		// as they come back, and leases wait meanwhile), then growing.
		fzScript(3, fzMetrics, opLease, 0, opLease, 0, opLease, 0, opRelease, 2, opResize, fzArgResize(1), opLease, 0,
			opRelease, 0, opRelease, 1, opResize, fzArgResize(3), opResize, fzArgResize(2), opLease, 0, opDetach, 2),
		// SetMaxSize growing grants three waiters at once; the first one's
		// creation fails, the second's preparation; below MinSize is refused.
		fzScript(1|1<<2, fzPrep|fzMetrics, opLease, 0, opLease, 0, opLease, 0, opLease, 0, opLease, 0, opCreate, 1, opPrep, 0,
			opPrep, 1, opResize, fzArgResize(4), opResize, fzArgResize(1), opRelease, 0, opResize, fzArgResize(2), opDiscard, 1, opShutdown, 0, opResize, fzArgResize(3)),
		// Destroy off the caller's path: a TryLease that meets an expired
		// item in a full pool is refused while that item's Destroy holds
		// its room; a Lease queues behind it, and creates once it ends.
		fzScript(0, fzIdle|fzMetrics, opLease, 0, opRelease, 0, opTime, 11, opTryLease, 0, opLease, 0, opRelease, 1, opTime, 11, opLease, 0),
		// A granted waiter's item fails its check: the waiter queues again
		// behind the item's Destroy, and creates once it ends.
		fzScript(0, fzPrep|fzMetrics, opLease, 0, opLease, 0, opPrep, 1, opRelease, 0, opRelease, 1),
		// Destroy fails and panics after Discard, past the lifetime, in
		// Clear: counted, never raised; Close returns a panic as an error.
		fzScript(1|2<<2, fzLifetime|fzMetrics, opDestroy, 2, opLease, 0, opDiscard, 0, opDestroy, 1, opLease, 0, opTime, 26,
			opRelease, 1, opClear, 0, opDestroy, 2, opShutdown, 0),
		// MinIdle 2: New creates the spares, leases off the slot ask for
		// more, up to MaxSize; a failed round is run again a step later.
		fzExtScript(3, 0, 0, fzExt(2, 0, false), opLease, 0, opLease, 0, opRelease, 0, opCreate, 1, opLease, 0, opLease, 0,
			opDiscard, 1, opTime, 1, opRelease, 2, opLease, 0, opClear, 0, opClose, 0),
		// MaxQueuedLeases 1: a second waiter is refused, and so is a
		// TryLease; a release hands over to the one waiting.
		fzExtScript(1, 0, fzMetrics, fzExt(0, 1, false), opLease, 0, opLease, 0, opLease, 0, opTryLease, 0, opRelease, 0,
			opLease, 0, opCancelWait, 0, opRelease, 1),
		// The upkeep asks for spares; idle expiry keeps MinSize, MinIdle
		// refills past it; a resize below the items alive while one dies.
		fzExtScript(3, 1, fzIdle|fzPrep, fzExt(2, 2, true), opTime, 11, opUpkeep, fzArgUpkeep, opLease, 0, opLease, 0, opLease, 0,
			opLease, 0, opPrep, 1, opRelease, 0, opResize, fzArgResize(1), opRelease, 1, opRelease, 2, opResize, fzArgResize(3), opLease, 0),
		// MaxUses 2 with Reset: the second release destroys the item without
		// a Reset, a waiter then creates; Discard and Clear still count
		// as their own reasons.
		fzExtScript(1, 0, fzReset|fzMetrics, fzExt(0, 0, false)|fzUses, opLease, 0, opRelease, 0, opLease, 0, opLease, 0,
			opRelease, 1, opLease, 0, opRelease, 2, opLease, 0, opClear, 0, opRelease, 3, opLease, 0, opDiscard, 4),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(fzPlay)
}
