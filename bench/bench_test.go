// Package bench compares github.com/msl-armory/pool with other ways to pool
// items in Go, on the same four workloads:
//
//   - Sequential: one goroutine leases and releases, over 16 items.
//   - Parallel: b.RunParallel (one goroutine per P), over 16 items.
//   - Contended: b.RunParallel with b.SetParallelism(4), over 2 items, so
//     most leases wait for a release.
//   - Overload: 64 goroutines over 8 items, each holding its item for about
//     20 µs of CPU work; it reports the wait for an item as percentiles
//     (overload_test.go).
//
// Sub-benchmarks are named pool=NAME so that benchstat -col /pool puts the
// pools in columns. Each pool's loop is written out with its concrete types,
// so no interface or func value stands between the loop and the pool that
// the pool's own API does not impose: every pool is measured at its real
// cost. run.sh runs them interleaved and writes RESULTS.md.
package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/jackc/puddle/v2"
	commons "github.com/jolestar/go-commons-pool/v2"
	"golang.org/x/sync/semaphore"

	"github.com/msl-armory/pool"
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

// contender is one pool under test. seq and par open a pool of n items,
// run their workload on it and close it; they differ per pool only in the
// types they name.
type contender struct {
	name     string
	seq, par func(b *testing.B, n int)
}

var contenders = []contender{
	{"msl", seqMSL, parMSL},
	{"puddle", seqPuddle, parPuddle},
	{"commons", seqCommons, parCommons},
	{"channel", seqChannel, parChannel},
	{"semaphore", seqSemaphore, parSemaphore},
	{"syncpool", seqSyncPool, parSyncPool},
}

func BenchmarkSequential(b *testing.B) {
	for _, c := range contenders {
		b.Run("pool="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			c.seq(b, seqItems)
		})
	}
}

func BenchmarkParallel(b *testing.B) {
	for _, c := range contenders {
		b.Run("pool="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			c.par(b, parItems)
		})
	}
}

func BenchmarkContended(b *testing.B) {
	for _, c := range contenders {
		b.Run("pool="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(contParallelism)
			c.par(b, contItems)
		})
	}
}

// ---- msl: github.com/msl-armory/pool -------------------------------------

// openMSL returns a pool of n items, all created by New (MinSize).
func openMSL(b *testing.B, n int) (*pool.Pool[*item], *census) {
	b.Helper()
	c := new(census)
	p, err := pool.New(context.Background(),
		pool.FactoryFunc[*item](func(context.Context) (*item, error) { return c.create(), nil }),
		pool.Options[*item]{
			MinSize: n,
			MaxSize: n,
			Destroy: func(it *item) error { c.destroy(it); return nil },
		})
	if err != nil {
		b.Fatalf("pool.New: %v", err)
	}
	return p, c
}

func closeMSL(b *testing.B, p *pool.Pool[*item], c *census, n int) {
	b.Helper()
	if err := p.Close(); err != nil {
		b.Errorf("Close: %v", err)
	}
	c.check(b, n, true)
}

func seqMSL(b *testing.B, n int) {
	p, c := openMSL(b, n)
	ctx := context.Background()
	for b.Loop() {
		l, err := p.Lease(ctx)
		if err != nil {
			b.Fatalf("Lease: %v", err)
		}
		if l.Value() == nil {
			b.Fatal("Lease gave a nil item")
		}
		l.Release()
	}
	closeMSL(b, p, c, n)
}

func parMSL(b *testing.B, n int) {
	p, c := openMSL(b, n)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := p.Lease(ctx)
			if err != nil {
				b.Errorf("Lease: %v", err)
				return
			}
			if l.Value() == nil {
				b.Error("Lease gave a nil item")
				return
			}
			l.Release()
		}
	})
	b.StopTimer()
	// How often a lease waited for a release, read from the pool after
	// the run: in Contended that, far more than the cost of a lease that
	// finds an item, sets the figure (see floor_test.go).
	s := p.Stats()
	b.ReportMetric(float64(s.Waits)/float64(s.Leases), "waits/lease")
	closeMSL(b, p, c, n)
}

// ---- puddle: github.com/jackc/puddle/v2 -----------------------------------

// openPuddle returns a pool of n items. Puddle creates lazily, so it
// acquires n resources and releases them all before returning.
func openPuddle(b *testing.B, n int) (*puddle.Pool[*item], *census) {
	b.Helper()
	c := new(census)
	p, err := puddle.NewPool(&puddle.Config[*item]{
		Constructor: func(context.Context) (*item, error) { return c.create(), nil },
		Destructor:  c.destroy,
		MaxSize:     int32(n),
	})
	if err != nil {
		b.Fatalf("puddle.NewPool: %v", err)
	}
	ctx := context.Background()
	held := make([]*puddle.Resource[*item], n)
	for i := range held {
		if held[i], err = p.Acquire(ctx); err != nil {
			b.Fatalf("warm-up Acquire: %v", err)
		}
	}
	for _, r := range held {
		r.Release()
	}
	if got := p.Stat().IdleResources(); got != int32(n) {
		b.Fatalf("after warm-up puddle has %d idle resources, want %d", got, n)
	}
	return p, c
}

