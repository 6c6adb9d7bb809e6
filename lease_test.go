package pool

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Lease handles: a lease ends once, through any copy and never through a
// stale handle; Value and Detach panic on an ended lease; Detach takes the
// item out of the pool (the package documentation's "Leases and their
// rules"). Leak detection is in leaks_test.go.

func TestLifecycleValueAndDetachPanicOnEndedLease(t *testing.T) {
	states := []struct {
		name   string
		end    func(Lease[*conn])
		phrase string // what the message must say about the mistake
	}{
		{"zero lease", nil, "zero Lease"},
		{"released", Lease[*conn].Release, "ended"},
		{"discarded", Lease[*conn].Discard, "ended"},
		{"detached", func(l Lease[*conn]) { l.Detach() }, "ended"},
	}
	methods := []struct {
		name string
		call func(Lease[*conn])
	}{
		{"Value", func(l Lease[*conn]) { l.Value() }},
		{"Detach", func(l Lease[*conn]) { l.Detach() }},
	}
	for _, st := range states {
		for _, m := range methods {
			t.Run(m.name+" on "+st.name, func(t *testing.T) {
				p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
				var l Lease[*conn]
				if st.end != nil {
					l = mustLease(t, p)
					st.end(l)
				}
				awaitDestroys(t, p) // a discarded item's Destroy runs on the pool's goroutine
				before := p.Stats()

				v, _ := catchPanic(func() { m.call(l) })
				require.NotNil(t, v, "%s panics", m.name)
				msg := fmt.Sprint(v)
				assert.Contains(t, msg, "Lease."+m.name)
				assert.Contains(t, msg, st.phrase)
				after := p.Stats()
				assert.Equal(t, before, after, "the panic leaves the pool as it was")
			})
		}
	}
}

func TestLifecycleReleaseAndDiscardOnZeroLeaseDoNothing(t *testing.T) {
	var l Lease[*conn]
	assert.NotPanics(t, l.Release)
	assert.NotPanics(t, l.Discard)
}

func TestLifecycleEndingAnEndedLeaseDoesNothing(t *testing.T) {
	detach := func(l Lease[*conn]) { l.Detach() }
	tests := []struct {
		name          string
		first, second func(Lease[*conn])
		wantIdle      int
		wantDestroyed uint64
		wantDetached  uint64
	}{
		{"Release twice", Lease[*conn].Release, Lease[*conn].Release, 1, 0, 0},
		{"Discard after Release", Lease[*conn].Release, Lease[*conn].Discard, 1, 0, 0},
		{"Release after Discard", Lease[*conn].Discard, Lease[*conn].Release, 0, 1, 0},
		{"Discard twice", Lease[*conn].Discard, Lease[*conn].Discard, 0, 1, 0},
		{"Release after Detach", detach, Lease[*conn].Release, 0, 0, 1},
		{"Discard after Detach", detach, Lease[*conn].Discard, 0, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name+", through a copy", func(t *testing.T) {
			p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
			l := mustLease(t, p)
			item := l.Value()
			cp := l
			tt.first(l)
			require.NotPanics(t, func() { tt.second(cp) })
			require.NotPanics(t, func() { tt.second(l) })
			awaitDestroys(t, p)

			s := p.Stats()
			assert.Zero(t, s.ActiveLeases, "the permit was returned once")
			assert.Equal(t, tt.wantIdle, s.ItemsAvailable)
			assert.Equal(t, tt.wantDestroyed, s.Destroyed)
			assert.Equal(t, tt.wantDetached, s.Detached)
			assert.Equal(t, tt.wantDestroyed == 1, item.closed.Load())
			assertAtRest(t, p)
		})
	}
}

func TestLifecycleStaleLeaseCannotEndCurrentLease(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1})
	l1 := mustLease(t, p)
	first := l1.Value()
	stale := l1
	l1.Release()
	current := mustLease(t, p)
	item := current.Value()
	require.Same(t, first, item, "the same item is leased again")

	stale.Release()
	stale.Discard()
	assert.Panics(t, func() { stale.Value() })
	assert.Panics(t, func() { stale.Detach() })

	assert.NotPanics(t, func() { assert.Same(t, item, current.Value()) }, "the current holder keeps its lease")
	s := p.Stats()
	assert.Equal(t, 1, s.ActiveLeases)
	assert.Zero(t, s.ItemsAvailable)
	assert.Zero(t, s.Destroyed)
	assert.Zero(t, s.Detached)
	assert.False(t, item.closed.Load())

	current.Release()
	assert.Equal(t, 1, p.Stats().ItemsAvailable)
	assertAtRest(t, p)
}

