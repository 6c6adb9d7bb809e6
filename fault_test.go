package pool

// Fault injection. TestFaultInjection runs a concurrent load while the
// factory, the preparer (IsReady and Prepare), Options.Reset or
// Options.Destroy fail, panic, call runtime.Goexit or hang at random (the
// faults harness, misbehave_test.go), and checks what the package
// documentation promises about user code that misbehaves (doc.go, "Waiting
// and errors" and "Footguns"): the cap and the other invariants hold
// throughout, no item is ever held by two leases, every panic or Goexit
// reaches the caller whose call ran the code (but one of the pool's own
// work: a creation nobody waits for, and every Destroy, which runs on the
// pool's own goroutines), every error says what happened or is logged and
// counted, and once the faults stop the pool is whole: no permit lost or
// duplicated, every item accounted for. TestDialStorm sends a crowd of
// impatient callers against a slow factory: the crowd may cost at most
// MaxSize dials, and those dials are not wasted.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// ftInBackground reports whether the calling goroutine runs user code on
// the pool's own account: a creation of Clear's refill in the background
// (or the upkeep's), or a Destroy, which always runs on a goroutine of the
// pool's (doc.go, "Lifecycle of an item": Destroyed). Nobody waits for
// those, and their exits are logged, never raised (doc.go, "Waiting and
// errors").
func ftInBackground() bool {
	return ftOnStack(").createIdle", "destroyer[...]).run")
}

// ftInDestroyTask reports whether the calling goroutine is one of the
// pool's Destroy tasks: the only place Destroy may run.
func ftInDestroyTask() bool { return ftOnStack("destroyer[...]).run") }

// ftOnStack reports whether a function whose name ends in one of suffixes
// is on the calling goroutine's stack.
func ftOnStack(suffixes ...string) bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		fr, more := frames.Next()
		if slices.ContainsFunc(suffixes, func(s string) bool { return strings.HasSuffix(fr.Function, s) }) {
			return true
		}
		if !more {
			return false
		}
	}
}

// ftLeaseKey is the ctx key of an ftLeaseMark.
type ftLeaseKey struct{}

// ftLeaseMark travels with one Lease call in its ctx's values, which the
// factory's ctx keeps: a Create that panics or calls Goexit marks it, so
// the test can tell an exit that reached no caller from a lost one.
type ftLeaseMark struct{ createExited atomic.Bool }

// ftSite is the pool call that a caller saw a panic or a Goexit come out
// of.
type ftSite int

const (
	ftAtLease   ftSite = iota // Lease or TryLease
	ftAtRelease               // Lease.Release
	ftAtDiscard               // Lease.Discard
	ftAtClear                 // Pool.Clear, which runs no user code
	ftSites
)

func (s ftSite) String() string { return [...]string{"Lease", "Release", "Discard", "Clear"}[s] }

// ftHookCase is a row of TestFaultInjection's table: a hook, the options
// that make the pool call it (and end its hangs) for a kind of fault, and
// the calls its panics and Goexits may come out of.
type ftHookCase struct {
	hook      faultHook
	configure func(o *Options[*faultItem], f *faults, kind faultKind)
	sites     []ftSite
}

var ftHookCases = []ftHookCase{
	// CreateTimeout, always set, ends the hangs. Clear's refill runs on a
	// goroutine of the pool's: its exits never come out of Clear.
	{onCreate, func(*Options[*faultItem], *faults, faultKind) {}, []ftSite{ftAtLease}},
	{onIsReady, ftWithPreparer, []ftSite{ftAtLease}},
	{onPrepare, ftWithPreparer, []ftSite{ftAtLease}},
	{onReset, func(*Options[*faultItem], *faults, faultKind) {}, []ftSite{ftAtRelease}},
	// Destroy's exits come out of no call at all. Expiry makes leases and
	// releases hand items to their Destroy too, not only Discard and Clear.
	{onDestroy, ftWithExpiry, nil},
}

// ftWithExpiry gives the pool an IdleTimeout and a MaxLifetime of a few
// milliseconds, so that leases, releases and their sweeps destroy items
// all the time. For a hang, Destroy blocks until the test unblocks it, and
// DestroyTimeout gives the item's room back meanwhile.
func ftWithExpiry(o *Options[*faultItem], f *faults, kind faultKind) {
	o.IdleTimeout, o.MaxLifetime = 2*time.Millisecond, 10*time.Millisecond
	if kind == faultHang {
		o.DestroyTimeout = ftDestroyTimeout
		f.unhang = make(chan struct{})
	}
}

// ftKinds are the faults each hook of the table is given in turn.
var ftKinds = []faultKind{faultFail, faultPanic, faultGoexit, faultHang}

// ftWithPreparer makes f the preparer, checking every lease, with a
// PreparationTimeout shorter than some callers' deadlines and longer than
// others', so that both end hangs.
func ftWithPreparer(o *Options[*faultItem], f *faults, _ faultKind) {
	o.Preparer = f
	o.PreparationTimeout = 2 * time.Millisecond
}

