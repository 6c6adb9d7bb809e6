//go:build !poolportable

package pool

import _ "unsafe" // for go:linkname

// The processor hint for the idle ring's slots, and the clock, straight from
// the runtime. procPin, procUnpin and nanotime are internal to the runtime,
// but it keeps them linkable on purpose because widely used modules link
// them (go.dev/issue/67401). The poolportable build tag swaps this file for
// proc_portable.go, which uses only public APIs: correct, only slower.

// procPin returns the id of the processor (the runtime's P) the calling
// goroutine runs on, and keeps the goroutine there, unpreemptible, until
// procUnpin. Hold it for a few instructions only.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// preemptOff makes the calling goroutine unpreemptible until preemptOn:
// the gate holds its mutex so (see gate.go). Nothing between the two may
// park or panic: the runtime throws if an unpreemptible goroutine does.
func preemptOff() { procPin() }

// preemptOn ends preemptOff.
func preemptOn() { procUnpin() }

// pinsProcessor says that procPin keeps the goroutine on its processor:
// nothing else runs there until procUnpin.
const pinsProcessor = true

// monotime reads the runtime's monotonic clock, in nanoseconds: the clock
// time.Now reads for its monotonic part, without the wall-clock read that
// time.Now adds.
//
//go:linkname monotime runtime.nanotime
func monotime() int64
