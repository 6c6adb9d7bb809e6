package pool

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

// TestSoak's flags. CI runs it for longer than the default:
//
//	go test -race -run '^TestSoak$' -soak=20s -v .
//
// and a failure is replayed (as far as scheduling allows) with the seed
// that the run logged: -soakseed=N.
var (
	skSoak     = flag.Duration("soak", 0, "how long TestSoak runs, split between its close and shutdown halves; 0: about 2s")
	skSoakSeed = flag.Uint64("soakseed", 0, "TestSoak's base seed, to replay a run's random choices; 0: a fresh one (logged)")
)

const (
	skDefaultSoak = 2 * time.Second
	skWorkers     = 64
	skMaxSize     = 8 // small, so that leases contend and queue
	skMinSize     = 2 // so that Clear refills
	skCheckEvery  = 64
	// SetMaxSize: every 0.5–3 ms, a size in [max(1, MinSize), skMaxSize];
	// skMaxSize again before the end.
	skResizeMin  = 500 * time.Microsecond
	skResizeSpan = 2500 * time.Microsecond
	skMaxReports = 20 // violations reported in full; past that they are only counted

	// Fault rates, per call of the hook.
	skFactoryFailRate  = 0.02
	skFactoryPanicRate = 0.005
	skFactorySlowRate  = 0.10 // the factory dials for up to skSlowCreate, honouring its ctx
	skSlowCreate       = 300 * time.Microsecond
	skPreparePanicRate = 0.002 // IsReady panics
	skReadyFailRate    = 0.01  // IsReady fails
	skNotReadyRate     = 0.05  // IsReady says not ready, so Prepare runs
	skPrepareFailRate  = 0.20  // of the Prepare calls
	skResetPanicRate   = 0.003
	skResetFailRate    = 0.03
	skDestroyFailRate  = 0.01  // Destroy disposes of the item but reports an error
	skDestroyPanicRate = 0.003 // on the pool's own goroutines, as every Destroy: no caller sees these
	skDestroyExitRate  = 0.002 // runtime.Goexit
	skDestroyHangRate  = 0.002 // blocks until the end of the half: DestroyTimeout gives the room back
)

// skRates are the soak's faults, as the harness's rates.
func skRates() (r [numHooks]faultRates) {
	r[onCreate] = faultRates{panic: skFactoryPanicRate, fail: skFactoryFailRate, slow: skFactorySlowRate, slowFor: skSlowCreate}
	r[onIsReady] = faultRates{panic: skPreparePanicRate, fail: skReadyFailRate, notReady: skNotReadyRate}
	r[onPrepare] = faultRates{fail: skPrepareFailRate}
	r[onReset] = faultRates{panic: skResetPanicRate, fail: skResetFailRate}
	r[onDestroy] = faultRates{fail: skDestroyFailRate, panic: skDestroyPanicRate, goexit: skDestroyExitRate, hang: skDestroyHangRate}
	return r
}

// skConfig is one half of the soak: how it ends and the pool's options.
type skConfig struct {
	mode           string // "close" or "shutdown": what ends the run under load
	seed           uint64
	run            time.Duration
	leaseTimeout   time.Duration
	checkAfterIdle time.Duration
	idleTimeout    time.Duration
	maxLifetime    time.Duration
	upkeep         time.Duration // UpkeepInterval; 0: none
	destroyTimeout time.Duration // DestroyTimeout, always set: it ends the hangs of Destroy
	minIdle        int           // MinIdle; 0: none
	maxQueued      int           // MaxQueuedLeases; 0: no cap
	maxCreating    int           // MaxConcurrentCreates; 0: no cap
	maxUses        int           // MaxUses; 0: no limit
	metrics        bool          // an SDK MeterProvider, whose counters are checked at the end
}

// skConfigure derives the i-th half's configuration from the base seed.
// LeaseTimeout, CheckAfterIdle, the upkeep, MinIdle, MaxQueuedLeases,
// MaxConcurrentCreates and MaxUses are on in one half and off in the other
// (which one is the seed's choice), so every run sees both.
func skConfigure(base uint64, i int, mode string, run time.Duration) skConfig {
	r := rand.New(rand.NewPCG(base, uint64(i)))
	cfg := skConfig{
		mode:           mode,
		seed:           r.Uint64(),
		run:            run,
		idleTimeout:    time.Duration(500+r.IntN(1500)) * time.Microsecond,
		maxLifetime:    time.Duration(3000+r.IntN(7000)) * time.Microsecond,
		destroyTimeout: time.Duration(1000+r.IntN(4000)) * time.Microsecond,
		metrics:        mode == "shutdown",
	}
	if (base&1 == 1) == (i == 0) {
		cfg.leaseTimeout = time.Duration(2000+r.IntN(3000)) * time.Microsecond
	}
	if (base&2 == 2) == (i == 0) {
		cfg.checkAfterIdle = time.Duration(100+r.IntN(400)) * time.Microsecond
	}
	if (base&4 == 4) == (i == 0) {
		cfg.upkeep = time.Duration(1000+r.IntN(4000)) * time.Microsecond
	}
	if (base&8 == 8) == (i == 0) {
		cfg.minIdle = 1 + r.IntN(skMaxSize)
	}
	if (base&16 == 16) == (i == 0) {
		cfg.maxQueued = 1 + r.IntN(skWorkers/2)
	}
	if (base&32 == 32) == (i == 0) {
		cfg.maxCreating = 1 + r.IntN(3)
	}
	if (base&64 == 64) == (i == 0) {
		cfg.maxUses = 2 + r.IntN(20)
	}
	return cfg
}

// skCounts are the figures of one half, each an atomic count of what really
// happened. The faults injected, and the items made and destroyed, are the
// harness's counts.
type skCounts struct {
	closedInUpkeep atomic.Bool // Close was called from a callback the upkeep ran

	// Lease and TryLease calls, by outcome; queueFull: Lease refused by
	// MaxQueuedLeases.
	ops, leaseOK, timeouts, canceled, exhausted, queueFull, closed atomic.Int64
	createFailed, prepareFailed, leasePanics                       atomic.Int64 // injected failures and panics that reached a lease

	// How the workers ended their leases.
	release, discard, detach, doubleRelease atomic.Int64
	staleRelease, staleOnHeld, handoff      atomic.Int64 // staleOnHeld: the stale handle was of the item held
	racingEnds, valueChecks                 atomic.Int64

	// The helpers' work.
	clears, statsReads, checks, calmPhases atomic.Int64
	maxQueued                              atomic.Int64
	// The spares task's creations (MinIdle); the Destroy errors that Close
	// and Shutdown returned rather than logged, and those of them past
	// DestroyTimeout.
	spareCreates, stopDestroyErrs, stopTimeouts atomic.Int64
	resizes, shrinks, minSizeSet                atomic.Int64 // SetMaxSize calls; to a smaller size; the smallest set

	// Panics seen by the callers of the pool, by the hook that raised them.
	seen                               [numHooks]atomic.Int64
	upkeepPrepare, upkeepPreparePanics atomic.Int64 // the upkeep's checks, and the panics in them (no caller to reach)
}

