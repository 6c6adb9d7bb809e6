package pool

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// testWait bounds every wait for something a test expects to happen.
const testWait = 10 * time.Second

// leaseOutcome is what a Lease call run on a goroutine returned.
type leaseOutcome struct {
	l   Lease[*conn]
	err error
}

// leaseAsync runs p.Lease(ctx) on a goroutine.
func leaseAsync(ctx context.Context, p *Pool[*conn]) <-chan leaseOutcome {
	ch := make(chan leaseOutcome, 1)
	go func() {
		l, err := p.Lease(ctx)
		ch <- leaseOutcome{l, err}
	}()
	return ch
}

func awaitLease(t *testing.T, ch <-chan leaseOutcome) leaseOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(testWait):
		t.Fatal("Lease did not return")
		return leaseOutcome{}
	}
}

// mustLease leases from p or fails the test.
func mustLease(t *testing.T, p *Pool[*conn]) Lease[*conn] {
	t.Helper()
	l, err := p.Lease(context.Background())
	require.NoError(t, err)
	return l
}

// assertAtRest asserts the accounting identity that holds when nothing is in
// flight: Created == Destroyed + Detached + ItemsAllocated. It waits for
// the Destroy calls under way first, which run on the pool's goroutines.
func assertAtRest(t *testing.T, p *Pool[*conn]) {
	t.Helper()
	awaitDestroys(t, p)
	s := p.Stats()
	assert.Equal(t, s.Created, s.Destroyed+s.Detached+uint64(s.ItemsAllocated),
		"at rest Created == Destroyed + Detached + ItemsAllocated; stats %+v", s)
}

// checkInvariants checks, while load runs, what the package documentation
// promises in every snapshot ("Stats"), and reports each violation with
// t.Errorf (safe from any goroutine). live is the number of items in
// existence by the test factory's own count (from the start of Create to
// the end of Destroy), or nil when the factory keeps none. It reports
// whether everything held. For a pool whose MaxSize never changes; see
// sizeWindow for one that SetMaxSize resizes.
//
//   - The cap on items in existence: live <= MaxSize.
//   - The derived figures stay within the cap: 0 <= ActiveLeases,
//     ItemsAvailable, ItemsAllocated <= MaxSize.
//   - Created - Destroyed - Detached <= MaxSize (Stats reads Created
//     first, so a snapshot can show less than the truth, never more).
//   - No lease waits while a permit is free: QueuedLeases > 0 means every
//     permit is held (ItemsAllocated == Limit, MaxSize but with
//     Options.AdaptiveSize); Stats reads both under
//     the gate's lock.
func checkInvariants[T any](t testing.TB, p *Pool[T], live func() int64) bool {
	return checkStats(t, p.Stats(), live, 0)
}

// checkStats is checkInvariants on the snapshot s, with live read after
// it, for a pool whose items in existence may exceed MaxSize up to ceiling
// while a shrink settles (0: MaxSize never changed). With bound =
// max(s.MaxSize, ceiling), live, ActiveLeases, ItemsAvailable,
// ItemsAllocated and Created - Destroyed - Detached must be at most bound,
// and QueuedLeases > 0 means ItemsAllocated >= Limit (every permit is
// held, and while a shrink settles more items than MaxSize may still be
// out) or creations are under way (with MaxConcurrentCreates, at its cap). With ceiling <= MaxSize these are checkInvariants' checks exactly
// (ItemsAllocated <= MaxSize and >= MaxSize: equal).
func checkStats(t testing.TB, s Stats, live func() int64, ceiling int) bool {
	ok := true
	bound := max(s.MaxSize, ceiling)
	if live != nil {
		if n := live(); n > int64(bound) {
			t.Errorf("%d items exist, more than MaxSize %d (largest MaxSize in force since the items last fit: %d)", n, s.MaxSize, bound)
			ok = false
		}
	}
	if s.ActiveLeases < 0 || s.ItemsAvailable < 0 || s.QueuedLeases < 0 ||
		s.ItemsAllocated != s.ActiveLeases+s.ItemsAvailable || s.ItemsAllocated > bound {
		t.Errorf("derived figures out of bounds (bound %d): %+v", bound, s)
		ok = false
	}
	if n := int64(s.Created) - int64(s.Destroyed) - int64(s.Detached); n > int64(bound) {
		t.Errorf("Created - Destroyed - Detached = %d, more than MaxSize %d (bound %d): %+v", n, s.MaxSize, bound, s)
		ok = false
	}
	if s.QueuedLeases > 0 && s.ItemsAllocated < s.Limit && s.Creating == 0 {
		t.Errorf("%d leases queue while a permit is free: %+v", s.QueuedLeases, s)
		ok = false
	}
	return ok
}

