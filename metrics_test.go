package pool

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// mtProvider returns an SDK meter provider that exports to a ManualReader,
// shut down when the test ends.
func mtProvider(t testing.TB) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, r
}

// mtCollected is one collection of the pool's instrumentation scope.
type mtCollected map[string]metricdata.Metrics

// mtCollect collects r and returns the pool scope's metrics by name; it
// fails the test when another scope shows up.
func mtCollect(t *testing.T, r *sdkmetric.ManualReader) mtCollected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	got := mtCollected{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, scopeName, sm.Scope.Name, "instrumentation scope")
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	return got
}

// mtAttrs is the attribute set of a point: pool.name plus kv ("key",
// "value", ...).
func mtAttrs(pool string, kv ...string) attribute.Set {
	attrs := []attribute.KeyValue{attribute.String("pool.name", pool)}
	for i := 0; i+1 < len(kv); i += 2 {
		attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
	}
	return attribute.NewSet(attrs...)
}

// mtMetric returns the named metric, checking its unit.
func (c mtCollected) mtMetric(t *testing.T, name, unit string) metricdata.Metrics {
	t.Helper()
	m, ok := c[name]
	require.True(t, ok, "metric %s not collected; have %v", name, c.names())
	assert.Equal(t, unit, m.Unit, "unit of %s", name)
	return m
}

