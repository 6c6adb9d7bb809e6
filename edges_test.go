package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Edge cases of the contract, each at a boundary where two rules meet: a
// down pool under a load that never pauses, a probe whose dial hangs, the
// options that bound a hung dial, the errors a CreateTimeout or Close
// leaves behind, the order of leases that wait again, Close and abandoned
// creations, and a grant meeting thousands of ended leases.

// TestEdgesDownPoolComesBackUnderLoad: 16 goroutines lease back to back,
// each again as soon as its lease failed, while the backend fails, the pool
// goes down, and the backend answers again ("When the backend is down";
// the doc comment of Options.FailFastAfter). While the pool is down a lease
// that finds no idle item fails at once with ErrBackendDown, taking no
// place under MaxSize and no turn under MaxConcurrentCreates: the only
// factory calls are the probe's, one at a time, and the load does not
// starve it. Once the backend answers, the pool is up and leases succeed
// within one backoff step (UpkeepInterval) plus slack for a loaded host,
// while the load goes on.
func TestEdgesDownPoolComesBackUnderLoad(t *testing.T) {
	const (
		step      = 100 * time.Millisecond // UpkeepInterval: the probe's backoff ceiling
		hammerers = 16
		// atOnce bounds a failure "at once" beyond the stalls seen: 16
		// goroutines busy on a loaded 2-core host wait their turns on a
		// processor, and TestEdgesDownPoolFailsFastWhileTheProbeHangs checks
		// "at once" exactly.
		atOnce = 500 * time.Millisecond
		slack  = time.Second // for a loaded host, beyond the stalls seen
	)
	for _, capN := range []int{0, 2} {
		t.Run(fmt.Sprintf("MaxConcurrentCreates %d", capN), func(t *testing.T) {
			p, b := newBackend(t, Options[*conn]{
				MaxSize: 4, MaxConcurrentCreates: capN, FailFastAfter: 2,
				CreateTimeout: testWait, UpkeepInterval: step,
			})
			sentinel := &beErr{code: 41}
			b.set(0, sentinel)

			stop := make(chan struct{})
			var load, watch sync.WaitGroup
			var stall atomic.Int64
			watch.Go(func() { watchStalls(stop, &stall) })
			// While downPhase, the checker keeps the most places and turns
			// it saw taken.
			var downPhase atomic.Bool
			var places, turns atomic.Int64
			watch.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Microsecond):
					}
					if capN > 0 {
						checkCapped(t, p, capN, b.tr.live.Load)
					} else {
						checkInvariants(t, p, b.tr.live.Load)
					}
					if s := p.Stats(); downPhase.Load() && s.BackendDown {
						skMax(&places, int64(s.ActiveLeases))
						skMax(&turns, int64(s.Creating))
					}
				}
			})
			var served, failedDown, slowestDown, unexpected atomic.Int64
			for range hammerers {
				load.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(bg, testWait) // a hang detector
						inPhase := downPhase.Load()
						begin := time.Now()
						l, err := p.Lease(ctx)
						took := time.Since(begin)
						inPhase = inPhase && downPhase.Load()
						cancel()
						switch {
						case err == nil:
							served.Add(1)
							l.Release()
						case errors.Is(err, ErrBackendDown) && errors.Is(err, sentinel):
							failedDown.Add(1)
							if inPhase {
								skMax(&slowestDown, int64(took))
							}
						case errors.Is(err, sentinel):
							// a creation that failed before the pool went down
						default:
							if unexpected.Add(1) == 1 {
								t.Errorf("a lease failed with %v, which wraps neither the backend's error nor ErrBackendDown", err)
							}
						}
					}
				})
			}
			stopAll := func() {
				close(stop)
				load.Wait()
				watch.Wait()
			}
			t.Cleanup(func() {
				select {
				case <-stop:
				default:
					stopAll()
				}
			})

			require.Eventually(t, func() bool { return p.Stats().BackendDown }, testWait, time.Millisecond, "the pool to go down")
			// The leases that took a place, or queued, before the pool went
			// down are done with it (today they never are: the sampling
			// below tells). From here on no lease may take a place.
			for settle := time.Now(); time.Since(settle) < 2*time.Second; time.Sleep(time.Millisecond) {
				if s := p.Stats(); s.ActiveLeases == 0 && s.QueuedLeases == 0 {
					break
				}
			}
			callsDown := b.numCalls()
			b.resetPeak()
			downPhase.Store(true)
			phase := time.Now()
			time.Sleep(4 * step) // the backoff reaches its ceiling: 6.25+12.5+25+50+100 ms
			// A host loaded past its cores may delay the probe's timer: some
			// slack before calling it starved.
			for b.numCalls() == callsDown && time.Since(phase) < 4*step+slack {
				time.Sleep(time.Millisecond)
			}
			downPhase.Store(false)
			downFor := time.Since(phase)
			probes := b.numCalls() - callsDown
			peakDown := b.peak.Load()

			back := b.set(0, nil)
			up := func() bool { return !p.Stats().BackendDown && served.Load() > 0 }
			for !up() && time.Since(back) < step+slack+time.Duration(stall.Load()) {
				time.Sleep(time.Millisecond)
			}
			upAfter := time.Since(back)
			wasUp := up()
			time.Sleep(10 * time.Millisecond) // leases go on succeeding
			stopAll()

			t.Logf("down %v: %d probe calls, peak %d in flight, at most %d places and %d turns taken; %d leases failed fast (slowest %v); up %v (%v after the backend answered); %d served; longest stall %v; stats %+v",
				downFor.Round(time.Millisecond), probes, peakDown, places.Load(), turns.Load(), failedDown.Load(), time.Duration(slowestDown.Load()),
				wasUp, upAfter.Round(time.Millisecond), served.Load(), time.Duration(stall.Load()), p.Stats())
			assert.True(t, wasUp, "the pool was still down (or no lease succeeded) %v after the backend answered, with 16 goroutines leasing: the probe starved", upAfter.Round(time.Millisecond))
			if wasUp {
				assert.Less(t, upAfter, step+slack+time.Duration(stall.Load()), "up within a backoff step of the backend answering (plus slack)")
			}
			assert.Positive(t, probes, "the probe called the factory while down, under load")
			assert.LessOrEqual(t, probes, 12, "while down, the only factory calls are the probe's, backing off")
			assert.LessOrEqual(t, peakDown, int64(1), "factory calls in flight at once while down: the probe's only")
			assert.LessOrEqual(t, places.Load(), int64(1), "places under MaxSize taken while down: the probe's only, none by the leases that failed fast")
			assert.LessOrEqual(t, turns.Load(), int64(1), "turns to create taken while down: the probe's only")
			assert.Positive(t, failedDown.Load(), "leases failed fast while down")
			assert.Less(t, time.Duration(slowestDown.Load()), atOnce+time.Duration(stall.Load()), "no lease of the down pool waited (for the probe, a place or a turn)")
			assert.Positive(t, served.Load(), "leases succeeded once the pool was up")
			assertAtRest(t, p)
		})
	}
}

