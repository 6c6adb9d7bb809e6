package pool

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// The keeper: a pool's one background goroutine, started with the pool
// for an upkeep (UpkeepInterval) or LeakThreshold, else at the first ask
// (SeedInBackground, Clear's refill, MinIdle's spares, FailFastAfter's
// probe). Between turns it holds the pool weakly, and its state is an
// allocation apart, so a pool dropped without Close is collected, and the
// goroutine ends then.
//
// The invariant: the keeper holds no item a lease could have without that
// item's permit. An item it checks or creates counts against MaxSize and
// is out of the idle ring meanwhile, so no lease gets it mid-check and the
// cap holds; it creates nothing while leases queue, as they create their
// own. Nothing of it runs on the fast path.
type keeper[T any] struct {
	self weak.Pointer[Pool[T]]
	done context.Context // Close's

	upkeepEvery time.Duration // UpkeepInterval; 0: no upkeep
	watchEvery  time.Duration // LeakThreshold's scans; 0: none
	sizes       bool          // AdaptiveSize: the sizer's windows

	wake        chan struct{}                   // cap 1: an ask
	wants       atomic.Uint32                   // what the asks want created: the want* bits
	refillAfter atomic.Pointer[<-chan struct{}] // the Destroy calls Clear's refill waits for

	started atomic.Bool // the goroutine has started, or Close has forbidden it to
	// running counts the goroutine (goroutineWeight) and each piece of work
	// it runs apart (OnLeak calls, seeding creations); stopped closes at 0.
	running atomic.Int64
	stopped chan struct{}
	turn    sync.Mutex // held while a turn runs: see wait

	// The goroutine's own, here so a successor after a runtime.Goexit in a
	// callback goes on from them; times are time.Now's, as the timers count.
	upkeepAt, watchAt, fillAt  time.Time // when each is due next
	sizeAt                     time.Time
	upkeepBackoff, fillBackoff time.Duration
	owed                       uint32 // wants a failed turn owes, retried at fillAt
	scans                      scanBufs[T]
}

// The bits of keeper.wants.
const (
	wantSeed   uint32 = 1 << iota // MinSize items, several creations at once
	wantRefill                    // MinSize idle, once the last Clear's destroys end
	wantSpares                    // MinIdle idle
	wantProbe                     // one item while the pool is down
)

// goroutineWeight is the keeper's goroutine's share of keeper.running.
const goroutineWeight = 1 << 32

// upkeepScheduled, for tests, sees each wait before a round.
var upkeepScheduled func(time.Duration)

// maxSeedBackoff bounds the creations' backoff without the upkeep (with it,
// UpkeepInterval does).
const maxSeedBackoff = 30 * time.Second

func newKeeper[T any](p *Pool[T]) *keeper[T] {
	return &keeper[T]{
		self: p.self, done: p.done,
		upkeepEvery: p.opts.UpkeepInterval,
		watchEvery:  p.ob.watchEvery(),
		sizes:       p.sz != nil,
		wake:        make(chan struct{}, 1),
		stopped:     make(chan struct{}),
	}
}

// start starts the goroutine once; the first round and scan wait an interval.
func (k *keeper[T]) start() {
	if k.started.Load() || !k.started.CompareAndSwap(false, true) {
		return
	}
	now := time.Now()
	k.upkeepAt = now.Add(spread(k.upkeepEvery))
	k.watchAt = now.Add(k.watchEvery)
	k.sizeAt = now.Add(adaptWindow / 4)
	k.running.Add(goroutineWeight)
	go k.run()
}

