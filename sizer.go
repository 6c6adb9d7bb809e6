package pool

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The sizer: with Options.AdaptiveSize, the limit on items in existence
// that the gate enforces, moved under MaxSize once a window by the keeper
// (docs/DESIGN.md, "The adaptive size"). The lease ends add to two
// counters (record); the window reads and resets them. Over a window, busy
// over its length is the items in use on average, N, and busy over the
// ends the mean use time, W; served/s is N / W, so a larger N serves more
// while the elasticity e = d ln W / d ln N is below 1. The sizer learns ln W
// against ln N (curve) and steps the limit toward e = 1, the peak.
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
	// climbed: a window, not the first, with leases waiting found the
	// limit not all in use, or e near 1 or above. Until then (a cold
	// start's climb, or one after the backend's speed changed) windows are
	// a quarter as long, so the pool reaches its size before leases pile up.
	climbed atomic.Bool
	// The window: its start by the pool's clock, and Stats.Waits and
	// CreateErrors then; began once a window has ended (the first is not
	// judged: it began before the load).
	from         int64
	waits, fails uint64
	began        bool
	fit          curve // ln W against ln N, as the windows measured it

	apply func(limit, max int) error // gives the gate the limit, destroying the excess
}

// The sizer's constants, chosen on the tests' simulated backend. A window
// closes after adaptWindow with at least minEnds lease ends.
const (
	adaptWindow = time.Second
	minEnds     = 16
	// A window's move is gain of the Newton step to e = 1 along the curve
	// (its curvature taken within minCurve and twice that), within
	// maxGrowth, maxShrink and reach/2 of the curve's points; moves under
	// hold, in ln, are not made. A climb's window grows by maxGrowth while e is
	// under 1 − climbEnd, or not known.
	gain       = 0.5
	minCurve   = 0.6
	hold       = 0.03
	maxGrowth  = 1.5
	maxShrink  = 0.75
	climbEnd   = 0.15
	saturation = 0.9 // of the limit in use on average: a saturated window
	// The curve's bins, its fit's reach and prior (slope), and how far from
	// it a point is the backend's speed changing (far).
	binWidth  = 0.05
	binFull   = 8
	reach     = 0.4
	ridge     = 1e-3
	shift     = 0.2
	ditherDiv = 8 // the dither: center/ditherDiv, at least 1
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
	if !m.first && m.waited && (!m.saturated || m.known && m.e >= 1-climbEnd) {
		s.climbed.Store(true)
	}
	s.center = min(max(s.center*s.factor(m), float64(s.floor)), float64(s.max.Load()))
	return sig.limit, s.move(sig.limit), true
}

// measured is what a window measured of the backend and the leases.
type measured struct {
	held              float64 // N, the items in use on average
	e, bend           float64 // the curve's slope and its change at the center
	known, ahead      bool    // e known at the center; else e from the curve at held
	first             bool    // the pool's first window
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
	m.saturated, m.first, s.began = m.held >= saturation*float64(sig.limit), !s.began, true
	x, y := math.Log(max(m.held, 1e-9)), math.Log(float64(busy)/float64(n))
	if s.fit.far(x, y) {
		// The backend's speed changed: what was learned goes, and the
		// limit climbs again from where it is.
		s.fit = curve{}
		s.climbed.Store(false)
	}
	if m.saturated && !m.first {
		// Only a saturated window's point lies on the curve: where N varies
		// within a window, its mean use time lies above the curve at its mean.
		s.fit.add(x, y)
	}
	if m.e, m.bend, m.known = s.fit.slope(math.Log(s.center), reach); !m.known {
		// The slope at the center as the curve at the load would have it.
		e, bend, known := s.fit.slope(x, reach)
		m.e, m.ahead = e+max(bend, minCurve/2)*math.Log(s.center/m.held), known
	}
	return m, true
}

