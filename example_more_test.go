package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

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
	s = p.Stats()
	// Only the destroyed: the refill to MinSize may have begun already,
	// and an item being created counts as leased until it is idle.
	fmt.Printf("after:  %d destroyed, the leased one to go when it comes back\n", s.Destroyed)
	c.Release() // retired: destroyed, not made idle
	for p.Stats().ItemsAvailable < 1 {
		time.Sleep(time.Millisecond) // the refill to MinSize runs in the background
	}
	s = p.Stats()
	fmt.Printf("later:  %d idle, %d leased; %d destroyed, %d created in all\n", s.ItemsAvailable, s.ActiveLeases, s.Destroyed, s.Created)
	// Output:
	// before: 2 idle, 1 leased
	// after:  2 destroyed, the leased one to go when it comes back
	// later:  1 idle, 0 leased; 3 destroyed, 4 created in all
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
	busy.Release()
	// Output:
	// conn 2: closed
	// pool: closed: pool "mail"
	// errors.Is(err, pool.ErrClosed): true
	// conn 1: closed
}

// Stats is a snapshot of the pool: what exists now, and counts since New.
func ExamplePool_Stats() {
	p, err := pool.New(context.Background(), &sessions{}, pool.Options[*session]{Name: "api", MaxSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	a, _ := p.Lease(ctx)
	b, _ := p.Lease(ctx)
	b.Discard()
	c, err := p.TryLease(ctx) // b's place is free again: a fresh item
	if err != nil {
		log.Fatal(err)
	}
	defer c.Release()
	a.Release()

	s := p.Stats()
	fmt.Printf("%s: MaxSize %d, %d items, %d idle, %d leased, %d waiting\n",
		s.Name, s.MaxSize, s.ItemsAllocated, s.ItemsAvailable, s.ActiveLeases, s.QueuedLeases)
	fmt.Printf("since New: %d leases, %d created, %d destroyed, %d timeouts\n",
		s.Leases, s.Created, s.Destroyed, s.Timeouts)
	// Output:
	// api: MaxSize 2, 2 items, 1 idle, 1 leased, 0 waiting
	// since New: 3 leases, 3 created, 1 destroyed, 0 timeouts
}

// A pool that is too small and a caller that ran out of time are different
// problems, and Lease tells them apart: ErrLeaseTimeout when the pool's
// LeaseTimeout elapsed, the caller's ctx.Err() when its ctx ended.
func ExampleErrLeaseTimeout() {
	p, err := pool.New(context.Background(), &sessions{}, pool.Options[*session]{
		Name:         "api",
		MaxSize:      1,
		LeaseTimeout: 20 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	busy, err := p.Lease(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer busy.Release()

	explain := func(err error) string {
		switch {
		case errors.Is(err, pool.ErrLeaseTimeout):
			return "the pool is too small, or leases are held too long"
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			return "the caller gave up: " + err.Error()
		}
		return err.Error()
	}

	_, err = p.Lease(context.Background()) // waits LeaseTimeout for the busy item
	fmt.Println(explain(err))

	ctx, cancel := context.WithDeadline(context.Background(), time.Now()) // a request out of time
	defer cancel()
	_, err = p.Lease(ctx)
	fmt.Println(explain(err))

	s := p.Stats()
	fmt.Printf("timeouts: %d, canceled: %d\n", s.Timeouts, s.Canceled)
	// Output:
	// the pool is too small, or leases are held too long
	// the caller gave up: context deadline exceeded
	// timeouts: 1, canceled: 1
}

// With a MeterProvider the pool reports OpenTelemetry metrics, each with
// the attribute pool.name. Here they are read through the SDK's
// ManualReader; a service would export them instead.
func ExampleOptions_meterProvider() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(ctx)

	p, err := pool.New(ctx, &sessions{}, pool.Options[*session]{
		Name:          "api",
		MaxSize:       1,
		MeterProvider: provider,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	l, _ := p.Lease(ctx)
	l.Discard()
	l, _ = p.Lease(ctx)
	defer l.Release()
	_, err = p.TryLease(ctx) // ErrExhausted: counted in pool.lease.errors
	if !errors.Is(err, pool.ErrExhausted) {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var points []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				points = d.DataPoints
			case metricdata.Gauge[int64]:
				points = d.DataPoints
			}
			for _, dp := range points {
				lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, attrs(dp.Attributes), dp.Value))
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// pool.items.allocated{pool.name=api} 1
	// pool.items.available{pool.name=api} 0
	// pool.items.created{pool.name=api} 2
	// pool.items.destroyed{pool.name=api,reason=discard} 1
	// pool.items.max{pool.name=api} 1
	// pool.items.min{pool.name=api} 0
	// pool.lease.errors{error.type=exhausted,pool.name=api} 1
	// pool.leases.active{pool.name=api} 1
	// pool.leases.granted{pool.name=api} 2
	// pool.leases.queued{pool.name=api} 0
}

// attrs prints a set of attributes as k=v pairs, sorted by key.
func attrs(set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
	}
	return strings.Join(kv, ",")
}

// Decoding is strict: a typo in a configuration file is an error that
// names the key, not a setting silently ignored.
func ExampleOptions_UnmarshalJSON_strict() {
	var opts pool.Options[*exConn]
	err := json.Unmarshal([]byte(`{"MaxSzie": 20}`), &opts)
	fmt.Println(err)
	fmt.Println("errors.Is(err, pool.ErrInvalidOptions):", errors.Is(err, pool.ErrInvalidOptions))
	// Output:
	// pool: invalid options: unknown key "MaxSzie" (did you mean "MaxSize"?)
	// errors.Is(err, pool.ErrInvalidOptions): true
}
