// Command tcp pools real TCP connections to a line-protocol server that it
// starts on a loopback port, and takes the server through four phases:
//
//  1. connections are reused;
//  2. the server drops every idle connection, and the next leases get
//     healthy ones without an error: the pool's Preparer finds each closed
//     connection and redials it in place;
//  3. the server is down: leases fail fast with the dial error;
//  4. the server is back on the same address, and the pool recovers;
//  5. a second pool starts while the server is down, with SeedInBackground:
//     New returns at once, and its MinSize connections are dialed in the
//     background once the server is up.
//
// Run it with
//
//	go run ./examples/tcp
//
// Its output is the same on every run: it prints no ports, addresses or
// timings.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/msl-armory/pool"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tcp:", err)
		os.Exit(1)
	}
}

// waitBound bounds every request and every wait of the tour: on a loopback
// none should come near it.
const waitBound = 5 * time.Second

// tour is the state the phases share; it writes the tour's lines and keeps
// the first write error.
type tour struct {
	w   io.Writer
	err error

	srv  *server
	d    *dialer
	prep *redialer
	p    *pool.Pool[*client]
}

func (t *tour) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

// run writes the tour to w.
func run(w io.Writer) error {
	t := &tour{w: w, srv: &server{}, prep: &redialer{}}
	if err := t.srv.start(); err != nil {
		return err
	}
	defer t.srv.stop()
	t.d = &dialer{addr: t.srv.addr}

	p, err := pool.New[*client](context.Background(), t.d, pool.Options[*client]{
		Name:               "lines",
		MaxSize:            3,
		LeaseTimeout:       waitBound,
		CreateTimeout:      2 * time.Second, // bounds the dial
		PreparationTimeout: 2 * time.Second, // bounds the check and the redial
		Preparer:           t.prep,
		// Destroy: nil, so the pool calls client.Close.
	})
	if err != nil {
		return err
	}
	defer p.Close()
	t.p = p

	for i, phase := range []func(context.Context) error{
		t.reuse,
		t.dropped,
		t.down,
		t.back,
		t.startWhileDown,
		t.closing,
	} {
		if i > 0 {
			t.printf("\n")
		}
		if err := phase(context.Background()); err != nil {
			return err
		}
	}
	return t.err
}

// request leases a client, sends req and returns the reply. A client whose
// request failed is discarded, not released: its connection is in an
// unknown state.
func (t *tour) request(ctx context.Context, req string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	l, err := t.p.Lease(ctx)
	if err != nil {
		return "", err
	}
	reply, err := l.Value().do(ctx, req)
	if err != nil {
		l.Discard()
		return "", err
	}
	l.Release()
	return reply, nil
}

// holdThree takes three leases at once, sends one request on each, prints
// the replies and releases them.
func (t *tour) holdThree(ctx context.Context, word string) error {
	ctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	var ls []pool.Lease[*client]
	defer func() {
		for _, l := range ls {
			l.Release()
		}
	}()
	var replies []string
	for i := 1; i <= 3; i++ {
		l, err := t.p.Lease(ctx)
		if err != nil {
			return err
		}
		reply, err := l.Value().do(ctx, fmt.Sprintf("%s %d", word, i))
		if err != nil {
			l.Discard()
			return err
		}
		ls = append(ls, l)
		replies = append(replies, fmt.Sprintf("%q", reply))
	}
	t.printf("3 leases held at once: %s\n", strings.Join(replies, ", "))
	return nil
}

// reuse: one connection serves requests one at a time; three at once need
// three; after that, no request dials again.
func (t *tour) reuse(ctx context.Context) error {
	t.printf("--- 1. Connections are reused (pool of %d) ---\n", t.p.Stats().MaxSize)
	for i := 1; i <= 3; i++ {
		req := fmt.Sprintf("hello %d", i)
		reply, err := t.request(ctx, req)
		if err != nil {
			return err
		}
		t.printf("request %q: reply %q\n", req, reply)
	}
	if err := t.holdThree(ctx, "at once"); err != nil {
		return err
	}
	dials := t.d.dials.Load()
	onOpen := true // every reply came on one of the three open connections
	for i := 1; i <= 9; i++ {
		reply, err := t.request(ctx, fmt.Sprintf("again %d", i))
		if err != nil {
			return err
		}
		// Which idle connection a lease gets is the pool's business: the
		// tour checks only that it is one of the three.
		conn, _, _ := strings.Cut(reply, ":")
		onOpen = onOpen && slices.Contains([]string{"conn 1", "conn 2", "conn 3"}, conn)
	}
	t.printf("9 more requests, one at a time, all on conn 1, 2 or 3: %t; new dials: %d\n", onOpen, t.d.dials.Load()-dials)
	t.printf("dials: %d, server connections open: %d\n", t.d.dials.Load(), t.srv.open())
	return nil
}