const (
	ftWorkers   = 24
	ftMaxSize   = 4
	ftRate      = 0.25                   // of the faulted hook's calls
	ftCaseTime  = 250 * time.Millisecond // load per case, at least
	ftMinFaults = 20                     // and until this many faults fired (bounded by testWait)
	// ftDestroyTimeout bounds a hanging Destroy's hold on its room: longer
	// than a Destroy that does not hang takes, even under -race.
	ftDestroyTimeout = 5 * time.Millisecond
)

// ftFigures are what one case did, counted as it happened. An exit is a
// panic or a Goexit: a fault that ends the call instead of returning.
type ftFigures struct {
	ops, leases, injected, exitsSeen int64
	// The exits no caller saw: of creations whose callers had given up,
	// and of the pool's own work (Clear's refill, every Destroy).
	exitsAbandoned, exitsBackground                         int64
	faultErrs, ctxErrs, prepTimeouts, hangsByCtx, exhausted int64
	// The failed Destroy calls the pool logged, and those of them that
	// outlasted DestroyTimeout.
	destroyLogs, destroyTimeouts int64
	checks                       int64
}

func (a *ftFigures) add(b ftFigures) {
	a.ops += b.ops
	a.leases += b.leases
	a.injected += b.injected
	a.exitsSeen += b.exitsSeen
	a.exitsAbandoned += b.exitsAbandoned
	a.exitsBackground += b.exitsBackground
	a.faultErrs += b.faultErrs
	a.ctxErrs += b.ctxErrs
	a.prepTimeouts += b.prepTimeouts
	a.hangsByCtx += b.hangsByCtx
	a.exhausted += b.exhausted
	a.destroyLogs += b.destroyLogs
	a.destroyTimeouts += b.destroyTimeouts
	a.checks += b.checks
}

// TestFaultInjection runs, for every hook and every kind of fault, 24
// goroutines leasing (with and without deadlines, some with TryLease),
// releasing, discarding and detaching, and one calling Clear, while the
// hook faults on a quarter of its calls, and checks the invariants
// throughout and the pool's state after. See ftRunCase.
func TestFaultInjection(t *testing.T) {
	var total ftFigures
	cases := 0
	for _, hc := range ftHookCases {
		for _, kind := range ftKinds {
			t.Run(hc.hook.String()+"/"+kind.String(), func(t *testing.T) {
				total.add(ftRunCase(t, hc, kind))
				cases++
			})
		}
	}
	t.Logf("fault injection, %d cases: %d operations (%d leases), %d faults injected, "+
		"%d panics and Goexits seen by callers (not seen: %d of abandoned creations, %d of the pool's own work), "+
		"%d injected errors returned (%d preparation timeouts, %d preparer hangs ended by the caller's ctx), "+
		"%d failed Destroy calls logged (%d past DestroyTimeout), %d caller ctx errors, %d exhausted; %d invariant checks",
		cases, total.ops, total.leases, total.injected, total.exitsSeen, total.exitsAbandoned, total.exitsBackground,
		total.faultErrs, total.prepTimeouts, total.hangsByCtx, total.destroyLogs, total.destroyTimeouts,
		total.ctxErrs, total.exhausted, total.checks)
}

