package pool

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Preparation: a Preparer's checks on lease, CheckAfterIdle,
// PreparationTimeout, and CheckFunc (the package documentation's
// "Lifecycle of an item": Leased).

func TestLifecyclePreparerAlwaysChecksFreshItem(t *testing.T) {
	for _, cai := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("CheckAfterIdle=%v", cai), func(t *testing.T) {
			lp := &testPreparer{}
			p, _ := newTracked(t, Options[*conn]{MaxSize: 2, Preparer: lp, CheckAfterIdle: cai})
			setFakeClock(p)

			l1 := mustLease(t, p)
			l2 := mustLease(t, p)
			checks, _ := lp.seen()
			assert.Equal(t, []int{1, 2}, checks, "each fresh item is checked once")
			l1.Release()
			l2.Release()
		})
	}
}

func TestLifecyclePreparerCheckAfterIdle(t *testing.T) {
	const cai = time.Minute
	tests := []struct {
		name              string
		checkAfterIdle    time.Duration
		heldFor, idleFor  time.Duration // leased before the release; idle before the second lease
		wantSecondChecked bool
	}{
		{"zero checks every lease", 0, 0, 0, true},
		{"not idle is not checked", cai, 0, 0, false},
		{"idle just short is not checked", cai, 0, cai - 1, false},
		{"idle exactly that long is checked", cai, 0, cai, true},
		{"idle longer is checked", cai, 0, 5 * cai, true},
		{"time spent leased does not count as idle", cai, 5 * cai, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lp := &testPreparer{}
			p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp, CheckAfterIdle: tt.checkAfterIdle})
			clk := setFakeClock(p)

			l := mustLease(t, p)
			clk.advance(int64(tt.heldFor))
			l.Release()
			clk.advance(int64(tt.idleFor))
			l = mustLease(t, p)
			defer l.Release()

			assert.Equal(t, 1, l.Value().id, "the idle item is reused")
			want := []int{1} // the fresh item's check
			if tt.wantSecondChecked {
				want = append(want, 1)
			}
			checks, _ := lp.seen()
			assert.Equal(t, want, checks)
		})
	}
}

func TestLifecyclePreparerNotReadyIsPrepared(t *testing.T) {
	lp := &testPreparer{}
	lp.set(func(context.Context, *conn) (bool, error) { return false, nil }, nil)
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp})

	l, err := p.Lease(context.Background())
	require.NoError(t, err)
	defer l.Release()

	assert.Equal(t, 1, l.Value().id)
	checks, prepares := lp.seen()
	assert.Equal(t, []int{1}, checks)
	assert.Equal(t, []int{1}, prepares, "Prepare runs on the item IsReady found not ready")
	assert.Zero(t, p.Stats().PrepareFailed)
}

