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
	"go.uber.org/goleak"
)

// Lifecycle over time: expiry that reaches every idle item, lifetime
// jitter, the upkeep, parallel seeding and SetMaxSize.

// ukLightLoad is the scenario of issue 12: a burst of 10 leases released
// together, then one lease every millisecond for a second, on the pool's
// fake clock. It returns the pool's Stats at the end, and how many items
// the load may keep in use: one, or in the portable build, where a
// goroutine's processor hint is not sticky under -race (sync.Pool drops
// the token at random there), one per slot and one more: each lease may
// land on another slot, and every slot may hold a recently used item.
func ukLightLoad(t *testing.T, opts Options[*conn]) (Stats, int) {
	t.Helper()
	opts.MaxSize = 16
	p, tr := newTracked(t, opts)
	clk := lcClock(p)
	burst := make([]Lease[*conn], 10)
	for i := range burst {
		burst[i] = mustLease(t, p)
	}
	for _, l := range burst {
		l.Release()
	}
	for range 1000 {
		clk.advance(int64(time.Millisecond))
		mustLease(t, p).Release()
		checkInvariants(t, p, func() int64 { return tr.live.Load() })
	}
	needs := 2
	if !pinsProcessor {
		needs = len(p.g.slots.s) + 1
	}
	return p.Stats(), needs
}

func TestIdleItemsExpireUnderLightLoad(t *testing.T) {
	for _, procs := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))

			s, needs := ukLightLoad(t, Options[*conn]{IdleTimeout: 50 * time.Millisecond})
			t.Logf("IdleTimeout: %d allocated, %d idle, IdleExpired %d", s.ItemsAllocated, s.ItemsAvailable, s.IdleExpired)
			assert.LessOrEqual(t, s.ItemsAllocated, needs, "the pool shrank to what the load needs: %+v", s)
			assert.GreaterOrEqual(t, s.IdleExpired, uint64(10-needs))

			s, needs = ukLightLoad(t, Options[*conn]{MaxLifetime: 50 * time.Millisecond})
			t.Logf("MaxLifetime: %d allocated, %d idle, LifetimeExpired %d", s.ItemsAllocated, s.ItemsAvailable, s.LifetimeExpired)
			assert.LessOrEqual(t, s.ItemsAllocated, needs, "%+v", s)
			assert.GreaterOrEqual(t, s.LifetimeExpired, uint64(10-needs))
		})
	}
}

func TestSweepPeriod(t *testing.T) {
	ms := int64(time.Millisecond)
	assert.Zero(t, sweepPeriod(0, 0), "no limit: no sweeping")
	assert.Equal(t, 25*ms, sweepPeriod(50*time.Millisecond, 0))
	assert.Equal(t, 25*ms, sweepPeriod(time.Hour, 50*time.Millisecond), "the smaller limit")
	assert.Equal(t, ms, sweepPeriod(time.Microsecond, 0), "at least a millisecond")
}

func TestMaxLifetimeJitterSpreadsExpiry(t *testing.T) {
	const n = 1000
	p, _ := newTracked(t, Options[*conn]{MaxSize: n, MaxLifetime: time.Second, MaxLifetimeJitter: time.Second})
	clk := lcClock(p)
	ls := make([]Lease[*conn], n)
	for i := range ls {
		ls[i] = mustLease(t, p) // n items created at the same instant
	}
	for _, l := range ls {
		l.Release()
	}

	// Step the clock 10 ms at a time and sweep: the items each step
	// destroys expired within those 10 ms.
	const step = 10 * time.Millisecond
	var perStep []int
	for now := time.Duration(0); now <= 2*time.Second+step; now += step {
		clk.ns.Store(int64(now))
		before := p.Stats().LifetimeExpired
		p.destroyExpired(p.now())
		perStep = append(perStep, int(p.Stats().LifetimeExpired-before))
		if now <= time.Second {
			require.Zero(t, perStep[len(perStep)-1], "nothing expires before MaxLifetime (at %v)", now)
		}
	}
	assert.EqualValues(t, n, p.Stats().LifetimeExpired, "all expire within MaxLifetime + jitter")
	worst := 0
	for i := range perStep {
		window := 0
		for j := i; j < i+10 && j < len(perStep); j++ { // 100 ms
			window += perStep[j]
		}
		worst = max(worst, window)
	}
	t.Logf("the busiest 100 ms window held %d of %d expiries (%.1f %%)", worst, n, 100*float64(worst)/n)
	assert.LessOrEqual(t, worst, n*15/100, "no 100 ms window holds more than 15 %%")
}

