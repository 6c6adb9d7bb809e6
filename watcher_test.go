package pool

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests of the watcher of LeakThreshold (doc.go, "Leaks"): when a lease
// held too long is reported, how often, and what Close does to the
// watcher. They run on the real clock: the watcher's scans are timers.

// hdLog is an slog.Handler that keeps every record.
type hdLog struct {
	mu   sync.Mutex
	recs []hdRecord
}

type hdRecord struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

func (l *hdLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *hdLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *hdLog) WithGroup(string) slog.Handler            { return l }

func (l *hdLog) Handle(_ context.Context, r slog.Record) error {
	rec := hdRecord{level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return nil
}

// find returns the records with the message msg.
func (l *hdLog) find(msg string) []hdRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rs []hdRecord
	for _, r := range l.recs {
		if r.msg == msg {
			rs = append(rs, r)
		}
	}
	return rs
}

func (l *hdLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs)
}

const (
	hdWarnMsg  = "pool: a lease has been held longer than LeakThreshold"
	hdEndedMsg = "pool: a lease reported as held past LeakThreshold has ended"
)

// hdNewPool returns a pool whose reports go to the returned lkReports and
// hdLog, with metrics on.
func hdNewPool(t *testing.T, opts Options[*conn]) (*Pool[*conn], *lkReports, *hdLog, func() mtCollected) {
	t.Helper()
	reps, log := &lkReports{}, &hdLog{}
	mp, r := mtProvider(t)
	if opts.OnLeak == nil {
		opts.OnLeak = reps.onLeak
	}
	opts.Logger = slog.New(log)
	opts.MeterProvider = mp
	p, _ := newTracked(t, opts)
	return p, reps, log, func() mtCollected { return mtCollect(t, r) }
}

// hdLongMetric returns pool.leases.long for the pool named name.
func hdLongMetric(t *testing.T, c mtCollected, name string) int64 {
	t.Helper()
	return c.mtPoolCounter(t, "pool.leases.long", "{lease}", name)
}

// hdTasks returns how many of the pool's background goroutines run: the
// keeper, and its OnLeak calls.
func hdTasks(p *Pool[*conn]) int {
	n := p.kp.running.Load()
	return int(n/goroutineWeight + n%goroutineWeight)
}

var hdConfigs = []struct {
	name  string
	sites bool
}{
	{"scans", false},
	{"TrackLeaseSites", true},
}

func TestLeakThresholdReportsAHeldLeaseOnce(t *testing.T) {
	const lt = 50 * time.Millisecond
	for _, cfg := range hdConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			p, reps, log, collect := hdNewPool(t, Options[*conn]{Name: "slow", MaxSize: 2, LeakThreshold: lt, TrackLeaseSites: cfg.sites})
			start := time.Now()
			l := hdHold(t, p)
			hdEventually(t, func() bool { return len(reps.get()) > 0 }, "the held lease was not reported")
			seen := time.Since(start)

			rep := reps.get()[0]
			assert.True(t, rep.Held)
			assert.Equal(t, "slow", rep.Pool)
			assert.GreaterOrEqual(t, seen, lt, "reported before LeakThreshold")
			assert.GreaterOrEqual(t, rep.Age, lt, "an Age short of LeakThreshold")
			assert.LessOrEqual(t, rep.Age, seen, "an Age longer than the lease")
			if cfg.sites {
				first, _, _ := strings.Cut(rep.Stack, "\n")
				assert.Equal(t, "github.com/msl-armory/pool.hdHold", first, "the stack starts at the caller of Lease:\n%s", rep.Stack)
				assert.Contains(t, rep.Stack, "testutil_test.go:")
			} else {
				assert.Empty(t, rep.Stack)
			}
			assert.Equal(t, uint64(1), p.Stats().LongLeases)
			assert.Equal(t, int64(1), hdLongMetric(t, collect(), "slow"))
			warns := log.find(hdWarnMsg)
			require.Len(t, warns, 1)
			assert.Equal(t, slog.LevelWarn, warns[0].level)
			assert.Equal(t, "slow", warns[0].attrs["pool.name"].String())
			assert.Equal(t, rep.Age, warns[0].attrs["age"].Duration())
			if cfg.sites {
				assert.Equal(t, rep.Stack, warns[0].attrs["stack"].String())
			} else {
				assert.NotContains(t, warns[0].attrs, "stack")
			}
			assert.Empty(t, log.find(hdEndedMsg), "an end logged while the lease is out")

			time.Sleep(3 * lt)
			assert.Len(t, reps.get(), 1, "reported twice")
			assert.Equal(t, uint64(1), p.Stats().LongLeases)

			l.Release()
			ended := log.find(hdEndedMsg)
			require.Len(t, ended, 1, "the end of the reported lease was not logged")
			assert.Equal(t, slog.LevelInfo, ended[0].level)
			assert.Equal(t, "slow", ended[0].attrs["pool.name"].String())
			assert.GreaterOrEqual(t, ended[0].attrs["age"].Duration(), rep.Age+3*lt, "its final age")
			assert.Len(t, reps.get(), 1)
			assert.Equal(t, int64(1), hdLongMetric(t, collect(), "slow"))
		})
	}
}