func (c mtCollected) names() []string {
	var ns []string
	for n := range c {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

// mtCounter returns the counter's points by attribute set, checking that it
// is a monotonic cumulative sum.
func (c mtCollected) mtCounter(t *testing.T, name, unit string) map[attribute.Distinct]int64 {
	t.Helper()
	sum, ok := c.mtMetric(t, name, unit).Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is not an int64 counter", name)
	assert.True(t, sum.IsMonotonic, "%s is not monotonic", name)
	assert.Equal(t, metricdata.CumulativeTemporality, sum.Temporality)
	pts := map[attribute.Distinct]int64{}
	for _, dp := range sum.DataPoints {
		pts[dp.Attributes.Equivalent()] = dp.Value
	}
	return pts
}

// mtPoolCounter returns the counter name's value for the pool named pool:
// 0 when the counter has no point yet.
func (c mtCollected) mtPoolCounter(t *testing.T, name, unit, pool string) int64 {
	t.Helper()
	if _, ok := c[name]; !ok {
		return 0
	}
	set := mtAttrs(pool)
	return c.mtCounter(t, name, unit)[set.Equivalent()]
}

// mtGauge returns the int64 gauge's points by attribute set.
func (c mtCollected) mtGauge(t *testing.T, name, unit string) map[attribute.Distinct]int64 {
	t.Helper()
	g, ok := c.mtMetric(t, name, unit).Data.(metricdata.Gauge[int64])
	require.True(t, ok, "%s is not an int64 gauge", name)
	pts := map[attribute.Distinct]int64{}
	for _, dp := range g.DataPoints {
		pts[dp.Attributes.Equivalent()] = dp.Value
	}
	return pts
}

// mtHist returns the histogram's points by attribute set.
func (c mtCollected) mtHist(t *testing.T, name string) map[attribute.Distinct]metricdata.HistogramDataPoint[float64] {
	t.Helper()
	h, ok := c.mtMetric(t, name, "s").Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is not a float64 histogram", name)
	pts := map[attribute.Distinct]metricdata.HistogramDataPoint[float64]{}
	for _, dp := range h.DataPoints {
		pts[dp.Attributes.Equivalent()] = dp
	}
	return pts
}

// mtWant is an expected point: its attributes and value.
type mtWant struct {
	attrs attribute.Set
	value int64
}

// mtAssertPoints asserts that pts holds exactly want.
func mtAssertPoints(t *testing.T, name string, pts map[attribute.Distinct]int64, want ...mtWant) {
	t.Helper()
	exp := map[attribute.Distinct]int64{}
	for _, w := range want {
		exp[w.attrs.Equivalent()] = w.value
	}
	assert.Equal(t, exp, pts, "points of %s", name)
}

// mtPreparer is a Preparer that takes prepTook on the fake clock and fails
// while fail is set.
type mtPreparer struct {
	clk  *fakeClock
	fail atomic.Bool
}

const (
	mtCreateTook = int64(time.Millisecond)     // what one factory call takes on the fake clock
	mtPrepTook   = int64(2 * time.Millisecond) // what one IsReady takes
)

var errMtPrepare = errors.New("mt: not ready")

func (m *mtPreparer) IsReady(context.Context, *conn) (bool, error) {
	m.clk.advance(mtPrepTook)
	if m.fail.Load() {
		return false, errMtPrepare
	}
	return true, nil
}

func (m *mtPreparer) Prepare(context.Context, *conn) error { return nil }

// mtSlowFactory is a tracker whose every Create takes mtCreateTook on the
// fake clock.
type mtSlowFactory struct {
	*tracker
	clk *fakeClock
}

func (f mtSlowFactory) Create(ctx context.Context) (*conn, error) {
	f.clk.advance(mtCreateTook)
	return f.tracker.Create(ctx)
}

// TestMetricsScripted runs a script through every instrument and checks the
// value, kind, unit and attributes of each.
func TestMetricsScripted(t *testing.T) {
	mp, r := mtProvider(t)
	clk := &fakeClock{}
	tr := &tracker{}
	prep := &mtPreparer{clk: clk}
	p, err := New[*conn](context.Background(), mtSlowFactory{tr, clk}, Options[*conn]{
		Name:           "scripted",
		MaxSize:        2,
		LeaseTimeout:   20 * time.Millisecond,
		IdleTimeout:    10 * time.Second,
		Preparer:       prep,
		CheckAfterIdle: time.Hour, // idle items are not checked again: fresh ones are
		Destroy:        tr.destroy,
		MeterProvider:  mp,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	p.clk.fake = clk.now
	ctx := context.Background()

	// Two fresh leases, created and prepared: every permit is held.
	l1, l2 := mustLease(t, p), mustLease(t, p)

	// A timeout, a canceled ctx, an exhausted TryLease.
	_, err = p.Lease(ctx)
	require.ErrorIs(t, err, ErrLeaseTimeout)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.Lease(canceled)
	require.ErrorIs(t, err, context.Canceled)
	_, err = p.TryLease(ctx)
	require.ErrorIs(t, err, ErrExhausted)

	// A lease that queues and gets l2's item handed over.
	ch := leaseAsync(ctx, p)
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == 1 }, testWait, time.Millisecond)
	l2.Release()
	o := awaitLease(t, ch)
	require.NoError(t, o.err)
	l3 := o.l

	// A discard, a failed creation, a failed preparation of a fresh item.
	l3.Discard()
	awaitDestroys(t, p) // Destroy runs on the pool's goroutine, and holds l3's room until then
	tr.setFail(errBoom)
	_, err = p.Lease(ctx)
	require.ErrorIs(t, err, errBoom)
	tr.setFail(nil)
	prep.fail.Store(true)
	_, err = p.Lease(ctx)
	require.ErrorIs(t, err, errMtPrepare)
	prep.fail.Store(false)
	awaitDestroys(t, p)

	// An idle expiry: l1's item idles past IdleTimeout, the next lease
	// destroys it and creates a fresh one.
	l1.Release()
	clk.advance(int64(11 * time.Second))
	l4 := mustLease(t, p)

	// Clear destroys l4's item once idle.
	l4.Release()
	p.Clear()
	awaitDestroys(t, p)

	// One leased, one idle.
	l5 := mustLease(t, p)
	l6 := mustLease(t, p)
	l6.Release()

	s := p.Stats()
	require.Equal(t, uint64(6), s.Created)
	require.Equal(t, uint64(6), s.Leases)
	require.Equal(t, 1, s.ActiveLeases)
	require.Equal(t, 1, s.ItemsAvailable)

	name := mtAttrs("scripted")
	errOf := func(typ string) attribute.Set { return mtAttrs("scripted", "error.type", typ) }
	destroyedBy := func(why string) attribute.Set { return mtAttrs("scripted", "reason", why) }

	c := mtCollect(t, r)
	mtAssertPoints(t, "pool.items.allocated", c.mtGauge(t, "pool.items.allocated", "{item}"), mtWant{name, 2})
	mtAssertPoints(t, "pool.items.available", c.mtGauge(t, "pool.items.available", "{item}"), mtWant{name, 1})
	mtAssertPoints(t, "pool.leases.active", c.mtGauge(t, "pool.leases.active", "{lease}"), mtWant{name, 1})
	mtAssertPoints(t, "pool.leases.queued", c.mtGauge(t, "pool.leases.queued", "{lease}"), mtWant{name, 0})
	util, ok := c.mtMetric(t, "pool.utilization", "1").Data.(metricdata.Gauge[float64])
	require.True(t, ok, "pool.utilization is not a float64 gauge")
	require.Len(t, util.DataPoints, 1)
	assert.Equal(t, name, util.DataPoints[0].Attributes)
	assert.Equal(t, 0.5, util.DataPoints[0].Value)
	granted, ok := c.mtMetric(t, "pool.leases.granted", "{lease}").Data.(metricdata.Sum[int64])
	require.True(t, ok, "pool.leases.granted is not an int64 sum")
	assert.True(t, granted.IsMonotonic)
	require.Len(t, granted.DataPoints, 1)
	assert.Equal(t, int64(6), granted.DataPoints[0].Value)

	mtAssertPoints(t, "pool.lease.errors", c.mtCounter(t, "pool.lease.errors", "{error}"),
		mtWant{errOf("timeout"), 1}, mtWant{errOf("canceled"), 1}, mtWant{errOf("exhausted"), 1},
		mtWant{errOf("create"), 1}, mtWant{errOf("prepare"), 1})
	mtAssertPoints(t, "pool.items.created", c.mtCounter(t, "pool.items.created", "{item}"), mtWant{name, 6})
	mtAssertPoints(t, "pool.preparation.errors", c.mtCounter(t, "pool.preparation.errors", "{error}"), mtWant{name, 1})
	mtAssertPoints(t, "pool.items.destroyed", c.mtCounter(t, "pool.items.destroyed", "{item}"),
		mtWant{destroyedBy("discard"), 1}, mtWant{destroyedBy("prepare"), 1},
		mtWant{destroyedBy("idle"), 1}, mtWant{destroyedBy("clear"), 1})
	assert.NotContains(t, c, "pool.leases.leaked", "nothing leaked, nothing recorded")

	// Only the lease that queued is in wait_time; its wait is real time.
	waits := c.mtHist(t, "pool.lease.wait_time")
	require.Contains(t, waits, name.Equivalent())
	assert.Len(t, waits, 1)
	assert.Equal(t, uint64(1), waits[name.Equivalent()].Count)
	assert.Positive(t, waits[name.Equivalent()].Sum)
	// Seven factory calls (one failed), 1 ms each on the fake clock.
	creates := c.mtHist(t, "pool.items.create_time")
	assert.Len(t, creates, 1)
	assert.Equal(t, uint64(7), creates[name.Equivalent()].Count)
	assert.InDelta(t, 0.007, creates[name.Equivalent()].Sum, 1e-9)
	// Six preparations of fresh items (one failed), 2 ms each; the handed
	// over and the expired idle items were not checked.
	preps := c.mtHist(t, "pool.preparation.time")
	assert.Len(t, preps, 1)
	assert.Equal(t, uint64(6), preps[name.Equivalent()].Count)
	assert.InDelta(t, 0.012, preps[name.Equivalent()].Sum, 1e-9)

	// Close destroys the idle item now and l5's when it comes back; the
	// gauges stop, the counters go on.
	require.NoError(t, p.Close())
	l5.Release()
	awaitDestroys(t, p)
	_, err = p.Lease(ctx)
	require.ErrorIs(t, err, ErrClosed)
	c = mtCollect(t, r)
	for _, g := range []string{"pool.items.allocated", "pool.items.available", "pool.leases.active", "pool.leases.queued", "pool.utilization", "pool.leases.granted"} {
		assert.NotContains(t, c, g, "a closed pool still reports %s", g)
	}
	mtAssertPoints(t, "pool.items.destroyed", c.mtCounter(t, "pool.items.destroyed", "{item}"),
		mtWant{destroyedBy("discard"), 1}, mtWant{destroyedBy("prepare"), 1},
		mtWant{destroyedBy("idle"), 1}, mtWant{destroyedBy("clear"), 1}, mtWant{destroyedBy("close"), 2})
	mtAssertPoints(t, "pool.lease.errors", c.mtCounter(t, "pool.lease.errors", "{error}"),
		mtWant{errOf("timeout"), 1}, mtWant{errOf("canceled"), 1}, mtWant{errOf("exhausted"), 1},
		mtWant{errOf("create"), 1}, mtWant{errOf("prepare"), 1}, mtWant{errOf("closed"), 1})

	// The metrics agree with Stats.
	s = p.Stats()
	assert.Equal(t, uint64(1), s.Timeouts)
	assert.Equal(t, uint64(1), s.Canceled)
	assert.Equal(t, uint64(6), s.Created)
	assert.Equal(t, uint64(6), s.Destroyed)
	assert.Equal(t, uint64(1), s.IdleExpired)
	assert.Equal(t, uint64(1), s.PrepareFailed)
	assert.Zero(t, tr.live.Load())
}

// TestMetricsLifetimeAndReset covers the destroy reasons the script does
// not: lifetime and reset.
func TestMetricsLifetimeAndReset(t *testing.T) {
	mp, r := mtProvider(t)
	clk := &fakeClock{}
	failReset := atomic.Bool{}
	p, _ := newTracked(t, Options[*conn]{
		Name:        "reasons",
		MaxSize:     1,
		MaxLifetime: time.Minute,
		Reset: func(*conn) error {
			if failReset.Load() {
				return errBoom
			}
			return nil
		},
		MeterProvider: mp,
	})
	p.clk.fake = clk.now
	mustLease(t, p).Release() // created at 0
	l := mustLease(t, p)
	clk.advance(int64(2 * time.Minute))
	l.Release() // past MaxLifetime: destroyed on release
	failReset.Store(true)
	awaitDestroys(t, p)
	mustLease(t, p).Release() // Reset fails: destroyed
	awaitDestroys(t, p)

	c := mtCollect(t, r)
	mtAssertPoints(t, "pool.items.destroyed", c.mtCounter(t, "pool.items.destroyed", "{item}"),
		mtWant{mtAttrs("reasons", "reason", "lifetime"), 1}, mtWant{mtAttrs("reasons", "reason", "reset"), 1})
	assert.Equal(t, uint64(1), p.Stats().LifetimeExpired)
}

// TestMetricsCanceledCreation counts a creation the caller's ctx ended as
// canceled, not as a failed creation.
func TestMetricsCanceledCreation(t *testing.T) {
	mp, r := mtProvider(t)
	p, tr := newTracked(t, Options[*conn]{Name: "impatient", MaxSize: 1, MeterProvider: mp})
	tr.block = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	ch := leaseAsync(ctx, p)
	require.Eventually(t, func() bool { return tr.live.Load() == 1 }, testWait, time.Millisecond)
	cancel()
	o := awaitLease(t, ch)
	require.ErrorIs(t, o.err, context.Canceled)
	close(tr.block) // the abandoned creation finishes in the background and goes idle
	require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 1 }, testWait, time.Millisecond)

	c := mtCollect(t, r)
	mtAssertPoints(t, "pool.lease.errors", c.mtCounter(t, "pool.lease.errors", "{error}"),
		mtWant{mtAttrs("impatient", "error.type", "canceled"), 1})
	mtAssertPoints(t, "pool.items.created", c.mtCounter(t, "pool.items.created", "{item}"),
		mtWant{mtAttrs("impatient"), 1})
}

