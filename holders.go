package pool

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// Who holds the items: the registry of every entry, the scans that find
// the leases out now, the watcher behind Options.LeakThreshold, and
// Outstanding.
//
// The invariant: nothing here writes on the lease and release fast path,
// and nothing here keeps an entry alive. The registry holds every entry
// weakly, from the end of its creation to the start of its destruction or
// Detach, so that a leaked lease still becomes unreachable (lease.go,
// "Leak detection"); a scan holds the entries it looks at only until it
// returns.
//
// # Which entries are out
//
// A scan cannot ask a lease when it began: the fast path writes nothing
// for it (an atomic store there would cost more than LeakThreshold's
// whole budget; see docs/DESIGN.md, "Who holds the items"). It reads what
// changes anyway:
//
//   - gen, bumped once as each lease ends (lease.go): a lease is an entry
//     and a generation;
//   - holds, bumped by the pool as it takes an entry for work of its own
//     between two leases and again as it lets go (hold, unhold), so that
//     it is odd meanwhile: a fresh item being prepared, an idle one checked
//     by the upkeep and, with LeakThreshold (marks), one being judged for a
//     lease, reset, or waiting out a sweep on its release;
//   - the idle entries, queued or parked, copied under the gate's lock
//     (gate.idleEntries).
//
// An entry is out when a scan finds it registered, its holds even and not
// idle. Without TrackLeaseSites that is all a scan knows, and it can be
// wrong for an instant: between the end of a lease and the park of its
// item (gen has moved on, the item is not idle yet), between a slot's take
// for a judging lease and the hold that follows, or while a parked entry
// moves from a slot the scan has not read to one it has. Each such window
// is a few instructions with no user code in it: whatever may take long
// between two leases is a hold. With TrackLeaseSites a scan knows exactly:
// the site records the generation of the lease it describes (recordSite),
// and an entry is out when its site describes its current generation.
//
// # Following a lease
//
// With LeakThreshold, each entry's holdMark says which lease the watcher
// follows: lease is the generation plus one, shifted left, its low bit set
// once the lease has been reported; since is when the watcher first saw
// it out (with TrackLeaseSites, when it was taken).
//
// Without TrackLeaseSites, gen and holds only grow, so an entry that two
// scans in a row see out with the same generation and holds was, from the
// first to the second, in one lease or in one of the windows above. A
// window never spans two scans, which are LeakThreshold/8 apart (unless a
// goroutine is descheduled inside one for that long), so the second
// sighting is of the lease itself: it began before that scan's clock
// read. The watcher reports the lease once LeakThreshold has passed since
// its second sighting: never early. The lease began after the last scan
// that did not see it out, so the report is due at most three scan periods
// plus LeakThreshold after it began (that scan to the first sighting, to
// the second, to the first scan past LeakThreshold): 1.375 × LeakThreshold,
// plus the delay of the watcher's timer, inside the promised 1.5. With
// TrackLeaseSites the age is exact, and the report comes within a scan
// period of LeakThreshold.
//
// The mark is shared with the end of the lease (leaseEnded), Outstanding
// and the entry's cleanup, which read it without the watcher:
//
//   - The watcher follows a lease by storing since, then lease, then
//     setting endFollowed in entry.ends, then loading gen again: if the
//     lease has ended meanwhile, it unfollows it. The end of a lease bumps
//     gen, then loads entry.ends and, when endFollowed is set, unfollows
//     whatever the mark follows. The atomics are sequentially consistent,
//     so one of the two sees the other, and no ended lease stays
//     followed: the cleanup of a leaked entry finds its mark following the
//     leaked lease, or nothing. (A release that finds entry.ends clear
//     costs one load: the fast path's only read for LeakThreshold.)
//   - The watcher logs a lease's Warn, then sets the reported bit by
//     compare-and-swap, then calls OnLeak; the end of the lease clears the mark by
//     compare-and-swap and logs the Info when the bit was set. When the
//     watcher's compare-and-swap fails, the lease ended before the bit was
//     set, and the watcher logs the Info itself: exactly one Info, after
//     the Warn. Nothing but the end of a lease clears a reported mark, and
//     the watcher does not touch since while the mark is reported.
//
// # Waking the watcher
//
// The watcher runs only while a lease is out, as a task (create.go), so
// that Close stops it and waits for it and for its reports. slots.trigger
// says whether it runs: watcherAsleep when not, Pool.awake when it does. A
// lease that completes loads the trigger (a light pool's lease compares
// its scrambled count with it, which it does anyway for use_time) and,
// when it finds watcherAsleep, swaps it to awake by compare-and-swap and
// starts a watcher. A watcher whose scan finds no lease out stores
// watcherAsleep, then scans once more: if that scan sees a lease out, it
// swaps the trigger back to awake and goes on, or returns if a lease
// swapped it first (and started another). A lease makes itself visible to
// a scan (its take from the idle ring, or its site) before it loads the
// trigger, and the watcher stores watcherAsleep before its last scan: so
// either the lease finds the watcher asleep and wakes it, or the last
// scan sees the lease. The end of a lease the watcher follows pokes it, so
// that, when no lease began since it last looked, it looks again within
// watchSettle (by then the lease's item is back), and stops if no lease is
// out and none began meanwhile: the lease that woke a quiet pool's
// watcher is followed from its first scan, so the watcher stops soon
// after its end, not a scan period later (LeakThreshold/8 may be
// minutes), and leases that come one at a time start a watcher at most
// once per watchSettle.