// TestLeakThresholdSparesShortLeases: leases that each end before
// LeakThreshold are never reported, however many and however busy the
// pool, while the watcher runs throughout.
func TestLeakThresholdSparesShortLeases(t *testing.T) {
	const lt = 100 * time.Millisecond
	for _, cfg := range hdConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			p, reps, log, _ := hdNewPool(t, Options[*conn]{MaxSize: 4, LeakThreshold: lt, TrackLeaseSites: cfg.sites})
			var wg sync.WaitGroup
			stop := time.Now().Add(4 * lt)
			for range 6 {
				wg.Go(func() {
					for time.Now().Before(stop) {
						l, err := p.Lease(context.Background())
						if !assert.NoError(t, err) {
							return
						}
						time.Sleep(time.Duration(rand.Int64N(int64(lt / 3))))
						l.Release()
					}
				})
			}
			wg.Wait()
			assert.Empty(t, reps.get())
			assert.Zero(t, p.Stats().LongLeases)
			assert.Zero(t, log.len(), "nothing to log")
		})
	}
}

// TestLeakThresholdReportLatency measures when the reports come: 100
// long leases, in ten batches started at random moments of the watcher's
// scans, each reported between LeakThreshold and 1.5 × LeakThreshold after
// it began, plus the scheduling delay a loaded machine adds.
func TestLeakThresholdReportLatency(t *testing.T) {
	const (
		lt      = 100 * time.Millisecond
		batches = 10
		each    = 10
		slack   = 50 * time.Millisecond // the scheduling delay allowed past 1.5 × LeakThreshold, on a loaded machine
	)
	// A stall of the whole process (a loaded machine, a long pause) delays
	// the watcher's timer as much: the bound allows for the longest seen.
	var stall atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go watchStalls(stop, &stall)
	for _, cfg := range hdConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			var mu sync.Mutex
			var at []time.Time
			var ages []time.Duration
			p, _, _, _ := hdNewPool(t, Options[*conn]{MaxSize: each + 1, LeakThreshold: lt, TrackLeaseSites: cfg.sites,
				OnLeak: func(r LeakReport) {
					now := time.Now()
					mu.Lock()
					at, ages = append(at, now), append(ages, r.Age)
					mu.Unlock()
				}})
			reports := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(at)
			}
			// A pacemaker lease keeps the watcher scanning, at its own pace,
			// so that the batches begin at any moment of its period.
			pacemaker := hdHold(t, p)
			defer pacemaker.Release()
			hdEventually(t, func() bool { return reports() == 1 }, "the pacemaker was not reported")

			var lat []time.Duration
			for range batches {
				time.Sleep(time.Duration(rand.Int64N(int64(2 * p.ob.watchEvery()))))
				base := reports()
				start := time.Now() // before any lease of the batch began
				ls := make([]Lease[*conn], each)
				for i := range ls {
					ls[i] = hdHold(t, p)
				}
				hdEventually(t, func() bool { return reports() == base+each }, "a long lease was not reported")
				mu.Lock()
				for i := base; i < base+each; i++ {
					lat = append(lat, at[i].Sub(start))
					assert.GreaterOrEqual(t, ages[i], lt, "an Age short of LeakThreshold")
				}
				mu.Unlock()
				for _, l := range ls {
					l.Release()
				}
			}
			slices.Sort(lat)
			lo, med, hi := lat[0], lat[len(lat)/2], lat[len(lat)-1]
			t.Logf("%d long leases, LeakThreshold %v: reported after min %v (%.3f×), median %v (%.3f×), max %v (%.3f×)",
				len(lat), lt, lo, ratio(lo, lt), med, ratio(med, lt), hi, ratio(hi, lt))
			assert.GreaterOrEqual(t, lo, lt, "a lease reported before LeakThreshold")
			assert.LessOrEqual(t, hi, lt*3/2+slack+time.Duration(stall.Load()), "a lease reported later than 1.5 × LeakThreshold (the longest stall: %v)", time.Duration(stall.Load()))
		})
	}
}

func ratio(d, of time.Duration) float64 { return float64(d) / float64(of) }

