// Package usl simulates a backend whose throughput follows the Universal
// Scalability Law, X(N) = λN / (1 + σ(N−1) + κN(N−1)), for the tests that
// judge how the pool sizes itself. The backend serves by processor sharing:
// each of the N queries in progress advances at X(N)/N units of work per
// second, a rate evaluated again at every arrival, completion and change
// of λ. It reads the clock only through time.Now and its timer, so it runs
// the same in real time and inside a testing/synctest bubble, where time is
// fake and exact.
//
// Arrivals and Works fix the sample path of a load from a seed, so that
// every configuration under test sees the same queries; a Load drives them
// through a pool's leases; a Recorder keeps the response times of the
// requests served, for rates and percentiles over any interval.
package usl

import (
	"cmp"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// doneBelow is the remaining work at or below which a query is complete: far
// less than the work of a nanosecond at any rate the tests use, so that
// rounding in the arithmetic never keeps a query a nanosecond too long.
const doneBelow = 1e-9

// Backend is a simulated backend whose throughput follows the Universal
// Scalability Law under processor sharing. Its methods are safe for
// concurrent use.
type Backend struct {
	sigma, kappa float64

	mu      sync.Mutex
	lambda  float64
	queries []*query      // in progress: each has remaining > doneBelow as of last
	last    time.Time     // when each query's remaining was last brought up to date
	timer   *time.Timer   // set for the earliest completion while a query is in progress
	lag     time.Duration // added to each timer: a late wake-up, in the tests
}

// query is one call of Do in progress.
type query struct {
	remaining float64       // units of work left, as of Backend.last
	done      chan struct{} // closed, under Backend.mu, once remaining <= doneBelow
	finished  bool          // done is closed; read and written under Backend.mu
}

// New returns an idle backend that serves one query alone at lambda units of
// work per second, with contention sigma and coherency kappa. It panics
// unless lambda > 0 and sigma, kappa >= 0.
func New(lambda, sigma, kappa float64) *Backend {
	if !(lambda > 0) || !(sigma >= 0) || !(kappa >= 0) {
		panic("usl: New needs lambda > 0, sigma >= 0 and kappa >= 0")
	}
	return &Backend{lambda: lambda, sigma: sigma, kappa: kappa}
}

// Throughput returns X(n), the units of work per second that n queries in
// progress complete together at the current λ; 0 for n <= 0.
func (b *Backend) Throughput(n int) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.throughput(n)
}

func (b *Backend) throughput(n int) float64 {
	if n <= 0 {
		return 0
	}
	N := float64(n)
	return b.lambda * N / (1 + b.sigma*(N-1) + b.kappa*N*(N-1))
}

// Peak returns the number of queries in progress at which the throughput is
// highest at the current λ, and that throughput. With kappa 0 the throughput
// only grows with N; Peak then searches no further than 100,000.
func (b *Backend) Peak() (n int, x float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 1; i <= 100_000; i++ {
		if xi := b.throughput(i); xi > x {
			n, x = i, xi
		} else if b.kappa > 0 {
			break // X is unimodal in N when kappa > 0: past the peak it only falls
		}
	}
	return n, x
}

// Do adds a query of work units to the backend and blocks until it is
// complete, and then returns nil. If ctx ends first the query leaves the
// backend unfinished, freeing its share for the others, and Do returns
// ctx.Err(). Work <= 0 completes at once.
func (b *Backend) Do(ctx context.Context, work float64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if work <= doneBelow {
		return nil
	}
	q := &query{remaining: work, done: make(chan struct{})}
	b.mu.Lock()
	b.update()
	b.queries = append(b.queries, q)
	b.schedule()
	b.mu.Unlock()

	select {
	case <-q.done:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.update()
	if q.finished { // completed at the instant ctx ended: the work was done
		return nil
	}
	i := slices.Index(b.queries, q)
	b.queries = slices.Delete(b.queries, i, i+1)
	b.schedule()
	return ctx.Err()
}

// SetLambda changes λ, the rate of a query alone, from this instant: the
// work done so far stands, and what remains proceeds at the new rates. It
// panics unless l > 0.
func (b *Backend) SetLambda(l float64) {
	if !(l > 0) {
		panic("usl: SetLambda needs l > 0")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.update()
	b.lambda = l
	b.schedule()
}

// InProgress returns the number of queries in the backend now.
func (b *Backend) InProgress() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.update()
	b.schedule()
	return len(b.queries)
}

// fire is the timer's function: a query may have completed.
func (b *Backend) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.update()
	b.schedule()
}