func TestLifecyclePreparerIdleItemFailingIsReplaced(t *testing.T) {
	errPrep := errors.New("lc: not ready")
	// The first item the Preparer looks at fails. Which idle item a lease
	// meets first depends on the slot it was parked in, so the test
	// remembers which one failed.
	type failFirst struct{ failed atomic.Int64 }
	fails := func(f *failFirst, c *conn) bool { return f.failed.CompareAndSwap(0, int64(c.id)) }
	failOne := map[string]func(*failFirst) (func(context.Context, *conn) (bool, error), func(context.Context, *conn) error){
		"IsReady error": func(f *failFirst) (func(context.Context, *conn) (bool, error), func(context.Context, *conn) error) {
			return func(_ context.Context, c *conn) (bool, error) {
				if fails(f, c) {
					return false, errPrep
				}
				return true, nil
			}, nil
		},
		"Prepare error": func(f *failFirst) (func(context.Context, *conn) (bool, error), func(context.Context, *conn) error) {
			return func(context.Context, *conn) (bool, error) { return false, nil },
				func(_ context.Context, c *conn) error {
					if fails(f, c) {
						return errPrep
					}
					return nil
				}
		},
	}
	tests := []struct {
		idle        int   // idle items before the failing lease
		wantCreated int64 // factory calls in all
		then        string
	}{
		{idle: 1, wantCreated: 2, then: "a fresh one"},
		{idle: 2, wantCreated: 2, then: "the next idle one"},
	}
	for mode, hooks := range failOne {
		for _, tt := range tests {
			t.Run(mode+" then "+tt.then, func(t *testing.T) {
				lp := &testPreparer{}
				p, tr := newTracked(t, Options[*conn]{MaxSize: 2, Preparer: lp})
				var ls []Lease[*conn]
				items := map[int]*conn{}
				for range tt.idle {
					l := mustLease(t, p)
					ls = append(ls, l)
					items[l.Value().id] = l.Value()
				}
				for _, l := range ls {
					l.Release()
				}
				var f failFirst
				lp.set(hooks(&f))

				l, err := p.Lease(context.Background())
				require.NoError(t, err, "a failing idle item is no error for the lease")
				failed := int(f.failed.Load())
				require.Contains(t, items, failed, "an idle item was checked first")
				assert.NotEqual(t, failed, l.Value().id, "the failing item is not leased")
				awaitDestroys(t, p)
				assert.Equal(t, tt.wantCreated, tr.created.Load())
				assert.True(t, items[failed].closed.Load(), "the failing item is destroyed")
				s := p.Stats()
				assert.Equal(t, uint64(1), s.PrepareFailed)
				assert.Equal(t, uint64(1), s.Destroyed)
				l.Release()
				assertAtRest(t, p)
			})
		}
	}
}

func TestLifecyclePreparerFreshItemFailingReturnsError(t *testing.T) {
	errPrep := errors.New("lc: cannot prepare")
	tests := []struct {
		name    string
		isReady func(context.Context, *conn) (bool, error)
		prepare func(context.Context, *conn) error
	}{
		{
			name:    "IsReady error",
			isReady: func(context.Context, *conn) (bool, error) { return false, errPrep },
		},
		{
			name:    "Prepare error",
			isReady: func(context.Context, *conn) (bool, error) { return false, nil },
			prepare: func(context.Context, *conn) error { return errPrep },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lp := &testPreparer{}
			lp.set(tt.isReady, tt.prepare)
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp})

			_, err := p.Lease(context.Background())
			require.Error(t, err)
			assert.ErrorIs(t, err, errPrep)
			awaitDestroys(t, p)
			assert.NotEqual(t, errPrep, err, "the error is wrapped")
			s := p.Stats()
			assert.Zero(t, s.ActiveLeases, "the permit is returned")
			assert.Zero(t, s.ItemsAvailable)
			assert.Equal(t, uint64(1), s.PrepareFailed)
			assert.Equal(t, uint64(1), s.Destroyed)
			assert.Zero(t, s.Canceled)
			assert.Zero(t, tr.live.Load(), "the item is destroyed")

			lp.set(nil, nil)
			l, err := p.TryLease(context.Background())
			require.NoError(t, err, "the permit is usable again")
			assert.Equal(t, 2, l.Value().id)
			l.Release()
			assertAtRest(t, p)
		})
	}
}

func TestLifecyclePreparerPanicReachesCaller(t *testing.T) {
	for _, idle := range []bool{false, true} {
		name := "fresh item"
		if idle {
			name = "idle item"
		}
		t.Run(name, func(t *testing.T) {
			lp := &testPreparer{}
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp})
			if idle {
				mustLease(t, p).Release()
			}
			lp.set(func(context.Context, *conn) (bool, error) { panic("lc: IsReady panic") }, nil)

			v, _ := catchPanic(func() { _, _ = p.Lease(context.Background()) })
			awaitDestroys(t, p)
			assert.Equal(t, "lc: IsReady panic", v)
			s := p.Stats()
			assert.Zero(t, s.ActiveLeases, "the permit is returned")
			assert.Zero(t, s.ItemsAvailable)
			assert.Zero(t, tr.live.Load(), "the item is destroyed")

			lp.set(nil, nil)
			l, err := p.TryLease(context.Background())
			require.NoError(t, err)
			l.Release()
			assertAtRest(t, p)
		})
	}
}

