package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// prepCheck is a CheckFunc's function that records the ids of the items
// it checks and fails the next check when failNext is set, or every check
// when failAll is.
type prepCheck struct {
	mu       sync.Mutex
	seen     []int
	failNext bool
	failAll  bool
	failed   []int
}

var errPrepDead = errors.New("prep: connection dead")

func (pc *prepCheck) check(_ context.Context, c *conn) error {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.seen = append(pc.seen, c.id)
	if pc.failAll || pc.failNext {
		pc.failNext = false
		pc.failed = append(pc.failed, c.id)
		return errPrepDead
	}
	return nil
}

func (pc *prepCheck) set(f func(*prepCheck)) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	f(pc)
}

func TestCheckFuncIsReadyReportsTheCheck(t *testing.T) {
	cases := []struct {
		name      string
		f         CheckFunc[*conn]
		wantReady bool
		wantErr   error
	}{
		{"check passes", func(context.Context, *conn) error { return nil }, true, nil},
		{"check fails", func(context.Context, *conn) error { return errPrepDead }, false, errPrepDead},
		{"nil CheckFunc accepts", nil, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p Preparer[*conn] = tc.f
			ready, err := p.IsReady(context.Background(), &conn{})
			assert.Equal(t, tc.wantReady, ready)
			assert.Equal(t, tc.wantErr, err)
			// Never false without an error: the pool never calls Prepare.
			assert.True(t, ready || err != nil, "IsReady reported not ready without an error")
			// Prepare reports what the check does, never a restored item
			// that fails it.
			assert.Equal(t, tc.wantErr, p.Prepare(context.Background(), &conn{}))
		})
	}
}

func TestCheckFuncDestroysIdleItemThatFailsAndLeasesAnother(t *testing.T) {
	pc := &prepCheck{}
	p, tr := newTracked(t, Options[*conn]{MaxSize: 3, Preparer: CheckFunc[*conn](pc.check)})
	l1, l2 := mustLease(t, p), mustLease(t, p)
	c1, c2 := l1.Value(), l2.Value()
	l1.Release()
	l2.Release()
	require.Equal(t, []int{c1.id, c2.id}, pc.seen, "fresh items are checked")

	pc.set(func(pc *prepCheck) { pc.failNext = true }) // whichever idle item is checked first is dead
	l := mustLease(t, p)
	defer l.Release()

	require.Len(t, pc.failed, 1)
	dead := pc.failed[0]
	byID := map[int]*conn{c1.id: c1, c2.id: c2}
	require.Contains(t, byID, dead)
	other := c1
	if dead == c1.id {
		other = c2
	}
	assert.Same(t, other, l.Value(), "the lease did not get the other idle item")
	assert.True(t, byID[dead].closed.Load(), "the item that failed its check was not destroyed")
	assert.False(t, other.closed.Load())
	assert.Equal(t, int64(2), tr.created.Load(), "a fresh item was created while a good one sat idle")
	assert.Equal(t, int64(1), tr.live.Load())
	s := p.Stats()
	assert.Equal(t, uint64(1), s.PrepareFailed)
	assert.Equal(t, uint64(1), s.Destroyed)
	assert.Equal(t, 1, s.ActiveLeases)
}

func TestCheckFuncReplacesFailedIdleItemWithFreshOne(t *testing.T) {
	pc := &prepCheck{}
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: CheckFunc[*conn](pc.check)})
	l := mustLease(t, p)
	c1 := l.Value()
	l.Release()

	pc.set(func(pc *prepCheck) { pc.failNext = true })
	l = mustLease(t, p)
	defer l.Release()
	assert.NotSame(t, c1, l.Value())
	assert.True(t, c1.closed.Load(), "the item that failed its check was not destroyed")
	assert.Equal(t, []int{c1.id, c1.id, l.Value().id}, pc.seen, "the fresh replacement was not checked")
	assert.Equal(t, int64(1), tr.live.Load(), "more than MaxSize items exist")
	assert.Equal(t, uint64(1), p.Stats().PrepareFailed)
}

func TestCheckFuncFailingFreshItemReturnsErrorWrapped(t *testing.T) {
	pc := &prepCheck{failAll: true}
	p, tr := newTracked(t, Options[*conn]{Name: "mail", MaxSize: 1, Preparer: CheckFunc[*conn](pc.check)})
	_, err := p.Lease(context.Background())
	require.Error(t, err)
	assert.ErrorIs(t, err, errPrepDead)
	assert.EqualError(t, err, `pool "mail": prepare item: prep: connection dead`)
	assert.Zero(t, tr.live.Load(), "the fresh item that failed its check was not destroyed")
	s := p.Stats()
	assert.Equal(t, uint64(1), s.PrepareFailed)
	assert.Zero(t, s.ActiveLeases, "the failed lease kept its permit")

	// The permit came back: the next lease gets a fresh item once the
	// check passes.
	pc.set(func(pc *prepCheck) { pc.failAll = false })
	l, err := p.TryLease(context.Background())
	require.NoError(t, err)
	l.Release()
}

func TestCheckFuncChecksIdleItemsOnlyAfterCheckAfterIdle(t *testing.T) {
	pc := &prepCheck{}
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: CheckFunc[*conn](pc.check), CheckAfterIdle: time.Minute})
	clk := lcClock(p)
	mustLease(t, p).Release() // fresh: checked
	mustLease(t, p).Release() // idle for no time: not checked
	require.Equal(t, 1, len(pc.seen))

	clk.advance(int64(time.Minute))
	pc.set(func(pc *prepCheck) { pc.failNext = true })
	l := mustLease(t, p) // idle a minute: checked, fails, replaced by a fresh one
	defer l.Release()
	assert.Equal(t, 3, len(pc.seen))
	assert.Equal(t, uint64(1), p.Stats().PrepareFailed)
}

func TestNilCheckFuncAsPreparerAcceptsEveryItem(t *testing.T) {
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: CheckFunc[*conn](nil)})
	l := mustLease(t, p)
	l.Release()
	l = mustLease(t, p)
	l.Release()
	assert.Zero(t, p.Stats().PrepareFailed)
}