// TestEdgesDownPoolFailsFastWhileTheProbeHangs: with MaxConcurrentCreates 1,
// while the probe's dial hangs (the backend accepts the connection and
// never answers, until CreateTimeout), a lease of the down pool that finds
// no idle item fails at once with ErrBackendDown and the last creation's
// error, without waiting for the probe's turn to create; TryLease fails so
// too, not with ErrExhausted ("When the backend is down"; the doc comments
// of Options.FailFastAfter and ErrBackendDown). In a synctest bubble, so
// "at once" is exact: a lease that waited for the probe would return 3 s
// later, when CreateTimeout ends the dial.
func TestEdgesDownPoolFailsFastWhileTheProbeHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sentinel := &beErr{code: 42}
		var calls atomic.Int32
		f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
			if calls.Add(1) == 1 {
				return nil, sentinel // the lease's: the pool goes down
			}
			<-ctx.Done() // the probe's: hangs until CreateTimeout or Close
			return nil, ctx.Err()
		})
		p, err := New[*conn](bg, f, Options[*conn]{MaxSize: 4, MaxConcurrentCreates: 1, FailFastAfter: 1, CreateTimeout: 3 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })

		_, err = p.Lease(bg)
		require.ErrorIs(t, err, sentinel)
		require.True(t, p.Stats().BackendDown)
		// The probe dials at once, or after a backoff when the failed
		// lease still held the only turn to create as it asked.
		for down := time.Now(); calls.Load() < 2; time.Sleep(10 * time.Millisecond) {
			require.Less(t, time.Since(down), time.Minute, "the probe never dialed")
		}
		synctest.Wait()
		require.EqualValues(t, 2, calls.Load(), "the probe's dial hangs")

		_, err = p.TryLease(bg)
		assert.ErrorIs(t, err, ErrBackendDown, "TryLease of a down pool whose probe holds the only turn to create")
		assert.NotErrorIs(t, err, ErrExhausted)
		assert.ErrorIs(t, err, sentinel, "the last creation's error")

		begin := time.Now()
		_, err = p.Lease(bg)
		took := time.Since(begin)
		assert.ErrorIs(t, err, ErrBackendDown, "Lease of a down pool whose probe holds the only turn to create")
		assert.ErrorIs(t, err, sentinel, "the last creation's error")
		assert.Less(t, took, 100*time.Millisecond, "the lease failed at once, not after the probe's dial")
		assert.EqualValues(t, 2, calls.Load(), "no lease called the factory")
		require.NoError(t, p.Close())
	})
}

