// Command outage pools TCP connections to a line server that it starts on a
// loopback port, stops and starts again, and measures what three options do
// for a pool whose backend is in trouble:
//
//  1. FailFastAfter: while the server is down, leases fail at once with
//     ErrBackendDown once the pool has seen FailFastAfter dials refused in a
//     row, instead of each paying for a dial of its own;
//  2. MaxConcurrentCreates: a cold start of 50 concurrent leases dials at
//     most that many connections at once, and reuses them, instead of
//     opening 50 at once;
//  3. with FailFastAfter, the pool's background probe finds the server back
//     within one backoff step (at most UpkeepInterval) of its restart.
//
// Run it with
//
//	go run ./examples/outage
//
// Its timings vary from run to run. It exits with status 1 when what it
// shows does not hold: a lease failed fast without ErrBackendDown, more dials
// were in flight than MaxConcurrentCreates, or no lease succeeded within 5 s
// of the restart.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/msl-armory/pool"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "outage:", err)
		os.Exit(1)
	}
}

const (
	// dialLatency is the simulated network latency of a dial: see dialer.
	dialLatency = 50 * time.Millisecond
	// createTimeout bounds each dial, latency included.
	createTimeout = 200 * time.Millisecond
	// waitBound bounds every lease and every wait of the program: on a
	// loopback none should come near it.
	waitBound = 5 * time.Second

	failFastAfter = 3                      // dials refused in a row before the pool is down
	burst         = 20                     // concurrent leases while the server is down
	coldLeases    = 50                     // concurrent leases on a cold start, and MaxSize
	createCap     = 4                      // MaxConcurrentCreates of the capped cold start
	upkeep        = 200 * time.Millisecond // UpkeepInterval: caps the probe's backoff
)

// dialer is the pools' factory: it dials the server, after a simulated
// network latency of dialLatency. On a loopback a refused dial fails in
// microseconds, so without it a pool that dials on every lease would look as
// quick as one that fails fast; the latency stands in for the round trip to
// a remote host, which a refused dial costs too. It counts its dials, and
// how many are in flight at once.
type dialer struct {
	addr                  string
	inFlight, peak, dials atomic.Int64
}

func (d *dialer) dial(ctx context.Context) (net.Conn, error) {
	n := d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	for p := d.peak.Load(); n > p && !d.peak.CompareAndSwap(p, n); p = d.peak.Load() {
	}
	d.dials.Add(1)
	t := time.NewTimer(dialLatency)
	defer t.Stop()
	select {
	case <-ctx.Done(): // CreateTimeout, or Close
		return nil, ctx.Err()
	case <-t.C:
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.addr)
}

// tour is the state the phases share; it writes the program's lines, keeps
// the first write error, and collects the expectations that failed.
type tour struct {
	w      io.Writer
	err    error
	failed []error
	srv    *server
}

func (t *tour) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

// expect records, and prints, an expectation that failed.
func (t *tour) expect(ok bool, format string, args ...any) {
	if !ok {
		err := fmt.Errorf(format, args...)
		t.printf("  UNEXPECTED: %v\n", err)
		t.failed = append(t.failed, err)
	}
}

// run writes the program's output to w. It returns an error when an
// expectation failed, after all of the output.
func run(w io.Writer) error {
	t := &tour{w: w, srv: &server{}}
	if err := t.srv.start(); err != nil {
		return err
	}
	defer t.srv.stop()

	for i, phase := range []func(context.Context) error{t.failFast, t.coldStart, t.recovery} {
		if i > 0 {
			t.printf("\n")
		}
		if err := phase(context.Background()); err != nil {
			return err
		}
	}
	if t.err != nil {
		return t.err
	}
	if len(t.failed) > 0 {
		return fmt.Errorf("%d expectation(s) failed: %w", len(t.failed), errors.Join(t.failed...))
	}
	return nil
}

// newPool makes a pool of connections to the server, with opts' base
// settings filled in, and the dialer that is its factory.
func (t *tour) newPool(ctx context.Context, opts pool.Options[net.Conn]) (*pool.Pool[net.Conn], *dialer, error) {
	d := &dialer{addr: t.srv.addr}
	opts.CreateTimeout = createTimeout
	opts.LeaseTimeout = waitBound
	p, err := pool.New(ctx, pool.FactoryFunc[net.Conn](d.dial), opts)
	return p, d, err
}

// use leases a connection, sends one request on it and releases it; it
// returns how long the Lease call took, and the error of the lease or of
// the request. A connection whose request failed is discarded.
func use(ctx context.Context, p *pool.Pool[net.Conn]) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	start := time.Now()
	l, err := p.Lease(ctx)
	took := time.Since(start)
	if err != nil {
		return took, err
	}
	if _, err := roundTrip(l.Value(), "ping"); err != nil {
		l.Discard()
		return took, err
	}
	l.Release()
	return took, nil
}