// TestLeakThresholdWatcherRunsFromNewToClose: the watcher is one goroutine
// of the pool's own, started by New and stopped by Close, whether leases
// are out or not, that scans no more often than every LeakThreshold/8
// (doc.go, "Leaks").
func TestLeakThresholdWatcherRunsFromNewToClose(t *testing.T) {
	for _, cfg := range hdConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			const lt = 80 * time.Millisecond
			p, _ := newTracked(t, Options[*conn]{MinSize: 2, LeakThreshold: lt, TrackLeaseSites: cfg.sites})
			assert.Equal(t, 1, hdTasks(p), "no watcher after New")
			assert.Equal(t, lt/8, p.ob.watchEvery())
			for round := range 3 {
				l := hdHold(t, p)
				assert.Equal(t, 1, hdTasks(p), "round %d: a lease out", round)
				time.Sleep(time.Duration(rand.Int64N(int64(2 * p.ob.watchEvery()))))
				l.Release()
				assert.Equal(t, 1, hdTasks(p), "round %d: no lease out", round)
			}
			require.NoError(t, p.Close())
			assert.Zero(t, hdTasks(p), "the watcher runs on after Close")
		})
	}
}

// TestLeakThresholdLongLeaseAmongShortOnes: a long lease that follows
// short ones, at any moment of the watcher's period, is reported once.
func TestLeakThresholdLongLeaseAmongShortOnes(t *testing.T) {
	const lt = 20 * time.Millisecond
	for _, cfg := range hdConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			p, reps, _, _ := hdNewPool(t, Options[*conn]{MaxSize: 2, LeakThreshold: lt, TrackLeaseSites: cfg.sites})
			const rounds = 20
			for i := range rounds {
				// Short leases, then a long one at any moment of the
				// watcher's period.
				for range 3 {
					hdHold(t, p).Release()
					time.Sleep(time.Duration(rand.Int64N(int64(3 * p.ob.watchEvery()))))
				}
				l := hdHold(t, p)
				hdEventually(t, func() bool { return len(reps.get()) == i+1 }, "round %d: the long lease was not reported", i)
				l.Release()
			}
			assert.Equal(t, uint64(rounds), p.Stats().LongLeases)
		})
	}
}

// TestLeakThresholdCloseStopsTheWatcher: Close waits for a report under
// way, and after Close returns neither OnLeak nor the Logger hear from the
// watcher again; a lease that ends after Close still logs its end, in its
// own Release.
func TestLeakThresholdCloseStopsTheWatcher(t *testing.T) {
	const lt = 30 * time.Millisecond
	entered, unblock := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	p, _, log, _ := hdNewPool(t, Options[*conn]{MaxSize: 3, LeakThreshold: lt, OnLeak: func(LeakReport) {
		if calls.Add(1) == 1 {
			close(entered)
			<-unblock
		}
	}})
	first := hdHold(t, p)
	<-entered // reporting the first lease
	second := hdHold(t, p)
	closed := make(chan struct{})
	go func() {
		assert.NoError(t, p.Close())
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while OnLeak ran")
	case <-time.After(3 * lt):
	}
	close(unblock)
	select {
	case <-closed:
	case <-time.After(testWait):
		t.Fatal("Close did not return once OnLeak had")
	}
	assert.Zero(t, hdTasks(p), "a task runs after Close")
	records := log.len()
	time.Sleep(4 * lt) // the second lease is past LeakThreshold now
	assert.Equal(t, int64(1), calls.Load(), "OnLeak called after Close returned")
	assert.Equal(t, records, log.len(), "the watcher logged after Close returned")
	assert.Equal(t, uint64(1), p.Stats().LongLeases)

	second.Release() // never reported: nothing to log
	assert.Equal(t, records, log.len())
	first.Release()
	assert.Len(t, log.find(hdEndedMsg), 1, "the end of the reported lease")
}

// TestLeakThresholdThenCollected: a lease reported as held, then dropped,
// is reported again, with Held false, when the garbage collector finds
// it, and drops out of Outstanding.
func TestLeakThresholdThenCollected(t *testing.T) {
	const lt = 30 * time.Millisecond
	for _, cfg := range hdConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			p, reps, _, _ := hdNewPool(t, Options[*conn]{MaxSize: 2, LeakThreshold: lt, TrackLeaseSites: cfg.sites})
			hdHoldThenDrop(t, p, reps)
			lkEventually(t, func() bool { return len(reps.get()) == 2 }, "the dropped lease was not reported by the garbage collector")
			lkSettle()
			got := reps.get()
			require.Len(t, got, 2)
			assert.True(t, got[0].Held)
			assert.False(t, got[1].Held)
			assert.GreaterOrEqual(t, got[1].Age, got[0].Age, "the Age of the second report")
			assert.Equal(t, got[0].Stack, got[1].Stack)
			s := p.Stats()
			assert.Equal(t, uint64(1), s.LongLeases)
			assert.Equal(t, uint64(1), s.Leaked)
			assert.Equal(t, 1, s.ActiveLeases, "a leaked lease keeps its item")
			assert.Empty(t, p.Outstanding(), "a collected lease is still listed")
		})
	}
}

