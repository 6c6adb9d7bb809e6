package main

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The pure parts against hand-computed cases, and one tiny round of each
// pool, so that the harness's invariants are checked without running the
// benchmark (go test runs in milliseconds).

func TestIdealResponses(t *testing.T) {
	for _, tc := range []struct {
		name            string
		servers         int
		arrivals, holds []time.Duration
		want            []time.Duration
	}{
		// One server: each waits for the one before; a gap lets it idle.
		{"one server, queued", 1, []time.Duration{0, 1, 2}, []time.Duration{3, 3, 3}, []time.Duration{3, 5, 7}},
		{"one server, idle gap", 1, []time.Duration{0, 10}, []time.Duration{3, 3}, []time.Duration{3, 3}},
		// Two servers: 0 and 1 start at once; 2 takes the server that
		// frees at 2 and ends at 5; 3, at 5, takes the one free since 4.
		{"two servers", 2, []time.Duration{0, 0, 0, 5}, []time.Duration{4, 2, 3, 1}, []time.Duration{4, 2, 5, 1}},
		// FIFO, not shortest-first: 2's long hold delays 3 though a
		// server would have been free sooner for a shorter job first.
		{"two servers, FIFO", 2, []time.Duration{0, 0, 1, 1}, []time.Duration{2, 2, 10, 1}, []time.Duration{2, 2, 11, 2}},
	} {
		got := make([]time.Duration, len(tc.arrivals))
		idealResponses(got, tc.arrivals, tc.holds, tc.servers)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: idealResponses = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestIdealResponsesIsAFloor: with enough servers for everyone, each
// response is its own hold.
func TestIdealResponsesIsAFloor(t *testing.T) {
	arrivals := []time.Duration{0, 0, 0, 0}
	holds := []time.Duration{5, 1, 7, 2}
	got := make([]time.Duration, 4)
	idealResponses(got, arrivals, holds, 4)
	if !slices.Equal(got, holds) {
		t.Errorf("4 requests on 4 servers: responses %v, want their holds %v", got, holds)
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{5, 1, 3}
	if got := median(xs); got != 3 {
		t.Errorf("median(5, 1, 3) = %v, want 3", got)
	}
	if !slices.Equal(xs, []float64{5, 1, 3}) {
		t.Errorf("median reordered its argument: %v", xs)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4, 1, 3, 2) = %v, want 2.5", got)
	}
}

func TestDur(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{850, "850ns"},
		{time.Microsecond, "1.00µs"},
		{61234, "61.2µs"},
		{612345, "612µs"},
		{999_600, "1.00ms"},
		{1_234_567, "1.23ms"},
		{12_345_678, "12.3ms"},
		{123_456_789, "123ms"},
		{2500 * time.Millisecond, "2.50s"},
	} {
		if got := dur(tc.d); got != tc.want {
			t.Errorf("dur(%d) = %q, want %q", int64(tc.d), got, tc.want)
		}
	}
}

func TestPctName(t *testing.T) {
	for pm, want := range map[int]string{500: "p50", 990: "p99", 999: "p99.9"} {
		if got := pctName(pm); got != want {
			t.Errorf("pctName(%d) = %q, want %q", pm, got, want)
		}
	}
}

// TestSchedule: the same seed gives the same arrivals; they are ascending
// and in [0, span); their count is within five standard deviations of
// λ·span (a Poisson count's deviation is its mean's square root).
func TestSchedule(t *testing.T) {
	const perSec = 34000
	span := time.Second
	a := schedule(nil, rand.New(rand.NewPCG(1, 2)), perSec, span)
	b := schedule(make([]time.Duration, 5), rand.New(rand.NewPCG(1, 2)), perSec, span)
	if !slices.Equal(a, b) {
		t.Fatal("two schedules from one seed differ")
	}
	if !slices.IsSorted(a) || a[0] < 0 || a[len(a)-1] >= span {
		t.Errorf("arrivals not ascending within [0, %v): first %v, last %v", span, a[0], a[len(a)-1])
	}
	if d := math.Abs(float64(len(a)) - perSec); d > 5*math.Sqrt(perSec) {
		t.Errorf("%d arrivals in %v at %d/s, off by %.0f", len(a), span, perSec, d)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-hold", "cpu", "-load", "0.85", "-rounds", "6"})
	if err != nil {
		t.Fatal(err)
	}
	cs := configs(o, hold{cpu: true, spins: 100})
	if o.rounds != 6 || len(cs) != 1 || cs[0].kind != "cpu" || cs[0].load != 0.85 || cs[0].items != 2 || !cs[0].hold.cpu {
		t.Errorf("-hold cpu -load 0.85 -rounds 6: rounds %d, configs %+v", o.rounds, cs)
	}
	o, err = parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range configs(o, hold{cpu: true, spins: 100}) {
		got = append(got, c.String())
	}
	want := []string{"cpu 50.0µs×2 ρ0.70", "cpu 50.0µs×2 ρ0.85",
		"io 1.00ms×8 ρ0.50", "io 1.00ms×8 ρ0.70", "io 1.00ms×8 ρ0.85", "io 1.00ms×8 ρ0.95"}
	if !slices.Equal(got, want) {
		t.Errorf("the default matrix: %q, want %q", got, want)
	}
	for _, bad := range [][]string{{"-hold", "disk"}, {"-load", "0"}, {"-load", "x"}, {"-rounds", "0"}, {"-duration", "0s"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

// TestAnalyze: two requests on one server, by hand. Request 0 arrives at
// 0, is started at 1, leases at 2, holds 10 and is done at 13; request 1
// arrives at 5, is started at 5, leases at 12, holds 4 and is done at 17.
// The ideal: 0 is served 0..10, 1 waits until 10 and is served to 14.
func TestAnalyze(t *testing.T) {
	arrivals := []time.Duration{0, 5}
	samples := []sample{
		{spawned: 1, leased: 2, held: 12, done: 13},
		{spawned: 5, leased: 12, held: 16, done: 17},
	}
	r := analyze(arrivals, samples, 1, 20)
	if want := [3]time.Duration{12, 13, 13}; r.resp != want {
		t.Errorf("responses %v, want %v (13 and 12; p50 of two is the first)", r.resp, want)
	}
	if want := [3]time.Duration{9, 10, 10}; r.ideal != want {
		t.Errorf("ideal %v, want %v (10 and 9)", r.ideal, want)
	}
	if want := [3]time.Duration{0, 1, 1}; r.late != want {
		t.Errorf("lateness %v, want %v (p50 0, p99 1, max 1)", r.late, want)
	}
	if r.meanHold != 7 || r.load != 0.7 || r.n != 2 {
		t.Errorf("mean hold %v, load %v, n %d; want 7, 0.7, 2", r.meanHold, r.load, r.n)
	}
}

// TestRound runs a tiny round of each pool with each waiter: every
// request ran, and each sample's instants are in order (scheduled,
// started, leased, hold ended, released), the hold as long as asked.
func TestRound(t *testing.T) {
	arrivals := schedule(nil, rand.New(rand.NewPCG(3, 4)), 20000, 5*time.Millisecond)
	h := hold{length: 50 * time.Microsecond}
	msl, err := newMSL(2, h)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = msl.closePool() }()
	for _, timer := range []string{"sleep", "timerfd"} {
		w, err := newWaiter(timer)
		if err != nil {
			t.Logf("-timer %s: %v", timer, err)
			continue
		}
		for _, s := range []*server{msl, newChannel(2, h)} {
			for i, smp := range s.runRound(arrivals, w) {
				a := arrivals[i]
				if !(a <= smp.spawned && smp.spawned <= smp.leased && smp.held-smp.leased >= h.length && smp.held <= smp.done) {
					t.Errorf("%s, -timer %s, request %d arriving at %v: out of order: %+v", s.name, timer, i, a, smp)
				}
			}
		}
		w.close()
	}
}

// TestChanPoolCountsWaits: a lease that finds the channel empty counts a
// wait, one that finds an item does not.
func TestChanPoolCountsWaits(t *testing.T) {
	s := newChannel(1, hold{})
	p := &chanPool{items: make(chan *item, 1)}
	p.items <- new(item)
	it, err := p.lease(context.Background())
	if err != nil || p.waits.Load() != 0 {
		t.Fatalf("lease of an idle item: err %v, %d waits", err, p.waits.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.lease(ctx); err == nil || p.waits.Load() != 1 {
		t.Errorf("lease from an empty pool with an ended ctx: err %v, %d waits; want an error and 1", err, p.waits.Load())
	}
	p.release(it)
	if got := s.waits(); got != 0 {
		t.Errorf("a fresh channel server's waits() = %d, want 0", got)
	}
}

// TestWaiters: neither waiter returns before the instant it was given.
func TestWaiters(t *testing.T) {
	for _, timer := range []string{"sleep", "timerfd"} {
		w, err := newWaiter(timer)
		if err != nil {
			t.Logf("-timer %s: %v", timer, err)
			continue
		}
		for range 20 {
			until := time.Now().Add(100 * time.Microsecond)
			w.wait(until, 0)
			if early := time.Until(until); early > 0 {
				t.Errorf("-timer %s returned %v early", timer, early)
			}
		}
		w.close()
	}
	if _, err := newWaiter("spin"); err == nil {
		t.Error(`newWaiter("spin"): no error`)
	}
}

func TestPieceSize(t *testing.T) {
	for garbage, want := range map[int]int{0: 0, 1: 8, 100: 32, 1024: 256, 4096: 1024, 16384: 4096} {
		if got := pieceSize(garbage); got != want {
			t.Errorf("pieceSize(%d) = %d, want %d", garbage, got, want)
		}
	}
}

// TestHoldGarbage: a CPU hold with garbage allocates its pieces on the
// heap, one allocation each, and one without allocates nothing.
func TestHoldGarbage(t *testing.T) {
	for _, tc := range []struct {
		piece int
		want  float64
	}{{0, 0}, {8, pieces}, {1024, pieces}} {
		h := hold{cpu: true, spins: 40, piece: tc.piece}
		x := uint64(1)
		if got := testing.AllocsPerRun(100, func() { x = h.do(x) }); got != tc.want {
			t.Errorf("a hold with pieces of %d bytes: %v allocations, want %v", tc.piece, got, tc.want)
		}
		mustLive(x)
	}
}

// TestPauseTail: the pauses of several runs pool, and each is read as
// its bucket's upper bound.
func TestPauseTail(t *testing.T) {
	buckets := []float64{0, 1e-6, 2e-6, 3e-6, math.Inf(1)}
	a := gcUse{pauses: []uint64{98, 0, 0, 0}, buckets: buckets}
	b := gcUse{pauses: []uint64{0, 1, 1, 0}, buckets: buckets}
	if p99, most := pauseTail([]gcUse{a, b}); p99 != 2*time.Microsecond || most != 3*time.Microsecond {
		t.Errorf("98 pauses under 1µs, one under 2µs, one under 3µs: p99 %v, max %v; want 2µs (the 99th), 3µs", p99, most)
	}
	b.pauses = []uint64{0, 0, 2, 0}
	if p99, _ := pauseTail([]gcUse{a, b}); p99 != 3*time.Microsecond {
		t.Errorf("98 pauses under 1µs, two under 3µs: p99 %v, want 3µs", p99)
	}
	if p99, most := pauseTail(nil); p99 != 0 || most != 0 {
		t.Errorf("no runs: %v, %v; want 0, 0", p99, most)
	}
}