// TestMetricsBackendDownAndMaxUses: pool.backend.down is 1 while the pool
// is down and 0 once the probe succeeded; a lease that failed fast counts
// as error.type backend_down, and an item retired by MaxUses as reason
// max_uses.
func TestMetricsBackendDownAndMaxUses(t *testing.T) {
	mp, r := mtProvider(t)
	p, tr := newTracked(t, Options[*conn]{Name: "outage", MaxSize: 2, FailFastAfter: 1, CreateTimeout: 10 * time.Second, MaxUses: 1,
		UpkeepInterval: 16 * time.Millisecond, MeterProvider: mp})
	set := mtAttrs("outage")
	down := func() int64 {
		return mtCollect(t, r).mtGauge(t, "pool.backend.down", "1")[set.Equivalent()]
	}
	assert.Zero(t, down())
	tr.setFail(errBoom)
	_, err := p.Lease(context.Background()) // the failure that puts the pool down
	require.ErrorIs(t, err, errBoom)
	_, err = p.Lease(context.Background())
	require.ErrorIs(t, err, ErrBackendDown)
	assert.EqualValues(t, 1, down())

	tr.setFail(nil)
	require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 1 }, testWait, time.Millisecond, "the probe's item")
	assert.Zero(t, down())
	mustLease(t, p).Release() // its one use: destroyed
	awaitDestroys(t, p)

	c := mtCollect(t, r)
	mtAssertPoints(t, "pool.lease.errors", c.mtCounter(t, "pool.lease.errors", "{error}"),
		mtWant{mtAttrs("outage", "error.type", "create"), 1}, mtWant{mtAttrs("outage", "error.type", "backend_down"), 1})
	mtAssertPoints(t, "pool.items.destroyed", c.mtCounter(t, "pool.items.destroyed", "{item}"),
		mtWant{mtAttrs("outage", "reason", "max_uses"), 1})
}