// registry is every entry in existence, held weakly, for the scans.
type registry[T any] struct {
	mu  sync.Mutex
	all map[weak.Pointer[entry[T]]]struct{}
}

// add registers e, at the end of its creation.
func (r *registry[T]) add(e *entry[T]) {
	e.self = weak.Make(e)
	r.mu.Lock()
	if r.all == nil {
		r.all = make(map[weak.Pointer[entry[T]]]struct{})
	}
	r.all[e.self] = struct{}{}
	r.mu.Unlock()
}

// remove forgets e, as its destruction or Detach begins.
func (r *registry[T]) remove(e *entry[T]) {
	r.mu.Lock()
	delete(r.all, e.self)
	r.mu.Unlock()
}

// list appends every registered entry to buf, and forgets those the
// garbage collector has taken: leaked leases, which their cleanups report.
func (r *registry[T]) list(buf []*entry[T]) []*entry[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	for wp := range r.all {
		if e := wp.Value(); e != nil {
			buf = append(buf, e)
		} else {
			delete(r.all, wp)
		}
	}
	return buf
}

// hold marks the start of the pool's own work on e between two leases,
// and unhold its end: see "Which entries are out". Whoever holds e's
// permit calls them, in pairs.
func (e *entry[T]) hold()   { e.holds.Add(1) }
func (e *entry[T]) unhold() { e.holds.Add(1) }

// holdMark is what the watcher knows of an entry's current lease: see
// "Following a lease". It is made with the entry when LeakThreshold is set.
type holdMark struct {
	lease atomic.Uint64 // followed(gen) of the lease followed, | reportedBit; 0: none
	since atomic.Int64  // the pool's clock when the watcher first saw it out, or when it was taken

	// The watcher's own: only the watcher that runs touches them.
	holds     uint32 // entry.holds when it was first seen
	sightings uint8  // the scans in a row that saw it out, up to 2
	secondAt  int64  // the clock of the second
}

// reportedBit is set in holdMark.lease once the lease has been reported.
const reportedBit = 1

// followed is holdMark.lease for the lease of generation gen.
func followed(gen uint64) uint64 { return (gen + 1) << 1 }

// watcher is how a pool watches for LeakThreshold. The state of the
// watcher that runs is its own (watchLoop's) and the marks'.
type watcher struct {
	threshold int64         // LeakThreshold, in the pool clock's nanoseconds
	every     time.Duration // between two scans
	// poke tells the watcher that a lease it followed has ended: it looks
	// again soon whether any lease is still out, and stops if none is (see
	// "Waking the watcher"). Buffered: whoever pokes never waits.
	poke chan struct{}
}