// roundTrip writes one line and reads the line that comes back.
func roundTrip(c net.Conn, msg string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(waitBound)); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintln(c, msg); err != nil {
		return "", err
	}
	reply, err := bufio.NewReader(c).ReadString('\n') // one line in flight: none buffered past it
	return strings.TrimSuffix(reply, "\n"), err
}

// concurrently runs n calls of use at once and returns their durations and
// errors, in no particular order.
func concurrently(ctx context.Context, p *pool.Pool[net.Conn], n int) ([]time.Duration, []error) {
	took, errs := make([]time.Duration, n), make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			took[i], errs[i] = use(ctx, p)
		})
	}
	close(start)
	wg.Wait()
	return took, errs
}

// failFast: with the server down, a pool that has seen FailFastAfter dials
// refused fails the next leases at once, with ErrBackendDown; a pool
// without FailFastAfter makes every lease pay for its own refused dial.
func (t *tour) failFast(ctx context.Context) error {
	t.printf("--- 1. The server is down: %d concurrent leases, FailFastAfter %d vs 0 ---\n", burst, failFastAfter)
	t.srv.stop()
	t.printf("server: stopped, dials are refused (each after %v of simulated network latency)\n", dialLatency)
	for _, ffa := range []int{failFastAfter, 0} {
		p, d, err := t.newPool(ctx, pool.Options[net.Conn]{
			Name:          fmt.Sprintf("failfast-%d", ffa),
			MaxSize:       burst,
			FailFastAfter: ffa,
		})
		if err != nil {
			return err
		}
		t.printf("FailFastAfter %d:\n", ffa)

		// The pool learns of the outage from leases one after another.
		var took []string
		for range failFastAfter {
			dur, err := use(ctx, p)
			if err == nil {
				return errors.Join(errors.New("a lease succeeded with the server down"), p.Close())
			}
			took = append(took, round(dur))
		}
		t.printf("  %d leases one after another, each a refused dial: %s; BackendDown: %t\n",
			failFastAfter, strings.Join(took, ", "), p.Stats().BackendDown)

		dials := d.dials.Load()
		durs, errs := concurrently(ctx, p, burst)
		slices.Sort(durs)
		median := (durs[(burst-1)/2] + durs[burst/2]) / 2
		var failed, down, refused int
		var sample error
		for _, err := range errs {
			if err == nil {
				continue
			}
			failed++
			if errors.Is(err, pool.ErrBackendDown) {
				down++
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				refused++
			}
			sample = err
		}
		whose := "" // without FailFastAfter, the leases' own
		if ffa > 0 {
			whose = " (the background probe's)"
		}
		t.printf("  then %d leases at once: %d failed, in median %s, at most %s; dials meanwhile: %d%s\n",
			burst, failed, round(median), round(durs[burst-1]), d.dials.Load()-dials, whose)
		t.printf("  errors.Is(err, pool.ErrBackendDown): %d of %d; errors.Is(err, syscall.ECONNREFUSED): %d of %d\n",
			down, failed, refused, failed)
		if sample != nil {
			t.printf("  error: %s\n", strings.ReplaceAll(sample.Error(), t.srv.addr, "<addr>"))
		}

		t.expect(failed == burst, "FailFastAfter %d: %d of %d leases succeeded with the server down", ffa, burst-failed, burst)
		t.expect(refused == failed, "FailFastAfter %d: %d failed lease(s) without the dial's ECONNREFUSED", ffa, failed-refused)
		if ffa > 0 {
			t.expect(p.Stats().BackendDown, "FailFastAfter %d: Stats().BackendDown false after %d refused dials", ffa, p.Stats().CreateErrors)
			t.expect(down == failed, "FailFastAfter %d: %d failed lease(s) without ErrBackendDown", ffa, failed-down)
			t.expect(median < dialLatency/2, "FailFastAfter %d: the median lease took %s to fail, not less than a dial", ffa, round(median))
		} else {
			t.expect(down == 0, "FailFastAfter 0: %d lease(s) failed with ErrBackendDown", down)
		}
		if err := p.Close(); err != nil {
			return err
		}
	}
	return nil
}