// TestMetricsTwoPoolsReportSeparately checks that pool.name keeps two pools
// on one provider apart.
func TestMetricsTwoPoolsReportSeparately(t *testing.T) {
	mp, r := mtProvider(t)
	a, _ := newTracked(t, Options[*conn]{Name: "a", MaxSize: 4, MeterProvider: mp})
	b, _ := newTracked(t, Options[*conn]{Name: "b", MaxSize: 4, MinSize: 1, MeterProvider: mp})
	la := mustLease(t, a)
	defer la.Release()
	lb1, lb2 := mustLease(t, b), mustLease(t, b)
	defer lb1.Release()
	defer lb2.Release()
	la.Discard()
	awaitDestroys(t, a)

	c := mtCollect(t, r)
	mtAssertPoints(t, "pool.items.created", c.mtCounter(t, "pool.items.created", "{item}"),
		mtWant{mtAttrs("a"), 1}, mtWant{mtAttrs("b"), 2})
	mtAssertPoints(t, "pool.leases.active", c.mtGauge(t, "pool.leases.active", "{lease}"),
		mtWant{mtAttrs("a"), 0}, mtWant{mtAttrs("b"), 2})
	mtAssertPoints(t, "pool.items.allocated", c.mtGauge(t, "pool.items.allocated", "{item}"),
		mtWant{mtAttrs("a"), 0}, mtWant{mtAttrs("b"), 2})
	mtAssertPoints(t, "pool.items.destroyed", c.mtCounter(t, "pool.items.destroyed", "{item}"),
		mtWant{mtAttrs("a", "reason", "discard"), 1})
	util := c.mtMetric(t, "pool.utilization", "1").Data.(metricdata.Gauge[float64])
	byPool := map[attribute.Distinct]float64{}
	for _, dp := range util.DataPoints {
		byPool[dp.Attributes.Equivalent()] = dp.Value
	}
	setA, setB := mtAttrs("a"), mtAttrs("b")
	assert.Equal(t, map[attribute.Distinct]float64{
		setA.Equivalent(): 0, // nothing allocated
		setB.Equivalent(): 1,
	}, byPool)

	// Closing one pool leaves the other's gauges.
	require.NoError(t, a.Close())
	c = mtCollect(t, r)
	mtAssertPoints(t, "pool.leases.active", c.mtGauge(t, "pool.leases.active", "{lease}"), mtWant{mtAttrs("b"), 2})
}

