package pool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// conn is the item the tests pool: numbered, and closed by Destroy (it is an
// io.Closer, so the default disposal closes it). Padding keeps items a cache
// line apart, as real connections are.
type conn struct {
	id     int
	closed atomic.Bool
	inUse  atomic.Bool // set by a test while a lease holds it
	_      [64]byte
}

func (c *conn) Close() error {
	if c.closed.Swap(true) {
		panic("conn closed twice")
	}
	return nil
}

// tracker is a Factory that counts what exists, by its own reckoning rather
// than the pool's: live goes up when Create starts and down when Close ends,
// and peak records the most seen at once.
type tracker struct {
	mu      sync.Mutex
	next    int
	fail    error         // when set, Create returns it
	block   chan struct{} // when set, Create waits for it (or ctx)
	created atomic.Int64
	live    atomic.Int64
	peak    atomic.Int64
	ctxs    chan context.Context // when set, Create sends its ctx here
}

var errBoom = errors.New("boom")

func (tr *tracker) Create(ctx context.Context) (*conn, error) {
	n := tr.live.Add(1)
	for {
		p := tr.peak.Load()
		if n <= p || tr.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if tr.ctxs != nil {
		tr.ctxs <- ctx
	}
	tr.mu.Lock()
	fail, block := tr.fail, tr.block
	tr.next++
	id := tr.next
	tr.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			tr.live.Add(-1)
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		tr.live.Add(-1)
		return nil, fail
	}
	tr.created.Add(1)
	return &conn{id: id}, nil
}

// destroy is the Destroy option that keeps live exact.
func (tr *tracker) destroy(c *conn) error {
	err := c.Close()
	tr.live.Add(-1)
	return err
}

func (tr *tracker) setFail(err error) {
	tr.mu.Lock()
	tr.fail = err
	tr.mu.Unlock()
}

// newTracked returns a pool over a fresh tracker whose Destroy it counts.
func newTracked(t testing.TB, opts Options[*conn]) (*Pool[*conn], *tracker) {
	t.Helper()
	tr := &tracker{}
	if opts.Destroy == nil {
		opts.Destroy = tr.destroy
	}
	p, err := New[*conn](context.Background(), tr, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, tr
}

// fakeClock is the pool's clock hook: time passes only when a test says so.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() int64 { return c.ns.Load() }

func (c *fakeClock) advance(d int64) { c.ns.Add(d) }
