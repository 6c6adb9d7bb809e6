package pool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var bg = context.Background()

// waitQueued blocks until n leases are queued on p.
func waitQueued[T any](t testing.TB, p *Pool[T], n int) {
	t.Helper()
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == n },
		testWait, time.Millisecond, "want %d queued leases", n)
}

func TestSequentialLeasesReuseOneItem(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 3})
	for range 6 {
		l, err := p.Lease(bg)
		require.NoError(t, err)
		assert.Equal(t, 1, l.Value().id)
		l.Release()
	}
	s := p.Stats()
	assert.EqualValues(t, 1, tr.created.Load())
	assert.EqualValues(t, 6, s.Leases)
	assert.Equal(t, 1, s.ItemsAvailable)
	assert.Equal(t, 0, s.ActiveLeases)
	assert.EqualValues(t, 0, s.Waits)
	assert.Zero(t, s.WaitTime)
}

func TestLeaseAndReleaseAllocateNothing(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 4, MinSize: 4})
	allocs := testing.AllocsPerRun(1000, func() {
		l, err := p.Lease(bg)
		if err != nil {
			panic(err)
		}
		l.Release()
	})
	assert.Zero(t, allocs)
	allocs = testing.AllocsPerRun(1000, func() {
		l, _ := p.TryLease(bg)
		l.Release()
	})
	assert.Zero(t, allocs)
}

func TestLeaseTimeoutAndCancelAreDistinct(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{Name: "Smtp.Pool", MaxSize: 1, LeaseTimeout: 20 * time.Millisecond})
	held, err := p.Lease(bg)
	require.NoError(t, err)
	defer held.Release()

	_, err = p.Lease(bg)
	require.ErrorIs(t, err, ErrLeaseTimeout)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), `"Smtp.Pool"`)
	assert.Contains(t, err.Error(), "MaxSize 1")

	ctx, cancel := context.WithCancel(bg)
	cancel()
	_, err = p.Lease(ctx)
	assert.Equal(t, context.Canceled, err)

	ctx, cancel = context.WithTimeout(bg, time.Millisecond)
	defer cancel()
	_, err = p.Lease(ctx)
	assert.Equal(t, context.DeadlineExceeded, err)
	assert.NotErrorIs(t, err, ErrLeaseTimeout)

	s := p.Stats()
	assert.EqualValues(t, 1, s.Timeouts)
	assert.EqualValues(t, 2, s.Canceled)
	assert.EqualValues(t, 2, s.Waits, "the lease whose ctx had ended never queued")
	assert.GreaterOrEqual(t, s.WaitTime, 20*time.Millisecond)
	assert.Equal(t, 0, s.QueuedLeases)
	assert.Equal(t, 1, s.ActiveLeases)
}

func TestTryLeaseNeverWaits(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 2})
	a, err := p.TryLease(bg)
	require.NoError(t, err)
	b, err := p.TryLease(bg)
	require.NoError(t, err)
	_, err = p.TryLease(bg)
	require.ErrorIs(t, err, ErrExhausted)
	assert.Contains(t, err.Error(), "MaxSize 2")
	a.Release()
	c, err := p.TryLease(bg)
	require.NoError(t, err)
	assert.Same(t, a.e, c.e, "the released item is reused")
	b.Release()
	c.Release()
	assert.EqualValues(t, 0, p.Stats().Waits)
}

func TestTryLeaseDoesNotOvertakeQueuedLeases(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	held := mustLease(t, p)
	got := leaseAsync(bg, p)
	waitQueued(t, p, 1)
	held.Release() // goes straight to the waiter ...
	_, err := p.TryLease(bg)
	assert.ErrorIs(t, err, ErrExhausted, "... so no permit is free for TryLease")
	awaitLease(t, got).l.Release()
}

func TestWaitersAreServedInFIFOOrder(t *testing.T) {
	const waiters = 8
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	held, err := p.Lease(bg)
	require.NoError(t, err)

	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := p.Lease(bg)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			l.Release() // hands the item to the next in line
		}()
		waitQueued(t, p, i+1) // queue them in a known order
	}
	held.Release()
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, order)
	assert.EqualValues(t, waiters, p.Stats().Waits)
}

