package usl

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// timed runs Do and returns how long it blocked.
func timed(t *testing.T, b *Backend, work float64) time.Duration {
	t.Helper()
	begin := time.Now()
	if err := b.Do(context.Background(), work); err != nil {
		t.Errorf("Do(%v): %v", work, err)
	}
	return time.Since(begin)
}

// TestSingleQuery: a query alone of work 1 at λ 200 takes 1/λ, 5 ms exactly.
func TestSingleQuery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(200, 0.05, 0.004)
		if got := timed(t, b, 1); got != 5*time.Millisecond {
			t.Errorf("a query of work 1 alone at λ 200 took %v, want 5ms", got)
		}
		if n := b.InProgress(); n != 0 {
			t.Errorf("InProgress after the query: %d, want 0", n)
		}
	})
}

// TestTwoQueries: with σ = κ = 0 the law scales linearly, X(N) = λN, so
// each of two queries of work 1 started together advances at λ alone and
// takes 5 ms, as it would alone.
func TestTwoQueries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(200, 0, 0)
		var took [2]time.Duration
		var wg sync.WaitGroup
		for i := range took {
			wg.Go(func() { took[i] = timed(t, b, 1) })
		}
		synctest.Wait()
		if n := b.InProgress(); n != 2 {
			t.Errorf("InProgress with two queries: %d, want 2", n)
		}
		wg.Wait()
		for i, d := range took {
			if d != 5*time.Millisecond {
				t.Errorf("query %d of two took %v, want 5ms", i, d)
			}
		}
	})
}

// TestOneServerShared: with σ = 1 and κ = 0, X(N) = λ for every N: one
// server that processor sharing splits evenly. Two queries of work 1
// started together each advance at λ/2 and take 10 ms; a third that joins
// later shares λ three ways while it lasts.
func TestOneServerShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(200, 1, 0)
		var took [2]time.Duration
		var wg sync.WaitGroup
		for i := range took {
			wg.Go(func() { took[i] = timed(t, b, 1) })
		}
		wg.Wait()
		for i, d := range took {
			if d != 10*time.Millisecond {
				t.Errorf("query %d of two took %v, want 10ms", i, d)
			}
		}

		// Two of work 1 at 0; a third of work 0.5 at 2 ms. Until 2 ms each
		// of the two does 0.2; then each of three advances at 200/3 a
		// second: the third is done after 0.5·3/200 s = 7.5 ms, at 9.5 ms,
		// when each of the two has 1 − 0.2 − 0.5 = 0.3 left, which at 100
		// a second takes 3 ms more: 12.5 ms.
		var third time.Duration
		for i := range took {
			wg.Go(func() { took[i] = timed(t, b, 1) })
		}
		time.Sleep(2 * time.Millisecond)
		wg.Go(func() { third = timed(t, b, 0.5) })
		wg.Wait()
		if third != 7500*time.Microsecond {
			t.Errorf("the query that joined two took %v, want 7.5ms", third)
		}
		for i, d := range took {
			if d != 12500*time.Microsecond {
				t.Errorf("query %d joined by a third took %v, want 12.5ms", i, d)
			}
		}
	})
}

// TestLateWakeUp: a completion takes effect at its own instant, however
// late the timer that notices it. On one server shared (σ = 1, κ = 0, λ
// 200), queries of work 0.5 and 1.5 started together each advance at 100 a
// second until the first is done, at 5 ms; the second then runs alone at
// 200 a second and is done at 10 ms. With every timer 3 ms late, the first
// query's client hears of it at 8 ms, but the second is done at 10 ms all
// the same: the backend lost no work to the first while nobody noticed.
func TestLateWakeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(200, 1, 0)
		b.lag = 3 * time.Millisecond
		var first time.Duration
		var wg sync.WaitGroup
		wg.Go(func() { first = timed(t, b, 0.5) })
		wg.Go(func() { timed(t, b, 1.5) })
		time.Sleep(10*time.Millisecond - time.Nanosecond)
		if n := b.InProgress(); n != 1 {
			t.Errorf("InProgress just before 10 ms: %d, want 1", n)
		}
		time.Sleep(time.Nanosecond)
		if n := b.InProgress(); n != 0 {
			t.Errorf("InProgress at 10 ms: %d, want 0", n)
		}
		wg.Wait()
		if first != 8*time.Millisecond {
			t.Errorf("the first query's client heard at %v, want 8ms (done at 5, the timer 3 late)", first)
		}
	})
}

