package pool

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Destruction: Options.Destroy and the default disposal, and the batches of
// Close and Clear, which destroy every item whatever one Destroy does (the
// package documentation's "Lifecycle of an item": Destroyed).

func TestLifecycleDefaultDestroyClosesCloser(t *testing.T) {
	tr := &tracker{}
	p, err := New[*conn](context.Background(), tr, Options[*conn]{MaxSize: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	l1, l2 := mustLease(t, p), mustLease(t, p)
	discarded, released := l1.Value(), l2.Value()
	l1.Discard()
	assert.True(t, discarded.closed.Load(), "Discard closes an io.Closer item")
	l2.Release()
	assert.False(t, released.closed.Load())
	require.NoError(t, p.Close())
	assert.True(t, released.closed.Load(), "Close closes an idle io.Closer item")
}

func TestLifecycleCustomDestroyReplacesClose(t *testing.T) {
	var mu sync.Mutex
	var destroyed []int
	p, _ := newTracked(t, Options[*conn]{MaxSize: 2, Destroy: func(c *conn) error {
		mu.Lock()
		destroyed = append(destroyed, c.id)
		mu.Unlock()
		return nil
	}})
	l1, l2 := mustLease(t, p), mustLease(t, p)
	items := []*conn{l1.Value(), l2.Value()}
	l1.Discard()
	l2.Release()
	require.NoError(t, p.Close())

	mu.Lock()
	assert.Equal(t, []int{1, 2}, destroyed)
	mu.Unlock()
	for _, c := range items {
		assert.False(t, c.closed.Load(), "a custom Destroy is called instead of Close")
	}
	assert.Equal(t, uint64(2), p.Stats().Destroyed)
}

func TestLifecycleDestroyPanicOnDiscardFreesPermit(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Destroy: func(c *conn) error {
		if c.id == 1 {
			panic("lc: Destroy panic")
		}
		return c.Close()
	}})
	l := mustLease(t, p)

	v, _ := catchPanic(l.Discard)
	assert.Equal(t, "lc: Destroy panic", v)
	s := p.Stats()
	assert.Zero(t, s.ActiveLeases)
	assert.Equal(t, uint64(1), s.Destroyed)
	l2, err := p.TryLease(context.Background())
	require.NoError(t, err, "the permit is usable again")
	l2.Release()
	assertAtRest(t, p)
}

func TestLifecycleCloseJoinsDestroyErrors(t *testing.T) {
	errs := map[int]error{1: errors.New("lc: destroy 1"), 2: errors.New("lc: destroy 2")}
	p, _ := newTracked(t, Options[*conn]{MaxSize: 3, Destroy: func(c *conn) error {
		_ = c.Close()
		return errs[c.id]
	}})
	ls := []Lease[*conn]{mustLease(t, p), mustLease(t, p), mustLease(t, p)}
	for _, l := range ls {
		l.Release()
	}

	err := p.Close()
	require.Error(t, err)
	assert.ErrorIs(t, err, errs[1])
	assert.ErrorIs(t, err, errs[2])
	s := p.Stats()
	assert.Equal(t, uint64(3), s.Destroyed, "every idle item is destroyed, failing or not")
	assert.Zero(t, s.ActiveLeases)
	assert.Zero(t, s.ItemsAvailable)
	assertAtRest(t, p)
}

func TestLifecycleCloseDestroyPanicStillDestroysTheRest(t *testing.T) {
	var mu sync.Mutex
	var destroyed []int
	p, _ := newTracked(t, Options[*conn]{MaxSize: 3, Destroy: func(c *conn) error {
		mu.Lock()
		destroyed = append(destroyed, c.id)
		mu.Unlock()
		if c.id == 2 {
			panic("lc: Destroy panic")
		}
		return c.Close()
	}})
	ls := []Lease[*conn]{mustLease(t, p), mustLease(t, p), mustLease(t, p)}
	items := make([]*conn, len(ls))
	for i, l := range ls {
		items[i] = l.Value()
		l.Release()
	}

	v, _ := catchPanic(func() { _ = p.Close() })
	assert.Equal(t, "lc: Destroy panic", panicValue(v), "the panic reaches Close's caller")
	mu.Lock()
	assert.ElementsMatch(t, []int{1, 2, 3}, destroyed, "every idle item is destroyed")
	mu.Unlock()
	assert.True(t, items[0].closed.Load())
	assert.True(t, items[2].closed.Load())
	s := p.Stats()
	assert.Zero(t, s.ActiveLeases, "every permit is freed")
	assert.Zero(t, s.ItemsAvailable)
	assert.Equal(t, uint64(3), s.Destroyed)
	assertAtRest(t, p)
}

// goexitOnce returns a Destroy that calls runtime.Goexit the first time
// (as t.FailNow in a test's Destroy does) and destroys through tr.
func goexitOnce(tr *tracker) func(*conn) error {
	var done atomic.Bool
	return func(c *conn) error {
		err := tr.destroy(c)
		if done.CompareAndSwap(false, true) {
			runtime.Goexit()
		}
		return err
	}
}

func TestGoexitInDestroyFinishesTheBatch(t *testing.T) {
	t.Run("Close", func(t *testing.T) {
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 4, MaxSize: 4})
		require.NoError(t, err)
		p.opts.Destroy = goexitOnce(tr)

		onOwnGoroutine(t, func() { _ = p.Close() })
		assert.Zero(t, tr.live.Load(), "every idle item was destroyed")
		assert.NoError(t, p.Shutdown(context.Background()), "Shutdown finds the pool drained")
		lkSettle()
		assert.Zero(t, p.Stats().Leaked, "no destroyed item is taken for a leak")
		assert.EqualValues(t, 4, p.Stats().Destroyed)
	})
	t.Run("Clear", func(t *testing.T) {
		tr := &tracker{}
		p, err := New[*conn](context.Background(), tr, Options[*conn]{MinSize: 3, MaxSize: 3})
		require.NoError(t, err)
		defer p.Close()
		p.opts.Destroy = goexitOnce(tr)

		onOwnGoroutine(t, p.Clear)
		awaitBackground(t, p) // the refill to MinSize, which Clear starts even so
		s := p.Stats()
		assert.Zero(t, s.ActiveLeases, "every item slot came back: %+v", s)
		assert.EqualValues(t, 3, s.Destroyed)
		assert.EqualValues(t, 3-s.ItemsAllocated, 3-tr.live.Load())
		for range 3 { // all MaxSize items can be leased again
			l, err := p.TryLease(context.Background())
			require.NoError(t, err)
			defer l.Release()
		}
	})
}
