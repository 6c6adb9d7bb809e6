package pool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tracing: Options.Tracer's calls, their order and their ctx, what
// LeaseTrace and ReleaseTrace measure, what a Tracer that panics costs the
// pool, and what tracing costs a lease (the package documentation's
// "Tracing", and the doc comments of Tracer, LeaseTrace and ReleaseTrace).

// The durations the fake clock gives each step: distinct, so that a sum
// says which steps it counted.
const (
	trCreate = 3 * time.Millisecond  // a creation
	trCheck  = 5 * time.Millisecond  // a check that passes
	trFail   = 7 * time.Millisecond  // a check that fails
	trHold   = 11 * time.Millisecond // a lease's hold
)

// trIDKey is the key under which a trRecorder's LeaseStart puts the lease's
// number in the ctx it returns.
type trIDKey struct{}

// trID is the lease number in ctx; 0 when it has none.
func trID(ctx context.Context) int {
	id, _ := ctx.Value(trIDKey{}).(int)
	return id
}

// trCall is one call a trRecorder saw.
type trCall struct {
	method string          // "LeaseStart", "LeaseEnd" or "Released"
	id     int             // the lease's number, from its ctx
	ctx    context.Context // for LeaseStart, the ctx it returned
	pool   string
	lease  LeaseTrace   // for LeaseEnd
	rel    ReleaseTrace // for Released
}

// trRecorder is a Tracer that numbers the leases (LeaseStart returns ctx
// with the number in it), records every call, and then runs the hook a
// test set for that method, if any: a hook of LeaseStart returns what
// LeaseStart returns.
type trRecorder struct {
	mu         sync.Mutex
	next       int
	calls      []trCall
	onStart    func(ctx context.Context) context.Context
	onEnd      func(ctx context.Context, t LeaseTrace)
	onReleased func(ctx context.Context, t ReleaseTrace)
}

func (r *trRecorder) LeaseStart(ctx context.Context, pool string) context.Context {
	r.mu.Lock()
	r.next++
	ctx = context.WithValue(ctx, trIDKey{}, r.next)
	r.calls = append(r.calls, trCall{method: "LeaseStart", id: r.next, ctx: ctx, pool: pool})
	hook := r.onStart
	r.mu.Unlock()
	if hook != nil {
		return hook(ctx)
	}
	return ctx
}

func (r *trRecorder) LeaseEnd(ctx context.Context, t LeaseTrace) {
	r.mu.Lock()
	r.calls = append(r.calls, trCall{method: "LeaseEnd", id: trID(ctx), ctx: ctx, pool: t.Pool, lease: t})
	hook := r.onEnd
	r.mu.Unlock()
	if hook != nil {
		hook(ctx, t)
	}
}

func (r *trRecorder) Released(ctx context.Context, t ReleaseTrace) {
	r.mu.Lock()
	r.calls = append(r.calls, trCall{method: "Released", id: trID(ctx), ctx: ctx, pool: t.Pool, rel: t})
	hook := r.onReleased
	r.mu.Unlock()
	if hook != nil {
		hook(ctx, t)
	}
}

// setHooks sets the hooks; nil ones are cleared.
func (r *trRecorder) setHooks(start func(context.Context) context.Context, end func(context.Context, LeaseTrace), released func(context.Context, ReleaseTrace)) {
	r.mu.Lock()
	r.onStart, r.onEnd, r.onReleased = start, end, released
	r.mu.Unlock()
}

// seen returns the calls so far.
func (r *trRecorder) seen() []trCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]trCall(nil), r.calls...)
}

// order returns the calls so far as "LeaseStart 1", "LeaseEnd 1",
// "Released 1"..., from the call numbered from on.
func (r *trRecorder) order(from int) []string {
	var out []string
	for _, c := range r.seen() {
		if c.id >= from {
			out = append(out, fmt.Sprintf("%s %d", c.method, c.id))
		}
	}
	return out
}

// of returns the calls of method for the lease numbered id.
func (r *trRecorder) of(method string, id int) []trCall {
	var out []trCall
	for _, c := range r.seen() {
		if c.method == method && c.id == id {
			out = append(out, c)
		}
	}
	return out
}

// last returns the last call of method, failing the test when there is none.
func (r *trRecorder) last(t *testing.T, method string) trCall {
	t.Helper()
	calls := r.seen()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].method == method {
			return calls[i]
		}
	}
	require.Failf(t, "no call", "the Tracer saw no %s", method)
	return trCall{}
}

// trClock makes a fake clock the clock of the pools New makes until the
// test ends: set before New, so that nothing of a pool's runs on another.
func trClock(t *testing.T) *fakeClock {
	clk := &fakeClock{}
	clk.advance(int64(time.Hour)) // any start: the clock is the pool's own
	testClock = clk.now
	t.Cleanup(func() { testClock = nil })
	return clk
}

// trPool returns a pool on clk traced by a fresh trRecorder, over a
// tracker each of whose creations takes create on clk.
func trPool(t *testing.T, clk *fakeClock, opts Options[*conn], create time.Duration) (*Pool[*conn], *tracker, *trRecorder) {
	t.Helper()
	rec := &trRecorder{}
	opts.Tracer = rec
	tr := &tracker{}
	if opts.Destroy == nil {
		opts.Destroy = tr.destroy
	}
	f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		clk.advance(int64(create))
		return tr.Create(ctx)
	})
	p, err := New[*conn](bg, f, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, tr, rec
}

// trChecker is a Preparer whose check takes trCheck on the fake clock, but
// for the next failing ones, which take trFail and fail with errBoom. It
// records the ctx of every check.
type trChecker struct {
	clk     *fakeClock
	mu      sync.Mutex
	failing int
	ctxs    []context.Context
}

func (c *trChecker) IsReady(ctx context.Context, _ *conn) (bool, error) {
	c.mu.Lock()
	c.ctxs = append(c.ctxs, ctx)
	fail := c.failing > 0
	if fail {
		c.failing--
	}
	c.mu.Unlock()
	if fail {
		c.clk.advance(int64(trFail))
		return false, errBoom
	}
	c.clk.advance(int64(trCheck))
	return true, nil
}

func (c *trChecker) Prepare(context.Context, *conn) error { return nil }

// failNext makes the next n checks fail.
func (c *trChecker) failNext(n int) {
	c.mu.Lock()
	c.failing = n
	c.mu.Unlock()
}

// checked returns the ctx of every check so far.
func (c *trChecker) checked() []context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]context.Context(nil), c.ctxs...)
}