// TestEdgesCreateCapsNeedCreateTimeout: MaxConcurrentCreates and
// FailFastAfter without a CreateTimeout are refused by Validate, by New and
// after JSON decoding (Options.UnmarshalJSON, then Validate), with an error
// wrapping ErrInvalidOptions that names both fields and says why (a hung
// factory call would keep its turn, or keep the pool down, for good: "Footguns";
// the doc comments of Options.MaxConcurrentCreates, Options.FailFastAfter
// and Options.Validate). With a CreateTimeout they are accepted. The scenario
// behind the rule, in a synctest bubble: a backend that accepts the dial and
// never answers, MaxConcurrentCreates 2, FailFastAfter 2 and a CreateTimeout
// of 50 ms: the hung creations end at CreateTimeout and count as failures,
// the pool goes down, and once the backend answers it serves leases again.
//
// "Says why" is checked loosely: the message has one of the words a reason
// would use (hang, never, forever, block, ...).
func TestEdgesCreateCapsNeedCreateTimeout(t *testing.T) {
	for _, tc := range []struct {
		field string
		opts  Options[*conn]
		json  string
	}{
		{"MaxConcurrentCreates", Options[*conn]{MaxConcurrentCreates: 2}, `{"MaxConcurrentCreates": 2}`},
		{"FailFastAfter", Options[*conn]{FailFastAfter: 3}, `{"FailFastAfter": 3}`},
	} {
		t.Run(tc.field+" without CreateTimeout", func(t *testing.T) {
			refused := func(how string, err error) {
				t.Helper()
				if !assert.ErrorIs(t, err, ErrInvalidOptions, "%s", how) {
					return
				}
				msg := err.Error()
				assert.Contains(t, msg, tc.field, "%s: the message names the field", how)
				assert.Contains(t, msg, "CreateTimeout", "%s: the message names CreateTimeout", how)
				assert.True(t, edgeSaysWhy(msg), "%s: the message says why: %q", how, msg)
			}
			refused("Validate", tc.opts.Validate())

			tr := &tracker{}
			p, err := New[*conn](bg, tr, tc.opts)
			refused("New", err)
			if p != nil {
				_ = p.Close()
			}
			assert.True(t, p == nil, "New returned a pool")
			assert.Zero(t, tr.created.Load(), "New called the factory")

			var o Options[*conn]
			err = o.UnmarshalJSON([]byte(tc.json))
			if err == nil {
				err = o.Validate()
			}
			refused("JSON "+tc.json+", then Validate", err)
			if err == nil {
				var p *Pool[*conn]
				p, err = New[*conn](bg, tr, o)
				refused("New with the options decoded from "+tc.json, err)
				if p != nil {
					_ = p.Close()
				}
			}
		})
		t.Run(tc.field+" with CreateTimeout", func(t *testing.T) {
			o := tc.opts
			o.CreateTimeout = 5 * time.Second
			require.NoError(t, o.Validate())
			p, err := New[*conn](bg, &tracker{}, o)
			require.NoError(t, err)
			require.NoError(t, p.Close())

			var d Options[*conn]
			require.NoError(t, json.Unmarshal([]byte(strings.TrimSuffix(tc.json, "}")+`, "CreateTimeout": "5s"}`), &d))
			assert.NoError(t, d.Validate())
		})
	}

	t.Run("a hung backend comes back", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const createTimeout, step = 50 * time.Millisecond, time.Second
			tr := &tracker{}
			var answering atomic.Bool
			f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
				if !answering.Load() {
					<-ctx.Done() // accepts the dial, never answers
					return nil, ctx.Err()
				}
				return tr.Create(ctx)
			})
			p, err := New[*conn](bg, f, Options[*conn]{
				MaxSize: 4, MaxConcurrentCreates: 2, FailFastAfter: 2,
				CreateTimeout: createTimeout, UpkeepInterval: step, Destroy: tr.destroy,
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })

			outs := make([]<-chan leaseOutcome, 4) // two create, two wait for a turn
			for i := range outs {
				outs[i] = leaseAsync(bg, p)
			}
			for i, ch := range outs {
				o := awaitLease(t, ch)
				require.Error(t, o.err, "lease %d of a hung backend", i)
			}
			synctest.Wait()
			s := p.Stats()
			require.True(t, s.BackendDown, "the hung creations ended at CreateTimeout, and counted as failures: %+v", s)
			assert.GreaterOrEqual(t, s.CreateErrors, uint64(2), "%+v", s)

			answering.Store(true)
			time.Sleep(2 * step) // the probe's current dial ends, and its next comes within a step
			synctest.Wait()
			s = p.Stats()
			assert.False(t, s.BackendDown, "up once the backend answers: %+v", s)
			l, err := p.Lease(bg)
			require.NoError(t, err, "the pool serves leases again")
			l.Release()
			require.NoError(t, p.Close())
			assert.Zero(t, tr.live.Load())
		})
	})
}

