package pool

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The idle ring's tests. The slots' protocol is in ring.go; these tests
// drive its interleavings by hand on a gate, and race them under load on a
// pool. The whole package also runs with -tags poolportable in CI, where
// the processor hint comes from a sync.Pool and goroutines share slots.

func TestRingSlotsHaveACacheLineEach(t *testing.T) {
	assert.Equal(t, uintptr(cacheLine), unsafe.Sizeof(slot[int]{}))
	assert.Equal(t, uintptr(cacheLine), unsafe.Sizeof(slot[[4]int]{}), "the slot's size is not T's")
	assert.Equal(t, uintptr(cacheLine), unsafe.Sizeof(slots[int]{}), "the header has a line of its own")

	var r slots[int]
	r.init()
	assert.GreaterOrEqual(t, len(r.s), 1)
	assert.Zero(t, len(r.s)&(len(r.s)-1), "a power of two")
	assert.Equal(t, len(r.s)-1, r.mask)
}

func TestRingQueueIsFIFOAcrossGrowth(t *testing.T) {
	var q idleQueue[int]
	es := make([]*entry[int], 20)
	for i := range es {
		es[i] = &entry[int]{value: i}
	}
	// Take from the head before growing, so the growth must keep the order.
	for _, e := range es[:6] {
		q.push(e)
	}
	assert.Equal(t, es[:4], q.popOldest(nil, 4))
	for _, e := range es[6:] {
		q.push(e)
	}
	assert.Equal(t, 16, len(q))
	assert.Same(t, es[19], q.popNewest(), "leases take the newest")
	assert.Equal(t, es[4:19], q.popOldest(nil, 100), "oldest first, as far as there are")
	assert.Nil(t, q.popNewest())
	for i, e := range q[:cap(q)] {
		assert.Nil(t, e, "slot %d still references an entry given out", i)
	}
}

// rgGate returns a gate of size 1 whose one permit is held, as by a lease
// about to release e.
func rgGate() (*gate[int], *entry[int]) {
	return testGate(1, 1), &entry[int]{value: 7}
}

// rgGranted returns the entry granted to w, failing if w was not woken.
func rgGranted(t *testing.T, w *waiter[int]) *entry[int] {
	t.Helper()
	select {
	case <-w.ready:
		require.True(t, w.granted)
		require.NoError(t, w.err)
		return w.e
	default:
		t.Fatal("the waiter was not woken")
		return nil
	}
}

// An item parked in a slot while a lease is on its way to queueing reaches
// that lease, whichever of the three orders the two take.
func TestRingParkRacingAWaiterReachesIt(t *testing.T) {
	newWaiter := func() *waiter[int] { return &waiter[int]{ready: make(chan struct{}, 1)} }

	t.Run("parked before the lease looked: taken without queueing", func(t *testing.T) {
		g, e := rgGate()
		require.True(t, g.slots.park(e))
		got, w, a := g.acquire(context.Background(), mayWait, true, 0)
		require.Equal(t, admitted, a)
		assert.Same(t, e, got, "the lease found it in the slot")
		assert.Nil(t, w, "without queueing")
		assert.Equal(t, 1, g.held, "the permit came with the item")
	})

	t.Run("parked between the lease's look and its queueing", func(t *testing.T) {
		g, e := rgGate()
		w := newWaiter()
		s := rgMine(&g.slots)
		g.lock()
		_, a := g.acquireLocked(mayWait, true) // the lease looks: no permit, nothing idle
		require.Equal(t, queued, a)
		require.True(t, s.e.CompareAndSwap(nil, e)) // the release parks ...
		g.enqueueLocked(w, false)                   // ... as the lease queues
		g.unlock()
		assert.True(t, g.slots.confirm(s, e), "the release finds its item gone: nothing left to do")
		assert.Same(t, e, rgGranted(t, w), "queueing stole the parked item for the waiter")
		assert.Equal(t, 1, g.held)
		assert.Zero(t, g.waiters.n)
		assert.True(t, g.slots.bypass.Load(), "bypass stays on past the last waiter ...")
		g.free()
		assert.False(t, g.slots.bypass.Load(), "... until room comes free with nobody waiting (see setBypass)")
	})

	t.Run("parked after bypass came on", func(t *testing.T) {
		g, e := rgGate()
		w := newWaiter()
		g.lock()
		g.enqueueLocked(w, false) // the lease queues; bypass comes on
		g.unlock()
		require.True(t, g.slots.bypass.Load())
		s := rgMine(&g.slots)
		require.True(t, s.e.CompareAndSwap(nil, e)) // the release had looked before
		require.False(t, g.slots.confirm(s, e), "the release sees bypass and takes its item back")
		assert.Nil(t, s.e.Load())
		ok := g.giveBack(e)
		require.True(t, ok) // the release's slow path
		assert.Same(t, e, rgGranted(t, w))
		assert.Equal(t, 1, g.held)
	})

	t.Run("a release with bypass on does not park", func(t *testing.T) {
		g, e := rgGate()
		g.lock()
		g.enqueueLocked(newWaiter(), false)
		g.unlock()
		assert.False(t, g.slots.park(e))
		assert.Zero(t, g.slots.scan().parked)
	})
}