// skRun is one half of the soak: the pool, its user code (the faults
// harness: the factory, the Preparer, Reset and Destroy) and the goroutines
// that load it.
type skRun struct {
	t      *testing.T
	cfg    skConfig
	p      *Pool[*faultItem]
	f      *faults
	reader *sdkmetric.ManualReader // nil without metrics

	// closeReturned is set once Close has returned (close half): a lease
	// begun after that must fail.
	closeReturned atomic.Bool
	// closeInUpkeep, when set, makes the next factory or Destroy call of an
	// upkeep round call Close itself, and
	// send Close's error on closedInUpkeep (close half, with the upkeep on).
	closeInUpkeep  atomic.Bool
	closedInUpkeep chan error
	// active is how many workers lease now; the others rest.
	active atomic.Int64

	stale    skStale        // handles of ended leases
	handoffs chan skHandoff // leases left for the courier to end
	stop     chan struct{}  // ends the clearer and the checker
	// sizes resizes the pool (the resizer) and checks its invariants.
	sizes      *sizeWindow[*faultItem]
	stopResize chan struct{} // ends the resizer, which restores skMaxSize

	invFailures atomic.Int64
	stopTook    time.Duration    // from Close or Shutdown to the end of the drain
	destroyedBy map[string]int64 // pool.items.destroyed by reason, with metrics
	c           skCounts
}

// skHandoff is a lease a worker left to the courier, with its item.
type skHandoff struct {
	l  Lease[*faultItem]
	it *faultItem
}

// skStart makes the pool of one half. The harness injects nothing while
// New seeds the pool, and from then on faults at the soak's rates, drawn
// from the half's seed; it counts the upkeep's checks (their ctx carries no
// skLeaseKey) and the panics in them apart, since those reach no caller,
// and the spares task's creations; and it checks that Destroy runs on the
// pool's own goroutines only. Every item exists at most skMaxSize at once:
// the largest MaxSize ever set (the Destroy calls the pool gave up on after
// DestroyTimeout left out: see faults.inExistence). A Destroy that hangs
// blocks until verify unblocks it.
func skStart(t *testing.T, cfg skConfig) *skRun {
	f := newFaults(t, cfg.seed)
	f.shown, f.max, f.rates = skMaxReports, skMaxSize, skRates()
	f.unhang = make(chan struct{})
	t.Cleanup(f.unhangAll) // when the half stops early; else verify has
	s := &skRun{
		t:          t,
		cfg:        cfg,
		f:          f,
		handoffs:   make(chan skHandoff, skMaxSize),
		stop:       make(chan struct{}),
		stopResize: make(chan struct{}),
	}
	f.decide = func(ctx context.Context, h faultHook) faultKind {
		// Not from IsReady: a check that Close cuts short is not counted
		// as a failed preparation, which verify's count would have to know.
		// Not from Destroy either: it runs on the pool's Destroy tasks, not
		// in the upkeep's round.
		if h == onCreate && ftOnStack(").upkeepRound") && s.closeInUpkeep.CompareAndSwap(true, false) {
			err := s.p.Close() // from inside the upkeep's own callback: it must return
			s.closeReturned.Store(true)
			s.closedInUpkeep <- err
		}
		switch {
		case h == onDestroy && !ftInDestroyTask():
			s.violate("Destroy ran on a caller's goroutine, not on one of the pool's own")
		case h == onCreate && ftOnStack(").spares"):
			s.c.spareCreates.Add(1)
		}
		k := f.roll(h)
		if h == onIsReady && ctx.Value(skLeaseKey{}) == nil {
			s.c.upkeepPrepare.Add(1)
			if k == faultPanic {
				s.c.upkeepPreparePanics.Add(1)
			}
		}
		return k
	}
	opts := Options[*faultItem]{
		Name:                 "soak-" + cfg.mode,
		MinSize:              skMinSize,
		MaxSize:              skMaxSize,
		LeaseTimeout:         cfg.leaseTimeout,
		IdleTimeout:          cfg.idleTimeout,
		MaxLifetime:          cfg.maxLifetime,
		Preparer:             f,
		CheckAfterIdle:       cfg.checkAfterIdle,
		Reset:                f.reset,
		Destroy:              f.destroy,
		DestroyTimeout:       cfg.destroyTimeout,
		UpkeepInterval:       cfg.upkeep,
		MinIdle:              cfg.minIdle,
		MaxQueuedLeases:      cfg.maxQueued,
		MaxUses:              cfg.maxUses,
		MaxConcurrentCreates: cfg.maxCreating,
		Logger:               f.logger(),
	}
	if cfg.maxCreating > 0 {
		opts.CreateTimeout = time.Minute // required with the cap; no slow dial reaches it
	}
	if cfg.metrics {
		s.reader = sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		opts.MeterProvider = mp
	}
	p, err := New[*faultItem](context.Background(), f, opts)
	require.NoError(t, err)
	s.p = p
	s.sizes = newSizeWindow(p)
	s.c.minSizeSet.Store(skMaxSize)
	f.on.Store(true)
	s.active.Store(skWorkers)
	return s
}

// violate reports a broken promise of the pool's, from any goroutine; past
// skMaxReports it only counts, so that one bug does not bury the log.
func (s *skRun) violate(format string, args ...any) {
	s.t.Helper()
	s.f.violate(format, args...)
}

