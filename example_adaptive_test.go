package pool_test

// Example of a pool that finds its size in front of a backend that serves
// four queries at a time: past four, queries only queue inside it.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msl-armory/pool"
)

// adBackend serves up to four queries at once at full speed; with more in
// progress, each takes proportionally longer, and none is served sooner.
type adBackend struct{ inProgress atomic.Int64 }

func (b *adBackend) query() {
	n := b.inProgress.Add(1)
	defer b.inProgress.Add(-1)
	time.Sleep(time.Duration(max(n, 4)) * 500 * time.Microsecond)
}

func ExampleOptions_adaptiveSize() {
	backend := &adBackend{}
	conns := pool.FactoryFunc[*adBackend](func(context.Context) (*adBackend, error) { return backend, nil })
	p, err := pool.New(context.Background(), conns, pool.Options[*adBackend]{
		MaxSize:      64,   // the hard cap
		AdaptiveSize: true, // the limit under it, moved once a second
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	fmt.Println("limit at start:", p.Stats().Limit)

	// 32 clients, far more than the backend serves at once.
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = p.Do(context.Background(), func(b *adBackend) error { b.query(); return nil })
			}
		})
	}
	wg.Wait()
	// It grew while more items served more, and stopped once the use time
	// grew as fast as the items in use: far below MaxSize.
	limit := p.Stats().Limit
	fmt.Println("limit found, well under MaxSize:", limit > 4 && limit <= 32)
	// Output:
	// limit at start: 1
	// limit found, well under MaxSize: true
}