func closePuddle(b *testing.B, p *puddle.Pool[*item], c *census, n int) {
	b.Helper()
	p.Close() // waits for the destructors
	c.check(b, n, true)
}

func seqPuddle(b *testing.B, n int) {
	p, c := openPuddle(b, n)
	ctx := context.Background()
	for b.Loop() {
		r, err := p.Acquire(ctx)
		if err != nil {
			b.Fatalf("Acquire: %v", err)
		}
		if r.Value() == nil {
			b.Fatal("Acquire gave a nil item")
		}
		r.Release()
	}
	closePuddle(b, p, c, n)
}

func parPuddle(b *testing.B, n int) {
	p, c := openPuddle(b, n)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := p.Acquire(ctx)
			if err != nil {
				b.Errorf("Acquire: %v", err)
				return
			}
			if r.Value() == nil {
				b.Error("Acquire gave a nil item")
				return
			}
			r.Release()
		}
	})
	b.StopTimer()
	closePuddle(b, p, c, n)
}

// ---- commons: github.com/jolestar/go-commons-pool/v2 ----------------------

// openCommons returns a pool of n items (MaxTotal = MaxIdle = n, blocking
// when exhausted, the library's defaults otherwise). It creates lazily, so
// it borrows n objects and returns them all before returning.
func openCommons(b *testing.B, n int) (*commons.ObjectPool, *census) {
	b.Helper()
	c := new(census)
	ctx := context.Background()
	factory := commons.NewPooledObjectFactory(
		func(context.Context) (any, error) { return c.create(), nil },
		func(_ context.Context, o *commons.PooledObject) error { c.destroy(o.Object.(*item)); return nil },
		nil, nil, nil)
	cfg := commons.NewDefaultPoolConfig()
	cfg.MaxTotal = n
	cfg.MaxIdle = n
	cfg.BlockWhenExhausted = true
	p := commons.NewObjectPool(ctx, factory, cfg)
	held := make([]any, n)
	for i := range held {
		var err error
		if held[i], err = p.BorrowObject(ctx); err != nil {
			b.Fatalf("warm-up BorrowObject: %v", err)
		}
	}
	for _, o := range held {
		if err := p.ReturnObject(ctx, o); err != nil {
			b.Fatalf("warm-up ReturnObject: %v", err)
		}
	}
	if got := p.GetNumIdle(); got != n {
		b.Fatalf("after warm-up commons has %d idle objects, want %d", got, n)
	}
	return p, c
}

func closeCommons(b *testing.B, p *commons.ObjectPool, c *census, n int) {
	b.Helper()
	p.Close(context.Background())
	c.check(b, n, true)
}

func seqCommons(b *testing.B, n int) {
	p, c := openCommons(b, n)
	ctx := context.Background()
	for b.Loop() {
		o, err := p.BorrowObject(ctx)
		if err != nil {
			b.Fatalf("BorrowObject: %v", err)
		}
		it, ok := o.(*item)
		if !ok || it == nil {
			b.Fatalf("BorrowObject gave %T %v, want a non-nil *item", o, o)
		}
		if err := p.ReturnObject(ctx, it); err != nil {
			b.Fatalf("ReturnObject: %v", err)
		}
	}
	closeCommons(b, p, c, n)
}

func parCommons(b *testing.B, n int) {
	p, c := openCommons(b, n)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o, err := p.BorrowObject(ctx)
			if err != nil {
				b.Errorf("BorrowObject: %v", err)
				return
			}
			it, ok := o.(*item)
			if !ok || it == nil {
				b.Errorf("BorrowObject gave %T %v, want a non-nil *item", o, o)
				return
			}
			if err := p.ReturnObject(ctx, it); err != nil {
				b.Errorf("ReturnObject: %v", err)
				return
			}
		}
	})
	b.StopTimer()
	closeCommons(b, p, c, n)
}

// ---- channel: a buffered channel of items ---------------------------------

// chanPool is the classic hand-written pool: a channel of capacity n, filled
// with n items up front. Its bound is the channel's capacity.
type chanPool struct {
	items chan *item
}

func openChannel(b *testing.B, n int) (*chanPool, *census) {
	b.Helper()
	c := new(census)
	p := &chanPool{items: make(chan *item, n)}
	for range n {
		p.items <- c.create()
	}
	return p, c
}