// ftRunCase runs one case of TestFaultInjection and returns its figures.
// While the load runs it checks continuously (a checker goroutine, and
// each worker now and then) the invariants of checkInvariants, with the
// harness's own count of the items in existence (faults.inExistence); the
// harness's checks of each item (one holder at a time, never used or
// destroyed once destroyed or detached); the value of every panic a caller
// recovers, and the call each panic or Goexit came out of; that Destroy
// runs on the pool's own goroutines only; and every error Lease returns
// (ftRun.checkErr). After the load, with the faults off, it checks that
// every panic or Goexit injected reached a caller, but those the package
// documentation lets go unseen (see below), that every failed Destroy was
// counted and logged (ftCheckDestroys), and that the pool is whole
// (ftCheckWhole).
func ftRunCase(t *testing.T, hc ftHookCase, kind faultKind) ftFigures {
	f := newFaults(t, uint64(hc.hook)<<8|uint64(kind))
	f.max = ftMaxSize
	f.rates[hc.hook].set(kind, ftRate)
	ready := &f.rates[onIsReady]
	ready.notReady = (1 - ready.panic - ready.fail - ready.goexit - ready.hang) / 2 // half the calls that do not fault: Prepare runs too
	opts := Options[*faultItem]{
		MinSize: 2, MaxSize: ftMaxSize,
		CreateTimeout: 3 * time.Millisecond, // ends the factory's hangs, also in the background
		Reset:         f.reset, Destroy: f.destroy,
		Logger: f.logger(),
	}
	hc.configure(&opts, f, kind)
	p, err := New[*faultItem](bg, f, opts)
	require.NoError(t, err)
	t.Cleanup(func() { // when the case stops early; else ftCheckWhole has closed the pool
		f.on.Store(false)
		f.unhangAll()
		_ = p.Close()
	})
	r := &ftRun{t: t, p: p, f: f, hook: hc.hook, kind: kind, sites: hc.sites}
	f.decide = func(ctx context.Context, h faultHook) faultKind {
		if h == onDestroy && !ftInDestroyTask() {
			f.violate("Destroy ran on a caller's goroutine, not on one of the pool's own")
		}
		k := f.roll(h)
		if k == faultPanic || k == faultGoexit {
			switch {
			case ftInBackground():
				r.backgroundExits.Add(1)
			case h == onCreate:
				if m, ok := ctx.Value(ftLeaseKey{}).(*ftLeaseMark); ok {
					m.createExited.Store(true) // the ctx keeps the caller's values
				}
			}
		}
		return k
	}

	f.on.Store(true)
	r.load()
	f.on.Store(false)

	// Clear's refills run as tasks, and one may take its permit only
	// after the creations below have given theirs back: wait for them
	// first (CI once caught ftCheckWhole's TryLeases a permit short).
	// Creations that callers abandoned finish in the background (the
	// hanging ones when CreateTimeout ends them), and Destroy calls on the
	// pool's own goroutines (the hanging ones when DestroyTimeout passes):
	// wait for their permits. Hanging Destroy calls still block.
	awaitBackground(t, p)
	awaitDestroys(t, p)
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond,
		"a permit was lost: %+v", p.Stats())

	fig := r.figures()
	assert.GreaterOrEqual(t, fig.injected, int64(ftMinFaults), "the faults fired")
	assert.LessOrEqual(t, fig.faultErrs, fig.injected, "each injected error reached one caller at most")
	s := p.Stats()
	if kind == faultPanic || kind == faultGoexit {
		// A panic or a Goexit reaches the caller whose call ran the code
		// that raised it, with two exceptions, both counted exactly. One in
		// a creation whose caller has given up counts as a failed creation
		// (doc.go, "Lifecycle of an item"); that caller's Lease returned
		// its ctx's error. And one of the pool's own work, Clear's refill
		// or any Destroy, is logged and counted, never raised (doc.go,
		// "Waiting and errors").
		assert.Equal(t, fig.injected, fig.exitsSeen+fig.exitsAbandoned+fig.exitsBackground,
			"exits injected = seen by callers + of abandoned creations + of the pool's own work")
	}
	switch {
	case (hc.hook == onIsReady || hc.hook == onPrepare) && (kind == faultFail || kind == faultHang):
		// At least: a preparation that succeeds, but only after the 2 ms
		// PreparationTimeout (a slow moment under -race on two cores),
		// counts as failed too (doc.go, "Stats": PrepareFailed counts
		// checks that timed out), and which ones do is up to the scheduler.
		assert.GreaterOrEqual(t, s.PrepareFailed, uint64(fig.injected), "every failed or timed-out preparation is counted")
	case hc.hook == onReset && kind != faultHang:
		assert.GreaterOrEqual(t, s.Destroyed, uint64(fig.injected), "every failed Reset destroys its item")
	case hc.hook == onDestroy:
		assert.Zero(t, fig.exitsSeen, "no Destroy exit reaches a caller")
		ftCheckDestroys(t, s, f, kind)
	}
	assert.Equal(t, s.DestroyErrors, uint64(fig.destroyLogs),
		"every failed Destroy is counted in DestroyErrors and logged, once")
	assert.Equal(t, uint64(fig.leases), s.Leases, "Stats.Leases against the leases that succeeded")
	assert.Equal(t, uint64(r.detached.Load()), s.Detached)

	assert.Zero(t, f.violations.Load(), "violations found during the load")
	ftCheckWhole(t, p, f)
	t.Logf("%v/%v: %d operations (%d leases), %d faults injected, %d exits seen by callers (%s; "+
		"not seen: %d of abandoned creations, %d of the pool's own work), "+
		"%d injected errors returned (%d preparation timeouts, %d preparer hangs ended by the caller's ctx), "+
		"%d failed Destroy calls logged (%d past DestroyTimeout), %d caller ctx errors, %d exhausted; %d invariant checks",
		hc.hook, kind, fig.ops, fig.leases, fig.injected, fig.exitsSeen, r.exitsBySite(), fig.exitsAbandoned, fig.exitsBackground,
		fig.faultErrs, fig.prepTimeouts, fig.hangsByCtx, fig.destroyLogs, fig.destroyTimeouts, fig.ctxErrs, fig.exhausted, fig.checks)
	return fig
}