// skMax raises m to v if v is larger.
func skMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// panicSeen checks a panic that a call into the pool raised: it must be one
// the harness injected, from user code that the call runs (a lease runs
// the factory and the Preparer; Release runs Reset; Discard and Clear run
// none: Destroy and Clear's refill run on the pool's own goroutines). Any
// other panic is the pool's own, or reached the wrong caller.
func (s *skRun) panicSeen(v any, hooks ...faultHook) {
	p, ok := panicValue(v).(injectedFault)
	if !ok || p.kind != faultPanic || !slices.Contains(hooks, p.hook) {
		s.violate("unexpected panic %#v (want an injected one from %v)", v, hooks)
		return
	}
	s.c.seen[p.hook].Add(1)
}

// release ends l with Release; a panic of Reset's must come out of it.
func (s *skRun) release(l Lease[*faultItem]) {
	if v, panicked := catchPanic(l.Release); panicked {
		s.panicSeen(v, onReset)
	}
}

// discard ends l with Discard, which runs no user code that panics.
func (s *skRun) discard(l Lease[*faultItem]) {
	if v, panicked := catchPanic(l.Discard); panicked {
		s.panicSeen(v)
	}
}

// skValue returns l.Value(), and false if it panicked.
func skValue(l Lease[*faultItem]) (it *faultItem, ok bool) {
	_, panicked := catchPanic(func() { it = l.Value() })
	return it, !panicked
}

// checkEnded checks that Value refuses an ended lease, with a message that
// names the mistake.
func (s *skRun) checkEnded(l Lease[*faultItem]) {
	s.c.valueChecks.Add(1)
	v, panicked := catchPanic(func() { _ = l.Value() })
	if !panicked {
		s.violate("Value of an ended lease returned instead of panicking")
		return
	}
	if msg, _ := v.(string); !strings.Contains(msg, "after the lease ended") {
		s.violate("Value of an ended lease panicked with %#v", v)
	}
}

// skLeaseKey marks a lease's ctx, so that the Preparer tells a lease's
// check from the upkeep's.
type skLeaseKey struct{}

// skLeaseCtx returns the context of one lease: none (40 %), a deadline
// 0.05–5 ms away (35 %), a cancel 0.05–5 ms away (20 %), or one that has
// ended already (5 %: canceled, or past its deadline).
func skLeaseCtx(r *rand.Rand) (context.Context, context.CancelFunc) {
	bg := context.WithValue(context.Background(), skLeaseKey{}, true)
	d := time.Duration(50+r.IntN(4951)) * time.Microsecond
	switch k := r.IntN(100); {
	case k < 40:
		return bg, func() {}
	case k < 75:
		return context.WithTimeout(bg, d)
	case k < 95:
		ctx, cancel := context.WithCancel(bg)
		tm := time.AfterFunc(d, cancel)
		return ctx, func() { tm.Stop(); cancel() }
	case k < 98:
		ctx, cancel := context.WithCancel(bg)
		cancel()
		return ctx, cancel
	default:
		return context.WithDeadline(bg, time.Now().Add(-time.Millisecond))
	}
}

// skHold holds an item for 0–200 µs: not at all, a yield, or a sleep.
func skHold(r *rand.Rand) {
	switch r.IntN(4) {
	case 0:
	case 1:
		runtime.Gosched()
	default:
		time.Sleep(time.Duration(1+r.IntN(200)) * time.Microsecond)
	}
}

// skStale keeps copies of the last leases the workers and the courier
// ended, for a worker to end again while it holds another lease. It is
// shared: the lease a worker gets was most often ended just before by
// another goroutine, whose handle of the same item is then here.
type skStale struct {
	mu sync.Mutex
	ls [skWorkers]Lease[*faultItem]
	n  int
}

// add keeps l, which the caller has ended.
func (k *skStale) add(l Lease[*faultItem]) {
	k.mu.Lock()
	k.ls[k.n%len(k.ls)] = l
	k.n++
	k.mu.Unlock()
}

// pick returns a kept handle, or false when none is kept yet. Half the time
// it prefers one of held's item, if it keeps one: then a stale handle that
// wrongly ended the lease held now shows directly.
func (k *skStale) pick(r *rand.Rand, held Lease[*faultItem]) (Lease[*faultItem], bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kept := min(k.n, len(k.ls))
	if kept == 0 {
		return Lease[*faultItem]{}, false
	}
	if r.IntN(2) == 0 {
		for _, l := range k.ls[:kept] {
			if l.e == held.e {
				return l, true
			}
		}
	}
	return k.ls[r.IntN(kept)], true
}

