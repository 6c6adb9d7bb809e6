package pool_test

// Example of a Tracer: what the pool tells of each lease, in the goroutine of the call that made it.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/msl-armory/pool"
)

// requestKey is the ctx key of the request a lease is made for.
type requestKey struct{}

// printTracer prints what the pool tells of each lease, with the request
// from the caller's ctx. It prints whether each duration is zero, not its
// value, so that the output is the same on every run.
type printTracer struct{}

func (printTracer) LeaseStart(ctx context.Context, pool string) context.Context {
	fmt.Printf("%v: lease from %s\n", ctx.Value(requestKey{}), pool)
	return ctx // a real Tracer would start a span here, and return ctx with it
}

func (printTracer) LeaseEnd(ctx context.Context, t pool.LeaseTrace) {
	req := ctx.Value(requestKey{})
	if t.Err != nil {
		fmt.Printf("%v:   failed (waited %v): timed out: %v\n", req, t.Wait > 0, errors.Is(t.Err, pool.ErrLeaseTimeout))
		return
	}
	fmt.Printf("%v:   leased use %d (waited %v, created %v, checked %v)\n", req, t.Uses, t.Wait > 0, t.Create > 0, t.Prepare > 0)
}

func (printTracer) Released(ctx context.Context, t pool.ReleaseTrace) {
	fmt.Printf("%v:   ended by %s (held %v)\n", ctx.Value(requestKey{}), t.How, t.Held > 0)
}

// A Tracer sees each lease: LeaseStart as it begins, LeaseEnd with what the
// pool measured of it (its wait, the factory's and the check's time, 0 for
// a step it did not take), and Released as it ends. The ctx LeaseStart
// returns is the one the others get.
func ExampleTracer() {
	dial := pool.FactoryFunc[*session](func(context.Context) (*session, error) {
		time.Sleep(time.Millisecond) // a dial takes a moment
		return &session{id: 1}, nil
	})
	ping := pool.CheckFunc[*session](func(context.Context, *session) error {
		time.Sleep(time.Millisecond)
		return nil
	})
	p, err := pool.New[*session](context.Background(), dial, pool.Options[*session]{
		Name:           "sessions",
		MaxSize:        1,
		LeaseTimeout:   time.Millisecond,
		Preparer:       ping,        // checks every fresh session,
		CheckAfterIdle: time.Minute, // and an idle one only after a minute
		Tracer:         printTracer{},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	request := func(id string) context.Context { return context.WithValue(context.Background(), requestKey{}, id) }
	hold := func() { time.Sleep(time.Millisecond) }

	// The first lease creates the session and checks it.
	l, err := p.Lease(request("req-1"))
	if err != nil {
		log.Fatal(err)
	}
	hold()
	l.Release()

	// The next reuses it, idle and unchecked, and holds it while a third
	// waits in vain.
	l, err = p.Lease(request("req-2"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Lease(request("req-3")); err == nil {
		log.Fatal("req-3 got the session req-2 holds")
	}
	hold()
	l.Discard()
	exDestroyed(p) // the discarded session's room is free once its Destroy returned

	// Do's lease is traced as Lease's is, and ends as fn returns: a fresh
	// session, since req-2 discarded the last one.
	_ = p.Do(request("req-4"), func(*session) error {
		hold()
		return nil
	})
	// Output:
	// req-1: lease from sessions
	// req-1:   leased use 1 (waited false, created true, checked true)
	// req-1:   ended by release (held true)
	// req-2: lease from sessions
	// req-2:   leased use 2 (waited false, created false, checked false)
	// req-3: lease from sessions
	// req-3:   failed (waited true): timed out: true
	// req-2:   ended by discard (held true)
	// req-4: lease from sessions
	// req-4:   leased use 1 (waited false, created true, checked true)
	// req-4:   ended by release (held true)
}
