package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of the backend options: MaxConcurrentCreates, FailFastAfter (and
// the last creation error that ErrLeaseTimeout carries) and MaxUses.

// beBackend is a Factory standing for a server: each call takes delay to
// answer (or until its ctx ends) and fails with fail when set, else gets its
// item from tr. It gauges the calls in flight, with a peak, and logs each
// call's start and outcome. The gauge counts a call from after the pool
// called Create to before Create returns, within what the pool counts as in
// flight, so a peak above a cap is the pool's doing, never the gauge's.
type beBackend struct {
	t     testing.TB
	tr    *tracker
	limit int64 // > 0: a call starting with more than limit in flight is reported at once

	mu    sync.Mutex
	delay time.Duration
	fail  error
	calls []beCall

	inflight, peak atomic.Int64
}

// beCall is one factory call: when it started, and what it returned.
type beCall struct {
	start time.Time
	done  bool
	err   error
	id    int // the item's, on success
}

func (b *beBackend) Create(ctx context.Context) (*conn, error) {
	n := b.inflight.Add(1)
	defer b.inflight.Add(-1)
	skMax(&b.peak, n)
	if b.limit > 0 && n > b.limit {
		b.t.Errorf("%d factory calls in flight, more than MaxConcurrentCreates %d", n, b.limit)
	}
	b.mu.Lock()
	delay, fail := b.delay, b.fail
	i := len(b.calls)
	b.calls = append(b.calls, beCall{start: time.Now()})
	b.mu.Unlock()
	var c *conn
	var err error
	if delay > 0 {
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			err = ctx.Err()
		}
		timer.Stop()
	}
	if err == nil {
		if fail != nil {
			err = fail
		} else {
			c, err = b.tr.Create(ctx)
		}
	}
	b.mu.Lock()
	b.calls[i].done, b.calls[i].err = true, err
	if c != nil {
		b.calls[i].id = c.id
	}
	b.mu.Unlock()
	return c, err
}

// set makes the calls that start from now take delay and fail with fail
// (nil: succeed), and returns the instant of the change: every call logged
// with a later start behaves so.
func (b *beBackend) set(delay time.Duration, fail error) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.delay, b.fail = delay, fail
	return time.Now()
}

// log returns a copy of the calls so far.
func (b *beBackend) log() []beCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]beCall(nil), b.calls...)
}

func (b *beBackend) numCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.calls)
}

// resetPeak starts a new peak from the calls in flight now.
func (b *beBackend) resetPeak() { b.peak.Store(b.inflight.Load()) }

// newBackend returns a pool over a fresh beBackend (whose tracker counts
// the items destroyed), answering at once and succeeding until set says
// otherwise.
func newBackend(t *testing.T, opts Options[*conn]) (*Pool[*conn], *beBackend) {
	t.Helper()
	b := &beBackend{t: t, tr: &tracker{}, limit: int64(opts.MaxConcurrentCreates)}
	if opts.Destroy == nil {
		opts.Destroy = b.tr.destroy
	}
	p, err := New[*conn](context.Background(), b, opts)
	require.NoError(t, err, "New")
	t.Cleanup(func() { _ = p.Close() })
	return p, b
}

// beScript is a Factory whose every call announces itself on started and
// then waits for the test's answer on answers (nil: succeed, with an item
// from tr), or for its ctx to end: the test decides, call by call, when and
// how each creation ends.
type beScript struct {
	tr      *tracker
	started chan struct{}
	answers chan error
}

func (s *beScript) Create(ctx context.Context) (*conn, error) {
	s.started <- struct{}{}
	select {
	case err := <-s.answers:
		if err != nil {
			return nil, err
		}
		return s.tr.Create(ctx)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func newScripted(t *testing.T, opts Options[*conn]) (*Pool[*conn], *beScript) {
	t.Helper()
	s := &beScript{tr: &tracker{}, started: make(chan struct{}, 16), answers: make(chan error, 16)}
	if opts.Destroy == nil {
		opts.Destroy = s.tr.destroy
	}
	p, err := New[*conn](context.Background(), s, opts)
	require.NoError(t, err, "New")
	t.Cleanup(func() { _ = p.Close() })
	return p, s
}

// noCallStarted fails the test if a factory call of s starts within d.
func (s *beScript) noCallStarted(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case <-s.started:
		t.Fatalf("a factory call started: %s", why)
	case <-time.After(d):
	}
}

// beErr is a creation error of a type of its own, for errors.As.
type beErr struct{ code int }

func (e *beErr) Error() string {
	return fmt.Sprintf("backend refused the connection (code %d)", e.code)
}

// beLog is a slog.Handler that keeps every record's level, message and
// attributes.
type beLog struct {
	mu   sync.Mutex
	recs []beRecord
}

type beRecord struct {
	level slog.Level
	msg   string
	attrs string
}

func (h *beLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *beLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, "%s=%v ", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, beRecord{r.Level, r.Message, b.String()})
	h.mu.Unlock()
	return nil
}

