package bench

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/puddle/v2"
	commons "github.com/jolestar/go-commons-pool/v2"
	"golang.org/x/sync/semaphore"
	"vitess.io/vitess/go/pools/smartconnpool"

	"github.com/msl-armory/pool"
)

// The contenders' adapters, one per pool (bench/README.md, "How the
// workloads are written"). Each opens a pool of n items, all of them made
// before the timer starts, and passes its pool's own calls through: the
// handle a lease returns is the pool's own, so an adapter converts and
// allocates nothing the pool's API does not. An adapter is what a loop
// written for its pool would hold: the library pools' adapters are values
// holding the pool's pointer, the hand-written pools are their own
// adapters, and syncPool is a *sync.Pool by another name.

// ---- msl: github.com/msl-armory/pool -------------------------------------

// mslPool is the adapter of this module's pool.
type mslPool struct {
	p *pool.Pool[*item]
	c *census
	n int
}

// openMSL returns a pool of n items, all created by New (MinSize).
func openMSL(b *testing.B, n int) mslPool {
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
	return mslPool{p: p, c: c, n: n}
}

func (a mslPool) lease(ctx context.Context) (pool.Lease[*item], error) { return a.p.Lease(ctx) }
func (a mslPool) value(l pool.Lease[*item]) *item                      { return l.Value() }
func (a mslPool) release(_ context.Context, l pool.Lease[*item]) error { l.Release(); return nil }

// waitsPerLease reads the share of leases that waited from Stats, which
// counts them (see the package documentation, "Stats").
func (a mslPool) waitsPerLease() float64 {
	s := a.p.Stats()
	return float64(s.Waits) / float64(s.Leases)
}

func (a mslPool) close(b *testing.B) {
	b.Helper()
	if err := a.p.Close(); err != nil {
		b.Errorf("Close: %v", err)
	}
	a.c.check(b, a.n, true)
}

// ---- puddle: github.com/jackc/puddle/v2 -----------------------------------

// puddlePool is the adapter of a puddle pool.
type puddlePool struct {
	p *puddle.Pool[*item]
	c *census
	n int
}

// openPuddle returns a pool of n items. Puddle creates lazily, so it
// acquires n resources and releases them all before returning.
func openPuddle(b *testing.B, n int) puddlePool {
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
	return puddlePool{p: p, c: c, n: n}
}

func (a puddlePool) lease(ctx context.Context) (*puddle.Resource[*item], error) {
	return a.p.Acquire(ctx)
}
func (a puddlePool) value(r *puddle.Resource[*item]) *item { return r.Value() }
func (a puddlePool) release(_ context.Context, r *puddle.Resource[*item]) error {
	r.Release()
	return nil
}

func (a puddlePool) close(b *testing.B) {
	b.Helper()
	a.p.Close() // waits for the destructors
	a.c.check(b, a.n, true)
}

// ---- commons: github.com/jolestar/go-commons-pool/v2 ----------------------

// commonsPool's handle is the interface{} BorrowObject returns; value
// asserts it to *item, after the lease, where the caller of the library
// would.
type commonsPool struct {
	p *commons.ObjectPool
	c *census
	n int
}

// openCommons returns a pool of n items (MaxTotal = MaxIdle = n, blocking
// when exhausted, the library's defaults otherwise). It creates lazily, so
// it borrows n objects and returns them all before returning.
func openCommons(b *testing.B, n int) commonsPool {
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
	return commonsPool{p: p, c: c, n: n}
}

func (a commonsPool) lease(ctx context.Context) (any, error) { return a.p.BorrowObject(ctx) }

func (a commonsPool) value(o any) *item {
	it, _ := o.(*item)
	return it
}

func (a commonsPool) release(ctx context.Context, o any) error { return a.p.ReturnObject(ctx, o) }

func (a commonsPool) close(b *testing.B) {
	b.Helper()
	a.p.Close(context.Background())
	a.c.check(b, a.n, true)
}

// ---- vitess: vitess.io/vitess/go/pools/smartconnpool ---------------------

// vitessConn is the connection type smartconnpool asks for: an item, with
// no session settings (every lease asks for the clean stack, as a Get with
// a nil *Setting does).
type vitessConn struct {
	it *item
	c  *census
}

func (v *vitessConn) ApplySetting(context.Context, *smartconnpool.Setting) error { return nil }
func (v *vitessConn) ResetSetting(context.Context) error                         { return nil }
func (v *vitessConn) Setting() *smartconnpool.Setting                            { return nil }
func (v *vitessConn) IsClosed() bool                                             { return v.it == nil }

// Close destroys the item: the pool calls it when it closes a connection.
func (v *vitessConn) Close() {
	if v.it != nil {
		v.c.destroy(v.it)
		v.it = nil
	}
}

// vitessPool is the adapter of a smartconnpool.ConnPool: Capacity n, no
// idle timeout, no lifetime, no cap on waiters, the library's defaults
// otherwise.
type vitessPool struct {
	p *smartconnpool.ConnPool[*vitessConn]
	c *census
	n int
}