// minWatchEvery bounds how often the watcher scans, whatever the threshold;
// watchSettle, how long a watcher runs on once poked in a quiet pool.
const (
	minWatchEvery = time.Millisecond
	watchSettle   = 10 * time.Millisecond
)

func newWatcher(threshold time.Duration) *watcher {
	return &watcher{threshold: int64(threshold), every: max(threshold/8, minWatchEvery), poke: make(chan struct{}, 1)}
}

// watcherAsleep is slots.trigger while a pool with LeakThreshold has no
// watcher running: every scrambled count but one in 2⁶⁴ falls below it, so
// the next lease looks, and wakes one.
const watcherAsleep = math.MaxUint64

// wakeWatcher starts a watcher unless one runs: see "Waking the watcher".
// On a closed pool the task does not start, and the trigger stays awake: no
// watcher starts again.
func (p *Pool[T]) wakeWatcher() {
	if !p.g.slots.trigger.CompareAndSwap(watcherAsleep, p.awake) {
		return
	}
	wp, done, w := p.self, p.done.Done(), p.watch
	p.tasks.start(func() { watchLoop(wp, done, w) })
}

// watchLoop runs a watcher: a scan at once, then one every w.every, until a
// scan finds no lease out, the pool closes or it has been collected; when
// poked, it looks at once whether it can stop. Between scans it holds the
// pool only weakly, so that a pool dropped without Close, a lease still
// out, can be collected.
func watchLoop[T any](wp weak.Pointer[Pool[T]], done <-chan struct{}, w *watcher) {
	var b scanBufs[T]
	var leases uint64 // the pool's count of leases when the watcher last looked
	var settling bool // the timer is set for the settling look, not the scan
	due := time.Now() // when the next scan is due
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-w.poke:
			// When no lease began since the last look, a settling look
			// within watchSettle: it stops the watcher if the pool is quiet
			// by then. Not a stop at once: leases that come one at a time
			// would then start a watcher each. Not a look at once either:
			// the lease that poked is still on its way back (its item not
			// idle yet), so a scan now would see it out. And a look, not a
			// scan, so that it follows nothing: a second sighting out of the
			// scans' period would void the bound of "Following a lease".
			p := wp.Value()
			if p == nil {
				return
			}
			if n := p.g.slots.leaseCount(); n == leases && !settling {
				settling = true
				t.Reset(min(time.Until(due), watchSettle))
			}
			continue
		case <-t.C:
		}
		p := wp.Value()
		if p == nil {
			return
		}
		if settling {
			settling = false
			n := p.g.slots.leaseCount()
			if n == leases && !p.anyOut(&b) && !p.goOn(&b) {
				return // quiet: the hand-over of a scan that found no lease out
			}
			leases = n
			t.Reset(max(time.Until(due), 0)) // a lease out: back to the scans' period
			continue
		}
		leases = p.g.slots.leaseCount()
		if !p.watchRound(&b) {
			return
		}
		due = time.Now().Add(w.every)
		t.Reset(w.every)
	}
}

// watchRound runs one scan of the watcher: it follows the leases out and
// reports those held past LeakThreshold. It reports false when the watcher
// must stop: the pool has closed, or no lease is out and none came out
// since (see "Waking the watcher").
func (p *Pool[T]) watchRound(b *scanBufs[T]) bool {
	if p.followAll(b) {
		return p.done.Err() == nil
	}
	return p.goOn(b)
}

// goOn is the watcher's hand-over once a scan found no lease out: it marks
// the watcher asleep, looks once more, and reports whether it must go on
// because a lease came out meanwhile (and no lease woke another watcher).
func (p *Pool[T]) goOn(b *scanBufs[T]) bool {
	p.g.slots.trigger.Store(watcherAsleep)
	if !p.anyOut(b) {
		return false
	}
	return p.g.slots.trigger.CompareAndSwap(watcherAsleep, p.awake) && p.done.Err() == nil
}

