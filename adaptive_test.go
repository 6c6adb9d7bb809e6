package pool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// bubbleClock makes the pool's clock the bubble's, so use times are
// measured in the bubble's time; set before New.
func bubbleClock(t *testing.T) {
	testClock = func() int64 { return time.Now().UnixNano() }
	t.Cleanup(func() { testClock = nil })
}

// Under load from many goroutines, with SetMaxSize moving MaxSize meanwhile,
// the adaptive limit stays within max(MinSize, 1) and MaxSize at every
// snapshot, the items within the largest MaxSize in force, no lease waits
// while the limit has room, and no lease fails: lowering the limit fails
// no lease in flight.
func TestAdaptiveSizeUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bubbleClock(t)
		tr := &tracker{}
		p, err := New[*conn](bg, tr, Options[*conn]{MinSize: 2, MaxSize: 48, AdaptiveSize: true, Destroy: tr.destroy})
		require.NoError(t, err)
		w := newSizeWindow(p)
		var inUse atomic.Int64
		ctx, stop := context.WithTimeout(bg, 90*time.Second)
		defer stop()
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				for ctx.Err() == nil {
					l, err := p.Lease(bg)
					if !assertNoErr(t, err) {
						return
					}
					n := float64(inUse.Add(1))
					time.Sleep(time.Duration(float64(time.Millisecond) * (1 + 0.05*(n-1) + 0.004*n*(n-1))))
					inUse.Add(-1)
					l.Release()
				}
			})
		}
		wg.Go(func() { // MaxSize moves under the sizer's feet
			for i := 0; ctx.Err() == nil; i++ {
				require.NoError(t, w.setMaxSize([]int{48, 10, 32, 6, 64}[i%5]))
				time.Sleep(7 * time.Second)
			}
		})
		seen := map[int]bool{}
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			w.check(t, tr.live.Load)
			s := p.Stats()
			require.LessOrEqual(t, s.Limit, s.MaxSize)
			require.GreaterOrEqual(t, s.Limit, 2)
			seen[s.Limit] = true
		}
		wg.Wait()
		require.Greater(t, len(seen), 5, "the limit never moved: %v", seen)
		require.Zero(t, p.Stats().Timeouts+p.Stats().Canceled)
		require.NoError(t, p.Close())
		assertAtRest(t, p)
	})
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("lease: %v", err)
		return false
	}
	return true
}
