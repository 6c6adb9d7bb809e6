//go:build poolportable

package pool

import (
	"sync"
	"sync/atomic"
	"time"
)

// The portable processor hint: a token from a sync.Pool, given back at once.
// A sync.Pool hands each processor the token last put there, so the hint is
// sticky per processor without the runtime's help. Nothing pins the
// goroutine, so two goroutines may use one slot at once; the slots'
// protocol does not depend on pinning (see ring.go), only their speed does.
var (
	hints    = sync.Pool{New: func() any { h := int(nextHint.Add(1) - 1); return &h }}
	nextHint atomic.Int64
)

func procPin() int {
	h := hints.Get().(*int)
	hints.Put(h)
	return *h
}

func procUnpin() {}

// preemptOff and preemptOn do nothing in this build: the goroutine stays
// preemptible inside the gate's critical sections, which costs only the
// tail of the waits under overload (see gate.go).
func preemptOff() {}
func preemptOn()  {}

// pinsProcessor says that procPin keeps the goroutine on its processor: in
// this build it does not.
const pinsProcessor = false

var processEpoch = time.Now()

// monotime reads a monotonic clock in nanoseconds.
func monotime() int64 { return int64(time.Since(processEpoch)) }
