package pool

// The fault-injection harness of the load tests (TestFaultInjection,
// TestSoak, FuzzPool): one user code for a pool, the factory, the Preparer,
// Reset and Destroy, that misbehaves on demand and checks, as it goes,
// what the package documentation promises about the items it is handed
// (doc.go, "Lifecycle of an item" and "Leases and their rules"): at most
// MaxSize exist, none is held by two leases at once, none is used or
// destroyed once destroyed or detached. Its Logger counts what the pool
// logs of the faults, which have no caller to go to (doc.go, "Waiting and
// errors").

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// faultHook names the user code a fault goes into.
type faultHook int

const (
	onCreate  faultHook = iota // Factory.Create
	onIsReady                  // Preparer.IsReady
	onPrepare                  // Preparer.Prepare
	onReset                    // Options.Reset
	onDestroy                  // Options.Destroy
	numHooks
)

func (h faultHook) String() string {
	return [...]string{"Create", "IsReady", "Prepare", "Reset", "Destroy"}[h]
}

// hasCtx says whether the pool passes h a ctx: Reset and Destroy get none.
func (h faultHook) hasCtx() bool { return h != onReset && h != onDestroy }

// faultKind is what one call of a hook does.
type faultKind int

const (
	faultNone faultKind = iota // it succeeds (IsReady: ready)
	// faultFail returns the injectedFault as the hook's error.
	faultFail
	// faultPanic panics with the injectedFault.
	faultPanic
	// faultGoexit calls runtime.Goexit, ending the goroutine that called
	// the hook.
	faultGoexit
	// faultHang blocks: the factory and the preparer until their ctx ends,
	// then they return the injectedFault wrapped around ctx.Err(); Reset,
	// which has no ctx, for 1 to 4 ms, and then succeeds; Destroy, which
	// has none either, as Reset does, or, when the harness has an unhang
	// channel, until that is closed (see faults.hangDestroy).
	faultHang
	// faultNotReady is IsReady's "not ready" (Prepare runs next); it means
	// nothing to the other hooks.
	faultNotReady
	numKinds
)

func (k faultKind) String() string {
	return [...]string{"none", "fail", "panic", "goexit", "hang", "not ready"}[k]
}

// injectedFault is the error a failing hook returns (a hanging one wraps it
// around its ctx's error) and the value a panicking hook panics with. It is
// comparable, so errors.Is, errors.As and == find it however the pool wraps
// or raises it again.
type injectedFault struct {
	hook faultHook
	kind faultKind
}

func (e injectedFault) Error() string {
	return fmt.Sprintf("faults: injected %v in %v", e.kind, e.hook)
}

// faultRates are the chances, per call of one hook, of each fault. One
// draw decides the call, in this order: panic, fail, Goexit, hang, not
// ready (their sum is at most 1). Before it, and apart from it, a call is
// slow at rate slow: it takes up to slowFor (a draw of its own), giving up
// with its ctx's error when that ctx ends first.
type faultRates struct {
	panic, fail, goexit, hang, notReady float64

	slow    float64
	slowFor time.Duration
}

func (r faultRates) any() bool {
	return r.panic+r.fail+r.goexit+r.hang+r.notReady > 0
}

// set sets the rate of fault k (not faultNone).
func (r *faultRates) set(k faultKind, rate float64) {
	*[...]*float64{faultFail: &r.fail, faultPanic: &r.panic, faultGoexit: &r.goexit,
		faultHang: &r.hang, faultNotReady: &r.notReady}[k] = rate
}

// itemState is the life of a faultItem: alive, then destroyed by the pool;
// or detached (its holder called Detach), then disposed of by the holder.
type itemState int32

const (
	itemAlive itemState = iota
	itemDestroyed
	itemDetached
	itemDisposed
	numStates
)

func (s itemState) String() string {
	return [...]string{"alive", "destroyed", "detached", "disposed of"}[s]
}

// faultItem is the item of a pool over faults. The pool never looks inside
// it; the hooks and the lease holders use its fields to catch an item
// shared by two holders, used after its destruction or touched after
// Detach. Padding keeps items a cache line apart, as real connections are.
type faultItem struct {
	id     int
	state  atomic.Int32 // an itemState
	inUse  atomic.Bool  // set while a lease holder uses the item (hold)
	leases atomic.Int64 // leases of the item that a holder began to use
	resets atomic.Int64 // Reset calls: leases of the item that a Release ended
	_      [64]byte
}

