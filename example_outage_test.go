package pool_test

// Examples for a backend that goes down: FailFastAfter, MaxConcurrentCreates, MaxUses.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msl-armory/pool"
)

// A pool with FailFastAfter stops dialing a server that refuses: after two
// refusals in a row, leases fail at once with ErrBackendDown, which wraps
// the refusal; one dial in the background probes until the server is back.
func ExampleOptions_failFastAfter() {
	type conn struct{ _ int } // stands in for a database connection
	refused := errors.New("connection refused")
	var mu sync.Mutex
	up := false
	dial := pool.FactoryFunc[*conn](func(context.Context) (*conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			return nil, refused
		}
		return &conn{}, nil
	})
	p, err := pool.New(context.Background(), dial, pool.Options[*conn]{
		MaxSize:        4,
		FailFastAfter:  2,
		CreateTimeout:  time.Second,           // required: a dial that hangs fails, and counts
		UpkeepInterval: 20 * time.Millisecond, // bounds the probe's backoff
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	for i := range 3 {
		_, err := p.Lease(context.Background())
		fmt.Printf("lease %d: backend down %v, refused %v\n", i+1, errors.Is(err, pool.ErrBackendDown), errors.Is(err, refused))
	}
	fmt.Println("pool down:", p.Stats().BackendDown)

	mu.Lock()
	up = true // the server is back
	mu.Unlock()
	for p.Stats().BackendDown {
		time.Sleep(time.Millisecond) // until the probe's next dial
	}
	l, err := p.Lease(context.Background())
	fmt.Println("lease after the probe succeeded:", err)
	l.Release()
	// Output:
	// lease 1: backend down false, refused true
	// lease 2: backend down false, refused true
	// lease 3: backend down true, refused true
	// pool down: true
	// lease after the probe succeeded: <nil>
}

// MaxConcurrentCreates spreads a cold start: eight leases arrive at once,
// and the server sees at most two dials at a time.
func ExampleOptions_maxConcurrentCreates() {
	type conn struct{ _ int }
	var dialing, most atomic.Int64
	dial := pool.FactoryFunc[*conn](func(context.Context) (*conn, error) {
		n := dialing.Add(1)
		defer dialing.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond) // a handshake
		return &conn{}, nil
	})
	p, err := pool.New(context.Background(), dial, pool.Options[*conn]{
		MaxSize:              8,
		MaxConcurrentCreates: 2,
		CreateTimeout:        time.Second, // required: a dial that hangs would keep its turn
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			l, err := p.Lease(context.Background())
			if err != nil {
				log.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // a query
			l.Release()
		})
	}
	wg.Wait()
	fmt.Println("leases:", p.Stats().Leases, "- dials at once, at most 2:", most.Load() <= 2)
	// Output:
	// leases: 8 - dials at once, at most 2: true
}

// MaxUses recycles every connection after two leases, so connections move
// to servers added behind a load balancer.
func ExampleOptions_maxUses() {
	p, err := pool.New(context.Background(), &exServer{}, pool.Options[*exConn]{MaxSize: 1, MaxUses: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	for range 3 {
		l, err := p.Lease(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("conn %d, use %d\n", l.Value().id, l.Uses())
		l.Release() // the second release closes the connection
	}
	fmt.Println("recycled:", p.Stats().UsesExpired)
	// Output:
	// conn 1, use 1
	// conn 1, use 2
	// conn 1: closed
	// conn 2, use 1
	// recycled: 1
	// conn 2: closed
}