func (h *beLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *beLog) WithGroup(string) slog.Handler      { return h }

func (h *beLog) logger() *slog.Logger { return slog.New(h) }

// count returns how many records at level have a message containing one of
// words (case-insensitively).
func (h *beLog) count(level slog.Level, words ...string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.level != level {
			continue
		}
		for _, w := range words {
			if strings.Contains(strings.ToLower(r.msg), w) {
				n++
				break
			}
		}
	}
	return n
}

func (h *beLog) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.recs {
		fmt.Fprintf(&b, "%v %q %s\n", r.level, r.msg, r.attrs)
	}
	return b.String()
}

// checkCapped is checkInvariants for a pool with MaxConcurrentCreates capN,
// with the cap's clauses on the same snapshot: Creating never exceeds the
// cap, and leases queue below MaxSize only while the cap is reached (Stats:
// QueuedLeases is above 0 only when ItemsAllocated has reached MaxSize or
// Creating MaxConcurrentCreates).
func checkCapped(t testing.TB, p *Pool[*conn], capN int, live func() int64) bool {
	s := p.Stats()
	ok := checkStats(t, s, live, 0)
	if s.Creating < 0 || s.Creating > capN {
		t.Errorf("Creating %d, outside [0, MaxConcurrentCreates %d]: %+v", s.Creating, capN, s)
		ok = false
	}
	if s.QueuedLeases > 0 && s.ItemsAllocated < s.MaxSize && s.Creating < capN {
		t.Errorf("%d leases queue while a permit and a turn to create are free: %+v", s.QueuedLeases, s)
		ok = false
	}
	return ok
}

// beWatch runs check every 200 µs on a goroutine of its own until the
// returned stop is called, which waits for it to end and returns how many
// checks ran.
func beWatch(check func()) (stop func() int) {
	quit := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-quit:
				return
			default:
			}
			check()
			n++
			time.Sleep(200 * time.Microsecond)
		}
	}()
	return func() int {
		close(quit)
		return <-done
	}
}

// TestBackendCreatesCapHeldUnderLoad: 64 goroutines lease, release and
// discard (so creations keep happening) while Clear's refill, MinIdle's
// spares and the upkeep's MinSize fill create in the background; at no
// instant do more than MaxConcurrentCreates factory calls run, and every
// lease succeeds.
func TestBackendCreatesCapHeldUnderLoad(t *testing.T) {
	const capN = 3
	p, b := newBackend(t, Options[*conn]{
		MaxSize: 32, MinSize: 4, MinIdle: 4, MaxConcurrentCreates: capN, CreateTimeout: 10 * time.Second,
		UpkeepInterval: 5 * time.Millisecond,
	})
	b.set(time.Millisecond, nil)

	stopWatch := beWatch(func() {
		checkCapped(t, p, capN, b.tr.live.Load)
		if n := b.inflight.Load(); n > capN {
			t.Errorf("%d factory calls in flight, more than MaxConcurrentCreates %d", n, capN)
		}
	})
	clearQuit := make(chan struct{})
	clearDone := make(chan int)
	go func() {
		n := 0
		defer func() { clearDone <- n }()
		for {
			select {
			case <-clearQuit:
				return
			case <-time.After(3 * time.Millisecond):
			}
			p.Clear()
			n++
		}
	}()

	const goroutines, rounds = 64, 40
	var wg sync.WaitGroup
	var leased, failed atomic.Int64
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), testWait)
				l, err := p.Lease(ctx)
				cancel()
				if err != nil {
					failed.Add(1)
					t.Errorf("goroutine %d, lease %d: %v", g, i, err)
					return
				}
				leased.Add(1)
				runtime.Gosched()
				if (g+i)%4 == 0 {
					l.Discard()
				} else {
					l.Release()
				}
			}
		}()
	}
	wg.Wait()
	close(clearQuit)
	clears := <-clearDone
	checks := stopWatch()

	awaitBackground(t, p)
	// The upkeep's creations are not those asked of the keeper: wait for one under way.
	hdEventually(t, func() bool { s := p.Stats(); return s.Creating == 0 && s.ActiveLeases == s.Destroying },
		"the upkeep's creations to end")
	assertAtRest(t, p)
	checkInvariants(t, p, b.tr.live.Load)
	s := p.Stats()
	t.Logf("%d leases, %d creations, %d Clear calls, %d checks; peak %d in flight; stats %+v",
		leased.Load(), b.numCalls(), clears, checks, b.peak.Load(), s)
	assert.Zero(t, failed.Load(), "every lease succeeds")
	assert.EqualValues(t, goroutines*rounds, leased.Load())
	assert.LessOrEqual(t, b.peak.Load(), int64(capN), "factory calls in flight at once")
	assert.Equal(t, int64(capN), b.peak.Load(), "the load reached the cap, or the test proved nothing")
	assert.Greater(t, b.numCalls(), goroutines*rounds/4, "discards and Clear kept creations coming")
	assert.Greater(t, checks, 0)
}