// edgeSaysWhy reports whether an error message gives a reason, by the words
// one would use.
func edgeSaysWhy(msg string) bool {
	msg = strings.ToLower(msg)
	for _, w := range []string{"hang", "hung", "never", "forever", "for good", "block", "unbounded", "bound", "stuck", "holds", "keep"} {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// edgeDialError is a factory's own error type that wraps its ctx's error,
// for errors.As.
type edgeDialError struct {
	addr string
	err  error
}

func (e *edgeDialError) Error() string { return "dial " + e.addr + ": " + e.err.Error() }
func (e *edgeDialError) Unwrap() error { return e.err }

// errEdgeDial is a sentinel a factory wraps in its errors.
var errEdgeDial = errors.New("dial db:5432")

// edgeCtxEnds are the ways a factory reports the end of its ctx: report
// returns the factory's error once ctx has ended, and reaches asserts that
// a pool error still reaches what the factory returned.
var edgeCtxEnds = []struct {
	name    string
	report  func(ctx context.Context) error
	reaches func(t *testing.T, err error)
}{
	{"ctx.Err()", func(ctx context.Context) error { return ctx.Err() }, func(*testing.T, error) {}},
	{"wrapped with a sentinel", func(ctx context.Context) error { return fmt.Errorf("%w: %w", errEdgeDial, ctx.Err()) },
		func(t *testing.T, err error) { assert.ErrorIs(t, err, errEdgeDial, "the sentinel the factory wrapped") }},
	{"a type of its own", func(ctx context.Context) error { return &edgeDialError{addr: "db:5432", err: ctx.Err()} },
		func(t *testing.T, err error) {
			var de *edgeDialError
			if assert.ErrorAs(t, err, &de, "the factory's own error type") {
				assert.Equal(t, "db:5432", de.addr)
			}
		}},
	{"net.Dialer", func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", "127.0.0.1:9") // ctx has ended: no packet leaves
		if c != nil {
			_ = c.Close()
		}
		return err
	}, func(t *testing.T, err error) {
		var oe *net.OpError
		assert.ErrorAs(t, err, &oe, "the dialer's *net.OpError")
	}},
}

// TestEdgesCreateTimeoutIsNotTheCallersDeadline: a creation that
// CreateTimeout ended fails the lease with the factory's error, wrapped,
// but the lease's error does not match context.DeadlineExceeded: the
// caller's ctx did not end, and errors.Is(err, context.DeadlineExceeded)
// tells a caller out of time ("Waiting and errors": ctx.Err() when the
// caller's ctx ends, "so that a pool too small and a caller out of time are
// told apart with errors.Is"). The same for the ErrBackendDown errors that
// wrap such a creation error once the pool is down, and for ErrLeaseTimeout
// wrapping one that failed during the wait. errors.Is and errors.As still
// reach the factory's own error: a sentinel it wrapped, its own type, a
// *net.OpError. For each way a factory reports its ctx's end, and for a
// caller's ctx that cannot end and one with seconds left.
func TestEdgesCreateTimeoutIsNotTheCallersDeadline(t *testing.T) {
	const createTimeout = 50 * time.Millisecond
	notCtxErr := func(t *testing.T, err error, what string) {
		t.Helper()
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "%s: the caller's ctx did not end", what)
		assert.NotErrorIs(t, err, context.Canceled, "%s: the caller's ctx did not end", what)
	}
	for _, r := range edgeCtxEnds {
		t.Run(r.name+"/the lease's own creation, then ErrBackendDown", func(t *testing.T) {
			f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
				<-ctx.Done() // until CreateTimeout
				return nil, r.report(ctx)
			})
			p, err := New[*conn](bg, f, Options[*conn]{MaxSize: 2, CreateTimeout: createTimeout, FailFastAfter: 2})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			withTime, cancel := context.WithTimeout(bg, testWait) // seconds left
			defer cancel()

			for i, ctx := range []context.Context{bg, withTime} {
				_, err := p.Lease(ctx)
				require.Error(t, err)
				require.NoError(t, ctx.Err())
				what := fmt.Sprintf("creation %d, which CreateTimeout ended", i+1)
				notCtxErr(t, err, what)
				r.reaches(t, err)
				assert.Contains(t, err.Error(), p.Name(), "%s: the error names the pool", what)
			}
			require.True(t, p.Stats().BackendDown, "two creations in a row failed")
			for i, ctx := range []context.Context{bg, withTime} {
				_, err := p.Lease(ctx)
				require.ErrorIs(t, err, ErrBackendDown)
				what := fmt.Sprintf("ErrBackendDown %d", i+1)
				notCtxErr(t, err, what)
				r.reaches(t, err)
			}
			_, err = p.TryLease(withTime)
			require.Error(t, err)
			notCtxErr(t, err, "TryLease of the down pool")
		})
		t.Run(r.name+"/ErrLeaseTimeout", func(t *testing.T) {
			// X's creation ends at CreateTimeout while W1 and W2 wait; its
			// place goes to W1, whose creation the test holds until W2's
			// LeaseTimeout has passed.
			var calls atomic.Int32
			started, hold := make(chan struct{}, 2), make(chan struct{})
			f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
				started <- struct{}{}
				if calls.Add(1) == 1 {
					<-ctx.Done()
					return nil, r.report(ctx)
				}
				<-hold // ignores its ctx
				return &conn{}, nil
			})
			p, err := New[*conn](bg, f, Options[*conn]{MaxSize: 1, CreateTimeout: createTimeout, LeaseTimeout: 600 * time.Millisecond})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			t.Cleanup(func() { // first: Close waits for the creation
				select {
				case <-hold:
				default:
					close(hold)
				}
			})

			x := leaseAsync(bg, p)
			recvOrFail(t, started, "X's creation")
			w1 := leaseAsync(bg, p)
			waitQueued(t, p, 1)
			w2 := leaseAsync(bg, p)
			waitQueued(t, p, 2)

			ox := awaitLease(t, x)
			require.Error(t, ox.err)
			notCtxErr(t, ox.err, "X, whose creation CreateTimeout ended")
			r.reaches(t, ox.err)
			recvOrFail(t, started, "W1's creation")

			ow2 := awaitLease(t, w2)
			require.ErrorIs(t, ow2.err, ErrLeaseTimeout)
			notCtxErr(t, ow2.err, "ErrLeaseTimeout wrapping a creation that CreateTimeout ended")
			r.reaches(t, ow2.err)

			close(hold)
			ow1 := awaitLease(t, w1)
			require.NoError(t, ow1.err)
			ow1.l.Release()
		})
	}
}

