package pool

// Fault injection (issue 5, items 2 and 4). TestFaultInjection runs a
// concurrent load while the factory, the preparer (IsReady and Prepare),
// Options.Reset or Options.Destroy fail, panic or hang at random, and checks
// what SPEC.md promises about user code that misbehaves: the cap and the
// other invariants hold throughout, no item is ever held by two leases,
// every panic reaches the caller whose call ran the code (but one raised by
// a creation nobody waits for), every error says what happened, and once
// the faults stop the pool is whole: no permit lost or duplicated, every
// item accounted for. TestDialStorm sends a crowd of impatient callers
// against a slow factory: the crowd may cost at most MaxSize dials, and
// those dials are not wasted.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// ftHook names the user code a fault is injected into.
type ftHook int

const (
	ftCreate  ftHook = iota // Factory.Create
	ftIsReady               // Preparer.IsReady
	ftPrepare               // Preparer.Prepare
	ftReset                 // Options.Reset
	ftDestroy               // Options.Destroy
)

func (h ftHook) String() string {
	return [...]string{"Create", "IsReady", "Prepare", "Reset", "Destroy"}[h]
}

// ftKind is what an injected fault does.
type ftKind int

const (
	// ftFail returns an error (the ftFault).
	ftFail ftKind = iota
	// ftPanic panics with the ftFault.
	ftPanic
	// ftHang blocks: the factory and the preparer until their ctx ends
	// (then they return the ftFault wrapping ctx.Err()); Reset and Destroy,
	// which have no ctx, for 1 to 4 ms, and then succeed.
	ftHang
)

func (k ftKind) String() string { return [...]string{"fail", "panic", "hang"}[k] }

// ftFault is an injected fault: the error a failing hook returns (a hanging
// one wraps it around its ctx's error) and the value a panicking hook
// panics with. It is comparable, so errors.Is, errors.As and == find it
// however the pool wraps or re-raises it.
type ftFault struct {
	hook ftHook
	kind ftKind
}

func (f ftFault) Error() string { return fmt.Sprintf("ft: injected %v in %v", f.kind, f.hook) }

// ftFaults is a Factory, a Preparer and the Reset and Destroy hooks in one.
// While on is set it injects kind into hook on percent of that hook's calls,
// chosen at random. It keeps its own count of the items in existence, live:
// one more from the start of Create, one fewer when Create ends without an
// item, when Destroy ends (however it ends) or when the test detaches an
// item; so the cap is checked against the truth, not against the pool's
// figures. Every hook also checks that it never sees an item that a lease
// holds or that has been destroyed (or detached), and Destroy that no item
// is destroyed twice: each would mean two owners for one item.
type ftFaults struct {
	rep     *ftReporter
	hook    ftHook
	kind    ftKind
	percent int
	max     int // MaxSize: Create checks the cap the moment it starts
	on      atomic.Bool

	next      atomic.Int64 // item ids
	live      atomic.Int64
	created   atomic.Int64 // Creates that returned an item
	destroyed atomic.Int64 // Destroy calls
	injected  atomic.Int64 // faults injected
	// clearPanics counts the Destroy panics raised inside Clear: it raises
	// the first of them only (see ftRun.clearer).
	clearPanics atomic.Int64
}

// fire reports whether the call of hook h gets a fault, and counts it.
func (f *ftFaults) fire(h ftHook) bool {
	if h != f.hook || !f.on.Load() || rand.IntN(100) >= f.percent {
		return false
	}
	f.injected.Add(1)
	return true
}

// strike carries out a fault that fired in the factory or the preparer:
// it panics, or returns the error the hook must return. A hang waits for
// ctx to end.
func (f *ftFaults) strike(ctx context.Context) error {
	fault := ftFault{f.hook, f.kind}
	switch f.kind {
	case ftPanic:
		panic(fault)
	case ftHang:
		<-ctx.Done()
		return fmt.Errorf("%w: %w", fault, ctx.Err())
	}
	return fault
}