func TestLifecycleAbandonedItemIsPreparedWhenLeased(t *testing.T) {
	lp := &testPreparer{}
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp, CheckAfterIdle: time.Hour})
	setFakeClock(p)
	block := make(chan struct{})
	setBlock(tr, block)
	tr.ctxs = make(chan context.Context, 1)

	ctx, cancel := context.WithCancel(context.Background())
	ch := leaseAsync(ctx, p)
	recvOrFail(t, tr.ctxs, "Create")
	cancel()
	require.ErrorIs(t, awaitLease(t, ch).err, context.Canceled)
	close(block)
	require.Eventually(t, func() bool { return p.Stats().ItemsAvailable == 1 }, testWait, time.Millisecond)
	checks, _ := lp.seen()
	assert.Empty(t, checks, "an abandoned item is not prepared until a lease takes it")

	l := mustLease(t, p)
	defer l.Release()
	assert.Equal(t, 1, l.Value().id)
	checks, _ = lp.seen()
	assert.Equal(t, []int{1}, checks, "its first lease checks it, CheckAfterIdle notwithstanding")
}

func TestLifecyclePreparationTimeoutFreshItem(t *testing.T) {
	lp := &testPreparer{}
	lp.set(func(ctx context.Context, _ *conn) (bool, error) {
		<-ctx.Done()
		return false, ctx.Err()
	}, nil)
	p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp, PreparationTimeout: 20 * time.Millisecond})

	_, err := p.Lease(context.Background())
	require.Error(t, err)
	awaitDestroys(t, p)
	assert.ErrorIs(t, err, ErrPreparationTimeout)
	s := p.Stats()
	assert.Zero(t, s.ActiveLeases)
	assert.Equal(t, uint64(1), s.PrepareFailed)
	assert.Zero(t, s.Canceled, "a preparation timeout is not the caller's cancellation")
	assert.Zero(t, tr.live.Load(), "the item is destroyed")
	assertAtRest(t, p)
}

// slowReady reports every item ready, after sleeping past any short
// PreparationTimeout and ignoring its ctx.
type slowReady struct{ d time.Duration }

func (r slowReady) IsReady(context.Context, *conn) (bool, error) {
	time.Sleep(r.d)
	return true, nil
}

func (slowReady) Prepare(context.Context, *conn) error { return nil }

func TestElapsedPreparationTimeoutFailsLateSuccess(t *testing.T) {
	p, tr := newTracked(t, Options[*conn]{PreparationTimeout: 5 * time.Millisecond, Preparer: slowReady{30 * time.Millisecond}})
	_, err := p.Lease(context.Background())
	require.ErrorIs(t, err, ErrPreparationTimeout, "a success reported after the timeout is still a timeout")
	awaitDestroys(t, p)
	s := p.Stats()
	assert.EqualValues(t, 1, s.PrepareFailed)
	assert.Zero(t, s.ActiveLeases)
	assert.Zero(t, tr.live.Load(), "the fresh item was destroyed")
}

