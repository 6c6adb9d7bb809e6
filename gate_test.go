package pool

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The capacity gate: leases wait in FIFO order, a released item or a freed
// place goes straight to the oldest waiter, a wait ends with LeaseTimeout or
// the caller's ctx, and at the instant of a grant giving up wins and the
// grant passes on (the package documentation's "Waiting and errors").

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

// testGate is a gate of size with held permits taken, its slots made as
// New makes them, for the tests that drive a gate by hand.
func testGate(size, held int) *gate[int] {
	g := &gate[int]{size: size, held: held}
	g.slots.init()
	return g
}

// TestHandOffDoesNotYield: a Release that hands its item to a waiting lease
// returns without yielding its processor, and the next lease on that
// processor steps aside for the woken lease (doc.go, "Waiting and errors"):
// on one processor the woken lease has not run when Release returns, and
// a TryLease right after finds the item back, released by the woken lease
// that ran first, rather than ErrExhausted. Every hand-off still counts as
// a wait. The portable build knows no processor, and steps aside only when
// its hint happens to match: the test needs the linked one.
func TestHandOffDoesNotYield(t *testing.T) {
	if !pinsProcessor {
		t.Skip("the poolportable build has no processor id to mark")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	const rounds = 40
	notYet, stepped := 0, 0
	for range rounds {
		held := mustLease(t, p)
		var got atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			if l, err := p.Lease(bg); assert.NoError(t, err) {
				got.Store(true)
				l.Release()
			}
		}()
		waitQueued(t, p, 1)
		held.Release()
		if !got.Load() {
			notYet++
		}
		if l, err := p.TryLease(bg); err == nil {
			if got.Load() {
				stepped++
			}
			l.Release()
		}
		<-done
	}
	// A preemption (10 ms) or the garbage collector may run the woken
	// lease early now and then: most rounds, not all.
	assert.Greater(t, notYet, rounds*3/4, "woken leases that had not run when Release returned")
	assert.Greater(t, stepped, rounds*3/4, "TryLeases that let the woken lease run first and found the item back")
	assert.EqualValues(t, rounds, p.Stats().Waits)
}

func TestLifecycleDiscardGivesWaiterRightToCreate(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	l := mustLease(t, p)
	item := l.Value()
	waiter := leaseAsync(context.Background(), p)
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, testWait, time.Millisecond)

	l.Discard()
	o := awaitLease(t, waiter) // granted once the Destroy has returned
	assert.True(t, item.closed.Load(), "Discard destroys the item")
	require.NoError(t, o.err)
	assert.Equal(t, 2, o.l.Value().id, "the waiter creates a fresh item with the freed permit")
	assert.Equal(t, int64(2), tr.created.Load())
	s := p.Stats()
	assert.Equal(t, uint64(1), s.Destroyed)
	assert.Equal(t, 1, s.ActiveLeases)
	o.l.Release()
	assertAtRest(t, p)
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

// blockingErrCtx is a Context whose Err, from its second call on, waits for
// a mutex: a Context's Err may take a lock (cancelCtx's does), and the
// gate calls it while holding its own.
type blockingErrCtx struct {
	context.Context
	calls atomic.Int32
	mu    *sync.Mutex
}

func (c *blockingErrCtx) Err() error {
	if c.calls.Add(1) > 1 {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	return c.Context.Err()
}

// TestLeaseWithAContextWhoseErrBlocks: the gate's critical sections run
// unpreemptible (see gate.go), and a goroutine in that state must not park,
// or the runtime throws. acquire calls the ctx's Err there, as the lease
// queues, so it must call it preemptible: here that Err parks for 20 ms
// while the gate's mutex is held, and the lease still waits and gets the
// item.
func TestLeaseWithAContextWhoseErrBlocks(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	first, err := p.Lease(context.Background())
	require.NoError(t, err)

	var mu sync.Mutex
	mu.Lock()
	ctx := &blockingErrCtx{Context: context.Background(), mu: &mu}
	got := leaseAsync(ctx, p)
	time.Sleep(20 * time.Millisecond) // the lease's Err call waits on mu, the gate's mutex held
	mu.Unlock()
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, 5*time.Second, time.Millisecond,
		"the lease queued after its ctx's Err returned")
	first.Release()
	o := awaitLease(t, got)
	require.NoError(t, o.err)
	o.l.Release()
	assert.GreaterOrEqual(t, ctx.calls.Load(), int32(2), "Err was called as the lease queued")
}

// grantAndGiveUp makes the next await find its grant and its giving up
// ready at the same instant: the hook, which runs inside await before it
// waits, releases the lease that the waiter is queued for and then ends
// the wait's ctx (or lets its LeaseTimeout elapse).
func grantAndGiveUp(t *testing.T, release func(), giveUp func()) {
	t.Helper()
	var once sync.Once
	testHooks.beforeWait = func() {
		once.Do(func() {
			release()
			giveUp()
		})
	}
	t.Cleanup(func() { testHooks.beforeWait = nil })
}