// strikeNoCtx is strike for Reset and Destroy, which have no ctx: a hang
// sleeps 1 to 4 ms and returns nil, the hook was only slow.
func (f *ftFaults) strikeNoCtx() error {
	fault := ftFault{f.hook, f.kind}
	switch f.kind {
	case ftPanic:
		panic(fault)
	case ftHang:
		time.Sleep(time.Duration(1+rand.IntN(4)) * time.Millisecond)
		return nil
	}
	return fault
}

func (f *ftFaults) Create(ctx context.Context) (*conn, error) {
	if n := f.live.Add(1); n > int64(f.max) {
		f.rep.Errorf("Create started with %d items in existence, more than MaxSize %d", n, f.max)
	}
	if f.fire(ftCreate) {
		defer f.live.Add(-1) // the creation ends without an item, also when it panics
		if m, ok := ctx.Value(ftLeaseKey{}).(*ftLeaseMark); ok && f.kind == ftPanic {
			m.createPanicked.Store(true) // the ctx keeps the caller's values
		}
		return nil, f.strike(ctx)
	}
	f.created.Add(1)
	return &conn{id: int(f.next.Add(1))}, nil
}

func (f *ftFaults) IsReady(ctx context.Context, c *conn) (bool, error) {
	f.vet(c, "IsReady")
	if f.fire(ftIsReady) {
		return false, f.strike(ctx)
	}
	return rand.IntN(2) == 0, nil // not ready half the time: Prepare runs too
}

func (f *ftFaults) Prepare(ctx context.Context, c *conn) error {
	f.vet(c, "Prepare")
	if f.fire(ftPrepare) {
		return f.strike(ctx)
	}
	return nil
}

// reset is the Reset option.
func (f *ftFaults) reset(c *conn) error {
	f.vet(c, "Reset")
	if f.fire(ftReset) {
		return f.strikeNoCtx()
	}
	return nil
}

// destroy is the Destroy option. The item stops existing when it returns,
// however it returns: the pool counts a Destroy that panics as done, too.
func (f *ftFaults) destroy(c *conn) error {
	if c.inUse.Load() {
		f.rep.Errorf("Destroy of item %d while a lease holds it", c.id)
	}
	if c.closed.Swap(true) {
		f.rep.Errorf("item %d destroyed twice, or destroyed after Detach", c.id)
	}
	f.destroyed.Add(1)
	defer f.live.Add(-1)
	if f.fire(ftDestroy) {
		if f.kind == ftPanic && ftInClear() {
			f.clearPanics.Add(1)
		}
		return f.strikeNoCtx()
	}
	return nil
}