func TestReleaseHandsItemStraightToWaiter(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	held := mustLease(t, p)
	got := leaseAsync(bg, p)
	waitQueued(t, p, 1)
	first := held.Value()
	held.Release()
	o := awaitLease(t, got)
	require.NoError(t, o.err)
	l := o.l
	assert.Same(t, first, l.Value())
	assert.EqualValues(t, 1, tr.created.Load())
	assert.Equal(t, 0, p.Stats().ItemsAvailable, "the item never went idle")
	l.Release()
}

func TestGateLeavePassesRacedGrantOn(t *testing.T) {
	newWaiter := func() *waiter[int] { return &waiter[int]{ready: make(chan struct{}, 1)} }
	item := &entry[int]{value: 42}
	// grant grants the oldest waiter as a release or Close does: under the
	// lock, waking it as the lock is released.
	grant := func(g *gate[int], e *entry[int], err error) bool {
		g.lock()
		defer g.unlock()
		return g.grantOldest(e, err)
	}
	// leave is how await ends a wait that gave up: it leaves the queue
	// and, when a grant raced with that, gives the grant up.
	leave := func(g *gate[int], w *waiter[int]) (stranded *entry[int], closed bool) {
		if !g.leave(w) {
			return nil, false
		}
		e, err, _ := g.giveUp(w, context.Canceled, false)
		return e, err == ErrClosed
	}

	t.Run("item to the next waiter", func(t *testing.T) {
		g := &gate[int]{size: 1, held: 1}
		w1, w2 := newWaiter(), newWaiter()
		g.waiters.pushBack(w1)
		g.waiters.pushBack(w2)
		require.True(t, grant(g, item, nil)) // w1 is granted ...
		stranded, closed := leave(g, w1)     // ... as it gives up
		assert.Nil(t, stranded)
		assert.False(t, closed)
		require.Len(t, w2.ready, 1, "w2 was woken")
		assert.Same(t, item, w2.e)
		assert.Equal(t, 1, g.held, "the permit moved with the item")
		assert.Equal(t, 0, g.waiters.n)
	})
	t.Run("item to the idle queue", func(t *testing.T) {
		g := &gate[int]{size: 1, held: 1}
		w1 := newWaiter()
		g.waiters.pushBack(w1)
		grant(g, item, nil)
		leave(g, w1)
		assert.Equal(t, 0, g.held)
		assert.Equal(t, 1, g.idle.len())
	})
	t.Run("bare permit comes free", func(t *testing.T) {
		g := &gate[int]{size: 1, held: 1}
		w1 := newWaiter()
		g.waiters.pushBack(w1)
		grant(g, nil, nil)
		leave(g, w1)
		assert.Equal(t, 0, g.held)
		assert.Equal(t, 0, g.idle.len())
	})
	t.Run("not granted: just leaves", func(t *testing.T) {
		g := &gate[int]{size: 1, held: 1}
		w1, w2 := newWaiter(), newWaiter()
		g.waiters.pushBack(w1)
		g.waiters.pushBack(w2)
		leave(g, w1)
		assert.Same(t, w2, g.waiters.head)
		assert.Equal(t, 1, g.waiters.n)
		assert.Equal(t, 1, g.held)
	})
	t.Run("closed after the grant: item stranded for the caller", func(t *testing.T) {
		g := &gate[int]{size: 1, held: 1}
		w1 := newWaiter()
		g.waiters.pushBack(w1)
		grant(g, item, nil)
		g.close()
		stranded, closed := leave(g, w1)
		assert.Same(t, item, stranded)
		assert.False(t, closed)
		assert.Equal(t, 1, g.held, "the caller still holds the permit")
	})
	t.Run("gave up between the grant and the wake-up", func(t *testing.T) {
		g := &gate[int]{size: 1, held: 1}
		w1, w2 := newWaiter(), newWaiter()
		g.waiters.pushBack(w1)
		g.waiters.pushBack(w2)
		g.lock()
		require.True(t, g.grantOldest(item, nil)) // granted, not yet woken
		left := make(chan *entry[int])
		go func() {
			stranded, _ := leave(g, w1) // waits for the lock, then for the token
			left <- stranded
		}()
		g.unlock() // wakes w1, whose leave passes the item on
		select {
		case stranded := <-left:
			assert.Nil(t, stranded)
		case <-time.After(testWait):
			t.Fatal("leave never saw the wake-up")
		}
		require.Len(t, w2.ready, 1, "w2 was woken")
		assert.Same(t, item, w2.e)
		assert.Equal(t, 1, g.held)
	})
	t.Run("woken by Close", func(t *testing.T) {
		g := &gate[int]{size: 1, held: 1}
		w1 := newWaiter()
		g.waiters.pushBack(w1)
		g.close()
		stranded, closed := leave(g, w1)
		assert.Nil(t, stranded)
		assert.True(t, closed)
	})
}