// TestClosedLoopThroughput: N clients that each send their next query as
// the last completes keep N in progress, and complete X(N) units of work a
// second, within 1 % over 20 s (the work in progress at the end is far less).
func TestClosedLoopThroughput(t *testing.T) {
	const lambda, sigma, kappa = 200, 0.05, 0.004
	for _, n := range []int{1, 4, 15, 64} {
		synctest.Test(t, func(t *testing.T) {
			b := New(lambda, sigma, kappa)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var mu sync.Mutex
			var units float64
			var wg sync.WaitGroup
			for c := range n {
				ws := NewWorks(1, c)
				wg.Go(func() {
					for {
						w := ws.Next()
						if b.Do(ctx, w) != nil {
							return
						}
						mu.Lock()
						units += w
						mu.Unlock()
					}
				})
			}
			synctest.Wait()
			if got := b.InProgress(); got != n {
				t.Errorf("N=%d: InProgress %d", n, got)
			}
			wg.Wait()
			if got := b.InProgress(); got != 0 {
				t.Errorf("N=%d: InProgress %d after the clients gave up, want 0", n, got)
			}
			nN := float64(n)
			want := lambda * nN / (1 + sigma*(nN-1) + kappa*nN*(nN-1))
			if got := units / 20; math.Abs(got-want) > 0.01*want {
				t.Errorf("N=%d: %.1f units/s, want X(N) = %.1f within 1%%", n, got, want)
			}
			if x := b.Throughput(n); math.Abs(x-want) > 1e-9*want {
				t.Errorf("Throughput(%d) = %v, want %v", n, x, want)
			}
		})
	}
}

// TestSetLambdaMidQuery: a query of work 1 at λ 200 has done 0.5 after
// 2.5 ms; λ then drops to 100, and the 0.5 left takes 5 ms more: 7.5 ms in
// all. A query that starts after the change takes 1/100 s.
func TestSetLambdaMidQuery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(200, 0.05, 0.004)
		var took time.Duration
		var wg sync.WaitGroup
		wg.Go(func() { took = timed(t, b, 1) })
		time.Sleep(2500 * time.Microsecond)
		b.SetLambda(100)
		wg.Wait()
		if took != 7500*time.Microsecond {
			t.Errorf("the query slowed halfway took %v, want 7.5ms", took)
		}
		if got := timed(t, b, 1); got != 10*time.Millisecond {
			t.Errorf("a query at λ 100 took %v, want 10ms", got)
		}
	})
}

// TestCancelLeaves: a query whose ctx ends leaves the backend with ctx's
// error, and the one left behind on the shared server (σ = 1) speeds up to
// the rate of one alone.
func TestCancelLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(200, 1, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		defer cancel()
		var err error
		var took time.Duration
		var wg sync.WaitGroup
		wg.Go(func() { err = b.Do(ctx, 1) })
		wg.Go(func() { took = timed(t, b, 1) })
		wg.Wait()
		if err != context.DeadlineExceeded {
			t.Errorf("the cancelled query returned %v, want context.DeadlineExceeded", err)
		}
		// 0.2 done in 2 ms at 100/s; the 0.8 left at 200/s takes 4 ms.
		if took != 6*time.Millisecond {
			t.Errorf("the query left alone took %v, want 6ms", took)
		}
	})
}

// TestPeak: the reference parameters peak at N = 15, about 1181 a second.
func TestPeak(t *testing.T) {
	n, x := New(200, 0.05, 0.004).Peak()
	if n != 15 || math.Abs(x-1181.1) > 0.1 {
		t.Errorf("Peak() = %d, %.2f; want 15, 1181.1", n, x)
	}
}

