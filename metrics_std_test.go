package pool

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv137 "go.opentelemetry.io/otel/semconv/v1.37.0"
	dbconv137 "go.opentelemetry.io/otel/semconv/v1.37.0/dbconv"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
)

// conventionInstrument is what OpenTelemetry-Go's semconv packages say of
// one instrument of the connection-pool conventions.
type conventionInstrument interface {
	Name() string
	Unit() string
	Description() string
}

// stdConventions are the nine instruments of the conventions, as the
// newest semconv package this module has defines them, with the kind each
// wraps (its struct's one field: the metric API's instrument interface).
var stdConventions = []conventionInstrument{
	dbconv.ClientConnectionCount{},
	dbconv.ClientConnectionIdleMax{},
	dbconv.ClientConnectionIdleMin{},
	dbconv.ClientConnectionMax{},
	dbconv.ClientConnectionPendingRequests{},
	dbconv.ClientConnectionTimeouts{},
	dbconv.ClientConnectionCreateTime{},
	dbconv.ClientConnectionWaitTime{},
	dbconv.ClientConnectionUseTime{},
}

// The pool's own instruments whose figures the conventions carry: with
// StandardMetricNames they give way to the conventions' names.
var stdReplaced = []string{
	"pool.items.available", "pool.leases.queued", "pool.items.max", "pool.items.limit",
	"pool.lease.wait_time", "pool.lease.use_time", "pool.items.create_time",
}

// TestStandardMetricNamesAreTheConventions checks, against the semconv
// packages rather than from memory, that the conventions' names, units and
// kinds have not moved between v1.37.0 and the newest this module has, and
// that the attribute keys and state values are the ones the pool emits.
func TestStandardMetricNamesAreTheConventions(t *testing.T) {
	old := []conventionInstrument{
		dbconv137.ClientConnectionCount{}, dbconv137.ClientConnectionIdleMax{},
		dbconv137.ClientConnectionIdleMin{}, dbconv137.ClientConnectionMax{},
		dbconv137.ClientConnectionPendingRequests{}, dbconv137.ClientConnectionTimeouts{},
		dbconv137.ClientConnectionCreateTime{}, dbconv137.ClientConnectionWaitTime{},
		dbconv137.ClientConnectionUseTime{},
	}
	require.Len(t, old, len(stdConventions))
	for i, c := range stdConventions {
		assert.Equal(t, old[i].Name(), c.Name())
		assert.Equal(t, old[i].Unit(), c.Unit(), c.Name())
		assert.Equal(t, conventionKind(old[i]), conventionKind(c), c.Name())
	}
	assert.Equal(t, semconv137.DBClientConnectionPoolNameKey, semconv.DBClientConnectionPoolNameKey)
	assert.Equal(t, semconv137.DBClientConnectionStateKey, semconv.DBClientConnectionStateKey)
	assert.Equal(t, string(semconv.DBClientConnectionPoolNameKey), stdPoolNameKey)
	assert.Equal(t, string(semconv.DBClientConnectionStateKey), stdStateKey)
	assert.Equal(t, string(dbconv.ClientConnectionStateIdle), "idle")
	assert.Equal(t, string(dbconv.ClientConnectionStateUsed), "used")
}

// conventionKind is the metric API interface the semconv type wraps.
func conventionKind(c conventionInstrument) reflect.Type {
	return reflect.TypeOf(c).Field(0).Type
}

// stdAssertKind checks that what the reader collected for c has c's kind,
// unit and description, and returns its int64 points (nil for a histogram,
// which shows only once it has recorded).
func stdAssertKind(t *testing.T, got mtCollected, c conventionInstrument) map[attribute.Distinct]int64 {
	t.Helper()
	kind := conventionKind(c)
	if _, ok := got[c.Name()]; !ok && kind == reflect.TypeFor[metric.Float64Histogram]() {
		return nil
	}
	m := got.mtMetric(t, c.Name(), c.Unit())
	assert.Equal(t, c.Description(), m.Description, "description of %s", c.Name())
	switch kind {
	case reflect.TypeFor[metric.Int64UpDownCounter](), reflect.TypeFor[metric.Int64Counter]():
		sum, ok := m.Data.(metricdata.Sum[int64])
		require.True(t, ok, "%s: want an int64 sum, got %T", c.Name(), m.Data)
		assert.Equal(t, kind == reflect.TypeFor[metric.Int64Counter](), sum.IsMonotonic, "%s: monotonic", c.Name())
		assert.Equal(t, metricdata.CumulativeTemporality, sum.Temporality, c.Name())
		pts := map[attribute.Distinct]int64{}
		for _, dp := range sum.DataPoints {
			pts[dp.Attributes.Equivalent()] = dp.Value
		}
		return pts
	case reflect.TypeFor[metric.Float64Histogram]():
		_, ok := m.Data.(metricdata.Histogram[float64])
		require.True(t, ok, "%s: want a float64 histogram, got %T", c.Name(), m.Data)
		return nil
	default:
		t.Fatalf("%s: the conventions give it a kind this test does not know: %v", c.Name(), kind)
		return nil
	}
}

