package pool

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// A pool's OpenTelemetry instruments, each measurement with pool.name,
// durations in seconds. A lease and release of an idle item record nothing
// but the pool.lease.use_time sample: gauges are observed from Stats, the
// rest recorded where the pool is slow already. Attribute sets and option
// slices are made once in New: a variadic option passed to an interface
// method escapes, and would allocate on every measurement.

// scopeName is the instrumentation scope: the module path.
const scopeName = "github.com/msl-armory/pool"

// durationBuckets are the advisory histogram bounds in seconds, from 100 µs
// (a quick handoff) to 30 s (a dial's timeout); a View can override them.
var durationBuckets = []float64{0, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// metrics holds a pool's instruments and their precomputed options.
type metrics struct {
	waitTime, prepTime, createTime    metric.Float64Histogram
	useTime                           metric.Float64Histogram
	leaseErrors, prepErrors, created  metric.Int64Counter
	destroyed, destroyErrs, leaked    metric.Int64Counter
	long                              metric.Int64Counter
	allocated, available, active, que metric.Int64ObservableGauge
	maxItems, minItems, down          metric.Int64ObservableGauge
	granted                           metric.Int64ObservableCounter
	utilization                       metric.Float64ObservableGauge

	rec       []metric.RecordOption  // pool.name
	add       []metric.AddOption     // pool.name
	obs       []metric.ObserveOption // pool.name
	errAdd    [numErrTypes][]metric.AddOption
	reasonAdd [numReasons][]metric.AddOption

	meter metric.Meter
	reg   metric.Registration // the gauges' callback; unregistered by Close
}

// newMetrics makes the instruments of the pool named name on mp, or returns
// nil when mp is nil or a no-op provider: then the pool records nothing.
func newMetrics(mp metric.MeterProvider, name string) (*metrics, error) {
	if mp == nil {
		return nil, nil
	}
	if _, ok := mp.(noop.MeterProvider); ok {
		return nil, nil
	}
	meter := mp.Meter(scopeName)
	m := &metrics{meter: meter}
	poolName := attribute.String("pool.name", name)
	set := attribute.NewSet(poolName)
	opt := metric.WithAttributeSet(set)
	m.rec = []metric.RecordOption{opt}
	m.add = []metric.AddOption{opt}
	m.obs = []metric.ObserveOption{opt}
	for i := range m.errAdd {
		m.errAdd[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(poolName, attribute.String("error.type", errType(i).String())))}
	}
	for i := range m.reasonAdd {
		m.reasonAdd[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(poolName, attribute.String("reason", reason(i).String())))}
	}

	var errs []error
	check := func(err error) { errs = append(errs, err) }
	var err error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		check(err)
		return g
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		check(err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		check(err)
		return h
	}
	m.allocated = gauge("pool.items.allocated", "{item}", "Items the pool accounts for: leased, idle, being created or destroyed.")
	m.available = gauge("pool.items.available", "{item}", "Idle items.")
	m.active = gauge("pool.leases.active", "{lease}", "Items in use: leased, or being created or destroyed.")
	m.que = gauge("pool.leases.queued", "{lease}", "Leases waiting for an item: MaxSize items in use, or MaxConcurrentCreates items being created.")
	m.maxItems = gauge("pool.items.max", "{item}", "MaxSize now: the most items the pool lets exist. Saturation is pool.leases.active / pool.items.max.")
	m.minItems = gauge("pool.items.min", "{item}", "MinSize: the idle floor the pool refills to.")
	m.down = gauge("pool.backend.down", "1", "1 while the pool is down (FailFastAfter creations in a row failed, none succeeded since): leases that must create fail fast; else 0.")
	m.utilization, err = meter.Float64ObservableGauge("pool.utilization", metric.WithUnit("1"),
		metric.WithDescription("pool.leases.active / pool.items.allocated; 0 when nothing is allocated."))
	check(err)
	m.granted, err = meter.Int64ObservableCounter("pool.leases.granted", metric.WithUnit("{lease}"),
		metric.WithDescription("Successful leases."))
	check(err)
	m.waitTime = histogram("pool.lease.wait_time", "Time a successful lease waited for an item; leases served at once are not recorded.")
	m.useTime = histogram("pool.lease.use_time", fmt.Sprintf("How long leases were held, from the lease to its end (Release, Discard or Detach). "+
		"A uniform sample, one lease in %d on each processor: its quantiles are the leases' own, its count is not the number of leases (pool.leases.granted is).", useSampleEvery))
	m.leaseErrors = counter("pool.lease.errors", "{error}", "Failed leases, by error.type.")
	m.prepTime = histogram("pool.preparation.time", "Time of IsReady plus Prepare on one item.")
	m.createTime = histogram("pool.items.create_time", "Time of one factory call, successful or not.")
	m.prepErrors = counter("pool.preparation.errors", "{error}", "Failed preparations: IsReady or Prepare failed or timed out.")
	m.created = counter("pool.items.created", "{item}", "Successful factory calls.")
	m.destroyed = counter("pool.items.destroyed", "{item}", "Items destroyed, by reason.")
	m.destroyErrs = counter("pool.items.destroy_errors", "{error}", "Destroy calls that returned an error or panicked; the item counts as destroyed all the same.")
	m.leaked = counter("pool.leases.leaked", "{lease}", "Leases found unreachable without Release, Discard or Detach.")
	m.long = counter("pool.leases.long", "{lease}", "Leases reported for being held past LeakThreshold.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: MeterProvider: pool %q: make instruments: %w", ErrInvalidOptions, name, err)
	}
	return m, nil
}

