package main

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/msl-armory/pool/bench/internal/work"
)

// pieces is how many pieces a CPU hold's garbage is made in, one after
// each quarter of its spin.
const pieces = 4

// hold is what a request does while it holds its item: CPU work of spins
// rounds of spin, making garbage of pieces pieces of piece bytes on the
// way, or, with cpu false, a time.Sleep of length.
type hold struct {
	cpu    bool
	spins  int
	piece  int           // bytes of each piece of garbage; 0, none
	length time.Duration // the sleep, or what the hold was calibrated to
}

// pieceSize is the size of each of the pieces that make garbage bytes: a
// quarter, in whole 8-byte words, and at least one word.
func pieceSize(garbage int) int {
	if garbage <= 0 {
		return 0
	}
	return max(8, (garbage/pieces+7)/8*8)
}

// do holds for one request; x is the spin's state, not 0, returned so that
// the caller can check it (mustLive) and the spin is not dead code.
func (h hold) do(x uint64) uint64 {
	switch {
	case !h.cpu:
		time.Sleep(h.length)
		return x
	case h.piece == 0:
		return work.Spin(h.spins, x)
	}
	return h.work(x)
}

// work is a CPU hold that makes garbage, as a request that parses and
// encodes does: after each quarter of the spin it allocates a piece and
// writes it whole, each word the spin's next state, as an encoder writes
// its output. The pieces stay reachable until the hold ends, when each
// one's first word is read back and checked (a state, never 0), so the
// compiler can drop neither the writes nor the allocations, and the
// collector sees them live for the whole hold. A piece's size is not a
// constant, so it is allocated on the heap.
func (h hold) work(x uint64) uint64 {
	var kept [pieces][]byte
	for k := range kept {
		x = work.Spin(h.spins/pieces, x)
		b := make([]byte, h.piece)
		for i := 0; i+8 <= len(b); i += 8 {
			x = work.Spin(1, x)
			binary.LittleEndian.PutUint64(b[i:], x)
		}
		kept[k] = b
	}
	for _, b := range kept {
		mustLive(binary.LittleEndian.Uint64(b))
	}
	return x
}

// calibration is how the CPU hold was fitted to a duration on this
// machine.
type calibration struct {
	trialRounds int           // rounds of each timed trial
	trials      int           // how many trials were timed
	fastest     time.Duration // the fastest trial
	garbage     time.Duration // the fastest hold's garbage, without its spin
	spins       int           // rounds for the target duration
	check       [2]time.Duration
}

// calibrate finds the rounds of spin that make h, a CPU hold, take
// h.length: it times trials spins of 2^15 rounds (about 65 µs each here)
// and takes the fastest, the undisturbed speed, since spin is pure CPU
// work and any slower trial was interrupted (by the scheduler, another
// process, the hypervisor); it times as many holds with no spin, only
// their garbage, and takes the fastest; and it fits the spin to what
// the garbage leaves of h.length. It then runs the fitted hold 200 times
// and keeps the fastest and the median, a check printed beside the
// calibration (a collection that runs meanwhile shows in the median).
func calibrate(h hold) calibration {
	const trialRounds, trials = 1 << 15, 200
	never := time.Duration(1<<63 - 1)
	c := calibration{trialRounds: trialRounds, trials: trials, fastest: never}
	x := uint64(0x9e3779b97f4a7c15)
	for range trials {
		t0 := time.Now()
		x = work.Spin(trialRounds, x)
		c.fastest = min(c.fastest, time.Since(t0))
	}
	if h.piece > 0 {
		c.garbage = never
		h.spins = 0
		for range trials {
			t0 := time.Now()
			x = h.do(x)
			c.garbage = min(c.garbage, time.Since(t0))
		}
	}
	c.spins = max(1, int(float64(trialRounds)*float64(h.length-c.garbage)/float64(c.fastest)))
	h.spins = c.spins
	took := make([]time.Duration, 200)
	for i := range took {
		t0 := time.Now()
		x = h.do(x)
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
