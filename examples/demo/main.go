// Command demo is a short tour of the pool: reuse, the cap under
// concurrency, preparation of a stale item, a bounded wait, a defused double
// release and closing. Run it with
//
//	go run ./examples/demo
//
// The pooled items are pretend connections that count how often they are
// opened and closed, so the tour can show what the pool did. Its output is
// the same on every run.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msl-armory/pool"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// Conn is a pretend network connection. It can go stale, as a real one does
// when the server drops it while it sits idle.
type Conn struct {
	id         int
	d          *dialer
	stale      atomic.Bool
	inUse      atomic.Bool // set by the concurrent section while a lease holds it
	reconnects atomic.Int64
}

// Close makes Conn an io.Closer, so the pool's default disposal closes it.
func (c *Conn) Close() error {
	c.d.closed.Add(1)
	return nil
}

// dialer is the pool's Factory: it opens connections and counts them.
type dialer struct {
	opened, closed atomic.Int64
}

func (d *dialer) Create(context.Context) (*Conn, error) {
	return &Conn{id: int(d.opened.Add(1)), d: d}, nil
}

// tour writes the demo's lines and keeps the first write error.
type tour struct {
	w   io.Writer
	err error
}

func (t *tour) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

// run writes the tour to w.
func run(w io.Writer) error {
	t := &tour{w: w}
	for i, section := range []func(context.Context, *tour) error{
		sequential,
		concurrent,
		stale,
		boundedWait,
		doubleRelease,
		closing,
	} {
		if i > 0 {
			t.printf("\n")
		}
		if err := section(context.Background(), t); err != nil {
			return err
		}
	}
	return t.err
}

// sequential: borrowers that take turns need only one connection.
func sequential(ctx context.Context, t *tour) error {
	t.printf("--- 6 sequential borrowers, pool of 3 ---\n")
	d := &dialer{}
	p, err := pool.New[*Conn](ctx, d, pool.Options[*Conn]{MaxSize: 3})
	if err != nil {
		return err
	}
	defer p.Close()
	for i := 1; i <= 6; i++ {
		l, err := p.Lease(ctx)
		if err != nil {
			return err
		}
		t.printf("borrower %d got connection #%d\n", i, l.Value().id)
		l.Release()
	}
	t.printf("opened: %d (each borrower reused the one the previous gave back)\n", d.opened.Load())
	return nil
}

// concurrent: many goroutines, and never more than MaxSize connections.
func concurrent(ctx context.Context, t *tour) error {
	const workers, perWorker, maxSize = 8, 25, 3
	t.printf("--- %d goroutines x %d leases, pool of %d ---\n", workers, perWorker, maxSize)
	d := &dialer{}
	p, err := pool.New[*Conn](ctx, d, pool.Options[*Conn]{MaxSize: maxSize})
	if err != nil {
		return err
	}
	defer p.Close()

	var held, peak atomic.Int64 // measured here, not taken from the pool
	var shared atomic.Int64     // leases that found their connection in use
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range perWorker {
				l, err := p.Lease(ctx)
				if err != nil {
					errs <- err
					return
				}
				c := l.Value()
				if !c.inUse.CompareAndSwap(false, true) {
					shared.Add(1)
				}
				n := held.Add(1)
				for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
				}
				runtime.Gosched() // let the others contend while this lease is out
				held.Add(-1)
				c.inUse.Store(false)
				l.Release()
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}

	s := p.Stats()
	t.printf("leases made: %d\n", s.Leases)
	t.printf("connections opened <= %d: %t\n", maxSize, d.opened.Load() <= maxSize)
	t.printf("peak held at once <= %d: %t\n", maxSize, peak.Load() <= maxSize)
	t.printf("a connection held by two borrowers at once: %t\n", shared.Load() > 0)
	t.printf("active leases now: %d\n", s.ActiveLeases)
	return nil
}

// readiness is the Preparer of the stale section: it reports a stale
// connection as not ready, and Prepare reconnects it.
type readiness struct{ t *tour }

func (r readiness) IsReady(_ context.Context, c *Conn) (bool, error) {
	if c.stale.Load() {
		r.t.printf("  IsReady(#%d): false, the server dropped it\n", c.id)
		return false, nil
	}
	r.t.printf("  IsReady(#%d): true\n", c.id)
	return true, nil
}

func (r readiness) Prepare(_ context.Context, c *Conn) error {
	c.stale.Store(false)
	c.reconnects.Add(1)
	r.t.printf("  Prepare(#%d): reconnected\n", c.id)
	return nil
}

// stale: the Preparer restores an idle connection that went stale.
func stale(ctx context.Context, t *tour) error {
	t.printf("--- a stale idle connection, pool of 1 ---\n")
	d := &dialer{}
	p, err := pool.New[*Conn](ctx, d, pool.Options[*Conn]{MaxSize: 1, Preparer: readiness{t}})
	if err != nil {
		return err
	}
	defer p.Close()

	t.printf("lease 1 (a fresh connection is always checked):\n")
	l, err := p.Lease(ctx)
	if err != nil {
		return err
	}
	c := l.Value()
	t.printf("  got connection #%d\n", c.id)
	l.Release()

	c.stale.Store(true) // the server drops it while it sits idle in the pool
	t.printf("the server drops connection #%d while it is idle\n", c.id)

	t.printf("lease 2:\n")
	if l, err = p.Lease(ctx); err != nil {
		return err
	}
	t.printf("  got connection #%d, reconnected %d time(s), not replaced\n", l.Value().id, l.Value().reconnects.Load())
	l.Release()
	t.printf("opened: %d\n", d.opened.Load())
	return nil
}