// TestCopiesRacingToEndALeaseEndItOnce has many goroutines end copies of one
// lease at once, with Release, Discard and Detach, round after round:
// exactly one call must take effect each time.
func TestCopiesRacingToEndALeaseEndItOnce(t *testing.T) {
	const copies = 16
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	rounds := 500
	if testing.Short() {
		rounds = 50
	}
	for range rounds {
		l := mustLease(t, p)
		var detached atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range copies {
			c := l // a copy per goroutine
			wg.Go(func() {
				<-start
				switch i % 3 {
				case 0:
					c.Release()
				case 1:
					c.Discard()
				case 2:
					// Detach panics when another copy won; that is its
					// contract for an ended lease.
					_, _ = catchPanic(func() {
						v := c.Detach()
						detached.Add(1)
						assert.NoError(t, tr.destroy(v))
					})
				}
			})
		}
		close(start)
		wg.Wait()
		awaitDestroys(t, p)
		require.LessOrEqual(t, detached.Load(), int64(1))
		s := p.Stats()
		require.Equal(t, 0, s.ActiveLeases, "the lease ended and freed its permit once")
		require.Equal(t, s.Created, s.Destroyed+s.Detached+uint64(s.ItemsAllocated))
		require.EqualValues(t, s.ItemsAllocated, tr.live.Load(),
			"the item was destroyed at most once and kept only if released")
	}
}

func TestLifecycleDetachTakesItemOutOfPool(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
	l := mustLease(t, p)
	want := l.Value()

	got := l.Detach()
	assert.Same(t, want, got)
	s := p.Stats()
	assert.Equal(t, uint64(1), s.Detached)
	assert.Zero(t, s.Destroyed)
	assert.Zero(t, s.ActiveLeases, "the permit is freed")
	assert.Zero(t, s.ItemsAllocated)
	assertAtRest(t, p)

	l2, err := p.TryLease(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, l2.Value().id)
	l2.Release()

	require.NoError(t, p.Close())
	assert.False(t, got.closed.Load(), "the pool never destroys a detached item")
	assert.Equal(t, int64(1), tr.live.Load(), "only the detached item is still alive")
	s = p.Stats()
	assert.Equal(t, uint64(1), s.Destroyed)
	assertAtRest(t, p)
}

// CreatedAt, Uses and IdleFor describe the item (doc.go, "Leases and their
// rules"); they panic on an ended lease, as Value does.
func TestLeaseMetadata(t *testing.T) {
	t.Run("with the clock read on release", func(t *testing.T) {
		p, _ := newTracked(t, Options[*conn]{IdleTimeout: time.Hour})
		clk := setFakeClock(p)
		l := mustLease(t, p)
		assert.Equal(t, 1, l.Uses())
		assert.Zero(t, l.IdleFor(), "a new item")
		created := l.CreatedAt()
		assert.WithinDuration(t, time.Now(), created, time.Minute)
		l.Release()
		clk.advance(int64(5 * time.Second))
		l = mustLease(t, p)
		assert.Equal(t, 2, l.Uses())
		assert.Equal(t, 5*time.Second, l.IdleFor())
		assert.Equal(t, created, l.CreatedAt())
		l.Release()
		for _, f := range []func(){func() { l.Uses() }, func() { l.IdleFor() }, func() { l.CreatedAt() }} {
			_, panicked := catchPanic(f)
			assert.True(t, panicked, "on an ended lease")
		}
	})
	t.Run("without", func(t *testing.T) {
		p, _ := newTracked(t, Options[*conn]{})
		for i := range 3 {
			l := mustLease(t, p)
			assert.Equal(t, i+1, l.Uses())
			assert.Zero(t, l.IdleFor(), "IdleFor is 0 when the pool does not read the clock")
			l.Release()
		}
	})
}