// followAll scans, follows every lease out and reports those due, and
// reports whether any lease was out. It stops, reporting nothing more,
// once Close has begun.
func (p *Pool[T]) followAll(b *scanBufs[T]) (anyOut bool) {
	defer b.drop()
	seen, now := p.scan(b)
	for i := range seen {
		if p.done.Err() != nil {
			return false
		}
		x := &seen[i]
		if x.out {
			anyOut = true
			p.follow(x, now)
		} else {
			unfollowIdle(x.e)
		}
	}
	return anyOut
}

// anyOut scans and reports whether any lease is out, touching no mark.
func (p *Pool[T]) anyOut(b *scanBufs[T]) bool {
	defer b.drop()
	seen, _ := p.scan(b)
	for i := range seen {
		if seen[i].out {
			return true
		}
	}
	return false
}

// follow updates what the watcher knows of the lease x saw out at now, and
// reports the lease once it has been held past LeakThreshold: see
// "Following a lease".
func (p *Pool[T]) follow(x *sighting[T], now int64) {
	mk := x.e.mark
	want := followed(x.gen)
	cur := mk.lease.Load()
	switch {
	case cur == want|reportedBit:
		return // reported already
	case cur&reportedBit != 0:
		return // an earlier lease, reported, whose end has not unfollowed it yet
	case cur != want || !p.sites && mk.holds != x.holds:
		since := now
		if p.sites {
			since = x.at
		}
		mk.holds, mk.sightings = x.holds, 1
		mk.since.Store(since)
		if !mk.lease.CompareAndSwap(cur, want) {
			return // the lease that cur followed ended meanwhile: see it next scan
		}
		x.e.ends.Or(endFollowed)
		if x.e.gen.Load() != x.gen {
			unfollowIdle(x.e) // this one ended meanwhile
			return
		}
	case mk.sightings < 2:
		mk.sightings, mk.secondAt = 2, now
	}
	from := x.at
	if !p.sites {
		if mk.sightings < 2 {
			return
		}
		from = mk.secondAt
	}
	if now-from < p.watch.threshold {
		return
	}
	p.reportHeld(x, time.Duration(now-mk.since.Load()))
}

// unfollowIdle forgets the lease the mark of e follows, for an entry that a
// scan found not out: the lease has ended, or was one of the windows of
// "Which entries are out". A reported lease is left to its end, which logs
// it.
func unfollowIdle[T any](e *entry[T]) {
	mk := e.mark
	if cur := mk.lease.Load(); cur != 0 && cur&reportedBit == 0 && mk.lease.CompareAndSwap(cur, 0) {
		e.ends.And(^uint32(endFollowed))
	}
}

// reportHeld reports the lease x saw, held for age past LeakThreshold:
// counted, logged at Warn, marked reported (see "Following a lease"), then
// given to OnLeak on a task of its own: so that a lease OnLeak's report
// leads to end logs its end in its own Release.
func (p *Pool[T]) reportHeld(x *sighting[T], age time.Duration) {
	var stack string
	if p.sites {
		stack = x.e.site.stackOf(x.gen)
	}
	p.c.longLeases.Add(1)
	if p.m != nil {
		p.m.long.Add(context.Background(), 1, p.m.add...)
	}
	p.logHeld(slog.LevelWarn, "a lease has been held longer than LeakThreshold", age, stack)
	want := followed(x.gen)
	if !x.e.mark.lease.CompareAndSwap(want, want|reportedBit) {
		p.logHeld(slog.LevelInfo, "a lease reported as held past LeakThreshold has ended", age, "")
	}
	if on := p.opts.OnLeak; on != nil {
		r := LeakReport{Pool: p.opts.Name, Age: age, Stack: stack, Held: true}
		p.tasks.start(func() { p.callOnLeak(on, r) })
	}
}