// trCalls are the three ways to lease, each leasing once and ending the
// lease with Release (Do: fn returns nil); they return the lease's error.
var trCalls = []struct {
	name  string
	lease func(ctx context.Context, p *Pool[*conn]) error
}{
	{"Lease", func(ctx context.Context, p *Pool[*conn]) error {
		l, err := p.Lease(ctx)
		l.Release()
		return err
	}},
	{"TryLease", func(ctx context.Context, p *Pool[*conn]) error {
		l, err := p.TryLease(ctx)
		l.Release()
		return err
	}},
	{"Do", func(ctx context.Context, p *Pool[*conn]) error {
		return p.Do(ctx, func(*conn) error { return nil })
	}},
}

// "Tracing": LeaseStart as the call begins, LeaseEnd as it returns, and for a
// granted lease exactly one Released as it ends, each with the pool's Name.
func TestTracerCallsComeInOrder(t *testing.T) {
	canceled, cancel := context.WithCancel(bg)
	cancel()
	tests := []struct {
		name string
		run  func(p *Pool[*conn])
		want []string
	}{
		{"Lease, then Release", func(p *Pool[*conn]) {
			l, _ := p.Lease(bg)
			l.Release()
			l.Release() // ends nothing: no second Released
		}, []string{"LeaseStart 1", "LeaseEnd 1", "Released 1"}},
		{"TryLease, then Release", func(p *Pool[*conn]) {
			l, _ := p.TryLease(bg)
			l.Release()
		}, []string{"LeaseStart 1", "LeaseEnd 1", "Released 1"}},
		{"Do", func(p *Pool[*conn]) {
			_ = p.Do(bg, func(*conn) error { return nil })
		}, []string{"LeaseStart 1", "LeaseEnd 1", "Released 1"}},
		{"a Lease that fails", func(p *Pool[*conn]) {
			_, _ = p.Lease(canceled)
		}, []string{"LeaseStart 1", "LeaseEnd 1"}},
		{"a Do that fails", func(p *Pool[*conn]) {
			_ = p.Do(canceled, func(*conn) error { return nil })
		}, []string{"LeaseStart 1", "LeaseEnd 1"}},
		{"two leases, ended in the reverse order", func(p *Pool[*conn]) {
			a, _ := p.Lease(bg)
			b, _ := p.Lease(bg)
			b.Release()
			a.Discard()
		}, []string{"LeaseStart 1", "LeaseEnd 1", "LeaseStart 2", "LeaseEnd 2", "Released 2", "Released 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, rec := trPool(t, trClock(t), Options[*conn]{Name: "db", MaxSize: 2}, 0)
			tt.run(p)
			assert.Equal(t, tt.want, rec.order(1))
			for _, c := range rec.seen() {
				assert.Equal(t, "db", c.pool, "%s %d", c.method, c.id)
			}
			assertAtRest(t, p)
		})
	}
}