// sizeWindow resizes a pool with SetMaxSize and checks its invariants
// meanwhile (every resize of the pool must go through it).
//
// The invariant: let t0 be an instant when the items the pool accounts for
// (held + idle: ItemsAllocated, which Stats reads exactly, under the
// gate's lock) fit MaxSize. After t0 they never exceed the largest MaxSize
// in force at any instant since t0: they grow only by a permit taken while
// they are fewer than MaxSize, and while a shrink settles (more of them
// than MaxSize) they never grow. The items in existence by the factory's
// count are among them (each holds a permit, or is idle, from the start of
// its creation to the end of its destruction), and so are Created -
// Destroyed - Detached. So ceiling is the largest MaxSize in force since a
// check last saw the items fit: a check lowers it to MaxSize when they do,
// and a resize raises it to the new size before it takes effect. Checks and
// resizes hold mu, so no resize happens between a check's Stats read and
// its read of live, and no check lowers ceiling between them either.
type sizeWindow[T any] struct {
	p        *Pool[T]
	mu       sync.Mutex
	ceiling  int
	settling int // checks that found more items than MaxSize: a shrink settling
}

func newSizeWindow[T any](p *Pool[T]) *sizeWindow[T] {
	return &sizeWindow[T]{p: p, ceiling: p.Stats().MaxSize}
}

// settlingChecks returns how many checks found a shrink settling.
func (w *sizeWindow[T]) settlingChecks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.settling
}

// setMaxSize calls SetMaxSize(n).
func (w *sizeWindow[T]) setMaxSize(n int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ceiling = max(w.ceiling, n)
	return w.p.SetMaxSize(n)
}

// check is checkInvariants for the resized pool.
func (w *sizeWindow[T]) check(t testing.TB, live func() int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.p.Stats()
	ok := checkStats(t, s, live, w.ceiling)
	if s.ItemsAllocated <= s.MaxSize {
		w.ceiling = s.MaxSize
	} else {
		w.settling++
	}
	return ok
}

// panicValue is what user code panicked with, given what a call into the
// pool panicked with: the pool raises a panic of user code again, with its
// stack, as a *panicError when it crossed goroutines or a batch.
func panicValue(v any) any {
	if pe, ok := v.(*panicError); ok {
		return pe.value
	}
	return v
}

// catchPanic calls f and returns what it panicked with; panicked reports
// whether it panicked at all. This is the one panic catcher of the tests:
// wrap v in panicValue to see through a panic the pool raised again.
func catchPanic(f func()) (v any, panicked bool) {
	panicked = true
	defer func() {
		if panicked {
			v = recover()
		}
	}()
	f()
	panicked = false
	return nil, false
}

var bg = context.Background()

// waitQueued blocks until n leases are queued on p.
func waitQueued[T any](t testing.TB, p *Pool[T], n int) {
	t.Helper()
	require.Eventually(t, func() bool { return p.Stats().QueuedLeases == n },
		testWait, time.Millisecond, "want %d queued leases", n)
}

// recvOrFail receives one value from ch, or fails the test after testWait.
func recvOrFail[V any](t *testing.T, ch <-chan V, what string) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testWait):
		t.Fatalf("timed out waiting for %s", what)
		var zero V
		return zero
	}
}

// setFakeClock installs a fake clock; call it right after New.
func setFakeClock(p *Pool[*conn]) *fakeClock {
	clk := &fakeClock{}
	p.clk.fake = clk.now
	return clk
}

// setBlock sets the tracker's block channel under its lock.
func setBlock(tr *tracker, ch chan struct{}) {
	tr.mu.Lock()
	tr.block = ch
	tr.mu.Unlock()
}

func minutes(n int64) int64 { return n * int64(time.Minute) }

// testPreparer is a Preparer whose behaviour a test sets, recording the ids of
// the items each method saw. nil hooks: IsReady reports ready, Prepare
// succeeds.
type testPreparer struct {
	mu       sync.Mutex
	isReady  func(ctx context.Context, c *conn) (bool, error)
	prepare  func(ctx context.Context, c *conn) error
	checks   []int // ids passed to IsReady, in order
	prepares []int // ids passed to Prepare, in order
}

func (lp *testPreparer) IsReady(ctx context.Context, c *conn) (bool, error) {
	lp.mu.Lock()
	lp.checks = append(lp.checks, c.id)
	f := lp.isReady
	lp.mu.Unlock()
	if f == nil {
		return true, nil
	}
	return f(ctx, c)
}

func (lp *testPreparer) Prepare(ctx context.Context, c *conn) error {
	lp.mu.Lock()
	lp.prepares = append(lp.prepares, c.id)
	f := lp.prepare
	lp.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(ctx, c)
}

func (lp *testPreparer) set(isReady func(context.Context, *conn) (bool, error), prepare func(context.Context, *conn) error) {
	lp.mu.Lock()
	lp.isReady, lp.prepare = isReady, prepare
	lp.mu.Unlock()
}