func TestMaxLifetimeJitterNeedsMaxLifetime(t *testing.T) {
	_, err := New(context.Background(), &tracker{}, Options[*conn]{MaxLifetimeJitter: time.Second})
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.ErrorContains(t, err, "MaxLifetimeJitter")
}

// ukUpkept returns a pool whose upkeep goroutine runs, but whose rounds a
// test runs itself on the fake clock: the interval is an hour.
func ukUpkept(t *testing.T, opts Options[*conn]) (*Pool[*conn], *tracker, *fakeClock) {
	t.Helper()
	opts.UpkeepInterval = time.Hour
	p, tr := newTracked(t, opts)
	return p, tr, lcClock(p)
}

// ukIdle puts n fresh items idle in p, leasing them all and releasing them.
func ukIdle(t *testing.T, p *Pool[*conn], n int) []*conn {
	t.Helper()
	ls := make([]Lease[*conn], n)
	cs := make([]*conn, n)
	for i := range ls {
		ls[i] = mustLease(t, p)
		cs[i] = ls[i].Value()
	}
	for _, l := range ls {
		l.Release()
	}
	return cs
}

func TestUpkeepDestroysExpiredIdleItemsWithoutALease(t *testing.T) {
	p, tr, clk := ukUpkept(t, Options[*conn]{MaxSize: 8, IdleTimeout: time.Minute})
	ukIdle(t, p, 5)
	clk.advance(lcMin(2))
	require.True(t, p.upkeepRound())
	s := p.Stats()
	assert.EqualValues(t, 5, s.IdleExpired)
	assert.Zero(t, s.ItemsAllocated)
	assert.Zero(t, tr.live.Load())
	assert.Zero(t, s.Leases-5, "no lease ran")
}

func TestUpkeepKeepsMinSizeThroughIdleExpiry(t *testing.T) {
	p, tr, clk := ukUpkept(t, Options[*conn]{MinSize: 2, MaxSize: 8, IdleTimeout: time.Minute})
	ukIdle(t, p, 5)
	clk.advance(lcMin(2))
	require.True(t, p.upkeepRound())
	s := p.Stats()
	assert.EqualValues(t, 3, s.IdleExpired, "idle expiry stops at MinSize")
	assert.Equal(t, 2, s.ItemsAllocated)
	assert.EqualValues(t, 2, tr.live.Load())
}

func TestUpkeepReplacesItemsPastTheirLifetime(t *testing.T) {
	p, tr, clk := ukUpkept(t, Options[*conn]{MinSize: 2, MaxSize: 8, MaxLifetime: time.Minute})
	old := ukIdle(t, p, 2)
	clk.advance(lcMin(2))
	require.True(t, p.upkeepRound())
	s := p.Stats()
	assert.EqualValues(t, 2, s.LifetimeExpired, "MaxLifetime applies below MinSize too")
	assert.Equal(t, 2, s.ItemsAvailable, "and the upkeep replaced them")
	assert.EqualValues(t, 2, tr.live.Load())
	for _, c := range old {
		assert.True(t, c.closed.Load())
	}
}

func TestUpkeepChecksIdleItemsBeforeALeaseMeetsThem(t *testing.T) {
	prep := &lcPreparer{}
	p, tr, clk := ukUpkept(t, Options[*conn]{MaxSize: 4, Preparer: prep, CheckAfterIdle: time.Minute})
	cs := ukIdle(t, p, 3)
	dead := cs[1]
	prep.set(func(_ context.Context, c *conn) (bool, error) {
		if c == dead {
			return false, errBoom
		}
		return true, nil
	}, nil)
	checksBefore, _ := prep.seen()

	require.True(t, p.upkeepRound())
	checks, _ := prep.seen()
	assert.Empty(t, checks[len(checksBefore):], "nothing is due before CheckAfterIdle")

	clk.advance(lcMin(2))
	require.True(t, p.upkeepRound())
	checks, _ = prep.seen()
	assert.ElementsMatch(t, []int{cs[0].id, cs[1].id, cs[2].id}, checks[len(checksBefore):], "each idle item checked once")
	s := p.Stats()
	assert.EqualValues(t, 1, s.PrepareFailed)
	assert.True(t, dead.closed.Load(), "the dead item was destroyed before any lease met it")
	assert.Equal(t, 2, s.ItemsAvailable)
	assert.EqualValues(t, 2, tr.live.Load())

	// The items the upkeep just checked are not checked again on lease.
	n := len(checks)
	l := mustLease(t, p)
	checks, _ = prep.seen()
	assert.Len(t, checks, n, "a checked item is lent without a second check")
	l.Release()
}

