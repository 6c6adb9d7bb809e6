package pool

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// A pool's OpenTelemetry instruments, each measurement with pool.name (or,
// for the conventions' names, db.client.connection.pool.name), durations in
// seconds. A lease and release of an idle item record nothing
// but the pool.lease.use_time sample: gauges are observed from Stats, the
// rest recorded where the pool is slow already. Attribute sets and option
// slices are made once in New: a variadic option passed to an interface
// method escapes, and would allocate on every measurement.

// scopeName is the instrumentation scope: the module path.
const scopeName = "github.com/msl-armory/pool"

// durationBuckets are the advisory histogram bounds in seconds, from 100 µs
// (a quick handoff) to 30 s (a dial's timeout); a View can override them.
var durationBuckets = []float64{0, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// figure is what the pool records as it works, whatever the instrument that
// records it is named: it indexes metrics.hist and metrics.count.
type figure int

const (
	figWaitTime figure = iota // durations
	figUseTime
	figPrepTime
	figCreateTime
	figLeaseErrors // counts
	figPrepErrors
	figCreated
	figDestroyed
	figDestroyErrors
	figLeaked
	figLong
	numFigures
)

// instKind is an instrument's kind: what New makes, and how it measures.
type instKind uint8

const (
	histogram       instKind = iota // a Float64Histogram over durationBuckets, recording its figure
	counter                         // an Int64Counter, adding to its figure
	gauge                           // an Int64ObservableGauge, observing ints
	observedCounter                 // an Int64ObservableCounter, observing ints
	observedUpDown                  // an Int64ObservableUpDownCounter, observing ints
	ratioGauge                      // a Float64ObservableGauge, observing ratio
)

// instrument describes one instrument. A set of names for the pool's
// figures and Stats is a table of them: poolInstruments, and the
// conventions' standardInstruments.
type instrument struct {
	name, unit, desc string
	kind             instKind
	fig              figure                    // histogram, counter: what it records
	attr             string                    // counter, observed ints: the attribute splitting it, if any,
	values           []string                  // with its values, indexed as the figure's adds (or ints' v) are
	ints             func(*reading, int) int64 // gauge, observed*: what it observes, for attr's v-th value
	ratio            func(*reading) float64    // ratioGauge: what it observes
	// conventional: a figure the conventions' instrument carries, in its place,
	// with Options.StandardMetricNames.
	conventional bool
}

// reading is what the gauges' callback reads: Stats, and the items being
// checked, which the conventions' used count leaves out.
type reading struct {
	Stats
	checking int64
}

// observe is what the gauges' callback reads of a pool with Stats s.
func (o *observer[T]) observe(s Stats) reading {
	return reading{Stats: s, checking: o.checking.Load()}
}

// stat makes an instrument's ints from a Stats figure.
func stat(f func(*Stats) int) func(*reading, int) int64 {
	return func(o *reading, _ int) int64 { return int64(f(&o.Stats)) }
}

// poolInstruments are the pool's instruments, named pool.*.
var poolInstruments = []instrument{
	{name: "pool.items.allocated", unit: "{item}", desc: "Items the pool accounts for: leased, idle, being created or destroyed.", kind: gauge, ints: stat(func(s *Stats) int { return s.ItemsAllocated })},
	{name: "pool.items.available", unit: "{item}", desc: "Idle items.", kind: gauge, ints: stat(func(s *Stats) int { return s.ItemsAvailable }), conventional: true},
	{name: "pool.leases.active", unit: "{lease}", desc: "Items in use: leased, or being created or destroyed.", kind: gauge, ints: stat(func(s *Stats) int { return s.ActiveLeases })},
	{name: "pool.leases.queued", unit: "{lease}", desc: "Leases waiting for an item: MaxSize items in use, or MaxConcurrentCreates items being created.", kind: gauge, ints: stat(func(s *Stats) int { return s.QueuedLeases }), conventional: true},
	{name: "pool.items.max", unit: "{item}", desc: "MaxSize now: the most items the pool lets exist. Saturation is pool.leases.active / pool.items.max.", kind: gauge, ints: stat(func(s *Stats) int { return s.MaxSize }), conventional: true},
	{name: "pool.items.limit", unit: "{item}", desc: "The limit on items in existence now: with AdaptiveSize, the limit the pool found under MaxSize; else MaxSize.", kind: gauge, ints: stat(func(s *Stats) int { return s.Limit }), conventional: true},
	{name: "pool.items.min", unit: "{item}", desc: "MinSize: the idle floor the pool refills to.", kind: gauge, ints: stat(func(s *Stats) int { return s.MinSize })},
	{name: "pool.backend.down", unit: "1", desc: "1 while the pool is down (FailFastAfter creations in a row failed, none succeeded since): leases that must create fail fast; else 0.", kind: gauge, ints: func(o *reading, _ int) int64 {
		if o.BackendDown {
			return 1
		}
		return 0
	}},
	{name: "pool.utilization", unit: "1", desc: "pool.leases.active / pool.items.allocated; 0 when nothing is allocated.", kind: ratioGauge, ratio: func(o *reading) float64 { return float64(o.ActiveLeases) / float64(max(o.ItemsAllocated, 1)) }},
	{name: "pool.leases.granted", unit: "{lease}", desc: "Successful leases.", kind: observedCounter, ints: func(o *reading, _ int) int64 { return int64(o.Leases) }},
	{name: "pool.lease.wait_time", unit: "s", desc: "Time a successful lease waited for an item; leases served at once are not recorded.", kind: histogram, fig: figWaitTime, conventional: true},
	{name: "pool.lease.use_time", unit: "s", desc: fmt.Sprintf("How long leases were held, from the lease to its end (Release, Discard or Detach). "+
		"A uniform sample, one lease in %d on each processor: its quantiles are the leases' own, its count is not the number of leases (pool.leases.granted is).", useSampleEvery),
		kind: histogram, fig: figUseTime, conventional: true},
	{name: "pool.lease.errors", unit: "{error}", desc: "Failed leases, by error.type.", kind: counter, fig: figLeaseErrors, attr: "error.type", values: errTypeNames[:]},
	{name: "pool.preparation.time", unit: "s", desc: "Time of IsReady plus Prepare on one item.", kind: histogram, fig: figPrepTime},
	{name: "pool.items.create_time", unit: "s", desc: "Time of one factory call, successful or not.", kind: histogram, fig: figCreateTime, conventional: true},
	{name: "pool.preparation.errors", unit: "{error}", desc: "Failed preparations: IsReady or Prepare failed or timed out.", kind: counter, fig: figPrepErrors},
	{name: "pool.items.created", unit: "{item}", desc: "Successful factory calls.", kind: counter, fig: figCreated},
	{name: "pool.items.destroyed", unit: "{item}", desc: "Items destroyed, by reason.", kind: counter, fig: figDestroyed, attr: "reason", values: reasonNames[:]},
	{name: "pool.items.destroy_errors", unit: "{error}", desc: "Destroy calls that returned an error or panicked; the item counts as destroyed all the same.", kind: counter, fig: figDestroyErrors},
	{name: "pool.leases.leaked", unit: "{lease}", desc: "Leases found unreachable without Release, Discard or Detach.", kind: counter, fig: figLeaked},
	{name: "pool.leases.long", unit: "{lease}", desc: "Leases reported for being held past LeakThreshold.", kind: counter, fig: figLong},
}

// The conventions' attribute keys: the pool's name, and an item's state.
const (
	stdPoolNameKey = "db.client.connection.pool.name"
	stdStateKey    = "db.client.connection.state"
)

// standardInstruments are the OpenTelemetry semantic conventions'
// connection-pool instruments, as Options.StandardMetricNames publishes
// them: used counts leased items only (not those being created, checked or
// destroyed), idle.max is MaxSize, idle.min is MinIdle.
var standardInstruments = []instrument{
	{name: "db.client.connection.count", unit: "{connection}", desc: "The number of connections that are currently in state described by the `state` attribute.",
		kind: observedUpDown, attr: stdStateKey, values: []string{"idle", "used"}, ints: func(o *reading, v int) int64 {
			if v == 0 {
				return int64(o.ItemsAvailable)
			}
			return max(int64(o.ActiveLeases-o.Creating-o.Destroying)-o.checking, 0)
		}},
	{name: "db.client.connection.idle.max", unit: "{connection}", desc: "The maximum number of idle open connections allowed.", kind: observedUpDown, ints: stat(func(s *Stats) int { return s.Limit })},
	{name: "db.client.connection.idle.min", unit: "{connection}", desc: "The minimum number of idle open connections allowed.", kind: observedUpDown, ints: stat(func(s *Stats) int { return s.MinIdle })},
	{name: "db.client.connection.max", unit: "{connection}", desc: "The maximum number of open connections allowed.", kind: observedUpDown, ints: stat(func(s *Stats) int { return s.Limit })},
	{name: "db.client.connection.pending_requests", unit: "{request}", desc: "The number of current pending requests for an open connection.", kind: observedUpDown, ints: stat(func(s *Stats) int { return s.QueuedLeases })},
	{name: "db.client.connection.timeouts", unit: "{timeout}", desc: "The number of connection timeouts that have occurred trying to obtain a connection from the pool.",
		kind: observedCounter, ints: func(o *reading, _ int) int64 { return int64(o.Timeouts) }},
	{name: "db.client.connection.create_time", unit: "s", desc: "The time it took to create a new connection.", kind: histogram, fig: figCreateTime},
	{name: "db.client.connection.wait_time", unit: "s", desc: "The time it took to obtain an open connection from the pool.", kind: histogram, fig: figWaitTime},
	{name: "db.client.connection.use_time", unit: "s", desc: "The time between borrowing a connection and returning it to the pool.", kind: histogram, fig: figUseTime},
}

// metrics holds a pool's instruments and their precomputed options.
type metrics struct {
	hist  [numFigures]metric.Float64Histogram // the histograms' figures
	recs  [numFigures][]metric.RecordOption   // a histogram's options
	count [numFigures]metric.Int64Counter     // the counters'
	adds  [numFigures][][]metric.AddOption    // a counter's options, by its attribute's value

	observed []metric.Observable      // the gauges' callback's instruments,
	observes []instrument             // with their rows of the table,
	obs      [][]metric.ObserveOption // and their options, by attribute value

	meter metric.Meter
	reg   metric.Registration // the gauges' callback; unregistered by Close
}

// newMetrics makes the instruments of the pool named name on mp, the
// conventions' in place of their figures' own with standard, or returns
// nil when mp is nil or a no-op provider: then the pool records nothing.
func newMetrics(mp metric.MeterProvider, name string, standard bool) (*metrics, error) {
	if _, ok := mp.(noop.MeterProvider); ok || mp == nil {
		return nil, nil
	}
	m := &metrics{meter: mp.Meter(scopeName)}
	var errs []error
	for _, in := range poolInstruments {
		if !standard || !in.conventional {
			errs = append(errs, m.make(in, attribute.String("pool.name", name)))
		}
	}
	for _, in := range standardInstruments {
		if standard {
			errs = append(errs, m.make(in, attribute.String(stdPoolNameKey, name)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: MeterProvider: pool %q: make instruments: %w", ErrInvalidOptions, name, err)
	}
	return m, nil
}

// make makes in, each measurement with the attribute named (and in's own).
func (m *metrics) make(in instrument, named attribute.KeyValue) (err error) {
	sets := []attribute.Set{attribute.NewSet(named)}
	if in.attr != "" {
		sets = nil
		for _, v := range in.values {
			sets = append(sets, attribute.NewSet(named, attribute.String(in.attr, v)))
		}
	}
	unit, desc := metric.WithUnit(in.unit), metric.WithDescription(in.desc)
	var g metric.Observable
	switch in.kind {
	case histogram:
		m.hist[in.fig], err = m.meter.Float64Histogram(in.name, unit, desc, metric.WithExplicitBucketBoundaries(durationBuckets...))
		m.recs[in.fig] = []metric.RecordOption{metric.WithAttributeSet(sets[0])}
	case counter:
		m.count[in.fig], err = m.meter.Int64Counter(in.name, unit, desc)
		for _, set := range sets {
			m.adds[in.fig] = append(m.adds[in.fig], []metric.AddOption{metric.WithAttributeSet(set)})
		}
	case gauge:
		g, err = m.meter.Int64ObservableGauge(in.name, unit, desc)
	case observedCounter:
		g, err = m.meter.Int64ObservableCounter(in.name, unit, desc)
	case observedUpDown:
		g, err = m.meter.Int64ObservableUpDownCounter(in.name, unit, desc)
	case ratioGauge:
		g, err = m.meter.Float64ObservableGauge(in.name, unit, desc)
	}
	if g != nil {
		var opts []metric.ObserveOption
		for _, set := range sets {
			opts = append(opts, metric.WithAttributeSet(set))
		}
		m.observed, m.observes, m.obs = append(m.observed, g), append(m.observes, in), append(m.obs, opts)
	}
	return err
}

// inc adds one to counter f, for the value by of its attribute (0 without
// one); nothing without metrics.
func (m *metrics) inc(ctx context.Context, f figure, by int) {
	if m != nil {
		m.count[f].Add(ctx, 1, m.adds[f][by]...)
	}
}

// startGauges registers the gauges' callback, observing what read reports
// (nothing once it reports false: the pool is gone); without metrics it
// does nothing. The callback holds m, not the observer, which is part of
// the pool.
func (o *observer[T]) startGauges(read func() (reading, bool)) error {
	m := o.m
	if m == nil {
		return nil
	}
	reg, err := m.meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		r, ok := read()
		if !ok {
			return nil
		}
		for i, in := range m.observes {
			for v, opt := range m.obs[i] {
				switch g := m.observed[i].(type) {
				case metric.Int64Observable:
					ob.ObserveInt64(g, in.ints(&r, v), opt)
				case metric.Float64Observable:
					ob.ObserveFloat64(g, in.ratio(&r), opt)
				}
			}
		}
		return nil
	}, m.observed...)
	if err != nil {
		return fmt.Errorf("%w: MeterProvider: register the gauges' callback: %w", ErrInvalidOptions, err)
	}
	m.reg = reg
	return nil
}

// stopGauges unregisters the gauges: a closed pool reports none, and the
// provider lets go of it.
func (o *observer[T]) stopGauges() error {
	if o.m == nil || o.m.reg == nil {
		return nil
	}
	if err := o.m.reg.Unregister(); err != nil {
		return fmt.Errorf("pool: unregister the metrics callback: %w", err)
	}
	return nil
}

// took records in histogram f the time since start, a reading of the clock.
func (o *observer[T]) took(ctx context.Context, f figure, start int64) {
	o.m.hist[f].Record(ctx, float64(o.clk.now()-start)/1e9, o.m.recs[f]...)
}

// One lease in useSampleEvery is recorded in pool.lease.use_time (see
// observer.sampled): fibonacci is 2⁶⁴/φ rounded to odd; useSampleBelow is
// 2⁶⁴/useSampleEvery.
const (
	useSampleBits  = 9
	useSampleEvery = 1 << useSampleBits
	fibonacci      = 0x9e3779b97f4a7c15
	useSampleBelow = 1 << (64 - useSampleBits)
)