// worker leases and ends leases until the pool says ErrClosed. The i-th
// worker rests while fewer than i+1 are active (a calm phase).
func (s *skRun) worker(i int, r *rand.Rand) {
	for n := 1; ; n++ {
		if int64(i) >= s.active.Load() {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		s.c.ops.Add(1)
		l, ok, closed := s.lease(r)
		if closed {
			return
		}
		if ok {
			s.use(r, l)
		}
		if n%skCheckEvery == 0 {
			s.check()
		}
	}
}

// lease makes one Lease (7 in 8) or TryLease call with a random context and
// sorts the outcome the way Stats and pool.lease.errors do: a timeout;
// ErrClosed; an error that is the caller's ctx's own (canceled); ErrExhausted
// (from a Lease, only with MaxQueuedLeases, and then naming it); an
// injected failure. ok reports a lease; closed, ErrClosed.
func (s *skRun) lease(r *rand.Rand) (l Lease[*faultItem], ok, closed bool) {
	ctx, cancel := skLeaseCtx(r)
	defer cancel()
	try := r.IntN(8) == 0
	late := s.closeReturned.Load()
	var err error
	if v, panicked := catchPanic(func() {
		if try {
			l, err = s.p.TryLease(ctx)
		} else {
			l, err = s.p.Lease(ctx)
		}
	}); panicked {
		s.c.leasePanics.Add(1)
		s.panicSeen(v, onCreate, onIsReady, onPrepare)
		return l, false, false
	}
	switch {
	case err == nil:
		s.c.leaseOK.Add(1)
		if late {
			s.violate("a lease begun after Close returned succeeded")
		}
		return l, true, false
	case errors.Is(err, ErrLeaseTimeout):
		s.c.timeouts.Add(1)
		if try || s.cfg.leaseTimeout == 0 {
			s.violate("ErrLeaseTimeout (TryLease %v, LeaseTimeout %v): %v", try, s.cfg.leaseTimeout, err)
		}
	case errors.Is(err, ErrClosed): // first: Close ended it, whatever ctx says
		s.c.closed.Add(1)
		return l, false, true
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		s.c.canceled.Add(1)
	case errors.Is(err, ErrExhausted) && try:
		s.c.exhausted.Add(1)
	case errors.Is(err, ErrExhausted):
		s.c.queueFull.Add(1)
		if s.cfg.maxQueued == 0 || !strings.Contains(err.Error(), "MaxQueuedLeases") {
			s.violate("Lease (not TryLease) returned %v, MaxQueuedLeases %d", err, s.cfg.maxQueued)
		}
		// Refused at once: a caller backs off before it tries again.
		time.Sleep(time.Duration(100+r.IntN(200)) * time.Microsecond)
	case errors.Is(err, injectedFault{onCreate, faultFail}):
		s.c.createFailed.Add(1)
	case errors.Is(err, injectedFault{onIsReady, faultFail}), errors.Is(err, injectedFault{onPrepare, faultFail}):
		s.c.prepareFailed.Add(1)
	default:
		s.violate("unexpected lease error: %v", err)
	}
	return l, false, false
}

// use takes l's item (the harness reports a lease ended under it, a second
// holder, and an item that no longer exists), holds it briefly, and ends
// the lease one of the ways a caller can: Release (40 %), Discard (10 %),
// Detach (5 %), twice (12 %), with a stale handle ended first (10 %), by
// the courier (8 %), or by two copies at once (15 %). When the worker
// ended it, l joins the stale handles.
func (s *skRun) use(r *rand.Rand, l Lease[*faultItem]) {
	it, ok := s.f.take(l)
	if !ok {
		return
	}
	skHold(r)
	switch k := r.IntN(100); {
	case k < 40:
		s.c.release.Add(1)
		s.f.unhold(it)
		s.release(l)
	case k < 50:
		s.c.discard.Add(1)
		s.f.unhold(it)
		s.discard(l)
	case k < 55:
		s.detach(r, l, it)
	case k < 67:
		s.endTwice(r, l, it)
	case k < 77:
		if old, ok := s.stale.pick(r, l); ok {
			s.endStaleFirst(r, l, it, old)
			break
		}
		s.c.release.Add(1)
		s.f.unhold(it)
		s.release(l)
	case k < 85:
		if s.handOff(l, it) {
			return // the courier's now: not stale until it ends it
		}
	default:
		s.endRacing(r, l, it)
	}
	if r.IntN(8) == 0 {
		s.checkEnded(l)
	}
	s.stale.add(l)
}

// detach takes the item out with Detach and disposes of it as its new owner.
// From then on the pool must not touch it (the harness checks its state).
func (s *skRun) detach(r *rand.Rand, l Lease[*faultItem], it *faultItem) {
	s.c.detach.Add(1)
	s.f.unhold(it)
	s.f.detaching(it) // before Detach frees the permit
	var got *faultItem
	if v, panicked := catchPanic(func() { got = l.Detach() }); panicked {
		s.violate("Detach of a held lease panicked: %v", v)
		return
	}
	if got != it {
		s.violate("Detach returned item %p, the lease held item %d", got, it.id)
	}
	skHold(r)
	s.f.disposed(it)
}

// endTwice releases l, then ends it again through l or a copy, with Release
// or Discard: the second call must do nothing (reset and destroy catch a
// lease ended twice).
func (s *skRun) endTwice(r *rand.Rand, l Lease[*faultItem], it *faultItem) {
	s.c.doubleRelease.Add(1)
	s.f.unhold(it)
	s.release(l)
	cp := l
	switch r.IntN(3) {
	case 0:
		s.release(l)
	case 1:
		s.release(cp)
	default:
		s.discard(cp)
	}
}

// endStaleFirst ends stale, a handle of an earlier lease, while l is held:
// with Release, Discard or Detach. All must do nothing (Detach panics), and
// l must still be valid, which checks it directly when stale was a handle of
// the same item; otherwise reset and destroy catch an item ended twice.
func (s *skRun) endStaleFirst(r *rand.Rand, l Lease[*faultItem], it *faultItem, stale Lease[*faultItem]) {
	s.c.staleRelease.Add(1)
	if stale.e == l.e {
		s.c.staleOnHeld.Add(1)
	}
	switch r.IntN(8) {
	case 0:
		s.discard(stale)
	case 1:
		if v, panicked := catchPanic(func() { stale.Detach() }); !panicked {
			s.violate("Detach of a stale handle returned %v instead of panicking", v)
		}
	default:
		s.release(stale)
	}
	if got, ok := skValue(l); !ok || got != it {
		s.violate("ending a stale handle ended the lease of item %d held now", it.id)
	}
	if !it.inUse.Load() {
		s.violate("item %d, held, lost its in-use mark as a stale handle ended", it.id)
	}
	s.f.unhold(it)
	s.release(l)
}

// handOff leaves l to the courier, which ends it later, and reports true; or,
// when the courier is busy, releases it and reports false.
func (s *skRun) handOff(l Lease[*faultItem], it *faultItem) bool {
	select {
	case s.handoffs <- skHandoff{l, it}:
		s.c.handoff.Add(1)
		return true
	default:
		s.c.release.Add(1)
		s.f.unhold(it)
		s.release(l)
		return false
	}
}

// endRacing ends l from two goroutines at once, each with Release or
// Discard on its own copy: exactly one call must take effect.
func (s *skRun) endRacing(r *rand.Rand, l Lease[*faultItem], it *faultItem) {
	s.c.racingEnds.Add(1)
	s.f.unhold(it)
	cp := l
	theirs, mine := r.IntN(4) == 0, r.IntN(4) == 0 // true: Discard
	var wg sync.WaitGroup
	wg.Go(func() {
		if theirs {
			s.discard(cp)
		} else {
			s.release(cp)
		}
	})
	if mine {
		s.discard(l)
	} else {
		s.release(l)
	}
	wg.Wait()
}

// courier ends the leases the workers left to it, after holding each a
// little: mostly with Release, sometimes with Discard. A lease must still
// be valid when it gets it.
func (s *skRun) courier(r *rand.Rand) {
	for h := range s.handoffs {
		if got, ok := skValue(h.l); !ok || got != h.it {
			s.violate("a lease left to the courier ended before the courier ended it (item %d)", h.it.id)
		}
		skHold(r)
		s.f.unhold(h.it)
		if r.IntN(5) == 0 {
			s.discard(h.l)
		} else {
			s.release(h.l)
		}
		s.stale.add(h.l)
	}
}

// clearer calls Clear (which raises nothing: its refill and its Destroy
// calls run on the pool's own goroutines) and reads Stats at random
// intervals of up to 2 ms, until stop.
func (s *skRun) clearer(r *rand.Rand) {
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
		if v, panicked := catchPanic(s.p.Clear); panicked {
			s.panicSeen(v)
		}
		s.c.clears.Add(1)
		s.observe(s.p.Stats())
		s.check()
	}
}