// TestArrivals: the sample path is fixed by the seed, has the rate asked
// for, and its works lie in [0.5, 1.5) with mean 1.
func TestArrivals(t *testing.T) {
	as := Arrivals(7, 1000, 100*time.Second)
	again := Arrivals(7, 1000, 100*time.Second)
	if len(as) != len(again) || as[0] != again[0] || as[len(as)-1] != again[len(again)-1] {
		t.Fatal("the same seed gave different arrivals")
	}
	if other := Arrivals(8, 1000, 100*time.Second); other[0] == as[0] {
		t.Error("another seed gave the same first arrival")
	}
	if n := float64(len(as)); math.Abs(n-100_000) > 4*math.Sqrt(100_000) {
		t.Errorf("%v arrivals in 100 s at 1000/s", n)
	}
	var sum float64
	for i, a := range as {
		if a.Work < 0.5 || a.Work >= 1.5 || a.At < 0 || a.At >= 100*time.Second || i > 0 && a.At < as[i-1].At {
			t.Fatalf("arrival %d: %+v", i, a)
		}
		sum += a.Work
	}
	if mean := sum / float64(len(as)); math.Abs(mean-1) > 0.005 {
		t.Errorf("mean work %v, want 1", mean)
	}
	w0, w0again, w1 := NewWorks(7, 0), NewWorks(7, 0), NewWorks(7, 1)
	if a, b, c := w0.Next(), w0again.Next(), w1.Next(); a != b || a == c {
		t.Errorf("works: client 0 %v and %v, client 1 %v", a, b, c)
	}
}

// TestRecorder: a summary counts the completions in its interval and gives
// nearest-rank percentiles of their response times.
func TestRecorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRecorder()
		for i := 1; i <= 200; i++ {
			time.Sleep(10 * time.Millisecond) // completions at 10 ms … 2 s
			r.Record(time.Duration(i) * time.Millisecond)
		}
		s := r.Summary(0, time.Second)
		if s.Count != 99 || s.PerSecond != 99 || s.P50 != 50*time.Millisecond || s.P99 != 99*time.Millisecond || s.Max != 99*time.Millisecond {
			t.Errorf("first second: %+v", s)
		}
		ws := r.Windows(0, 2500*time.Millisecond, time.Second)
		if len(ws) != 3 || ws[1].Count != 100 || ws[1].P99 != 198*time.Millisecond || ws[2].Count != 1 || ws[2].PerSecond != 2 {
			t.Errorf("windows: %+v", ws)
		}
		if e := r.Summary(3*time.Second, 4*time.Second); e.Count != 0 || e.P99 != 0 {
			t.Errorf("an empty interval: %+v", e)
		}
	})
}

// TestLoadRun: three requests arrive at once at a pool of one item, each
// of work 1 on a backend that serves one at 200 a second (5 ms), with a
// patience of 7 ms. The first is served at 5 ms; the second gets the item
// then and is served at 10 ms; the third gives up at 7 ms. A lease that
// fails otherwise is Run's error.
func TestLoadRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		item := make(chan struct{}, 1)
		lease := func(ctx context.Context) (func(), error) {
			select {
			case item <- struct{}{}:
				return func() { <-item }, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		load := Load{Arrivals: []Arrival{{0, 1}, {0, 1}, {0, 1}}, Patience: 7 * time.Millisecond}
		served, gaveUp := NewRecorder(), NewRecorder()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := load.Run(ctx, start, New(200, 0, 0), lease, served, gaveUp); err != nil {
			t.Fatalf("Run: %v", err)
		}
		s, g := served.Summary(0, time.Second), gaveUp.Summary(0, time.Second)
		if s.Count != 2 || s.P50 != 5*time.Millisecond || s.Max != 10*time.Millisecond {
			t.Errorf("served %d, p50 %v, max %v; want 2, 5ms, 10ms", s.Count, s.P50, s.Max)
		}
		if g.Count != 1 || g.Max != 7*time.Millisecond {
			t.Errorf("gave up %d, after %v; want 1, after 7ms", g.Count, g.Max)
		}

		broken := errors.New("no route to host")
		err := Load{Arrivals: []Arrival{{0, 1}}, Patience: time.Second}.Run(ctx, time.Now(), New(200, 0, 0),
			func(context.Context) (func(), error) { return nil, broken }, served, gaveUp)
		if !errors.Is(err, broken) {
			t.Errorf("Run with a failing lease: %v, want %v", err, broken)
		}
	})
}