// ftInClear reports whether Pool.Clear is on the calling goroutine's stack.
func ftInClear() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		fr, more := frames.Next()
		if strings.HasSuffix(fr.Function, ").Clear") {
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
// factory's ctx keeps: a panicking Create marks it, so the test can tell a
// panic that reached no caller from a lost one.
type ftLeaseMark struct{ createPanicked atomic.Bool }

// gone accounts for an item the test is about to Detach: it leaves the
// pool, so it stops counting against the cap (before its permit is freed,
// so live never runs ahead of the truth), and the pool must never hand it
// out or destroy it again.
func (f *ftFaults) gone(c *conn) {
	if c.closed.Swap(true) {
		f.rep.Errorf("detached item %d had been destroyed", c.id)
	}
	f.live.Add(-1)
}

// vet checks that user code handed item c is its only user: no lease holds
// it and it still exists.
func (f *ftFaults) vet(c *conn, hook string) {
	if c.inUse.Load() {
		f.rep.Errorf("%s saw item %d while a lease holds it", hook, c.id)
	}
	if c.closed.Load() {
		f.rep.Errorf("%s saw item %d after it was destroyed or detached", hook, c.id)
	}
}

// ftReporter reports the violations that the hooks and the workers find,
// from any goroutine: the first ten with t.Errorf, the rest only counted,
// so that a broken pool fails the test with a readable log.
type ftReporter struct {
	t testing.TB
	n atomic.Int64
}

// ftShown is how many violations an ftReporter shows.
const ftShown = 10

func (r *ftReporter) Errorf(format string, args ...any) {
	r.t.Helper()
	switch n := r.n.Add(1); {
	case n <= ftShown:
		r.t.Errorf(format, args...)
	case n == ftShown+1:
		r.t.Errorf("more violations follow, counted but not shown")
	}
}

// ftSite is the pool call that a caller saw a panic come out of.
type ftSite int

const (
	ftAtLease   ftSite = iota // Lease or TryLease
	ftAtRelease               // Lease.Release
	ftAtDiscard               // Lease.Discard
	ftAtClear                 // Pool.Clear
	ftSites
)

func (s ftSite) String() string { return [...]string{"Lease", "Release", "Discard", "Clear"}[s] }

// ftHookCase is a row of TestFaultInjection's table: a hook, the options
// that make the pool call it (and end its hangs), and the calls its panics
// may come out of.
type ftHookCase struct {
	hook      ftHook
	configure func(o *Options[*conn], f *ftFaults)
	sites     []ftSite
}

var ftHookCases = []ftHookCase{
	{ftCreate, func(*Options[*conn], *ftFaults) {}, // CreateTimeout, always set, ends the hangs
		[]ftSite{ftAtLease, ftAtClear}},
	{ftIsReady, ftWithPreparer, []ftSite{ftAtLease}},
	{ftPrepare, ftWithPreparer, []ftSite{ftAtLease}},
	{ftReset, func(*Options[*conn], *ftFaults) {}, []ftSite{ftAtRelease}},
	// Expiry makes leases and releases destroy items too, not only
	// Discard and Clear.
	{ftDestroy, func(o *Options[*conn], _ *ftFaults) {
		o.IdleTimeout, o.MaxLifetime = 2*time.Millisecond, 10*time.Millisecond
	}, []ftSite{ftAtLease, ftAtRelease, ftAtDiscard, ftAtClear}},
}

// ftWithPreparer makes f the preparer, checking every lease, with a
// PreparationTimeout shorter than some callers' deadlines and longer than
// others', so that both end hangs.
func ftWithPreparer(o *Options[*conn], f *ftFaults) {
	o.Preparer = f
	o.PreparationTimeout = 2 * time.Millisecond
}

const (
	ftWorkers   = 24
	ftMaxSize   = 4
	ftPercent   = 25                     // of the faulted hook's calls
	ftCaseTime  = 250 * time.Millisecond // load per case, at least
	ftMinFaults = 20                     // and until this many faults fired (bounded by testWait)
)

// ftFigures are what one case did, counted as it happened.
type ftFigures struct {
	ops, leases, injected, panicsSeen int64
	// The panics no caller saw: raised by creations whose callers had
	// given up, and by Destroy inside a Clear after the first one.
	panicsAbandoned, panicsClear                            int64
	faultErrs, ctxErrs, prepTimeouts, hangsByCtx, exhausted int64
	checks                                                  int64
}

func (a *ftFigures) add(b ftFigures) {
	a.ops += b.ops
	a.leases += b.leases
	a.injected += b.injected
	a.panicsSeen += b.panicsSeen
	a.panicsAbandoned += b.panicsAbandoned
	a.panicsClear += b.panicsClear
	a.faultErrs += b.faultErrs
	a.ctxErrs += b.ctxErrs
	a.prepTimeouts += b.prepTimeouts
	a.hangsByCtx += b.hangsByCtx
	a.exhausted += b.exhausted
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
		for _, kind := range []ftKind{ftFail, ftPanic, ftHang} {
			t.Run(hc.hook.String()+"/"+kind.String(), func(t *testing.T) {
				total.add(ftRunCase(t, hc, kind))
				cases++
			})
		}
	}
	t.Logf("fault injection, %d cases: %d operations (%d leases), %d faults injected, "+
		"%d panics seen by callers (not seen: %d of abandoned creations, %d later ones in a Clear), "+
		"%d injected errors returned (%d preparation timeouts, %d preparer hangs ended by the caller's ctx), "+
		"%d caller ctx errors, %d exhausted; %d invariant checks",
		cases, total.ops, total.leases, total.injected, total.panicsSeen, total.panicsAbandoned, total.panicsClear,
		total.faultErrs, total.prepTimeouts, total.hangsByCtx, total.ctxErrs, total.exhausted, total.checks)
}