// resizer calls SetMaxSize every 0.5–3 ms with a size in [max(1, MinSize),
// skMaxSize], until stopResize; then it restores skMaxSize, so that the
// pool ends as it began. SetMaxSize must succeed: the pool is open.
func (s *skRun) resizer(r *rand.Rand) {
	lo := max(1, skMinSize)
	size := skMaxSize
	for {
		select {
		case <-s.stopResize:
			if err := s.sizes.setMaxSize(skMaxSize); err != nil {
				s.violate("SetMaxSize(%d) at the end: %v", skMaxSize, err)
			}
			return
		case <-time.After(skResizeMin + time.Duration(r.Int64N(int64(skResizeSpan)))):
		}
		n := lo + r.IntN(skMaxSize-lo+1)
		if err := s.sizes.setMaxSize(n); err != nil {
			s.violate("SetMaxSize(%d): %v", n, err)
		}
		s.c.resizes.Add(1)
		if n < size {
			s.c.shrinks.Add(1)
		}
		size = n
		if n < int(s.c.minSizeSet.Load()) {
			s.c.minSizeSet.Store(int64(n))
		}
		s.check()
	}
}

// checker checks the invariants continuously, until stop.
func (s *skRun) checker() {
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		s.observe(s.p.Stats())
		s.check()
		runtime.Gosched()
	}
}

// observe notes a Stats read and the longest queue seen.
func (s *skRun) observe(st Stats) {
	s.c.statsReads.Add(1)
	skMax(&s.c.maxQueued, int64(st.QueuedLeases))
}

// check runs checkInvariants against the harness's own count of the items
// in existence, and checks that no more leases wait than MaxQueuedLeases
// allows: the newcomers it admitted, and the waiting leases whose item
// failed its check and that queued again (Options.MaxQueuedLeases), at
// most one for each item, so at most skMaxSize. After skMaxReports
// failures it stops: the test has failed, and the log should stay readable.
func (s *skRun) check() {
	if s.invFailures.Load() >= skMaxReports {
		return
	}
	s.c.checks.Add(1)
	ok := s.sizes.check(s.t, s.f.inExistence)
	st := s.p.Stats()
	if s.cfg.maxQueued > 0 && st.QueuedLeases > s.cfg.maxQueued+skMaxSize {
		s.t.Errorf("%d leases queue, past MaxQueuedLeases %d and the requeued: %+v", st.QueuedLeases, s.cfg.maxQueued, st)
		ok = false
	}
	if s.cfg.maxCreating > 0 && st.Creating > s.cfg.maxCreating {
		s.t.Errorf("%d items being created, past MaxConcurrentCreates %d: %+v", st.Creating, s.cfg.maxCreating, st)
		ok = false
	}
	if !ok {
		s.invFailures.Add(1)
	}
}

// goGuarded runs f on a goroutine of wg's, and reports it when f ends by
// runtime.Goexit: a Destroy that calls it ends only the pool's own
// goroutine, never a caller's (doc.go, "Waiting and errors").
func (s *skRun) goGuarded(wg *sync.WaitGroup, what string, f func()) {
	wg.Go(func() {
		returned := false
		defer func() {
			if !returned {
				s.violate("%s ended by runtime.Goexit: user code's Goexit reached a caller", what)
			}
		}()
		f()
		returned = true
	})
}

// skAwait waits for wg. A hang is a bug that no assertion can report
// cleanly (the stuck goroutines would log after the test ends), so after
// testWait it panics with every goroutine's stack.
func skAwait(wg *sync.WaitGroup, what string) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(testWait):
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("TestSoak: %s did not stop within %v\n\n%s", what, testWait, buf))
	}
}

// checkStopErr checks what Close or Shutdown returned: nil, or the errors
// of the Destroy calls of the idle items that Close destroyed, joined: each
// a failure, a panic (as an error), a Goexit or one past DestroyTimeout
// (Options.DestroyTimeout; Pool.Close); never a ctx error (Shutdown's wait
// is bounded by testWait). It counts them, since Close returns them rather
// than logging them.
func (s *skRun) checkStopErr(what string, err error) {
	for _, leaf := range skLeaves(err) {
		var fault injectedFault
		switch {
		case errors.Is(leaf, errDestroyTimeout):
			s.c.stopDestroyErrs.Add(1)
			s.c.stopTimeouts.Add(1)
		case errors.As(leaf, &fault) && fault.hook == onDestroy && (fault.kind == faultFail || fault.kind == faultPanic),
			errors.Is(leaf, errDestroyGoexit):
			s.c.stopDestroyErrs.Add(1)
		case errors.Is(leaf, context.DeadlineExceeded):
			s.violate("%s did not finish within %v: %v", what, testWait, leaf)
		default:
			s.violate("%s returned %v, which is no Destroy's error", what, leaf)
		}
	}
}

// skLeaves returns the errors that err joins (errors.Join, also nested),
// or err alone; none for nil.
func skLeaves(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var leaves []error
	for _, e := range j.Unwrap() {
		leaves = append(leaves, skLeaves(e)...)
	}
	return leaves
}