func (it *faultItem) stateNow() itemState { return itemState(it.state.Load()) }

// faults is a Factory and a Preparer of *faultItem, and its reset and
// destroy methods are Options.Reset and Options.Destroy. While on is set,
// each call of a hook gets the fault that decide picks: by default a draw
// against the hook's rates, from a sequence of draws fixed by the seed
// (the n-th is a hash of seed and n, so that goroutines draw without a
// lock); a test may wrap roll to watch which calls get which fault, or
// replace it with a script of its own. While on is not set, every call
// succeeds.
//
// It keeps its own count of the items in existence, live: one more from
// the start of Create, one fewer when Create ends without an item, when
// Destroy ends (however it ends: the pool counts a Destroy that panics or
// calls Goexit as done too), and when a holder is about to Detach an item
// (see detaching). So the cap is checked against the truth, not against
// the pool's figures: Create reports a start past max, and checks that
// run with the load read inExistence. A Destroy that the pool gave up on
// after DestroyTimeout runs on, but its item counts as destroyed (doc.go,
// "Lifecycle of an item": Destroyed): inExistence, Create's check and peak
// leave those out, as the pool's Logger tells of them.
//
// Every hook checks that the item it is handed is alive and held by no
// lease; Destroy, that it destroys each item once, never a detached one;
// Reset, that it never runs more often for an item than the item was
// leased (a lease ended twice). Lease holders call take (Value, then
// hold) when they get a lease and unhold before they end it, which catches
// an item handed to two holders at once. Violations go to violate.
type faults struct {
	t      testing.TB
	shown  int // violations reported in full; past that they are only counted
	max    int // the most items that may ever exist at once; 0: not checked
	rates  [numHooks]faultRates
	decide func(ctx context.Context, h faultHook) faultKind // nil: roll
	on     atomic.Bool

	seed  uint64
	draws atomic.Uint64

	next atomic.Int64 // item ids
	// live counts the items in existence; peak, the most at once, less
	// the Destroy calls the pool gave up on (see inExistence).
	live, peak, created, destroyed atomic.Int64
	faulted                        [numHooks][numKinds]atomic.Int64 // faults injected, by hook and kind
	slowed, gaveUp                 [numHooks]atomic.Int64           // slow calls; those of them that their ctx ended
	ctxErrs                        [numHooks]atomic.Int64           // calls that found their ctx ended (IsReady)
	violations                     atomic.Int64

	// unhang, when set, makes a Destroy hang block until it is closed
	// (unhangAll); hanging counts the Destroy calls blocked now, and
	// unhung those that returned once unblocked (see inExistence).
	unhang          chan struct{}
	unhangOnce      sync.Once
	hanging, unhung atomic.Int64

	// What the pool logged at Warn (see logger): logged counts the records
	// whose error is an injected fault, by hook and kind; a Destroy that
	// called runtime.Goexit counts as [onDestroy][faultGoexit], one that
	// outlasted DestroyTimeout as [onDestroy][faultHang], whatever it was
	// doing. destroyLogs counts every record of a failed Destroy, and
	// otherLogs the records whose error is none of these.
	logged                 [numHooks][numKinds]atomic.Int64
	destroyLogs, otherLogs atomic.Int64

	mu   sync.Mutex
	made []*faultItem // every item Create returned
}

// newFaults returns a harness that reports to t and draws from seed. It
// injects nothing until the test sets rates (or decide) and on.
func newFaults(t testing.TB, seed uint64) *faults {
	return &faults{t: t, shown: 10, seed: seed}
}

// violate reports a broken promise of the pool's, from any goroutine: the
// first f.shown with t.Errorf, the rest only counted, so that a broken pool
// fails the test with a readable log.
func (f *faults) violate(format string, args ...any) {
	f.t.Helper()
	switch n := f.violations.Add(1); {
	case n <= int64(f.shown):
		f.t.Errorf(format, args...)
	case n == int64(f.shown)+1:
		f.t.Errorf("more violations follow, counted but not shown")
	}
}