//go:noinline
func hdHoldThenDrop(t *testing.T, p *Pool[*conn], reps *lkReports) {
	l := hdHold(t, p)
	hdEventually(t, func() bool { return len(reps.get()) == 1 }, "the held lease was not reported")
	require.Len(t, p.Outstanding(), 1)
	runtime.KeepAlive(l)
}

// TestLeakThresholdOnLeakPanicIsLogged: OnLeak's panic, on the pool's own
// goroutine, has nobody to reach: it is logged and the pool goes on.
func TestLeakThresholdOnLeakPanicIsLogged(t *testing.T) {
	p, _, log, _ := hdNewPool(t, Options[*conn]{MaxSize: 2, LeakThreshold: 20 * time.Millisecond,
		OnLeak: func(LeakReport) { panic("onleak boom") }})
	l := hdHold(t, p)
	defer l.Release()
	hdEventually(t, func() bool { return len(log.find("pool: OnLeak panicked")) == 1 }, "the panic was not logged")
	rec := log.find("pool: OnLeak panicked")[0]
	assert.Equal(t, slog.LevelWarn, rec.level)
	assert.Contains(t, rec.attrs["err"].String(), "onleak boom")
	hdHold(t, p).Release()
}

// TestLeakThresholdFromConfiguration: LeakThreshold is a duration in the
// options' JSON, and a negative one is refused.
func TestLeakThresholdFromConfiguration(t *testing.T) {
	var o Options[*conn]
	require.NoError(t, json.Unmarshal([]byte(`{"LeakThreshold": "30s"}`), &o))
	assert.Equal(t, 30*time.Second, o.LeakThreshold)
	b, err := json.Marshal(o)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"LeakThreshold":"30s"`)

	err = json.Unmarshal([]byte(`{"LeakThreshold": 30}`), &o)
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "LeakThreshold")

	o.LeakThreshold = -time.Second
	err = o.Validate()
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "LeakThreshold")
	_, err = New[*conn](context.Background(), &tracker{}, o)
	assert.ErrorIs(t, err, ErrInvalidOptions)
}

// TestLeakThresholdBelowEightMilliseconds: the watcher scans every
// LeakThreshold/8 but at most once a millisecond, so the report's bound of
// 1.5 × LeakThreshold starts at 8 ms, and below it a report comes within
// LeakThreshold + 3 ms (doc.go, "Leaks"), never before LeakThreshold.
func TestLeakThresholdBelowEightMilliseconds(t *testing.T) {
	for _, tc := range []struct{ threshold, every time.Duration }{
		{time.Second, 125 * time.Millisecond},
		{8 * time.Millisecond, time.Millisecond},
		{2 * time.Millisecond, time.Millisecond},
	} {
		every := (&observer[*conn]{threshold: int64(tc.threshold)}).watchEvery()
		assert.Equal(t, tc.every, every, "LeakThreshold %v", tc.threshold)
		assert.Equal(t, tc.threshold >= 8*time.Millisecond, tc.threshold+3*every <= tc.threshold*3/2,
			"LeakThreshold %v: the 1.5 × bound holds from 8 ms on", tc.threshold)
	}
	const (
		lt    = 2 * time.Millisecond
		slack = 20 * time.Millisecond // the scheduling delay allowed, on a loaded machine
	)
	for _, cfg := range hdConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			reported := make(chan time.Time, 1)
			p, _, _, _ := hdNewPool(t, Options[*conn]{MaxSize: 1, LeakThreshold: lt, TrackLeaseSites: cfg.sites,
				OnLeak: func(LeakReport) { reported <- time.Now() }})
			for round := range 10 {
				start := time.Now()
				l := hdHold(t, p)
				at := recvOrFail(t, reported, "the long lease's report")
				l.Release()
				took := at.Sub(start)
				assert.GreaterOrEqual(t, took, lt, "round %d: reported before LeakThreshold", round)
				assert.LessOrEqual(t, took, lt+3*time.Millisecond+slack, "round %d: reported after LeakThreshold + 3 ms", round)
			}
		})
	}
}