// run loads the pool for cfg.run, ends it with Close or Shutdown while the
// workers still run, and waits for everything to stop: the workers at their
// first ErrClosed, then the helpers, the courier and Shutdown's drain.
func (s *skRun) run() {
	rng := rand.New(rand.NewPCG(s.cfg.seed, 0x50a4))
	newRand := func() *rand.Rand { return rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())) }
	var workers, helpers, courier, resizer sync.WaitGroup
	for i := range skWorkers {
		r := newRand()
		s.goGuarded(&workers, "a worker", func() { s.worker(i, r) })
	}
	courierRand, clearRand, resizeRand := newRand(), newRand(), newRand()
	s.goGuarded(&courier, "the courier", func() { s.courier(courierRand) })
	s.goGuarded(&resizer, "the resizer", func() { s.resizer(resizeRand) })
	s.goGuarded(&helpers, "the clearer", func() { s.clearer(clearRand) })
	s.goGuarded(&helpers, "the checker", s.checker)

	// Busy phases (every worker leases) alternate with calm ones (1 to 10
	// do), so that the pool also runs without a queue: items idle, expire
	// and are found idle by Clear, whose refill runs only then.
	deadline := time.Now().Add(s.cfg.run)
	for busy := true; time.Now().Before(deadline); busy = !busy {
		d := time.Duration(5+rng.IntN(45)) * time.Millisecond
		if busy {
			s.active.Store(skWorkers)
		} else {
			s.c.calmPhases.Add(1)
			s.active.Store(int64(1 + rng.IntN(10)))
			d /= 2
		}
		time.Sleep(min(d, time.Until(deadline)))
	}
	close(s.stopResize)
	skAwait(&resizer, "the resizer") // MaxSize is skMaxSize again
	s.active.Store(skWorkers)        // every worker must lease, to see ErrClosed

	start := time.Now()
	var shutdownErr chan error
	if s.cfg.mode == "close" && s.cfg.upkeep > 0 {
		// Close from a callback the upkeep runs, if one comes soon; else
		// from here. Calm first, so that items idle, and the upkeep checks
		// them or replaces the expired ones.
		s.active.Store(1)
		s.closedInUpkeep = make(chan error, 1)
		s.closeInUpkeep.Store(true)
		select {
		case err := <-s.closedInUpkeep:
			s.c.closedInUpkeep.Store(true)
			s.checkStopErr("Close from the upkeep's callback", err)
		case <-time.After(50 * s.cfg.upkeep):
			if s.closeInUpkeep.CompareAndSwap(true, false) {
				err := s.p.Close()
				s.closeReturned.Store(true)
				s.checkStopErr("Close", err)
			} else { // a callback took it at this instant
				s.c.closedInUpkeep.Store(true)
				s.checkStopErr("Close from the upkeep's callback", <-s.closedInUpkeep)
			}
		}
		s.active.Store(skWorkers)
	} else if s.cfg.mode == "close" {
		err := s.p.Close()
		s.closeReturned.Store(true)
		s.checkStopErr("Close", err)
	} else {
		shutdownErr = make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			shutdownErr <- s.p.Shutdown(ctx)
		}()
	}
	skAwait(&workers, "the workers (each stops at its first ErrClosed)")
	close(s.stop)
	skAwait(&helpers, "the clearer and the checker")
	close(s.handoffs)
	skAwait(&courier, "the courier")
	if shutdownErr == nil {
		// Closed already: Shutdown only waits for the last creations that
		// leases abandoned. Its ctx bounds the wait.
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		err := s.p.Shutdown(ctx)
		cancel()
		assert.NoError(s.t, err, "Shutdown after Close")
	} else {
		s.checkStopErr("Shutdown", <-shutdownErr)
	}
	s.stopTook = time.Since(start)
}

// verify checks the pool at rest against what the test saw: the accounting
// identity, every item destroyed once or detached, and every Stats counter
// that the test can count itself. Shutdown has drained the pool while the
// Destroy calls that hang still block: their rooms came back after
// DestroyTimeout. Then verify unblocks them, and once they have returned,
// counts the items.
func (s *skRun) verify() {
	t := s.t
	st := s.p.Stats()
	f := s.f
	assert.Zero(t, st.ItemsAllocated, "ItemsAllocated at rest: %+v", st)
	assert.Zero(t, st.ActiveLeases, "ActiveLeases at rest")
	assert.Zero(t, st.ItemsAvailable, "ItemsAvailable after Close")
	assert.Zero(t, st.QueuedLeases, "QueuedLeases at rest")
	assert.Zero(t, st.Destroying, "Destroying at rest")
	assert.Equal(t, st.Created, st.Destroyed+st.Detached+uint64(st.ItemsAllocated),
		"at rest Created == Destroyed + Detached + ItemsAllocated: %+v", st)
	assert.Equal(t, f.injected(onDestroy, faultHang), f.hanging.Load(), "the hanging Destroy calls still block, their rooms free")
	f.awaitUnhung(t)
	s.verifyDestroys(st)
	assert.Zero(t, f.live.Load(), "items in existence by the factory's count")
	assert.LessOrEqual(t, f.peak.Load(), int64(skMaxSize), "most items in existence at once")

	lost := f.checkNoneLeft(t)
	n := f.census()
	made := n[itemAlive] + n[itemDestroyed] + n[itemDetached] + n[itemDisposed]
	assert.Zero(t, lost, "items neither destroyed nor detached")
	assert.EqualValues(t, made, st.Created, "Stats.Created against the factory's items")
	assert.EqualValues(t, n[itemDestroyed], st.Destroyed, "Stats.Destroyed against the items destroyed")
	assert.EqualValues(t, f.destroyed.Load(), st.Destroyed, "Stats.Destroyed against Destroy's calls")
	assert.EqualValues(t, n[itemDisposed], st.Detached, "Stats.Detached against the items the test disposed of")
	assert.EqualValues(t, s.c.detach.Load(), st.Detached, "Stats.Detached against the workers' Detach calls")

	assert.EqualValues(t, s.c.leaseOK.Load(), st.Leases, "Stats.Leases against the leases that succeeded")
	assert.EqualValues(t, s.c.timeouts.Load(), st.Timeouts, "Stats.Timeouts against the ErrLeaseTimeouts seen")
	assert.EqualValues(t, s.c.canceled.Load(), st.Canceled, "Stats.Canceled against the ctx errors seen")
	assert.EqualValues(t, s.prepareErrs(), st.PrepareFailed, "Stats.PrepareFailed against the Preparer's errors")
	assert.GreaterOrEqual(t, st.Waits, st.Timeouts, "every timeout waited")
	assert.Zero(t, st.Leaked, "leaked leases")
	assert.EqualValues(t, s.c.exhausted.Load()+s.c.queueFull.Load(), st.Refused,
		"Stats.Refused against TryLease's refusals and the Leases past MaxQueuedLeases")
	// Every failed factory call counts, whoever made it: a lease, Clear's
	// refill, the upkeep or the spares task; a slow one whose ctx ended
	// failed too.
	assert.EqualValues(t, f.injected(onCreate, faultFail)+f.injected(onCreate, faultPanic)+f.gaveUp[onCreate].Load(), st.CreateErrors,
		"Stats.CreateErrors against the factory's failures")
	if s.cfg.minIdle > 0 {
		assert.Positive(t, s.c.spareCreates.Load(), "the spares task created items (MinIdle %d)", s.cfg.minIdle)
	} else {
		assert.Zero(t, s.c.spareCreates.Load(), "creations of a spares task without MinIdle")
	}

	// A panic in the Preparer or Reset always has a caller to reach, but in
	// the upkeep's checks; one in the factory has none when the lease that
	// started it gave up, or in the upkeep.
	assert.Equal(t, s.preparePanics()-s.c.upkeepPreparePanics.Load(), s.c.seen[onIsReady].Load()+s.c.seen[onPrepare].Load(),
		"Preparer panics that reached a Lease")
	assert.Equal(t, st.MaxSize, skMaxSize, "MaxSize restored")
	if s.cfg.upkeep == 0 {
		assert.Zero(t, s.c.upkeepPrepare.Load(), "checks without a lease, with no upkeep")
	}
	assert.Equal(t, f.injected(onReset, faultPanic), s.c.seen[onReset].Load(), "Reset panics that reached a Release")
	assert.LessOrEqual(t, s.c.seen[onCreate].Load(), f.injected(onCreate, faultPanic), "factory panics seen, against injected")

	if s.reader != nil {
		s.verifyMetrics(st)
	}
	assert.Zero(t, f.violations.Load(), "violations seen under load")
}