// TestBackendCreatesCapColdStart: a cold start seeding MinSize items in the
// background (32 at once without the cap), alone or while 16 goroutines
// lease, creates at most MaxConcurrentCreates items at once, and gets to
// MinSize: SeedInBackground creates them "until they exist or the pool
// closes".
func TestBackendCreatesCapColdStart(t *testing.T) {
	for _, leasers := range []int{0, 16} {
		t.Run(fmt.Sprintf("%d goroutines leasing", leasers), func(t *testing.T) {
			const capN = 3
			b := &beBackend{t: t, tr: &tracker{}, limit: capN, delay: 2 * time.Millisecond}
			p, err := New[*conn](context.Background(), b, Options[*conn]{
				MinSize: 32, MaxSize: 32, SeedInBackground: true, MaxConcurrentCreates: capN, CreateTimeout: 10 * time.Second,
				Destroy: b.tr.destroy,
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })

			stopWatch := beWatch(func() { checkCapped(t, p, capN, b.tr.live.Load) })
			var wg sync.WaitGroup
			for g := range leasers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 10 {
						ctx, cancel := context.WithTimeout(context.Background(), testWait)
						l, err := p.Lease(ctx)
						cancel()
						if err != nil {
							t.Errorf("goroutine %d, lease %d: %v", g, i, err)
							return
						}
						runtime.Gosched()
						l.Release()
					}
				}()
			}
			wg.Wait()
			// 32 creations of 2 ms, 3 at a time: about 25 ms; 3 s is plenty.
			for deadline := time.Now().Add(3 * time.Second); p.Stats().ItemsAvailable < 32 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			stopWatch()
			assert.LessOrEqual(t, b.peak.Load(), int64(capN), "factory calls in flight at once")
			assert.Equal(t, int64(capN), b.peak.Load(), "the cold start reached the cap")
			require.Equal(t, 32, p.Stats().ItemsAvailable, "MinSize items seeded and idle; %d factory calls; stats %+v", b.numCalls(), p.Stats())
			awaitBackground(t, p)
			assertAtRest(t, p)
			assert.EqualValues(t, 32, p.Stats().Created, "MinSize items, no more: MaxSize is 32")
		})
	}
}

// TestBackendCapWaiterTakesReleasedItem: with the one creation the cap
// allows under way, TryLease fails with ErrExhausted without calling the
// factory, and Leases wait in FIFO order; an item released meanwhile goes to
// the oldest of them, without a factory call; when the running creation
// fails, the next waiting lease gets its turn to create.
func TestBackendCapWaiterTakesReleasedItem(t *testing.T) {
	p, s := newScripted(t, Options[*conn]{MaxSize: 4, MaxConcurrentCreates: 1, CreateTimeout: 10 * time.Second})
	s.answers <- nil
	l0 := mustLease(t, p)
	<-s.started
	c1 := l0.Value()

	a := leaseAsync(bg, p)
	recvOrFail(t, s.started, "A's creation to start")

	_, err := p.TryLease(bg)
	require.ErrorIs(t, err, ErrExhausted, "TryLease would have to wait for the cap")
	s.noCallStarted(t, 10*time.Millisecond, "TryLease created past the cap")

	b := leaseAsync(bg, p)
	waitQueued(t, p, 1)
	c := leaseAsync(bg, p)
	waitQueued(t, p, 2)

	l0.Release()
	ob := awaitLease(t, b)
	require.NoError(t, ob.err)
	assert.Same(t, c1, ob.l.Value(), "B, the oldest waiting lease, takes the released item")
	s.noCallStarted(t, 20*time.Millisecond, "B or C created while A's creation runs")
	select {
	case o := <-c:
		t.Fatalf("C, behind B, returned (%v) with nothing released for it", o.err)
	default:
	}
	assert.Equal(t, 1, p.Stats().QueuedLeases)

	ob.l.Release()
	oc := awaitLease(t, c)
	require.NoError(t, oc.err)
	assert.Same(t, c1, oc.l.Value(), "C takes the item B released")

	// A second wait, then the running creation fails: the waiter's turn.
	d := leaseAsync(bg, p)
	waitQueued(t, p, 1)
	s.answers <- &beErr{code: 1}
	oa := awaitLease(t, a)
	var be *beErr
	require.ErrorAs(t, oa.err, &be, "A gets its own creation's error")
	recvOrFail(t, s.started, "D's turn to create")
	s.answers <- nil
	od := awaitLease(t, d)
	require.NoError(t, od.err, "D created in its turn")
	assert.NotSame(t, c1, od.l.Value())

	oc.l.Release()
	od.l.Release()
	assert.EqualValues(t, 2, s.tr.created.Load(), "two items created: c1 and D's")
	assertAtRest(t, p)
	assert.Equal(t, 2, p.Stats().ItemsAvailable)
}

