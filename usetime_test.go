package pool

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
)

// The tests of pool.lease.use_time, the sampled hold time (doc.go,
// "Metrics").

// utProvider is an SDK meter provider whose pool.lease.use_time keeps every
// value recorded, exactly, and the description it was made with.
type utProvider struct {
	metric.MeterProvider
	use *utHistogram
}

type utMeter struct {
	metric.Meter
	use *utHistogram
}

type utHistogram struct {
	metric.Float64Histogram
	desc, unit string

	mu   sync.Mutex
	vals []float64
}

func newUtProvider(t *testing.T) (*utProvider, func() mtCollected) {
	mp, r := mtProvider(t)
	return &utProvider{MeterProvider: mp, use: &utHistogram{}}, func() mtCollected { return mtCollect(t, r) }
}

func (p *utProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return utMeter{Meter: p.MeterProvider.Meter(name, opts...), use: p.use}
}

func (m utMeter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	h, err := m.Meter.Float64Histogram(name, opts...)
	if name != "pool.lease.use_time" || err != nil {
		return h, err
	}
	cfg := metric.NewFloat64HistogramConfig(opts...)
	m.use.Float64Histogram, m.use.desc, m.use.unit = h, cfg.Description(), cfg.Unit()
	return m.use, nil
}

func (h *utHistogram) Record(ctx context.Context, v float64, opts ...metric.RecordOption) {
	h.mu.Lock()
	h.vals = append(h.vals, v)
	h.mu.Unlock()
	h.Float64Histogram.Record(ctx, v, opts...)
}

func (h *utHistogram) values() []float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.vals)
}

// utFakeClock makes clk the clock of the pools New makes until the test
// ends.
func utFakeClock(t *testing.T) *fakeClock {
	clk := &fakeClock{}
	clk.advance(int64(time.Hour)) // any start: the clock is the pool's own
	testClock = clk.now
	t.Cleanup(func() { testClock = nil })
	return clk
}

// quantile is the q-quantile of sorted vs, by nearest rank.
func quantile(vs []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(vs)))) - 1
	return vs[min(max(i, 0), len(vs)-1)]
}

// utDists are known distributions of hold times; leases says how many a
// test through the pool runs of each, at a sample of one in 64, for its
// quantiles to stand three or more standard errors inside 10 % (a
// sample's own error shrinks as 1/√(its size): the random ones need a
// sample of 16384, the cycles and the bimodal one far fewer).
var utDists = []struct {
	name   string
	leases int
	hold   func(rng *rand.Rand, i int) time.Duration
}{
	{"exponential, mean 10ms", 1 << 20, func(rng *rand.Rand, _ int) time.Duration {
		return time.Duration(rng.ExpFloat64() * float64(10*time.Millisecond))
	}},
	{"log-normal, median 5ms", 1 << 20, func(rng *rand.Rand, _ int) time.Duration {
		return time.Duration(math.Exp(rng.NormFloat64()) * float64(5*time.Millisecond))
	}},
	{"uniform 1..100ms, in a cycle", 1 << 16, func(_ *rand.Rand, i int) time.Duration { return time.Duration(i%100+1) * time.Millisecond }},
	// Taking every 64th or every 512th lease would see one value of these.
	{"uniform 1..64ms, in a cycle of 64", 1 << 16, func(_ *rand.Rand, i int) time.Duration { return time.Duration(i%64+1) * time.Millisecond }},
	{"uniform 1..512ms, in a cycle of 512", 1 << 16, func(_ *rand.Rand, i int) time.Duration { return time.Duration(i%512+1) * time.Millisecond }},
	{"bimodal: 1ms, and 1s once in 20", 1 << 16, func(rng *rand.Rand, _ int) time.Duration {
		if rng.IntN(20) == 0 {
			return time.Second
		}
		return time.Millisecond
	}},
}

// utCompare asserts that the quantiles of got, the sampled hold times,
// are within 10 % of those of truth, the hold times of every lease.
func utCompare(t *testing.T, truth, got []float64) {
	t.Helper()
	slices.Sort(truth)
	slices.Sort(got)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		tq, sq := quantile(truth, q), quantile(got, q)
		assert.InEpsilon(t, tq, sq, 0.10, "p%v: sampled %v, true %v", q*100, sq, tq)
		t.Logf("p%-4v true %-12v sampled %-12v (%+.1f %%)", q*100, time.Duration(tq*1e9), time.Duration(sq*1e9), 100*(sq-tq)/tq)
	}
}