// TestEdgesCloseIsNotTheCallersCancel: Close cancels a creation in flight
// (the doc comment of Close), and the lease waiting for it fails with an
// error wrapping ErrClosed that does not match context.Canceled, though the
// factory returned its ctx's error: the caller's ctx did not end ("Waiting
// and errors"). The factory's own error is still reached. For each way a
// factory reports its ctx's end, and for a caller's ctx that cannot end
// and one with seconds left.
func TestEdgesCloseIsNotTheCallersCancel(t *testing.T) {
	for _, r := range edgeCtxEnds {
		for _, withTime := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/caller's ctx can end %v", r.name, withTime), func(t *testing.T) {
				started := make(chan struct{}, 1)
				f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
					started <- struct{}{}
					<-ctx.Done() // until Close
					return nil, r.report(ctx)
				})
				p, err := New[*conn](bg, f, Options[*conn]{MaxSize: 1})
				require.NoError(t, err)
				t.Cleanup(func() { _ = p.Close() })
				ctx := bg
				if withTime {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(bg, testWait)
					defer cancel()
				}
				out := leaseAsync(ctx, p)
				recvOrFail(t, started, "the creation")
				require.NoError(t, p.Close())

				err = awaitLease(t, out).err
				require.NoError(t, ctx.Err())
				assert.ErrorIs(t, err, ErrClosed)
				assert.NotErrorIs(t, err, context.Canceled, "Close canceled the creation, not the caller")
				assert.NotErrorIs(t, err, context.DeadlineExceeded)
				r.reaches(t, err)
				assert.Zero(t, p.Stats().Canceled, "Close ended the lease, not the caller")
			})
		}
	}
}

// TestEdgesCallersOwnCtxEndIsCtxErr: when the caller's own ctx ends while
// its lease waits, queued or for its creation, the lease returns ctx.Err()
// as it is, which matches with errors.Is, and counts in Stats.Canceled
// ("Waiting and errors"; "Lifecycle of an item": a caller that gives up
// returns ctx.Err() at once).
func TestEdgesCallersOwnCtxEndIsCtxErr(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline bool // the ctx ends by its deadline, else by cancel
		queued   bool // the lease waits in the queue, else for its creation
	}{
		{"deadline while queued", true, true},
		{"canceled while queued", false, true},
		{"deadline while creating", true, false},
		{"canceled while creating", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started, hold := make(chan struct{}, 2), make(chan struct{})
			tr := &tracker{}
			f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
				started <- struct{}{}
				<-hold
				return tr.Create(ctx)
			})
			p, err := New[*conn](bg, f, Options[*conn]{MaxSize: 1, CreateTimeout: testWait, Destroy: tr.destroy})
			require.NoError(t, err)
			var first <-chan leaseOutcome // holds the only place, creating
			// Unblock the creations before Close, which waits for them.
			t.Cleanup(func() {
				close(hold)
				if first != nil {
					if o := awaitLease(t, first); o.err == nil {
						o.l.Release()
					}
				}
				_ = p.Close()
			})
			if tc.queued {
				first = leaseAsync(bg, p)
				recvOrFail(t, started, "the first creation")
			}
			ctx, cancel := context.WithCancel(bg)
			if tc.deadline {
				ctx, cancel = context.WithTimeout(bg, 20*time.Millisecond)
			}
			defer cancel()
			out := leaseAsync(ctx, p)
			if tc.queued {
				waitQueued(t, p, 1)
			} else {
				recvOrFail(t, started, "the lease's creation")
			}
			if !tc.deadline {
				cancel()
			}
			err = awaitLease(t, out).err
			require.Error(t, err)
			assert.Equal(t, ctx.Err(), err, "the caller's ctx.Err(), as it is")
			if tc.deadline {
				assert.ErrorIs(t, err, context.DeadlineExceeded)
			} else {
				assert.ErrorIs(t, err, context.Canceled)
			}
			assert.EqualValues(t, 1, p.Stats().Canceled)
		})
	}
}