// beGoDown fails FailFastAfter leases in a row (b must be failing with
// sentinel and no item idle) and checks the pool is down after exactly
// that many.
func beGoDown(t *testing.T, p *Pool[*conn], b *beBackend, failFastAfter int, sentinel error) {
	t.Helper()
	for i := range failFastAfter {
		require.False(t, p.Stats().BackendDown, "down after %d failed creations of %d", i, failFastAfter)
		_, err := p.Lease(bg)
		require.ErrorIs(t, err, sentinel, "failed creation %d", i+1)
	}
	require.True(t, p.Stats().BackendDown, "down after %d failed creations in a row", failFastAfter)
}

// beAssertFailsFast leases from a down pool with no idle item: the lease
// fails within limit, with an error wrapping ErrBackendDown and sentinel.
func beAssertFailsFast(t testing.TB, p *Pool[*conn], sentinel error, limit time.Duration) {
	start := time.Now()
	l, err := p.Lease(bg)
	took := time.Since(start)
	if err == nil {
		l.Release()
		t.Errorf("a lease of a down pool with no idle item succeeded")
		return
	}
	if !errors.Is(err, ErrBackendDown) || !errors.Is(err, sentinel) {
		t.Errorf("a lease of a down pool failed with %v, which does not wrap both ErrBackendDown and %v", err, sentinel)
	}
	if took > limit {
		t.Errorf("a lease of a down pool took %v to fail, more than %v", took, limit)
	}
}

// TestBackendFailsFast: after FailFastAfter failed creations in a row the
// pool is down; leases that find no idle item fail at once, with the last
// creation's error and ErrBackendDown, without calling the factory (even
// one that now takes 2 s to answer), while leases that find an idle item
// still get it; under 32 goroutines the factory is called only by the
// probe, one call at a time; Logger gets one Warn.
func TestBackendFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration // of the factory once down
	}{
		{"failing at once", 0},
		{"blocking for 2s", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log beLog
			p, b := newBackend(t, Options[*conn]{MaxSize: 8, FailFastAfter: 3, CreateTimeout: 10 * time.Second, Logger: log.logger()})
			hold := mustLease(t, p)
			held := hold.Value()
			sentinel := &beErr{code: 3}
			b.set(0, sentinel)
			beGoDown(t, p, b, 3, sentinel)
			b.set(tc.delay, sentinel)
			callsDown := b.numCalls()
			b.resetPeak()

			for range 5 {
				beAssertFailsFast(t, p, sentinel, 100*time.Millisecond)
			}
			_, err := p.TryLease(bg)
			assert.ErrorIs(t, err, ErrBackendDown, "TryLease of a down pool")
			assert.ErrorIs(t, err, sentinel, "TryLease of a down pool")

			hold.Release()
			l, err := p.Lease(bg)
			require.NoError(t, err, "a lease that finds an idle item gets it while down")
			assert.Same(t, held, l.Value())
			l.Release()

			// 32 goroutines, the one idle item among them.
			var wg sync.WaitGroup
			var got, refused atomic.Int64
			var slowest atomic.Int64
			start := time.Now()
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 30 {
						t0 := time.Now()
						l, err := p.Lease(bg)
						skMax(&slowest, int64(time.Since(t0)))
						if err == nil {
							got.Add(1)
							if l.Value() != held {
								t.Errorf("a lease of a down pool got item %d, not the idle one (%d): something created it", l.Value().id, held.id)
							}
							time.Sleep(200 * time.Microsecond) // held a while: the others find nothing idle
							l.Release()
							continue
						}
						refused.Add(1)
						if !errors.Is(err, ErrBackendDown) || !errors.Is(err, sentinel) {
							t.Errorf("a lease of a down pool failed with %v, which does not wrap both ErrBackendDown and the sentinel", err)
						}
					}
				}()
			}
			wg.Wait()
			phase := time.Since(start)
			calls := b.numCalls() - callsDown
			s := p.Stats()
			t.Logf("while down: %d leases got the idle item, %d failed fast, slowest %v, in %v; %d factory calls (the probe's); stats %+v",
				got.Load(), refused.Load(), time.Duration(slowest.Load()), phase, calls, s)
			assert.True(t, s.BackendDown, "still down: every creation failed")
			assert.Less(t, time.Duration(slowest.Load()), 500*time.Millisecond, "no lease waited on the factory")
			assert.LessOrEqual(t, b.peak.Load(), int64(1), "factory calls in flight at once while down: the probe's only")
			// Without the upkeep the probe's backoff starts at 30s/16: in a
			// phase this short it calls at most twice, where a lease calling
			// the factory would have made hundreds of calls.
			assert.LessOrEqual(t, calls, 2, "factory calls while down")
			assert.Positive(t, refused.Load(), "leases that found no idle item")
			assert.LessOrEqual(t, s.CreateErrors, uint64(b.numCalls()-1), "CreateErrors counts failed factory calls, not refused leases")
			assert.Equal(t, 1, log.count(slog.LevelWarn, "down"), "one Warn when the pool went down, not one per lease; log:\n%s", log.String())
			assert.Zero(t, log.count(slog.LevelInfo, "up", "back", "recover"), "no Info: still down; log:\n%s", log.String())
		})
	}
}