// stdWant is one collection's expected values of the non-histogram
// instruments, each on the one point of the pool's name (count on two).
type stdWant struct {
	idle, used, pending, timeouts int64
}

// stdAssertCollected checks every convention instrument's name, unit, kind,
// description and attributes, and the values of the non-histograms.
func stdAssertCollected(t *testing.T, got mtCollected, poolName string, maxSize, minIdle int64, want stdWant) {
	t.Helper()
	name := attribute.NewSet(attribute.String(stdPoolNameKey, poolName))
	inState := func(state string) attribute.Distinct {
		set := attribute.NewSet(attribute.String(stdPoolNameKey, poolName), attribute.String(stdStateKey, state))
		return set.Equivalent()
	}
	values := map[string]map[attribute.Distinct]int64{
		"db.client.connection.count": {
			inState("idle"): want.idle,
			inState("used"): want.used,
		},
		"db.client.connection.idle.max":         {name.Equivalent(): maxSize},
		"db.client.connection.idle.min":         {name.Equivalent(): minIdle},
		"db.client.connection.max":              {name.Equivalent(): maxSize},
		"db.client.connection.pending_requests": {name.Equivalent(): want.pending},
		"db.client.connection.timeouts":         {name.Equivalent(): want.timeouts},
	}
	for _, c := range stdConventions {
		pts := stdAssertKind(t, got, c)
		if pts != nil {
			assert.Equal(t, values[c.Name()], pts, "points of %s", c.Name())
		}
	}
	for _, n := range stdReplaced {
		assert.NotContains(t, got, n, "%s is recorded under its convention's name instead", n)
	}
}

// stdHist returns the histogram's one point, for the pool named poolName.
func stdHist(t *testing.T, got mtCollected, name, poolName string) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	h, ok := got[name].Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is not a float64 histogram", name)
	require.Len(t, h.DataPoints, 1, name)
	dp := h.DataPoints[0]
	assert.Equal(t, attribute.NewSet(attribute.String(stdPoolNameKey, poolName)), dp.Attributes, name)
	return dp
}