// TestMetricsItemsMaxAndMin: the gauges are MaxSize and MinSize as they
// are now, following SetMaxSize, so that a dashboard computes saturation
// as pool.leases.active / pool.items.max.
func TestMetricsItemsMaxAndMin(t *testing.T) {
	mp, r := mtProvider(t)
	p, _ := newTracked(t, Options[*conn]{Name: "sat", MinSize: 2, MaxSize: 8, MeterProvider: mp})
	gauges := func() (active, maxItems, minItems int64) {
		c := mtCollect(t, r)
		set := mtAttrs("sat")
		return c.mtGauge(t, "pool.leases.active", "{lease}")[set.Equivalent()],
			c.mtGauge(t, "pool.items.max", "{item}")[set.Equivalent()],
			c.mtGauge(t, "pool.items.min", "{item}")[set.Equivalent()]
	}
	a, mx, mn := gauges()
	assert.Equal(t, [3]int64{0, 8, 2}, [3]int64{a, mx, mn})

	ls := []Lease[*conn]{mustLease(t, p), mustLease(t, p)}
	a, mx, _ = gauges()
	assert.InDelta(t, 0.25, float64(a)/float64(mx), 1e-9, "saturation")

	require.NoError(t, p.SetMaxSize(4))
	a, mx, mn = gauges()
	assert.Equal(t, [3]int64{2, 4, 2}, [3]int64{a, mx, mn})
	assert.InDelta(t, 0.5, float64(a)/float64(mx), 1e-9, "saturation after the shrink")
	require.NoError(t, p.SetMaxSize(16))
	_, mx, _ = gauges()
	assert.Equal(t, int64(16), mx)
	for _, l := range ls {
		l.Release()
	}
}

