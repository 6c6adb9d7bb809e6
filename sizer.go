package pool

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The sizer: with Options.AdaptiveSize, the limit on items in existence
// that the gate enforces, moved under MaxSize once a window by the keeper
// (docs/DESIGN.md, "The adaptive size"). Its state is its own: the lease
// ends add to two counters (record), and the window reads and resets them.
//
// It climbs the backend's throughput. Over a window, busy (the leases' use
// times summed) over the window's length is the items in use on average,
// N, and busy over the ends is the mean use time, W; served/s is N / W. So
// a larger N serves more while W grows more slowly than N does: while the
// elasticity e = d ln W / d ln N, estimated from successive windows, is
// below 1. It needs no latency floor, so a backend that slows down as a
// whole moves no floor for it to relearn: e is a ratio of changes.
type sizer struct {
	// Added by each lease's end (record), taken by the window.
	ends, busy atomic.Int64

	mu sync.Mutex // held by the window's step and by SetMaxSize
	// max is MaxSize: written under mu, read by Stats without it.
	max   atomic.Int64
	floor int // max(MinSize, 1)
	// center is where the dither moves the limit from, up or down by
	// turns (move); the limit in force is the gate's size, which the
	// window reads (signals.limit) and only apply changes.
	center float64
	up     bool
	// climbed: a window with leases waiting found the limit not all in
	// use, or e near 1 or above. Until then (a cold start's climb) windows
	// are a quarter as long, so the pool reaches its size before leases
	// pile up. The first window is not judged: it began before the load.
	climbed atomic.Bool
	// The window: its start by the pool's clock, and Stats.Waits and
	// CreateErrors then.
	from         int64
	waits, fails uint64
	// The last window's point (ln N, ln W), if it had one, and the decayed
	// sums weighing each pair's slope by its Δ ln N squared.
	last     point
	sxy, sxx float64

	apply func(limit, max int) error // gives the gate the limit, destroying the excess
}

type point struct {
	x, y   float64
	center float64 // the limit's center as the window began
	ok     bool
}

// The sizer's constants, chosen on the simulated backend of the tests
// (docs/DESIGN.md, "The adaptive size"). A window closes after adaptWindow
// with at least minEnds lease ends, else at the first turn after that.
const (
	adaptWindow = time.Second
	minEnds     = 16
	// The limit stays while e is within 1 ± margin, grows by up to
	// e^(gain·(1−e)) (at most maxGrowth, at least 1 item) and shrinks by
	// e^(1−e) (at least maxShrink): faster down than up.
	margin    = 0.15
	gain      = 0.5
	maxGrowth = 1.5
	maxShrink = 0.75
	// A window is saturated when its items in use average saturation of
	// the limit: its N is then the limit's, and its slope exact.
	saturation = 0.9
	// Each pair of windows weighs its Δ ln N squared, at most maxWeight;
	// the older pairs decay by decay a window, and by as much again for
	// each tenth the limit moved in ln. A use time that moves by more than
	// shift in ln, against the items in use, is the backend's speed
	// changing: the sums restart at a slope of 1 with weight prior.
	maxWeight = 0.05
	decay     = 0.7
	shift     = 0.2
	prior     = 1e-4
	// The dither moves the limit by center/ditherDiv, at least 1.
	ditherDiv = 8
)

func newSizer(minSize, maxSize int, now int64, apply func(limit, max int) error) *sizer {
	s := &sizer{floor: max(minSize, 1), from: now, apply: apply}
	s.max.Store(int64(maxSize))
	s.center = float64(s.floor)
	return s
}

// record adds a lease's use time, d nanoseconds.
func (s *sizer) record(d int64) {
	s.ends.Add(1)
	s.busy.Add(max(d, 0))
}

// signals are what the window reads of the pool besides the use times.
type signals struct {
	now          int64  // the pool's clock
	limit        int    // Stats.Limit
	waits, fails uint64 // Stats.Waits and CreateErrors
	down         bool   // Stats.BackendDown
}

// step ends the window if it is due and moves the limit: from and to, and
// whether the window ended.
func (s *sizer) step(sig signals) (from, to int, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ended := s.measure(sig)
	if !ended {
		return sig.limit, sig.limit, false
	}
	s.climb(m)
	s.center = min(max(s.center*s.factor(m, sig.limit), float64(s.floor)), float64(s.max.Load()))
	return sig.limit, s.move(sig.limit), true
}

// measured is what a window measured of the backend and the leases.
type measured struct {
	held              float64 // N, the items in use on average
	e                 float64 // the elasticity, if known
	known, first      bool    // e measured; the pool's first window
	saturated, waited bool    // N near the limit; leases waited
	failed            bool    // creations failed, or the pool is down
}