// A lease that misses its own slot takes an item parked in any other slot
// before it creates or queues: reuse comes first.
func TestRingLeaseStealsFromOtherSlots(t *testing.T) {
	g, e := rgGate()
	for i := range g.slots.s {
		g.slots.s[i].e.Store(e)
		got, a := g.acquireLocked(mayWait, true)
		require.Equal(t, admitted, a, "slot %d", i)
		assert.Same(t, e, got, "slot %d", i)
		assert.Equal(t, 1, g.held, "the parked item's permit came with it")
		assert.Nil(t, g.slots.s[i].e.Load())
	}
}

// Releases racing leases that are about to queue, many times over: every
// lease gets the item, no item is stranded in a slot, and at the end of
// every round the pool is at rest with its one item idle.
func TestRingReleaseRacingQueueingLease(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	const rounds = 2000
	for round := range rounds {
		held := mustLease(t, p)
		got := make(chan error, 1)
		start := make(chan struct{})
		go func() {
			<-start
			l, err := p.Lease(ctx) // queues, or finds the item parked
			if err == nil {
				l.Release()
			}
			got <- err
		}()
		close(start)
		if round%2 == 1 {
			time.Sleep(time.Duration(round%7) * time.Microsecond) // vary the overlap
		}
		held.Release()
		require.NoError(t, <-got, "round %d: the lease never got the item", round)
		s := p.Stats()
		require.Equal(t, 0, s.ActiveLeases, "round %d: %+v", round, s)
		require.Equal(t, 1, s.ItemsAvailable, "round %d: %+v", round, s)
		require.Zero(t, s.QueuedLeases, "round %d", round)
	}
	assert.Equal(t, int64(1), tr.created.Load(), "one item served every round")
	s := p.Stats()
	assert.Equal(t, uint64(2*rounds), s.Leases)
	assert.Positive(t, s.Waits, "some rounds queued (else the test raced nothing)")
}