func TestCancelAtGrantPassesItemOn(t *testing.T) {
	const rounds = 40 // a select with both cases ready picks either: 2^-40 to pass by luck
	for round := range rounds {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
		held := mustLease(t, p)

		// A second waiter, queued behind the one that gives up, must get
		// the item in FIFO order.
		ctx, cancel := context.WithCancel(context.Background())
		grantAndGiveUp(t, held.Release, cancel)
		first := leaseAsync(ctx, p)
		require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 || len(first) == 1 }, testWait, time.Millisecond)
		o := awaitLease(t, first)
		require.ErrorIs(t, o.err, context.Canceled, "round %d: the canceled waiter returns its ctx's error", round)
		assert.Equal(t, Lease[*conn]{}, o.l)

		s := p.Stats()
		assert.Equal(t, 1, s.ItemsAvailable, "round %d: the item went back, idle: %+v", round, s)
		assert.Zero(t, s.ActiveLeases, "round %d", round)
		assert.EqualValues(t, 1, tr.created.Load(), "round %d: nothing lost, nothing created", round)
		assert.EqualValues(t, 1, s.Canceled)
		testHooks.beforeWait = nil
		require.NoError(t, p.Close())
	}
}

func TestCancelAtGrantHandsItemToNextWaiter(t *testing.T) {
	for round := range 20 {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
		held := mustLease(t, p)
		item := held.Value()

		second := make(chan leaseOutcome, 1)
		ctx, cancel := context.WithCancel(context.Background())
		grantAndGiveUp(t, func() {
			// Queue the second waiter behind this one, then release.
			go func() {
				l, err := p.Lease(context.Background())
				second <- leaseOutcome{l, err}
			}()
			for p.Stats().QueuedLeases < 2 {
				runtime.Gosched()
			}
			held.Release()
		}, cancel)
		o := awaitLease(t, leaseAsync(ctx, p))
		require.ErrorIs(t, o.err, context.Canceled, "round %d", round)
		o2 := awaitLease(t, second)
		require.NoError(t, o2.err)
		assert.Same(t, item, o2.l.Value(), "round %d: the next waiter gets the item", round)
		o2.l.Release()
		assert.EqualValues(t, 1, tr.created.Load())
		testHooks.beforeWait = nil
		require.NoError(t, p.Close())
	}
}