// mtCountingProvider counts the meters asked of it.
type mtCountingProvider struct {
	metric.MeterProvider
	meters atomic.Int64
}

func (m *mtCountingProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	m.meters.Add(1)
	return m.MeterProvider.Meter(name, opts...)
}

func TestMetricsNilProviderRegistersNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		mp   metric.MeterProvider
	}{
		{"nil", nil},
		{"noop", noop.NewMeterProvider()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTracked(t, Options[*conn]{MinSize: 1, MeterProvider: tc.mp})
			assert.Nil(t, p.ob.m, "instruments made without a provider")
			mustLease(t, p).Release()
		})
	}
	t.Run("sdk", func(t *testing.T) { // the control: a real provider is used
		sdk, _ := mtProvider(t)
		cp := &mtCountingProvider{MeterProvider: sdk}
		p, _ := newTracked(t, Options[*conn]{MeterProvider: cp})
		assert.NotNil(t, p.ob.m)
		assert.Positive(t, cp.meters.Load())
	})
}

// TestMetricsLeaseReleaseAllocatesNothing: with metrics on, a lease and
// release of an idle item, and a refused TryLease, allocate nothing.
func TestMetricsLeaseReleaseAllocatesNothing(t *testing.T) {
	mp, r := mtProvider(t)
	p, _ := newTracked(t, Options[*conn]{MinSize: 1, MaxSize: 1, MeterProvider: mp})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		l, err := p.Lease(ctx)
		if err != nil {
			panic(err)
		}
		l.Release()
	})
	assert.Zero(t, allocs, "allocations per lease and release")

	held := mustLease(t, p)
	defer held.Release()
	_, _ = p.TryLease(ctx) // the first measurement of a series may allocate in the SDK
	allocs = testing.AllocsPerRun(1000, func() {
		if _, err := p.TryLease(ctx); err == nil {
			panic("TryLease succeeded on an exhausted pool")
		}
	})
	assert.Zero(t, allocs, "allocations per refused TryLease (a pool.lease.errors Add)")
	c := mtCollect(t, r)
	mtAssertPoints(t, "pool.lease.errors", c.mtCounter(t, "pool.lease.errors", "{error}"),
		mtWant{mtAttrs("conn.Pool", "error.type", "exhausted"), 1002})
}