// measure ends the window if it is due, with at least minEnds lease ends;
// a window in which no lease has ended yet begins again, with the load.
// Caller holds mu.
func (s *sizer) measure(sig signals) (m measured, ended bool) {
	span, n := sig.now-s.from, s.ends.Load()
	if n == 0 {
		s.from = sig.now
	}
	if span < int64(s.window()) || n < minEnds {
		return m, false
	}
	s.ends.Add(-n)
	busy := s.busy.Swap(0)
	m.held = float64(busy) / float64(span)
	m.waited, m.failed = sig.waits > s.waits, sig.fails > s.fails || sig.down
	s.from, s.waits, s.fails = sig.now, sig.waits, sig.fails
	m.saturated, m.first = m.held >= saturation*float64(sig.limit), !s.last.ok
	m.e, m.known = s.elasticity(point{x: math.Log(max(m.held, 1e-9)), y: math.Log(float64(busy) / float64(n)), center: s.center, ok: true})
	return m, true
}

// factor is what a window under limit multiplies the center by. Caller holds mu.
func (s *sizer) factor(m measured, limit int) float64 {
	switch {
	case !m.waited || m.failed:
		return 1 // no demand past the limit, or the backend failing: it stays
	case m.saturated && m.known && m.e > 1+margin:
		return max(maxShrink, math.Exp(1-m.e)) // past the peak: fewer serve more
	case m.saturated && (!m.known || m.e < 1-margin):
		// Short of it, or not yet measured: more serve more, at least one.
		return max(min(maxGrowth, math.Exp(gain*(1-m.e))), 1+1/s.center)
	case !m.saturated && m.known && m.e < 1-3*margin && 4*m.held >= float64(limit):
		return 1 + 1/s.center // leases waited in bursts, well short of the peak: one more
	}
	return 1
}

// climb ends the cold start's climb at a window, but the first (which
// began before the load), that found the limit not all in use while leases
// waited, or e near 1 or above. Caller holds mu.
func (s *sizer) climb(m measured) {
	if !m.first && m.waited && (!m.saturated || m.known && m.e >= 1-margin) {
		s.climbed.Store(true)
	}
}

// window is the window's length now.
func (s *sizer) window() time.Duration {
	if s.climbed.Load() {
		return adaptWindow
	}
	return adaptWindow / 4
}

// elasticity adds p, this window's point, to the pairs and returns their
// slope, unless no pair has a spread in ln N since the last change in the
// backend's speed.
func (s *sizer) elasticity(p point) (e float64, known bool) {
	dx, dy := p.x-s.last.x, p.y-s.last.y
	switch {
	case !s.last.ok:
	case math.Abs(dy) > shift && (dx == 0 || dy/dx < 0 || dy/dx > 2):
		// No backend's use time grows faster than N², nor falls as N
		// grows: its speed changed, and what was learned of it goes. The
		// slope is taken as 1, where the limit stays, until pairs measure it.
		s.sxx, s.sxy = prior, prior
	case dx != 0:
		// The older pairs fade faster as the limit moves away from them.
		d := math.Pow(decay, 1+math.Abs(math.Log(p.center/s.last.center))/0.1)
		w := min(dx*dx, maxWeight) / (dx * dx)
		s.sxx = d*s.sxx + w*dx*dx
		s.sxy = d*s.sxy + w*dx*dy
	}
	s.last = p
	if s.sxx < 1e-6 {
		return 0, false
	}
	return s.sxy / s.sxx, true
}

// move sets the limit, from, to the center moved by the dither, an eighth
// of it (at least 1), up or down by turns: successive windows then differ
// in N even where it would not (all the limit in use, steadily), so the
// slope stays measured. It returns the limit in force after. Caller holds mu.
func (s *sizer) move(from int) (to int) {
	d := max(1, int(math.Round(s.center/ditherDiv)))
	s.up = !s.up
	if !s.up {
		d = -d
	}
	to = min(max(int(math.Round(s.center))+d, s.floor), int(s.max.Load()))
	if to != from && s.apply(to, int(s.max.Load())) != nil {
		return from
	}
	return to
}

// maxSize is MaxSize, given the gate's size: the same without a sizer.
func (s *sizer) maxSize(size int) int {
	if s == nil {
		return size
	}
	return int(s.max.Load())
}

// setMax is SetMaxSize's: the limit comes to its center, under the new
// MaxSize, at once.
func (s *sizer) setMax(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.max.Store(int64(n))
	s.center = min(s.center, float64(n))
	return s.apply(min(int(math.Round(s.center)), n), n)
}