func TestUpkeepNeverLendsAnItemMidCheck(t *testing.T) {
	prep := &lcPreparer{}
	p, _, clk := ukUpkept(t, Options[*conn]{MaxSize: 1, Preparer: prep, CheckAfterIdle: time.Minute})
	item := ukIdle(t, p, 1)[0]
	clk.advance(lcMin(2))

	inCheck, finish := make(chan struct{}), make(chan struct{})
	prep.set(func(context.Context, *conn) (bool, error) {
		close(inCheck)
		<-finish
		return true, nil
	}, nil)
	roundDone := make(chan bool)
	go func() { roundDone <- p.upkeepRound() }()
	lcRecv(t, inCheck, "the upkeep's check")

	// The only item is under check: a lease must wait for it.
	_, err := p.TryLease(context.Background())
	require.ErrorIs(t, err, ErrExhausted, "the item under check counts against MaxSize")
	got := leaseAsync(context.Background(), p)
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, testWait, time.Millisecond)
	prep.set(nil, nil)
	close(finish)
	assert.True(t, lcRecv(t, roundDone, "the round"))
	o := awaitLease(t, got)
	require.NoError(t, o.err)
	assert.Same(t, item, o.l.Value(), "the lease got the item once its check passed")
	o.l.Release()
}

func TestUpkeepCreatesUpToMinSizeAndBacksOff(t *testing.T) {
	var log edLog
	p, tr, _ := ukUpkept(t, Options[*conn]{MinSize: 0, MaxSize: 3, Logger: log.logger()})
	p.opts.MinSize = 3 // as if New had seeded nothing: the floor is the upkeep's to keep
	tr.setFail(errBoom)
	assert.False(t, p.upkeepRound(), "a failed creation reports the round failed")
	assert.Contains(t, log.String(), `msg="pool: upkeep: create item" pool.name=conn.Pool err="pool \"conn.Pool\": create item: boom"`)
	assert.Zero(t, p.Stats().ActiveLeases, "the failed creation gave its room back")

	tr.setFail(nil)
	assert.True(t, p.upkeepRound())
	s := p.Stats()
	assert.Equal(t, 3, s.ItemsAvailable, "MinSize items exist")
	assert.True(t, p.upkeepRound())
	assert.EqualValues(t, 3, tr.created.Load(), "never past MinSize")

	iv := time.Second
	var seq []time.Duration
	var b time.Duration
	for range 7 {
		b = upkeepBackoff(b, iv)
		seq = append(seq, b)
	}
	assert.Equal(t, []time.Duration{iv / 16, iv / 8, iv / 4, iv / 2, iv, iv, iv}, seq, "retries double up to UpkeepInterval")
}

func TestUpkeepCreatesNothingPastMaxSize(t *testing.T) {
	p, tr, _ := ukUpkept(t, Options[*conn]{MinSize: 0, MaxSize: 2})
	p.opts.MinSize = 2
	held := []Lease[*conn]{mustLease(t, p), mustLease(t, p)}
	assert.True(t, p.upkeepRound())
	assert.EqualValues(t, 2, tr.created.Load(), "MaxSize items are leased: no room for more")
	for _, l := range held {
		l.Release()
	}
}

func TestUpkeepStopsBeforeCloseReturns(t *testing.T) {
	for _, end := range []string{"Close", "Shutdown"} {
		t.Run(end, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			prep := &lcPreparer{}
			p, err := New[*conn](context.Background(), &tracker{}, Options[*conn]{
				MinSize: 2, MaxSize: 4, UpkeepInterval: time.Millisecond,
				IdleTimeout: time.Millisecond, Preparer: prep, CheckAfterIdle: time.Millisecond,
			})
			require.NoError(t, err)
			require.Eventually(t, func() bool { checks, _ := prep.seen(); return len(checks) > 4 }, testWait, time.Millisecond,
				"the upkeep runs rounds on its own")
			if end == "Close" {
				require.NoError(t, p.Close())
			} else {
				require.NoError(t, p.Shutdown(context.Background()))
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}

func TestNewSeedsInParallel(t *testing.T) {
	const n = 16
	var inFlight, peak atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		k := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); k > p && !peak.CompareAndSwap(p, k); p = peak.Load() {
		}
		if k == n {
			once.Do(func() { close(all) })
		}
		select { // every creation waits until all n are under way
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(testWait):
			return nil, errors.New("the creations did not run at once")
		}
		time.Sleep(50 * time.Millisecond)
		return &conn{}, nil
	})
	start := time.Now()
	p, err := New(context.Background(), f, Options[*conn]{MinSize: n, MaxSize: n})
	require.NoError(t, err)
	t.Logf("MinSize %d with a 50 ms factory: New took %v", n, time.Since(start).Round(time.Millisecond))
	defer p.Close()
	assert.EqualValues(t, n, peak.Load(), "all MinSize creations ran at once")
	assert.Equal(t, n, p.Stats().ItemsAvailable)
}