// utSampleOneIn makes p, a pool with metrics, sample one lease in n per
// processor, by the rule it samples by (observer.sampled) with another
// threshold: so that a test through the pool gets a sample large enough
// for its quantiles in a run short enough for -race.
func utSampleOneIn(p *Pool[*conn], n uint64) {
	p.ob.sampleBelow = math.MaxUint64/n + 1
}

// TestUseTimeSampleHasTheLeasesQuantiles leases sequentially, with hold
// times from known distributions on the pool's fake clock, and compares the
// quantiles of what pool.lease.use_time recorded with the true ones: a
// sample of one lease in 64 per processor (see utSampleOneIn) keeps them
// within 10 %, also for hold times that repeat in a cycle.
func TestUseTimeSampleHasTheLeasesQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 42))
	for _, dist := range utDists {
		t.Run(dist.name, func(t *testing.T) {
			clk := utFakeClock(t)
			mp, collect := newUtProvider(t)
			p, _ := newTracked(t, Options[*conn]{Name: "ut", MinSize: 4, MaxSize: 4, MeterProvider: mp})
			utSampleOneIn(p, 64)
			ctx := context.Background()
			truth := make([]float64, 0, dist.leases)
			for i := range dist.leases {
				l, err := p.Lease(ctx)
				require.NoError(t, err)
				d := dist.hold(rng, i)
				clk.advance(int64(d))
				truth = append(truth, d.Seconds())
				l.Release()
			}
			got := mp.use.values()
			want := dist.leases / 64
			assert.InDelta(t, want, len(got), float64(want)/4, "sampled leases: about one in 64")
			utCompare(t, truth, got)
			// What the SDK got, beside Stats: its count is the sample's,
			// pool.leases.granted is every lease.
			c := collect()
			set := mtAttrs("ut")
			pt := c.mtHist(t, "pool.lease.use_time")[set.Equivalent()]
			assert.Equal(t, uint64(len(got)), pt.Count)
			assert.Equal(t, int64(dist.leases), c.mtCounter(t, "pool.leases.granted", "{lease}")[set.Equivalent()])
		})
	}
}

// TestUseTimeSampleRateHasTheLeasesQuantiles is the test above at the rate
// the pool samples at, one lease in useSampleEvery per processor, by the
// pool's own rule (observer.sampled on each processor's count of leases),
// over sixteen times the leases of the test above (2²⁴ for the random
// distributions, a sample of 32768): as many as a pool makes in minutes
// under load, more than -race lets a test make through the pool. The true
// quantiles come from a histogram with buckets 0.1 % wide, so that 2²⁴ hold
// times need no sort.
func TestUseTimeSampleRateHasTheLeasesQuantiles(t *testing.T) {
	const procs = 2
	o := &observer[*conn]{sampleBelow: useSampleBelow} // the rule as New sets it
	rng := rand.New(rand.NewPCG(21, 42))
	for _, dist := range utDists {
		t.Run(dist.name, func(t *testing.T) {
			leases := 16 * dist.leases
			var truth utFineHistogram
			var got []float64
			var count [procs]uint64
			for i := range leases {
				d := dist.hold(rng, i).Seconds()
				truth.add(d)
				proc := (uint64(i) * 0xd6e8feb86659fd93 >> 32) % procs // the processor each lease ran on
				if o.sampled(count[proc]) {
					got = append(got, d)
				}
				count[proc]++
			}
			want := leases / useSampleEvery
			assert.InDelta(t, want, len(got), float64(want)/4, "sampled leases: about one in %d", useSampleEvery)
			slices.Sort(got)
			for _, q := range []float64{0.5, 0.9, 0.99} {
				tq, sq := truth.quantile(q), quantile(got, q)
				assert.InEpsilon(t, tq, sq, 0.10, "p%v: sampled %v, true %v", q*100, sq, tq)
				t.Logf("p%-4v true %-12v sampled %-12v (%+.1f %%)", q*100, time.Duration(tq*1e9), time.Duration(sq*1e9), 100*(sq-tq)/tq)
			}
		})
	}
}

// utFineHistogram counts values from 1 µs to 1000 s in buckets 0.1 % wide
// (a value is taken as its bucket's lower bound: within 0.1 % of it).
type utFineHistogram struct {
	n      int
	counts [utBuckets]int
}

const (
	utMin     = 1e-6
	utGrowth  = 1.001
	utBuckets = 20800 // ln(1e9)/ln(1.001): up to 1000 s
)

func (h *utFineHistogram) add(v float64) {
	i := int(math.Log(max(v, utMin)/utMin) / math.Log(utGrowth))
	h.counts[min(i, utBuckets-1)]++
	h.n++
}