// ftCheckDestroys checks, once every Destroy has ended or outlasted
// DestroyTimeout, what the package documentation promises of a Destroy
// that fails, panics, calls runtime.Goexit or never returns (doc.go,
// "Lifecycle of an item": Destroyed; Options.DestroyTimeout): each is
// counted in DestroyErrors and logged, and the item counts as destroyed
// however Destroy ended. A hang holds its item's room for DestroyTimeout
// only: the rooms are free again (the caller has checked that no permit
// is held) while the hanging calls still block, each of which the pool
// logged as past DestroyTimeout and counted.
func ftCheckDestroys(t *testing.T, s Stats, f *faults, kind faultKind) {
	t.Helper()
	injected := f.injected(onDestroy, kind)
	assert.Equal(t, uint64(f.destroyed.Load()), s.Destroyed, "every Destroy called counts as destroyed")
	if kind != faultHang {
		assert.Equal(t, uint64(injected), s.DestroyErrors, "DestroyErrors against the %v injected into Destroy", kind)
		assert.Equal(t, injected, f.logged[onDestroy][kind].Load(), "Destroy %v logged, against injected", kind)
		return
	}
	timeouts := f.logged[onDestroy][faultHang].Load()
	assert.Equal(t, injected, f.hanging.Load(), "the hanging Destroy calls still block")
	assert.GreaterOrEqual(t, timeouts, injected, "every hanging Destroy was given up on after DestroyTimeout, and logged")
	assert.Equal(t, uint64(timeouts), s.DestroyErrors, "DestroyErrors counts the Destroy calls past DestroyTimeout")
}

// ftCheckWhole checks, with the faults off and nothing in flight (but the
// Destroy calls that hang), that the faults left the pool whole. MaxSize
// leases succeed, on distinct items (no permit was lost), and a TryLease
// then gets ErrExhausted (none was duplicated). They are Leases, not
// TryLeases: one that meets an expired idle item hands it, with its room,
// to its Destroy and may have to wait for a room (doc.go, "Lifecycle of
// an item": Expired), and ctx bounds that wait. Then the hanging
// Destroy calls are unblocked, and once they have returned the accounting
// identity holds at rest, and the pool's figures agree with the harness's
// own counts: items created, destroyed, detached and alive. Close then
// destroys every item.
func ftCheckWhole(t *testing.T, p *Pool[*faultItem], f *faults) {
	t.Helper()
	require.True(t, checkInvariants(t, p, f.inExistence))
	seen := map[*faultItem]bool{}
	var ls []Lease[*faultItem]
	ctx, cancel := context.WithTimeout(bg, testWait)
	defer cancel()
	for i := range ftMaxSize {
		l, err := p.Lease(ctx)
		require.NoError(t, err, "lease %d of MaxSize %d: a permit was lost", i+1, ftMaxSize)
		it := l.Value()
		require.False(t, seen[it], "item %d handed to two leases", it.id)
		seen[it] = true
		f.hold(it)
		ls = append(ls, l)
	}
	_, err := p.TryLease(bg)
	require.ErrorIs(t, err, ErrExhausted, "a lease past MaxSize: a permit was duplicated")
	for _, l := range ls {
		f.unhold(l.Value())
		l.Release()
	}
	f.awaitUnhung(t)
	awaitDestroys(t, p) // TryLease may have met expired items

	s := p.Stats()
	assert.Equal(t, s.Created, s.Destroyed+s.Detached+uint64(s.ItemsAllocated),
		"at rest Created == Destroyed + Detached + ItemsAllocated; stats %+v", s)
	assert.Equal(t, int64(s.ItemsAllocated), f.live.Load(), "the pool accounts for every item that exists")
	assert.Equal(t, uint64(f.created.Load()), s.Created)
	assert.Equal(t, uint64(f.destroyed.Load()), s.Destroyed)
	assert.Equal(t, uint64(f.census()[itemDisposed]), s.Detached)

	require.NoError(t, p.Close())
	assert.Zero(t, f.live.Load(), "Close destroyed every item")
	assert.Zero(t, f.checkNoneLeft(t), "items neither destroyed nor detached after Close")
	s = p.Stats()
	assert.Equal(t, s.Created, s.Destroyed+s.Detached)
}

// ftRun is the load of one case and what it counted.
type ftRun struct {
	t     *testing.T
	p     *Pool[*faultItem]
	f     *faults
	hook  faultHook
	kind  faultKind
	sites []ftSite // where the case's panics and Goexits may come out

	broken  atomic.Bool // an invariant failed: stop checking, one report is enough
	closing atomic.Bool // load closes the pool to free stuck workers: ErrClosed is expected

	ops, leases, detached, checks atomic.Int64
	exits                         [ftSites]atomic.Int64
	faultErrs, ctxErrs, exhd      atomic.Int64
	prepTimeouts, hangsByCtx      atomic.Int64
	slowPreps                     atomic.Int64 // unfaulted preparations past PreparationTimeout
	// backgroundExits counts the exits of user code the pool runs on its
	// own account (see ftInBackground), which nobody sees: they are logged.
	backgroundExits atomic.Int64

	mu sync.Mutex
	// gaveUp holds the marks of the leases that returned their ctx's error:
	// the only ones whose creations can exit with nobody to see it.
	gaveUp []*ftLeaseMark
}

