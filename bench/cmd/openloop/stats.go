package main

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/msl-armory/pool/bench/internal/work"
)

// The pure parts: the arrival schedule, the ideal queue, percentiles,
// medians and the formatting of durations. main_test.go checks them
// against hand-computed cases.

// schedule returns a Poisson process of perSec arrivals a second over
// [0, span), as offsets from the start, ascending: the gaps between
// arrivals are independent and exponential with mean 1/perSec. It appends
// to dst[:0], so a caller that keeps dst allocates only when a schedule is
// longer than any before it.
func schedule(dst []time.Duration, rng *rand.Rand, perSec float64, span time.Duration) []time.Duration {
	dst = dst[:0]
	meanGap := float64(time.Second) / perSec
	// The instant is summed in float64, not in whole nanoseconds, so that
	// truncating each gap does not bias the rate (by half a nanosecond a
	// gap, 0.002 % at 34 000 a second, but free to avoid).
	for t := rng.ExpFloat64() * meanGap; t < float64(span); t += rng.ExpFloat64() * meanGap {
		dst = append(dst, time.Duration(t))
	}
	return dst
}

// idealResponses writes to resp, for each request i, its response time in
// the ideal FIFO queue with servers servers: request i arrives at
// arrivals[i] and needs holds[i] of service, requests start service in
// the order they arrive, each on the server that frees first, and none
// waits while a server is free. resp[i] is from the arrival to the end of
// the service. arrivals must be ascending; the three slices have one
// length.
//
// The invariant that makes it FIFO: each request starts no earlier than
// the one before it, since it arrives no earlier and the earliest a server
// frees never moves back.
func idealResponses(resp, arrivals, holds []time.Duration, servers int) {
	free := make([]time.Duration, servers) // when each server is next free
	for i, a := range arrivals {
		k := 0
		for j := 1; j < servers; j++ {
			if free[j] < free[k] {
				k = j
			}
		}
		start := max(a, free[k])
		free[k] = start + holds[i]
		resp[i] = free[k] - a
	}
}

// percentiles are the ones the tables show, in thousandths.
var percentiles = [3]int{500, 990, 999}

// tail returns the p50, p99 and p99.9 of xs, which it sorts.
func tail(xs []time.Duration) [3]time.Duration {
	slices.Sort(xs)
	var t [3]time.Duration
	for k, pm := range percentiles {
		t[k] = work.Percentile(xs, pm)
	}
	return t
}

// median of xs, not empty: the middle value, or the mean of the two middle
// ones. It sorts a copy, so the caller's order (the rounds') is kept.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// dur formats d with three significant digits in µs, ms or s, the unit
// chosen so that the figure rounds below 1000 (999.6µs reads 1.00ms), or
// in whole ns below 1µs.
func dur(d time.Duration) string {
	if d < time.Microsecond {
		return strconv.FormatInt(int64(d), 10) + "ns"
	}
	x := float64(d) / 1e3
	for _, unit := range []string{"µs", "ms"} {
		if x < 999.5 {
			return sig3(x) + unit
		}
		x /= 1000
	}
	return sig3(x) + "s"
}

// sig3 formats a non-negative x with three significant digits (at least
// the integer part): 1.23, 12.3, 123, 1234.
func sig3(x float64) string {
	switch {
	case x < 9.995:
		return strconv.FormatFloat(x, 'f', 2, 64)
	case x < 99.95:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
}
