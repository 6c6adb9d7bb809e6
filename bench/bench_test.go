// Package bench compares github.com/msl-armory/pool with other ways to pool
// items in Go, on the same five workloads:
//
//   - Sequential: one goroutine leases and releases, over 16 items.
//   - Parallel: b.RunParallel (one goroutine per P), over 16 items.
//   - Contended: b.RunParallel with b.SetParallelism(4), over 2 items, so
//     most leases wait for a release.
//   - Overload: 64 goroutines over 8 items, each holding its item for about
//     20 µs of CPU work; it reports the wait for an item as percentiles
//     (overload_test.go).
//   - ReleaseThenWork: 16 goroutines over 4 items, each holding its item
//     for about 2 µs of CPU work and computing for about 20 µs after
//     releasing it; it reports the wait's percentiles and the whole
//     cycle's p99.9 (releasethenwork_test.go).
//
// Sub-benchmarks are named pool=NAME so that benchstat -col /pool puts the
// pools in columns. Each pool is an adapter (contenders_test.go) that passes
// lease and release through to the pool's own API with its concrete types;
// each workload is written once, generic over the adapter, and runs on
// every contender. run.sh runs them interleaved and writes RESULTS.md.
package bench

import (
	"sync/atomic"
	"testing"
	"unsafe"
)

// The workloads' shapes.
const (
	seqItems        = 16 // items in the sequential pools
	parItems        = 16 // items in the parallel pools
	contItems       = 2  // items in the contended pools
	contParallelism = 4  // goroutines per P in the contended runs
)

// item stands in for a connection. It is exactly 128 bytes and allocated on
// its own, so the allocator's 128-byte size class puts every item on cache
// lines of its own: two goroutines holding different items never write to a
// shared line through them, as with real connections.
type item struct {
	id int64
	_  [120]byte
}

// census is the factory behind every pool: it creates items and counts
// them, by its own reckoning rather than the pool's, so a benchmark can
// check that a pool kept its bound (a pool that made an item per lease
// would look fast for the wrong reason).
type census struct {
	created atomic.Int64 // items made
	live    atomic.Int64 // items made and not yet destroyed
	peak    atomic.Int64 // the most live at once
}

func (c *census) create() *item {
	n := c.live.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	return &item{id: c.created.Add(1)}
}

func (c *census) destroy(*item) { c.live.Add(-1) }

// check fails b when more than bound items were alive at once, or (when
// closed says the pool destroyed everything on close) when any is left.
func (c *census) check(b *testing.B, bound int, closed bool) {
	b.Helper()
	if peak := c.peak.Load(); peak > int64(bound) {
		b.Errorf("%d items were alive at once; the bound is %d", peak, bound)
	}
	if live := c.live.Load(); closed && live != 0 {
		b.Errorf("%d items were left alive after the pool closed", live)
	}
}

// contender is one pool under test, with each workload bound to its
// adapter: each field runs its workload on a fresh pool of n items.
// workloads_gen_test.go lists them, as contenders.
type contender struct {
	name                                            string
	sequential, parallel, overload, releaseThenWork func(b *testing.B, n int)
}

func BenchmarkSequential(b *testing.B) {
	for _, c := range contenders {
		b.Run("pool="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			c.sequential(b, seqItems)
		})
	}
}

func BenchmarkParallel(b *testing.B) {
	for _, c := range contenders {
		b.Run("pool="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			c.parallel(b, parItems)
		})
	}
}

func BenchmarkContended(b *testing.B) {
	for _, c := range contenders {
		b.Run("pool="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(contParallelism)
			c.parallel(b, contItems)
		})
	}
}

// TestItemLayout checks the premise of item: 128 bytes, and separately
// allocated items never share a 64-byte cache line.
func TestItemLayout(t *testing.T) {
	if size := unsafe.Sizeof(item{}); size != 128 {
		t.Fatalf("item is %d bytes, want 128", size)
	}
	c := new(census)
	items := make([]*item, 64) // items escape to the heap, as in a pool
	for i := range items {
		items[i] = c.create()
	}
	for _, it := range items {
		if addr := uintptr(unsafe.Pointer(it)); addr%64 != 0 {
			t.Fatalf("an item starts at %#x, inside a cache line", addr)
		}
	}
	heldItems = items
}

// heldItems keeps TestItemLayout's items on the heap.
var heldItems []*item