// TestBackendRecovers: with UpkeepInterval 80 ms the probe backs off 5, 10,
// 20, 40 then 80 ms; once the backend answers again, the pool is up within
// one step (plus slack for a loaded host), the first call after the change
// succeeded, and its item is idle for the next lease. Each outage logs one
// Warn and one Info.
func TestBackendRecovers(t *testing.T) {
	const step = 80 * time.Millisecond
	var log beLog
	p, b := newBackend(t, Options[*conn]{MaxSize: 8, FailFastAfter: 3, CreateTimeout: 10 * time.Second, UpkeepInterval: step, Logger: log.logger()})
	for outage := 1; outage <= 2; outage++ {
		sentinel := &beErr{code: 100 + outage}
		b.set(0, sentinel)
		beGoDown(t, p, b, 3, sentinel)
		callsDown := b.numCalls()
		b.resetPeak()
		time.Sleep(4 * step) // the backoff reaches its ceiling: 5+10+20+40+80 ms
		beAssertFailsFast(t, p, sentinel, 100*time.Millisecond)
		probes := b.numCalls() - callsDown
		probeCalls := b.log()[callsDown:]
		// The probe's first call may have started before callsDown was read:
		// the gaps logged start at 5 or 10 ms. A timer never fires early, so
		// no gap is under the first step (no tight loop), and the backoff
		// doubled up to its ceiling.
		var gaps []time.Duration
		for i := 1; i < len(probeCalls); i++ {
			gaps = append(gaps, probeCalls[i].start.Sub(probeCalls[i-1].start))
		}
		t.Logf("outage %d: gaps between the probe's calls %v", outage, gaps)
		if assert.NotEmpty(t, gaps, "outage %d: the probe retried", outage) {
			assert.GreaterOrEqual(t, slices.Min(gaps), step/16*9/10, "outage %d: the probe backs off from UpkeepInterval/16", outage)
			assert.GreaterOrEqual(t, slices.Max(gaps), step*9/10, "outage %d: the backoff reached UpkeepInterval", outage)
			assert.Less(t, slices.Max(gaps), 2*step+500*time.Millisecond, "outage %d: the backoff stops at UpkeepInterval", outage)
		}
		assert.LessOrEqual(t, b.peak.Load(), int64(1), "outage %d: one probe at a time", outage)
		assert.Positive(t, probes, "outage %d: the probe called the factory", outage)
		assert.LessOrEqual(t, probes, 12, "outage %d: the probe backs off", outage)

		back := b.set(0, nil)
		hdEventually(t, func() bool { return !p.Stats().BackendDown }, "outage %d: the pool to come up", outage)
		upAfter := time.Since(back)
		t.Logf("outage %d: %d probes in %v down; up %v after the backend came back", outage, probes, 4*step, upAfter)
		assert.Less(t, upAfter, step+500*time.Millisecond, "outage %d: up within a backoff step (plus slack)", outage)

		var first *beCall
		calls := b.log()
		for i := range calls {
			if !calls[i].start.Before(back) {
				first = &calls[i]
				break
			}
		}
		require.NotNil(t, first, "outage %d: a factory call after the backend came back", outage)
		require.True(t, first.done, "outage %d: the pool came up before the probe's call returned", outage)
		require.NoError(t, first.err, "outage %d: the first call after the backend came back", outage)

		// The pool comes up in the probe's creation, an instant before its
		// item goes idle: wait for that, then the next lease takes it.
		hdEventually(t, func() bool { s := p.Stats(); return s.ItemsAvailable == 1 && s.Creating == 0 },
			"outage %d: the probe's item to go idle", outage)
		l, err := p.Lease(bg)
		require.NoError(t, err, "outage %d: a lease after the pool came up", outage)
		assert.Equal(t, first.id, l.Value().id, "outage %d: the probe's item went idle, to the next lease", outage)
		l.Discard() // nothing idle for the next outage
		assert.Equal(t, outage, log.count(slog.LevelWarn, "down"), "outage %d: one Warn per outage; log:\n%s", outage, log.String())
		assert.Equal(t, outage, log.count(slog.LevelInfo, "up", "back", "recover"), "outage %d: one Info per outage; log:\n%s", outage, log.String())
	}
	assertAtRest(t, p)
}