// TestEdgesRequeuedLeasesKeepTheirFirstOrder: leases whose items failed
// their checks wait again in the order in which they first queued, whatever
// the order of the failures ("Waiting and errors": a lease whose item fails
// its check keeps its place). W1 queues, then W2; each is handed an item;
// W2's check fails first, then W1's; the next item freed, by a place coming
// free (a failed item's Destroy returning) or by a release, goes to W1,
// and the one after to W2.
func TestEdgesRequeuedLeasesKeepTheirFirstOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxSize int
		// free frees the next item: the place of c2 (destroyed), or the
		// third item, held by the test (held).
		free func(held Lease[*conn], destroyed map[int]chan struct{})
	}{
		{"a place comes free", 2, func(_ Lease[*conn], destroyed map[int]chan struct{}) { close(destroyed[2]) }},
		{"an item is released", 3, func(held Lease[*conn], _ map[int]chan struct{}) { held.Release() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lp := &testPreparer{}
			destroyed := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
			p, _ := newTracked(t, Options[*conn]{MaxSize: tc.maxSize, Preparer: lp, Destroy: func(c *conn) error {
				if ch, ok := destroyed[c.id]; ok {
					<-ch // the failed item keeps its place until the test says
				}
				return c.Close()
			}})
			t.Cleanup(func() { // before Close, which waits for them
				for _, ch := range destroyed {
					select {
					case <-ch:
					default:
						close(ch)
					}
				}
			})
			held := make([]Lease[*conn], tc.maxSize)
			for i := range held {
				held[i] = mustLease(t, p)
			}
			c1, c2 := held[0].Value(), held[1].Value()
			require.Equal(t, []int{1, 2}, []int{c1.id, c2.id})
			checking, verdict := failOnDemand(lp, c1, c2)

			w1 := leaseAsync(bg, p)
			waitQueued(t, p, 1)
			w2 := leaseAsync(bg, p)
			waitQueued(t, p, 2)
			held[0].Release() // to W1
			recvOrFail(t, checking[c1], "W1's check")
			held[1].Release() // to W2
			recvOrFail(t, checking[c2], "W2's check")

			verdict[c2] <- errNotReady // W2's fails first
			waitQueued(t, p, 1)
			verdict[c1] <- errNotReady
			waitQueued(t, p, 2)

			var order []string
			names := []string{"W1", "W2"}
			tc.free(held[len(held)-1], destroyed)
			i, o := awaitWhich(t, w1, w2)
			require.NoError(t, o.err)
			defer o.l.Release()
			order = append(order, names[i])
			rest := []<-chan leaseOutcome{w2, w1}[i]
			for id, ch := range destroyed { // every place comes free: the other lease's item
				select {
				case <-ch:
				default:
					close(destroyed[id])
				}
			}
			o2 := awaitLease(t, rest)
			require.NoError(t, o2.err)
			defer o2.l.Release()
			order = append(order, names[1-i])
			assert.Equal(t, []string{"W1", "W2"}, order, "the order in which the requeued leases got their items; W1 first queued before W2")
		})
	}
}