// quantile is the q-quantile by nearest rank, as quantile computes it.
func (h *utFineHistogram) quantile(q float64) float64 {
	rank := int(math.Ceil(q * float64(h.n)))
	seen := 0
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return utMin * math.Pow(utGrowth, float64(i))
		}
	}
	return math.Inf(1)
}

// TestUseTimeShowsTheFirstLease: the first lease on each processor is in
// the sample, so a new pool's hold times show at once.
func TestUseTimeShowsTheFirstLease(t *testing.T) {
	clk := utFakeClock(t)
	mp, _ := newUtProvider(t)
	p, _ := newTracked(t, Options[*conn]{MeterProvider: mp})
	l := mustLease(t, p)
	clk.advance(int64(10 * time.Millisecond))
	l.Release()
	assert.Equal(t, []float64{0.01}, mp.use.values())
}

// TestUseTimeDescriptionSaysItIsASample: the instrument tells a dashboard
// that its count is not the number of leases.
func TestUseTimeDescriptionSaysItIsASample(t *testing.T) {
	mp, _ := newUtProvider(t)
	newTracked(t, Options[*conn]{MeterProvider: mp})
	assert.Equal(t, "s", mp.use.unit)
	assert.Contains(t, mp.use.desc, "from the lease to its end (Release, Discard or Detach)")
	assert.Contains(t, mp.use.desc, "one lease in 512 on each processor")
	assert.Contains(t, mp.use.desc, "its count is not the number of leases (pool.leases.granted is)")
}

// TestUseTimeRecordsEveryEnd: a sampled lease is recorded however it ends,
// and its hold time is what the pool's clock measured between the lease and
// its end.
func TestUseTimeRecordsEveryEnd(t *testing.T) {
	const hold = 7 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts Options[*conn]
		end  func(p *Pool[*conn], l Lease[*conn])
	}{
		{"Release", Options[*conn]{}, func(_ *Pool[*conn], l Lease[*conn]) { l.Release() }},
		{"Discard", Options[*conn]{}, func(_ *Pool[*conn], l Lease[*conn]) { l.Discard() }},
		{"Detach", Options[*conn]{}, func(_ *Pool[*conn], l Lease[*conn]) { _ = l.Detach() }},
		{"Release after Clear", Options[*conn]{}, func(p *Pool[*conn], l Lease[*conn]) { p.Clear(); l.Release() }},
		{"Release with Reset", Options[*conn]{Reset: func(*conn) error { return nil }}, func(_ *Pool[*conn], l Lease[*conn]) { l.Release() }},
		{"Release, Reset fails", Options[*conn]{Reset: func(*conn) error { return errBoom }}, func(_ *Pool[*conn], l Lease[*conn]) { l.Release() }},
		{"Release with a Preparer and expiry", Options[*conn]{IdleTimeout: time.Hour, Preparer: bnReady{}}, func(_ *Pool[*conn], l Lease[*conn]) { l.Release() }},
		{"Release with LeakThreshold", Options[*conn]{LeakThreshold: time.Hour}, func(_ *Pool[*conn], l Lease[*conn]) { l.Release() }},
		{"Do", Options[*conn]{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := utFakeClock(t)
			mp, _ := newUtProvider(t)
			opts := tc.opts
			opts.MaxSize, opts.MeterProvider = 2, mp
			p, _ := newTracked(t, opts)
			ctx := context.Background()
			const leases = 10 * useSampleEvery
			for range leases {
				if tc.end == nil {
					require.NoError(t, p.Do(ctx, func(*conn) error { clk.advance(int64(hold)); return nil }))
					continue
				}
				l, err := p.Lease(ctx)
				require.NoError(t, err)
				clk.advance(int64(hold))
				tc.end(p, l)
			}
			got := mp.use.values()
			assert.NotEmpty(t, got, "no lease of %d sampled", leases)
			assert.Less(t, len(got), leases/useSampleEvery*2, "more than a sample")
			for _, v := range got {
				assert.InDelta(t, hold.Seconds(), v, 1e-12)
			}
		})
	}
}

// TestUseTimeNotWithoutAMeterProvider: without metrics nothing is sampled,
// and the lease and release take the fast path.
func TestUseTimeNotWithoutAMeterProvider(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MinSize: 1})
	assert.False(t, p.slowLease || p.slowRelease)
	for range 4 * useSampleEvery {
		l := mustLease(t, p)
		assert.Zero(t, l.e.useFrom)
		l.Release()
	}
	mp, _ := newUtProvider(t)
	q, _ := newTracked(t, Options[*conn]{MinSize: 1, MeterProvider: mp})
	assert.True(t, q.slowLease, "a lease is sampled on leaseAtEdge's way")
	assert.False(t, q.slowRelease, "its release takes the fast path")
}