// TestCancelAtHandoffNeverLosesAPermit races a waiter's cancellation
// against the release that hands it the item, many times over, and checks
// after every round that the permit and the item are both still there.
func TestCancelAtHandoffNeverLosesAPermit(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	rounds := 2000
	if testing.Short() {
		rounds = 200
	}
	var got, canceled int
	for range rounds {
		held, err := p.Lease(bg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(bg)
		res := make(chan error, 1)
		go func() {
			l, err := p.Lease(ctx)
			if err == nil {
				l.Release()
			}
			res <- err
		}()
		waitQueued(t, p, 1)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); <-start; cancel() }()
		go func() { defer wg.Done(); <-start; held.Release() }()
		close(start)
		wg.Wait()
		if err := <-res; err == nil {
			got++
		} else {
			require.ErrorIs(t, err, context.Canceled)
			canceled++
		}
		s := p.Stats()
		require.Equal(t, 0, s.ActiveLeases, "a permit was lost")
		require.Equal(t, 1, s.ItemsAvailable, "the item was lost")
	}
	assert.EqualValues(t, 1, tr.created.Load(), "one item served every round")
	t.Logf("%d rounds: waiter served %d, canceled %d", rounds, got, canceled)
}

func TestCloseWakesEveryWaiterWithErrClosed(t *testing.T) {
	const waiters = 6
	p, tr := newTracked(t, Options[*conn]{MaxSize: 2})
	a, err := p.Lease(bg)
	require.NoError(t, err)
	b, err := p.Lease(bg)
	require.NoError(t, err)
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := p.Lease(bg)
			errs <- err
		}()
	}
	waitQueued(t, p, waiters)
	require.NoError(t, p.Close())
	for range waiters {
		assert.ErrorIs(t, <-errs, ErrClosed)
	}
	assert.Equal(t, 0, p.Stats().QueuedLeases)

	// Leased items are destroyed as they come back.
	av, bv := a.Value(), b.Value()
	a.Release()
	b.Discard()
	assert.True(t, av.closed.Load())
	assert.True(t, bv.closed.Load())
	assert.EqualValues(t, 0, tr.live.Load())

	_, err = p.Lease(bg)
	assert.ErrorIs(t, err, ErrClosed)
	_, err = p.TryLease(bg)
	assert.ErrorIs(t, err, ErrClosed)
	assert.NoError(t, p.Close(), "Close is idempotent")
	s := p.Stats()
	assert.Equal(t, 0, s.ItemsAllocated)
	assert.Equal(t, s.Created, s.Destroyed)
}

func TestClearDuringLeases(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MinSize: 2, MaxSize: 4})
	var leases []Lease[*conn]
	for range 3 {
		l, err := p.Lease(bg)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	// 3 leased (2 seeded + 1 fresh), none idle: release one to have one idle.
	idle := leases[2].Value()
	leases[2].Release()
	leases = leases[:2]
	require.Equal(t, 1, p.Stats().ItemsAvailable)

	p.Clear()
	assert.True(t, idle.closed.Load(), "the idle item was destroyed")
	s := p.Stats()
	assert.Equal(t, 2, s.ActiveLeases, "leased items are untouched")
	assert.Equal(t, 2, s.ItemsAvailable, "refilled to MinSize: 2 permits were free")
	for _, l := range leases {
		assert.False(t, l.Value().closed.Load())
	}
	assert.LessOrEqual(t, tr.peak.Load(), int64(4))

	// Now 2 leased + 2 idle: Clear destroys both idle and may refill both.
	p.Clear()
	assert.Equal(t, 2, p.Stats().ItemsAvailable)
	for _, l := range leases {
		l.Release()
	}
	s = p.Stats()
	assert.Equal(t, 4, s.ItemsAvailable)
	assert.Equal(t, s.Created, s.Destroyed+uint64(s.ItemsAllocated))
}