// factor is what a window multiplies the center by. Caller holds mu.
func (s *sizer) factor(m measured) float64 {
	climbing := !s.climbed.Load() && m.saturated
	switch {
	case !m.waited || m.failed:
		return 1 // no demand past the limit, or the backend failing: it stays
	case m.known:
		// A Newton step in ln N toward e = 1, damped, within reach/2 of
		// the curve's points: no further than its fit can say.
		step := gain * (1 - m.e) / min(max(m.bend, minCurve), 2*minCurve)
		if math.Abs(step) < hold {
			return 1
		}
		c := math.Log(s.center)
		step = min(max(step, s.fit.lo-reach/2-c), s.fit.hi+reach/2-c)
		return min(max(math.Exp(step), maxShrink), maxGrowth)
	case climbing && (!m.ahead || m.e < 1-climbEnd):
		return maxGrowth // short of the peak, or nothing known yet
	case m.ahead && m.e < 1-climbEnd:
		return 1 + 1/s.center // leases waited, well short of the peak: one more
	}
	return 1
}

// window is the window's length now.
func (s *sizer) window() time.Duration {
	if s.climbed.Load() {
		return adaptWindow
	}
	return adaptWindow / 4
}

// curve is ln W against ln N as learned: the points averaged in bins of
// x = ln N, each the mean of its last binFull points or so.
type curve struct {
	bins   []bin   // by x / binWidth, rounded
	lo, hi float64 // the least and the greatest x of a point
}

type bin struct{ x, y, w float64 } // the mean point, and its weight

// add adds the point (x, y).
func (c *curve) add(x, y float64) {
	if c.bins == nil {
		c.lo, c.hi = x, x
	}
	c.lo, c.hi = min(c.lo, x), max(c.hi, x)
	i := max(int(math.Round(x/binWidth)), 0)
	for len(c.bins) <= i {
		c.bins = append(c.bins, bin{})
	}
	b := &c.bins[i]
	b.w = min(b.w+1, binFull)
	b.x += (x - b.x) / b.w
	b.y += (y - b.y) / b.w
}

// far reports whether the point (x, y) lies further from the curve than
// the curve can say: from the nearest bin along the curve's slope there
// (within 0 and 2), by more than shift and one more for each unit of x.
func (c *curve) far(x, y float64) bool {
	var near *bin
	for i := range c.bins {
		if b := &c.bins[i]; b.w > 0 && (near == nil || math.Abs(b.x-x) < math.Abs(near.x-x)) {
			near = b
		}
	}
	if near == nil {
		return false
	}
	e, _, known := c.slope(near.x, 2*reach)
	if !known {
		e = 1
	}
	return math.Abs(y-near.y-min(max(e, 0), 2)*(x-near.x)) > shift+math.Abs(x-near.x)
}

// slope returns the curve's slope e at x and its change de/dx, from a
// quadratic fitted to the bins, each weighing exp(−(Δ/reach)²) at Δ from x,
// with a prior (ridge) of e = 1, where the limit holds, and de/dx =
// minCurve; not known without two bins within reach.
func (c *curve) slope(x, reach float64) (e, bend float64, known bool) {
	var s [5]float64
	var t [3]float64
	near := 0
	for _, b := range c.bins {
		u := b.x - x
		w := b.w * math.Exp(-u*u/(reach*reach))
		if b.w > 0 && math.Abs(u) < reach {
			near++
		}
		for k, uk := 0, w; k < len(s); k, uk = k+1, uk*u {
			s[k] += uk
			if k < len(t) {
				t[k] += uk * b.y
			}
		}
	}
	// y = a + e·u + (bend/2)·u²: the normal equations, with a eliminated.
	n := s[0]
	p, q, r := s[2]-s[1]*s[1]/n+ridge, s[3]-s[1]*s[2]/n, s[4]-s[2]*s[2]/n+ridge
	r1, r2 := t[1]-s[1]*t[0]/n+ridge, t[2]-s[2]*t[0]/n+ridge*minCurve/2
	if det := p*r - q*q; near >= 2 && det > 0 {
		return (r1*r - q*r2) / det, 2 * (p*r2 - q*r1) / det, true
	}
	return 0, 0, false
}

// move sets the limit, from, to the center moved by the dither, up or down
// by turns: successive windows then differ in N even where it would not
// (the limit all in use, steadily). It returns the limit in force after.
// Caller holds mu.
func (s *sizer) move(from int) (to int) {
	d := max(1, int(s.center/ditherDiv))
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