// Parked items are idle items: Stats counts them as available, and Clear
// and Close destroy them, while many goroutines park and take.
func TestRingParkedItemsAreIdleForStatsClearAndClose(t *testing.T) {
	const size = 8
	p, tr := newTracked(t, Options[*conn]{MaxSize: size})
	ctx := context.Background()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := p.Lease(ctx)
				if err != nil {
					return // closed
				}
				l.Release()
			}
		})
	}
	for range 300 {
		s := p.Stats()
		require.LessOrEqual(t, s.ActiveLeases+s.ItemsAvailable, size, "%+v", s)
		require.GreaterOrEqual(t, s.ActiveLeases, 0, "%+v", s)
		require.LessOrEqual(t, tr.live.Load(), int64(size))
		p.Clear()
	}
	close(stop)
	wg.Wait()
	awaitDestroys(t, p) // of the items the Clears took out
	awaitBackground(t, p)

	s := p.Stats()
	assert.Zero(t, s.ActiveLeases)
	assert.Equal(t, s.ItemsAllocated, s.ItemsAvailable)
	assert.Equal(t, int64(s.ItemsAvailable), tr.live.Load(), "every idle item, parked or queued, is counted")
	p.Clear()
	awaitDestroys(t, p)
	assert.Zero(t, tr.live.Load(), "Clear destroyed the parked items too")
	assert.Zero(t, p.Stats().ItemsAvailable)

	// Park a few again, then Close: none survives in a slot.
	ls := []Lease[*conn]{mustLease(t, p), mustLease(t, p), mustLease(t, p)}
	for _, l := range ls {
		l.Release()
	}
	require.NoError(t, p.Close())
	assert.Zero(t, tr.live.Load(), "Close destroyed the parked items")
	assert.Zero(t, p.g.slots.scan().parked)
	assertAtRest(t, p)
}

// The fast path reads no clock unless expiry asks for one: a lease and
// release of an idle item with IdleTimeout and MaxLifetime zero never
// calls the pool's clock. With IdleTimeout set, the same loop does, which
// shows the counting clock is the one the pool reads.
func TestRingFastPathReadsNoClock(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options[*conn]
		wantReads bool
	}{
		{"plain", Options[*conn]{MinSize: 2, MaxSize: 2}, false},
		{"with a Preparer", Options[*conn]{MinSize: 2, MaxSize: 2, Preparer: bnReady{}}, false},
		{"with IdleTimeout", Options[*conn]{MinSize: 2, MaxSize: 2, IdleTimeout: time.Hour}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newTracked(t, tt.opts)
			var reads atomic.Int64
			p.clk.fake = func() int64 { reads.Add(1); return 0 }
			for range 100 {
				mustLease(t, p).Release()
			}
			if tt.wantReads {
				assert.Positive(t, reads.Load())
			} else {
				assert.Zero(t, reads.Load(), "the lease path read the clock")
			}
		})
	}
}

// TestRingLeaseCountExactWhenProcessorsOutnumberSlots raises GOMAXPROCS
// past the slots made at New, so that processors share slots, and checks
// that Stats.Leases and Stats.Waits still count every lease and every wait
// exactly: a slot's own processor counts without a locked instruction (see
// countLease), so a second writer there would lose counts.
// The waits are counted independently through testHooks.beforeWait, which
// await calls once per wait; MaxSize 4 under 32 goroutines makes many.
func TestRingLeaseCountExactWhenProcessorsOutnumberSlots(t *testing.T) {
	var waits atomic.Uint64
	testHooks.beforeWait = func() { waits.Add(1) }
	defer func() { testHooks.beforeWait = nil }()
	p, _ := newTracked(t, Options[*conn]{MaxSize: 4})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(len(p.g.slots.s) * 4))
	var ok atomic.Uint64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 2000 {
				l, err := p.Lease(context.Background())
				if err != nil {
					t.Errorf("Lease: %v", err)
					return
				}
				ok.Add(1)
				runtime.Gosched() // hold the item a moment, so that leases wait
				l.Release()
			}
		})
	}
	wg.Wait()
	s := p.Stats()
	assert.Equal(t, ok.Load(), s.Leases)
	assert.Equal(t, waits.Load(), s.Waits)
	assert.NotZero(t, s.Waits, "no lease waited: the test checks nothing about Waits")
	assert.Positive(t, s.WaitTime)
}

// rgMine returns the calling processor's slot; migrating after costs only
// locality.
func rgMine[T any](r *slots[T]) *slot[T] {
	s := &r.s[procPin()&r.mask]
	procUnpin()
	return s
}