func TestClearRefillIsCappedByFreePermits(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MinSize: 3, MaxSize: 3})
	var leases []Lease[*conn]
	for range 2 {
		l, err := p.Lease(bg)
		require.NoError(t, err)
		leases = append(leases, l)
	}
	p.Clear() // 1 idle destroyed; only 1 permit free: refill 1, not 3
	s := p.Stats()
	assert.Equal(t, 1, s.ItemsAvailable)
	assert.Equal(t, 3, s.ItemsAllocated)
	assert.LessOrEqual(t, tr.peak.Load(), int64(3))
	for _, l := range leases {
		l.Release()
	}
}

func TestShutdownWaitsForEveryLease(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 2})
	l, err := p.Lease(bg)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- p.Shutdown(bg) }()
	require.Eventually(t, func() bool {
		l, err := p.TryLease(bg)
		l.Release() // a lease won before Shutdown closed the pool
		return errors.Is(err, ErrClosed)
	}, 5*time.Second, time.Millisecond, "Shutdown closes the pool at once")
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a lease out", err)
	default:
	}
	v := l.Value()
	l.Release()
	require.NoError(t, <-done)
	assert.True(t, v.closed.Load())
	assert.EqualValues(t, 0, tr.live.Load())
}

func TestShutdownEndsWithCtxWhenALeaseNeverReturns(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 2})
	l, err := p.Lease(bg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(bg, 10*time.Millisecond)
	defer cancel()
	err = p.Shutdown(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	l.Release()
	assert.NoError(t, p.Shutdown(bg), "a second Shutdown finds nothing left")
}

func TestShutdownWaitsForAbandonedCreation(t *testing.T) {
	tr := &tracker{block: make(chan struct{}), ctxs: make(chan context.Context, 1)}
	p, err := New[*conn](bg, tr, Options[*conn]{MaxSize: 1, Destroy: tr.destroy})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(bg)
	go func() { <-tr.ctxs; cancel() }() // give up once the factory runs
	_, err = p.Lease(ctx)
	require.ErrorIs(t, err, context.Canceled)

	assert.Equal(t, 1, p.Stats().ActiveLeases, "the creation holds its permit")
	// Shutdown cancels the creation through its ctx (the factory honours
	// it) and returns once the creation has given its permit back.
	assert.NoError(t, p.Shutdown(bg))
	assert.EqualValues(t, 0, tr.live.Load())
	assert.Equal(t, 0, p.Stats().ActiveLeases)
}

// stressFactory counts items in existence by its own lights: one more from
// the start of Create, one fewer at the end of Destroy or when the test
// takes a detached item. Violations are counted, not asserted, so that the
// factory can be called from the pool's goroutines.
type stressFactory struct {
	mu         sync.Mutex
	live       int
	peak       int
	max        int
	violations atomic.Int64
	next       atomic.Int64
	failEvery  atomic.Int64 // every n-th Create fails; 0: none
}

func (f *stressFactory) Create(ctx context.Context) (*conn, error) {
	f.mu.Lock()
	f.live++
	if f.live > f.peak {
		f.peak = f.live
	}
	if f.live > f.max {
		f.violations.Add(1)
	}
	f.mu.Unlock()
	n := f.next.Add(1)
	if every := f.failEvery.Load(); every > 0 && n%every == 0 {
		f.gone()
		return nil, errBoom
	}
	return &conn{id: int(n)}, nil
}

func (f *stressFactory) gone() {
	f.mu.Lock()
	f.live--
	f.mu.Unlock()
}

func (f *stressFactory) destroy(c *conn) error {
	if c.inUse.Load() {
		panic(fmt.Sprintf("conn %d destroyed while a lease holds it", c.id))
	}
	err := c.Close()
	f.gone()
	return err
}

// TestStressCapAndExclusiveUse runs 48 goroutines that lease, try, time out,
// cancel, release, release twice, release stale copies, discard and detach,
// while others call Clear and read Stats. Throughout, it checks that no more
// than MaxSize items ever exist (counted by the factory itself), that no
// item is ever held by two leases, and that Stats stays within bounds.
func TestStressCapAndExclusiveUse(t *testing.T) {
	const maxSize, workers = 4, 48
	dur := 2 * time.Second
	if testing.Short() {
		dur = 300 * time.Millisecond
	}
	f := &stressFactory{max: maxSize}
	f.failEvery.Store(97)
	p, err := New[*conn](bg, f, Options[*conn]{
		MinSize: 2, MaxSize: maxSize, Destroy: f.destroy,
		LeaseTimeout: 5 * time.Millisecond,
	})
	require.NoError(t, err)

	stop := make(chan struct{})
	var ops, shared, leased, timedOut atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var stale Lease[*conn]
			for {
				select {
				case <-stop:
					return
				default:
				}
				ops.Add(1)
				ctx, cancel := bg, context.CancelFunc(func() {})
				switch rng.IntN(4) {
				case 0:
					ctx, cancel = context.WithTimeout(bg, time.Duration(rng.IntN(2000))*time.Microsecond)
				case 1:
					ctx, cancel = context.WithCancel(bg)
					if rng.IntN(2) == 0 {
						go cancel()
					}
				}
				var l Lease[*conn]
				var err error
				if rng.IntN(5) == 0 {
					l, err = p.TryLease(ctx)
				} else {
					l, err = p.Lease(ctx)
				}
				cancel()
				if errors.Is(err, ErrLeaseTimeout) {
					timedOut.Add(1)
				}
				if err != nil {
					if !errors.Is(err, ErrLeaseTimeout) && !errors.Is(err, ErrExhausted) &&
						!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
						!errors.Is(err, errBoom) {
						t.Errorf("unexpected lease error: %v", err)
					}
					continue
				}
				leased.Add(1)
				c := l.Value()
				if !c.inUse.CompareAndSwap(false, true) {
					shared.Add(1)
				}
				stale.Release() // a handle from an earlier lease: must do nothing
				if rng.IntN(8) == 0 {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				}
				switch rng.IntN(20) {
				case 0:
					c.inUse.Store(false)
					l.Discard()
				case 1:
					c.inUse.Store(false)
					// The test takes the item out: the factory's count
					// drops before the pool frees the permit.
					f.gone()
					l.Detach()
					_ = c.Close()
				default:
					c.inUse.Store(false)
					l.Release()
				}
				l.Release() // double release: a no-op
				stale = l
			}
		}()
	}

	// Clear during leases, and Stats read while the load runs.
	var checks atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := p.Stats()
			checks.Add(1)
			if s.ActiveLeases > maxSize || s.ItemsAllocated > maxSize || s.ItemsAvailable > maxSize {
				t.Errorf("Stats beyond MaxSize: %+v", s)
			}
			if inUse := int64(s.Created) - int64(s.Destroyed) - int64(s.Detached); inUse > maxSize {
				t.Errorf("Created-Destroyed-Detached = %d > MaxSize", inUse)
			}
			if checks.Load()%64 == 0 {
				p.Clear()
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()

	time.Sleep(dur)
	close(stop)
	wg.Wait()
	f.failEvery.Store(0)
	// Creations abandoned by canceled leases may still be finishing.
	require.Eventually(t, func() bool { return p.Stats().ActiveLeases == 0 },
		5*time.Second, time.Millisecond, "a permit was lost")

	assert.Zero(t, f.violations.Load(), "more than MaxSize items existed at once")
	assert.Zero(t, shared.Load(), "an item was held by two leases")
	s := p.Stats()
	assert.Equal(t, 0, s.QueuedLeases)
	assert.Equal(t, s.Created, s.Destroyed+s.Detached+uint64(s.ItemsAllocated))
	// The counters summed over the processors' slots add up exactly.
	assert.Equal(t, uint64(leased.Load()), s.Leases, "Stats.Leases against the leases that succeeded")
	assert.Equal(t, uint64(timedOut.Load()), s.Timeouts)
	assert.GreaterOrEqual(t, s.Waits, s.Timeouts, "every timeout waited")
	f.mu.Lock()
	assert.Equal(t, s.ItemsAllocated, f.live)
	assert.LessOrEqual(t, f.peak, maxSize)
	f.mu.Unlock()

	// Every permit is still there: MaxSize leases succeed without waiting.
	var all []Lease[*conn]
	for range maxSize {
		l, err := p.TryLease(bg)
		require.NoError(t, err)
		all = append(all, l)
	}
	for _, l := range all {
		l.Release()
	}
	require.NoError(t, p.Close())
	f.mu.Lock()
	assert.Zero(t, f.live)
	f.mu.Unlock()
	t.Logf("%d operations, %d Stats checks; %+v", ops.Load(), checks.Load(), s)
}

