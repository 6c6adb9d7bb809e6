package pool_test

// Examples of what a pool tells about itself: Stats and OpenTelemetry metrics.

import (
	"context"
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
	exDestroyed(p)            // b is destroyed on the pool's own goroutine
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
	// pool.backend.down{pool.name=api} 0
	// pool.items.allocated{pool.name=api} 1
	// pool.items.available{pool.name=api} 0
	// pool.items.created{pool.name=api} 2
	// pool.items.destroyed{pool.name=api,reason=discard} 1
	// pool.items.limit{pool.name=api} 1
	// pool.items.max{pool.name=api} 1
	// pool.items.min{pool.name=api} 0
	// pool.lease.errors{error.type=exhausted,pool.name=api} 1
	// pool.leases.active{pool.name=api} 1
	// pool.leases.granted{pool.name=api} 2
	// pool.leases.queued{pool.name=api} 0
}

// With StandardMetricNames the pool publishes the OpenTelemetry semantic
// conventions' connection-pool instruments, db.client.connection.*, for the
// dashboards and alerts already built on them; its other instruments keep
// their pool.* names. Every lease records its wait and its use.
func ExampleOptions_standardMetricNames() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(ctx)

	p, err := pool.New(ctx, &sessions{}, pool.Options[*session]{
		Name:                "orders-db",
		MaxSize:             4,
		MeterProvider:       provider,
		StandardMetricNames: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	a, _ := p.Lease(ctx)
	b, _ := p.Lease(ctx)
	b.Release() // a is still out: one used, one idle
	defer a.Release()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if !strings.HasPrefix(m.Name, "db.client.connection.") {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, attrs(dp.Attributes), dp.Value))
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count %d", m.Name, attrs(dp.Attributes), dp.Count))
				}
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// db.client.connection.count{db.client.connection.pool.name=orders-db,db.client.connection.state=idle} 1
	// db.client.connection.count{db.client.connection.pool.name=orders-db,db.client.connection.state=used} 1
	// db.client.connection.create_time{db.client.connection.pool.name=orders-db} count 2
	// db.client.connection.idle.max{db.client.connection.pool.name=orders-db} 4
	// db.client.connection.idle.min{db.client.connection.pool.name=orders-db} 0
	// db.client.connection.max{db.client.connection.pool.name=orders-db} 4
	// db.client.connection.pending_requests{db.client.connection.pool.name=orders-db} 0
	// db.client.connection.timeouts{db.client.connection.pool.name=orders-db} 0
	// db.client.connection.use_time{db.client.connection.pool.name=orders-db} count 1
	// db.client.connection.wait_time{db.client.connection.pool.name=orders-db} count 2
}

// attrs prints a set of attributes as k=v pairs, sorted by key.
func attrs(set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.String()))
	}
	return strings.Join(kv, ",")
}

// Outstanding lists the leases out now, oldest first, when leases record
// themselves (LeakThreshold or TrackLeaseSites); without either it returns
// nil, and Stats.ActiveLeases gives the count.
func ExamplePool_Outstanding() {
	ctx := context.Background()
	plain, err := pool.New[*session](ctx, &sessions{}, pool.Options[*session]{MaxSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer plain.Close()
	recorded, err := pool.New[*session](ctx, &sessions{}, pool.Options[*session]{MaxSize: 2, LeakThreshold: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer recorded.Close()

	for _, p := range []*pool.Pool[*session]{plain, recorded} {
		first, _ := p.Lease(ctx)
		second, _ := p.Lease(ctx)
		out := p.Outstanding()
		fmt.Printf("%d leases out; Outstanding: nil %v, %d listed, oldest first %v\n",
			p.Stats().ActiveLeases, out == nil, len(out), len(out) < 2 || out[0].Age >= out[1].Age)
		first.Release()
		second.Release()
	}
	// Output:
	// 2 leases out; Outstanding: nil true, 0 listed, oldest first true
	// 2 leases out; Outstanding: nil false, 2 listed, oldest first true
}