// TestBackendProbeItemGoesToOldestWaiter: while the pool is down and its
// probe's creation holds the last place under MaxSize, leases wait for an
// item (none is idle, but none could be created either); the probe's first
// success brings the pool up and hands its item to the oldest of them.
func TestBackendProbeItemGoesToOldestWaiter(t *testing.T) {
	var log beLog
	p, s := newScripted(t, Options[*conn]{MaxSize: 2, FailFastAfter: 1, CreateTimeout: 10 * time.Second, UpkeepInterval: 80 * time.Millisecond, Logger: log.logger()})
	s.answers <- nil
	l := mustLease(t, p)
	<-s.started

	sentinel := &beErr{code: 9}
	s.answers <- sentinel
	_, err := p.Lease(bg)
	require.ErrorIs(t, err, sentinel)
	<-s.started
	require.True(t, p.Stats().BackendDown)
	recvOrFail(t, s.started, "the probe's creation to start")

	w1 := leaseAsync(bg, p)
	waitQueued(t, p, 1)
	w2 := leaseAsync(bg, p)
	waitQueued(t, p, 2)
	assert.True(t, p.Stats().BackendDown)

	s.answers <- nil // the probe succeeds
	o1 := awaitLease(t, w1)
	require.NoError(t, o1.err, "the oldest waiting lease gets the probe's item")
	assert.False(t, p.Stats().BackendDown)
	assert.EqualValues(t, 2, s.tr.created.Load(), "the probe's item, no other")
	select {
	case o := <-w2:
		t.Fatalf("W2 returned (%v) with nothing released for it", o.err)
	default:
	}
	probed := o1.l.Value()
	o1.l.Release()
	o2 := awaitLease(t, w2)
	require.NoError(t, o2.err)
	assert.Same(t, probed, o2.l.Value(), "W2 takes the item W1 released")
	o2.l.Release()
	l.Release()
	assertAtRest(t, p)
	assert.Equal(t, 1, log.count(slog.LevelWarn, "down"), "log:\n%s", log.String())
	assert.Equal(t, 1, log.count(slog.LevelInfo, "up"), "log:\n%s", log.String())
}

// TestBackendLeaseTimeoutWrapsCreateError: a lease that times out after a
// creation failed during its wait returns ErrLeaseTimeout wrapping that
// error (errors.Is and errors.As reach it); one during whose wait no
// creation failed does not wrap the error of an earlier one.
func TestBackendLeaseTimeoutWrapsCreateError(t *testing.T) {
	t.Run("a creation failed during the wait", func(t *testing.T) {
		p, s := newScripted(t, Options[*conn]{MaxSize: 2, LeaseTimeout: 250 * time.Millisecond})
		s.answers <- nil
		l := mustLease(t, p)
		<-s.started

		x := leaseAsync(bg, p) // creates the second item: MaxSize reached
		recvOrFail(t, s.started, "X's creation to start")
		w1 := leaseAsync(bg, p)
		waitQueued(t, p, 1)
		w2 := leaseAsync(bg, p)
		waitQueued(t, p, 2)

		sentinel := &beErr{code: 5}
		s.answers <- sentinel // X's creation fails; its permit goes to W1, which creates
		ox := awaitLease(t, x)
		require.ErrorIs(t, ox.err, sentinel)
		recvOrFail(t, s.started, "W1's creation to start")

		ow2 := awaitLease(t, w2) // W1's creation holds the permit past W2's LeaseTimeout
		require.Error(t, ow2.err)
		assert.ErrorIs(t, ow2.err, ErrLeaseTimeout)
		assert.ErrorIs(t, ow2.err, sentinel, "the creation that failed during the wait")
		var be *beErr
		if assert.ErrorAs(t, ow2.err, &be) {
			assert.Equal(t, 5, be.code)
		}
		assert.NotErrorIs(t, ow2.err, ErrBackendDown)
		t.Logf("W2: %v", ow2.err)

		s.answers <- nil
		ow1 := awaitLease(t, w1)
		require.NoError(t, ow1.err, "W1 had its permit before its LeaseTimeout")
		ow1.l.Release()
		l.Release()
		assertAtRest(t, p)
	})
	t.Run("no creation failed during the wait", func(t *testing.T) {
		p, s := newScripted(t, Options[*conn]{MaxSize: 1, LeaseTimeout: 50 * time.Millisecond})
		sentinel := &beErr{code: 6}
		s.answers <- sentinel
		_, err := p.Lease(bg)
		require.ErrorIs(t, err, sentinel, "a creation failed before the lease began")
		<-s.started
		s.answers <- nil
		l := mustLease(t, p)
		<-s.started

		_, err = p.Lease(bg)
		require.ErrorIs(t, err, ErrLeaseTimeout)
		assert.NotErrorIs(t, err, sentinel, "the failure before the lease began is not this wait's")
		var be *beErr
		assert.False(t, errors.As(err, &be), "errors.As found a creation error in %v", err)
		l.Release()
		assertAtRest(t, p)
	})
}

