// Package work holds what the bench module's workloads and its open-loop
// command share: the CPU work they hold items for, and the percentiles
// they report.
package work

import "time"

// Spin is CPU work: n rounds of xorshift64, a chain of dependent shifts and
// xors that the compiler can neither fold nor vectorise, touching no
// memory and reading no clock, so that it is a fixed amount of work rather
// than a fixed time. It returns x so that the caller can keep the result
// live; otherwise the loop could be deleted. x must not be 0.
func Spin(n int, x uint64) uint64 {
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// Percentile returns the nearest-rank percentile of sorted at perMille
// thousandths (990 for p99): the smallest sample that at least that share
// of the samples do not exceed. Integer arithmetic keeps p99.9 of 1000
// samples the 999th, which float rounding of 99.9 would make the 1000th.
// sorted must be sorted and not empty.
func Percentile(sorted []time.Duration, perMille int) time.Duration {
	rank := (len(sorted)*perMille + 999) / 1000 // 1-based, rounded up
	return sorted[min(max(rank, 1), len(sorted))-1]
}