// ask asks for a turn that creates what want says.
func (k *keeper[T]) ask(want uint32) {
	if k.wants.Load()&want != want {
		k.wants.Or(want)
	}
	k.start()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// refill asks for MinSize idle items once after closes (Clear's destroys).
func (k *keeper[T]) refill(after <-chan struct{}) {
	k.refillAfter.Store(&after)
	k.ask(wantRefill)
}

// run is the goroutine: a turn at each ask and when something falls due,
// until Close or the pool is collected. After a callback's runtime.Goexit
// ends it, the keeper goes on on a new one.
func (k *keeper[T]) run() {
	returned := false
	defer func() {
		if !returned {
			go k.run()
			return
		}
		k.ended(goroutineWeight)
	}()
	t := time.NewTimer(k.next(time.Now()))
	defer t.Stop()
	for {
		select {
		case <-k.done.Done(): // turnOn refuses
		case <-k.wake:
		case <-t.C:
		}
		if p := k.self.Value(); p == nil || !k.turnOn(p) {
			break
		}
		t.Reset(k.next(time.Now()))
	}
	returned = true
}

// ended counts work of the keeper's that has ended.
func (k *keeper[T]) ended(weight int64) {
	if k.running.Add(-weight) == 0 {
		close(k.stopped)
	}
}

// apart runs f on a goroutine of its own, which Close waits for as the keeper's.
func (k *keeper[T]) apart(f func()) {
	k.running.Add(1)
	go func() {
		defer k.ended(1)
		f()
	}()
}

// turnOn does what is due, holding turn; once Close has begun, nothing (false).
func (k *keeper[T]) turnOn(p *Pool[T]) bool {
	k.turn.Lock()
	defer k.turn.Unlock()
	if k.done.Err() != nil {
		return false
	}
	now := time.Now()
	if k.upkeepEvery > 0 && !now.Before(k.upkeepAt) {
		k.upkeep(p)
	}
	if k.watchEvery > 0 && !now.Before(k.watchAt) {
		k.watchAt = now.Add(k.watchEvery)
		p.ob.followAll(&k.scans, k.done, k.apart)
	}
	if k.sizes && !now.Before(k.sizeAt) {
		k.adapt(p)
		k.sizeAt = now.Add(p.sz.window())
	}
	k.fill(p, now)
	return true
}

// next is the wait from now until the next thing due.
func (k *keeper[T]) next(now time.Time) time.Duration {
	at := now.Add(time.Duration(1<<62 - 1))
	for _, due := range [...]struct {
		at time.Time
		on bool
	}{{k.upkeepAt, k.upkeepEvery > 0}, {k.watchAt, k.watchEvery > 0}, {k.fillAt, k.owed != 0}, {k.sizeAt, k.sizes}} {
		if due.on && due.at.Before(at) {
			at = due.at
		}
	}
	return max(at.Sub(now), 0)
}

// wait waits, after Close canceled done, for the goroutine and its work apart
// to end, or ctx; from inside that work (onKeeper) it cannot, and returns at once.
func (k *keeper[T]) wait(ctx context.Context, onKeeper bool) error {
	if onKeeper || k.started.CompareAndSwap(false, true) {
		return nil // or never started, and now never will
	}
	if awaitOr(ctx, k.stopped) == nil {
		return nil
	}
	if k.running.Load()%goroutineWeight == 0 && k.turn.TryLock() {
		// No turn runs, and none can start: the goroutine is returning.
		k.turn.Unlock()
		<-k.stopped
		return nil
	}
	return ctx.Err() // a turn's callbacks still run
}

// # The upkeep

// upkeep runs a round and schedules the next an interval after the round's
// start (by the pool's clock), so an overlong round is followed at once;
// after a failed round, sooner, backing off.
func (k *keeper[T]) upkeep(p *Pool[T]) {
	start := p.clk.now()
	next := spread(k.upkeepEvery)
	if k.upkeepRound(p) {
		k.upkeepBackoff = 0
	} else {
		k.upkeepBackoff = backoff(k.upkeepBackoff, k.upkeepEvery)
		next = k.upkeepBackoff
	}
	wait := max(next-time.Duration(p.clk.now()-start), 0)
	k.upkeepAt = time.Now().Add(wait)
	if upkeepScheduled != nil {
		upkeepScheduled(wait)
	}
}

// upkeepRound destroys expired idle items, checks those due, and creates
// up to MinSize; false when a creation failed (logged), to retry sooner.
func (k *keeper[T]) upkeepRound(p *Pool[T]) (ok bool) {
	now := p.clk.now()
	p.ex.sweep(now)
	if p.ck.checksIdle() {
		k.checkIdle(p, now)
	}
	if p.opts.MinIdle > 0 {
		k.ask(wantSpares)
	}
	return p.mk.fill(allItems, p.opts.MinSize, "upkeep")
}

// checkIdle checks each item due a check (checkOne), one at a time: the others stay leasable.
func (k *keeper[T]) checkIdle(p *Pool[T], now int64) {
	due := func(e *entry[T]) bool { return p.ck.due(e, now) }
	_, _, _, size, _, _, _ := p.g.counts()
	for range size { // each item at most once: a checked one is not due
		e := p.g.takeIdleIf(due)
		if e == nil {
			return
		}
		k.checkOne(p, e)
	}
}

// checkOne checks e: a pass goes back idle; a failure, panic or Goexit
// destroys it (freeing its permit) and, unless Close cut the check short,
// is logged, a panic as an error: the upkeep has no caller.
func (k *keeper[T]) checkOne(p *Pool[T], e *entry[T]) {
	var err error
	returned := false
	defer func() {
		if v := recover(); v != nil {
			err = newPanicError(v)
		}
		switch {
		case returned && err == nil:
			e.checkedAt = p.clk.now()
			p.giveBackToGate(e)
		case k.done.Err() != nil:
			p.ds.later(e, reasonClose, nil) // not the item's fault
		default:
			if err != nil { // not a Goexit
				p.ob.warn("upkeep: an idle item failed its check", err)
			}
			p.ds.later(e, reasonPrepare, nil)
		}
	}()
	err = p.ck.check(k.done, e)
	returned = true
}

// backoff: limit/16 after the first failure, doubling after each, up to limit.
func backoff(prev, limit time.Duration) time.Duration {
	return min(max(2*prev, limit/16), limit)
}

// spread moves d randomly within ±10 %, so pools started together don't tick in step.
func spread(d time.Duration) time.Duration {
	tenth := int64(d) / 10
	if tenth <= 0 {
		return d
	}
	return d - time.Duration(tenth) + time.Duration(rand.Int64N(2*tenth+1))
}

// # The adaptive size

// adapt ends the sizer's window if it is due, logging a move of the limit.
func (k *keeper[T]) adapt(p *Pool[T]) {
	s := p.Stats()
	from, to, _ := p.sz.step(signals{now: p.clk.now(), limit: s.Limit, waits: s.Waits, fails: s.CreateErrors, down: s.BackendDown})
	if from != to {
		p.ob.log(slog.LevelDebug, "adaptive size: the limit moved", nil, slog.Int("from", from), slog.Int("to", to))
	}
}

// # The creations asked for

// fill runs a round for the asks and, from fillAt on, for a failed round's
// owed bits, retried with backoff (but a refill); failures are logged.
func (k *keeper[T]) fill(p *Pool[T], now time.Time) {
	d := k.wants.Swap(0) | k.owed
	if d == 0 || k.owed != 0 && now.Before(k.fillAt) {
		k.owed = d // nothing to do, or backing off
		return
	}
	k.owed = d &^ wantRefill // until the round returns: a Goexit leaves them owed
	k.owed = k.fillRound(p, d)
	if k.owed == 0 {
		k.fillBackoff = 0
		return
	}
	k.fillBackoff = backoff(k.fillBackoff, cmp.Or(k.upkeepEvery, maxSeedBackoff))
	k.fillAt = time.Now().Add(k.fillBackoff)
}

// fillRound fills for d and returns the bits to retry.
func (k *keeper[T]) fillRound(p *Pool[T], d uint32) (owed uint32) {
	// The probe: one item while down, with a free permit even if leases wait.
	if d&wantProbe != 0 && p.g.isDown() && !(p.g.tryAcquireFill(1, probeItem) && p.mk.createIdle("probe")) {
		return d // down still: the rest would not create
	}
	if d&wantSeed != 0 {
		p.mk.seedAll(p.opts.MinSize, k.apart, func() bool { return p.mk.createIdle("seed") })
		if p.g.short(p.opts.MinSize) { // a failure, the pool down, or leases queued to create
			owed |= wantSeed
		}
	}
	if d&wantRefill != 0 {
		k.refillRound(p)
	}
	if d&wantSpares != 0 && !k.spares(p) {
		owed |= wantSpares
	}
	return owed
}

// refillRound refills to MinSize idle once Clear's destroys end; not retried.
func (k *keeper[T]) refillRound(p *Pool[T]) {
	if after := k.refillAfter.Swap(nil); after == nil || awaitOr(k.done, *after) == nil {
		p.mk.fill(idleItems, p.opts.MinSize, "clear: refill")
	}
}

// spares creates items up to MinIdle idle; false on a failure or while down.
func (k *keeper[T]) spares(p *Pool[T]) bool {
	return p.mk.fill(idleItems, p.opts.MinIdle, "spares")
}