// TestBackendMaxUsesExact: under 16 goroutines and 2000 leases, no item is
// leased more than MaxUses times, every item destroyed but not discarded
// was leased exactly MaxUses times and counts in UsesExpired, and the
// items left are those never destroyed.
func TestBackendMaxUsesExact(t *testing.T) {
	const maxUses, goroutines, total = 5, 16, 2000
	var (
		mu        sync.Mutex
		uses      = map[int]int{} // leases each item got, by id
		discarded = map[int]bool{}
		destroyed = map[int]int{} // uses at destruction
		tr        *tracker
	)
	opts := Options[*conn]{MaxSize: 8, MaxUses: maxUses}
	opts.Destroy = func(c *conn) error {
		mu.Lock()
		if _, twice := destroyed[c.id]; twice {
			t.Errorf("item %d destroyed twice", c.id)
		}
		destroyed[c.id] = uses[c.id]
		mu.Unlock()
		return tr.destroy(c)
	}
	var p *Pool[*conn]
	p, tr = newTracked(t, opts)

	stopWatch := beWatch(func() { checkInvariants(t, p, tr.live.Load) })
	var wg sync.WaitGroup
	var next atomic.Int64
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := next.Add(1)
				if k > total {
					return
				}
				l, err := p.Lease(bg)
				if err != nil {
					t.Errorf("lease %d: %v", k, err)
					return
				}
				c := l.Value()
				mu.Lock()
				uses[c.id]++
				n := uses[c.id]
				mu.Unlock()
				if n > maxUses {
					t.Errorf("item %d leased %d times, more than MaxUses %d", c.id, n, maxUses)
				}
				if u := l.Uses(); u != n {
					t.Errorf("item %d: Lease.Uses says %d, the test counted %d", c.id, u, n)
				}
				runtime.Gosched()
				if k%97 == 0 && n < maxUses {
					mu.Lock()
					discarded[c.id] = true
					mu.Unlock()
					l.Discard()
				} else {
					l.Release()
				}
			}
		}()
	}
	wg.Wait()
	stopWatch()
	assertAtRest(t, p)

	s := p.Stats()
	mu.Lock()
	defer mu.Unlock()
	expired := 0
	for id, n := range uses {
		u, gone := destroyed[id]
		switch {
		case gone && discarded[id]:
			assert.Less(t, u, maxUses, "item %d discarded before its last use", id)
		case gone:
			assert.Equal(t, maxUses, u, "item %d destroyed after %d leases, not MaxUses", id, u)
			expired++
		default:
			assert.Less(t, n, maxUses, "item %d still alive after %d leases", id, n)
		}
	}
	alive := len(uses) - len(destroyed)
	t.Logf("%d items, %d destroyed for MaxUses, %d discarded, %d alive; stats %+v", len(uses), expired, len(discarded), alive, s)
	assert.EqualValues(t, expired, s.UsesExpired, "UsesExpired counts the items destroyed for MaxUses")
	assert.EqualValues(t, len(destroyed), s.Destroyed)
	assert.EqualValues(t, alive, int64(s.Created)-int64(s.Destroyed), "Created - Destroyed is the items alive at rest")
	assert.EqualValues(t, alive, tr.live.Load())
	assert.Equal(t, alive, s.ItemsAllocated)
	assert.Greater(t, expired, total/maxUses/2, "most items reached MaxUses")
}