// dropped: the server hangs up on every idle connection; the Preparer finds
// them closed on the next leases and redials them, and no lease fails.
func (t *tour) dropped(ctx context.Context) error {
	t.printf("--- 2. The server drops every idle connection ---\n")
	n := t.srv.dropAll()
	t.printf("server: closed %d idle connection(s), %d open\n", n, t.srv.open())
	wctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	if err := t.d.waitHungUp(wctx); err != nil {
		return err
	}

	before := t.p.Stats()
	if err := t.holdThree(ctx, "after the drop"); err != nil {
		return err // a lease or a request failed: what this phase says cannot happen
	}
	s := t.p.Stats()
	t.printf("the Preparer found %d closed connection(s) and redialed them in place\n", t.prep.redials.Load())
	t.printf("no lease failed; items created %d, destroyed %d: the same three clients\n",
		s.Created-before.Created, s.Destroyed-before.Destroyed)
	return nil
}

// down: with the server down, a lease finds the idle clients closed, their
// redials refused, and fails with the dial error of a fresh client; leases
// after that fail the same way at once.
func (t *tour) down(ctx context.Context) error {
	t.printf("--- 3. The server is down ---\n")
	n := t.srv.stop()
	t.printf("server: stopped, closed %d connection(s); new ones are refused\n", n)
	wctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	if err := t.d.waitHungUp(wctx); err != nil {
		return err
	}

	var last error
	for i := 1; i <= 3; i++ {
		reply, err := t.request(ctx, "anyone there?")
		if err == nil {
			return fmt.Errorf("a request succeeded with the server down: %q", reply)
		}
		t.printf("lease %d: %s\n", i, strings.ReplaceAll(err.Error(), t.srv.addr, "<addr>"))
		last = err
	}
	t.printf("  errors.Is(err, syscall.ECONNREFUSED): %t\n", errors.Is(last, syscall.ECONNREFUSED))
	var opErr *net.OpError
	if errors.As(last, &opErr) {
		t.printf("  errors.As(err, &opErr): true, opErr.Op: %q\n", opErr.Op)
	} else {
		t.printf("  errors.As(err, &opErr): false\n")
	}
	for t.p.Stats().Destroying > 0 { // the idle ones are closed on the pool's own goroutines
		time.Sleep(time.Millisecond)
	}
	s := t.p.Stats()
	t.printf("pool: %d item(s); %d idle client(s) failed their redial and were destroyed; leases that waited: %d\n",
		s.ItemsAllocated, s.PrepareFailed, s.Waits)
	return nil
}

// back: the server listens again on the same address; leases dial afresh
// and succeed.
func (t *tour) back(ctx context.Context) error {
	t.printf("--- 4. The server is back ---\n")
	if err := t.srv.start(); err != nil {
		return err
	}
	t.printf("server: listening again on the same address\n")
	dials := t.d.dials.Load()
	for i := 1; i <= 3; i++ {
		req := fmt.Sprintf("back %d", i)
		reply, err := t.request(ctx, req)
		if err != nil {
			return err
		}
		t.printf("request %q: reply %q\n", req, reply)
	}
	t.printf("dials since the restart: %d\n", t.d.dials.Load()-dials)
	return nil
}

// startWhileDown: with the server down, a pool with MinSize 2 and
// SeedInBackground starts at once; once the server listens again, the
// pool has its two connections, dialed in the background.
func (t *tour) startWhileDown(ctx context.Context) error {
	t.printf("--- 5. A pool that starts while the server is down ---\n")
	t.srv.stop()
	t.printf("server: stopped\n")
	p, err := pool.New[*client](ctx, &dialer{addr: t.srv.addr}, pool.Options[*client]{
		Name:             "warm",
		MinSize:          2,
		MaxSize:          3,
		SeedInBackground: true,                   // New does not wait for the server
		UpkeepInterval:   100 * time.Millisecond, // also bounds the backoff of the retries
		CreateTimeout:    2 * time.Second,
	})
	if err != nil {
		return err
	}
	defer p.Close()
	t.printf("New returned: %d of MinSize 2 connections\n", p.Stats().ItemsAvailable)
	wctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	for p.Stats().CreateErrors == 0 { // a dial has been refused
		if err := sleep(wctx, time.Millisecond); err != nil {
			return err
		}
	}
	if err := t.srv.start(); err != nil {
		return err
	}
	t.printf("server: listening again\n")
	for p.Stats().ItemsAvailable < 2 {
		if err := sleep(wctx, time.Millisecond); err != nil {
			return fmt.Errorf("the floor never appeared: %w", err)
		}
	}
	t.printf("the floor is there: %d idle connections, dialed in the background; refused dials were retried\n", p.Stats().ItemsAvailable)
	return p.Close()
}

// sleep waits for d, or returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// closing: Close closes every client; the server sees them all go.
func (t *tour) closing(ctx context.Context) error {
	t.printf("--- Close ---\n")
	if err := t.p.Close(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	if err := t.srv.waitOpen(wctx, 0); err != nil {
		return err
	}
	s := t.p.Stats()
	t.printf("server connections open: %d\n", t.srv.open())
	t.printf("stats: %d leases, %d created, %d destroyed, %d failed preparation\n",
		s.Leases, s.Created, s.Destroyed, s.PrepareFailed)
	return nil
}
