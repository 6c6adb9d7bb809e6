// Package pool is a generic, bounded, thread-safe pool of items that are
// expensive to create and safe to reuse: database and SMTP connections,
// clients, sockets.
//
// A [Pool] lends items under a [Lease] and takes them back on
// [Lease.Release]. At most [Options].MaxSize items exist at once, counting
// those being created or destroyed. A [Factory] creates items, an optional
// [Preparer] checks and restores them on lease, Options.Reset runs on
// release and Options.Destroy disposes of them.
//
//	p, err := pool.New(ctx, pool.FactoryFunc[*Conn](dial), pool.Options[*Conn]{
//		MaxSize:      10,              // never more than ten connections at once
//		LeaseTimeout: 5 * time.Second, // then ErrLeaseTimeout
//	})
//	if err != nil {
//		return err
//	}
//	defer p.Close()
//
//	l, err := p.Lease(ctx)
//	if err != nil {
//		return err
//	}
//	defer l.Release()
//	return l.Value().Send(msg)
//
// Each option's details are on its [Options] field; how the pool works is in
// [docs/DESIGN.md], how it is tested in [docs/TESTING.md].
//
// # Lifecycle of an item
//
// Created. A lease that finds no idle item creates one when fewer than
// MaxSize exist. [New] first creates Options.MinSize items, several at once,
// and fails with the first failed creation, or returns at once with
// Options.SeedInBackground. A lease's creation keeps the caller's ctx values
// but not its cancellation, within Options.CreateTimeout: a caller that
// gives up returns ctx.Err() at once, while its creation finishes in the
// background and its item goes idle, so an impatient caller never costs a
// second dial. A nil item with a nil error fails the creation.
//
// Leased. A lease takes the item that went idle last (so under a light load
// the rest idle long enough to expire) or creates one. A [Preparer] checks
// it within Options.PreparationTimeout: always a fresh item or one the
// Preparer never accepted (an abandoned creation's item), an idle one when
// idle at least Options.CheckAfterIdle. A failing item is destroyed: if
// idle, the lease goes on with another; if fresh, its error is returned,
// wrapped.
//
// Released. [Lease.Release] runs Options.Reset (an error or panic destroys
// the item); the item then goes to the oldest waiting lease, or idles. It is
// destroyed instead on a closed pool, past its lifetime, or at its
// Options.MaxUses-th lease.
//
// Expired. An item idle longer than Options.IdleTimeout, or older than
// Options.MaxLifetime (plus its share of MaxLifetimeJitter), is destroyed by
// a lease that meets it, by the sweep and by the upkeep (see Upkeep).
//
// Destroyed. Options.Destroy disposes of an item (default: Close for an
// [io.Closer]). [Lease.Discard], expiry, a failed check or Reset,
// [Pool.Clear], [Pool.Close] and SetMaxSize destroy items on the pool's own
// goroutines: only Close waits for a Destroy. The item counts against
// MaxSize (and in Stats.Destroying) until Destroy returns or
// Options.DestroyTimeout passes. A Destroy that fails, panics or outlasts
// DestroyTimeout is logged and counted in Stats.DestroyErrors; its item
// still counts as destroyed.
//
// Detached. [Lease.Detach] takes the item out of the pool for good: the pool
// frees its place and never touches it again.
//
// Spare. With Options.MinIdle the pool keeps that many items idle, created
// in the background, never past MaxSize and never while leases wait.
//
// [Pool.Clear] retires every item that exists (leased ones as their leases
// end), for a failover; [Pool.Close] refuses new leases, wakes the waiting
// ones with [ErrClosed] and destroys every item; [Pool.Shutdown] also waits
// for the leases out, within its ctx. Each one's doc comment says what it
// waits for.
//
// # Leases and their rules
//
// End every lease exactly once: [Lease.Release] to give the item back,
// [Lease.Discard] when it is broken, or [Lease.Detach] to keep it. Defer the
// Release right after a successful Lease. [Pool.Do] does all of this: it
// discards the item when the function's error wraps [ErrBroken] or the
// function panics.
//
// A Lease is a small value whose copies are the same lease: ending one ends
// all. Ending an ended lease, through a copy or a stale handle, does
// nothing, so a deferred Release after a Discard is harmless. No item is
// ever held by two leases at once. [Lease.Value] and [Lease.Detach] panic on
// an ended lease. [Lease.Uses], [Lease.CreatedAt] and [Lease.IdleFor]
// describe the item.
//
// A nil ctx panics with "pool: nil Context". A Lease whose ctx has ended
// returns ctx.Err() and takes nothing, even when an item is idle.
//
// # Waiting and errors
//
// When MaxSize items (or the adaptive limit) are in use, or a lease would
// create one while Options.MaxConcurrentCreates creations run, [Pool.Lease] waits
// in a FIFO queue. A released or new item goes straight to the oldest
// waiting lease, and a destroyed item's place, or an ended creation's turn,
// goes to it as the right to create a fresh one: a woken lease never wakes
// to nothing and no newcomer overtakes the queue. A grant skips leases whose
// ctx has ended. A Release that hands its item over does not yield; the
// next lease on its processor steps aside for the woken one. A lease whose
// item fails its check waits again ahead of the leases that first queued
// after it, and MaxQueuedLeases does not refuse it. The wait ends with:
//
//   - an item;
//   - [ErrLeaseTimeout], once Options.LeaseTimeout has passed since the
//     Lease call, with a message saying what the pool was doing (items in
//     use, leases waiting, creations); if a creation failed since the Lease
//     call, it also wraps the last one's error, for [errors.Is] and
//     [errors.As];
//   - ctx.Err() itself when the caller's ctx ends first, never
//     ErrLeaseTimeout, so [errors.Is] tells a pool too small from a caller
//     out of time: a pool's error matches [context.DeadlineExceeded] or
//     [context.Canceled] only when the caller's own ctx ended, never when
//     CreateTimeout, PreparationTimeout or Close ends a creation or check;
//   - [ErrClosed] when the pool closes.
//
// Giving up wins at the instant of a grant: the item goes on to the next
// lease, and the caller that gave up gets its error, never the item.
//
// [Pool.TryLease] never waits: with every item in use, leases waiting, or
// the creations at their cap, it returns [ErrExhausted]. With
// Options.MaxQueuedLeases a Lease that would wait behind that many fails at
// once with ErrExhausted too.
//
// Every error the pool returns wraps one of its sentinels, is the caller's
// ctx.Err(), or wraps your factory's or Preparer's error ([errors.As] finds
// it), and names the pool: [ErrClosed], [ErrLeaseTimeout], [ErrExhausted],
// [ErrBackendDown], [ErrPreparationTimeout] (a fresh item's check took too
// long), [ErrInvalidOptions] (the message names the field).
//
// Errors with no caller to go to (a failed Reset or Destroy, a creation
// whose caller gave up, the background's creations) are logged to
// Options.Logger at Warn, with pool.name and err. A panic in the factory,
// the Preparer or Reset leaves the pool consistent and reaches the caller
// whose call ran it, with the stack where it happened; if the pool ran that
// code on its own account, it is logged instead. A callback that calls
// [runtime.Goexit] loses no place in the pool and leaves no item
// undestroyed.
//
// # Stats
//
// [Pool.Stats] returns a snapshot. In every snapshot
// ItemsAllocated == ActiveLeases + ItemsAvailable, Destroyed + Detached <=
// Created, and the items in existence stay within MaxSize but while
// SetMaxSize shrinks the pool. At rest, Created == Destroyed + Detached +
// ItemsAllocated.
//
// # Metrics
//
// With Options.MeterProvider set, the pool registers OpenTelemetry
// instruments under the scope "github.com/msl-armory/pool", each measurement
// with the attribute pool.name; durations are in seconds:
//
//   - gauges: pool.items.allocated, pool.items.available,
//     pool.leases.active, pool.leases.queued, pool.items.max (MaxSize now:
//     saturation is pool.leases.active / pool.items.max), pool.items.limit
//     (the limit in force), pool.items.min,
//     pool.utilization, pool.backend.down (1 while the pool is down, else
//     0); the counter pool.leases.granted;
//   - pool.lease.wait_time: the wait of each lease that queued;
//   - pool.lease.use_time: how long leases were held, a uniform sample of
//     one lease in 512 per processor (its quantiles are the leases', its
//     count is not);
//   - pool.lease.errors by error.type (timeout, canceled, closed, exhausted,
//     create, prepare, backend_down);
//   - pool.preparation.time, pool.preparation.errors,
//     pool.items.create_time, pool.items.created;
//   - pool.items.destroyed by reason (idle, lifetime, prepare, reset,
//     discard, clear, close, resize, max_uses), pool.items.destroy_errors;
//   - pool.leases.leaked, pool.leases.long.
//
// A lease and release of an idle item record only that sample; gauges are
// read from Stats at collection, until Close.
//
// Options.StandardMetricNames puts the OpenTelemetry conventions'
// connection-pool instruments in place of those of the same figures:
// db.client.connection.count (state idle or used), .idle.max, .idle.min,
// .max, .pending_requests, .timeouts, .create_time, .wait_time, .use_time,
// with db.client.connection.pool.name; the last two record every lease.
//
// # Tracing
//
// A [Tracer], set as Options.Tracer, sees each Lease, TryLease and Do in the
// caller's goroutine: LeaseStart as it begins (the lease goes on with the
// ctx it returns), LeaseEnd as it returns, with a [LeaseTrace] of its wait,
// creation and checks, and Released as a granted lease ends, with a
// [ReleaseTrace]. A Tracer's panic reaches the caller once the pool has
// accounted for the lease. With Tracer nil it costs a compare.
//
// # Leaks
//
// A lease dropped unended is found by the garbage collector: the pool counts
// it in Stats.Leaked and calls Options.OnLeak with a [LeakReport]; its item
// is neither destroyed nor reused. Always on, it costs a lease nothing.
//
// With Options.LeakThreshold, each lease notes when it began (a clock read),
// and a lease still held that long is reported once, between LeakThreshold
// and 1.5 × LeakThreshold after it began (for 8 ms or more), to OnLeak with
// Held true and to the Logger at Warn, and counted in Stats.LongLeases; when
// it ends the Logger says so at Info. With Options.TrackLeaseSites each
// lease records where it was taken, for LeakReport.Stack: this slows every
// lease, so turn it on to hunt a leak.
//
// # When leases time out
//
// [ErrLeaseTimeout] means every item stayed in use for LeaseTimeout (or
// creations stayed at MaxConcurrentCreates): the load needs more items, or
// something holds them too long. Look at [Pool.Stats] (ActiveLeases,
// QueuedLeases, Timeouts, Leaked, LongLeases), then set LeakThreshold a
// little above the longest lease your code should hold: it reports those
// held longer, and [Pool.Outstanding] lists the leases out, oldest first,
// with their ages (and stacks, with TrackLeaseSites). Raise MaxSize only
// when the leases are short and the load is real. examples/holders shows
// the whole story.
//
// # When the backend is down
//
// By default each lease that finds no idle item calls the factory: while the
// server is down, each waits out its own dial (up to CreateTimeout), up to
// MaxSize dials at once. Three options change that:
//
//   - Options.FailFastAfter: after that many failed creations in a row the
//     pool is down. A lease that would create fails at once, taking no place
//     and no turn to create, with an error wrapping [ErrBackendDown] and the
//     last creation's error, so errors.Is(err, syscall.ECONNREFUSED) still
//     works; a lease that finds an idle item gets it. One background
//     creation probes the server with backoff (doubling up to
//     UpkeepInterval, or 30 s without the upkeep), never starved by leases:
//     however many keep coming, the pool is up within one backoff step of
//     the server's return. Stats.BackendDown and the metric
//     pool.backend.down say whether the pool is down; the Logger hears once
//     when it goes down (Warn) and once when it comes back (Info).
//   - Options.MaxConcurrentCreates caps the concurrent dials, leases' and
//     background's together, so a cold start or a Clear after a failover
//     does not open MaxSize connections at once.
//   - Options.MaxUses destroys an item after that many leases, so
//     connections move to a server added behind a load balancer.
//
// The first two require Options.CreateTimeout: a dial that never returned
// would hold its turn for good, and never count as failed. examples/outage
// shows both at work against a server it stops and restarts.
//
// # Upkeep
//
// Expiry needs no goroutine: with IdleTimeout or MaxLifetime set, the first
// lease or release after a sweep falls due (every half of the smaller limit)
// destroys every idle item past its time, wherever it sits.
//
// A pool runs at most one goroutine of its own in the background, whatever the
// options, and only when they give it work: the upkeep, the creations of
// SeedInBackground, MinIdle, Clear's refill and FailFastAfter's probe,
// LeakThreshold's scans and the adaptive size (Destroy, OnLeak and
// abandoned or seeding creations may run on short-lived goroutines
// besides). It holds the pool weakly, so a pool dropped without Close is
// collected, and the goroutine ends. Close stops it and waits for its
// callbacks; after Close returns none runs.
//
// Options.UpkeepInterval makes it, every interval, destroy expired idle
// items, check the items idle past CheckAfterIdle with the Preparer, and
// create items up to MinSize (and the spares of MinIdle); a failed
// creation brings the next round sooner. With the upkeep on, idle expiry
// never takes the pool below MinSize.
//
// [Pool.SetMaxSize] changes MaxSize at run time: growing serves the waiting
// leases at once, shrinking destroys idle items beyond it now and leased
// ones as they come back.
//
// # Adaptive size
//
// With Options.AdaptiveSize the pool finds its size: a limit on the items,
// between max(MinSize, 1), where it starts, and MaxSize, that its
// background goroutine moves once a second. It grows while leases wait and
// their use time grows more slowly than the items in use, shrinks once it
// grows faster (past the peak), never grows while creations fail or the
// pool is down, and climbs again when the backend's speed changes. It
// settles within 30 s, then steps up to an eighth up and down by turns;
// items above a lowered limit go as SetMaxSize's do. Stats.Limit and
// pool.items.limit show it, a Debug line each move; each lease reads the
// clock twice. Leave it off when the best size is known, or leases mix
// short and long work.
//
// # Configuration
//
// [Options] decodes strictly from JSON keyed by the field names, durations
// as strings: {"MaxSize": 20, "LeaseTimeout": "30s"}; a typo is an error
// that suggests the field meant ([Options.UnmarshalJSON]).
// [Options.Validate] runs exactly New's checks, so you can check a reloaded
// configuration before applying it:
//
//	if err := next.Validate(); err != nil {
//		return err // keep running with the old configuration
//	}
//	return p.SetMaxSize(next.MaxSize)
//
// # Footguns
//
// The pool cannot defuse these:
//
//   - A lease never ended keeps its item for good; leak MaxSize of them and
//     every lease times out.
//   - A Destroy or factory that ignores its deadline holds its place under
//     MaxSize (and a factory its turn under MaxConcurrentCreates) until it
//     returns, and Close waits for it: set DestroyTimeout and bound your
//     dials. Reset runs in Release: keep it quick.
//   - A Preparer, IdleTimeout, MaxLifetime and AdaptiveSize put every lease
//     on the slow path; set CheckAfterIdle when a check costs a round trip.
//   - PreparationTimeout bounds one item's check, not the lease: bound the
//     lease with its ctx.
//
// [docs/DESIGN.md]: https://github.com/msl-armory/pool/blob/main/docs/DESIGN.md
// [docs/TESTING.md]: https://github.com/msl-armory/pool/blob/main/docs/TESTING.md
package pool