// load runs the workers, the checker and the clearer for ftCaseTime, and
// longer if need be until ftMinFaults faults have fired (at most testWait).
// When the workers do not all stop within testWait after that, a lease
// waits for a permit that was lost: load reports it and closes the pool,
// which wakes such waiters, so that the test fails rather than hangs.
func (r *ftRun) load() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range ftWorkers {
		wg.Go(func() { r.worker(uint64(w), stop) })
	}
	wg.Go(func() { r.checker(stop) })
	wg.Go(func() { r.clearer(stop) })
	time.Sleep(ftCaseTime)
	for end := time.Now().Add(testWait); r.f.injected(r.hook, r.kind) < ftMinFaults && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(testWait):
		r.t.Errorf("the load did not stop within %v: a lease waits for a lost permit? %+v", testWait, r.p.Stats())
		r.f.on.Store(false)
		r.closing.Store(true)
		_ = r.p.Close()
		<-stopped
		r.t.FailNow()
	}
}

// check runs checkInvariants on a snapshot, with the harness's count of
// the items in existence, until one fails; and checks that the items whose
// Destroy the pool waits for are among the items it accounts for (doc.go,
// "Stats": they count against MaxSize until Destroy returns).
func (r *ftRun) check() {
	if r.broken.Load() {
		return
	}
	r.checks.Add(1)
	s := r.p.Stats()
	ok := checkStats(r.t, s, r.f.inExistence, 0)
	if s.Destroying < 0 || s.Destroying > s.ItemsAllocated {
		r.t.Errorf("Destroying %d out of [0, ItemsAllocated]: %+v", s.Destroying, s)
		ok = false
	}
	if !ok {
		r.broken.Store(true)
	}
}

// checker checks the invariants continuously while the load runs.
func (r *ftRun) checker(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		r.check()
		time.Sleep(20 * time.Microsecond)
	}
}

// clearer calls Clear every millisecond or so: it hands the idle items to
// their Destroy and refills to MinSize, both on the pool's own goroutines,
// so no panic or Goexit may come out of it (no case lists ftAtClear).
func (r *ftRun) clearer(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		time.Sleep(time.Millisecond)
		r.ops.Add(1)
		r.guard(ftAtClear, r.p.Clear)
	}
}

// worker leases and ends leases until stop, checking the invariants every
// 16 rounds.
func (r *ftRun) worker(seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, uint64(r.hook)<<8|uint64(r.kind)))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		if n%16 == 0 {
			r.check()
		}
		r.round(rng)
	}
}

// round is one lease and its end. A third of the leases have no deadline
// (their creations run inline, and PreparationTimeout alone ends a
// preparer's hang); the others a deadline of 0.1 to 3.1 ms. One in eight is
// a TryLease. The holder holds the item (the harness checks that nobody
// else does and that it was not destroyed) a moment, and ends the lease:
// Release mostly, Discard one time in ten, Detach one in twenty.
func (r *ftRun) round(rng *rand.Rand) {
	ctx, cancel := bg, context.CancelFunc(func() {})
	if rng.IntN(3) > 0 {
		ctx, cancel = context.WithTimeout(bg, time.Duration(100+rng.IntN(3000))*time.Microsecond)
	}
	defer cancel() // after checkErr, which reads ctx.Err()
	mark := new(ftLeaseMark)
	ctx = context.WithValue(ctx, ftLeaseKey{}, mark)
	try := rng.IntN(8) == 0
	var l Lease[*faultItem]
	var err error
	r.ops.Add(1)
	if r.guard(ftAtLease, func() {
		if try {
			l, err = r.p.TryLease(ctx)
		} else {
			l, err = r.p.Lease(ctx)
		}
	}) {
		return
	}
	if err != nil {
		if r.checkErr(ctx, err, try) {
			r.mu.Lock()
			r.gaveUp = append(r.gaveUp, mark)
			r.mu.Unlock()
		}
		return
	}
	r.leases.Add(1)
	it, ok := r.f.take(l)
	if !ok {
		return
	}
	if rng.IntN(4) == 0 {
		time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
	} else {
		runtime.Gosched()
	}
	r.f.unhold(it)
	r.ops.Add(1)
	switch rng.IntN(20) {
	case 0, 1:
		r.guard(ftAtDiscard, l.Discard)
	case 2:
		r.f.detaching(it)
		if v, panicked := catchPanic(func() { l.Detach() }); panicked {
			r.f.violate("Detach of a held lease panicked: %v", v) // another holder ended it
			return
		}
		r.f.disposed(it)
		r.detached.Add(1)
	default:
		r.guard(ftAtRelease, l.Release)
	}
}