func TestNewSeedFailureCancelsTheRest(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	tr := &tracker{}
	var calls atomic.Int64
	var canceled atomic.Int64
	f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		if calls.Add(1) == 9 {
			return nil, errOptSeed
		}
		c, err := tr.Create(context.Background())
		select {
		case <-ctx.Done(): // the 9th failed: give up, as a dial would
			_ = tr.destroy(c)
			canceled.Add(1)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
			return c, err
		}
	})
	_, err := New(context.Background(), f, Options[*conn]{MinSize: 16, MaxSize: 16, Destroy: tr.destroy})
	require.ErrorIs(t, err, errOptSeed, "New returns the first failure")
	assert.NotErrorIs(t, err, context.Canceled, "not the cancellations it caused")
	assert.Zero(t, tr.live.Load(), "every item made was destroyed")
	assert.Positive(t, canceled.Load(), "the failure canceled the creations under way")
	goleak.VerifyNone(t, ignore)
}

func TestSetMaxSizeRefusesBadSizes(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MinSize: 2, MaxSize: 4})
	for _, n := range []int{0, -1, 1} {
		assert.ErrorIs(t, p.SetMaxSize(n), ErrInvalidOptions, "SetMaxSize(%d)", n)
	}
	assert.Equal(t, 4, p.Stats().MaxSize)
	require.NoError(t, p.Close())
	assert.ErrorIs(t, p.SetMaxSize(8), ErrClosed)
}

func TestSetMaxSizeGrowingServesWaitersInOrder(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 2})
	held := []Lease[*conn]{mustLease(t, p), mustLease(t, p)}
	outs := make([]<-chan leaseOutcome, 3)
	for i := range outs {
		outs[i] = leaseAsync(context.Background(), p)
		require.Eventually(t, func() bool { return p.Stats().QueuedLeases == i+1 }, testWait, time.Millisecond)
	}
	require.NoError(t, p.SetMaxSize(4))
	o0, o1 := awaitLease(t, outs[0]), awaitLease(t, outs[1])
	require.NoError(t, o0.err, "the oldest waiter is served")
	require.NoError(t, o1.err, "and the next")
	assert.Empty(t, outs[2], "the newest still waits: no room for it")
	assert.Equal(t, 1, p.Stats().QueuedLeases)
	assert.EqualValues(t, 4, tr.created.Load())
	held[0].Release()
	o2 := awaitLease(t, outs[2])
	require.NoError(t, o2.err)
	for _, l := range []Lease[*conn]{held[1], o0.l, o1.l, o2.l} {
		l.Release()
	}
}

func TestSetMaxSizeShrinkingDestroysIdleAndReturningItems(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 6, LeaseTimeout: 10 * time.Millisecond})
	ls := []Lease[*conn]{mustLease(t, p), mustLease(t, p), mustLease(t, p)}
	ukIdle(t, p, 3) // 3 leased, 3 idle: 6 items
	require.EqualValues(t, 6, tr.live.Load())

	require.NoError(t, p.SetMaxSize(2))
	s := p.Stats()
	assert.Equal(t, 2, s.MaxSize)
	assert.Zero(t, s.ItemsAvailable, "the idle items beyond MaxSize were destroyed")
	assert.EqualValues(t, 3, tr.live.Load(), "the leased ones are still out")

	_, err := p.Lease(context.Background())
	require.ErrorIs(t, err, ErrLeaseTimeout, "new leases wait while the items exceed MaxSize")
	assert.Contains(t, err.Error(), "MaxSize 2", "the message follows the new size")
	_, err = p.TryLease(context.Background())
	assert.ErrorContains(t, err, "MaxSize 2")

	ls[0].Release() // one too many: destroyed
	assert.EqualValues(t, 2, tr.live.Load())
	ls[1].Release() // fits now: idle
	assert.EqualValues(t, 2, tr.live.Load())
	assert.Equal(t, 1, p.Stats().ItemsAvailable)
	l := mustLease(t, p)
	assert.EqualValues(t, 2, tr.live.Load(), "reused, not created")
	l.Release()
	ls[2].Release()
	s = p.Stats()
	assert.EqualValues(t, 4, s.Destroyed)
	assert.Equal(t, 2, s.ItemsAllocated)
}