// TestStandardMetricNames runs a known load through a pool with
// Options.StandardMetricNames and reads every instrument of the
// conventions through the SDK's ManualReader ("Metrics" in the package
// documentation): used counts leased items only, not those being created,
// checked or destroyed; wait_time records every lease that got an item,
// zero waits included; use_time records every lease, unsampled.
func TestStandardMetricNames(t *testing.T) {
	clk := &fakeClock{}
	testClock = clk.now // in place before New: the spares' creations read it
	t.Cleanup(func() { testClock = nil })
	mp, r := mtProvider(t)
	tr := &tracker{}
	prep := &testPreparer{}
	var holdDestroy atomic.Pointer[chan struct{}]
	ctx := context.Background()
	p, err := New[*conn](ctx, mtSlowFactory{tr, clk}, Options[*conn]{
		Name:         "orders",
		MaxSize:      4,
		MinIdle:      1,
		LeaseTimeout: 20 * time.Millisecond,
		Preparer:     prep,
		Destroy: func(c *conn) error {
			if ch := holdDestroy.Load(); ch != nil {
				<-*ch
			}
			return tr.destroy(c)
		},
		MeterProvider:       mp,
		StandardMetricNames: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	settled := func(idle, items int) {
		t.Helper()
		hdEventually(t, func() bool {
			s := p.Stats()
			return s.ItemsAvailable == idle && s.ItemsAllocated == items && s.Creating == 0
		}, "%d idle of %d items; have %+v", idle, items, p.Stats())
	}

	// MinIdle keeps a spare: each lease takes the spare, and a new one is
	// created (1 ms each on the fake clock) while MaxSize allows.
	settled(1, 1)
	lA := mustLease(t, p)
	settled(1, 2)
	lB := mustLease(t, p)
	settled(1, 3)
	lC := mustLease(t, p)
	settled(1, 4)
	lD := mustLease(t, p)
	settled(0, 4)
	_, err = p.Lease(ctx)
	require.ErrorIs(t, err, ErrLeaseTimeout)
	q := leaseAsync(ctx, p)
	waitQueued(t, p, 1)
	stdAssertCollected(t, mtCollect(t, r), "orders", 4, 1, stdWant{idle: 0, used: 4, pending: 1, timeouts: 1})

	// D's item goes to the waiting lease, which discards it: being
	// destroyed, it is neither idle nor used. C's item, released and
	// leased again, is being checked: neither either.
	lD.Release()
	lQ := awaitLease(t, q)
	require.NoError(t, lQ.err)
	destroyGate := make(chan struct{})
	holdDestroy.Store(&destroyGate)
	lQ.l.Discard()
	hdEventually(t, func() bool { return p.Stats().Destroying == 1 }, "the Destroy call to start")
	checking, checkGate := make(chan struct{}), make(chan struct{})
	prep.set(func(context.Context, *conn) (bool, error) {
		checking <- struct{}{}
		<-checkGate
		return true, nil
	}, nil)
	lC.Release()
	x := leaseAsync(ctx, p)
	recvOrFail(t, checking, "the check of C's item to start")
	stdAssertCollected(t, mtCollect(t, r), "orders", 4, 1, stdWant{idle: 0, used: 2, pending: 0, timeouts: 1})

	// A lease waits, then gets the place D's item leaves and creates: its
	// item, being created, is neither idle nor used.
	y := leaseAsync(ctx, p)
	waitQueued(t, p, 1)
	createGate := make(chan struct{})
	setBlock(tr, createGate)
	close(destroyGate)
	hdEventually(t, func() bool {
		s := p.Stats()
		return s.Creating == 1 && s.Destroying == 0 && s.QueuedLeases == 0 && tr.live.Load() == 4
	}, "the waiting lease to create; have %+v", p.Stats())
	stdAssertCollected(t, mtCollect(t, r), "orders", 4, 1, stdWant{idle: 0, used: 2, pending: 0, timeouts: 1})

	// Everything comes back: four idle items.
	prep.set(nil, nil)
	close(checkGate)
	lX := awaitLease(t, x)
	require.NoError(t, lX.err)
	setBlock(tr, nil)
	close(createGate)
	lY := awaitLease(t, y)
	require.NoError(t, lY.err)
	for _, l := range []Lease[*conn]{lA, lB, lX.l, lY.l} {
		l.Release()
	}
	settled(4, 4)
	got := mtCollect(t, r)
	stdAssertCollected(t, got, "orders", 4, 1, stdWant{idle: 4, used: 0, pending: 0, timeouts: 1})

	// Five factory calls, 1 ms each on the fake clock.
	creates := stdHist(t, got, "db.client.connection.create_time", "orders")
	assert.Equal(t, uint64(5), creates.Count)
	assert.InDelta(t, 0.005, creates.Sum, 1e-9)
	// Seven leases got an item; five of them at once (waits of 0, in the
	// first bucket, (-inf, 0]), two after a wait.
	waits := stdHist(t, got, "db.client.connection.wait_time", "orders")
	assert.Equal(t, uint64(7), waits.Count)
	assert.Equal(t, uint64(5), waits.BucketCounts[0])
	assert.Positive(t, waits.Sum)
	// The same seven leases ended, each recorded: held from their lease to
	// their end on the fake clock, which only the creations move: A's lease
	// 4 ms (from 1 to 5), B's 3, C's 1; D's, Q's, X's (its check ended after
	// Y's creation began) and Y's 0.
	uses := stdHist(t, got, "db.client.connection.use_time", "orders")
	assert.Equal(t, uint64(7), uses.Count)
	assert.InDelta(t, 0.008, uses.Sum, 1e-9)

	// The pool's instruments that have no convention keep their names.
	for _, n := range []string{"pool.items.created", "pool.lease.errors", "pool.items.destroyed", "pool.leases.granted"} {
		assert.Contains(t, got, n)
	}
}

// TestStandardMetricNamesOff: by default the pool emits its own names and
// none of the conventions'.
func TestStandardMetricNamesOff(t *testing.T) {
	mp, r := mtProvider(t)
	p, _ := newTracked(t, Options[*conn]{Name: "plain", MaxSize: 2, MeterProvider: mp})
	mustLease(t, p).Release()
	got := mtCollect(t, r)
	for _, c := range stdConventions {
		assert.NotContains(t, got, c.Name())
	}
	for _, n := range []string{"pool.items.available", "pool.leases.queued", "pool.items.max", "pool.items.create_time"} {
		assert.Contains(t, got, n)
	}
}