// callOnLeak calls OnLeak for a long lease, on a task: a panic has nobody
// to reach there, so it is logged and dropped.
func (p *Pool[T]) callOnLeak(on func(LeakReport), r LeakReport) {
	defer func() {
		if v := recover(); v != nil {
			p.warn("OnLeak panicked", fmt.Errorf("pool %q: OnLeak: %w", p.opts.Name, asError(newPanicError(v))))
		}
	}()
	on(r)
}

// logHeld logs, through Options.Logger, a lease held past LeakThreshold
// (Warn) or its end (Info), with its age and, when known, its stack. A
// panic in the Logger's handler is dropped, as warn drops it.
func (p *Pool[T]) logHeld(level slog.Level, msg string, age time.Duration, stack string) {
	l := p.opts.Logger
	if l == nil {
		return
	}
	defer func() { _ = recover() }()
	attrs := []slog.Attr{slog.String("pool.name", p.opts.Name), slog.Duration("age", age)}
	if stack != "" {
		attrs = append(attrs, slog.String("stack", stack))
	}
	l.LogAttrs(context.Background(), level, "pool: "+msg, attrs...)
}

// leaseEnded accounts for the end of a lease of e (by Release, Discard or
// Detach, gen having moved on), in a pool with LeakThreshold or metrics
// (ends): it records the lease's use_time when it was sampled (see
// metrics.go), and unfollows it, logging its end when it was reported as
// held. The holder calls it once per lease, before the item goes anywhere.
func (p *Pool[T]) leaseEnded(e *entry[T]) {
	w := e.ends.Load()
	if w == 0 {
		return
	}
	if w&endSampled != 0 {
		p.m.useTime.Record(context.Background(), seconds(p.now()-e.useFrom), p.m.rec...)
		e.ends.And(^uint32(endSampled))
	}
	if w&endFollowed != 0 {
		e.ends.And(^uint32(endFollowed))
		p.unfollowEnded(e, e.mark)
	}
}

// unfollowEnded clears the mark of e, whose lease has just ended, and logs
// that end at Info when the lease had been reported: see "Following a
// lease".
func (p *Pool[T]) unfollowEnded(e *entry[T], mk *holdMark) {
	ended := followed(e.gen.Load() - 1)
	for {
		cur := mk.lease.Load()
		if cur == 0 {
			return
		}
		since := mk.since.Load() // before the swap: then the watcher may follow anew
		if !mk.lease.CompareAndSwap(cur, 0) {
			continue
		}
		if cur == ended|reportedBit {
			if s := e.site; s != nil {
				s.mu.RLock() // its only writer is the next lease, not begun
				since = s.at
				s.mu.RUnlock()
			}
			p.logHeld(slog.LevelInfo, "a lease reported as held past LeakThreshold has ended", time.Duration(max(p.now()-since, 0)), "")
		}
		select {
		case p.watch.poke <- struct{}{}: // perhaps the last lease out
		default:
		}
		return
	}
}

// scanBufs are a scan's buffers, kept by the watcher from one scan to the
// next, emptied of entries in between (drop).
type scanBufs[T any] struct {
	es   []*entry[T]
	idle []*entry[T]
	set  map[*entry[T]]struct{}
	seen []sighting[T]
}

// sighting is what a scan saw of one entry.
type sighting[T any] struct {
	e     *entry[T]
	gen   uint64
	holds uint32
	out   bool
	at    int64 // with TrackLeaseSites: when the lease was taken
}

// drop lets go of the entries the last scan held, so that it keeps none
// alive.
func (b *scanBufs[T]) drop() {
	clear(b.es)
	clear(b.idle)
	clear(b.seen)
	clear(b.set)
	b.es, b.idle, b.seen = b.es[:0], b.idle[:0], b.seen[:0]
}