// coldStart: 50 leases at once on an empty pool, MaxSize 50, with
// MaxConcurrentCreates 0 and createCap. Uncapped, every lease dials. Capped,
// the leases past the cap wait in FIFO order and mostly take a connection
// another lease released; those whose turn to dial came first (as the first
// dials ended) dial too, so the total is somewhat above the cap, and the
// cold start takes about two dials' time instead of one.
func (t *tour) coldStart(ctx context.Context) error {
	t.printf("--- 2. A cold start: %d concurrent leases, MaxSize %d ---\n", coldLeases, coldLeases)
	if err := t.srv.start(); err != nil {
		return err
	}
	t.printf("server: started again on the same address\n")
	for _, limit := range []int{0, createCap} {
		p, d, err := t.newPool(ctx, pool.Options[net.Conn]{
			Name:                 fmt.Sprintf("cold-%d", limit),
			MaxSize:              coldLeases,
			MaxConcurrentCreates: limit,
		})
		if err != nil {
			return err
		}
		accepted := t.srv.accepted.Load()
		start := time.Now()
		_, errs := concurrently(ctx, p, coldLeases)
		elapsed := time.Since(start)
		var failed int
		for _, err := range errs {
			if err != nil {
				failed++
			}
		}
		if err := p.Close(); err != nil {
			return err
		}
		t.printf("MaxConcurrentCreates %d: %d of %d leases served in %s; dials: %d, at most %d at once; server accepted %d; leases that waited: %d\n",
			limit, coldLeases-failed, coldLeases, round(elapsed), d.dials.Load(), d.peak.Load(), t.srv.accepted.Load()-accepted, p.Stats().Waits)
		t.expect(failed == 0, "MaxConcurrentCreates %d: %d lease(s) failed: %v", limit, failed, errors.Join(errs...))
		if limit > 0 {
			t.expect(d.peak.Load() <= int64(limit), "MaxConcurrentCreates %d: %d dials in flight at once", limit, d.peak.Load())
		}
	}
	return nil
}

// recovery: the server stops, the pool goes down, the server comes back;
// leases fail fast until the background probe's dial succeeds, and that
// takes at most one backoff step after the restart.
func (t *tour) recovery(ctx context.Context) error {
	t.printf("--- 3. The server comes back: FailFastAfter %d, UpkeepInterval %v ---\n", failFastAfter, upkeep)
	p, d, err := t.newPool(ctx, pool.Options[net.Conn]{
		Name:           "recovery",
		MaxSize:        4,
		FailFastAfter:  failFastAfter,
		UpkeepInterval: upkeep, // caps the probe's backoff
	})
	if err != nil {
		return err
	}
	return errors.Join(t.outageAndRestart(ctx, p, d), p.Close())
}

// outageAndRestart takes p, whose factory is d, through the outage and the
// restart.
func (t *tour) outageAndRestart(ctx context.Context, p *pool.Pool[net.Conn], d *dialer) error {
	if _, err := use(ctx, p); err != nil {
		return err
	}
	t.printf("a lease with the server up: served\n")
	t.srv.stop()
	p.Clear() // the idle connection is dead: the next lease must dial
	t.printf("server: stopped\n")
	for range failFastAfter {
		if _, err := use(ctx, p); err == nil {
			return errors.New("a lease succeeded with the server down")
		}
	}
	t.printf("%d leases, each a refused dial; BackendDown: %t\n", failFastAfter, p.Stats().BackendDown)
	t.expect(p.Stats().BackendDown, "Stats().BackendDown false after %d refused dials in a row", failFastAfter)

	// Leases keep coming while the server is down: they fail fast, and only
	// the probe dials.
	const downFor = 800 * time.Millisecond
	dials, leases, fast := d.dials.Load(), 0, 0
	for until := time.Now().Add(downFor); time.Now().Before(until); leases++ {
		if _, err := use(ctx, p); errors.Is(err, pool.ErrBackendDown) {
			fast++
		} else if err == nil {
			return errors.New("a lease succeeded with the server down")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.printf("down for %v: %d of %d leases failed fast with ErrBackendDown; dials meanwhile (the probe's): %d\n",
		downFor, fast, leases, d.dials.Load()-dials)
	t.expect(fast == leases, "%d of %d leases failed without ErrBackendDown while the pool was down", leases-fast, leases)

	if err := t.srv.start(); err != nil {
		return err
	}
	restart := time.Now()
	t.printf("server: started again at T\n")
	var back time.Duration
	for {
		_, err := use(ctx, p)
		if err == nil {
			back = time.Since(restart)
			break
		}
		if time.Since(restart) > waitBound {
			t.expect(false, "no lease succeeded within %v of the restart; the last error: %v", waitBound, err)
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	bound := upkeep + dialLatency
	t.printf("first successful lease at T+%s; BackendDown: %t\n", round(back), p.Stats().BackendDown)
	t.printf("the bound, one backoff step (at most UpkeepInterval, %v) and one dial (%v): %v; within it: %t\n",
		upkeep, dialLatency, bound, back <= bound)
	t.printf("dials in flight at once, ever: %d (the probe dials alone)\n", d.peak.Load())
	t.expect(d.peak.Load() == 1, "more than one dial in flight at once: %d", d.peak.Load())
	return nil
}

// round rounds d for printing: to the microsecond below a millisecond, to
// 0.1 ms above.
func round(d time.Duration) string {
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}
