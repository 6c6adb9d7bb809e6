package pool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The upkeep goroutine of Options.UpkeepInterval. The tests run its rounds
// themselves, on the fake clock (the package documentation's "Upkeep").

func TestUpkeepDestroysExpiredIdleItemsWithoutALease(t *testing.T) {
	p, tr, clk := upkeptPool(t, Options[*conn]{MaxSize: 8, IdleTimeout: time.Minute})
	putIdle(t, p, 5)
	clk.advance(minutes(2))
	require.True(t, p.upkeepRound())
	s := p.Stats()
	assert.EqualValues(t, 5, s.IdleExpired)
	assert.Zero(t, s.ItemsAllocated)
	assert.Zero(t, tr.live.Load())
	assert.Zero(t, s.Leases-5, "no lease ran")
}

func TestUpkeepKeepsMinSizeThroughIdleExpiry(t *testing.T) {
	p, tr, clk := upkeptPool(t, Options[*conn]{MinSize: 2, MaxSize: 8, IdleTimeout: time.Minute})
	putIdle(t, p, 5)
	clk.advance(minutes(2))
	require.True(t, p.upkeepRound())
	s := p.Stats()
	assert.EqualValues(t, 3, s.IdleExpired, "idle expiry stops at MinSize")
	assert.Equal(t, 2, s.ItemsAllocated)
	assert.EqualValues(t, 2, tr.live.Load())
}

func TestUpkeepReplacesItemsPastTheirLifetime(t *testing.T) {
	p, tr, clk := upkeptPool(t, Options[*conn]{MinSize: 2, MaxSize: 8, MaxLifetime: time.Minute})
	old := putIdle(t, p, 2)
	clk.advance(minutes(2))
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
	prep := &testPreparer{}
	p, tr, clk := upkeptPool(t, Options[*conn]{MaxSize: 4, Preparer: prep, CheckAfterIdle: time.Minute})
	cs := putIdle(t, p, 3)
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

	clk.advance(minutes(2))
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
	prep := &testPreparer{}
	p, _, clk := upkeptPool(t, Options[*conn]{MaxSize: 1, Preparer: prep, CheckAfterIdle: time.Minute})
	item := putIdle(t, p, 1)[0]
	clk.advance(minutes(2))

	inCheck, finish := make(chan struct{}), make(chan struct{})
	prep.set(func(context.Context, *conn) (bool, error) {
		close(inCheck)
		<-finish
		return true, nil
	}, nil)
	roundDone := make(chan bool)
	go func() { roundDone <- p.upkeepRound() }()
	recvOrFail(t, inCheck, "the upkeep's check")

	// The only item is under check: a lease must wait for it.
	_, err := p.TryLease(context.Background())
	require.ErrorIs(t, err, ErrExhausted, "the item under check counts against MaxSize")
	got := leaseAsync(context.Background(), p)
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, testWait, time.Millisecond)
	prep.set(nil, nil)
	close(finish)
	assert.True(t, recvOrFail(t, roundDone, "the round"))
	o := awaitLease(t, got)
	require.NoError(t, o.err)
	assert.Same(t, item, o.l.Value(), "the lease got the item once its check passed")
	o.l.Release()
}

// TestUpkeepLogsADestroyPanic: the upkeep has no caller to raise a panic
// to, and on its own goroutine a panic would end the program. An item that
// fails its check and whose Destroy panics is logged, counted, and the
// round goes on.
func TestUpkeepLogsADestroyPanic(t *testing.T) {
	var log logBuffer
	prep := &testPreparer{}
	p, _, clk := upkeptPool(t, Options[*conn]{MaxSize: 2, Preparer: prep, CheckAfterIdle: time.Minute, Logger: log.logger(),
		Destroy: func(*conn) error { panic("uk: Destroy panic") }})
	putIdle(t, p, 2)
	prep.set(func(context.Context, *conn) (bool, error) { return false, errBoom }, nil)
	clk.advance(minutes(2))
	require.NotPanics(t, func() { assert.True(t, p.upkeepRound()) })
	s := p.Stats()
	assert.EqualValues(t, 2, s.PrepareFailed, "the round went on to the second item")
	assert.EqualValues(t, 2, s.DestroyErrors)
	assert.Zero(t, s.ItemsAllocated)
	assert.Contains(t, log.String(), "uk: Destroy panic")
}

func TestUpkeepCreatesUpToMinSizeAndBacksOff(t *testing.T) {
	var log logBuffer
	p, tr, _ := upkeptPool(t, Options[*conn]{MinSize: 0, MaxSize: 3, Logger: log.logger()})
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
	p, tr, _ := upkeptPool(t, Options[*conn]{MinSize: 0, MaxSize: 2})
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
			prep := &testPreparer{}
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