func TestLeaseTimeoutAtGrantPassesItemOn(t *testing.T) {
	for round := range 20 {
		p, _ := newTracked(t, Options[*conn]{MaxSize: 1, LeaseTimeout: time.Millisecond})
		held := mustLease(t, p)
		grantAndGiveUp(t, held.Release, func() { time.Sleep(5 * time.Millisecond) })
		o := awaitLease(t, leaseAsync(context.Background(), p))
		require.ErrorIs(t, o.err, ErrLeaseTimeout, "round %d: the elapsed LeaseTimeout wins", round)
		s := p.Stats()
		assert.Equal(t, 1, s.ItemsAvailable, "round %d: the item went back: %+v", round, s)
		assert.EqualValues(t, 1, s.Timeouts)
		testHooks.beforeWait = nil
		require.NoError(t, p.Close())
	}
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
		g := testGate(1, 1)
		w1, w2 := newWaiter(), newWaiter()
		g.waiters.push(w1, false)
		g.waiters.push(w2, false)
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
		g := testGate(1, 1)
		w1 := newWaiter()
		g.waiters.push(w1, false)
		grant(g, item, nil)
		leave(g, w1)
		assert.Equal(t, 0, g.held)
		assert.Equal(t, 1, len(g.idle))
	})
	t.Run("bare permit comes free", func(t *testing.T) {
		g := testGate(1, 1)
		w1 := newWaiter()
		g.waiters.push(w1, false)
		grant(g, nil, nil)
		leave(g, w1)
		assert.Equal(t, 0, g.held)
		assert.Equal(t, 0, len(g.idle))
	})
	t.Run("not granted: just leaves", func(t *testing.T) {
		g := testGate(1, 1)
		w1, w2 := newWaiter(), newWaiter()
		g.waiters.push(w1, false)
		g.waiters.push(w2, false)
		leave(g, w1)
		assert.Same(t, w2, g.waiters.head)
		assert.Equal(t, 1, g.waiters.n)
		assert.Equal(t, 1, g.held)
	})
	t.Run("closed after the grant: item stranded for the caller", func(t *testing.T) {
		g := testGate(1, 1)
		w1 := newWaiter()
		g.waiters.push(w1, false)
		grant(g, item, nil)
		g.close()
		stranded, closed := leave(g, w1)
		assert.Same(t, item, stranded)
		assert.False(t, closed)
		assert.Equal(t, 1, g.held, "the caller still holds the permit")
	})
	t.Run("gave up between the grant and the wake-up", func(t *testing.T) {
		g := testGate(1, 1)
		w1, w2 := newWaiter(), newWaiter()
		g.waiters.push(w1, false)
		g.waiters.push(w2, false)
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
		g := testGate(1, 1)
		w1 := newWaiter()
		g.waiters.push(w1, false)
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

// TestWaiterTimerReuse waits twice on one waiter record, whose timer fired
// during the first wait as the grant came. The second wait must last: a
// stale tick left in the timer's channel would end it at once with
// ErrLeaseTimeout "for 0s". TestWaiterTimerUnderAsyncTimerChan runs it
// again with the channels Go had before 1.23, where the tick does stay.
func TestWaiterTimerReuse(t *testing.T) {
	for round := range 20 {
		g := testGate(1, 1)
		g.slots.init()
		w := &waiter[int]{ready: make(chan struct{}, 1)}
		grant := func() {
			g.lock()
			g.grantOldest(nil, nil)
			g.unlock()
		}

		// The same waiter again: granted after 20 ms, well within its 10 s.
		waitAgain := func() {
			t.Helper()
			g.held = 1
			g.mu.Lock()
			g.enqueueLocked(w, false)
			g.mu.Unlock()
			time.AfterFunc(20*time.Millisecond, grant)
			_, waited, expired, err := g.await(context.Background(), w, 10*time.Second)
			require.NoError(t, err, "round %d: the wait lasted until the grant (waited %v), no stale tick ended it", round, waited)
			require.False(t, expired)
		}

		// Granted, and the 1 ms timer fired, before the wait looks: the
		// timeout wins.
		g.mu.Lock()
		g.enqueueLocked(w, false)
		g.mu.Unlock()
		testHooks.beforeWait = func() {
			grant()
			time.Sleep(3 * time.Millisecond)
		}
		_, _, expired, err := g.await(context.Background(), w, time.Millisecond)
		testHooks.beforeWait = nil
		require.ErrorIs(t, err, ErrLeaseTimeout, "round %d: the elapsed timeout wins over the grant", round)
		require.True(t, expired)
		require.Zero(t, g.held, "the granted permit was passed on")
		waitAgain()

		// Granted; the timer fires just after the wait took the grant.
		g.held = 1
		g.mu.Lock()
		g.enqueueLocked(w, false)
		g.mu.Unlock()
		// The timer gets 50 ms, so that a loaded machine that deschedules
		// the wait between arming it and looking does not fire it first.
		testHooks.beforeWait = grant
		testHooks.afterWait = func() { time.Sleep(60 * time.Millisecond) }
		_, _, _, err = g.await(context.Background(), w, 50*time.Millisecond)
		testHooks.beforeWait, testHooks.afterWait = nil, nil
		require.NoError(t, err, "round %d: granted before the timer fired", round)
		waitAgain()
	}
}

func TestWaiterTimerUnderAsyncTimerChan(t *testing.T) {
	if os.Getenv("POOL_TEST_CHILD") != "" {
		t.Skip("in the child already")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestWaiterTimerReuse$", "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=asynctimerchan=1", "POOL_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if bytes.Contains(out, []byte(`removed GODEBUG "asynctimerchan"`)) {
		t.Skipf("this Go (%s) has no asynchronous timer channels to fall back to", runtime.Version())
	}
	require.NoError(t, err, "under GODEBUG=asynctimerchan=1:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: TestWaiterTimerReuse", "the child ran the test:\n%s", out)
}

// TestMaxQueuedLeasesRefusesOneMore: with MaxQueuedLeases waiting, one more
// Lease fails at once with ErrExhausted naming the cap; Stats.Refused and
// pool.lease.errors (error.type exhausted) count it, and TryLease's
// refusals too (Options.MaxQueuedLeases).
func TestMaxQueuedLeasesRefusesOneMore(t *testing.T) {
	mp, r := mtProvider(t)
	p, _ := newTracked(t, Options[*conn]{Name: "capped", MaxSize: 1, MaxQueuedLeases: 2, MeterProvider: mp})
	held := mustLease(t, p)
	waiters := []<-chan leaseOutcome{leaseAsync(context.Background(), p), leaseAsync(context.Background(), p)}
	waitQueued(t, p, 2)

	_, err := p.Lease(context.Background())
	require.ErrorIs(t, err, ErrExhausted)
	assert.EqualError(t, err, `pool: exhausted: pool "capped": every item is in use (MaxSize 1) and MaxQueuedLeases (2) leases are waiting already`)
	_, err = p.TryLease(context.Background())
	require.ErrorIs(t, err, ErrExhausted)
	s := p.Stats()
	assert.EqualValues(t, 2, s.Refused)
	assert.Equal(t, 2, s.QueuedLeases, "the refused leases did not queue")
	assert.Zero(t, s.Timeouts)
	c := mtCollect(t, r)
	exhausted := mtAttrs("capped", "error.type", "exhausted")
	assert.EqualValues(t, 2, c.mtCounter(t, "pool.lease.errors", "{error}")[exhausted.Equivalent()])

	held.Release() // to one waiter, then the other, in their order of queueing
	o := awaitAny(t, waiters)
	require.NoError(t, o.err, "the queued leases are served")
	o.l.Release()
	o = awaitAny(t, waiters)
	require.NoError(t, o.err, "the queued leases are served")
	o.l.Release()
}

// awaitAny returns the outcome of whichever of the leases in chs ends
// first, within testWait.
func awaitAny(t *testing.T, chs []<-chan leaseOutcome) leaseOutcome {
	t.Helper()
	_, o := awaitWhich(t, chs...)
	return o
}

// awaitWhich is awaitAny that also says which lease ended: its index in
// chs.
func awaitWhich(t *testing.T, chs ...<-chan leaseOutcome) (int, leaseOutcome) {
	t.Helper()
	cases := make([]reflect.SelectCase, 0, len(chs)+1)
	for _, ch := range chs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(testWait))})
	i, v, _ := reflect.Select(cases)
	require.Less(t, i, len(chs), "no lease returned")
	return i, v.Interface().(leaseOutcome)
}