// "Tracing": Released runs once the item has been given back, in the
// goroutine of the call that ended the lease; for a Detach, once the lease
// has ended, while the pool still holds the item, which leaves the pool
// when Released returns.
func TestTracerReleasedRunsOnceTheItemIsGivenBack(t *testing.T) {
	tests := []struct {
		how  string
		end  func(l Lease[*conn])
		want func(t *testing.T, s Stats)
	}{
		{"release", func(l Lease[*conn]) { l.Release() }, func(t *testing.T, s Stats) {
			assert.Zero(t, s.ActiveLeases, "no lease is out as Released runs")
			assert.Equal(t, 1, s.ItemsAvailable, "the item is idle")
		}},
		{"discard", func(l Lease[*conn]) { l.Discard() }, func(t *testing.T, s Stats) {
			assert.Zero(t, s.ActiveLeases-s.Destroying, "no lease is out as Released runs")
			// Stats reads Destroying before Destroyed: a Destroy that ends
			// between the two reads shows in both.
			assert.True(t, s.Destroying == 1 || s.Destroyed == 1, "the item is handed to its Destroy: %+v", s)
		}},
		{"detach", func(l Lease[*conn]) { _ = l.Detach() }, func(t *testing.T, s Stats) {
			assert.Equal(t, 1, s.ActiveLeases, "the pool holds the item as Released runs")
			assert.Zero(t, s.Detached, "the item leaves the pool once Released returns")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.how, func(t *testing.T) {
			p, _, rec := trPool(t, trClock(t), Options[*conn]{MaxSize: 1}, 0)
			var at Stats
			var out []LeaseInfo
			rec.setHooks(nil, nil, func(context.Context, ReleaseTrace) { at, out = p.Stats(), p.Outstanding() })
			l := mustLease(t, p)
			done := make(chan struct{})
			go func() { // the lease ends in another goroutine than it began
				defer close(done)
				tt.end(l)
				assert.Len(t, rec.of("Released", 1), 1, "Released has run when the call that ended the lease returns")
			}()
			recvOrFail(t, done, "the lease to end")
			assert.Empty(t, out, "the lease has ended as Released runs")
			tt.want(t, at)
			if tt.how == "detach" {
				assert.Equal(t, uint64(1), p.Stats().Detached, "the item is out of the pool once Detach returns")
			}
		})
	}
}

// "Tracing": the ctx LeaseStart returns is the one the lease goes on with:
// the factory and the Preparer see it, and so do LeaseEnd and Released.
func TestTracerLeaseStartCtxReachesTheWholeLease(t *testing.T) {
	for _, call := range trCalls {
		t.Run(call.name, func(t *testing.T) {
			clk := trClock(t)
			ch := &trChecker{clk: clk}
			p, tr, rec := trPool(t, clk, Options[*conn]{MaxSize: 1, Preparer: ch}, 0)
			tr.ctxs = make(chan context.Context, 1)
			require.NoError(t, call.lease(bg, p)) // creates and checks an item
			require.NoError(t, call.lease(bg, p)) // checks it idle (CheckAfterIdle 0)

			assert.Equal(t, 1, trID(recvOrFail(t, tr.ctxs, "the factory's ctx")), "the factory sees the first lease's ctx")
			if checked := ch.checked(); assert.Len(t, checked, 2) {
				assert.Equal(t, 1, trID(checked[0]), "the fresh item's check sees the first lease's ctx")
				assert.Equal(t, 2, trID(checked[1]), "the idle item's check sees the second lease's ctx")
			}
			for id := 1; id <= 2; id++ {
				started, ended, released := rec.of("LeaseStart", id), rec.of("LeaseEnd", id), rec.of("Released", id)
				require.Len(t, started, 1)
				require.Len(t, ended, 1)
				require.Len(t, released, 1)
				assert.True(t, ended[0].ctx == started[0].ctx, "LeaseEnd of lease %d gets the ctx its LeaseStart returned", id)
				assert.True(t, released[0].ctx == started[0].ctx, "Released of lease %d gets the ctx its LeaseStart returned", id)
			}
		})
	}
}

// Tracer.LeaseStart: the lease goes on with the ctx LeaseStart returned,
// its wait included: when that ctx ends, the lease ends with its error,
// though the caller's ctx has not ended.
func TestTracerLeaseEndsWithTheLeaseStartCtx(t *testing.T) {
	for _, whileWaiting := range []bool{false, true} {
		t.Run(fmt.Sprintf("whileWaiting=%v", whileWaiting), func(t *testing.T) {
			p, _, rec := trPool(t, trClock(t), Options[*conn]{MaxSize: 1}, 0)
			holder := mustLease(t, p) // lease 1
			ended, end := context.WithCancel(bg)
			defer end()
			rec.setHooks(func(ctx context.Context) context.Context {
				return context.WithValue(ended, trIDKey{}, trID(ctx))
			}, nil, nil)
			var err error
			if whileWaiting {
				ch := leaseAsync(bg, p)
				waitQueued(t, p, 1)
				end()
				err = awaitLease(t, ch).err
				holder.Release()
			} else {
				holder.Release() // the item is idle, and still
				end()
				_, err = p.Lease(bg)
			}
			require.ErrorIs(t, err, context.Canceled)
			got := rec.of("LeaseEnd", 2)
			require.Len(t, got, 1)
			assert.ErrorIs(t, got[0].lease.Err, context.Canceled)
			assert.Equal(t, whileWaiting, got[0].lease.Wait > 0, "Wait: %v", got[0].lease.Wait)
			assert.Empty(t, rec.of("Released", 2))
			assertAtRest(t, p)
		})
	}
}

// Tracer.LeaseStart: a nil return stands for the caller's ctx, which the
// factory, LeaseEnd and Released then get.
func TestTracerNilFromLeaseStartStandsForTheCallersCtx(t *testing.T) {
	type callerKey struct{}
	for _, call := range trCalls {
		t.Run(call.name, func(t *testing.T) {
			p, tr, rec := trPool(t, trClock(t), Options[*conn]{MaxSize: 1}, 0)
			tr.ctxs = make(chan context.Context, 1)
			rec.setHooks(func(context.Context) context.Context { return nil }, nil, nil)
			ctx := context.WithValue(bg, callerKey{}, "the caller's")
			require.NoError(t, call.lease(ctx, p))
			assert.Equal(t, "the caller's", recvOrFail(t, tr.ctxs, "the factory's ctx").Value(callerKey{}))
			assert.True(t, rec.last(t, "LeaseEnd").ctx == ctx, "LeaseEnd gets the caller's ctx")
			assert.True(t, rec.last(t, "Released").ctx == ctx, "Released gets the caller's ctx")
		})
	}
}

// LeaseTrace: Create is how long the factory took for this lease, 0 for an
// idle item; Prepare how long IsReady and Prepare took on the items the
// lease checked, all of them, 0 when none was; Wait 0 for a lease served
// at once; Uses as Lease.Uses ("Tracing": a duration is 0 exactly when the
// lease did not do that step).
func TestTracerLeaseTraceMeasuresEachStep(t *testing.T) {
	tests := []struct {
		name           string
		checked        bool // a Preparer checks the items
		checkAfterIdle time.Duration
		idle           int // items idle before the lease
		failing        int // checks that fail before one passes
		want           LeaseTrace
	}{
		{name: "an idle item", idle: 1, want: LeaseTrace{Uses: 2}},
		{name: "a created item", want: LeaseTrace{Create: trCreate, Uses: 1}},
		{name: "a created item, checked", checked: true, want: LeaseTrace{Create: trCreate, Prepare: trCheck, Uses: 1}},
		{name: "an idle item not due a check", checked: true, checkAfterIdle: time.Hour, idle: 1, want: LeaseTrace{Uses: 2}},
		{name: "an idle item, checked", checked: true, idle: 1, want: LeaseTrace{Prepare: trCheck, Uses: 2}},
		{name: "an idle item fails its check, the next passes", checked: true, idle: 2, failing: 1,
			want: LeaseTrace{Prepare: trFail + trCheck, Uses: 2}},
		{name: "two idle items fail their checks, the third passes", checked: true, idle: 3, failing: 2,
			want: LeaseTrace{Prepare: 2*trFail + trCheck, Uses: 2}},
		{name: "the idle item fails its check, a created one passes", checked: true, idle: 1, failing: 1,
			want: LeaseTrace{Create: trCreate, Prepare: trFail + trCheck, Uses: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := trClock(t)
			ch := &trChecker{clk: clk}
			opts := Options[*conn]{Name: "db", MaxSize: 4, CheckAfterIdle: tt.checkAfterIdle}
			if tt.checked {
				opts.Preparer = ch
			}
			p, _, rec := trPool(t, clk, opts, trCreate)
			putIdle(t, p, tt.idle)
			ch.failNext(tt.failing)

			l := mustLease(t, p)
			defer l.Release()
			want := tt.want
			want.Pool = "db"
			got := rec.last(t, "LeaseEnd").lease
			assert.Equal(t, want, got)
			assert.Equal(t, l.Uses(), got.Uses, "Uses is Lease.Uses")
			assert.Zero(t, p.Stats().Waits, "no lease waited")
		})
	}
}

// LeaseTrace.Wait: how long the lease queued, MaxSize items being in use,
// as Stats.WaitTime counts it; Create 0 when the wait ended with the
// released item, and the factory's time when it ended with the room of a
// discarded one. ReleaseTrace.Held: the holder's lease, from its return to
// its end.
func TestTracerWaitIsTheQueuedTime(t *testing.T) {
	tests := []struct {
		name string
		end  func(Lease[*conn])
		want LeaseTrace // but Wait
	}{
		{"granted the released item", Lease[*conn].Release, LeaseTrace{Uses: 2}},
		{"granted the room of a discarded item", Lease[*conn].Discard, LeaseTrace{Create: trCreate, Uses: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := trClock(t)
			p, _, rec := trPool(t, clk, Options[*conn]{Name: "db", MaxSize: 1}, trCreate)
			holder := mustLease(t, p) // lease 1
			ch := leaseAsync(bg, p)   // lease 2
			waitQueued(t, p, 1)
			clk.advance(int64(trHold))
			tt.end(holder)
			o := awaitLease(t, ch)
			require.NoError(t, o.err)
			defer o.l.Release()

			s := p.Stats()
			require.Equal(t, uint64(1), s.Waits)
			require.Positive(t, s.WaitTime)
			want := tt.want
			want.Pool, want.Wait = "db", s.WaitTime
			got := rec.of("LeaseEnd", 2)
			require.Len(t, got, 1)
			assert.Equal(t, want, got[0].lease)
			assert.Zero(t, rec.of("LeaseEnd", 1)[0].lease.Wait, "the holder was served at once")
			held := rec.of("Released", 1)
			require.Len(t, held, 1)
			assert.Equal(t, trHold, held[0].rel.Held, "the holder held its item while the other waited")
		})
	}
}

// ReleaseTrace: Held is from the return of the call that took the lease
// (its creation and check not included) to its end, How how it ended.
func TestTracerHeldIsFromTheLeaseReturnToItsEnd(t *testing.T) {
	hold := func(clk *fakeClock, d time.Duration) { clk.advance(int64(d)) }
	tests := []struct {
		name string
		run  func(p *Pool[*conn], clk *fakeClock) // one lease, held for trHold unless said
		held time.Duration
		how  string
	}{
		{"Lease, Release", func(p *Pool[*conn], clk *fakeClock) {
			l, _ := p.Lease(bg)
			hold(clk, trHold)
			l.Release()
		}, trHold, "release"},
		{"Lease, Discard", func(p *Pool[*conn], clk *fakeClock) {
			l, _ := p.Lease(bg)
			hold(clk, trHold)
			l.Discard()
		}, trHold, "discard"},
		{"Lease, Detach", func(p *Pool[*conn], clk *fakeClock) {
			l, _ := p.Lease(bg)
			hold(clk, trHold)
			_ = l.Detach()
		}, trHold, "detach"},
		{"TryLease, Release", func(p *Pool[*conn], clk *fakeClock) {
			l, _ := p.TryLease(bg)
			hold(clk, trHold)
			l.Release()
		}, trHold, "release"},
		{"Do", func(p *Pool[*conn], clk *fakeClock) {
			_ = p.Do(bg, func(*conn) error { hold(clk, trHold); return nil })
		}, trHold, "release"},
		{"Lease, Release at once", func(p *Pool[*conn], clk *fakeClock) {
			l, _ := p.Lease(bg)
			l.Release()
		}, 0, "release"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := trClock(t)
			p, _, rec := trPool(t, clk, Options[*conn]{Name: "db", MaxSize: 1, Preparer: &trChecker{clk: clk}}, trCreate)
			tt.run(p, clk)
			got := rec.of("Released", 1)
			require.Len(t, got, 1)
			assert.Equal(t, ReleaseTrace{Pool: "db", Held: tt.held, How: tt.how}, got[0].rel)
			assert.Equal(t, trCreate+trCheck, rec.of("LeaseEnd", 1)[0].lease.Create+rec.of("LeaseEnd", 1)[0].lease.Prepare,
				"the lease took its time before it returned")
		})
	}
}