// guard calls fn, a call into the pool made at site, and reports whether
// it exited instead of returning: it panicked or, in a Goexit case (where
// fn runs on a goroutine of its own, so that the worker survives it),
// called Goexit. The exit must be this case's fault, out of a call that
// runs the faulted hook; anything else is reported, a panic with the stack
// where it happened.
func (r *ftRun) guard(site ftSite, fn func()) (exited bool) {
	var v any
	var stack []byte
	var panicked, goexited bool
	call := func() { v, stack, panicked = catchPanicStack(fn) }
	if r.kind == faultGoexit {
		goexited = catchGoexit(call)
	} else {
		call()
	}
	switch want := (injectedFault{r.hook, faultPanic}); {
	case goexited:
	case !panicked:
		return false
	case r.kind == faultGoexit && r.hook == onCreate && v == any(errFactoryGoexit):
		// A Goexit of a factory that ran on a goroutine of its own reaches
		// the waiting caller as this panic.
	case r.kind != faultPanic || panicValue(v) != any(want):
		r.exits[site].Add(1)
		r.f.violate("%v panicked with %v (%T), want a %v %v\n%s", site, v, v, r.hook, r.kind, stack)
		return true
	}
	r.exits[site].Add(1)
	if !slices.Contains(r.sites, site) {
		r.f.violate("a %v %v came out of %v, which does not run %v", r.hook, r.kind, site, r.hook)
	}
	return true
}

// checkErr checks an error that Lease or TryLease returned under ctx:
//   - ErrExhausted, from TryLease only;
//   - the injected fault, wrapped, from the factory or the preparer of this
//     case (Reset's and Destroy's errors never reach Lease); a hang's error
//     says what ended it (ftRun.checkHang);
//   - the caller's ctx.Err(), once that ctx has ended: while queued, or on
//     abandoning a creation, or on giving up between idle items.
//
// Anything else is a defect: no LeaseTimeout is set and the pool is open.
// It reports whether err is the caller's ctx error.
func (r *ftRun) checkErr(ctx context.Context, err error, try bool) (gaveUp bool) {
	var fault injectedFault
	switch {
	case errors.Is(err, ErrExhausted):
		r.exhd.Add(1)
		if !try {
			r.f.violate("Lease, which waits, returned %v", err)
		}
	case errors.As(err, &fault):
		r.faultErrs.Add(1)
		if fault != (injectedFault{r.hook, r.kind}) || fault.kind == faultPanic || fault.kind == faultGoexit ||
			(fault.hook != onCreate && fault.hook != onIsReady && fault.hook != onPrepare) {
			r.f.violate("Lease returned %v, which this case's faults cannot cause", err)
		} else if fault.kind == faultHang {
			r.checkHang(ctx, err)
		}
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		r.ctxErrs.Add(1)
		return true
	case r.closing.Load() && errors.Is(err, ErrClosed):
	case errors.Is(err, ErrPreparationTimeout) && !errors.Is(err, context.DeadlineExceeded):
		// A preparation with no fault that still took longer than the
		// 2 ms PreparationTimeout (a slow moment under -race on two
		// cores) fails all the same (doc.go, "Waiting and errors":
		// ErrPreparationTimeout), and not as the caller's deadline.
		r.slowPreps.Add(1)
	default:
		r.f.violate("unexpected Lease error: %v", err)
	}
	return false
}

// checkHang checks the error of a hang in the factory or the preparer. The
// factory's ctx does not end with the caller's (doc.go, "Lifecycle of an
// item"), so only CreateTimeout ends its hang: the error says so, and does
// not match context.DeadlineExceeded, which only the caller's own ctx may
// (doc.go, "Waiting and errors"). The preparer's ctx ends with PreparationTimeout, which
// gives ErrPreparationTimeout, or with the caller's ctx, which gives that
// ctx's error; a caller without a deadline always gets
// ErrPreparationTimeout.
func (r *ftRun) checkHang(ctx context.Context, err error) {
	switch {
	case r.hook == onCreate:
		if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
			r.f.violate("a factory hang that CreateTimeout ended: %v matches DeadlineExceeded, or does not say it", err)
		}
	case errors.Is(err, ErrPreparationTimeout):
		r.prepTimeouts.Add(1)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		r.hangsByCtx.Add(1)
	default:
		r.f.violate("a preparer hang ended by neither PreparationTimeout nor the caller's ctx (err %v): %v", ctx.Err(), err)
	}
}

// figures returns what the run counted. Call it once nothing is in flight.
func (r *ftRun) figures() ftFigures {
	fig := ftFigures{
		ops: r.ops.Load(), leases: r.leases.Load(), injected: r.f.injected(r.hook, r.kind),
		faultErrs: r.faultErrs.Load(), ctxErrs: r.ctxErrs.Load(),
		prepTimeouts: r.prepTimeouts.Load(), hangsByCtx: r.hangsByCtx.Load(), exhausted: r.exhd.Load(), checks: r.checks.Load(),
	}
	for i := range r.exits {
		fig.exitsSeen += r.exits[i].Load()
	}
	fig.exitsAbandoned = r.abandonedExits()
	fig.exitsBackground = r.backgroundExits.Load()
	fig.destroyLogs = r.f.destroyLogs.Load()
	fig.destroyTimeouts = r.f.logged[onDestroy][faultHang].Load()
	return fig
}

