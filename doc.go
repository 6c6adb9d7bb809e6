// Package pool is a generic, bounded, thread-safe pool of items that are
// expensive to create and safe to reuse: database and SMTP connections,
// clients, sockets.
//
// A [Pool] lends items under a [Lease] and takes them back on
// [Lease.Release]. At most [Options].MaxSize items exist at once, counting
// every item from the start of its creation to the end of its destruction; a
// lease beyond that waits, in FIFO order and bounded by Options.LeaseTimeout
// and its ctx, for an item to come back. A [Factory] creates items on
// demand, an optional [Preparer] checks and restores them on lease,
// Options.Reset runs on release and Options.Destroy disposes of them when
// they expire, fail, are discarded or the pool closes.
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
// The sections below are the reference: what happens to an item, the rules
// of a lease, waiting and errors, [Stats], metrics, tracing, leak detection
// and long leases, what to look at when leases time out, the upkeep, and
// the mistakes the pool defuses and those it cannot. How it works, and the
// designs measured on the way, are in [docs/DESIGN.md]; how it is tested,
// in [docs/TESTING.md].
//
// # Lifecycle of an item
//
// Created. The factory creates an item when a lease finds none idle and fewer
// than MaxSize exist; [New] creates Options.MinSize items first, up to 32 at
// once, so 32 items with a 50 ms dial take about 50 ms, not 32 times that.
// New's creations run under New's ctx, each bounded by Options.CreateTimeout;
// when one fails, New cancels the others, destroys every item made and returns
// that first error (or raises the factory's panic again). With
// Options.SeedInBackground, New returns without waiting: the MinSize items are
// created in the background, several at once, and a failed creation (an error
// or a panic) is logged, counted in Stats.CreateErrors and retried after a
// backoff that doubles up to Options.UpkeepInterval (30 s without the upkeep),
// until MinSize items exist or the pool closes; leases meanwhile take a seeded
// item or create their own. A service so starts while its backend is down, and
// has its warm floor once the backend is up. A lease's creation gets a context
// that keeps the values of the caller's ctx but not its cancellation, bounded
// by Options.CreateTimeout and canceled by [Pool.Close]. When the caller's ctx
// can end, the factory runs on a goroutine of its own: a caller that gives up
// returns ctx.Err() at once, and its creation finishes in the background, still
// counted against MaxSize, and its item goes idle (or to a waiting lease), so
// one impatient caller never costs a second dial. A failure or panic of such a
// creation counts as a failed creation and is logged. A factory that returns a
// nil item and a nil error fails the creation with an error that says so.
//
// Leased. A lease takes an idle item (the one parked in its processor's
// slot, else the one that went idle last) or, when none is idle, creates
// one. With a [Preparer], the item is then checked: IsReady, and Prepare
// when it is not ready, both within Options.PreparationTimeout. A fresh item
// is always checked, and so is one the Preparer has never accepted (the item
// of an abandoned creation); an idle item only when it has sat idle at least
// Options.CheckAfterIdle (0: on every lease). An idle item that fails its
// check is destroyed and the lease goes on with the next idle item or a
// fresh one; a fresh item that fails is destroyed, and its error is
// returned, wrapped.
//
// Released. [Lease.Release] runs Options.Reset (an error or a panic destroys
// the item instead); an item past its lifetime is destroyed; otherwise the
// item goes straight to the oldest waiting lease, or becomes idle. On a
// closed pool, or while [Pool.SetMaxSize] is shrinking the pool, the item is
// destroyed.
//
// Idle. An idle item waits in its processor's slot or in the pool's idle
// queue. Leases take the one that went idle last, so that under a light load
// the same few items serve and the rest stay idle long enough to expire.
//
// Expired. An item idle longer than Options.IdleTimeout (counted from its
// last release), or older than Options.MaxLifetime (counted from the end of
// its creation, plus a random share of Options.MaxLifetimeJitter drawn at
// creation) is destroyed: on release (lifetime only), by a lease that meets
// it, by the sweep that leases and releases run, and by the upkeep (see
// Upkeep). Without either limit nothing expires, and a lifetime too long
// for the clock to reach (a MaxLifetime of math.MaxInt64) never ends.
//
// Destroyed. Options.Destroy disposes of an item; when it is nil, an item
// that is an [io.Closer] is closed and any other is dropped. [Lease.Discard],
// expiry, a failed check or Reset, [Pool.Clear], [Pool.Close] and
// [Pool.SetMaxSize] destroy items, and none of them but Close waits for a
// Destroy: it runs on a goroutine of the pool's own, so that a close that
// blocks on a silent peer (a TLS close_notify, an SMTP QUIT) never blocks a
// caller. An item counts against MaxSize until its Destroy returns (in
// ItemsAllocated, ActiveLeases and Stats.Destroying), or until
// Options.DestroyTimeout has passed: then it counts as destroyed, its room
// is free again (with a Warn through Logger), and the call is left to
// finish on its own. Without DestroyTimeout a Destroy that never returns
// holds its room for good. An item counts as destroyed however Destroy
// ends; a Destroy that fails, panics or outlasts DestroyTimeout is logged
// and counted in Stats.DestroyErrors, and its panic reaches no caller. The
// Destroy calls the pool waits for are at most MaxSize at once.
//
// Detached. [Lease.Detach] takes the item out of the pool for good: the pool
// frees its place and never touches the item again; disposing of it is the
// caller's job.
//
// [Pool.Clear] retires every item, as a failover asks: it destroys the idle
// items now, and every item leased when Clear is called, or being created
// then, when its lease ends, instead of lending it again (reason clear);
// items whose creation starts after Clear are untouched. It returns once the
// idle items have left the pool, and, once their Destroy calls have
// returned, refills the idle items to MinSize in the background, as far as
// MaxSize allows, within CreateTimeout and until Close; the refill's
// failures are logged, never returned. [Pool.Close] refuses new leases,
// wakes every waiting lease with [ErrClosed], cancels the creations under
// way, destroys the idle items now and the leased ones as they come back,
// and returns once the Destroy calls of the idle items, and of those under
// way, have returned (each waited for at most DestroyTimeout), with the
// joined errors of the idle items' (a panic's among them). After Close
// returns, no Destroy starts but for the items of leases that end later.
// [Pool.Shutdown] closes the pool, then waits until every lease has ended,
// every creation and Destroy has finished and the pool's background work
// has stopped, or until its ctx ends.
//
// Spare. With Options.MinIdle, the pool keeps that many items idle for the
// leases to come, created in the background: at New, in every round of the
// upkeep, and whenever a lease that took the slow way (it did not find an
// item in its processor's slot, or its item was judged) may have left fewer
// idle, until MinIdle are idle or
// MaxSize exist, never while leases wait (they create their own). MinSize
// is a floor on all the items, met by a busy pool whose every item is in
// use, so that the next lease creates in the caller; MinIdle keeps a spare
// ready. A failed creation (a factory that calls [runtime.Goexit] among
// them) is logged, counted in Stats.CreateErrors and retried with
// SeedInBackground's backoff until Close; idle expiry still destroys
// spares, and the next round replaces them. A pool with MinIdle dropped
// without Close stops making spares once the garbage collector has
// collected it.
//
// # Leases and their rules
//
// End every lease exactly once: [Lease.Release] to give the item back,
// [Lease.Discard] when you know it is broken (it is destroyed, and a waiting
// lease gets the right to create a fresh one), or [Lease.Detach] to keep it.
// The simplest way is to defer the Release right after a successful Lease:
//
//	l, err := p.Lease(ctx)
//	if err != nil {
//		return err
//	}
//	defer l.Release()
//
// Once a lease has ended, ending it again does nothing, so a deferred
// Release after an earlier Discard or Detach is harmless.
//
// [Pool.Do] writes that for you: it leases an item, calls a function with
// it and ends the lease, with Release when the function returns, and with
// Discard when its error wraps [ErrBroken] or it panics (the panic goes on).
//
// A lease also tells about its item: [Lease.Uses] counts the leases the
// item has had, this one included; [Lease.CreatedAt] is when its creation
// finished; [Lease.IdleFor] is how long it sat idle before this lease,
// known when the pool reads the clock on release (Options.IdleTimeout,
// MaxLifetime or, with a Preparer, CheckAfterIdle set) and 0 otherwise.
// None of them reads the clock on the lease. "Recycle after N uses" is
// then: if l.Uses() >= N, Discard instead of Release.
//
// A Lease is a small value, and copies are the same lease: ending it through
// one copy ends it for all of them. A second Release, a Release through a
// copy, or through a handle kept from an earlier lease of the same item,
// does nothing; so do Release and Discard on the zero Lease. No item is ever
// held by two leases at once.
//
// [Lease.Value] panics once the lease has ended (or on the zero Lease):
// using an item after giving it back would share it with its next borrower.
// [Lease.Detach] on an ended lease panics too, having no item to return.
//
// A nil ctx passed to [New], [Pool.Lease], [Pool.TryLease] or
// [Pool.Shutdown] panics at once with "pool: nil Context", whatever the
// pool's state. A Lease or TryLease whose ctx has already ended returns
// ctx.Err() and takes nothing, even when an item is idle; it counts in
// Stats.Canceled.
//
// # Waiting and errors
//
// When MaxSize items are in use, [Pool.Lease] waits in a FIFO queue. A
// released item goes straight to the oldest waiting lease (direct hand-off),
// and a discarded or destroyed item's place goes to it as the right to
// create a fresh one, so a woken lease never wakes to nothing and no
// newcomer overtakes the queue. A Release that hands its item to a waiting
// lease then yields its processor ([runtime.Gosched]) once, so that the
// woken lease runs at once rather than when the releasing goroutine next
// blocks or is preempted: with GOMAXPROCS 1, or every processor busy, a
// releaser that goes on computing would otherwise keep the woken lease,
// and its item, waiting for up to a time slice. Under saturation part of
// the queueing so moves into the Release that handed off, which returns
// once the processor comes back to it: while many goroutines compute
// without blocking, that can take some of the scheduler's time slices,
// tens of milliseconds. Stats.Waits and WaitTime count the waits of
// leases, and so read less. The wait ends with:
//
//   - an item;
//   - [ErrLeaseTimeout], once Options.LeaseTimeout (0: no limit) has passed
//     since the Lease call, counting every wait of the lease and its checks
//     of items that failed; the error says what the pool was doing: its
//     name, MaxSize, that time, and how many leases were waiting and items
//     being created and destroyed (the lease that timed out may or may not
//     be among the waiting), as in pool: lease timeout: pool "db": every
//     item stayed in use (MaxSize 10) for 5s; 31 leases waiting, 2 items
//     being created, 0 being destroyed;
//   - ctx.Err() when the caller's ctx ends first, returned as it is:
//     [context.Canceled] or [context.DeadlineExceeded], never
//     ErrLeaseTimeout, so a pool that is too small and a caller that ran
//     out of time are told apart with [errors.Is];
//   - [ErrClosed] when the pool closes.
//
// A lease whose item fails its check keeps its place: it waits again
// ahead of the leases that queued after it, behind those that came back so
// before it, and MaxQueuedLeases does not refuse it.
//
// Giving up wins at the instant of a grant: a waiter that finds its item and
// its ended ctx (or elapsed LeaseTimeout) ready together passes the item on
// to the next waiter and returns its error, so an item is never lost and a
// caller that gave up never walks away with one.
//
// [Pool.TryLease] never waits for an item: when MaxSize items are in use, or
// other leases already wait, it returns [ErrExhausted] at once. It may still
// create and prepare an item, within its ctx. With Options.MaxQueuedLeases,
// a Lease that would wait behind that many waiting leases fails at once
// with ErrExhausted too, whose message names the cap: a service under
// overload so fails fast rather than piling up goroutines. Both refusals
// count in Stats.Refused.
//
// Every error the pool returns is one of the sentinel errors below or wraps
// one, is the caller's ctx.Err() (or wraps it, when a Preparer or factory
// returned it), or wraps an error of your factory or Preparer: errors.Is and
// errors.As find yours. A pool's errors name it, as in pool: closed: pool
// "orders-db".
//
//   - [ErrClosed]: a lease on a closed pool, a lease waiting when it closed,
//     or a creation that Close canceled; also [Pool.SetMaxSize] on a closed
//     pool.
//   - [ErrLeaseTimeout]: Options.LeaseTimeout elapsed while the lease
//     waited.
//   - [ErrExhausted]: TryLease found every item in use, or leases waiting;
//     or a Lease found MaxQueuedLeases leases waiting.
//   - [ErrPreparationTimeout]: IsReady and Prepare on a fresh item took
//     longer than Options.PreparationTimeout; the item was destroyed.
//   - [ErrInvalidOptions]: New, [Options.Validate], SetMaxSize or
//     [Options.UnmarshalJSON] refused the options; the message names the field.
//   - a factory's or Preparer's error, wrapped (pool "orders-db": create
//     item: ...): the creation or the check of a fresh item failed, and the
//     lease's place is free again.
//
// Errors that have no caller to go to (a Reset that fails inside Release; a
// Destroy, which runs on the pool's own goroutines, wherever it came from; a
// creation whose lease gave up; Clear's refill; the spares; the upkeep) are
// logged through Options.Logger at Warn, with the attributes pool.name and
// err; a failed Destroy (one that returns an error, panics or outlasts
// DestroyTimeout) is also counted in Stats.DestroyErrors, and logged even
// when Close returns its error too. A panic in
// the factory, the Preparer or Reset leaves the pool consistent and reaches
// the caller whose call ran it, except where the pool ran that code on its
// own account (the upkeep, a creation whose caller gave up, the spares):
// such a panic is logged, never raised. A panic of Destroy reaches no
// caller: it is logged and counted (Close returns it, as an error, among
// the errors of the idle items it destroyed). A panic raised again away
// from where it happened (a factory that ran on a goroutine of its own)
// carries in its message the stack where it happened, and unwraps to the
// original value when that was an error; so does the error of a Destroy's
// panic. A callback that calls [runtime.Goexit] loses no place in the pool
// and leaves no item undestroyed, on any path: a lease, a release, a
// Destroy, Close or Clear, the upkeep (which goes on) or an abandoned
// creation. A panic in the Logger's handler is dropped:
// it never crashes the program from the pool's own goroutines, and never
// leaves a release or the upkeep half-done.
//
// # Stats
//
// [Pool.Stats] returns a snapshot. The figures about items now are derived
// from the pool's own bookkeeping, never kept as a second count:
//
//   - ActiveLeases: items in use: leased, or being created, checked by the
//     upkeep or destroyed; a leaked lease's item stays here for good.
//   - ItemsAvailable: idle items, ready to lease.
//   - ItemsAllocated: ActiveLeases + ItemsAvailable, the items the pool
//     accounts for.
//   - QueuedLeases: leases waiting now.
//   - Destroying: items whose Destroy the pool is waiting for now (each for
//     at most DestroyTimeout); they are among ActiveLeases.
//
// The counts since New:
//
//   - Leases: successful Lease and TryLease calls.
//   - Waits and WaitTime: the waits of the leases that had to queue, whatever
//     their outcome, and the time they spent queued; a lease served at once
//     adds to neither, and one that queued again (its item failed its check,
//     and no room was free) counts each wait. Creation and preparation are not
//     part of WaitTime.
//   - Timeouts: leases that failed with ErrLeaseTimeout. Canceled: leases
//     ended by the caller's ctx, before they started, while waiting,
//     creating or preparing. Refused: leases refused with ErrExhausted, by
//     TryLease or by MaxQueuedLeases.
//   - Created: successful factory calls. Destroyed: items destroyed,
//     whatever Destroy did. Detached: items taken out with Detach.
//   - IdleExpired, LifetimeExpired: items destroyed for exceeding
//     IdleTimeout and their lifetime. PrepareFailed: failed checks (IsReady
//     or Prepare failed or timed out), on lease or by the upkeep.
//     DestroyErrors: Destroy calls that returned an error, panicked or
//     outlasted DestroyTimeout.
//   - Leaked: leaked leases the garbage collector has found.
//   - LongLeases: leases reported for being held past
//     Options.LeakThreshold (see Leaks), each once.
//
// In every snapshot:
//
//   - ItemsAllocated == ActiveLeases + ItemsAvailable. An item released at
//     the instant of the snapshot may be counted as active rather than
//     idle; the sum is exact.
//   - Destroyed + Detached <= Created: the item counts are read together,
//     also while items are created and destroyed concurrently.
//   - Created - Destroyed - Detached (the items in existence) <= MaxSize,
//     and ItemsAllocated <= MaxSize, except while [Pool.SetMaxSize] shrinks
//     the pool below the items in existence: Stats.MaxSize is already the
//     new value, and the leased items beyond it count until they come back.
//   - QueuedLeases > 0 only when ItemsAllocated has reached MaxSize.
//
// At rest (no lease, creation or destruction under way): Created ==
// Destroyed + Detached + ItemsAllocated.
//
// # Metrics
//
// With Options.MeterProvider set, the pool registers OpenTelemetry
// instruments under the instrumentation scope "github.com/msl-armory/pool".
// Every measurement carries the attribute pool.name (the pool's Name), so
// pools sharing a provider report apart; durations are in seconds.
//
//   - pool.items.allocated (observable gauge, {item}): Stats.ItemsAllocated.
//   - pool.items.available (observable gauge, {item}): Stats.ItemsAvailable.
//   - pool.leases.active (observable gauge, {lease}): Stats.ActiveLeases.
//   - pool.leases.queued (observable gauge, {lease}): Stats.QueuedLeases.
//   - pool.items.max (observable gauge, {item}): MaxSize as it is now
//     (it follows SetMaxSize), Stats.MaxSize; saturation is
//     pool.leases.active / pool.items.max.
//   - pool.items.min (observable gauge, {item}): MinSize, Stats.MinSize.
//   - pool.utilization (observable gauge, 1): active / allocated; 0 when
//     nothing is allocated.
//   - pool.leases.granted (observable counter, {lease}): successful leases,
//     Stats.Leases.
//   - pool.lease.wait_time (histogram, s): the wait of each successful lease
//     that queued. A lease served at once is not recorded: granted minus
//     this histogram's count is the number of leases that waited 0 s.
//   - pool.lease.use_time (histogram, s): how long leases were held, from
//     the lease to its end (Release, Discard or Detach); OpenTelemetry's
//     db.client.connection.use_time. It records a uniform sample, one
//     lease in 512 on each processor (the first on each among them): its
//     quantiles are the leases' own (within the error of a sample that
//     size: about 16000 samples keep a tail's p99 within a few percent),
//     its count is not the number of leases (pool.leases.granted is). A
//     lease that never ends (a leak) is never recorded.
//   - pool.lease.errors (counter, {error}; attribute error.type): failed
//     leases, by error.type: timeout (ErrLeaseTimeout), canceled (the caller's
//     ctx ended), closed (ErrClosed), exhausted (ErrExhausted, from TryLease or
//     MaxQueuedLeases), create (the factory failed for this lease), prepare (a
//     fresh item failed its check).
//   - pool.preparation.time (histogram, s): each IsReady plus Prepare, failed
//     or not, on lease or by the upkeep.
//   - pool.preparation.errors (counter, {error}): failed checks,
//     Stats.PrepareFailed.
//   - pool.items.create_time (histogram, s): each factory call, failed or
//     not, in the background too.
//   - pool.items.created (counter, {item}): successful factory calls,
//     Stats.Created.
//   - pool.items.destroyed (counter, {item}; attribute reason): destroyed
//     items, by reason: idle, lifetime, prepare (a check that failed or
//     panicked), reset (a Reset that failed or panicked), discard, clear,
//     close (Close, an item coming back to a closed pool, or New cleaning
//     up after a failed creation) and resize (beyond the MaxSize that
//     SetMaxSize set).
//   - pool.items.destroy_errors (counter, {error}): Destroy calls that
//     failed or panicked, Stats.DestroyErrors.
//   - pool.leases.leaked (counter, {lease}): leaked leases found,
//     Stats.Leaked.
//   - pool.leases.long (counter, {lease}): leases reported for being held
//     past LeakThreshold, Stats.LongLeases.
//
// The histograms advise bucket boundaries from 0 to 30 s (100 µs, 250 µs,
// 500 µs, 1 ms and so on up to 10 s, 30 s); a View overrides them.
//
// Cost. With a nil or no-op MeterProvider nothing is registered and nothing
// recorded. With a real one, a lease and release of an idle item record
// nothing but the one lease in 512 that pool.lease.use_time samples: the
// observable instruments are read from Stats in one callback when the
// provider collects, from counts the pool keeps anyway. The other
// instruments record where the pool is already slow: in the queue, on a
// factory call, a check, a destroy or an error. (A histogram record costs
// the SDK about 130 ns, several times a whole lease and release; that is
// why pool.lease.wait_time holds only the leases that queued, and
// pool.lease.use_time a sample: a sequential lease and release costs at
// most 10 % more with the SDK than without metrics, as
// BenchmarkLeaseReleaseObserved shows.) Close
// unregisters the callback: a closed pool's observable instruments stop
// reporting, while its counters and histograms go on recording what the
// leases still out do. The callback holds the pool weakly, so a pool dropped
// without Close can still be collected.
//
// # Tracing
//
// The metrics say how the pool is doing as a whole; a [Tracer], set as
// Options.Tracer, says where one request's time went inside it, in the
// request's own trace. It sees each lease in the goroutine of the call that
// made it:
//
//   - LeaseStart, as a Lease, TryLease or Do begins, with the caller's ctx
//     and the pool's Name. The ctx it returns (a span in it, say) is the one
//     the lease goes on with: its wait, the factory and the Preparer see it,
//     so their own spans nest under the lease's, and so do LeaseEnd and
//     Released.
//   - LeaseEnd, as that call returns, with a [LeaseTrace]: the error (nil
//     when an item was leased), how long the lease waited in the queue, how
//     long the factory took to create its item, how long IsReady and Prepare
//     took, and the item's Uses. A duration is 0 exactly when the lease did
//     not do that step: Wait when it was served at once, Create when it
//     leased an idle item, Prepare when no item was checked. Every
//     LeaseStart gets one LeaseEnd, a failed lease (its ctx, LeaseTimeout,
//     Close, ErrExhausted, a factory or check that failed) included.
//   - Released, as a lease that LeaseEnd reported as granted ends, with a
//     [ReleaseTrace]: how long it was held (from the return of the call that
//     took it, after its LeaseEnd) and how it ended ("release", "discard" or
//     "detach"; Do's end is one of the first two). It runs in the goroutine of
//     that Release, Discard or Detach, once the item has been given back;
//     for a Detach, once the lease has ended, with the item still in the
//     pool's hands: the item leaves the pool when Released returns. A
//     failed lease gets none, and neither does a creation that finishes after
//     its caller gave up: nobody leased its item.
//
// A Tracer's methods run in the caller's time: keep them quick. A panic in
// one goes on to the caller as a panic of the caller's own code would, once
// the pool has accounted for the lease: no item and no room is lost (a
// lease whose LeaseEnd panics is given back, untraced). When Released
// panics (or calls runtime.Goexit) in a Detach, Detach cannot return the
// item, so the pool destroys it as a discarded item: it counts in
// Stats.Destroyed (reason discard), not in Detached. A lease whose
// factory or Preparer panics still gets its LeaseEnd, with an error saying
// so, before the panic goes on.
//
// Cost. With Tracer nil, a lease and release pay one compare for it. With
// one, every lease reads the clock once more and every release once,
// besides the three calls: with a Tracer that does nothing, a sequential
// lease and release costs about three times as much, and allocates nothing
// (BenchmarkLeaseRelease/tracer); the pool keeps the ctx with the lease,
// in room made with the item. examples/tracing adapts a Tracer to
// OpenTelemetry spans: a pool.lease span per lease, child of the caller's
// span, with the wait, the creation and the check as attributes, and a
// span for the hold. The library itself depends on no tracing package.
//
// # Leaks
//
// Two kinds of lease may have leaked: one still held long after it began (a
// goroutine stuck with its lease, or a lease kept in a global: in Go the
// common leak), and one dropped without being ended. The pool reports the
// first with Options.LeakThreshold, the second always.
//
// With LeakThreshold set, a lease still held LeakThreshold after it began is
// reported once, between LeakThreshold and 1.5 × LeakThreshold after it
// began (plus whatever delay the scheduler adds to the pool's timer) for a
// LeakThreshold of 8 ms or more; below that, since the pool scans at most
// once a millisecond, within LeakThreshold + 3 ms. This holds whether or
// not UpkeepInterval is set: Options.OnLeak receives a
// [LeakReport] with Held true, the Logger a Warn ("pool: a lease has been
// held longer than LeakThreshold") with the attributes pool.name, age and,
// with TrackLeaseSites, stack (the Lease call's stack, as in
// LeakReport.Stack), and Stats.LongLeases and pool.leases.long count it.
// The lease may yet end: when it does (Release, Discard or Detach), the
// Logger says so at Info ("pool: a lease reported as held past
// LeakThreshold has ended", with its final age), as HikariCP's "unleaked"
// message does. A lease is never reported twice for being held; one the
// garbage collector finds later is reported again, with Held false.
//
// The pool watches on a goroutine of its own, from New to Close, that
// wakes every LeakThreshold/8 (at most once a millisecond) and scans the
// items to find the leases out. Close stops it and waits for the report
// under way: after Close returns neither OnLeak nor the Logger hear from
// it again. A lease that ends after Close still logs its end, in its own
// Release. The pool writes nothing per lease for it: a lease pays
// nothing, and a release one load and a compare (a sequential lease and
// release at most 3 ns more, as BenchmarkLeaseRelease/leak-threshold
// shows). So without TrackLeaseSites an Age counts from the first scan
// that saw the lease out: it may fall short of the truth by about
// LeakThreshold/8. With TrackLeaseSites each lease records when it began,
// and ages are exact. [Pool.Outstanding] lists the leases out now, with
// the same ages (see When leases time out).
//
// A lease that becomes unreachable without Release, Discard or Detach is a
// leak: its item stays in use, and counts against MaxSize, for the life of the
// pool. The garbage collector finds it: the pool keeps no strong reference to a
// leased item, and each item gets one [runtime.AddCleanup] when it is created.
// When a leased item is found unreachable the pool counts it in Stats.Leaked
// and pool.leases.leaked and calls Options.OnLeak, if set, with a [LeakReport];
// the item is neither destroyed nor reused, since it may still be in use
// somewhere. A leak surfaces within a garbage collection cycle or two after the
// lease became unreachable, and is reported once. OnLeak runs on a goroutine of
// its own, never on the runtime's cleanup goroutine. It must not refer to the
// pool, or a pool dropped without Close could never be collected.
//
// Never reported: leases that ended; items destroyed by the pool; the idle
// items of a pool dropped without Close; a lease leaked from a pool that is
// itself dropped. Never reported as held, however long it takes: an item
// between two leases, being created, prepared, checked by the upkeep,
// reset or destroyed.
//
// Leak detection is always on and costs nothing per lease: no allocation,
// no finalizer, no clock read; each creation pays for one AddCleanup and a
// weak pointer (the pool lists its items weakly, for Outstanding and
// LeakThreshold), each destruction for stopping and dropping them. With
// Options.TrackLeaseSites, each lease also records when and where it was
// taken (the stack of the Lease call, up to 32 frames), for LeakReport.Age
// and LeakReport.Stack. That puts every lease on the slow path and calls
// [runtime.Callers]: a lease and release cost about ten to thirty times as
// much (docs/DESIGN.md, "What TrackLeaseSites costs", has the figures) and
// each item about 300 bytes more, still with no allocation per lease. Turn
// it on in tests, while debugging, or in a service while hunting a leak.
//
// # When leases time out
//
// [ErrLeaseTimeout] says that every item stayed in use for LeaseTimeout.
// Either the load needs more than MaxSize items, or something holds them
// too long. Look, in this order:
//
//  1. [Pool.Stats]: ActiveLeases against MaxSize (all in use?),
//     QueuedLeases and Timeouts (how many wait and give up), WaitTime over
//     Waits (how long they wait), Leaked and LongLeases (leases leaked, or
//     held past LeakThreshold). ActiveLeases at MaxSize while a few leases
//     stay out for ever is a leak; MaxSize busy with short leases is load.
//  2. [Pool.Outstanding]: the leases out now, oldest first, with their
//     ages and, with Options.TrackLeaseSites, the stack that took each.
//     It is cheap enough for a debug handler under load. The oldest ones,
//     and a stack that many share, point at the code that holds them.
//  3. Options.LeakThreshold: set it a little above the longest lease your
//     code should hold (seconds, not milliseconds), and OnLeak and the
//     Logger report each lease held longer as it happens, with its stack
//     under TrackLeaseSites; the Info when such a lease ends says whether
//     it was slow or stuck.
//  4. The metrics: pool.leases.active / pool.items.max over time
//     (saturation: near 1 before the timeouts means the pool was full),
//     pool.lease.use_time (how long leases are held: a tail that grew),
//     pool.lease.wait_time and pool.lease.errors with error.type timeout.
//
// Raise MaxSize only when the leases are short and the load is real.
// examples/holders shows the whole story: a handler that blocks while it
// holds a connection, the timeouts, and the reports pointing at its line.
//
// # Upkeep
//
// By default the pool runs no goroutine of its own (but the watcher of
// LeakThreshold: see Leaks) and expiry is lazy: when
// IdleTimeout or MaxLifetime is set, every release, and every lease that
// takes an idle item, reads the clock anyway and checks whether a sweep is
// due, and the first to find one due sweeps: it destroys every idle item
// past its time, wherever it sits. Sweeps are due every half of the smaller
// of IdleTimeout and MaxLifetime (at least 1 ms). So while leases or
// releases happen, every idle item is judged at least that often, and an
// expired one is destroyed by the first lease or release after the next
// sweep falls due; after a burst, a lightly used pool shrinks back to what
// its load needs. The sweep runs inside that lease or release, but not the
// Destroy calls: it hands the expired items to them, on the pool's own
// goroutines. With IdleTimeout and MaxLifetime both 0 there is no sweep,
// and it costs the lease and release nothing.
//
// Options.UpkeepInterval (0: off) starts one goroutine per pool, stopped by
// Close before Close returns, that runs a round every UpkeepInterval, spread
// by up to ±10 % so that many pools do not tick in step. Rounds start an
// interval apart, measured from the start of the previous round: a round
// that runs long delays the next only when it outlasts the interval, and
// then the next starts at once. A round
//
//   - destroys the idle items past IdleTimeout or their lifetime, without
//     waiting for a lease;
//   - with a Preparer and CheckAfterIdle > 0, checks the idle items that sat
//     idle at least CheckAfterIdle, one at a time, and destroys those that
//     fail, so a dead connection is found before a lease meets it;
//   - creates items until MinSize exist (not counting those being destroyed),
//     never past MaxSize and never while leases wait (they create their own),
//     and asks for the spares of MinIdle. A failed creation is logged and the
//     next round comes sooner: after a sixteenth of the interval, doubling up
//     to the interval.
//
// An item being checked or created counts against MaxSize, and no lease
// receives it meanwhile. Nothing of the upkeep runs on the lease and release
// paths.
//
// The upkeep's checks and creations get a context that Close cancels. Close
// cancels it first, then waits for the callbacks already running, and for
// no longer than they run: after Close returns, no callback of the upkeep
// runs or starts (a factory or Preparer that ignores its ctx delays Close
// until it returns, or until CreateTimeout or PreparationTimeout).
// Shutdown's ctx bounds that wait, as it bounds the wait for leases. Close,
// Clear or SetMaxSize called from inside a callback the upkeep runs (its
// Preparer, factory or Destroy) returns; after Close, the upkeep stops once
// that callback returns. Shutdown called from there waits for the item that
// callback holds, so only its ctx ends it. A callback that panics or calls
// runtime.Goexit leaves the upkeep running.
//
// With the upkeep on, MinSize is a floor kept over time: the sweeps (lazy or
// the upkeep's), and a lease that meets such an item, leave an item that
// has only idled past IdleTimeout while MinSize or fewer items exist, since
// the upkeep would create it again at once. MaxLifetime applies to every
// item, and the upkeep replaces what it destroys.
//
// Options.MaxLifetimeJitter spreads lifetimes: each item lives MaxLifetime
// plus a random duration in [0, MaxLifetimeJitter), drawn at its creation,
// so that items created together are not all destroyed, and redialed, in the
// same instant. It requires MaxLifetime.
//
// [Pool.SetMaxSize] changes MaxSize at run time, as a configuration reload
// may. Growing serves the waiting leases at once, in FIFO order, each with
// the right to create an item. Shrinking creates nothing past the new
// MaxSize: idle items beyond it are destroyed now, leased items beyond it
// when they come back, and new leases wait until the items fit. Stats, the
// gauges and ErrLeaseTimeout's message follow the new value. SetMaxSize
// refuses a size below 1 or below MinSize with ErrInvalidOptions.
//
// # Configuration
//
// [Options] decodes from JSON ([Options.UnmarshalJSON]), keyed by the field
// names: {"MaxSize": 20, "LeaseTimeout": "30s"}. Decoding is strict: a key
// that names no field, a value of the wrong type, or a field that can only
// be set in code is an error that names the key. A duration is a Go
// duration string ("30s", "1m30s"): a bare number other than 0 is refused
// ({"LeaseTimeout": 30} would be 30 ns, not the 30 s its writer meant), and
// so is one outside the range of time.Duration or so small that it rounds
// to 0. Decoding a shared section and then a pool's own section into the
// same Options overlays the second on the first. [Options.Validate] runs
// exactly the checks New runs, so a reloaded configuration can be checked
// before any of it is applied:
//
//	if err := next.Validate(); err != nil {
//		return err // keep running with the old configuration
//	}
//	return p.SetMaxSize(next.MaxSize)
//
// # Footguns
//
// What the pool defuses:
//
//   - Releasing twice, or through a copy or a stale handle: a no-op, never a
//     second borrower for the same item.
//   - Using an item after giving it back: Value panics.
//   - A wait that never ends: LeaseTimeout or a ctx deadline bound it, and
//     Close wakes every waiter.
//   - A waiter canceled at the instant it is handed an item: the item goes
//     to the next waiter.
//   - One impatient caller costing a second dial: its creation finishes in
//     the background and the item goes idle.
//   - Idle connections the server dropped: a Preparer finds and restores or
//     replaces them, and with CheckAfterIdle a busy pool does not check on
//     every lease.
//   - Panicking user code, or runtime.Goexit in it: the pool stays
//     consistent, and the panic reaches the caller with the stack where it
//     happened; where no caller exists, it is logged and never crashes the
//     program.
//
// What it cannot defuse:
//
//   - A lease that is never ended keeps its item for the life of the pool.
//     Leak MaxSize of them and every lease waits until its ctx or
//     LeaseTimeout ends it, and Shutdown until its ctx ends. Always defer
//     l.Release(); the pool tells you of a leak (see Leaks; a lease held by
//     a goroutine that is stuck only with LeakThreshold), it cannot undo
//     one.
//   - A Destroy that blocks (a QUIT to a server that does not answer) no
//     longer blocks the caller that let the item go, but its item still
//     counts against MaxSize, and Close waits for it: set
//     Options.DestroyTimeout, or bound the goodbye itself, as you bound
//     your dials (a factory that ignores its ctx holds its place in the
//     pool until it returns). Reset still runs in Release, on the caller's
//     goroutine: keep it quick.
//   - MinSize > 0 makes New create items: when the server is down, New
//     fails with the factory's error. A program that must start anyway
//     sets Options.SeedInBackground, which creates the floor once the
//     server is up.
//   - A Preparer puts every lease on the slow path: each lease judges its
//     item, and with CheckAfterIdle 0 calls IsReady every time. Set
//     CheckAfterIdle when a check costs a round trip. IdleTimeout and
//     MaxLifetime put every lease on the slow path too (each lease and
//     release reads the clock), and so does TrackLeaseSites (each lease
//     reads the clock and walks its caller's stack).
//   - PreparationTimeout bounds the check of one item, not the lease: a
//     lease that meets several idle items that fail their check may spend
//     that long on each before it creates a fresh one. Bound the lease with
//     its ctx.
//
// [docs/DESIGN.md]: https://github.com/msl-armory/pool/blob/main/docs/DESIGN.md
// [docs/TESTING.md]:
// https://github.com/msl-armory/pool/blob/main/docs/TESTING.md
package pool
