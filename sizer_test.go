package pool

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sizerRig drives a sizer window by window with a backend whose mean use
// time, for n items in use, is useTime(n): each window the items in use are
// the limit, or demand if fewer.
type sizerRig struct {
	t     *testing.T
	s     *sizer
	now   int64
	waits uint64
	fails uint64
	down  bool
	limit int // the gate's size: what apply last set
}

func newSizerRig(t *testing.T, minSize, maxSize int) *sizerRig {
	r := &sizerRig{t: t, limit: max(minSize, 1)}
	r.s = newSizer(minSize, maxSize, 0, func(limit, max int) error {
		require.LessOrEqual(t, limit, max, "a limit above MaxSize")
		require.GreaterOrEqual(t, limit, 1, "a limit below 1")
		r.limit = limit
		return nil
	})
	return r
}

// window runs one window with demand items wanted and useTime's backend,
// leases waiting when demand exceeds the limit; it returns the new limit.
func (r *sizerRig) window(demand float64, useTime func(n float64) time.Duration) int {
	held := min(demand, float64(r.limit))
	w := useTime(held)
	ends := int64(held * float64(adaptWindow) / float64(w))
	for range ends {
		r.s.record(int64(w))
	}
	if demand > float64(r.limit) {
		r.waits += uint64(ends)
	}
	r.now += int64(adaptWindow)
	_, to, ended := r.s.step(signals{now: r.now, limit: r.limit, waits: r.waits, fails: r.fails, down: r.down})
	require.Equal(r.t, r.limit, to, "step reports the limit apply set")
	require.True(r.t, ended, "a window with %d ends did not end", ends)
	return to
}

// uslUseTime is a USL backend's use time: 1/λ × (1 + σ(N−1) + κN(N−1)).
func uslUseTime(lambda, sigma, kappa float64) func(n float64) time.Duration {
	return func(n float64) time.Duration {
		return time.Duration(float64(time.Second) / lambda * (1 + sigma*(n-1) + kappa*n*(n-1)))
	}
}

func TestSizerFindsTheThroughputPeak(t *testing.T) {
	r := newSizerRig(t, 0, 64)
	usl := uslUseTime(200, 0.05, 0.004) // served/s peaks at N ≈ 15.4
	var limits []int
	for range 60 {
		limits = append(limits, r.window(64, usl))
	}
	t.Logf("limits %v", limits)
	var sum float64
	for _, l := range limits[30:] {
		sum += float64(l)
		require.InDelta(t, 15.4, l, 5, "limits %v: the peak, give or take the dither", limits)
	}
	require.InDelta(t, 15.4, sum/30, 2.5, "limits %v: on average near the peak", limits)
	require.LessOrEqual(t, slicesMax(limits), 64)
}

func TestSizerStartsAtMinSize(t *testing.T) {
	require.Equal(t, 1, newSizer(0, 8, 0, nil).floor)
	require.Equal(t, 3, newSizer(3, 8, 0, nil).floor)
}

// A queue alone does not grow the limit: the use time grows as fast as the
// items in use (a backend that serves one at a time), so the limit stays low.
func TestSizerDoesNotGrowOnWaitingAlone(t *testing.T) {
	r := newSizerRig(t, 0, 64)
	serial := func(n float64) time.Duration { return time.Duration(n * float64(10*time.Millisecond)) }
	var limits []int
	for range 40 {
		limits = append(limits, r.window(64, serial))
	}
	require.LessOrEqual(t, slicesMax(limits[10:]), 4, "limits %v", limits)
}

// Leases that wait on a backend whose use time does not grow with the
// items in use grow the limit, up to MaxSize and never past it.
func TestSizerGrowsToMaxSizeOnAFlatBackend(t *testing.T) {
	r := newSizerRig(t, 0, 32)
	flat := func(float64) time.Duration { return 5 * time.Millisecond }
	var limits []int
	for range 20 {
		limits = append(limits, r.window(1000, flat))
	}
	require.Equal(t, 32, slicesMax(limits), "limits %v", limits)
	require.GreaterOrEqual(t, limits[len(limits)-1], 32-32/ditherDiv, "limits %v: at MaxSize, less the dither", limits)
}