// abandonedExits counts the creations that panicked or called Goexit after
// their caller gave up.
func (r *ftRun) abandonedExits() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, m := range r.gaveUp {
		if m.createExited.Load() {
			n++
		}
	}
	return n
}

// exitsBySite lists the calls the exits came out of, for the log.
func (r *ftRun) exitsBySite() string {
	var b strings.Builder
	for s := range ftSites {
		if n := r.exits[s].Load(); n > 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d from %v", n, s)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// ftDialer is a slow dial that honours its ctx. Each Create takes delay
// and, beyond that, does not finish before hold is closed: the test keeps
// every creation in flight until all its callers have given up, so that
// no timing decides the outcome. It counts creations started, items in
// existence (from the start of Create to the end of destroy) and their peak.
type ftDialer struct {
	delay time.Duration
	hold  chan struct{}

	started, live, peak, destroyed atomic.Int64
}

func (d *ftDialer) Create(ctx context.Context) (*conn, error) {
	n := d.started.Add(1)
	for l := d.live.Add(1); ; {
		p := d.peak.Load()
		if l <= p || d.peak.CompareAndSwap(p, l) {
			break
		}
	}
	timer := time.NewTimer(d.delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		d.live.Add(-1)
		return nil, ctx.Err()
	}
	select {
	case <-d.hold:
	case <-ctx.Done():
		d.live.Add(-1)
		return nil, ctx.Err()
	}
	return &conn{id: int(n)}, nil
}

// destroy is the Destroy option that keeps live exact.
func (d *ftDialer) destroy(c *conn) error {
	d.destroyed.Add(1)
	defer d.live.Add(-1)
	return c.Close()
}

// TestDialStorm sends 100 callers with 1 ms deadlines at once against a
// factory that takes 50 ms, MaxSize 4. The crowd may start at most 4
// dials: each holds its permit until it ends. Every caller gets its ctx's
// error, context.DeadlineExceeded, as the package documentation says
// (doc.go, "Waiting and errors": a wait ended by ctx returns ctx.Err();
// "Lifecycle of an item": a caller that gives up on a creation does not
// wait for it), and counts as Canceled, not as a timeout. The abandoned
// dials finish in the background and their items go idle, later leases
// reuse them without dialling again, Close destroys them, and no goroutine
// is left behind.
func TestDialStorm(t *testing.T) {
	ignore := goleak.IgnoreCurrent() // goroutines of earlier tests still winding down are theirs
	const callers, maxSize = 100, 4
	d := &ftDialer{delay: 50 * time.Millisecond, hold: make(chan struct{})}
	p, err := New[*conn](bg, d, Options[*conn]{MaxSize: maxSize, Destroy: d.destroy})
	require.NoError(t, err)

	stop := make(chan struct{})
	var checks atomic.Int64
	var checker sync.WaitGroup
	checker.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			checks.Add(1)
			if !checkInvariants(t, p, d.live.Load) {
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	})

	start := make(chan struct{})
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(bg, time.Millisecond)
			defer cancel()
			l, err := p.Lease(ctx)
			if err == nil {
				l.Release()
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	close(d.hold) // the dials may finish now, once their 50 ms are up
	// A creation a caller gave up on may reach the factory after the caller
	// returned: count the dials once every permit has come back.
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond,
		"the abandoned dials finish")
	dials := d.started.Load()

	for i, err := range errs {
		assert.ErrorIs(t, err, context.DeadlineExceeded, "caller %d", i)
		assert.NotErrorIs(t, err, ErrLeaseTimeout, "caller %d", i)
	}
	s := p.Stats()
	assert.Equal(t, uint64(callers), s.Canceled, "every caller's ctx ended its lease")
	assert.Zero(t, s.Timeouts)
	assert.Zero(t, s.Leases)
	assert.Positive(t, dials, "the callers that got a permit dialled")
	assert.LessOrEqual(t, dials, int64(maxSize), "the storm started at most MaxSize dials")

	s = p.Stats()
	assert.Equal(t, int(dials), s.ItemsAvailable, "the abandoned dials' items went idle")
	close(stop)
	checker.Wait()
	assert.LessOrEqual(t, d.peak.Load(), int64(maxSize), "dials in flight plus items never exceed MaxSize")
	assert.Equal(t, dials, d.peak.Load(), "every dial started made an item that still exists")
	assert.Equal(t, dials, d.started.Load(), "no dial started after the storm")
	assert.Equal(t, uint64(dials), p.Stats().Created)

	// The items are reused: as many leases at once as dials, no new dial.
	var ls []Lease[*conn]
	seen := map[*conn]bool{}
	for range dials {
		l := mustLease(t, p)
		assert.False(t, seen[l.Value()], "one item in two leases")
		seen[l.Value()] = true
		ls = append(ls, l)
	}
	assert.Equal(t, dials, d.started.Load(), "leases reuse the abandoned dials' items")
	for _, l := range ls {
		l.Release()
	}
	assertAtRest(t, p)

	require.NoError(t, p.Close())
	assert.Zero(t, d.live.Load(), "Close destroyed every item")
	assert.Equal(t, dials, d.destroyed.Load())
	t.Logf("dial storm: %d callers, %d dials (peak %d in existence), %d invariant checks", callers, dials, d.peak.Load(), checks.Load())
	goleak.VerifyNone(t, ignore)
}

// ftChildEnv names the test that a child process of
// TestFaultDestroyPanicOfAbandonedCreationAfterClose runs.
const ftChildEnv = "POOL_FT_CHILD"

// TestFaultDestroyPanicOfAbandonedCreationAfterClose: an abandoned
// creation that finishes after Close hands its item to its Destroy, which
// runs on a goroutine of the pool's (createAsync → finish →
// giveBackToGate → destroyer.later), as every Destroy does (doc.go,
// "Lifecycle of an item": Destroyed). Nobody can recover a panic there, so
// it must not escape that goroutine, which would end the whole program:
// it is logged and counted (doc.go, "Waiting and errors"). The
// scenario runs in a child process, so that a crash fails this test rather
// than ending the test binary.
func TestFaultDestroyPanicOfAbandonedCreationAfterClose(t *testing.T) {
	if os.Getenv(ftChildEnv) == t.Name() {
		ftAbandonedCreationFinishesAfterClose(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), ftChildEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "the child process died: a Destroy panic escaped the pool's goroutine\n%s", out)
}

// ftAbandonedCreationFinishesAfterClose abandons a creation (its factory
// ignores its ctx, as a careless dial does, or finishes just as Close
// cancels it), closes the pool, lets the creation finish while Close waits for it, and waits for
// its item to be destroyed with a Destroy that panics. The pool must free
// the permit and count the item destroyed, and the process must live.
func ftAbandonedCreationFinishesAfterClose(t *testing.T) {
	started, proceed := make(chan struct{}, 1), make(chan struct{})
	f := FactoryFunc[*conn](func(context.Context) (*conn, error) {
		started <- struct{}{}
		<-proceed
		return &conn{id: 1}, nil
	})
	var destroys atomic.Int64
	p, err := New[*conn](bg, f, Options[*conn]{MaxSize: 1, Destroy: func(*conn) error {
		destroys.Add(1)
		panic(injectedFault{onDestroy, faultPanic})
	}})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(bg)
	ch := leaseAsync(ctx, p)
	recvOrFail(t, started, "Create")
	cancel()
	require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }() // it waits for the abandoned creation (Pool.Close)
	require.Eventually(t, func() bool { _, err := p.TryLease(bg); return errors.Is(err, ErrClosed) }, testWait, time.Millisecond)

	close(proceed) // the item arrives at a closed pool, on the pool's goroutine
	require.NoError(t, recvOrFail(t, closed, "Close, once the creation ended"), "no idle item: Close itself destroys nothing")
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond,
		"the permit of the creation comes back")
	assert.Equal(t, int64(1), destroys.Load())
	s := p.Stats()
	assert.Equal(t, uint64(1), s.Destroyed)
	assertAtRest(t, p)
}