// stormSlack bounds how long past its deadline a lease of
// TestWaiterTimeoutStorm may return, beyond the stalls of the whole
// process that watchStalls saw: the scheduling delay of a loaded machine,
// generously, for an "at once" check; not a speed.
const stormSlack = time.Second

// watchStalls sleeps a millisecond at a time until stop is closed, and
// keeps in stall the longest it overslept: a stall of the whole process (a
// loaded machine, a long pause) delays every wake-up by as much, the
// leases' included, and a bound on how late they come must allow for it.
func watchStalls(stop <-chan struct{}, stall *atomic.Int64) {
	for {
		before := time.Now()
		select {
		case <-stop:
			return
		case <-time.After(time.Millisecond):
		}
		if over := int64(time.Since(before) - time.Millisecond); over > stall.Load() {
			stall.Store(over)
		}
	}
}

// stormWaiter is what one waiter of TestWaiterTimeoutStorm saw.
type stormWaiter struct {
	start, returned time.Time
	ctxDeadline     time.Time // zero: none, only LeaseTimeout
	err             error
}

// TestWaiterTimeoutStorm sends 200 waiters with short deadlines at a pool
// of 4 whose items 3 holders keep a few milliseconds at a time, and checks
// every lease against its deadline, while the invariants hold throughout
// ("Waiting and errors": the wait ends with ErrLeaseTimeout after
// LeaseTimeout or with ctx.Err() when the ctx ends first, and a caller that
// gave up never walks away with an item; "Stats").
//
// What is exact: a wait never ends early. A lease that failed with
// ErrLeaseTimeout returned at least LeaseTimeout after it was called (its
// timer starts after the call, and fires no sooner), one that failed with
// context.DeadlineExceeded at or after its ctx's deadline (the ctx ends no
// sooner). What is not: how late. The timer's firing and the waiter's
// wake-up take what the scheduler gives them, and a grant that reaches the
// waiter after its deadline, before its timer has fired, is taken, rightly:
// giving up wins only over a grant that finds it ready. So a failure, and a
// grant, must come within stormSlack of the deadline, no more: a waiter
// that outlived its deadline by more ignored it.
//
// Waiters whose only deadline is a LeaseTimeout longer than the storm are
// long enough: every one of them is served. At the end the pool is whole:
// every item accounted for, no lease queued, MaxSize leasable at once.
func TestWaiterTimeoutStorm(t *testing.T) {
	cases := []struct {
		name         string
		leaseTimeout time.Duration
		onlyTimeout  int // every onlyTimeout-th waiter has no ctx deadline, LeaseTimeout only
		long         bool
	}{
		// LeaseTimeout far beyond the storm: the waiters without a ctx
		// deadline are long enough, the others end by their ctx.
		{name: "ctx deadlines", leaseTimeout: testWait, onlyTimeout: 4, long: true},
		// LeaseTimeout short: half the waiters end by it, the others by
		// their ctx or by it, whichever is earlier.
		{name: "LeaseTimeout and ctx deadlines", leaseTimeout: 15 * time.Millisecond, onlyTimeout: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const maxSize, holders, waiters = 4, 3, 200
			p, tr := newTracked(t, Options[*conn]{MaxSize: maxSize, LeaseTimeout: tc.leaseTimeout})

			stop := make(chan struct{})
			var holderLeases, holderTimeouts atomic.Int64
			var load sync.WaitGroup
			for range holders {
				load.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						l, err := p.Lease(context.Background())
						if errors.Is(err, ErrLeaseTimeout) {
							holderTimeouts.Add(1)
							continue
						}
						if !assert.NoError(t, err) {
							return
						}
						holderLeases.Add(1)
						time.Sleep(3 * time.Millisecond) // holds slowly
						l.Release()
					}
				})
			}
			var stall atomic.Int64
			load.Go(func() { watchStalls(stop, &stall) })
			load.Go(func() {
				for {
					checkInvariants(t, p, tr.live.Load)
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Microsecond):
					}
				}
			})

			seen := make([]stormWaiter, waiters)
			begin := make(chan struct{})
			var wg sync.WaitGroup
			for i := range waiters {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(i), 0))
					<-begin
					w := &seen[i]
					ctx := context.Background()
					w.start = time.Now()
					if i%tc.onlyTimeout != 0 {
						w.ctxDeadline = w.start.Add(time.Millisecond + time.Duration(rng.Int64N(int64(30*time.Millisecond))))
						var cancel context.CancelFunc
						ctx, cancel = context.WithDeadline(ctx, w.ctxDeadline)
						defer cancel()
					}
					l, err := p.Lease(ctx)
					w.returned, w.err = time.Now(), err
					if err == nil {
						// At least a millisecond: the items serve a few
						// waiters a millisecond, and the storm outlasts the
						// deadlines.
						time.Sleep(time.Millisecond + time.Duration(rng.Int64N(int64(time.Millisecond))))
						l.Release()
					}
				})
			}
			close(begin)
			wg.Wait()
			close(stop)
			load.Wait()

			slack := stormSlack + time.Duration(stall.Load())
			var served, timedOut, ctxEnded int
			for i, w := range seen {
				deadline := w.start.Add(tc.leaseTimeout)
				if !w.ctxDeadline.IsZero() && w.ctxDeadline.Before(deadline) {
					deadline = w.ctxDeadline
				}
				late := w.returned.Sub(deadline)
				switch {
				case w.err == nil:
					served++
					assert.LessOrEqual(t, late, slack, "waiter %d was granted %v past its deadline", i, late)
				case errors.Is(w.err, ErrLeaseTimeout):
					timedOut++
					assert.GreaterOrEqual(t, w.returned.Sub(w.start), tc.leaseTimeout, "waiter %d timed out before LeaseTimeout", i)
					assert.LessOrEqual(t, late, slack, "waiter %d timed out %v past its deadline", i, late)
				case errors.Is(w.err, context.DeadlineExceeded):
					ctxEnded++
					if assert.False(t, w.ctxDeadline.IsZero(), "waiter %d has no ctx deadline", i) {
						assert.False(t, w.returned.Before(w.ctxDeadline), "waiter %d ended by its ctx %v before its deadline", i, w.ctxDeadline.Sub(w.returned))
					}
					assert.LessOrEqual(t, late, slack, "waiter %d gave up %v past its deadline", i, late)
				default:
					t.Errorf("waiter %d: %v", i, w.err)
				}
				if tc.long && w.ctxDeadline.IsZero() {
					assert.NoError(t, w.err, "waiter %d, whose deadline is long enough, is served", i)
				}
			}
			t.Logf("%d waiters: %d served, %d timed out, %d ended by their ctx; holders: %d leases, %d timeouts; longest stall %v",
				waiters, served, timedOut, ctxEnded, holderLeases.Load(), holderTimeouts.Load(), time.Duration(stall.Load()))
			// That the storm tried what it should: deadlines ran out, and,
			// with LeaseTimeout far, the waiters it spares were served.
			// With LeaseTimeout short, a stall of the machine longer than it
			// may leave none served, rightly.
			if tc.long {
				require.NotZero(t, ctxEnded, "the storm outlasted some ctx deadlines")
			} else {
				require.NotZero(t, timedOut, "the storm outlasted LeaseTimeout")
			}

			s := p.Stats()
			assert.Equal(t, uint64(served)+uint64(holderLeases.Load()), s.Leases, "%+v", s)
			assert.Equal(t, uint64(timedOut)+uint64(holderTimeouts.Load()), s.Timeouts, "%+v", s)
			assert.Equal(t, uint64(ctxEnded), s.Canceled, "%+v", s)
			assert.Zero(t, s.QueuedLeases, "%+v", s)
			assert.Zero(t, s.ActiveLeases, "%+v", s)
			assertAtRest(t, p)
			for i := range maxSize { // no permit lost
				l, err := p.TryLease(context.Background())
				require.NoError(t, err, "lease %d of MaxSize %d at once", i+1, maxSize)
				defer l.Release()
			}
		})
	}
}