// ReleaseTrace.How and "Tracing": Release, Discard and Detach report
// "release", "discard" and "detach", whatever becomes of the item; Do's end
// is Release, or Discard when fn's error wraps ErrBroken or fn panics.
func TestTracerReleasedSaysHowTheLeaseEnded(t *testing.T) {
	errBroken := fmt.Errorf("send: %w: %w", ErrBroken, errBoom)
	lease := func(end func(p *Pool[*conn], l Lease[*conn])) func(t *testing.T, p *Pool[*conn]) {
		return func(t *testing.T, p *Pool[*conn]) { end(p, mustLease(t, p)) }
	}
	do := func(fn func(*conn) error) func(t *testing.T, p *Pool[*conn]) {
		return func(t *testing.T, p *Pool[*conn]) { _ = p.Do(bg, fn) }
	}
	tests := []struct {
		name  string
		reset func(*conn) error
		run   func(t *testing.T, p *Pool[*conn])
		how   string
	}{
		{name: "Release", run: lease(func(_ *Pool[*conn], l Lease[*conn]) { l.Release() }), how: "release"},
		{name: "Discard", run: lease(func(_ *Pool[*conn], l Lease[*conn]) { l.Discard() }), how: "discard"},
		{name: "Detach", run: lease(func(_ *Pool[*conn], l Lease[*conn]) { _ = l.Detach() }), how: "detach"},
		{name: "Release of an item a Clear retired", run: lease(func(p *Pool[*conn], l Lease[*conn]) {
			p.Clear()
			l.Release()
		}), how: "release"},
		{name: "Release to a closed pool", run: lease(func(p *Pool[*conn], l Lease[*conn]) {
			_ = p.Close()
			l.Release()
		}), how: "release"},
		{name: "Release whose Reset fails", reset: func(*conn) error { return errBoom },
			run: lease(func(_ *Pool[*conn], l Lease[*conn]) { l.Release() }), how: "release"},
		{name: "Do, fn returns nil", run: do(func(*conn) error { return nil }), how: "release"},
		{name: "Do, fn returns an error", run: do(func(*conn) error { return errBoom }), how: "release"},
		{name: "Do, fn's error wraps ErrBroken", run: do(func(*conn) error { return errBroken }), how: "discard"},
		{name: "Do, fn panics", run: func(t *testing.T, p *Pool[*conn]) {
			v, panicked := catchPanic(func() { _ = p.Do(bg, func(*conn) error { panic("fn panicked") }) })
			require.True(t, panicked)
			assert.Equal(t, "fn panicked", v, "fn's panic goes on")
		}, how: "discard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, rec := trPool(t, trClock(t), Options[*conn]{MaxSize: 1, Reset: tt.reset, Logger: (&logBuffer{}).logger()}, 0)
			tt.run(t, p)
			got := rec.of("Released", 1)
			require.Len(t, got, 1)
			assert.Equal(t, tt.how, got[0].rel.How)
			assert.Equal(t, []string{"LeaseStart 1", "LeaseEnd 1", "Released 1"}, rec.order(1), "no other lease")
			assertAtRest(t, p)
		})
	}
}

