package pool

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
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

// The limit is published as pool.items.limit and, with StandardMetricNames,
// as db.client.connection.max; its moves are logged at Debug.
func TestAdaptiveSizeIsObserved(t *testing.T) {
	for _, std := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			bubbleClock(t)
			mp, r := mtProvider(t)
			var logs logBuffer
			p, err := New[*conn](bg, &tracker{}, Options[*conn]{
				Name: "api", MaxSize: 16, AdaptiveSize: true, MeterProvider: mp, StandardMetricNames: std,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			require.NoError(t, err)
			defer p.Close()
			ctx, stop := context.WithTimeout(bg, 5*time.Second)
			defer stop()
			var wg sync.WaitGroup
			for range 8 { // leases wait on a backend that does not slow: the limit grows
				wg.Go(func() {
					for ctx.Err() == nil {
						l := mustLease(t, p)
						time.Sleep(time.Millisecond)
						l.Release()
					}
				})
			}
			wg.Wait()
			s := p.Stats()
			require.Greater(t, s.Limit, 1)
			name, attr := "pool.items.limit", mtAttrs("api")
			if std {
				name, attr = "db.client.connection.max", attribute.NewSet(attribute.String("db.client.connection.pool.name", "api"))
			}
			got := mtCollect(t, r)
			var pts map[attribute.Distinct]int64
			if std {
				pts = stdAssertKind(t, got, dbconv.ClientConnectionMax{})
			} else {
				pts = got.mtGauge(t, name, "{item}")
			}
			require.EqualValues(t, s.Limit, pts[attr.Equivalent()], "%s", name)
			require.Contains(t, logs.String(), "adaptive size: the limit moved")
			require.Contains(t, logs.String(), "from=1 to=")
		})
	}
}