// scan looks at every registered entry once, and returns what it saw and
// the pool's clock after it: see "Which entries are out". The caller drops
// b once done with what it saw.
func (p *Pool[T]) scan(b *scanBufs[T]) ([]sighting[T], int64) {
	b.es = p.reg.list(b.es)
	for _, e := range b.es {
		b.seen = append(b.seen, sighting[T]{e: e, gen: e.gen.Load(), holds: e.holds.Load()})
	}
	if p.sites {
		for i := range b.seen {
			x := &b.seen[i]
			s := x.e.site
			if !s.mu.TryRLock() {
				continue // a lease being recorded: not out yet (see leakSite)
			}
			lease, at := s.lease, s.at
			s.mu.RUnlock()
			x.out, x.at = lease == x.gen+1 && x.e.gen.Load() == x.gen, at
		}
		return b.seen, p.now()
	}
	b.idle = p.g.idleEntries(b.idle)
	if b.set == nil {
		b.set = make(map[*entry[T]]struct{}, len(b.idle))
	}
	for _, e := range b.idle {
		b.set[e] = struct{}{}
	}
	for i := range b.seen {
		x := &b.seen[i]
		_, idle := b.set[x.e]
		x.out = !idle && x.holds&1 == 0
	}
	return b.seen, p.now()
}

// stackOf formats the stack the site recorded for the lease of generation
// gen, or returns "" when it describes another lease by now.
func (s *leakSite) stackOf(gen uint64) string {
	if !s.mu.TryRLock() {
		return "" // being written: it describes another lease now
	}
	ok, n, pcs := s.lease == gen+1, s.n, s.pcs
	s.mu.RUnlock()
	if !ok || n == 0 {
		return ""
	}
	return formatStack(pcs[:n])
}

// LeaseInfo describes a lease out now: see Pool.Outstanding.
type LeaseInfo struct {
	// Age is how long the lease has been out; 0 unless Options.LeakThreshold
	// or Options.TrackLeaseSites is set. With TrackLeaseSites it is exact.
	// With LeakThreshold alone it counts from the first of the pool's scans
	// that saw the lease out, every LeakThreshold/8: it may fall short of
	// the truth by about that much, and is 0 for a lease no scan has seen
	// yet.
	Age time.Duration
	// Stack is the stack of the Lease (or TryLease, or Do) call that took
	// the lease, as in LeakReport; "" unless Options.TrackLeaseSites is on.
	Stack string
}

// Outstanding returns the leases out now, oldest first: for each, how long
// it has been out and, with Options.TrackLeaseSites, where it was taken.
// Items being created, checked by the upkeep or destroyed are not leases,
// and neither is an item between two leases: with LeakThreshold or
// TrackLeaseSites, not even one that a Lease call is checking with the
// Preparer, or a Release call resetting (without either, such an item is
// listed, without an age). So its length never exceeds Stats.ActiveLeases
// taken when nothing moves, and always stays within MaxSize. It is the
// tool behind "look for slow or leaked leases" when ErrLeaseTimeout
// appears: safe to call from a debug handler under load, it takes no lock
// that a lease takes for longer than a copy of the idle items, and costs
// the leases nothing. A lease leaked and found by the garbage collector is
// listed until then, and no longer after. See "When leases time out" in
// the package documentation.
func (p *Pool[T]) Outstanding() []LeaseInfo {
	var b scanBufs[T]
	defer b.drop()
	seen, now := p.scan(&b)
	out := []LeaseInfo{}
	for i := range seen {
		x := &seen[i]
		if !x.out {
			continue
		}
		var li LeaseInfo
		switch {
		case p.sites:
			li.Age = time.Duration(max(now-x.at, 0))
			li.Stack = x.e.site.stackOf(x.gen)
		case x.e.mark != nil:
			mk := x.e.mark
			since := mk.since.Load()
			if mk.lease.Load()&^reportedBit == followed(x.gen) {
				li.Age = time.Duration(max(now-since, 0))
			}
		}
		out = append(out, li)
	}
	slices.SortStableFunc(out, func(a, b LeaseInfo) int { return cmp.Compare(b.Age, a.Age) })
	return out
}