// "Tracing": a lease that fails (its ctx, LeaseTimeout, Close,
// ErrExhausted, a factory or check that failed) gets LeaseEnd with its Err
// and Uses 0, and no Released; its Wait is the time it queued (as
// Stats.WaitTime counts), 0 when it did not, and Create and Prepare the
// time of the steps it took.
func TestTracerFailedLeaseGetsLeaseEndAndNoReleased(t *testing.T) {
	canceled, cancel := context.WithCancel(bg)
	cancel()
	fn := func(*conn) error { return nil }
	tests := []struct {
		name    string
		opts    Options[*conn]
		checked bool // a trChecker checks the items
		fail    func(t *testing.T, p *Pool[*conn], tr *tracker, ch *trChecker) error
		wantErr error
		want    LeaseTrace // its Create and Prepare
		queued  bool
	}{
		{name: "its ctx ended already, an item idle", fail: func(t *testing.T, p *Pool[*conn], _ *tracker, _ *trChecker) error {
			putIdle(t, p, 1)
			_, err := p.Lease(canceled)
			return err
		}, wantErr: context.Canceled},
		{name: "Do, its ctx ended already", fail: func(t *testing.T, p *Pool[*conn], _ *tracker, _ *trChecker) error {
			return p.Do(canceled, fn)
		}, wantErr: context.Canceled},
		{name: "its ctx ended while it waited", fail: func(t *testing.T, p *Pool[*conn], _ *tracker, _ *trChecker) error {
			holder := mustLease(t, p)
			defer holder.Release()
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			ch := leaseAsync(ctx, p)
			waitQueued(t, p, 1)
			cancel()
			return awaitLease(t, ch).err
		}, wantErr: context.Canceled, queued: true},
		{name: "LeaseTimeout", opts: Options[*conn]{LeaseTimeout: time.Millisecond},
			fail: func(t *testing.T, p *Pool[*conn], _ *tracker, _ *trChecker) error {
				holder := mustLease(t, p)
				defer holder.Release()
				_, err := p.Lease(bg)
				return err
			}, wantErr: ErrLeaseTimeout, queued: true},
		{name: "Close while it waited", fail: func(t *testing.T, p *Pool[*conn], _ *tracker, _ *trChecker) error {
			holder := mustLease(t, p)
			defer holder.Release()
			ch := leaseAsync(bg, p)
			waitQueued(t, p, 1)
			require.NoError(t, p.Close())
			return awaitLease(t, ch).err
		}, wantErr: ErrClosed, queued: true},
		{name: "a closed pool", fail: func(t *testing.T, p *Pool[*conn], _ *tracker, _ *trChecker) error {
			require.NoError(t, p.Close())
			_, err := p.Lease(bg)
			return err
		}, wantErr: ErrClosed},
		{name: "TryLease, every item in use", fail: func(t *testing.T, p *Pool[*conn], _ *tracker, _ *trChecker) error {
			holder := mustLease(t, p)
			defer holder.Release()
			_, err := p.TryLease(bg)
			return err
		}, wantErr: ErrExhausted},
		{name: "the factory fails", fail: func(t *testing.T, p *Pool[*conn], tr *tracker, _ *trChecker) error {
			tr.setFail(errBoom)
			_, err := p.Lease(bg)
			return err
		}, wantErr: errBoom, want: LeaseTrace{Create: trCreate}},
		{name: "Do, the factory fails", fail: func(t *testing.T, p *Pool[*conn], tr *tracker, _ *trChecker) error {
			tr.setFail(errBoom)
			return p.Do(bg, fn)
		}, wantErr: errBoom, want: LeaseTrace{Create: trCreate}},
		{name: "the check of a fresh item fails", checked: true, fail: func(t *testing.T, p *Pool[*conn], _ *tracker, ch *trChecker) error {
			ch.failNext(1)
			_, err := p.Lease(bg)
			return err
		}, wantErr: errBoom, want: LeaseTrace{Create: trCreate, Prepare: trFail}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := trClock(t)
			ch := &trChecker{clk: clk}
			opts := tt.opts
			opts.Name, opts.MaxSize = "db", 1
			if tt.checked {
				opts.Preparer = ch
			}
			p, tr, rec := trPool(t, clk, opts, trCreate)
			err := tt.fail(t, p, tr, ch)
			require.ErrorIs(t, err, tt.wantErr)

			var failed []trCall
			for _, c := range rec.seen() {
				if c.method == "LeaseEnd" && c.lease.Err != nil {
					failed = append(failed, c)
				} else if c.method == "LeaseEnd" {
					assert.Len(t, rec.of("Released", c.id), 1, "the granted lease %d ended once", c.id)
				}
			}
			require.Len(t, failed, 1, "one lease failed: %v", rec.order(1))
			got := failed[0]
			assert.Equal(t, err, got.lease.Err, "LeaseEnd gets the error the call returned")
			want := tt.want
			want.Pool, want.Err = "db", err
			if s := p.Stats(); tt.queued {
				require.Equal(t, uint64(1), s.Waits)
				want.Wait = s.WaitTime
				assert.Positive(t, got.lease.Wait)
			}
			assert.Equal(t, want, got.lease)
			assert.Empty(t, rec.of("Released", got.id), "a failed lease gets no Released")
			assertAtRest(t, p)
			checkInvariants(t, p, tr.live.Load)
		})
	}
}

// "Tracing": a creation that finishes after its caller gave up is not
// traced: the caller's lease gets its LeaseStart and LeaseEnd, and the
// item, which goes idle, no Released, since nobody leased it.
func TestTracerAbandonedCreationIsNotTraced(t *testing.T) {
	p, tr, rec := trPool(t, trClock(t), Options[*conn]{Name: "db", MaxSize: 1}, trCreate)
	block := make(chan struct{})
	setBlock(tr, block)
	tr.ctxs = make(chan context.Context, 1)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	ch := leaseAsync(ctx, p) // a ctx that can end: the factory runs on a goroutine of its own
	recvOrFail(t, tr.ctxs, "the creation to start")
	cancel()
	require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
	setBlock(tr, nil)
	close(block)
	hdEventually(t, func() bool { return p.Stats().ItemsAvailable == 1 }, "the abandoned creation's item to go idle")

	assert.Equal(t, []string{"LeaseStart 1", "LeaseEnd 1"}, rec.order(1))
	end := rec.of("LeaseEnd", 1)[0].lease
	assert.ErrorIs(t, end.Err, context.Canceled)
	assert.Zero(t, end.Uses)

	// The item is idle, created for nobody: the next lease takes it as any
	// idle item, and is traced as any.
	l := mustLease(t, p)
	l.Release()
	assert.Equal(t, []string{"LeaseStart 2", "LeaseEnd 2", "Released 2"}, rec.order(2))
	assert.Equal(t, LeaseTrace{Pool: "db", Uses: 1}, rec.of("LeaseEnd", 2)[0].lease)
	assertAtRest(t, p)
}

