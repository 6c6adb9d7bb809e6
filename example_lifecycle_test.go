package pool_test

// Examples of a running pool's life: SetMaxSize, the upkeep and Close.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/msl-armory/pool"
)

// A configuration reload can resize a pool without dropping it: growing
// serves the leases waiting now, in FIFO order; shrinking destroys idle
// items beyond the new MaxSize at once and leased ones as they come back.
func ExamplePool_SetMaxSize() {
	p, err := pool.New(context.Background(), &sessions{}, pool.Options[*session]{Name: "db", MaxSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	a, _ := p.Lease(ctx)
	b, _ := p.Lease(ctx)

	got := make(chan pool.Lease[*session])
	go func() {
		l, err := p.Lease(ctx) // waits: both items are leased
		if err != nil {
			log.Fatal(err)
		}
		got <- l
	}()
	for p.Stats().QueuedLeases == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := p.SetMaxSize(3); err != nil {
		log.Fatal(err)
	}
	c := <-got
	fmt.Println("grown to", p.Stats().MaxSize, "- the waiting lease got session", c.Value().id)

	if err := p.SetMaxSize(1); err != nil {
		log.Fatal(err)
	}
	a.Release() // one too many: destroyed
	b.Release() // one too many: destroyed
	c.Release() // fits: kept idle
	exDestroyed(p)
	s := p.Stats()
	fmt.Printf("shrunk to %d: %d item, %d destroyed\n", s.MaxSize, s.ItemsAllocated, s.Destroyed)
	fmt.Println(p.SetMaxSize(0))
	// Output:
	// grown to 3 - the waiting lease got session 3
	// shrunk to 1: 1 item, 2 destroyed
	// pool: invalid options: pool "db": SetMaxSize(0): MaxSize must be at least 1 and at least MinSize (0)
}

// The upkeep keeps a lightly used pool in shape without waiting for
// leases: after a burst, idle items past IdleTimeout are destroyed down to
// MinSize, which it keeps.
func ExampleOptions_upkeep() {
	p, err := pool.New(context.Background(), &sessions{}, pool.Options[*session]{
		Name:           "api",
		MinSize:        2,
		MaxSize:        10,
		IdleTimeout:    50 * time.Millisecond,
		UpkeepInterval: 10 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	var burst []pool.Lease[*session]
	for range 6 {
		l, err := p.Lease(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		burst = append(burst, l)
	}
	for _, l := range burst {
		l.Release()
	}
	fmt.Println("after the burst:", p.Stats().ItemsAllocated, "items")

	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().ItemsAllocated > 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // no lease: the upkeep does it
	}
	s := p.Stats()
	fmt.Println("idle a while:", s.ItemsAllocated, "items (MinSize), destroyed", s.IdleExpired, "for idling")
	// Output:
	// after the burst: 6 items
	// idle a while: 2 items (MinSize), destroyed 4 for idling
}

// Close destroys the idle items at once and refuses new leases; an item
// still leased is destroyed when it comes back. To wait for the leases
// instead, use Shutdown.
func ExamplePool_Close() {
	p, err := pool.New[*exConn](context.Background(), &exServer{}, pool.Options[*exConn]{Name: "mail", MaxSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	busy, _ := p.Lease(ctx)
	idle, _ := p.Lease(ctx)
	idle.Release()

	if err := p.Close(); err != nil {
		log.Fatal(err)
	}
	_, err = p.Lease(ctx)
	fmt.Println(err)
	fmt.Println("errors.Is(err, pool.ErrClosed):", errors.Is(err, pool.ErrClosed))
	busy.Release() // destroyed, on the pool's own goroutine
	exDestroyed(p)
	// Output:
	// conn 2: closed
	// pool: closed: pool "mail"
	// errors.Is(err, pool.ErrClosed): true
	// conn 1: closed
}

// A busy pool keeps spares with MinIdle: while three sessions are in use,
// two more wait idle, created in the background, so that the next lease
// finds one ready instead of dialing in the caller (MinSize, a floor on
// all the items, would not: with three in use, it is met).
func ExampleOptions_minIdle() {
	dialer := &sessions{}
	p, err := pool.New(context.Background(), dialer, pool.Options[*session]{Name: "api", MinIdle: 2, MaxSize: 10})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	for range 3 {
		l, err := p.Lease(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer l.Release()
	}
	for p.Stats().ItemsAvailable < 2 {
		time.Sleep(time.Millisecond) // the spares are created in the background
	}
	s := p.Stats()
	fmt.Printf("%d in use, %d spare\n", s.ActiveLeases, s.ItemsAvailable)

	l, err := p.Lease(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release()
	fmt.Println("the next lease took a spare:", l.Value().id <= 5)
	// Output:
	// 3 in use, 2 spare
	// the next lease took a spare: true
}