// ftRunCase runs one case of TestFaultInjection and returns its figures.
// While the load runs it checks continuously (a checker goroutine, and
// each worker now and then) the invariants of checkInvariants, with the
// factory's own count of live items; each lease's exclusive use of its
// item; the value of every panic a caller recovers, and the call it came
// out of; and every error Lease returns (ftRun.checkErr). After the load,
// with the faults off, it checks that every panic injected reached a
// caller, but those SPEC.md lets go unseen (see below), and that the pool
// is whole (ftCheckWhole).
func ftRunCase(t *testing.T, hc ftHookCase, kind ftKind) ftFigures {
	f := &ftFaults{rep: &ftReporter{t: t}, hook: hc.hook, kind: kind, percent: ftPercent, max: ftMaxSize}
	opts := Options[*conn]{
		MinSize: 2, MaxSize: ftMaxSize,
		CreateTimeout: 3 * time.Millisecond, // ends the factory's hangs, also in the background
		Reset:         f.reset, Destroy: f.destroy,
	}
	hc.configure(&opts, f)
	p, err := New[*conn](bg, f, opts)
	require.NoError(t, err)
	t.Cleanup(func() { // when the case stops early; else ftCheckWhole has closed the pool
		f.on.Store(false)
		_ = p.Close()
	})
	r := &ftRun{t: t, p: p, f: f, sites: hc.sites}

	f.on.Store(true)
	r.load()
	f.on.Store(false)

	// Creations that callers abandoned finish in the background (the
	// hanging ones when CreateTimeout ends them): wait for their permits.
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond,
		"a permit was lost: %+v", p.Stats())

	fig := r.figures()
	assert.GreaterOrEqual(t, fig.injected, int64(ftMinFaults), "the faults fired")
	assert.LessOrEqual(t, fig.faultErrs, fig.injected, "each injected error reached one caller at most")
	s := p.Stats()
	if kind == ftPanic {
		// A panic reaches the caller whose call ran the code that raised
		// it, with two exceptions, both counted exactly. A panic in a
		// creation whose caller has given up counts as a failed creation
		// (SPEC.md, Creation); that caller's Lease returned its ctx's
		// error. And Clear, like Close, destroys every item even when
		// Destroy panics, and raises the first panic only.
		assert.Equal(t, fig.injected, fig.panicsSeen+fig.panicsAbandoned+fig.panicsClear,
			"panics injected = seen by callers + raised by abandoned creations + not raised again by Clear")
	}
	switch {
	case (hc.hook == ftIsReady || hc.hook == ftPrepare) && kind != ftPanic:
		// At least: a preparation that succeeds, but only after the 2 ms
		// PreparationTimeout (a slow moment under -race on two cores),
		// counts as failed too (SPEC.md: an elapsed PreparationTimeout
		// fails the preparation), and which ones do is up to the scheduler.
		assert.GreaterOrEqual(t, s.PrepareFailed, uint64(fig.injected), "every failed or timed-out preparation is counted")
	case hc.hook == ftReset && kind != ftHang:
		assert.GreaterOrEqual(t, s.Destroyed, uint64(fig.injected), "every failed Reset destroys its item")
	}
	assert.Equal(t, uint64(fig.leases), s.Leases, "Stats.Leases against the leases that succeeded")
	assert.Equal(t, uint64(r.detached.Load()), s.Detached)

	assert.Zero(t, f.rep.n.Load(), "violations found during the load")
	ftCheckWhole(t, p, f)
	t.Logf("%v/%v: %d operations (%d leases), %d faults injected, %d panics seen by callers (%s; "+
		"not seen: %d of abandoned creations, %d later ones in a Clear), "+
		"%d injected errors returned (%d preparation timeouts, %d preparer hangs ended by the caller's ctx), "+
		"%d caller ctx errors, %d exhausted; %d invariant checks",
		hc.hook, kind, fig.ops, fig.leases, fig.injected, fig.panicsSeen, r.panicsBySite(), fig.panicsAbandoned, fig.panicsClear,
		fig.faultErrs, fig.prepTimeouts, fig.hangsByCtx, fig.ctxErrs, fig.exhausted, fig.checks)
	return fig
}