// trPanic is what a Tracer method panics with.
const trPanic = "the tracer panicked"

// "Tracing" and Tracer: a panic in a Tracer method, or a runtime.Goexit,
// goes on to the caller as a panic of its own code would, once the pool
// has accounted for the lease: no item and no room is lost, and a lease
// whose LeaseEnd panicked is given back and sees no Released.
func TestTracerPanicReachesTheCallerAndLosesNothing(t *testing.T) {
	escapes := []struct {
		name   string
		escape func()
	}{
		{"panic", func() { panic(trPanic) }},
		{"Goexit", runtime.Goexit},
	}
	methods := []struct {
		method string
		want   []string // the calls the Tracer sees
		idle   int      // items idle after the call
	}{
		{"LeaseStart", []string{"LeaseStart 1"}, 0},
		{"LeaseEnd", []string{"LeaseStart 1", "LeaseEnd 1"}, 1},
		{"Released", []string{"LeaseStart 1", "LeaseEnd 1", "Released 1"}, 1},
	}
	for _, m := range methods {
		for _, e := range escapes {
			for _, call := range trCalls {
				t.Run(m.method+"/"+e.name+"/"+call.name, func(t *testing.T) {
					p, tr, rec := trPool(t, trClock(t), Options[*conn]{MaxSize: 1}, 0)
					var once atomic.Bool
					escape := func() {
						if once.CompareAndSwap(false, true) {
							e.escape()
						}
					}
					switch m.method {
					case "LeaseStart":
						rec.setHooks(func(ctx context.Context) context.Context { escape(); return ctx }, nil, nil)
					case "LeaseEnd":
						rec.setHooks(nil, func(context.Context, LeaseTrace) { escape() }, nil)
					default:
						rec.setHooks(nil, nil, func(context.Context, ReleaseTrace) { escape() })
					}
					run := func() { _ = call.lease(bg, p) }
					if e.name == "panic" {
						v, panicked := catchPanic(run)
						require.True(t, panicked, "the Tracer's panic reaches the caller")
						assert.Equal(t, trPanic, panicValue(v))
					} else {
						require.True(t, catchGoexit(run), "the Tracer's Goexit ends the caller's goroutine")
					}

					assert.Equal(t, m.want, rec.order(1))
					s := p.Stats()
					assert.Zero(t, s.ActiveLeases, "no lease is out")
					assert.Equal(t, m.idle, s.ItemsAvailable, "the item is given back")
					checkInvariants(t, p, tr.live.Load)
					// No room is lost: the pool's one item, or the room to
					// create it, is there for the next lease, which is
					// traced as any.
					l, err := p.TryLease(bg)
					require.NoError(t, err)
					l.Release()
					assert.Equal(t, uint64(1), p.Stats().Created, "one item, reused")
					assert.Equal(t, []string{"LeaseStart 2", "LeaseEnd 2", "Released 2"}, rec.order(2))
					assertAtRest(t, p)
				})
			}
		}
	}
}

// Tracer.LeaseEnd runs once for every LeaseStart: also for a call that
// panics, or ends its goroutine, because the factory or the Preparer did;
// with an Err, and no Released to follow.
func TestTracerLeaseThatPanicsGetsLeaseEnd(t *testing.T) {
	cancelable, cancel := context.WithCancel(bg)
	defer cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		checked bool // the Preparer escapes, else the factory
		goexit  bool
	}{
		{"the factory panics, on the caller's goroutine", bg, false, false},
		{"the factory panics, on its own goroutine", cancelable, false, false},
		{"the factory calls runtime.Goexit", bg, false, true},
		{"IsReady panics", bg, true, false},
		{"IsReady calls runtime.Goexit", bg, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var armed atomic.Bool
			escape := func() {
				if armed.CompareAndSwap(true, false) {
					if tt.goexit {
						runtime.Goexit()
					}
					panic(trPanic)
				}
			}
			tr := &tracker{}
			rec := &trRecorder{}
			opts := Options[*conn]{MaxSize: 1, Tracer: rec, Destroy: tr.destroy}
			f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
				if !tt.checked {
					escape()
				}
				return tr.Create(ctx)
			})
			if tt.checked {
				opts.Preparer = &testPreparer{isReady: func(context.Context, *conn) (bool, error) { escape(); return true, nil }}
			}
			p, err := New[*conn](bg, f, opts)
			require.NoError(t, err)
			defer p.Close()

			armed.Store(true)
			run := func() { _, _ = p.Lease(tt.ctx) }
			if tt.goexit {
				require.True(t, catchGoexit(run), "the Goexit ends the caller's goroutine")
			} else {
				_, panicked := catchPanic(run)
				require.True(t, panicked, "the panic reaches the caller")
			}
			assert.Equal(t, []string{"LeaseStart 1", "LeaseEnd 1"}, rec.order(1))
			if ended := rec.of("LeaseEnd", 1); len(ended) == 1 {
				assert.Error(t, ended[0].lease.Err)
				assert.Zero(t, ended[0].lease.Uses)
			}
			awaitDestroys(t, p) // of a checked item the Preparer's panic left
			l, err := p.TryLease(bg)
			require.NoError(t, err, "no room is lost")
			l.Release()
			assert.Equal(t, []string{"LeaseStart 2", "LeaseEnd 2", "Released 2"}, rec.order(2))
		})
	}
}

// Options.Tracer: a typed nil Tracer is no Tracer, as nil is: nothing
// calls it, and the pool keeps no trace with its items.
func TestTracerTypedNilIsNil(t *testing.T) {
	var rec *trRecorder // a call of one of its methods would panic
	p, _ := newTracked(t, Options[*conn]{Tracer: rec})
	assert.Nil(t, p.opts.Tracer)
	assert.False(t, p.ob.tracer != nil)
	l := mustLease(t, p)
	assert.Nil(t, l.e.trace)
	l.Release()
	require.NoError(t, p.Do(bg, func(*conn) error { return nil }))
}