// verifyDestroys checks what the documentation promises of a Destroy that
// fails, panics, calls runtime.Goexit or hangs (doc.go, "Lifecycle of an
// item": Destroyed; Options.DestroyTimeout): each is counted in
// DestroyErrors, and logged or, for the idle items Close destroyed,
// returned by Close, once; each hang is given up on after DestroyTimeout.
// A Destroy that took longer than DestroyTimeout without a fault (a slow
// moment under -race) counts too, as a timeout in place of its own fault,
// if it had one: so DestroyErrors lies between the faults injected and
// that plus the timeouts of calls that did not hang.
func (s *skRun) verifyDestroys(st Stats) {
	t, f := s.t, s.f
	var injected int64
	for _, k := range []faultKind{faultFail, faultPanic, faultGoexit, faultHang} {
		injected += f.injected(onDestroy, k)
	}
	timeouts := f.logged[onDestroy][faultHang].Load() + s.c.stopTimeouts.Load()
	hangs := f.injected(onDestroy, faultHang)
	assert.EqualValues(t, f.destroyLogs.Load()+s.c.stopDestroyErrs.Load(), st.DestroyErrors,
		"every failed Destroy is logged or returned by Close, once, and counted in DestroyErrors")
	assert.GreaterOrEqual(t, timeouts, hangs, "every hanging Destroy was given up on after DestroyTimeout")
	assert.GreaterOrEqual(t, st.DestroyErrors, uint64(injected), "DestroyErrors against the Destroy faults injected")
	assert.LessOrEqual(t, st.DestroyErrors, uint64(injected+timeouts-hangs), "DestroyErrors against the Destroy faults injected and the timeouts")
}

// prepareFaults counts the failures injected into the Preparer.
func (s *skRun) prepareFaults() int64 {
	return s.f.injected(onIsReady, faultFail) + s.f.injected(onPrepare, faultFail)
}

// prepareErrs counts every error IsReady or Prepare returned: the injected
// failures, and the ctx errors of the checks whose ctx had ended.
func (s *skRun) prepareErrs() int64 {
	return s.prepareFaults() + s.f.ctxErrs[onIsReady].Load() + s.f.ctxErrs[onPrepare].Load()
}

// preparePanics counts the panics injected into the Preparer.
func (s *skRun) preparePanics() int64 {
	return s.f.injected(onIsReady, faultPanic) + s.f.injected(onPrepare, faultPanic)
}

// skCounter sums the int64 counter name over its points, in total and by
// the value of the attribute key; a counter never added to is absent, and
// sums to zero.
func skCounter(rm metricdata.ResourceMetrics, name, key string) (by map[string]int64, total int64) {
	by = map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(key))
				by[v.AsString()] += dp.Value
				total += dp.Value
			}
		}
	}
	return by, total
}

// verifyMetrics checks the OpenTelemetry counters against Stats and against
// the outcomes the workers saw: pool.lease.errors sorts failed leases as
// the workers do.
func (s *skRun) verifyMetrics(st Stats) {
	t := s.t
	var rm metricdata.ResourceMetrics
	require.NoError(t, s.reader.Collect(context.Background(), &rm))
	_, created := skCounter(rm, "pool.items.created", "")
	assert.EqualValues(t, st.Created, created, "pool.items.created")
	reasons, destroyed := skCounter(rm, "pool.items.destroyed", "reason")
	s.destroyedBy = reasons
	assert.EqualValues(t, st.Destroyed, destroyed, "pool.items.destroyed")
	assert.EqualValues(t, st.IdleExpired, reasons["idle"], "pool.items.destroyed{reason=idle}")
	assert.EqualValues(t, st.LifetimeExpired, reasons["lifetime"], "pool.items.destroyed{reason=lifetime}")
	assert.EqualValues(t, st.UsesExpired, reasons["max_uses"], "pool.items.destroyed{reason=max_uses}")
	_, prepErrs := skCounter(rm, "pool.preparation.errors", "")
	assert.EqualValues(t, st.PrepareFailed, prepErrs, "pool.preparation.errors")
	_, destroyErrs := skCounter(rm, "pool.items.destroy_errors", "")
	assert.EqualValues(t, st.DestroyErrors, destroyErrs, "pool.items.destroy_errors")
	_, leaked := skCounter(rm, "pool.leases.leaked", "")
	assert.Zero(t, leaked, "pool.leases.leaked")

	want := map[string]int64{}
	for k, n := range map[string]int64{
		"timeout":   s.c.timeouts.Load(),
		"canceled":  s.c.canceled.Load(),
		"closed":    s.c.closed.Load(),
		"exhausted": s.c.exhausted.Load() + s.c.queueFull.Load(),
		"create":    s.c.createFailed.Load(),
		"prepare":   s.c.prepareFailed.Load(),
	} {
		if n > 0 {
			want[k] = n
		}
	}
	got, _ := skCounter(rm, "pool.lease.errors", "error.type")
	assert.Equal(t, want, got, "pool.lease.errors by error.type, against the workers' outcomes")
}

