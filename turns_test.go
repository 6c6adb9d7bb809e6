package pool

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The gate's turns to create (Options.MaxConcurrentCreates): taken with a
// bare permit, given back once, whatever ends the lease that took it.

// TestCancelAtTurnGrantPassesTurnOn: a lease waiting for a turn to create is
// granted one as its ctx ends. Giving up wins, and the turn goes on to the
// next waiting lease, which creates.
func TestCancelAtTurnGrantPassesTurnOn(t *testing.T) {
	for round := range 20 {
		p, tr := newTracked(t, Options[*conn]{MaxSize: 4, MaxConcurrentCreates: 1, CreateTimeout: 10 * time.Second})
		block := make(chan struct{})
		setBlock(tr, block)
		creator := leaseAsync(context.Background(), p) // takes the only turn, its factory blocked
		require.Eventually(t, func() bool { return tr.live.Load() == 1 }, testWait, time.Millisecond)

		var next <-chan leaseOutcome
		ctx, cancel := context.WithCancel(context.Background())
		grantAndGiveUp(t, func() {
			next = leaseAsync(context.Background(), p) // queued behind the lease that gives up
			require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 2 }, testWait, time.Millisecond)
			close(block) // the creation ends: its turn goes to the oldest waiter
			require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, testWait, time.Millisecond)
		}, cancel)
		o := awaitLease(t, leaseAsync(ctx, p))
		require.ErrorIs(t, o.err, context.Canceled, "round %d", round)

		c := awaitLease(t, creator)
		require.NoError(t, c.err)
		n := awaitLease(t, next)
		require.NoError(t, n.err, "round %d: the turn went on to the next lease", round)
		assert.EqualValues(t, 2, tr.created.Load(), "round %d: the creator's item and the next lease's", round)
		assert.Zero(t, creatingNow(p), "round %d: every turn given back", round)
		c.l.Release()
		n.l.Release()
		testHooks.beforeWait = nil
		require.NoError(t, p.Close())
	}
}

// TestCloseWhileLeasesWaitForATurn: Close wakes the leases waiting for a
// turn with ErrClosed, cancels the creation under way, and leaves no turn
// taken.
func TestCloseWhileLeasesWaitForATurn(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 8, MaxConcurrentCreates: 1, CreateTimeout: 10 * time.Second})
	setBlock(tr, make(chan struct{})) // never opened: Close's cancellation ends the creation
	var outs []<-chan leaseOutcome
	for range 6 {
		outs = append(outs, leaseAsync(context.Background(), p))
	}
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 5 }, testWait, time.Millisecond)
	s := p.Stats()
	assert.Equal(t, 1, s.Creating, "%+v", s)
	assert.Equal(t, 1, s.ItemsAllocated, "the waiting leases hold no permit: %+v", s)

	require.NoError(t, p.Close())
	for _, ch := range outs {
		assert.ErrorIs(t, awaitLease(t, ch).err, ErrClosed)
	}
	assert.Zero(t, creatingNow(p))
	assert.Zero(t, p.Stats().ActiveLeases)
}

// TestTurnsUnderChurn runs leases with ctxs that end at random instants
// (some at a grant), Discards that free permits, SetMaxSize and Clear
// against a cap of 2 creations, checking while it runs that no more than 2
// factory calls are under way and the Stats invariants hold; at rest no
// turn is taken.
func TestTurnsUnderChurn(t *testing.T) {
	const maxCreating = 2
	var inFlight, peak atomic.Int64
	var live atomic.Int64
	f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		skMax(&peak, n)
		live.Add(1)
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		if rand.IntN(10) == 0 {
			live.Add(-1)
			return nil, errBoom
		}
		return &conn{}, nil
	})
	p, err := New(context.Background(), f, Options[*conn]{
		MaxSize: 6, MaxConcurrentCreates: maxCreating, CreateTimeout: 10 * time.Second, MinIdle: 1,
		Destroy: func(c *conn) error { live.Add(-1); return c.Close() },
	})
	require.NoError(t, err)
	w := newSizeWindow(p)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(2000))*time.Microsecond)
				l, err := p.Lease(ctx)
				cancel()
				if err != nil {
					continue
				}
				if (i+j)%5 == 0 {
					l.Discard()
				} else {
					l.Release()
				}
			}
		})
	}
	wg.Go(func() {
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			if k%4 == 0 {
				p.Clear()
			} else {
				assert.NoError(t, w.setMaxSize(3+k%4))
			}
		}
	})
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := inFlight.Load(); n > maxCreating {
			t.Errorf("%d factory calls under way, more than MaxConcurrentCreates %d", n, maxCreating)
		}
		if n := creatingNow(p); n > maxCreating {
			t.Errorf("%d turns to create taken, more than MaxConcurrentCreates %d", n, maxCreating)
		}
		w.check(t, live.Load)
		time.Sleep(100 * time.Microsecond)
	}
	close(stop)
	wg.Wait()
	assert.LessOrEqual(t, peak.Load(), int64(maxCreating))
	require.Eventually(t, func() bool { return creatingNow(p) == 0 }, testWait, time.Millisecond, "every turn given back")
	assertAtRest(t, p)
	require.NoError(t, p.Close())
	assert.Zero(t, live.Load())
}

// TestNewSeedsWithinTheCap: New's own seeding of MinSize items calls the
// factory at most MaxConcurrentCreates at a time.
func TestNewSeedsWithinTheCap(t *testing.T) {
	var inFlight, peak atomic.Int64
	f := FactoryFunc[*conn](func(context.Context) (*conn, error) {
		skMax(&peak, inFlight.Add(1))
		defer inFlight.Add(-1)
		time.Sleep(2 * time.Millisecond)
		return &conn{}, nil
	})
	p, err := New(context.Background(), f, Options[*conn]{MinSize: 8, MaxSize: 8, MaxConcurrentCreates: 2, CreateTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer p.Close()
	assert.Equal(t, 8, p.Stats().ItemsAvailable)
	assert.LessOrEqual(t, peak.Load(), int64(2), "factory calls at once while New seeded")
}

// TestLeaseTimeoutAtTheCapSaysSo: a lease that timed out waiting for a turn
// to create says that the creations stayed at MaxConcurrentCreates, not
// that every item stayed in use.
func TestLeaseTimeoutAtTheCapSaysSo(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 4, MaxConcurrentCreates: 1, CreateTimeout: 10 * time.Second, LeaseTimeout: 20 * time.Millisecond})
	block := make(chan struct{})
	setBlock(tr, block)
	creator := leaseAsync(context.Background(), p)
	require.Eventually(t, func() bool { return tr.live.Load() == 1 }, testWait, time.Millisecond)
	_, err := p.Lease(context.Background())
	require.ErrorIs(t, err, ErrLeaseTimeout)
	assert.Contains(t, err.Error(), "no item came free, and the creations stayed at MaxConcurrentCreates (1)")
	assert.NotContains(t, err.Error(), "every item stayed in use")
	close(block)
	o := awaitLease(t, creator)
	require.NoError(t, o.err)
	o.l.Release()
}
