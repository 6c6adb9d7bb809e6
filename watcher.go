package pool

import (
	"context"
	"fmt"
	"log/slog"
	"time"
	"weak"
)

// The watcher of Options.LeakThreshold: one task, from New to Close, that
// reads the leases' records every LeakThreshold/8 (holders.go) and reports
// each lease out past LeakThreshold once: never early, since a record's
// start is no earlier than the lease's, and within a period after.
//
// A reported lease's end logs it at Info, exactly once, whoever sees the
// end first. The watcher stores leaseRecord.reported, sets atEndReported,
// then loads gen; the end of the lease bumps gen, then loads atEnd. The
// atomics are sequentially consistent, so at least one of the two sees the
// other; each that does clears reported by compare-and-swap, and the one
// that wins logs.

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

// followAll scans the leases out and reports those held past
// LeakThreshold. It stops, reporting nothing more, once Close has begun.
func (p *Pool[T]) followAll(b *scanBufs[T]) {
	defer b.drop()
	seen, now := p.scan(b)
	for i := range seen {
		if p.done.Err() != nil {
			return
		}
		if x := &seen[i]; x.out && now-x.at >= p.watcher.threshold && x.e.rec.reported.Load() != x.gen+1 {
			p.reportHeld(x, time.Duration(now-x.at))
		}
	}
}

// reportHeld reports the lease x saw, held for age: counted, logged at
// Warn, marked reported, then given to OnLeak on a task of its own, so that
// a lease that OnLeak's report leads to end logs its end in its own
// Release.
func (p *Pool[T]) reportHeld(x *sighting[T], age time.Duration) {
	e, stack := x.e, ""
	if p.route.sited {
		stack = e.rec.stackOf(x.gen)
	}
	p.c.longLeases.Add(1)
	if p.m != nil {
		p.m.long.Add(context.Background(), 1, p.m.add...)
	}
	p.logHeld(slog.LevelWarn, "a lease has been held longer than LeakThreshold", age, stack)
	e.rec.reported.Store(x.gen + 1)
	e.atEnd.Or(atEndReported)
	if e.gen.Load() != x.gen {
		p.reportedEnded(e, x.gen, x.at)
	}
	if on := p.opts.OnLeak; on != nil {
		r := LeakReport{Pool: p.opts.Name, Age: age, Stack: stack, Held: true}
		p.tasks.start(func() { p.callOnLeak(on, r) })
	}
}

// reportedEnded logs at Info the end of the lease of generation gen of e,
// begun at at and reported as held, unless that has been logged already.
func (p *Pool[T]) reportedEnded(e *entry[T], gen uint64, at int64) {
	if e.rec.reported.CompareAndSwap(gen+1, 0) {
		p.logHeld(slog.LevelInfo, "a lease reported as held past LeakThreshold has ended", time.Duration(max(p.now()-at, 0)), "")
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
