package pool

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
	"weak"
)

// The watcher of Options.LeakThreshold: one task, from New to Close, that
// scans the items every LeakThreshold/8 (holders.go, "Which entries are
// out"), follows each lease it sees out, and reports the ones held past
// LeakThreshold.
//
// The invariant: the watcher writes nothing a lease writes on its fast
// path, and reports each lease at most once, never before LeakThreshold
// has passed since the lease began. Its one touch on the rest of the pool
// is entry.atEnd's atEndFollowed bit, which tells the end of a lease to
// unfollow it (Pool.unfollowEnded).
//
// # Following a lease
//
// Each entry's watchMark says which lease the watcher follows: lease is
// the generation plus one, shifted left, its low bit set once the lease
// has been reported; since is when the watcher first saw it out (with
// TrackLeaseSites, when it was taken).
//
// Without TrackLeaseSites, gen and busy only grow, so an entry that two
// scans in a row see out with the same generation and busy mark was, from the
// first to the second, in one lease or in one of the windows of "Which
// entries are out". A window never spans two scans a period apart (unless
// a goroutine stays inside one for that long), so the second
// sighting is of the lease itself: it began before that scan's clock read.
// The watcher reports the lease once LeakThreshold has passed since its
// second sighting: never early. The lease began after the last scan that
// did not see it out, so the report is due at most three periods plus
// LeakThreshold after it began (that scan to the first sighting, to the
// second, to the first scan past LeakThreshold). With TrackLeaseSites the
// age is exact, and the report comes within a period of LeakThreshold.
//
// The mark is shared with the end of the lease, Outstanding and the
// entry's cleanup, which read it without the watcher:
//
//   - The watcher follows a lease by storing since, then lease, then
//     setting atEndFollowed, then loading gen again: if the lease has ended
//     meanwhile, it unfollows it. The end of a lease bumps gen, then loads
//     atEnd and, when atEndFollowed is set, unfollows whatever the mark
//     follows. The atomics are sequentially consistent, so one of the two
//     sees the other, and no ended lease stays followed: the cleanup of a
//     leaked entry finds its mark following the leaked lease, or nothing.
//   - The watcher logs a lease's Warn, then sets the reported bit by
//     compare-and-swap, then calls OnLeak; the end of the lease clears the
//     mark by compare-and-swap and logs the Info when the bit was set. When
//     the watcher's compare-and-swap fails, the lease ended before the bit
//     was set, and the watcher logs the Info itself: exactly one Info,
//     after the Warn. Nothing but the end of a lease clears a reported
//     mark, and the watcher does not touch since while the mark is
//     reported.

// watcher is a pool's LeakThreshold, as its watcher uses it.
type watcher struct {
	threshold int64         // LeakThreshold, in the pool clock's nanoseconds
	every     time.Duration // between two scans
}

// minWatchEvery bounds how often the watcher scans, whatever the threshold.
const minWatchEvery = time.Millisecond

func newWatcher(threshold time.Duration) *watcher {
	return &watcher{threshold: int64(threshold), every: max(threshold/8, minWatchEvery)}
}

// watchMark is what the watcher knows of an entry's current lease: see
// "Following a lease". It is made with the entry when LeakThreshold is set.
type watchMark struct {
	lease atomic.Uint64 // followed(gen) of the lease followed, | reportedBit; 0: none
	since atomic.Int64  // the pool's clock when the watcher first saw it out, or when it was taken

	// The watcher's own: only the watcher touches them.
	busy      uint32 // entry.busy when it was first seen
	sightings uint8  // the scans in a row that saw it out, up to 2
	secondAt  int64  // the clock of the second
}

// reportedBit is set in watchMark.lease once the lease has been reported.
const reportedBit = 1

// followed is watchMark.lease for the lease of generation gen.
func followed(gen uint64) uint64 { return (gen + 1) << 1 }

// startWatcher starts the watcher, as a task, so that Close stops it and
// waits for it. Between scans it holds the pool only weakly, so that a
// pool dropped without Close can be collected; it returns then.
func (p *Pool[T]) startWatcher() {
	wp, done, every := p.self, p.done.Done(), p.watcher.every
	p.tasks.start(func() { watchLoop(wp, done, every) })
}

// watchLoop scans every period until the pool closes or is collected.
func watchLoop[T any](wp weak.Pointer[Pool[T]], done <-chan struct{}, every time.Duration) {
	var b scanBufs[T]
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		p := wp.Value()
		if p == nil {
			return
		}
		p.followAll(&b)
	}
}