// ftCheckWhole checks, with the faults off and nothing in flight, that the
// faults left the pool whole. MaxSize TryLeases succeed at once, on
// distinct items (no permit was lost), and one more gets ErrExhausted (none
// was duplicated). The accounting identity holds at rest, and the pool's
// figures agree with the factory's own counts: items created, destroyed
// and alive. Close then destroys every item.
func ftCheckWhole(t *testing.T, p *Pool[*conn], f *ftFaults) {
	t.Helper()
	require.True(t, checkInvariants(t, p, f.live.Load))
	seen := map[*conn]bool{}
	var ls []Lease[*conn]
	for i := range ftMaxSize {
		l, err := p.TryLease(bg)
		require.NoError(t, err, "lease %d of MaxSize %d: a permit was lost", i+1, ftMaxSize)
		c := l.Value()
		require.False(t, seen[c], "item %d handed to two leases", c.id)
		seen[c] = true
		ls = append(ls, l)
	}
	_, err := p.TryLease(bg)
	require.ErrorIs(t, err, ErrExhausted, "a lease past MaxSize: a permit was duplicated")
	for _, l := range ls {
		l.Release()
	}

	assertAtRest(t, p)
	s := p.Stats()
	assert.Equal(t, int64(s.ItemsAllocated), f.live.Load(), "the pool accounts for every item that exists")
	assert.Equal(t, uint64(f.created.Load()), s.Created)
	assert.Equal(t, uint64(f.destroyed.Load()), s.Destroyed)

	require.NoError(t, p.Close())
	assert.Zero(t, f.live.Load(), "Close destroyed every item")
	s = p.Stats()
	assert.Equal(t, s.Created, s.Destroyed+s.Detached)
}