func (lp *testPreparer) seen() (checks, prepares []int) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return append([]int(nil), lp.checks...), append([]int(nil), lp.prepares...)
}

// logBuffer captures a pool's log records.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// onOwnGoroutine runs f on a goroutine of its own, which f may end with
// runtime.Goexit, and waits for it.
func onOwnGoroutine(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	recvOrFail(t, done, "the goroutine to end")
}

// putIdle puts n fresh items idle in p, leasing them all and releasing them.
func putIdle(t *testing.T, p *Pool[*conn], n int) []*conn {
	t.Helper()
	ls := make([]Lease[*conn], n)
	cs := make([]*conn, n)
	for i := range ls {
		ls[i] = mustLease(t, p)
		cs[i] = ls[i].Value()
	}
	for _, l := range ls {
		l.Release()
	}
	return cs
}

// upkeptPool returns a pool whose upkeep goroutine runs, but whose rounds a
// test runs itself on the fake clock: the interval is an hour.
func upkeptPool(t *testing.T, opts Options[*conn]) (*Pool[*conn], *tracker, *fakeClock) {
	t.Helper()
	opts.UpkeepInterval = time.Hour
	p, tr := newTracked(t, opts)
	return p, tr, setFakeClock(p)
}

// endingCtx is a caller's ctx that ends while its lease runs: Err reports
// nil at the first call (the lease's first look) and context.Canceled at
// every later one. Done is nil, so nothing waits for it to end.
type endingCtx struct {
	context.Context
	looks atomic.Int32
}

func (c *endingCtx) Err() error {
	if c.looks.Add(1) == 1 {
		return nil
	}
	return context.Canceled
}

// panicHandler is a slog.Handler whose Handle panics: a Logger with a bug.
type panicHandler struct{ calls atomic.Int32 }

func (h *panicHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *panicHandler) Handle(context.Context, slog.Record) error {
	h.calls.Add(1)
	panic("the log handler panicked")
}
func (h *panicHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *panicHandler) WithGroup(string) slog.Handler      { return h }

// catchPanicStack is catchPanic that also returns, when f panicked, the
// stack where it did, for a report: catchPanic recovers only after the
// panicking frames are gone.
func catchPanicStack(f func()) (v any, stack []byte, panicked bool) {
	v, panicked = catchPanic(func() {
		returned := false
		defer func() {
			if !returned {
				stack = debug.Stack() // still on top of the panicking frames
			}
		}()
		f()
		returned = true
	})
	return v, stack, panicked
}

// catchGoexit calls f on a goroutine of its own, waits for it, and reports
// whether f called runtime.Goexit, which ends only that goroutine. f must
// not panic: wrap it in catchPanic.
func catchGoexit(f func()) (goexited bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		goexited = true
		f()
		goexited = false
	}()
	<-done
	return goexited
}

// awaitDestroys waits until no Destroy call of p's runs: the pool destroys
// items on goroutines of its own (doc.go, "Lifecycle of an item":
// Destroyed), so a test that counts what was destroyed waits for them.
func awaitDestroys[T any](t testing.TB, p *Pool[T]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	for p.Stats().Destroying > 0 {
		require.NoError(t, ctx.Err(), "the Destroy calls to end")
		time.Sleep(100 * time.Microsecond)
	}
}

// awaitBackground waits until the pool's background creations (Clear's
// refill, the seeding) have ended: nothing is asked of the keeper (an ask
// is cleared when its turn starts) and no turn runs.
func awaitBackground[T any](t testing.TB, p *Pool[T]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	for p.done.Err() == nil {
		if p.kp.wants.Load() == 0 && p.kp.turn.TryLock() { // no turn under way
			idle := p.kp.wants.Load() == 0
			p.kp.turn.Unlock()
			if idle {
				return
			}
		}
		require.NoError(t, ctx.Err(), "the background creations to end")
		time.Sleep(100 * time.Microsecond)
	}
}

// hdHold leases from p: the function the reports and Outstanding must name.
//
//go:noinline
func hdHold(t *testing.T, p *Pool[*conn]) Lease[*conn] {
	l, err := p.Lease(context.Background())
	require.NoError(t, err)
	return l
}

// hdEventually waits, within testWait, for cond to hold.
func hdEventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, testWait, time.Millisecond, append([]any{msg}, args...)...)
}

// creatingNow is the turns to create taken now: the creations under way,
// and those about to start or just ended.
func creatingNow[T any](p *Pool[T]) int {
	_, _, _, _, creating, _, _ := p.g.counts()
	return creating
}

// goroutineID parses the caller's id from its stack trace (0 if it cannot).
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); ok && i > 0 {
		if id, err := strconv.ParseUint(string(b[:i]), 10, 64); err == nil {
			return id
		}
	}
	return 0
}