// Pool.Lease panics when ctx is nil, as it does untraced: before
// LeaseStart, which never sees a nil ctx.
func TestTracerNilCtxPanicsBeforeLeaseStart(t *testing.T) {
	p, _, rec := trPool(t, trClock(t), Options[*conn]{}, 0)
	for _, call := range trCalls {
		var ctx context.Context
		v, panicked := catchPanic(func() { _ = call.lease(ctx, p) })
		require.True(t, panicked, call.name)
		assert.Equal(t, errNilContext, v, call.name)
	}
	assert.Empty(t, rec.seen())
}

// Options.Tracer ("nil: no tracing, no cost") and "Tracing", Cost: with
// Tracer nil the pool makes no trace state with its items; with one, it
// makes it with each item, seeded or created for a lease, so that a lease
// has it without allocating.
func TestTracerStateIsMadeOnlyWithATracer(t *testing.T) {
	for _, tt := range []struct {
		name   string
		tracer Tracer
	}{{"nil", nil}, {"no-op", bnNoopTracer{}}} {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newTracked(t, Options[*conn]{MinSize: 1, MaxSize: 2, Tracer: tt.tracer})
			seeded := mustLease(t, p)
			created := mustLease(t, p)
			defer seeded.Release()
			defer created.Release()
			for _, l := range []Lease[*conn]{seeded, created} {
				if tt.tracer == nil {
					assert.Nil(t, l.e.trace, "item %d", l.Value().id)
				} else {
					assert.NotNil(t, l.e.trace, "item %d", l.Value().id)
				}
			}
		})
	}
}

// "Tracing", Cost: with a Tracer that does nothing, a lease and its end
// allocate nothing, by Lease, TryLease or Do.
func TestTracerNoopAllocatesNothing(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MinSize: 4, MaxSize: 4, Tracer: bnNoopTracer{}})
	for _, call := range trCalls {
		allocs := testing.AllocsPerRun(1000, func() {
			if err := call.lease(bg, p); err != nil {
				panic(err)
			}
		})
		assert.Zero(t, allocs, call.name)
	}
}

// trLedger is a Tracer that checks, as each call comes, what "Tracing"
// promises of the calls for one lease: one LeaseEnd for each LeaseStart,
// with the ctx that LeaseStart returned; for a lease LeaseEnd reported as
// granted one Released after it, with that ctx; for a failed one none.
type trLedger struct {
	t        testing.TB
	mu       sync.Mutex
	leases   []*trEntry // by lease number - 1
	ended    int
	granted  int
	released int
	hows     map[string]int
}

// trEntry is what a trLedger knows of one lease.
type trEntry struct {
	ctx            context.Context // the one LeaseStart returned
	ended, granted bool
	released       bool
}

func (g *trLedger) LeaseStart(ctx context.Context, pool string) context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx = context.WithValue(ctx, trIDKey{}, len(g.leases)+1)
	g.leases = append(g.leases, &trEntry{ctx: ctx})
	return ctx
}

// entry returns the lease whose ctx method got. Caller holds g.mu.
func (g *trLedger) entry(ctx context.Context, method string) *trEntry {
	id := trID(ctx)
	if id < 1 || id > len(g.leases) {
		g.t.Errorf("%s with a ctx no LeaseStart returned", method)
		return nil
	}
	e := g.leases[id-1]
	if e.ctx != ctx {
		g.t.Errorf("%s of lease %d: not the ctx its LeaseStart returned", method, id)
	}
	return e
}

func (g *trLedger) LeaseEnd(ctx context.Context, t LeaseTrace) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entry(ctx, "LeaseEnd")
	if e == nil {
		return
	}
	if e.ended {
		g.t.Errorf("a second LeaseEnd for lease %d", trID(ctx))
	}
	e.ended, e.granted = true, t.Err == nil
	g.ended++
	if e.granted {
		g.granted++
	}
	if e.granted != (t.Uses > 0) {
		g.t.Errorf("lease %d: Uses %d with Err %v", trID(ctx), t.Uses, t.Err)
	}
}

func (g *trLedger) Released(ctx context.Context, t ReleaseTrace) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entry(ctx, "Released")
	if e == nil {
		return
	}
	switch {
	case !e.ended:
		g.t.Errorf("Released before LeaseEnd for lease %d", trID(ctx))
	case !e.granted:
		g.t.Errorf("Released for lease %d, which failed", trID(ctx))
	case e.released:
		g.t.Errorf("a second Released for lease %d", trID(ctx))
	}
	e.released = true
	g.released++
	g.hows[t.How]++
}

// check reports, with t.Errorf, more than inFlight leases between their
// LeaseStart and LeaseEnd, or granted and not yet released: each goroutine
// of the load has one lease at a time. At the end (inFlight 0), every
// lease has had its LeaseEnd, and every granted one its Released.
func (g *trLedger) check(inFlight int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := len(g.leases) - g.ended; n > inFlight {
		g.t.Errorf("%d leases started and not ended, more than the %d that may be", n, inFlight)
	}
	if n := g.granted - g.released; n > inFlight {
		g.t.Errorf("%d leases granted and not released, more than the %d that may be", n, inFlight)
	}
	if inFlight > 0 {
		return
	}
	for i, e := range g.leases {
		if !e.ended || e.granted != e.released {
			g.t.Errorf("lease %d: ended %v, granted %v, released %v", i+1, e.ended, e.granted, e.released)
		}
	}
}

