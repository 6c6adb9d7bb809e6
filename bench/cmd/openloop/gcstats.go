package main

import (
	"math"
	"runtime/metrics"
	"time"
)

// What the collector did during a run, from the runtime's metrics read
// before and after it: the stop-the-world pauses, and the CPU its mark
// took from the requests.
const (
	pausesMetric = "/sched/pauses/total/gc:seconds"        // every GC pause, from the stop's request to the world's restart
	gcCPUMetric  = "/cpu/classes/gc/total:cpu-seconds"     // pauses, assists, mark workers
	gcIdleMetric = "/cpu/classes/gc/mark/idle:cpu-seconds" // mark workers on processors that had nothing else to run
)

// gcSnap is the metrics at one instant.
type gcSnap struct {
	pauses *metrics.Float64Histogram
	cpu    float64 // GC CPU seconds, idle mark workers' excluded
}

// gcUse is what the collector did between two snaps.
type gcUse struct {
	pauses  []uint64  // pause counts per bucket of buckets
	buckets []float64 // the histogram's boundaries, in seconds
	cpu     float64   // GC CPU seconds, idle workers' excluded
}

// readGC reads the metrics.
func readGC() gcSnap {
	s := []metrics.Sample{{Name: pausesMetric}, {Name: gcCPUMetric}, {Name: gcIdleMetric}}
	metrics.Read(s)
	return gcSnap{pauses: s[0].Value.Float64Histogram(), cpu: s[1].Value.Float64() - s[2].Value.Float64()}
}

// since is what the collector did from s0 to s. The runtime updates its
// CPU classes when a cycle ends, so a cycle counts in the run it ended in.
func (s gcSnap) since(s0 gcSnap) gcUse {
	u := gcUse{pauses: make([]uint64, len(s.pauses.Counts)), buckets: s.pauses.Buckets, cpu: s.cpu - s0.cpu}
	for i, n := range s.pauses.Counts {
		u.pauses[i] = n - s0.pauses.Counts[i]
	}
	return u
}

// pauseTail returns the p99 and the maximum of the pauses in us, all
// with the same buckets, each as its bucket's upper boundary (the
// runtime's buckets are 12-25 % wide); 0 with no pause.
func pauseTail(us []gcUse) (p99, most time.Duration) {
	if len(us) == 0 {
		return 0, 0
	}
	counts := make([]uint64, len(us[0].pauses))
	var n uint64
	for _, u := range us {
		for i, c := range u.pauses {
			counts[i] += c
			n += c
		}
	}
	if n == 0 {
		return 0, 0
	}
	rank := (n*990 + 999) / 1000 // as percentile's nearest rank
	var seen uint64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		upper := seconds(us[0].buckets[i+1])
		if seen < rank && seen+c >= rank {
			p99 = upper
		}
		seen += c
		most = upper
	}
	return p99, most
}

// seconds converts a bucket boundary; the last is +Inf.
func seconds(s float64) time.Duration {
	if math.IsInf(s, 1) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}