// A factory that calls runtime.Goexit on the creating goroutine (a test's
// factory calling t.FailNow does) neither hangs the caller that waits for
// it, which gets a panic naming the mistake, nor loses the permit of a
// creation the caller abandoned.
func TestFaultFactoryGoexit(t *testing.T) {
	t.Run("caller waits", func(t *testing.T) {
		f := FactoryFunc[*conn](func(context.Context) (*conn, error) {
			runtime.Goexit()
			return nil, nil
		})
		p, err := New[*conn](bg, f, Options[*conn]{MaxSize: 1})
		require.NoError(t, err)
		defer p.Close()
		ctx, cancel := context.WithCancel(bg) // a ctx that can end: the creation runs on its own goroutine
		defer cancel()
		got := make(chan any, 1)
		go func() {
			defer func() { got <- recover() }()
			_, _ = p.Lease(ctx)
		}()
		assert.Equal(t, errFactoryGoexit, recvOrFail(t, got, "the Lease to panic"))
		assert.Zero(t, p.Stats().ActiveLeases, "the permit came back")
	})
	t.Run("abandoned", func(t *testing.T) {
		started, proceed := make(chan struct{}, 1), make(chan struct{})
		f := FactoryFunc[*conn](func(context.Context) (*conn, error) {
			started <- struct{}{}
			<-proceed
			runtime.Goexit()
			return nil, nil
		})
		p, err := New[*conn](bg, f, Options[*conn]{MaxSize: 1})
		require.NoError(t, err)
		defer p.Close()
		ctx, cancel := context.WithCancel(bg)
		ch := leaseAsync(ctx, p)
		recvOrFail(t, started, "Create")
		cancel()
		require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
		close(proceed)
		require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond,
			"the abandoned creation's permit comes back")
	})
}
