package main

import (
	"slices"
	"time"
)

// hold is what a request does while it holds its item: CPU work of spins
// rounds of spin, or, with cpu false, a time.Sleep of length.
type hold struct {
	cpu    bool
	spins  int
	length time.Duration // the sleep, or what the spins were calibrated to
}

// do holds for one request; x is the spin's state, not 0, returned so that
// the caller can check it (mustLive) and the spin is not dead code.
func (h hold) do(x uint64) uint64 {
	if h.cpu {
		return spin(h.spins, x)
	}
	time.Sleep(h.length)
	return x
}

// spin is the CPU work: n rounds of xorshift64, a chain of dependent shifts
// and xors that the compiler can neither fold nor vectorise, touching no
// memory and never reading the clock, so that it takes a fixed amount of
// work rather than a fixed time (the bench module's Overload workload
// spins the same way, overload_test.go). x must not be 0.
func spin(n int, x uint64) uint64 {
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// calibration is how spin was fitted to a duration on this machine.
type calibration struct {
	trialRounds int           // rounds of each timed trial
	trials      int           // how many trials were timed
	fastest     time.Duration // the fastest trial
	spins       int           // rounds for the target duration
	check       [2]time.Duration
}

// calibrate finds the rounds of spin that take d: it times trials spins
// of 2^15 rounds (about 65 µs each here) and scales by the fastest, the
// undisturbed speed, since spin is pure CPU work and any slower trial was
// interrupted (by the scheduler, another process, the hypervisor). It
// then runs the fitted spin 200 times and keeps the fastest and the
// median, a check printed beside the calibration.
func calibrate(d time.Duration) calibration {
	const trialRounds, trials = 1 << 15, 200
	c := calibration{trialRounds: trialRounds, trials: trials, fastest: time.Duration(1<<63 - 1)}
	x := uint64(0x9e3779b97f4a7c15)
	for range trials {
		t0 := time.Now()
		x = spin(trialRounds, x)
		c.fastest = min(c.fastest, time.Since(t0))
	}
	c.spins = max(1, int(float64(trialRounds)*float64(d)/float64(c.fastest)))
	took := make([]time.Duration, 200)
	for i := range took {
		t0 := time.Now()
		x = spin(c.spins, x)
		took[i] = time.Since(t0)
	}
	mustLive(x)
	slices.Sort(took)
	c.check = [2]time.Duration{took[0], took[len(took)/2]}
	return c
}

// mustLive checks a spin's result. xorshift64 never reaches 0 from a state
// that is not 0, so the check never fails; it is there because a result
// nobody reads would let the compiler drop the spin.
func mustLive(x uint64) {
	if x == 0 {
		panic("a spin ended at 0: xorshift64 cannot, from a state that is not 0")
	}
}