// float returns the next draw, in [0, 1): the splitmix64 hash of
// seed + n·φ.
func (f *faults) float() float64 {
	z := f.seed + f.draws.Add(1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// roll draws the fault of a call of h against h's rates. A hook with no
// rates draws nothing.
func (f *faults) roll(h faultHook) faultKind {
	r := f.rates[h]
	if !r.any() {
		return faultNone
	}
	x := f.float()
	for _, c := range []struct {
		rate float64
		kind faultKind
	}{{r.panic, faultPanic}, {r.fail, faultFail}, {r.goexit, faultGoexit}, {r.hang, faultHang}, {r.notReady, faultNotReady}} {
		if x < c.rate {
			return c.kind
		}
		x -= c.rate
	}
	return faultNone
}

// fault picks, and counts, the fault of a call of h under ctx (the pool's
// ctx for the factory and the preparer; context.Background() for Reset and
// Destroy).
func (f *faults) fault(ctx context.Context, h faultHook) faultKind {
	if !f.on.Load() {
		return faultNone
	}
	k := faultNone
	if f.decide != nil {
		k = f.decide(ctx, h)
	} else {
		k = f.roll(h)
	}
	if k != faultNone {
		f.faulted[h][k].Add(1)
	}
	return k
}

// injected returns how many faults of kind k went into h.
func (f *faults) injected(h faultHook, k faultKind) int64 { return f.faulted[h][k].Load() }

// strike carries out fault k in h: it panics, calls Goexit, or returns the
// error the hook must return (nil: succeed). A hang waits for ctx to end,
// or, in a hook without a ctx, only sleeps.
func (f *faults) strike(ctx context.Context, h faultHook, k faultKind) error {
	fault := injectedFault{h, k}
	switch k {
	case faultNone, faultNotReady:
		return nil
	case faultPanic:
		panic(fault)
	case faultGoexit:
		runtime.Goexit()
	case faultHang:
		if !h.hasCtx() {
			time.Sleep(time.Duration(1+int(f.float()*4)) * time.Millisecond)
			return nil
		}
		<-ctx.Done()
		return fmt.Errorf("%w: %w", fault, ctx.Err())
	}
	return fault
}

// slow makes a call of h slow at h's slow rate: it sleeps, within ctx in a
// hook that has one, and returns an error wrapping ctx's when that ends
// first.
func (f *faults) slow(ctx context.Context, h faultHook) error {
	r := f.rates[h]
	if r.slow == 0 || !f.on.Load() || f.float() >= r.slow {
		return nil
	}
	f.slowed[h].Add(1)
	d := time.Duration(f.float() * float64(r.slowFor))
	if !h.hasCtx() {
		time.Sleep(d)
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		f.gaveUp[h].Add(1)
		// Wrapped, as net.Dialer does.
		return fmt.Errorf("faults: slow %v gave up: %w", h, ctx.Err())
	}
}

// Create is the factory. A call that ends without an item (an error, a
// panic, a Goexit) leaves live as it found it.
func (f *faults) Create(ctx context.Context) (*faultItem, error) {
	unhung := f.unhung.Load() // before live: see inExistence
	n := f.live.Add(1) - f.givenUp(unhung)
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
	if f.max > 0 && n > int64(f.max) {
		f.violate("Create started with %d items in existence, more than MaxSize %d", n, f.max)
	}
	made := false
	defer func() {
		if !made {
			f.live.Add(-1)
		}
	}()
	if err := f.slow(ctx, onCreate); err != nil {
		return nil, err
	}
	if k := f.fault(ctx, onCreate); k != faultNone {
		return nil, f.strike(ctx, onCreate, k)
	}
	it := &faultItem{id: int(f.next.Add(1))}
	f.mu.Lock()
	f.made = append(f.made, it)
	f.mu.Unlock()
	f.created.Add(1)
	made = true
	return it, nil
}

// IsReady honours its ctx as a ping would: a call whose ctx has ended
// returns that ctx's error.
func (f *faults) IsReady(ctx context.Context, it *faultItem) (bool, error) {
	f.vet(it, onIsReady)
	if err := ctx.Err(); err != nil {
		f.ctxErrs[onIsReady].Add(1)
		return false, err
	}
	if err := f.slow(ctx, onIsReady); err != nil {
		return false, err
	}
	switch k := f.fault(ctx, onIsReady); k {
	case faultNone:
		return true, nil
	case faultNotReady:
		return false, nil
	default:
		return false, f.strike(ctx, onIsReady, k)
	}
}

func (f *faults) Prepare(ctx context.Context, it *faultItem) error {
	f.vet(it, onPrepare)
	if err := f.slow(ctx, onPrepare); err != nil {
		return err
	}
	return f.strike(ctx, onPrepare, f.fault(ctx, onPrepare))
}

// reset is Options.Reset. Reset runs once per Release that ends a lease,
// so it never runs more often for an item than holders began to use it
// (a holder counts a lease in hold, before it can end it).
func (f *faults) reset(it *faultItem) error {
	f.vet(it, onReset)
	if n, m := it.resets.Add(1), it.leases.Load(); n > m {
		f.violate("Reset ran %d times for %d leases of item %d: a lease ended twice", n, m, it.id)
	}
	ctx := context.Background()
	_ = f.slow(ctx, onReset)
	return f.strike(ctx, onReset, f.fault(ctx, onReset))
}

// destroy is Options.Destroy: the pool destroys only an item nobody uses,
// each one once, never a detached one. The item stops existing when
// destroy ends, however it ends.
func (f *faults) destroy(it *faultItem) error {
	if it.inUse.Load() {
		f.violate("Destroy got item %d while a lease holds it", it.id)
	}
	if !it.state.CompareAndSwap(int32(itemAlive), int32(itemDestroyed)) {
		f.violate("Destroy got item %d, which is %v: destroyed twice, or after Detach", it.id, it.stateNow())
	}
	f.destroyed.Add(1)
	hung := false
	defer func() {
		if hung {
			f.unhung.Add(1) // after live drops: see inExistence
		}
	}()
	defer f.live.Add(-1)
	ctx := context.Background()
	_ = f.slow(ctx, onDestroy)
	k := f.fault(ctx, onDestroy)
	if k == faultHang && f.unhang != nil {
		hung = true
		f.hangDestroy()
		return nil
	}
	return f.strike(ctx, onDestroy, k)
}

// hangDestroy blocks a Destroy call until unhangAll: a close that never
// returns, as to a peer gone silent. Only DestroyTimeout gives its room
// back (doc.go, "Lifecycle of an item": Destroyed).
func (f *faults) hangDestroy() {
	f.hanging.Add(1)
	defer f.hanging.Add(-1)
	<-f.unhang
}

// unhangAll unblocks the Destroy calls that hang, and those that will:
// once the test has checked what it wanted while they hung, and in its
// cleanup, so that no goroutine is left behind.
func (f *faults) unhangAll() {
	if f.unhang != nil {
		f.unhangOnce.Do(func() { close(f.unhang) })
	}
}

// awaitUnhung unblocks the Destroy calls that hang and waits until each has
// returned: hanging drops as a call stops blocking, before its destroy drops
// live, so the wait is for unhung, which counts each hung call after that.
func (f *faults) awaitUnhung(t testing.TB) {
	t.Helper()
	f.unhangAll()
	require.Eventually(t, func() bool {
		return f.hanging.Load() == 0 && (f.unhang == nil || f.unhung.Load() == f.injected(onDestroy, faultHang))
	}, testWait, time.Millisecond, "the unblocked Destroy calls return")
}

// inExistence is live less the Destroy calls that the pool gave up on
// (logged as past DestroyTimeout) and that still run: those items count as
// destroyed (doc.go, "Lifecycle of an item": Destroyed), their rooms are
// free, and a fresh item may take their place. It never exceeds the items
// in existence as the pool counts them; it may fall short, by a Destroy
// that outlasted DestroyTimeout without hanging and has returned since.
// The reads are ordered so: unhung first (a hung call drops live before it
// counts in unhung), then live, then the timeouts (the pool logs a timeout
// before it frees the room).
func (f *faults) inExistence() int64 {
	unhung := f.unhung.Load()
	live := f.live.Load()
	return live - f.givenUp(unhung)
}

// givenUp counts the Destroy calls that the pool gave up on and that
// still run, given unhung as read before live (see inExistence).
func (f *faults) givenUp(unhung int64) int64 {
	return f.logged[onDestroy][faultHang].Load() - unhung
}

// vet checks that user code handed item it is its only user: no lease
// holds it and it still exists.
func (f *faults) vet(it *faultItem, h faultHook) {
	if it.inUse.Load() {
		f.violate("%v got item %d while a lease holds it", h, it.id)
	}
	if st := it.stateNow(); st != itemAlive {
		f.violate("%v got item %d, which is %v", h, it.id, st)
	}
}

// take is what a lease holder does first with a lease it got: Value, which
// must not panic on a lease just granted (it does when another holder of
// the same item has ended it already), then hold. It reports whether it
// got the item.
func (f *faults) take(l Lease[*faultItem]) (*faultItem, bool) {
	f.t.Helper()
	var it *faultItem
	if v, panicked := catchPanic(func() { it = l.Value() }); panicked {
		f.violate("a lease ended before its holder used it: %v", v)
		return nil, false
	}
	f.hold(it)
	return it, true
}

// hold marks the item a lease holder got in use. An item already marked
// has two holders at once; one not alive was handed out after its
// destruction or Detach.
func (f *faults) hold(it *faultItem) {
	if !it.inUse.CompareAndSwap(false, true) {
		f.violate("item %d leased while another lease holds it", it.id)
	}
	if st := it.stateNow(); st != itemAlive {
		f.violate("leased item %d is %v", it.id, st)
	}
	it.leases.Add(1)
}

// unhold is what a lease holder does last, before it ends the lease.
func (f *faults) unhold(it *faultItem) { it.inUse.Store(false) }

// detaching accounts for an item that its holder, who has unheld it, is
// about to Detach: it leaves the pool, so it stops counting against the
// cap (before Detach frees its place, so live never runs behind the
// truth), and the pool must never hand it to user code or destroy it
// again.
func (f *faults) detaching(it *faultItem) {
	if !it.state.CompareAndSwap(int32(itemAlive), int32(itemDetached)) {
		f.violate("item %d, detached, was %v", it.id, it.stateNow())
	}
	f.live.Add(-1)
}

// disposed records that the holder of a detached item disposed of it: the
// pool must not have touched it in between.
func (f *faults) disposed(it *faultItem) {
	if !it.state.CompareAndSwap(int32(itemDetached), int32(itemDisposed)) {
		f.violate("detached item %d became %v before its owner disposed of it", it.id, it.stateNow())
	}
}

// census counts the items Create returned, by their state now.
func (f *faults) census() (n [numStates]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range f.made {
		n[it.stateNow()]++
	}
	return n
}

// liveIDs returns the ids of the items alive now, in order.
func (f *faults) liveIDs() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := []int{}
	for _, it := range f.made {
		if it.stateNow() == itemAlive {
			ids = append(ids, it.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// checkNoneLeft reports with t.Errorf each item (the first f.shown) that
// is still alive, or detached and not disposed of, and returns how many
// there are: once the pool has closed and nothing is in flight, none may
// be.
func (f *faults) checkNoneLeft(t testing.TB) (left int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range f.made {
		if st := it.stateNow(); st == itemAlive || st == itemDetached {
			if left++; left <= f.shown {
				t.Errorf("item %d is %v at rest", it.id, st)
			}
		}
	}
	return left
}

// logger returns a Logger for the pool, whose records are counted in
// logged, destroyLogs and otherLogs (see faults). The pool logs only at
// Warn what has no caller to go to, and at Info the end of a lease reported
// as held too long; only the warnings are counted.
func (f *faults) logger() *slog.Logger { return slog.New(faultLog{f}) }

// faultLog is the slog.Handler of faults.logger.
type faultLog struct{ f *faults }

func (h faultLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h faultLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h faultLog) WithGroup(string) slog.Handler                { return h }

func (h faultLog) Handle(_ context.Context, r slog.Record) error {
	var err error
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			err, _ = a.Value.Any().(error)
		}
		return err == nil
	})
	h.f.noteLogged(r.Message, err)
	return nil
}

// noteLogged counts a warning the pool logged, with its message and error.
func (f *faults) noteLogged(msg string, err error) {
	if msg == "pool: destroy item" {
		f.destroyLogs.Add(1)
	}
	var fault injectedFault
	switch {
	case errors.As(err, &fault):
		f.logged[fault.hook][fault.kind].Add(1)
	case errors.Is(err, errDestroyGoexit):
		f.logged[onDestroy][faultGoexit].Add(1)
	case errors.Is(err, errDestroyTimeout):
		f.logged[onDestroy][faultHang].Add(1)
	default:
		f.otherLogs.Add(1)
	}
}