func TestLifecyclePreparationCanceledByCaller(t *testing.T) {
	for _, idle := range []bool{false, true} {
		name := "fresh item"
		if idle {
			name = "idle item"
		}
		t.Run(name, func(t *testing.T) {
			entered := make(chan int, 1)
			lp := &testPreparer{}
			p, tr := newTracked(t, Options[*conn]{MaxSize: 1, Preparer: lp, PreparationTimeout: time.Hour})
			if idle {
				mustLease(t, p).Release()
			}
			lp.set(func(ctx context.Context, c *conn) (bool, error) {
				entered <- c.id
				<-ctx.Done()
				return false, ctx.Err()
			}, nil)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := leaseAsync(ctx, p)
			assert.Equal(t, 1, recvOrFail(t, entered, "IsReady"))
			cancel()
			o := awaitLease(t, ch)

			require.Error(t, o.err)
			assert.ErrorIs(t, o.err, context.Canceled)
			assert.NotErrorIs(t, o.err, ErrPreparationTimeout)
			awaitDestroys(t, p)
			s := p.Stats()
			assert.Equal(t, uint64(1), s.Canceled)
			assert.Zero(t, s.ActiveLeases)
			assert.Zero(t, s.ItemsAvailable)
			assert.Equal(t, uint64(1), s.Destroyed)
			assert.Equal(t, int64(1), tr.created.Load(), "a caller that gave up gets no further item made")
			assertAtRest(t, p)
		})
	}
}

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

var errPrepDead = errors.New("prep: connection dead")

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
	awaitDestroys(t, p)
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
	awaitDestroys(t, p)
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
	clk := setFakeClock(p)
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

// TestRequeuedLeaseKeepsItsPlace: a waiting lease served an item that
// fails its check was first in line: it queues again at the head, ahead of
// a lease that queued after it, and MaxQueuedLeases does not refuse it
// (doc.go, "Waiting and errors").
func TestRequeuedLeaseKeepsItsPlace(t *testing.T) {
	var checks atomic.Int32
	checking, fail := make(chan struct{}), make(chan struct{})
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, MaxQueuedLeases: 1,
		Preparer: CheckFunc[*conn](func(context.Context, *conn) error {
			if checks.Add(1) == 2 { // the idle item, handed to the first waiter
				close(checking)
				<-fail
				return errBoom
			}
			return nil
		})})
	held := mustLease(t, p)
	first := leaseAsync(context.Background(), p)
	waitQueued(t, p, 1)
	held.Release() // handed to first, whose check waits
	<-checking
	second := leaseAsync(context.Background(), p)
	waitQueued(t, p, 1)
	close(fail) // first's item fails its check: it queues again
	o := awaitLease(t, first)
	require.NoError(t, o.err, "the first lease, never refused by the cap it passed")
	select {
	case o2 := <-second:
		t.Fatalf("the second lease was served first (err %v)", o2.err)
	default:
	}
	o.l.Release()
	o2 := awaitLease(t, second)
	require.NoError(t, o2.err)
	o2.l.Release()
}

// TestLeaseTimeoutBoundsEveryWaitOfALease: a lease that waits, is served an
// item that fails its check and waits again, times out LeaseTimeout after
// its first wait began, not after the second, and ErrLeaseTimeout says how
// long it waited in all (Options.LeaseTimeout).
func TestLeaseTimeoutBoundsEveryWaitOfALease(t *testing.T) {
	const timeout = 300 * time.Millisecond
	var checks atomic.Int32
	d := newBlockingDestroy() // the failed item keeps its room
	defer close(d.release)
	p, _ := newTracked(t, Options[*conn]{MaxSize: 1, LeaseTimeout: timeout, Destroy: d.destroy,
		Preparer: CheckFunc[*conn](func(context.Context, *conn) error {
			if checks.Add(1) == 2 {
				time.Sleep(timeout / 2)
				return errBoom
			}
			return nil
		})})
	held := mustLease(t, p)
	start := time.Now()
	got := leaseAsync(context.Background(), p)
	waitQueued(t, p, 1)
	time.Sleep(timeout / 2)
	held.Release()
	o := awaitLease(t, got)
	elapsed := time.Since(start)
	require.ErrorIs(t, o.err, ErrLeaseTimeout)
	assert.Less(t, elapsed, timeout*8/5, "LeaseTimeout %v bounds the lease's waits together", timeout)
	m := regexp.MustCompile(`for ([^;]+);`).FindStringSubmatch(o.err.Error())
	require.Len(t, m, 2, o.err.Error())
	waited, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, waited, timeout, "the message states the whole wait: %v", o.err)
}