// update brings each query's remaining work up to now and completes those
// that are done, each at its own instant: the N in progress falls at a
// completion however late the timer, or the call, that notices it, so that
// a wake-up's delay slows the query's client, as a network's would, and
// never the backend. The clock is read under b.mu, so that successive
// updates see time in the order they hold the lock. Called with b.mu held.
func (b *Backend) update() {
	now := time.Now()
	for left := now.Sub(b.last).Seconds(); len(b.queries) > 0; {
		n := len(b.queries)
		rate := b.throughput(n) / float64(n)
		least := math.Inf(1)
		for _, q := range b.queries {
			least = min(least, q.remaining)
		}
		// Until the next completion, or until now if none comes first.
		step, complete := left, (least-doneBelow)/rate <= left
		if complete {
			step = max((least-doneBelow)/rate, 0)
		}
		// The query with the least work left is done when complete, whatever
		// a float's rounding leaves of it.
		b.queries = slices.DeleteFunc(b.queries, func(q *query) bool {
			q.remaining -= rate * step
			if q.remaining > doneBelow && !(complete && q.remaining <= least-rate*step) {
				return false
			}
			q.finished = true
			close(q.done)
			return true
		})
		if left -= step; !complete {
			break
		}
	}
	b.last = now
}

// schedule sets the timer for the earliest completion at the current rate,
// rounded up to the nanosecond so that it never fires before a query is
// done, or stops it when no query is in progress. Called with b.mu held,
// after update and whatever change follows it.
func (b *Backend) schedule() {
	n := len(b.queries)
	if n == 0 {
		if b.timer != nil {
			b.timer.Stop()
		}
		return
	}
	least := math.Inf(1)
	for _, q := range b.queries {
		least = min(least, q.remaining)
	}
	rate := b.throughput(n) / float64(n)
	// A query is done when doneBelow remains: at that instant, not at zero,
	// so that a float's last bit never costs a nanosecond.
	d := max(time.Duration(math.Ceil((least-doneBelow)/rate*1e9)), 1) + b.lag
	if b.timer == nil {
		b.timer = time.AfterFunc(d, b.fire)
	} else {
		b.timer.Reset(d)
	}
}

// Arrival is one query of an open loop: it arrives At this long after the
// load starts and needs Work units of work.
type Arrival struct {
	At   time.Duration
	Work float64
}

// Arrivals returns the arrivals of a Poisson process of the given rate per
// second over [0, d), in order, each with a Work uniform in [0.5, 1.5): the
// mean is 1 unit, so a query alone takes 1/λ on average. The same seed,
// rate and d give the same arrivals.
func Arrivals(seed uint64, rate float64, d time.Duration) []Arrival {
	if !(rate > 0) {
		return nil
	}
	r := rand.New(rand.NewPCG(seed, 0))
	var as []Arrival
	for at := 0.0; ; {
		at += r.ExpFloat64() / rate
		if at >= d.Seconds() {
			return as
		}
		as = append(as, Arrival{At: time.Duration(at * 1e9), Work: work(r)})
	}
}

// Works is the sequence of works of one client of a closed loop, fixed by a
// seed and the client's number; each is uniform in [0.5, 1.5), as an
// Arrival's. A Works is not safe for concurrent use.
type Works struct {
	r *rand.Rand
}

// NewWorks returns the works of client number client (0, 1, …) for the
// seed: a stream apart from every other client's and from Arrivals'.
func NewWorks(seed uint64, client int) *Works {
	return &Works{r: rand.New(rand.NewPCG(seed, uint64(client)+1))}
}

// Next returns the client's next work.
func (w *Works) Next() float64 { return work(w.r) }

func work(r *rand.Rand) float64 { return 0.5 + r.Float64() }

// Load is the requests of a run on a backend: an open loop, a request at
// each of Arrivals, or Clients clients of a closed loop, each sending its
// next request as its last ends, with the works Seed fixes (NewWorks). A
// request waits at most Patience for its lease. At SlowAt, if not 0, the
// backend's λ becomes SlowLambda.
type Load struct {
	Arrivals   []Arrival
	Clients    int
	Seed       uint64
	Patience   time.Duration
	SlowAt     time.Duration
	SlowLambda float64
}