// followAll scans, follows every lease out and reports those due. It stops,
// reporting nothing more, once Close has begun.
func (p *Pool[T]) followAll(b *scanBufs[T]) {
	defer b.drop()
	seen, now := p.scan(b)
	for i := range seen {
		if p.done.Err() != nil {
			return
		}
		x := &seen[i]
		if x.out {
			p.follow(x, now)
		} else {
			unfollowIdle(x.e)
		}
	}
}

// follow updates what the watcher knows of the lease x saw out at now, and
// reports the lease once it has been held past LeakThreshold: see
// "Following a lease".
func (p *Pool[T]) follow(x *sighting[T], now int64) {
	mk := x.e.mark
	want := followed(x.gen)
	switch cur := mk.lease.Load(); {
	case cur&reportedBit != 0:
		return // reported already, or an earlier lease, reported, whose end has not unfollowed it yet
	case cur != want || !p.route.sited && mk.busy != x.busy:
		if !p.startFollowing(x, cur, now) {
			return
		}
	case mk.sightings < 2:
		mk.sightings, mk.secondAt = 2, now
	}
	from := x.at
	if !p.route.sited {
		if mk.sightings < 2 {
			return
		}
		from = mk.secondAt
	}
	if now-from >= p.watcher.threshold {
		p.reportHeld(x, time.Duration(now-mk.since.Load()))
	}
}

// startFollowing makes the mark of x's entry follow x's lease, seen for the
// first time at now, in place of cur; it reports false when that lease, or
// the one cur followed, ended meanwhile: the next scan sees.
func (p *Pool[T]) startFollowing(x *sighting[T], cur uint64, now int64) bool {
	mk := x.e.mark
	since := now
	if p.route.sited {
		since = x.at
	}
	mk.busy, mk.sightings = x.busy, 1
	mk.since.Store(since)
	if !mk.lease.CompareAndSwap(cur, followed(x.gen)) {
		return false
	}
	x.e.atEnd.Or(atEndFollowed)
	if x.e.gen.Load() != x.gen {
		unfollowIdle(x.e)
		return false
	}
	return true
}

// unfollowIdle forgets the lease the mark of e follows, for an entry that a
// scan found not out: the lease has ended, or was one of the windows of
// "Which entries are out". A reported lease is left to its end, which logs
// it.
func unfollowIdle[T any](e *entry[T]) {
	mk := e.mark
	if cur := mk.lease.Load(); cur != 0 && cur&reportedBit == 0 && mk.lease.CompareAndSwap(cur, 0) {
		e.atEnd.And(^uint32(atEndFollowed))
	}
}

// reportHeld reports the lease x saw, held for age past LeakThreshold:
// counted, logged at Warn, marked reported (see "Following a lease"), then
// given to OnLeak on a task of its own, so that a lease that OnLeak's report
// leads to end logs its end in its own Release.
func (p *Pool[T]) reportHeld(x *sighting[T], age time.Duration) {
	var stack string
	if p.route.sited {
		stack = x.e.site.stackOf(x.gen)
	}
	p.c.longLeases.Add(1)
	if p.m != nil {
		p.m.long.Add(context.Background(), 1, p.m.add...)
	}
	p.logHeld(slog.LevelWarn, "a lease has been held longer than LeakThreshold", age, stack)
	want := followed(x.gen)
	if !x.e.mark.lease.CompareAndSwap(want, want|reportedBit) {
		p.logHeld(slog.LevelInfo, msgHeldEnded, age, "")
	}
	if on := p.opts.OnLeak; on != nil {
		r := LeakReport{Pool: p.opts.Name, Age: age, Stack: stack, Held: true}
		p.tasks.start(func() { p.callOnLeak(on, r) })
	}
}

// msgHeldEnded is the Info that says a lease reported as held has ended.
const msgHeldEnded = "a lease reported as held past LeakThreshold has ended"

// unfollowEnded clears the mark of e, whose lease has just ended, and logs
// that end at Info when the lease had been reported: see "Following a
// lease". The end of a lease calls it when atEnd has atEndFollowed.
func (p *Pool[T]) unfollowEnded(e *entry[T]) {
	e.atEnd.And(^uint32(atEndFollowed))
	mk := e.mark
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
			p.logHeld(slog.LevelInfo, msgHeldEnded, time.Duration(max(p.now()-since, 0)), "")
		}
		return
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
