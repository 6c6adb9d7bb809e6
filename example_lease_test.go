package pool_test

// Examples of ending a lease: Release, Discard and Detach.

import (
	"context"
	"fmt"
	"log"

	"github.com/msl-armory/pool"
)

// Release gives the item back for the next lease. Ending a lease again,
// through the same handle or a copy of it, does nothing.
func ExampleLease_Release() {
	p, err := pool.New[*exConn](context.Background(), &exServer{}, pool.Options[*exConn]{MaxSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	l, err := p.Lease(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	_ = l.Value().Send("hello")
	cp := l
	l.Release()
	l.Release()  // does nothing
	cp.Release() // a copy is the same lease: does nothing either
	s := p.Stats()
	fmt.Printf("leased: %d, idle: %d\n", s.ActiveLeases, s.ItemsAvailable)

	again, err := p.Lease(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer again.Release()
	_ = again.Value().Send("reused")
	// Output:
	// conn 1: hello
	// leased: 0, idle: 1
	// conn 1: reused
	// conn 1: closed
}

// Discard is for an item the caller knows is broken: the pool destroys it
// instead of lending it again, and the next lease gets a fresh one. A
// deferred Release after Discard does nothing, so the two combine.
func ExampleLease_Discard() {
	p, err := pool.New[*exConn](context.Background(), &exServer{}, pool.Options[*exConn]{MaxSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	send := func(msg string, broken bool) {
		l, err := p.Lease(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		defer l.Release() // does nothing after Discard
		_ = l.Value().Send(msg)
		if broken { // say, the write failed half-way
			l.Discard()
		}
	}
	send("half a message", true)
	exDestroyed(p) // Discard returned at once: the pool closes the item on its own goroutine
	send("a whole one", false)
	fmt.Println("destroyed:", p.Stats().Destroyed)
	// Output:
	// conn 1: half a message
	// conn 1: closed
	// conn 2: a whole one
	// destroyed: 1
	// conn 2: closed
}

// Detach takes an item out of the pool for good: the pool frees its place
// and never touches the item again, so closing it is the caller's job.
func ExampleLease_Detach() {
	p, err := pool.New[*exConn](context.Background(), &exServer{}, pool.Options[*exConn]{MaxSize: 1})
	if err != nil {
		log.Fatal(err)
	}
	l, err := p.Lease(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	c := l.Detach() // say, to hand the connection to a long-lived subscriber
	s := p.Stats()
	fmt.Printf("detached: %d, items in the pool: %d\n", s.Detached, s.ItemsAllocated)

	if err := p.Close(); err != nil { // closes nothing: c is not the pool's any more
		log.Fatal(err)
	}
	fmt.Println("pool closed")
	_ = c.Send("still mine")
	_ = c.Close()
	// Output:
	// detached: 1, items in the pool: 0
	// pool closed
	// conn 1: still mine
	// conn 1: closed
}