// TestCloseWhileWaitersWaitUnderLoad closes (or shuts down) a pool while
// leases are queued and items are in flight, and checks that every
// goroutine gets out, every item is destroyed, and no lease started after
// the close succeeds.
func TestCloseWhileWaitersWaitUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*Pool[*conn]) error
		// drained: when stop returns, every lease has ended and every
		// item has been destroyed.
		drained bool
	}{
		{"Close", (*Pool[*conn]).Close, false},
		{"Shutdown", func(p *Pool[*conn]) error { return p.Shutdown(bg) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const maxSize, workers = 3, 32
			f := &stressFactory{max: maxSize}
			p, err := New[*conn](bg, f, Options[*conn]{MaxSize: maxSize, Destroy: f.destroy})
			require.NoError(t, err)
			var closed atomic.Bool
			var leasedAfterClose atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for {
						late := closed.Load() // this Lease starts after stop returned
						l, err := p.Lease(bg)
						if err != nil {
							assert.ErrorIs(t, err, ErrClosed)
							return
						}
						if late {
							leasedAfterClose.Add(1)
						}
						time.Sleep(10 * time.Microsecond)
						l.Release()
					}
				})
			}
			require.Eventually(t, func() bool { return p.Stats().QueuedLeases > workers/2 },
				testWait, time.Millisecond)
			require.NoError(t, tc.stop(p))
			closed.Store(true)
			if tc.drained {
				f.mu.Lock()
				assert.Zero(t, f.live, "Shutdown returned with items alive")
				f.mu.Unlock()
				assert.Equal(t, 0, p.Stats().ActiveLeases)
			}
			wg.Wait()
			assert.Zero(t, leasedAfterClose.Load(), "no lease started after Close returned succeeds")
			assert.Zero(t, f.violations.Load())
			f.mu.Lock()
			assert.Zero(t, f.live, "every item destroyed")
			f.mu.Unlock()
			s := p.Stats()
			assert.Equal(t, 0, s.ItemsAllocated)
			assert.Equal(t, s.Created, s.Destroyed)
		})
	}
}