// TestBackendMaxUsesDestroysOffTheReleasingGoroutine: Release of an item's
// last use returns while its Destroy blocks: Destroy runs on the pool's own
// goroutine. A fresh item replaces it.
func TestBackendMaxUsesDestroysOffTheReleasingGoroutine(t *testing.T) {
	entered := make(chan int, 1)
	unblock := make(chan struct{})
	var tr *tracker
	opts := Options[*conn]{MaxSize: 2, MaxUses: 2}
	opts.Destroy = func(c *conn) error {
		entered <- c.id
		<-unblock
		return tr.destroy(c)
	}
	var p *Pool[*conn]
	p, tr = newTracked(t, opts)
	t.Cleanup(func() {
		select {
		case <-unblock:
		default:
			close(unblock)
		}
	})

	l := mustLease(t, p)
	c := l.Value()
	l.Release()
	l = mustLease(t, p)
	require.Same(t, c, l.Value(), "the item's second use")
	assert.Equal(t, 2, l.Uses())
	released := make(chan struct{})
	go func() {
		l.Release()
		close(released)
	}()
	recvOrFail(t, released, "Release to return while Destroy blocks")
	assert.Equal(t, c.id, recvOrFail(t, entered, "Destroy of the item past MaxUses"))

	l = mustLease(t, p)
	assert.NotSame(t, c, l.Value(), "a fresh item")
	assert.Equal(t, 1, l.Uses())
	l.Release()
	close(unblock)
	assertAtRest(t, p)
	s := p.Stats()
	assert.EqualValues(t, 1, s.UsesExpired)
	assert.EqualValues(t, 1, s.Destroyed)
}

// TestBackendOptions: Validate and New refuse a negative MaxConcurrentCreates,
// FailFastAfter or MaxUses naming the field, and MaxConcurrentCreates or
// FailFastAfter without CreateTimeout naming both fields (Options.CreateTimeout);
// JSON decodes the three (negative values too, as other int fields, for
// Validate to refuse).
func TestBackendOptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		json  string
		opts  Options[*conn]
		words []string // the error names them
	}{
		{"negative MaxConcurrentCreates", `{"MaxConcurrentCreates": -1}`, Options[*conn]{MaxConcurrentCreates: -1}, []string{"MaxConcurrentCreates", "-1"}},
		{"negative FailFastAfter", `{"FailFastAfter": -1}`, Options[*conn]{FailFastAfter: -1}, []string{"FailFastAfter", "-1"}},
		{"negative MaxUses", `{"MaxUses": -1}`, Options[*conn]{MaxUses: -1}, []string{"MaxUses", "-1"}},
		{"MaxConcurrentCreates without CreateTimeout", `{"MaxConcurrentCreates": 2}`, Options[*conn]{MaxConcurrentCreates: 2},
			[]string{"MaxConcurrentCreates is 2", "CreateTimeout is 0", "keep its turn to create for good"}},
		{"FailFastAfter without CreateTimeout", `{"FailFastAfter": 3}`, Options[*conn]{FailFastAfter: 3},
			[]string{"FailFastAfter is 3", "CreateTimeout is 0", "never put the pool down"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(err error, how string) {
				t.Helper()
				require.ErrorIs(t, err, ErrInvalidOptions, how)
				for _, w := range tc.words {
					assert.ErrorContains(t, err, w, how)
				}
			}
			check(tc.opts.Validate(), "Validate")
			tr := &tracker{}
			p, err := New[*conn](context.Background(), tr, tc.opts)
			check(err, "New")
			assert.Nil(t, p)
			assert.Zero(t, tr.created.Load())

			var o Options[*conn]
			require.NoError(t, json.Unmarshal([]byte(tc.json), &o), "JSON decodes it as for any int field")
			check(o.Validate(), "Validate after JSON")
		})
	}

	var o Options[*conn]
	require.NoError(t, json.Unmarshal([]byte(`{"MaxConcurrentCreates": 4, "FailFastAfter": 3, "MaxUses": 100, "CreateTimeout": "5s"}`), &o))
	assert.Equal(t, 4, o.MaxConcurrentCreates)
	assert.Equal(t, 3, o.FailFastAfter)
	assert.Equal(t, 100, o.MaxUses)
	require.NoError(t, o.Validate())

	var back Options[*conn]
	js, err := json.Marshal(o)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(js, &back))
	assert.Equal(t, [3]int{4, 3, 100}, [3]int{back.MaxConcurrentCreates, back.FailFastAfter, back.MaxUses}, "round trip through %s", js)

	for _, bad := range []string{`{"MaxUses": 1.5}`, `{"FailFastAfter": "3"}`, `{"MaxConcurrentCreates": true}`} {
		var o Options[*conn]
		err := json.Unmarshal([]byte(bad), &o)
		assert.ErrorIs(t, err, ErrInvalidOptions, "%s", bad)
	}
}