// Without leases waiting, the limit holds: a light load is not starved and
// leads nowhere.
func TestSizerHoldsWithoutDemand(t *testing.T) {
	r := newSizerRig(t, 4, 64)
	usl := uslUseTime(200, 0.05, 0.004)
	for range 20 {
		require.InDelta(t, 4, r.window(2, usl), 1)
	}
}

// While creations fail, or the pool is down, the limit does not grow.
func TestSizerDoesNotGrowWhileFailing(t *testing.T) {
	usl := uslUseTime(200, 0.05, 0.004)
	for _, how := range []string{"creations failing", "down"} {
		r := newSizerRig(t, 0, 64)
		for range 20 {
			if how == "down" {
				r.down = true
			} else {
				r.fails++
			}
			require.LessOrEqual(t, r.window(64, usl), 2, how)
		}
	}
}

// When the backend's speed changes, the sizer sees it in the first window
// after, forgets what it learned and climbs again; the limit comes back to
// the peak, which a change of speed alone leaves where it was (N ≈ 15.4),
// and follows the peak where the change moves it (κ doubled: N ≈ 10.9).
func TestSizerFollowsASpeedChange(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(n float64) time.Duration
		peak  float64
	}{
		{"slower 3x", uslUseTime(200.0/3, 0.05, 0.004), 15.4},
		{"faster 3x", uslUseTime(600, 0.05, 0.004), 15.4},
		{"more coherency", uslUseTime(200, 0.05, 0.008), 10.9},
	} {
		r := newSizerRig(t, 0, 64)
		for range 40 {
			r.window(64, uslUseTime(200, 0.05, 0.004))
		}
		require.True(t, r.s.climbed.Load(), "%s: climbed before the change", tc.name)
		r.window(64, tc.after)
		require.False(t, r.s.climbed.Load(), "%s: the change not seen in the first window after it", tc.name)
		var limits []int
		for range 40 {
			limits = append(limits, r.window(64, tc.after))
		}
		for _, l := range limits[20:] {
			require.InDelta(t, tc.peak, l, 5, "%s: limits after the change %v", tc.name, limits)
		}
	}
}

// SetMaxSize below the limit brings the limit under it at once, and the
// limit never goes back above it; raising it lets the limit grow again.
func TestSizerFollowsSetMaxSize(t *testing.T) {
	r := newSizerRig(t, 0, 64)
	flat := func(float64) time.Duration { return 5 * time.Millisecond }
	for range 10 {
		r.window(1000, flat)
	}
	require.NoError(t, r.s.setMax(6))
	require.Equal(t, 6, r.limit)
	for range 10 {
		require.LessOrEqual(t, r.window(1000, flat), 6)
	}
	require.NoError(t, r.s.setMax(20))
	for range 10 {
		r.window(1000, flat)
	}
	require.InDelta(t, 20, r.limit, float64(20/ditherDiv+1), "the dither moves it down by turns")
}

// A limit the gate refused (a closed pool) is not taken.
func TestSizerKeepsTheLimitTheGateRefused(t *testing.T) {
	s := newSizer(0, 64, 0, func(int, int) error { return errors.New("closed") })
	for range 100 {
		s.record(int64(time.Millisecond))
	}
	_, to, _ := s.step(signals{now: int64(time.Second), limit: 1, waits: 1})
	require.Equal(t, 1, to)
}

// A window with too few lease ends goes on until it has them.
func TestSizerWindowWaitsForEnoughEnds(t *testing.T) {
	s := newSizer(0, 64, 0, func(int, int) error { return nil })
	s.record(int64(time.Millisecond))
	_, _, ended := s.step(signals{now: int64(5 * time.Second), limit: 1, waits: 1})
	require.False(t, ended)
	for range minEnds {
		s.record(int64(time.Millisecond))
	}
	_, _, ended = s.step(signals{now: int64(6 * time.Second), limit: 1, waits: 1})
	require.True(t, ended)
}

func slicesMax(xs []int) int {
	m := math.MinInt
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
