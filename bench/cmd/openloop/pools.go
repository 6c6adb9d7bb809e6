package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msl-armory/pool"
)

// item is what the pools lend: a separately allocated 128-byte struct,
// so that no two items share a cache line, as real connections don't
// (the bench module's items are the same, bench_test.go).
type item struct{ _ [128]byte }

// sample is what one request records, as offsets from its round's start.
// The samples are allocated before the rounds and each request writes its
// own by index, so recording allocates nothing. 64 bytes, a cache line,
// so that two requests running at once on two processors do not write to
// one line.
type sample struct {
	spawned time.Duration // when the generator started its goroutine
	leased  time.Duration // when Lease returned an item
	held    time.Duration // when the hold ended, just before Release was called
	done    time.Duration // when Release returned
	x       uint64        // the spin's result, checked so that the spin is not dead code
	_       [24]byte
}

// server is one pool and the requests that use it: the state its
// requests share, and how a request leases and releases. The rounds run
// one server at a time.
type server struct {
	name    string
	start   time.Time // the instant the round's offsets count from
	samples []sample  // the round's, one per request
	hold    hold
	pending sync.WaitGroup // the round's requests still running

	// inflight counts the requests started and not yet returned from
	// Release. From busyFrom in flight (0: never), every processor is
	// busy: a CPU hold spins on a processor, and the CPU kind has as many
	// items as processors, so a request in flight beyond them waits for a
	// holder that spins, or is runnable itself.
	inflight atomic.Int64
	busyFrom int64

	// fns[i] serves request i. They are built before the rounds, so that
	// `go fns[i]()` allocates nothing but the goroutine: a go statement
	// with an argument would allocate a closure to carry it.
	fns []func()
	// serve is the pool's request: lease, hold, release, record.
	serve     func(i int)
	closePool func() error
	// waits counts the leases so far that waited for an item: whether a
	// run's requests queued in the pool at all, or only for a processor.
	waits func() uint64
}

// grow makes room for n requests a round.
func (s *server) grow(n int) {
	for i := len(s.fns); i < n; i++ {
		s.fns = append(s.fns, func() { s.serve(i) })
	}
	if cap(s.samples) < n {
		s.samples = make([]sample, n)
	}
}

// newServer returns a server's common part, name's over items items.
func newServer(name string, items int, h hold) *server {
	s := &server{name: name, hold: h}
	if h.cpu {
		s.busyFrom = int64(items)
	}
	return s
}

// slack is how long after the next arrival's instant the generator's
// wake-up from outside the scheduler may come (see timerfd): none while a
// processor may idle, a hold while every one is busy and one will run the
// generator's timer when its hold ends.
func (s *server) slack() time.Duration {
	if s.busyFrom > 0 && s.inflight.Load() >= s.busyFrom {
		return s.hold.length
	}
	return 0
}

// since is the offset of now from the round's start.
func (s *server) since() time.Duration { return time.Since(s.start) }

// newMSL returns a server over this module's pool with items items, all
// created by New (MinSize = MaxSize), so that no request creates one.
func newMSL(items int, h hold) (*server, error) {
	p, err := pool.New(context.Background(),
		pool.FactoryFunc[*item](func(context.Context) (*item, error) { return new(item), nil }),
		pool.Options[*item]{MinSize: items, MaxSize: items})
	if err != nil {
		return nil, fmt.Errorf("pool.New: %w", err)
	}
	s := newServer("msl", items, h)
	s.closePool = p.Close
	s.waits = func() uint64 { return p.Stats().Waits }
	ctx := context.Background()
	s.serve = func(i int) {
		l, err := p.Lease(ctx)
		if err != nil {
			log.Fatalf("msl: Lease: %v", err) // cannot happen: no deadline, and the pool closes after the rounds
		}
		r := &s.samples[i]
		r.leased = s.since()
		r.x = s.hold.do(uint64(i) + 1)
		r.held = s.since()
		l.Release()
		r.done = s.since()
		s.inflight.Add(-1)
		s.pending.Done()
	}
	return s, nil
}

// chanPool is the classic hand-written pool, as in the bench module
// (contenders_test.go): a buffered channel of items, filled up front;
// and a count of the leases that waited, which only the slow path pays.
type chanPool struct {
	items chan *item
	waits atomic.Uint64
}

// lease takes an item, waiting until one is released or ctx ends. The
// non-blocking receive first is the idiom's fast path.
func (p *chanPool) lease(ctx context.Context) (*item, error) {
	select {
	case it := <-p.items:
		return it, nil
	default:
	}
	p.waits.Add(1)
	select {
	case it := <-p.items:
		return it, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// release gives it back; it never blocks, as at most cap(p.items) items
// exist.
func (p *chanPool) release(it *item) { p.items <- it }

// newChannel returns a server over a channel pool of items items.
func newChannel(items int, h hold) *server {
	p := &chanPool{items: make(chan *item, items)}
	for range items {
		p.items <- new(item)
	}
	s := newServer("channel", items, h)
	s.closePool = func() error { return nil }
	s.waits = p.waits.Load
	ctx := context.Background()
	s.serve = func(i int) {
		it, err := p.lease(ctx)
		if err != nil {
			log.Fatalf("channel: lease: %v", err) // cannot happen: the ctx never ends
		}
		r := &s.samples[i]
		r.leased = s.since()
		r.x = s.hold.do(uint64(i) + 1)
		r.held = s.since()
		p.release(it)
		r.done = s.since()
		s.inflight.Add(-1)
		s.pending.Done()
	}
	return s
}

// runRound runs one round of s: arrivals are the requests' scheduled
// offsets from the start, ascending. It returns the samples, once every
// request has finished.
//
// The calling goroutine is the generator. It starts every request whose
// instant has passed, each on a goroutine of its own, stamping when it
// did; then it waits for the next instant with w. An arrival never waits
// for an earlier request (the open loop): only for the generator, whose
// lateness the samples record.
func (s *server) runRound(arrivals []time.Duration, w waiter) []sample {
	n := len(arrivals)
	s.grow(n)
	s.samples = s.samples[:n]
	clear(s.samples)
	s.pending.Add(n)
	s.start = time.Now()
	for next := 0; next < n; {
		for next < n {
			now := s.since()
			if arrivals[next] > now {
				break
			}
			s.samples[next].spawned = now
			s.inflight.Add(1)
			go s.fns[next]()
			next++
		}
		if next < n {
			w.wait(s.start.Add(arrivals[next]), s.slack())
		}
	}
	s.pending.Wait()
	for i := range s.samples {
		mustLive(s.samples[i].x)
	}
	return s.samples
}