// ftRun is the load of one case and what it counted.
type ftRun struct {
	t     *testing.T
	p     *Pool[*conn]
	f     *ftFaults
	sites []ftSite // where the case's panics may come out

	broken  atomic.Bool // an invariant failed: stop checking, one report is enough
	closing atomic.Bool // load closes the pool to free stuck workers: ErrClosed is expected

	ops, leases, detached, checks atomic.Int64
	panics                        [ftSites]atomic.Int64
	faultErrs, ctxErrs, exhd      atomic.Int64
	prepTimeouts, hangsByCtx      atomic.Int64
	slowPreps                     atomic.Int64 // unfaulted preparations past PreparationTimeout
	// clearUnraised counts the Destroy panics inside Clear that Clear did
	// not raise: all but the first of each Clear.
	clearUnraised atomic.Int64

	mu sync.Mutex
	// gaveUp holds the marks of the leases that returned their ctx's error:
	// the only ones whose creations can panic with nobody to see it.
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
	for end := time.Now().Add(testWait); r.f.injected.Load() < ftMinFaults && time.Now().Before(end); {
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

// check runs checkInvariants, until one fails.
func (r *ftRun) check() {
	if r.broken.Load() {
		return
	}
	r.checks.Add(1)
	if !checkInvariants(r.t, r.p, r.f.live.Load) {
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

// clearer calls Clear every millisecond or so: it destroys idle items
// (calling Destroy) and refills to MinSize (calling the factory), and its
// panics come out to it.
func (r *ftRun) clearer(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		time.Sleep(time.Millisecond)
		before := r.f.clearPanics.Load()
		r.ops.Add(1)
		panicked := r.guard(ftAtClear, r.p.Clear)
		if n := r.f.clearPanics.Load() - before; n > 0 {
			if !panicked {
				r.f.rep.Errorf("Destroy panicked %d times in Clear, which returned normally", n)
			}
			r.clearUnraised.Add(n - 1)
		}
	}
}

// worker leases and ends leases until stop, checking the invariants every
// 16 rounds.
func (r *ftRun) worker(seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, uint64(r.f.hook)<<8|uint64(r.f.kind)))
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
// a TryLease. The holder marks the item in use, checks nobody else does
// and that it was not destroyed, holds it a moment, and ends the lease:
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
	var l Lease[*conn]
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
	c := l.Value()
	if !c.inUse.CompareAndSwap(false, true) {
		r.f.rep.Errorf("item %d leased while another lease holds it", c.id)
	}
	if c.closed.Load() {
		r.f.rep.Errorf("leased item %d had been destroyed or detached", c.id)
	}
	if rng.IntN(4) == 0 {
		time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
	} else {
		runtime.Gosched()
	}
	c.inUse.Store(false)
	r.ops.Add(1)
	switch rng.IntN(20) {
	case 0, 1:
		r.guard(ftAtDiscard, l.Discard)
	case 2:
		r.f.gone(c)
		l.Detach()
		r.detached.Add(1)
	default:
		r.guard(ftAtRelease, l.Release)
	}
}

// guard calls fn, a call into the pool made at site, and reports whether
// it panicked. A panic must be the one this case injects, out of a call
// that runs the faulted hook; anything else is reported with its stack.
func (r *ftRun) guard(site ftSite, fn func()) (panicked bool) {
	defer func() {
		v := panicValue(recover())
		if v == nil {
			return
		}
		panicked = true
		r.panics[site].Add(1)
		if want := (ftFault{r.f.hook, ftPanic}); v != any(want) {
			r.f.rep.Errorf("%v panicked with %v (%T), want %v\n%s", site, v, v, want, debug.Stack())
			return
		}
		for _, s := range r.sites {
			if s == site {
				return
			}
		}
		r.f.rep.Errorf("a %v panic came out of %v, which never calls it", r.f.hook, site)
	}()
	fn()
	return false
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
	var fault ftFault
	switch {
	case errors.Is(err, ErrExhausted):
		r.exhd.Add(1)
		if !try {
			r.f.rep.Errorf("Lease, which waits, returned %v", err)
		}
	case errors.As(err, &fault):
		r.faultErrs.Add(1)
		if fault != (ftFault{r.f.hook, r.f.kind}) || fault.kind == ftPanic ||
			(fault.hook != ftCreate && fault.hook != ftIsReady && fault.hook != ftPrepare) {
			r.f.rep.Errorf("Lease returned %v, which this case's faults cannot cause", err)
		} else if fault.kind == ftHang {
			r.checkHang(ctx, err)
		}
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		r.ctxErrs.Add(1)
		return true
	case r.closing.Load() && errors.Is(err, ErrClosed):
	case errors.Is(err, ErrPreparationTimeout) && errors.Is(err, context.DeadlineExceeded):
		// A preparation with no fault that still took longer than the
		// 2 ms PreparationTimeout (a slow moment under -race on two
		// cores) fails all the same (SPEC.md, second round).
		r.slowPreps.Add(1)
	default:
		r.f.rep.Errorf("unexpected Lease error: %v", err)
	}
	return false
}

// checkHang checks the error of a hang in the factory or the preparer. The
// factory's ctx does not end with the caller's (SPEC.md, Creation), so only
// CreateTimeout ends its hang: the error wraps DeadlineExceeded. The
// preparer's ctx ends with PreparationTimeout, which gives
// ErrPreparationTimeout, or with the caller's ctx, which gives that ctx's
// error; a caller without a deadline always gets ErrPreparationTimeout.
func (r *ftRun) checkHang(ctx context.Context, err error) {
	switch {
	case r.f.hook == ftCreate:
		if !errors.Is(err, context.DeadlineExceeded) {
			r.f.rep.Errorf("a factory hang that CreateTimeout ended: %v does not wrap DeadlineExceeded", err)
		}
	case errors.Is(err, ErrPreparationTimeout):
		r.prepTimeouts.Add(1)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		r.hangsByCtx.Add(1)
	default:
		r.f.rep.Errorf("a preparer hang ended by neither PreparationTimeout nor the caller's ctx (err %v): %v", ctx.Err(), err)
	}
}

// figures returns what the run counted. Call it once nothing is in flight.
func (r *ftRun) figures() ftFigures {
	fig := ftFigures{
		ops: r.ops.Load(), leases: r.leases.Load(), injected: r.f.injected.Load(),
		faultErrs: r.faultErrs.Load(), ctxErrs: r.ctxErrs.Load(),
		prepTimeouts: r.prepTimeouts.Load(), hangsByCtx: r.hangsByCtx.Load(), exhausted: r.exhd.Load(), checks: r.checks.Load(),
	}
	for i := range r.panics {
		fig.panicsSeen += r.panics[i].Load()
	}
	fig.panicsAbandoned = r.abandonedPanics()
	fig.panicsClear = r.clearUnraised.Load()
	return fig
}

// abandonedPanics counts the creations that panicked after their caller
// gave up.
func (r *ftRun) abandonedPanics() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, m := range r.gaveUp {
		if m.createPanicked.Load() {
			n++
		}
	}
	return n
}