// TestSetMaxSizeUnderLoad resizes 16 → 4 → 12 → 2 → 8 while 64 goroutines
// lease and release, and checks from the test factory's own count that the
// items in existence never exceed max(new MaxSize, items at the moment of
// the shrink), and that the count never grows while over the cap.
func TestSetMaxSizeUnderLoad(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 16})
	var size atomic.Int64 // the MaxSize the monitor holds the pool to
	size.Store(16)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := p.Lease(context.Background())
				if err != nil {
					t.Errorf("Lease: %v", err)
					return
				}
				runtime.Gosched()
				l.Release()
			}
		})
	}
	var violations atomic.Int64
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		prev := p.Stats().ItemsAllocated
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := p.Stats() // ItemsAllocated: the items the pool counts, exactly
			live := tr.live.Load()
			n := int(size.Load())
			if s.MaxSize == n {
				if bound := max(n, s.ItemsAllocated); int(live) > bound {
					violations.Add(1)
					t.Errorf("%d items exist; MaxSize %d, the pool counted %d", live, n, s.ItemsAllocated)
				}
				if prev > n && s.ItemsAllocated > prev {
					violations.Add(1)
					t.Errorf("over MaxSize %d the items grew from %d to %d", n, prev, s.ItemsAllocated)
				}
			}
			prev = s.ItemsAllocated
		}
	}()
	for _, n := range []int{4, 12, 2, 8} {
		time.Sleep(30 * time.Millisecond)
		require.NoError(t, p.SetMaxSize(n))
		size.Store(int64(n))
		require.Eventually(t, func() bool { return p.Stats().ItemsAllocated <= n }, testWait, time.Millisecond,
			"the items come down to MaxSize %d", n)
	}
	time.Sleep(30 * time.Millisecond)
	close(stop)
	wg.Wait()
	<-monitorDone
	assert.Zero(t, violations.Load())
	s := p.Stats()
	assert.Equal(t, 8, s.MaxSize)
	assert.LessOrEqual(t, tr.peak.Load(), int64(16))
	t.Logf("%d leases through the resizes; created %d, destroyed %d", s.Leases, s.Created, s.Destroyed)
}

// TestUpkeepLogsADestroyPanic: the upkeep has no caller to raise a panic
// to, and on its own goroutine a panic would end the program. An item that
// fails its check and whose Destroy panics is logged, counted, and the
// round goes on.
func TestUpkeepLogsADestroyPanic(t *testing.T) {
	var log edLog
	prep := &lcPreparer{}
	p, _, clk := ukUpkept(t, Options[*conn]{MaxSize: 2, Preparer: prep, CheckAfterIdle: time.Minute, Logger: log.logger(),
		Destroy: func(*conn) error { panic("uk: Destroy panic") }})
	ukIdle(t, p, 2)
	prep.set(func(context.Context, *conn) (bool, error) { return false, errBoom }, nil)
	clk.advance(lcMin(2))
	require.NotPanics(t, func() { assert.True(t, p.upkeepRound()) })
	s := p.Stats()
	assert.EqualValues(t, 2, s.PrepareFailed, "the round went on to the second item")
	assert.EqualValues(t, 2, s.DestroyErrors)
	assert.Zero(t, s.ItemsAllocated)
	assert.Contains(t, log.String(), "uk: Destroy panic")
}

// TestUpkeepLeaseKeepsMinSizeThroughIdleExpiry: with the upkeep on, a lease
// that meets an item that has only idled past IdleTimeout keeps it while
// MinSize or fewer items exist, as the upkeep's own sweep does.
func TestUpkeepLeaseKeepsMinSizeThroughIdleExpiry(t *testing.T) {
	p, tr, clk := ukUpkept(t, Options[*conn]{MinSize: 2, MaxSize: 4, IdleTimeout: time.Minute})
	clk.advance(lcMin(2))
	l := mustLease(t, p)
	l.Release()
	s := p.Stats()
	assert.Zero(t, s.IdleExpired, "no item destroyed for idling at MinSize")
	assert.EqualValues(t, 2, tr.created.Load(), "the lease used a seeded item")
	assert.Equal(t, 2, s.ItemsAllocated)
}
