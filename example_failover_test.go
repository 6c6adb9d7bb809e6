package pool_test

// Examples for broken items and failing backends: Do, Uses, IdleFor, SeedInBackground, Clear.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/msl-armory/pool"
)

// ExamplePool_Do sends on a pooled connection without handling the lease:
// Do gives the connection back, or closes it when the send says it is
// broken.
func ExamplePool_Do() {
	p, err := pool.New(context.Background(), &exServer{}, pool.Options[*exConn]{MaxSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	errConnReset := errors.New("connection reset by peer")
	for i, fail := range []bool{false, true, false} {
		err := p.Do(context.Background(), func(c *exConn) error {
			if fail {
				return fmt.Errorf("send %d: %w: %w", i, pool.ErrBroken, errConnReset)
			}
			return c.Send(fmt.Sprintf("message %d", i))
		})
		if err != nil {
			exDestroyed(p) // Do returned at once; the pool closes the connection on its own goroutine
			fmt.Println("error:", err)
		}
	}
	// Output:
	// conn 1: message 0
	// conn 1: closed
	// error: send 1: pool: item broken: connection reset by peer
	// conn 2: message 2
	// conn 2: closed
}

// ExampleLease_Uses recycles a connection after three uses: a server that
// leaks memory per session, say. Options.MaxUses does the same for every
// lease (ExampleOptions_maxUses); Uses lets the caller decide lease by
// lease.
func ExampleLease_Uses() {
	p, err := pool.New(context.Background(), &exServer{}, pool.Options[*exConn]{MaxSize: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	const maxUses = 3
	for range 4 {
		l, err := p.Lease(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("conn %d, use %d\n", l.Value().id, l.Uses())
		if l.Uses() >= maxUses {
			l.Discard() // used enough: close it, the next lease dials anew
		} else {
			l.Release()
		}
	}
	// Output:
	// conn 1, use 1
	// conn 1, use 2
	// conn 1, use 3
	// conn 1: closed
	// conn 2, use 1
	// conn 2: closed
}

// ExampleLease_IdleFor pings only a connection that sat idle long enough for
// the server to have dropped it. IdleFor is known because IdleTimeout makes
// the pool read the clock on release.
func ExampleLease_IdleFor() {
	p, err := pool.New(context.Background(), &exServer{}, pool.Options[*exConn]{
		MaxSize:     1,
		IdleTimeout: time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	const pingAfter = 20 * time.Millisecond
	for _, pause := range []time.Duration{0, 50 * time.Millisecond} {
		time.Sleep(pause)
		l, err := p.Lease(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		if l.IdleFor() >= pingAfter {
			fmt.Println("idle long enough: ping it first")
		} else {
			fmt.Println("fresh enough: use it as it is")
		}
		l.Release()
	}
	// Output:
	// fresh enough: use it as it is
	// idle long enough: ping it first
	// conn 1: closed
}

// ExampleOptions_seedInBackground starts a pool while its backend is down:
// New returns at once, and the MinSize connections appear once the backend
// is up.
func ExampleOptions_seedInBackground() {
	type conn struct{ _ int } // stands in for a database connection
	var mu sync.Mutex
	up := false
	dial := pool.FactoryFunc[*conn](func(context.Context) (*conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			return nil, errors.New("connection refused")
		}
		return &conn{}, nil
	})
	p, err := pool.New(context.Background(), dial, pool.Options[*conn]{
		MinSize:          2,
		MaxSize:          4,
		SeedInBackground: true,
		UpkeepInterval:   50 * time.Millisecond, // also bounds the retries' backoff
	})
	if err != nil {
		log.Fatal(err) // not for a backend that is down
	}
	defer p.Close()
	fmt.Println("started, with", p.Stats().ItemsAvailable, "connections")

	mu.Lock()
	up = true // the backend comes up
	mu.Unlock()
	for p.Stats().ItemsAvailable < 2 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("the floor is there:", p.Stats().ItemsAvailable, "connections")
	// Output:
	// started, with 0 connections
	// the floor is there: 2 connections
}

// Clear retires every item, after a failover say: the idle ones now, a
// leased one when its lease ends; fresh ones up to MinSize are created in
// the background.
func ExamplePool_Clear() {
	p, err := pool.New(context.Background(), &sessions{}, pool.Options[*session]{MinSize: 1, MaxSize: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	a, _ := p.Lease(ctx)
	b, _ := p.Lease(ctx)
	c, _ := p.Lease(ctx)
	a.Release()
	b.Release()
	s := p.Stats()
	fmt.Printf("before: %d idle, %d leased\n", s.ItemsAvailable, s.ActiveLeases)

	p.Clear() // the server failed over: no session of before may be used again
	exDestroyed(p)
	s = p.Stats()
	// Only the destroyed: the refill to MinSize may have begun already,
	// and an item being created counts as leased until it is idle.
	fmt.Printf("after:  %d destroyed, the leased one to go when it comes back\n", s.Destroyed)
	c.Release() // retired: destroyed, not made idle
	for p.Stats().ItemsAvailable < 1 {
		time.Sleep(time.Millisecond) // the refill to MinSize runs in the background
	}
	exDestroyed(p)
	s = p.Stats()
	fmt.Printf("later:  %d idle, %d leased; %d destroyed, %d created in all\n", s.ItemsAvailable, s.ActiveLeases, s.Destroyed, s.Created)
	// Output:
	// before: 2 idle, 1 leased
	// after:  2 destroyed, the leased one to go when it comes back
	// later:  1 idle, 0 leased; 3 destroyed, 4 created in all
}
