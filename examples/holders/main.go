// Command holders is the story of the package documentation's "When leases
// time out": a request handler blocks while it holds a connection, the
// pool's leases start to time out, and the pool says who holds its items.
// First Stats (every item in use), then Outstanding (the leases out now,
// with the line that took them), then the reports of LeakThreshold (each
// lease held too long, once, as it happens), and last, once the backend
// answers, the end of each reported lease.
//
//	go run ./examples/holders
//
// Its output is the same on every run: the durations it measures are
// printed as <wait> and <age>, and checked against LeakThreshold instead.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/msl-armory/pool"
)

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// The pool's settings: a lease that waits longer than leaseTimeout fails;
// one held longer than leakThreshold is reported. A real service would
// use seconds for both.
const (
	maxSize       = 2
	leaseTimeout  = 50 * time.Millisecond
	leakThreshold = 200 * time.Millisecond
)

// conn stands in for a connection to a backend.
type conn struct{}

// handle serves one request: it leases a connection, sends the query and
// waits for the reply. The bug: it waits with no deadline, holding the
// connection while the backend does not answer.
func handle(ctx context.Context, p *pool.Pool[*conn], reply <-chan struct{}) error {
	l, err := p.Lease(ctx) // the line the pool's reports point at
	if err != nil {
		return err
	}
	defer l.Release()
	<-reply // no deadline
	return nil
}

func run(w io.Writer) error {
	ctx := context.Background()
	reports := make(chan pool.LeakReport, maxSize)
	logs := &records{}
	p, err := pool.New(ctx, pool.FactoryFunc[*conn](func(context.Context) (*conn, error) {
		return &conn{}, nil
	}), pool.Options[*conn]{
		Name:            "db",
		MaxSize:         maxSize,
		LeaseTimeout:    leaseTimeout,
		LeakThreshold:   leakThreshold,
		TrackLeaseSites: true, // for the stacks: costs a stack walk per lease
		OnLeak:          func(r pool.LeakReport) { reports <- r },
		Logger:          slog.New(logs.handler()),
	})
	if err != nil {
		return err
	}
	defer p.Close()

	fmt.Fprintf(w, "--- %d requests hang, each holding a connection (MaxSize %d) ---\n", maxSize, maxSize)
	reply := make(chan struct{}) // the backend's: it does not answer
	var hung sync.WaitGroup
	for range maxSize {
		hung.Go(func() {
			if err := handle(ctx, p, reply); err != nil {
				log.Fatal(err)
			}
		})
	}
	if err := await(func() bool { return p.Stats().ActiveLeases == maxSize }); err != nil {
		return err
	}
	answered := make(chan struct{})
	close(answered)
	err = handle(ctx, p, answered) // a third request, for which nothing is left
	fmt.Fprintf(w, "request 3: %s\n", regexp.MustCompile(`for [0-9.]+m?s;`).ReplaceAllString(err.Error(), "for <wait>;"))
	fmt.Fprintf(w, "  errors.Is(err, pool.ErrLeaseTimeout): %t\n", errors.Is(err, pool.ErrLeaseTimeout))

	s := p.Stats()
	fmt.Fprintf(w, "\n1. Stats: %d of %d items in use, %d lease(s) waiting, %d timed out, %d leaked, %d held too long so far\n",
		s.ActiveLeases, s.MaxSize, s.QueuedLeases, s.Timeouts, s.Leaked, s.LongLeases)

	out := p.Outstanding()
	fmt.Fprintf(w, "\n2. Outstanding: %d lease(s) out, oldest first\n", len(out))
	for _, li := range out {
		fmt.Fprintf(w, "  taken at %s, out for <age> (longer than LeaseTimeout: %t)\n", frame(li.Stack), li.Age > leaseTimeout)
	}

	fmt.Fprintf(w, "\n3. LeakThreshold (%v): each lease held longer is reported once\n", leakThreshold)
	for range maxSize {
		var r pool.LeakReport
		select {
		case r = <-reports:
		case <-time.After(10 * time.Second):
			return errors.New("no report of the lease held too long")
		}
		fmt.Fprintf(w, "  OnLeak: pool %q, Held %t, taken at %s, out for <age> (at least LeakThreshold: %t)\n",
			r.Pool, r.Held, frame(r.Stack), r.Age >= leakThreshold)
	}
	for _, l := range logs.get() {
		fmt.Fprintf(w, "  log: %s\n", l)
	}
	fmt.Fprintf(w, "  Stats: %d held too long\n", p.Stats().LongLeases)

	fmt.Fprintln(w, "\n--- the backend answers: the handlers end their leases ---")
	close(reply)
	hung.Wait()
	for _, l := range logs.get()[maxSize:] {
		fmt.Fprintf(w, "  log: %s\n", l)
	}
	fmt.Fprintf(w, "Outstanding: %d lease(s) out; Stats: %d held too long, %d items idle\n",
		len(p.Outstanding()), p.Stats().LongLeases, p.Stats().ItemsAvailable)
	return nil
}

// frame returns where a lease was taken, from its stack: the first frame,
// the Lease call's caller, as "function (file:line)", with neither package
// nor directory, which differ between go run and go test.
func frame(stack string) string {
	lines := strings.Split(stack, "\n")
	if len(lines) < 2 {
		return "(no stack)"
	}
	fn := lines[0][strings.LastIndexByte(lines[0], '.')+1:]
	file := strings.TrimSpace(lines[1])
	file = file[strings.LastIndexByte(file, '/')+1:]
	return fmt.Sprintf("%s (%s)", fn, file)
}

// records keeps the pool's log records as lines, each age checked against
// LeakThreshold and printed as <age>, each stack as its first frame.
type records struct {
	mu    sync.Mutex
	lines []string
}

func (r *records) handler() slog.Handler {
	return slog.NewTextHandler(r, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		switch a.Key {
		case slog.TimeKey:
			return slog.Attr{}
		case "age":
			return slog.String("age", fmt.Sprintf("<age> (at least LeakThreshold: %t)", a.Value.Duration() >= leakThreshold))
		case "stack":
			return slog.String("stack", frame(a.Value.String()))
		}
		return a
	}})
}

// Write takes one record from the text handler, which writes each in one
// call.
func (r *records) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.lines = append(r.lines, strings.TrimSuffix(string(b), "\n"))
	r.mu.Unlock()
	return len(b), nil
}

func (r *records) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// await polls cond until it holds, for at most 10 s.
func await(cond func() bool) error {
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