// "Tracing" under load: many goroutines over a few items, their leases
// granted, timed out, refused, discarded or ended by their ctx, against
// a Tracer that checks every call as it comes and the counts while the
// load runs; at the end every LeaseStart has had one LeaseEnd and every
// granted lease one Released.
func TestTracerUnderLoadPairsEveryCall(t *testing.T) {
	const goroutines, maxSize, rounds = 32, 4, 60
	led := &trLedger{t: t, hows: map[string]int{}}
	p, tr := newTracked(t, Options[*conn]{MaxSize: maxSize, LeaseTimeout: time.Millisecond, Tracer: led})
	var timeouts, exhausted, ctxEnded atomic.Int64
	count := func(err error) {
		switch {
		case errors.Is(err, ErrLeaseTimeout):
			timeouts.Add(1)
		case errors.Is(err, ErrExhausted):
			exhausted.Add(1)
		case errors.Is(err, context.DeadlineExceeded):
			ctxEnded.Add(1)
		case err != nil && !errors.Is(err, ErrBroken):
			t.Errorf("unexpected error: %v", err)
		}
	}
	hold := func(i int) {
		if i%8 == 0 {
			time.Sleep(2 * time.Millisecond) // long enough for waiters to time out
			return
		}
		runtime.Gosched()
	}

	stop, checks := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				checks <- n
				return
			case <-time.After(200 * time.Microsecond):
			}
			led.check(goroutines)
			checkInvariants(t, p, tr.live.Load)
			n++
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				switch (g + i) % 5 {
				case 0, 1:
					l, err := p.Lease(bg)
					count(err)
					if err == nil {
						hold(i)
						if (g+i)%5 == 0 {
							l.Release()
						} else {
							l.Discard()
						}
					}
				case 2:
					l, err := p.TryLease(bg)
					count(err)
					if err == nil {
						hold(i)
						l.Release()
					}
				case 3:
					count(p.Do(bg, func(*conn) error {
						hold(i)
						if i%2 == 0 {
							return fmt.Errorf("%w: reset by peer", ErrBroken)
						}
						return nil
					}))
				default:
					ctx, cancel := context.WithTimeout(bg, 500*time.Microsecond)
					l, err := p.Lease(ctx)
					cancel()
					count(err)
					l.Release()
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	n := <-checks

	led.check(0)
	assert.Positive(t, n, "checks while the load ran")
	assert.Equal(t, goroutines*rounds, len(led.leases), "one LeaseStart per call")
	assert.Positive(t, timeouts.Load(), "leases timed out")
	assert.Positive(t, exhausted.Load(), "TryLeases were refused")
	assert.Positive(t, led.hows["discard"], "leases were discarded")
	assert.Positive(t, led.hows["release"], "leases were released")
	t.Logf("%d leases: %d granted, %d timed out, %d refused, %d ended by their ctx; %d checks meanwhile",
		len(led.leases), led.granted, timeouts.Load(), exhausted.Load(), ctxEnded.Load(), n)
	assertAtRest(t, p)
	checkInvariants(t, p, tr.live.Load)
}

// "Tracing" and Tracer: a Released that panics, or calls runtime.Goexit,
// loses no item, however the lease ended: Release has given the item back,
// Discard has handed it to its Destroy, and the item of a Detach, which its
// caller never receives, is destroyed (reason discard) rather than
// detached.
func TestTracerReleasedThatEscapesLosesNoItem(t *testing.T) {
	escapes := []struct {
		name   string
		escape func()
	}{
		{"panic", func() { panic(trPanic) }},
		{"Goexit", runtime.Goexit},
	}
	ends := []struct {
		how       string
		end       func(l Lease[*conn])
		idle      int    // items idle afterwards
		destroyed uint64 // Stats.Destroyed afterwards
	}{
		{"release", func(l Lease[*conn]) { l.Release() }, 1, 0},
		{"discard", func(l Lease[*conn]) { l.Discard() }, 0, 1},
		{"detach", func(l Lease[*conn]) { _ = l.Detach() }, 0, 1},
	}
	for _, end := range ends {
		for _, e := range escapes {
			t.Run(end.how+"/"+e.name, func(t *testing.T) {
				p, tr, rec := trPool(t, trClock(t), Options[*conn]{MaxSize: 1}, 0)
				var once atomic.Bool
				rec.setHooks(nil, nil, func(context.Context, ReleaseTrace) {
					if once.CompareAndSwap(false, true) {
						e.escape()
					}
				})
				l := mustLease(t, p)
				run := func() { end.end(l) }
				if e.name == "panic" {
					v, panicked := catchPanic(run)
					require.True(t, panicked, "the Tracer's panic reaches the caller")
					assert.Equal(t, trPanic, panicValue(v))
				} else {
					require.True(t, catchGoexit(run), "the Tracer's Goexit ends the caller's goroutine")
				}
				require.Len(t, rec.of("Released", 1), 1)
				assert.Equal(t, end.how, rec.of("Released", 1)[0].rel.How)

				awaitDestroys(t, p)
				s := p.Stats()
				assert.Zero(t, s.ActiveLeases, "no lease is out")
				assert.Equal(t, end.idle, s.ItemsAvailable)
				assert.Equal(t, end.destroyed, s.Destroyed)
				assert.Zero(t, s.Detached, "no caller received the item")
				assert.Equal(t, int64(end.idle), tr.live.Load(), "every item is idle or destroyed: none is lost")
				checkInvariants(t, p, tr.live.Load)
				l, err := p.TryLease(bg)
				require.NoError(t, err, "no room is lost")
				l.Release()
				assertAtRest(t, p)
			})
		}
	}
}

// "Tracing" under load: goroutines lease and Detach while Released panics
// on every other Detach. Each item ends with the caller that received it,
// or destroyed by the pool; Stats counts the first as Detached and the
// second as Destroyed, and keeps its relations while the load runs.
func TestTracerReleasedPanicsOnDetachUnderLoad(t *testing.T) {
	const goroutines, maxSize, rounds = 16, 4, 50
	rec := &trRecorder{}
	rec.setHooks(nil, nil, func(ctx context.Context, _ ReleaseTrace) {
		if trID(ctx)%2 == 0 {
			panic(trPanic)
		}
	})
	p, tr := newTracked(t, Options[*conn]{MaxSize: maxSize, Tracer: rec})

	stop, checks := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				checks <- n
				return
			case <-time.After(200 * time.Microsecond):
			}
			// Detached items exist outside the pool until their callers
			// dispose of them: the pool's own figures are what is checked.
			checkInvariants(t, p, nil)
			n++
		}
	}()
	var received, lost atomic.Uint64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				l, err := p.Lease(bg)
				if !assert.NoError(t, err) {
					return
				}
				var c *conn
				v, panicked := catchPanic(func() { c = l.Detach() })
				if panicked {
					assert.Equal(t, trPanic, panicValue(v))
					lost.Add(1)
					continue
				}
				received.Add(1)
				assert.NoError(t, tr.destroy(c), "the caller disposes of the item it detached")
			}
		})
	}
	wg.Wait()
	close(stop)
	n := <-checks

	assert.Positive(t, n, "checks while the load ran")
	awaitDestroys(t, p)
	s := p.Stats()
	assert.Equal(t, uint64(goroutines*rounds), received.Load()+lost.Load())
	assert.Positive(t, lost.Load(), "Released panicked on Detaches")
	assert.Equal(t, received.Load(), s.Detached, "Detached counts the items callers received")
	assert.Equal(t, lost.Load(), s.Destroyed, "the pool destroyed the items no caller received")
	assert.Zero(t, tr.live.Load(), "every item was disposed of: none is lost")
	assertAtRest(t, p)
}