// report is the half's figures, for the log.
func (s *skRun) report(wall time.Duration) string {
	c, f, st := &s.c, s.f, s.p.Stats()
	lt := "off"
	if s.cfg.leaseTimeout > 0 {
		lt = s.cfg.leaseTimeout.String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ran %v under load, wall %v (stop to drained %v); LeaseTimeout %s, CheckAfterIdle %v, IdleTimeout %v, MaxLifetime %v, UpkeepInterval %v, DestroyTimeout %v, MinIdle %d, MaxQueuedLeases %d, MaxConcurrentCreates %d, MaxUses %d, metrics %v\n",
		s.cfg.mode, s.cfg.run, wall.Round(time.Millisecond), s.stopTook.Round(time.Microsecond),
		lt, s.cfg.checkAfterIdle, s.cfg.idleTimeout, s.cfg.maxLifetime, s.cfg.upkeep, s.cfg.destroyTimeout, s.cfg.minIdle, s.cfg.maxQueued, s.cfg.maxCreating, s.cfg.maxUses, s.cfg.metrics)
	fmt.Fprintf(&b, "  SetMaxSize calls %d (%d shrinking, smallest %d), invariant checks while a shrink settled %d; upkeep checks %d (%d panicked); closed from an upkeep callback %v",
		c.resizes.Load(), c.shrinks.Load(), c.minSizeSet.Load(), s.sizes.settlingChecks(), c.upkeepPrepare.Load(), c.upkeepPreparePanics.Load(), c.closedInUpkeep.Load())
	if s.destroyedBy != nil {
		fmt.Fprintf(&b, "; destroyed by reason %v", s.destroyedBy)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  operations %d: lease ok %d, timeouts %d, canceled %d, exhausted %d (TryLease) + %d (MaxQueuedLeases), closed %d, create failed %d, prepare failed %d, panicked %d\n",
		c.ops.Load(), c.leaseOK.Load(), c.timeouts.Load(), c.canceled.Load(), c.exhausted.Load(), c.queueFull.Load(), c.closed.Load(),
		c.createFailed.Load(), c.prepareFailed.Load(), c.leasePanics.Load())
	fmt.Fprintf(&b, "  ends: release %d, discard %d, detach %d, double release %d, stale release %d (%d on the held item), handoff %d, racing copies %d; Value-after-end checks %d\n",
		c.release.Load(), c.discard.Load(), c.detach.Load(), c.doubleRelease.Load(), c.staleRelease.Load(),
		c.staleOnHeld.Load(), c.handoff.Load(), c.racingEnds.Load(), c.valueChecks.Load())
	fmt.Fprintf(&b, "  clears %d, Stats reads %d, invariant checks %d, max queued %d, peak live %d, calm phases %d; waits %d, wait time %v\n",
		c.clears.Load(), c.statsReads.Load(), c.checks.Load(), c.maxQueued.Load(), f.peak.Load(), c.calmPhases.Load(), st.Waits, st.WaitTime.Round(time.Millisecond))
	fmt.Fprintf(&b, "  items: created %d (%d by the spares task), destroyed %d (idle expired %d, lifetime expired %d, prepare failed %d), detached %d\n",
		f.created.Load(), c.spareCreates.Load(), st.Destroyed, st.IdleExpired, st.LifetimeExpired, st.PrepareFailed, st.Detached)
	fmt.Fprintf(&b, "  faults: factory fail %d, factory panic %d (%d reached a caller), slow dials %d (%d abandoned at Close), prepare errors %d (%d injected, %d ctx), prepare panic %d (%d reached), reset fail %d, reset panic %d (%d reached)\n",
		f.injected(onCreate, faultFail), f.injected(onCreate, faultPanic), c.seen[onCreate].Load(), f.slowed[onCreate].Load(), f.gaveUp[onCreate].Load(),
		s.prepareErrs(), s.prepareFaults(), s.prepareErrs()-s.prepareFaults(), s.preparePanics(), c.seen[onIsReady].Load()+c.seen[onPrepare].Load(),
		f.injected(onReset, faultFail), f.injected(onReset, faultPanic), c.seen[onReset].Load())
	fmt.Fprintf(&b, "  destroy faults (on the pool's goroutines): fail %d, panic %d, Goexit %d, hang %d; DestroyErrors %d: logged %d (%d past DestroyTimeout), returned by Close %d (%d past DestroyTimeout)\n",
		f.injected(onDestroy, faultFail), f.injected(onDestroy, faultPanic), f.injected(onDestroy, faultGoexit), f.injected(onDestroy, faultHang),
		st.DestroyErrors, f.destroyLogs.Load(), f.logged[onDestroy][faultHang].Load(), c.stopDestroyErrs.Load(), c.stopTimeouts.Load())
	fmt.Fprintf(&b, "  violations %d, failed invariant checks %d", f.violations.Load(), s.invFailures.Load())
	return b.String()
}

// TestSoak is a chaos soak: 64 goroutines lease and end leases every way the
// API allows (Release, Discard, Detach, twice, through stale handles, from
// another goroutine, by two copies at once), against a small pool whose
// user code fails and panics at a low rate (and whose Destroy, on the
// pool's own goroutines, also calls runtime.Goexit or hangs past
// DestroyTimeout) and whose items expire within milliseconds, with MinIdle
// and MaxQueuedLeases in one half each, while other goroutines Clear it,
// resize it and check its invariants. Then the pool is closed (first half)
// or shut down (second half) under load, and everything the test counted
// is checked against Stats (and, in the second half, the OpenTelemetry
// counters).
func TestSoak(t *testing.T) {
	total := *skSoak
	if total <= 0 {
		total = skDefaultSoak
	}
	base := *skSoakSeed
	if base == 0 {
		base = rand.Uint64()
	}
	t.Logf("soak %v, seed %d (replay: -soakseed=%d), GOMAXPROCS %d", total, base, base, runtime.GOMAXPROCS(0))
	var ops, leases atomic.Int64
	for i, mode := range []string{"close", "shutdown"} {
		t.Run(mode, func(t *testing.T) {
			start := time.Now()
			s := skStart(t, skConfigure(base, i, mode, total/2))
			s.run()
			s.verify()
			goleak.VerifyNone(t)
			t.Log(s.report(time.Since(start)))
			ops.Add(s.c.ops.Load())
			leases.Add(s.c.leaseOK.Load())
		})
	}
	t.Logf("total: %d operations, %d leases", ops.Load(), leases.Load())
}