// TestCopiesRacingToEndALeaseEndItOnce has many goroutines end copies of one
// lease at once, with Release, Discard and Detach, round after round:
// exactly one call must take effect each time.
func TestCopiesRacingToEndALeaseEndItOnce(t *testing.T) {
	const copies = 16
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	rounds := 500
	if testing.Short() {
		rounds = 50
	}
	for range rounds {
		l := mustLease(t, p)
		var detached atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range copies {
			c := l // a copy per goroutine
			wg.Go(func() {
				<-start
				switch i % 3 {
				case 0:
					c.Release()
				case 1:
					c.Discard()
				case 2:
					// Detach panics when another copy won; that is its
					// contract for an ended lease.
					func() {
						defer func() { _ = recover() }()
						v := c.Detach()
						detached.Add(1)
						assert.NoError(t, tr.destroy(v))
					}()
				}
			})
		}
		close(start)
		wg.Wait()
		require.LessOrEqual(t, detached.Load(), int64(1))
		s := p.Stats()
		require.Equal(t, 0, s.ActiveLeases, "the lease ended and freed its permit once")
		require.Equal(t, s.Created, s.Destroyed+s.Detached+uint64(s.ItemsAllocated))
		require.EqualValues(t, s.ItemsAllocated, tr.live.Load(),
			"the item was destroyed at most once and kept only if released")
	}
}

func TestNameAppearsInErrorsAndStats(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	assert.Equal(t, "conn.Pool", p.Name())
	assert.Equal(t, "conn.Pool", p.Stats().Name)
	l, err := p.Lease(bg)
	require.NoError(t, err)
	_, err = p.TryLease(bg)
	assert.True(t, strings.Contains(err.Error(), "conn.Pool"), err.Error())
	l.Release()
}