// TestEdgesCloseWaitsForAbandonedCreations: a lease gives up while its
// creation runs, on a factory that ignores its ctx; the creation goes on in
// the background ("Lifecycle of an item": Created). Close does not return
// before that factory call returns, and when it returns the item has been
// destroyed: no Destroy starts after Close returned (the doc comment of
// Close; "Footguns": "Close waits for it"). Shutdown's wait for it is
// bounded by its ctx (the doc comment of Shutdown). In synctest bubbles, so
// that "Close has not returned" is seen once every goroutine is blocked.
func TestEdgesCloseWaitsForAbandonedCreations(t *testing.T) {
	// abandoned makes a pool whose one creation a lease gave up on; the
	// factory returns its item once answer is closed.
	abandoned := func(t *testing.T) (p *Pool[*conn], answer chan struct{}, destroyed *atomic.Int32, tr *tracker) {
		t.Helper()
		started, answer := make(chan struct{}, 1), make(chan struct{})
		tr, destroyed = &tracker{}, new(atomic.Int32)
		f := FactoryFunc[*conn](func(ctx context.Context) (*conn, error) {
			started <- struct{}{}
			<-answer // ignores its ctx
			return tr.Create(ctx)
		})
		p, err := New[*conn](bg, f, Options[*conn]{MaxSize: 1, Destroy: func(c *conn) error {
			destroyed.Add(1)
			return tr.destroy(c)
		}})
		require.NoError(t, err)
		t.Cleanup(func() {
			select {
			case <-answer:
			default:
				close(answer)
			}
			_ = p.Close()
		})
		ctx, cancel := context.WithCancel(bg)
		out := leaseAsync(ctx, p)
		<-started
		cancel()
		require.ErrorIs(t, awaitLease(t, out).err, context.Canceled)
		return p, answer, destroyed, tr
	}

	t.Run("Close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, answer, destroyed, tr := abandoned(t)
			closed := make(chan error, 1)
			go func() { closed <- p.Close() }()
			synctest.Wait()
			var err error
			returned := false
			select {
			case err = <-closed:
				returned = true
			default:
			}
			assert.False(t, returned, "Close returned while the abandoned creation still ran")

			close(answer)
			if !returned {
				err = recvOrFail(t, closed, "Close to return once the creation ended")
			}
			assert.NoError(t, err)
			assert.EqualValues(t, 1, destroyed.Load(), "the abandoned creation's item was destroyed before Close returned")
			synctest.Wait()
			assert.EqualValues(t, 1, destroyed.Load(), "one Destroy in all")
			assert.Zero(t, tr.live.Load())
		})
	})
	t.Run("Shutdown's ctx bounds the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, answer, destroyed, tr := abandoned(t)
			ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
			defer cancel()
			begin := time.Now()
			err := p.Shutdown(ctx)
			assert.ErrorIs(t, err, context.DeadlineExceeded, "Shutdown returns its ctx's error while the creation hangs")
			assert.GreaterOrEqual(t, time.Since(begin), 100*time.Millisecond, "Shutdown waited for the creation until its ctx ended")
			assert.Zero(t, destroyed.Load())

			close(answer)
			synctest.Wait()
			assert.EqualValues(t, 1, destroyed.Load(), "the item is destroyed once the creation ends")
			assert.Zero(t, tr.live.Load())
		})
	})
}

// TestEdgesGrantSkipsEndedLeases: 2,048 leases wait on a pool of MaxSize 1,
// all with one ctx, and a live lease waits behind them; the shared ctx ends
// (canceled, or its deadline passes) and the held item is released at that
// instant. The live lease gets the item; every ended lease returns its
// ctx's error and none walks away with an item ("Waiting and errors":
// giving up wins at the instant of a grant, and no item is lost); Stats add
// up. In a synctest bubble, so that all 2,049 are queued before the ctx
// ends and the release comes as it ends.
func TestEdgesGrantSkipsEndedLeases(t *testing.T) {
	const ended = 2048
	for _, deadline := range []bool{false, true} {
		name := map[bool]string{false: "canceled", true: "deadline"}[deadline]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, tr := newTracked(t, Options[*conn]{MaxSize: 1})
				held := mustLease(t, p)
				item := held.Value()
				ctx, cancel := context.WithCancel(bg)
				if deadline {
					ctx, cancel = context.WithTimeout(bg, time.Second)
				}
				defer cancel()
				outs := make([]<-chan leaseOutcome, ended)
				for i := range outs {
					outs[i] = leaseAsync(ctx, p)
				}
				synctest.Wait()
				require.Equal(t, ended, p.Stats().QueuedLeases)
				live := leaseAsync(bg, p)
				synctest.Wait()
				require.Equal(t, ended+1, p.Stats().QueuedLeases)

				if deadline {
					<-ctx.Done() // wakes with the 2,048
				} else {
					cancel()
				}
				held.Release()

				o := awaitLease(t, live)
				require.NoError(t, o.err, "the live lease behind the ended ones")
				assert.Same(t, item, o.l.Value())
				got := 0
				for i, ch := range outs {
					d := awaitLease(t, ch)
					if d.err == nil {
						got++
						d.l.Release()
						continue
					}
					if !assert.Equal(t, ctx.Err(), d.err, "ended lease %d", i) {
						break
					}
				}
				assert.Zero(t, got, "ended leases that walked away with an item")
				synctest.Wait()
				s := p.Stats()
				assert.Equal(t, 1, s.ActiveLeases, "the live lease's: %+v", s)
				assert.Zero(t, s.ItemsAvailable, "%+v", s)
				assert.Zero(t, s.QueuedLeases, "%+v", s)
				assert.EqualValues(t, ended, s.Canceled, "%+v", s)
				assert.EqualValues(t, 1, tr.created.Load(), "nothing lost, nothing created")
				o.l.Release()
				assertAtRest(t, p)
				l, err := p.TryLease(bg)
				require.NoError(t, err, "the item is leasable")
				l.Release()
			})
		})
	}
}