// openVitess returns a pool of n connections. smartconnpool connects
// lazily, so it gets n connections and recycles them all before returning.
func openVitess(b *testing.B, n int) vitessPool {
	b.Helper()
	c := new(census)
	p := smartconnpool.NewPool(&smartconnpool.Config[*vitessConn]{Capacity: int64(n)})
	p.Open(func(context.Context) (*vitessConn, error) {
		return &vitessConn{it: c.create(), c: c}, nil
	}, nil)
	ctx := context.Background()
	held := make([]*smartconnpool.Pooled[*vitessConn], n)
	for i := range held {
		var err error
		if held[i], err = p.Get(ctx, nil); err != nil {
			b.Fatalf("warm-up Get: %v", err)
		}
	}
	for _, h := range held {
		h.Recycle()
	}
	if got := p.Available(); got != int64(n) {
		b.Fatalf("after warm-up smartconnpool has %d connections available, want %d", got, n)
	}
	return vitessPool{p: p, c: c, n: n}
}

func (a vitessPool) lease(ctx context.Context) (*smartconnpool.Pooled[*vitessConn], error) {
	return a.p.Get(ctx, nil)
}
func (a vitessPool) value(h *smartconnpool.Pooled[*vitessConn]) *item { return h.Conn.it }
func (a vitessPool) release(_ context.Context, h *smartconnpool.Pooled[*vitessConn]) error {
	h.Recycle()
	return nil
}

func (a vitessPool) close(b *testing.B) {
	b.Helper()
	a.p.Close() // closes the idle connections; waits for the borrowed ones
	a.c.check(b, a.n, true)
}

// ---- channel: a buffered channel of items ---------------------------------

// chanPool is the classic hand-written pool: a channel of capacity n, filled
// with n items up front. Its bound is the channel's capacity.
type chanPool struct {
	items chan *item
	c     *census
	n     int
}

func openChannel(b *testing.B, n int) *chanPool {
	b.Helper()
	c := new(census)
	p := &chanPool{items: make(chan *item, n), c: c, n: n}
	for range n {
		p.items <- c.create()
	}
	return p
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

func (p *chanPool) value(it *item) *item { return it }

// release gives it back; it never blocks, as at most n items exist.
func (p *chanPool) release(_ context.Context, it *item) error {
	p.items <- it
	return nil
}

func (p *chanPool) close(b *testing.B) {
	b.Helper()
	for range p.n {
		p.c.destroy(<-p.items)
	}
	p.c.check(b, p.n, true)
}

// ---- semaphore: x/sync/semaphore + a mutex-guarded stack -------------------

// semPool bounds items with a weighted semaphore of weight n (FIFO, honours
// ctx) and keeps the idle ones on a stack under a mutex, creating an item
// when a permit finds the stack empty.
type semPool struct {
	sem  *semaphore.Weighted
	c    *census
	n    int
	mu   sync.Mutex
	idle []*item // cap n: pushes never allocate
}

func openSemaphore(b *testing.B, n int) *semPool {
	b.Helper()
	p := &semPool{sem: semaphore.NewWeighted(int64(n)), c: new(census), n: n, idle: make([]*item, 0, n)}
	ctx := context.Background()
	held := make([]*item, n)
	for i := range held {
		var err error
		if held[i], err = p.lease(ctx); err != nil {
			b.Fatalf("warm-up lease: %v", err)
		}
	}
	for _, it := range held {
		_ = p.release(ctx, it)
	}
	return p
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

func (p *semPool) value(it *item) *item { return it }

func (p *semPool) release(_ context.Context, it *item) error {
	p.mu.Lock()
	p.idle = append(p.idle, it)
	p.mu.Unlock()
	p.sem.Release(1)
	return nil
}

func (p *semPool) close(b *testing.B) {
	b.Helper()
	p.mu.Lock()
	for _, it := range p.idle {
		p.c.destroy(it)
	}
	p.idle = nil
	p.mu.Unlock()
	p.c.check(b, p.n, true)
}

// ---- syncpool: sync.Pool, the unbounded floor ------------------------------

// syncPool is a sync.Pool that creates items with New. It has no bound and
// no ctx, and may drop items at any GC; it is here as the floor that no
// bounded pool can beat. With no bound, no lease ever waits: in Overload,
// each Get returns an idle item or makes one, up to one per goroutine, and
// its percentiles are the cost of Get itself.
type syncPool sync.Pool

// openSyncPool returns a sync.Pool holding n items; n only sizes the
// warm-up.
func openSyncPool(b *testing.B, n int) *syncPool {
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
	return (*syncPool)(p)
}

// lease asserts Get's result to *item inside the lease, where the caller
// of sync.Pool would; anything else leases a nil item, which the workloads
// report.
func (a *syncPool) lease(context.Context) (*item, error) {
	it, _ := (*sync.Pool)(a).Get().(*item)
	return it, nil
}

func (a *syncPool) value(it *item) *item { return it }

func (a *syncPool) release(_ context.Context, it *item) error {
	(*sync.Pool)(a).Put(it)
	return nil
}

// close checks nothing: sync.Pool has no bound to keep, and drops its items
// when it pleases rather than on a close.
func (a *syncPool) close(*testing.B) {}