// TestMaxQueuedLeasesShedsAtOnce sends 80 goroutines, ten times MaxSize +
// MaxQueuedLeases, each leasing again and again with a long LeaseTimeout,
// at a pool of 4 whose items they keep a millisecond: a lease that would
// wait behind MaxQueuedLeases others fails at once with ErrExhausted,
// naming the cap, and counts in Stats.Refused ("Waiting and errors"; the
// doc comments of Options.MaxQueuedLeases and Stats.Refused). Every lease
// is served or refused, none times out, and the queue never grows past the
// cap while the load runs.
func TestMaxQueuedLeasesShedsAtOnce(t *testing.T) {
	const maxSize, maxQueued = 4, 4
	const goroutines, rounds = 10 * (maxSize + maxQueued), 10
	// atOnce bounds how long a refusal may take, beyond the stalls of the
	// whole process that watchStalls saw: generously, for a loaded machine;
	// an "at once" check, not a speed. That no refused lease queued is the
	// Waits check's to see, exactly.
	const atOnce = 100 * time.Millisecond
	p, tr := newTracked(t, Options[*conn]{Name: "shed", MaxSize: maxSize, MaxQueuedLeases: maxQueued, LeaseTimeout: testWait})

	stop := make(chan struct{})
	var deepest, stall atomic.Int64
	var checker sync.WaitGroup
	checker.Go(func() { watchStalls(stop, &stall) })
	checker.Go(func() {
		for {
			s := p.Stats()
			checkStats(t, s, tr.live.Load, 0)
			if q := int64(s.QueuedLeases); q > deepest.Load() {
				deepest.Store(q)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Microsecond):
			}
		}
	})

	var served, refused, slowest atomic.Int64 // slowest: the longest refusal
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			<-start
			for range rounds {
				begin := time.Now()
				l, err := p.Lease(context.Background())
				took := time.Since(begin)
				switch {
				case err == nil:
					served.Add(1)
					time.Sleep(time.Millisecond)
					l.Release()
				case errors.Is(err, ErrExhausted):
					refused.Add(1)
					for old := slowest.Load(); int64(took) > old && !slowest.CompareAndSwap(old, int64(took)); old = slowest.Load() {
					}
					assert.Contains(t, err.Error(), "MaxQueuedLeases (4)")
				default:
					t.Errorf("a lease neither served nor refused: %v", err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(stop)
	checker.Wait()

	t.Logf("%d leases served, %d refused, the longest refusal in %v; queue %d deep at most",
		served.Load(), refused.Load(), time.Duration(slowest.Load()), deepest.Load())
	require.NotZero(t, refused.Load(), "the load overflowed the queue")
	assert.Equal(t, int64(goroutines*rounds), served.Load()+refused.Load())
	assert.LessOrEqual(t, deepest.Load(), int64(maxQueued), "more leases queued than MaxQueuedLeases")
	assert.LessOrEqual(t, time.Duration(slowest.Load()), atOnce+time.Duration(stall.Load()),
		"a refusal that was not at once (the longest stall seen: %v)", time.Duration(stall.Load()))
	s := p.Stats()
	assert.Zero(t, s.Timeouts, "%+v", s)
	assert.Equal(t, uint64(refused.Load()), s.Refused, "%+v", s)
	assert.Equal(t, uint64(served.Load()), s.Leases, "%+v", s)
	// Every lease that queued was served, as none timed out: a refused
	// lease that had queued first would count in Waits beyond them.
	assert.LessOrEqual(t, s.Waits, s.Leases, "%+v", s)
	assert.Zero(t, s.QueuedLeases, "%+v", s)
	assertAtRest(t, p)
}

// errNotReady is the check's error of an item that failOnDemand fails.
var errNotReady = errors.New("not ready")

// failOnDemand makes lp, a pool's Preparer, check each of items when the
// test says: the check tells checking[c] that it has begun, and fails with
// the error the test sends on verdict[c] (nil passes it). Every other item
// passes.
func failOnDemand(lp *testPreparer, items ...*conn) (checking map[*conn]chan struct{}, verdict map[*conn]chan error) {
	checking, verdict = map[*conn]chan struct{}{}, map[*conn]chan error{}
	for _, c := range items {
		checking[c], verdict[c] = make(chan struct{}), make(chan error)
	}
	lp.set(func(_ context.Context, c *conn) (bool, error) {
		if _, ok := checking[c]; !ok {
			return true, nil
		}
		checking[c] <- struct{}{}
		err := <-verdict[c]
		return err == nil, err
	}, nil)
	return checking, verdict
}

// TestRequeuedLeasesKeepTheirOrder: leases that wait again after their
// items failed their checks are served before every lease that queued
// after them, and among themselves in the order they came back to the
// queue ("Waiting and errors"). Two leases are handed an item each and a
// third queues; the items' checks fail, the first's first, and their
// Destroy calls, held until both leases wait again, then end one at a
// time, each giving its room to the oldest waiter.
func TestRequeuedLeasesKeepTheirOrder(t *testing.T) {
	lp := &testPreparer{}
	destroyed := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
	p, _ := newTracked(t, Options[*conn]{MaxSize: 2, Preparer: lp, Destroy: func(c *conn) error {
		if ch, ok := destroyed[c.id]; ok {
			<-ch
		}
		return c.Close()
	}})
	t.Cleanup(func() { // before Close, which waits for them
		for _, ch := range destroyed {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	})
	h1, h2 := mustLease(t, p), mustLease(t, p)
	c1, c2 := h1.Value(), h2.Value()
	require.Equal(t, []int{1, 2}, []int{c1.id, c2.id})
	checking, verdict := failOnDemand(lp, c1, c2)

	a1 := leaseAsync(bg, p)
	waitQueued(t, p, 1)
	a2 := leaseAsync(bg, p)
	waitQueued(t, p, 2)
	h1.Release() // to a1
	recvOrFail(t, checking[c1], "a1's check")
	h2.Release() // to a2
	recvOrFail(t, checking[c2], "a2's check")
	b := leaseAsync(bg, p)
	waitQueued(t, p, 1)

	verdict[c1] <- errNotReady
	waitQueued(t, p, 2) // a1 waits again
	verdict[c2] <- errNotReady
	waitQueued(t, p, 3) // and a2

	for want, id := range []int{1, 2} {
		close(destroyed[id]) // its room goes to the oldest waiter
		i, o := awaitWhich(t, a1, a2, b)
		if o.err == nil {
			defer o.l.Release()
		}
		require.NoError(t, o.err)
		require.Equal(t, want, i, "the room of item %d went to lease %d (0: a1, 1: a2, 2: b)", id, i)
	}
	assert.Equal(t, 1, p.Stats().QueuedLeases, "b waits still")
}

// TestLeaseTimeoutCountsFromTheCall: LeaseTimeout bounds every wait of a
// lease together, from its call: a lease whose item fails its check waits
// again only for what is left of it, and ErrLeaseTimeout's message gives
// the time since the call (Options.LeaseTimeout; "Waiting and errors").
// The lease waits a moment for its item, or takes it idle, checks it until
// 80% of LeaseTimeout has passed, and waits again for a room that the
// failed item's Destroy keeps. Had that wait a LeaseTimeout of its own,
// the lease would return after 180% of it; it returns after 100%, plus
// what the timer and the scheduler take, which on a loaded machine is much
// less than the 80% allowed.
func TestLeaseTimeoutCountsFromTheCall(t *testing.T) {
	const leaseTimeout = 500 * time.Millisecond
	for name, queued := range map[string]bool{"handed its item": true, "took its item idle": false} {
		t.Run(name, func(t *testing.T) {
			lp := &testPreparer{}
			destroyed := make(chan struct{})
			p, _ := newTracked(t, Options[*conn]{Name: "counted", MaxSize: 1, LeaseTimeout: leaseTimeout, Preparer: lp,
				Destroy: func(c *conn) error {
					<-destroyed
					return c.Close()
				}})
			t.Cleanup(func() { close(destroyed) }) // before Close, which waits for it
			held := mustLease(t, p)
			item := held.Value()
			checking, verdict := failOnDemand(lp, item)
			if !queued {
				held.Release()
			}

			called := time.Now()
			got := leaseAsync(bg, p)
			if queued {
				waitQueued(t, p, 1)
				held.Release()
			}
			recvOrFail(t, checking[item], "the check")
			time.Sleep(time.Until(called.Add(leaseTimeout * 8 / 10)))
			verdict[item] <- errNotReady
			o := awaitLease(t, got)
			took := time.Since(called)

			require.ErrorIs(t, o.err, ErrLeaseTimeout)
			assert.GreaterOrEqual(t, took, leaseTimeout, "the lease gave up early")
			assert.Less(t, took, leaseTimeout*18/10, "the last wait was not bounded by what was left of LeaseTimeout")
			waits := 1
			if queued {
				waits = 2
			}
			assert.EqualValues(t, waits, p.Stats().Waits)
			m := regexp.MustCompile(`every item stayed in use \(MaxSize 1\) for (\S+);`).FindStringSubmatch(o.err.Error())
			require.NotNil(t, m, "%v", o.err)
			d, err := time.ParseDuration(m[1])
			require.NoError(t, err)
			assert.GreaterOrEqual(t, d, leaseTimeout, "the message gives the time since the call: %v", o.err)
		})
	}
}

// TestLeaseTimeoutPastItsDeadline: a lease whose item fails its check
// after LeaseTimeout has passed since its call does not wait again: it
// fails with ErrLeaseTimeout, whose message gives the time since the call;
// but it still takes an item that it finds idle (Options.LeaseTimeout;
// "Waiting and errors"). The check itself is not cut short.
func TestLeaseTimeoutPastItsDeadline(t *testing.T) {
	const leaseTimeout = 20 * time.Millisecond
	for name, idle := range map[string]bool{"none idle": false, "another idle": true} {
		t.Run(name, func(t *testing.T) {
			lp := &testPreparer{}
			destroyed := make(chan struct{})
			p, tr := newTracked(t, Options[*conn]{Name: "late", MaxSize: 2, LeaseTimeout: leaseTimeout, Preparer: lp,
				Destroy: func(c *conn) error {
					<-destroyed
					return c.Close()
				}})
			t.Cleanup(func() { close(destroyed) }) // before Close, which waits for it
			held, other := mustLease(t, p), mustLease(t, p)
			item, otherItem := held.Value(), other.Value()
			checking, verdict := failOnDemand(lp, item)
			got := leaseAsync(bg, p)
			waitQueued(t, p, 1)
			// The lease read its clock before it queued, so before now.
			waitedAt := time.Now()
			held.Release() // to the lease, which checks it
			recvOrFail(t, checking[item], "the check")
			if idle {
				other.Release()
			} else {
				defer other.Release()
			}
			time.Sleep(time.Until(waitedAt.Add(5 * leaseTimeout)))
			verdict[item] <- errNotReady
			o := awaitLease(t, got)

			s := p.Stats()
			if idle {
				require.NoError(t, o.err, "an item idle is taken without waiting")
				assert.Same(t, otherItem, o.l.Value())
				o.l.Release()
				assert.EqualValues(t, 1, s.Waits, "%+v", s)
				return
			}
			require.ErrorIs(t, o.err, ErrLeaseTimeout)
			m := regexp.MustCompile(`^pool: lease timeout: pool "late": every item stayed in use \(MaxSize 2\) for (\S+); [01] leases waiting, 0 items being created, 1 being destroyed$`).
				FindStringSubmatch(o.err.Error())
			require.NotNil(t, m, "%v", o.err)
			d, err := time.ParseDuration(m[1])
			require.NoError(t, err)
			assert.GreaterOrEqual(t, d, 5*leaseTimeout, "the message gives the time since the call: %v", o.err)
			assert.EqualValues(t, 1, s.Timeouts, "%+v", s)
			assert.EqualValues(t, 2, tr.created.Load(), "nothing created for the lease that timed out")
		})
	}
}

// TestWaitQueueTickets: the queue stays in the order of the tickets, each
// lease's place in line. A lease queued again keeps the ticket of its first
// wait: it goes ahead of the leases that first queued after it, behind
// those that queued before it, whatever order they came back in and
// however waiters leave the queue.
func TestWaitQueueTickets(t *testing.T) {
	var q waitQueue[int]
	ws, names := map[string]*waiter[int]{}, map[*waiter[int]]string{}
	w := func(name string) *waiter[int] {
		if ws[name] == nil {
			ws[name] = &waiter[int]{}
			names[ws[name]] = name
		}
		return ws[name]
	}
	// order lists the queue from its head, and checks it from its tail.
	order := func() (fwd []string) {
		var back []string
		for x := q.head; x != nil; x = x.next {
			fwd = append(fwd, names[x])
		}
		for x := q.tail; x != nil; x = x.prev {
			back = append([]string{names[x]}, back...)
		}
		require.Equal(t, fwd, back, "the links agree")
		require.Len(t, fwd, q.n)
		return fwd
	}
	// again queues w again with the ticket it had, as a lease whose item
	// failed its check does.
	again := func(name string, ticket uint64) {
		w(name).ticket = ticket
		q.push(w(name), true)
	}
	for _, name := range []string{"w1", "w2", "w3", "w4"} {
		q.push(w(name), false)
	}
	t1, t2, t3 := w("w1").ticket, w("w2").ticket, w("w3").ticket
	require.Less(t, t1, t2)
	q.remove(w("w1"))
	q.remove(w("w2"))
	q.remove(w("w3")) // granted: the three hold items, w4 waits
	again("w2", t2)   // w2's item failed first
	again("w1", t1)   // then w1's: it first queued before w2
	assert.Equal(t, []string{"w1", "w2", "w4"}, order())
	again("w3", t3)
	assert.Equal(t, []string{"w1", "w2", "w3", "w4"}, order())
	again("n0", 0) // a lease that never waited: nobody waited when it took its item
	assert.Equal(t, []string{"n0", "w1", "w2", "w3", "w4"}, order())
	q.remove(w("w4")) // the tail
	q.remove(w("w1")) // in the middle
	q.push(w("w5"), false)
	again("w1", t1)
	assert.Equal(t, []string{"n0", "w1", "w2", "w3", "w5"}, order())
	for _, name := range []string{"n0", "w1", "w2", "w3", "w5"} {
		q.remove(w(name))
	}
	again("w2", t2) // into an empty queue
	q.push(w("w6"), false)
	assert.Equal(t, []string{"w2", "w6"}, order())
}