// lease takes an item, waiting until one is released or ctx ends. The
// non-blocking receive first is the idiom's fast path: it is cheaper than a
// two-way select when an item is there.
func (p *chanPool) lease(ctx context.Context) (*item, error) {
	select {
	case it := <-p.items:
		return it, nil
	default:
	}
	select {
	case it := <-p.items:
		return it, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// release gives it back; it never blocks, as at most n items exist.
func (p *chanPool) release(it *item) { p.items <- it }

func closeChannel(b *testing.B, p *chanPool, c *census, n int) {
	b.Helper()
	for range n {
		c.destroy(<-p.items)
	}
	c.check(b, n, true)
}

func seqChannel(b *testing.B, n int) {
	p, c := openChannel(b, n)
	ctx := context.Background()
	for b.Loop() {
		it, err := p.lease(ctx)
		if err != nil {
			b.Fatalf("lease: %v", err)
		}
		if it == nil {
			b.Fatal("lease gave a nil item")
		}
		p.release(it)
	}
	closeChannel(b, p, c, n)
}

func parChannel(b *testing.B, n int) {
	p, c := openChannel(b, n)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			it, err := p.lease(ctx)
			if err != nil {
				b.Errorf("lease: %v", err)
				return
			}
			if it == nil {
				b.Error("lease gave a nil item")
				return
			}
			p.release(it)
		}
	})
	b.StopTimer()
	closeChannel(b, p, c, n)
}

// ---- semaphore: x/sync/semaphore + a mutex-guarded stack -------------------

// semPool bounds items with a weighted semaphore of weight n (FIFO, honours
// ctx) and keeps the idle ones on a stack under a mutex, creating an item
// when a permit finds the stack empty.
type semPool struct {
	sem  *semaphore.Weighted
	c    *census
	mu   sync.Mutex
	idle []*item // cap n: pushes never allocate
}

func openSemaphore(b *testing.B, n int) (*semPool, *census) {
	b.Helper()
	c := new(census)
	p := &semPool{sem: semaphore.NewWeighted(int64(n)), c: c, idle: make([]*item, 0, n)}
	ctx := context.Background()
	held := make([]*item, n)
	for i := range held {
		var err error
		if held[i], err = p.lease(ctx); err != nil {
			b.Fatalf("warm-up lease: %v", err)
		}
	}
	for _, it := range held {
		p.release(it)
	}
	return p, c
}

func (p *semPool) lease(ctx context.Context) (*item, error) {
	if err := p.sem.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if k := len(p.idle) - 1; k >= 0 {
		it := p.idle[k]
		p.idle[k] = nil
		p.idle = p.idle[:k]
		p.mu.Unlock()
		return it, nil
	}
	p.mu.Unlock()
	return p.c.create(), nil
}

func (p *semPool) release(it *item) {
	p.mu.Lock()
	p.idle = append(p.idle, it)
	p.mu.Unlock()
	p.sem.Release(1)
}

func closeSemaphore(b *testing.B, p *semPool, c *census, n int) {
	b.Helper()
	p.mu.Lock()
	for _, it := range p.idle {
		c.destroy(it)
	}
	p.idle = nil
	p.mu.Unlock()
	c.check(b, n, true)
}

func seqSemaphore(b *testing.B, n int) {
	p, c := openSemaphore(b, n)
	ctx := context.Background()
	for b.Loop() {
		it, err := p.lease(ctx)
		if err != nil {
			b.Fatalf("lease: %v", err)
		}
		if it == nil {
			b.Fatal("lease gave a nil item")
		}
		p.release(it)
	}
	closeSemaphore(b, p, c, n)
}

func parSemaphore(b *testing.B, n int) {
	p, c := openSemaphore(b, n)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			it, err := p.lease(ctx)
			if err != nil {
				b.Errorf("lease: %v", err)
				return
			}
			if it == nil {
				b.Error("lease gave a nil item")
				return
			}
			p.release(it)
		}
	})
	b.StopTimer()
	closeSemaphore(b, p, c, n)
}

// ---- syncpool: sync.Pool, the unbounded floor ------------------------------

// openSyncPool returns a sync.Pool that creates items with New. It has no
// bound and no ctx, and may drop items at any GC; it is here as the floor
// that no bounded pool can beat. n only sizes the warm-up.
func openSyncPool(b *testing.B, n int) (*sync.Pool, *census) {
	b.Helper()
	c := new(census)
	p := &sync.Pool{New: func() any { return c.create() }}
	held := make([]*item, n)
	for i := range held {
		held[i] = p.Get().(*item)
	}
	for _, it := range held {
		p.Put(it)
	}
	return p, c
}

func seqSyncPool(b *testing.B, n int) {
	p, _ := openSyncPool(b, n)
	for b.Loop() {
		it, ok := p.Get().(*item)
		if !ok || it == nil {
			b.Fatal("Get gave no *item")
		}
		p.Put(it)
	}
}

func parSyncPool(b *testing.B, n int) {
	p, _ := openSyncPool(b, n)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			it, ok := p.Get().(*item)
			if !ok || it == nil {
				b.Error("Get gave no *item")
				return
			}
			p.Put(it)
		}
	})
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