// Run drives l on b from start until ctx ends, and returns once every
// request has ended. A request takes a lease with lease (which returns the
// lease's release), runs its work on b, releases, and records its response
// time, its wait and its query, in served; one that waited Patience for a
// lease records the time it gave up after in gaveUp; one in progress when
// ctx ends goes unrecorded. Run returns the first error of a request that
// failed otherwise, if one did.
func (l Load) Run(ctx context.Context, start time.Time, b *Backend, lease func(context.Context) (release func(), err error), served, gaveUp *Recorder) error {
	var failed error
	var once sync.Once
	request := func(work float64) {
		t0 := time.Now()
		patience, cancel := context.WithTimeout(ctx, l.Patience)
		release, err := lease(patience)
		cancel()
		if err == nil {
			err = b.Do(ctx, work)
			release()
		}
		switch {
		case err == nil:
			served.Record(time.Since(t0))
		case ctx.Err() != nil: // the run is over
		case errors.Is(err, context.DeadlineExceeded):
			gaveUp.Record(time.Since(t0))
		default:
			once.Do(func() { failed = err })
		}
	}
	time.Sleep(time.Until(start))
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, a := range l.Arrivals {
			time.Sleep(time.Until(start.Add(a.At)))
			if ctx.Err() != nil {
				return
			}
			wg.Go(func() { request(a.Work) })
		}
	})
	for c := range l.Clients {
		works := NewWorks(l.Seed, c)
		wg.Go(func() {
			for ctx.Err() == nil {
				request(works.Next())
			}
		})
	}
	if l.SlowAt > 0 {
		wg.Go(func() {
			slow := time.NewTimer(time.Until(start.Add(l.SlowAt)))
			defer slow.Stop()
			select {
			case <-slow.C:
				b.SetLambda(l.SlowLambda)
			case <-ctx.Done():
			}
		})
	}
	wg.Wait()
	return failed
}

// Recorder records the response times of requests as they complete, with
// the instant each completed, for counts, rates and percentiles over any
// interval. Its methods are safe for concurrent use.
type Recorder struct {
	start time.Time

	mu      sync.Mutex
	samples []sample // in order of at: Record reads the clock under mu
}

type sample struct {
	at, took time.Duration // completion, since start; response time
}

// NewRecorder returns a recorder whose intervals count from now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Record records a request that completes now and took d.
func (r *Recorder) Record(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, sample{at: time.Since(r.start), took: d})
}

// Summary describes the requests that completed in an interval.
type Summary struct {
	From, To  time.Duration // the interval, [From, To), since the recorder's start
	Count     int           // requests that completed in it
	PerSecond float64       // Count over the interval's length
	P50, P99  time.Duration // response-time percentiles, nearest rank; 0 when Count is 0
	Max       time.Duration // the longest response time; 0 when Count is 0
}

// Summary describes the requests that completed in [from, to).
func (r *Recorder) Summary(from, to time.Duration) Summary {
	r.mu.Lock()
	first, _ := slices.BinarySearchFunc(r.samples, from, atOrAfter)
	end, _ := slices.BinarySearchFunc(r.samples, max(to, from), atOrAfter)
	took := make([]time.Duration, 0, end-first)
	for _, s := range r.samples[first:end] {
		took = append(took, s.took)
	}
	r.mu.Unlock()
	s := Summary{From: from, To: to, Count: len(took)}
	if to > from {
		s.PerSecond = float64(s.Count) / (to - from).Seconds()
	}
	if len(took) > 0 {
		slices.Sort(took)
		s.P50, s.P99, s.Max = rank(took, 0.50), rank(took, 0.99), took[len(took)-1]
	}
	return s
}

// Windows describes [from, to) in consecutive windows of width, the last
// one cut short at to.
func (r *Recorder) Windows(from, to, width time.Duration) []Summary {
	var ws []Summary
	for at := from; at < to && width > 0; at += width {
		ws = append(ws, r.Summary(at, min(at+width, to)))
	}
	return ws
}

// atOrAfter orders a sample against an instant, for a binary search of
// samples, which are in order of completion.
func atOrAfter(s sample, at time.Duration) int { return cmp.Compare(s.at, at) }

// rank returns the nearest-rank p-quantile of sorted, which is not empty.
func rank(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