// panicsBySite lists the calls the panics came out of, for the log.
func (r *ftRun) panicsBySite() string {
	var b strings.Builder
	for s := range ftSites {
		if n := r.panics[s].Load(); n > 0 {
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
// error, context.DeadlineExceeded, as SPEC.md says (Lease path: a wait
// ended by ctx returns ctx.Err(); Creation: a caller that gives up on a
// creation does not wait for it), and counts as Canceled, not as a
// timeout. The abandoned dials finish in the background and their items
// go idle, later leases reuse them without dialling again, Close destroys
// them, and no goroutine is left behind.
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
	dials := d.started.Load()
	close(d.hold) // the dials may finish now, once their 50 ms are up

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

	require.Eventually(t, func() bool { s := p.Stats(); return s.ItemsAvailable == int(dials) && s.ActiveLeases == 0 },
		testWait, time.Millisecond, "the abandoned dials finish and their items go idle")
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
// creation that finishes after Close destroys its item on the pool's own
// goroutine (createAsync → adopt → putBack → toGate → destroyAndFree). SPEC.md says
// a panic in user code reaches the caller, and one in a creation nobody
// waits for counts as a failed creation; here nobody can recover a Destroy
// panic, so it must not escape that goroutine, which would end the whole
// program. The scenario runs in a child process, so that a crash fails
// this test rather than ending the test binary.
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
// cancels it), closes the pool, lets the creation finish, and waits for
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
		panic(ftFault{ftDestroy, ftPanic})
	}})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(bg)
	ch := leaseAsync(ctx, p)
	lcRecv(t, started, "Create")
	cancel()
	require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
	require.NoError(t, p.Close()) // no idle item: Close itself destroys nothing

	close(proceed) // the item arrives at a closed pool, on the pool's goroutine
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
		assert.Equal(t, errFactoryGoexit, lcRecv(t, got, "the Lease to panic"))
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
		lcRecv(t, started, "Create")
		cancel()
		require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
		close(proceed)
		require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 }, testWait, time.Millisecond,
			"the abandoned creation's permit comes back")
	})
}