// TestEdgesFlappingBackendStorm: 24 goroutines lease with random short
// deadlines (some already past) from a pool of 4 with FailFastAfter, whose
// backend fails and answers by turns every few milliseconds, while 4 others
// release or discard what they lease. While it runs the Stats invariants
// hold ("Stats"): ItemsAllocated == ActiveLeases + ItemsAvailable,
// ActiveLeases <= MaxSize, the items in existence within MaxSize; a lease
// whose ctx had ended before the call never gets an item ("Leases and their
// rules"); every failure is the caller's ctx.Err() (only when that ctx has
// ended), the backend's error, or ErrBackendDown wrapping it ("Waiting and
// errors"). Afterwards the pool is up and whole. The gate's storms
// (gate_test.go, turns_test.go, TestSoak) run no FailFastAfter: here the
// pool goes down and up under the storm.
func TestEdgesFlappingBackendStorm(t *testing.T) {
	const (
		maxSize, leasers, releasers = 4, 24, 4
		run                         = 500 * time.Millisecond
	)
	p, b := newBackend(t, Options[*conn]{MaxSize: maxSize, FailFastAfter: 2, CreateTimeout: testWait, UpkeepInterval: 20 * time.Millisecond})
	sentinel := &beErr{code: 43}

	stop := make(chan struct{})
	var aux sync.WaitGroup // the checker and the flapper
	var checks atomic.Int64
	aux.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
			checkInvariants(t, p, b.tr.live.Load)
			checks.Add(1)
		}
	})
	var flips atomic.Int64
	aux.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for failing := true; ; failing = !failing {
			if failing {
				b.set(0, sentinel)
			} else {
				b.set(0, nil)
			}
			flips.Add(1)
			select {
			case <-stop:
				b.set(0, nil)
				return
			case <-time.After(time.Duration(2+rng.IntN(10)) * time.Millisecond):
			}
		}
	})

	leases := make(chan Lease[*conn], leasers)
	var rel sync.WaitGroup
	for i := range releasers {
		rel.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for l := range leases {
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
				if rng.IntN(8) == 0 {
					l.Discard()
				} else {
					l.Release()
				}
			}
		})
	}
	var served, ctxEnded, down, backend, endedBefore atomic.Int64
	var load sync.WaitGroup
	for i := range leasers {
		load.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				d := time.Duration(rng.IntN(3000)) * time.Microsecond
				if j%8 == 0 {
					d = -time.Millisecond // past already
				}
				ctx, cancel := context.WithTimeout(bg, d)
				before := ctx.Err() != nil
				l, err := p.Lease(ctx)
				switch {
				case err == nil:
					served.Add(1)
					if before {
						t.Errorf("a lease whose ctx had ended before the call got an item")
					}
					leases <- l
				case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
					if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
						t.Errorf("a lease whose ctx did not end failed with %v", err)
					}
					ctxEnded.Add(1)
					if before {
						endedBefore.Add(1)
					}
				case before:
					t.Errorf("a lease whose ctx had ended before the call failed with %v, not ctx.Err()", err)
				case errors.Is(err, ErrBackendDown) && errors.Is(err, sentinel):
					down.Add(1)
				case errors.Is(err, sentinel):
					backend.Add(1)
				default:
					t.Errorf("a lease failed with %v", err)
				}
				cancel()
			}
		})
	}
	// At least run, and until the storm has tried what it should (a host
	// loaded past its cores may take longer).
	for begin := time.Now(); time.Since(begin) < run ||
		(served.Load() == 0 || ctxEnded.Load() == 0 || down.Load() == 0) && time.Since(begin) < testWait/2; {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	load.Wait()
	close(leases)
	rel.Wait()
	aux.Wait()

	// Creations whose leases gave up finish in the background.
	hdEventually(t, func() bool {
		s := p.Stats()
		return !s.BackendDown && s.Creating == 0 && s.ActiveLeases == s.Destroying
	},
		"the pool to come up, the backend answering, and its creations to end")
	assertAtRest(t, p)
	s := p.Stats()
	t.Logf("%d leases served, %d ended by their ctx (%d before the call), %d ErrBackendDown, %d backend errors; %d flips, %d checks; stats %+v",
		served.Load(), ctxEnded.Load(), endedBefore.Load(), down.Load(), backend.Load(), flips.Load(), checks.Load(), s)
	require.Positive(t, served.Load(), "the storm served leases")
	require.Positive(t, ctxEnded.Load(), "the storm ran deadlines out")
	require.Positive(t, down.Load(), "the pool went down under the storm")
	assert.Equal(t, uint64(served.Load()), s.Leases, "%+v", s)
	assert.Equal(t, uint64(ctxEnded.Load()), s.Canceled, "%+v", s)
	assert.Zero(t, s.QueuedLeases, "%+v", s)
	assert.Zero(t, s.ActiveLeases, "%+v", s)
	for i := range maxSize { // no place lost
		l, err := p.TryLease(bg)
		require.NoError(t, err, "lease %d of MaxSize %d at once", i+1, maxSize)
		defer l.Release()
	}
}