// waitedFor matches the time waited at the end of a lease timeout's message;
// it varies from run to run, so the tour prints it as <wait>.
var waitedFor = regexp.MustCompile(`for [0-9.]+[µnm]?s;`)

// boundedWait: LeaseTimeout bounds the wait for a free item.
func boundedWait(ctx context.Context, t *tour) error {
	t.printf("--- a bounded wait: pool of 2, both leased, LeaseTimeout 50ms ---\n")
	d := &dialer{}
	p, err := pool.New[*Conn](ctx, d, pool.Options[*Conn]{MaxSize: 2, LeaseTimeout: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	defer p.Close()

	a, err := p.Lease(ctx)
	if err != nil {
		return err
	}
	b, err := p.Lease(ctx)
	if err != nil {
		a.Release()
		return err
	}
	defer b.Release()
	idA := a.Value().id
	t.printf("borrowers A and B hold connections #%d and #%d\n", idA, b.Value().id)

	c, err := p.Lease(ctx)
	if err == nil {
		c.Release()
		a.Release()
		return errors.New("a third lease succeeded past MaxSize")
	}
	t.printf("borrower C waits, then gives up:\n  %s\n", waitedFor.ReplaceAllString(err.Error(), "for <wait>;"))
	t.printf("  errors.Is(err, pool.ErrLeaseTimeout): %t\n", errors.Is(err, pool.ErrLeaseTimeout))

	a.Release()
	t.printf("A releases #%d\n", idA)
	if c, err = p.Lease(ctx); err != nil {
		return err
	}
	t.printf("borrower C tries again and gets #%d at once\n", c.Value().id)
	c.Release()
	return nil
}

// doubleRelease: releasing twice, or through a stale handle, does nothing.
func doubleRelease(ctx context.Context, t *tour) error {
	t.printf("--- a double release, pool of 2 ---\n")
	d := &dialer{}
	p, err := pool.New[*Conn](ctx, d, pool.Options[*Conn]{MaxSize: 2})
	if err != nil {
		return err
	}
	defer p.Close()

	l, err := p.Lease(ctx)
	if err != nil {
		return err
	}
	t.printf("leased #%d, released it twice\n", l.Value().id)
	l.Release()
	l.Release() // a no-op: the lease has ended
	s := p.Stats()
	t.printf("  ActiveLeases %d, idle %d\n", s.ActiveLeases, s.ItemsAvailable)

	x, err := p.Lease(ctx)
	if err != nil {
		return err
	}
	defer x.Release()
	l.Release() // the old handle, now that its connection is leased to X: still a no-op
	t.printf("X leases #%d; the old handle is released once more: ActiveLeases still %d\n",
		x.Value().id, p.Stats().ActiveLeases)

	y, err := p.Lease(ctx)
	if err != nil {
		return err
	}
	defer y.Release()
	t.printf("Y leases #%d (the same connection as X: %t)\n", y.Value().id, x.Value() == y.Value())
	return nil
}

// closing: Close refuses new leases and closes the idle connections now,
// the leased one when it comes back.
func closing(ctx context.Context, t *tour) error {
	t.printf("--- Close, pool of 3 ---\n")
	d := &dialer{}
	p, err := pool.New[*Conn](ctx, d, pool.Options[*Conn]{MaxSize: 3})
	if err != nil {
		return err
	}
	var ls []pool.Lease[*Conn]
	for range 3 {
		l, err := p.Lease(ctx)
		if err != nil {
			for _, l := range ls {
				l.Release()
			}
			p.Close()
			return err
		}
		ls = append(ls, l)
	}
	ls[0].Release()
	ls[1].Release()
	s := p.Stats()
	t.printf("opened: %d, idle: %d, leased: %d\n", d.opened.Load(), s.ItemsAvailable, s.ActiveLeases)

	if err := p.Close(); err != nil {
		ls[2].Release()
		return err
	}
	t.printf("after Close: closed %d idle connection(s)\n", d.closed.Load())
	l, err := p.Lease(ctx)
	if err == nil {
		l.Release()
		ls[2].Release()
		return errors.New("a lease succeeded after Close")
	}
	t.printf("Lease after Close: %v\n  errors.Is(err, pool.ErrClosed): %t\n", err, errors.Is(err, pool.ErrClosed))
	ls[2].Release() // closed on the pool's own goroutine: Release does not wait for it
	for p.Stats().Destroying > 0 {
		time.Sleep(time.Millisecond)
	}
	t.printf("the leased one is closed when it comes back: closed %d of %d\n", d.closed.Load(), d.opened.Load())
	return nil
}