// registerGauges registers the gauges' callback, observing what stats
// reports (nothing once it reports false: the pool is gone).
func registerGauges(m *metrics, stats func() (Stats, bool)) error {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s, ok := stats()
		if !ok {
			return nil
		}
		o.ObserveInt64(m.allocated, int64(s.ItemsAllocated), m.obs...)
		o.ObserveInt64(m.available, int64(s.ItemsAvailable), m.obs...)
		o.ObserveInt64(m.active, int64(s.ActiveLeases), m.obs...)
		o.ObserveInt64(m.que, int64(s.QueuedLeases), m.obs...)
		o.ObserveInt64(m.maxItems, int64(s.MaxSize), m.obs...)
		o.ObserveInt64(m.minItems, int64(s.MinSize), m.obs...)
		down := int64(0)
		if s.BackendDown {
			down = 1
		}
		o.ObserveInt64(m.down, down, m.obs...)
		o.ObserveInt64(m.granted, int64(s.Leases), m.obs...)
		util := 0.0
		if s.ItemsAllocated > 0 {
			util = float64(s.ActiveLeases) / float64(s.ItemsAllocated)
		}
		o.ObserveFloat64(m.utilization, util, m.obs...)
		return nil
	}, m.allocated, m.available, m.active, m.que, m.maxItems, m.minItems, m.down, m.granted, m.utilization)
	if err != nil {
		return fmt.Errorf("%w: MeterProvider: register the gauges' callback: %w", ErrInvalidOptions, err)
	}
	m.reg = reg
	return nil
}

// unregister stops the gauges: a closed pool reports none, and the provider
// lets go of it.
func (m *metrics) unregister() error {
	if m.reg == nil {
		return nil
	}
	if err := m.reg.Unregister(); err != nil {
		return fmt.Errorf("pool: unregister the metrics callback: %w", err)
	}
	return nil
}

// One lease in useSampleEvery is recorded in pool.lease.use_time.
const (
	useSampleBits  = 9
	useSampleEvery = 1 << useSampleBits
)

// fibonacci is 2⁶⁴/φ rounded to odd; useSampleBelow is 2⁶⁴/useSampleEvery.
const (
	fibonacci      = 0x9e3779b97f4a7c15
	useSampleBelow = 1 << (64 - useSampleBits)
)

// seconds converts a span of the pool's clock (nanoseconds) to seconds.
func seconds(ns int64) float64 { return float64(ns) / 1e9 }

func (m *metrics) itemDestroyed(why reason, failed bool) {
	m.destroyed.Add(context.Background(), 1, m.reasonAdd[why]...)
	if failed {
		m.destroyErrs.Add(context.Background(), 1, m.add...)
	}
}
