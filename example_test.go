package pool_test

// Examples of the main calls, New to Shutdown, and the items and factories all examples share.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/msl-armory/pool"
)

// exConn stands in for a network connection in the examples.
type exConn struct {
	id     int
	server *exServer
	epoch  int // the server epoch the connection was made in
}

func (c *exConn) Send(msg string) error {
	fmt.Printf("conn %d: %s\n", c.id, msg)
	return nil
}

// Close makes exConn an io.Closer, so the pool closes it when it lets go.
func (c *exConn) Close() error {
	fmt.Printf("conn %d: closed\n", c.id)
	return nil
}

// exDestroyed waits until p has no Destroy under way: the pool destroys
// items on goroutines of its own, so an example that prints what was
// destroyed waits for that first (Close waits for them itself).
func exDestroyed[T any](p *pool.Pool[T]) {
	for p.Stats().Destroying > 0 {
		time.Sleep(time.Millisecond)
	}
}

// exServer is the far end: Create dials it, and a restart drops every
// connection made before.
type exServer struct {
	dialed int
	epoch  int
}

// Create makes exServer a pool.Factory.
func (s *exServer) Create(ctx context.Context) (*exConn, error) {
	s.dialed++
	return &exConn{id: s.dialed, server: s, epoch: s.epoch}, nil
}

func (s *exServer) restart() { s.epoch++ }

// session stands in for a connection whose Close prints nothing.
type session struct{ id int64 }

// sessions is a factory that numbers its sessions.
type sessions struct{ dialed atomic.Int64 }

func (s *sessions) Create(context.Context) (*session, error) {
	return &session{id: s.dialed.Add(1)}, nil
}

func ExampleNew() {
	dial := pool.FactoryFunc[*exConn](func(ctx context.Context) (*exConn, error) {
		return &exConn{id: 1}, nil // a real factory would dial with ctx
	})
	p, err := pool.New(context.Background(), dial, pool.Options[*exConn]{
		Name:         "mail",
		MinSize:      1, // dialed now, by New
		MaxSize:      10,
		LeaseTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	s := p.Stats()
	fmt.Printf("%s: %d idle, at most %d\n", s.Name, s.ItemsAvailable, s.MaxSize)
	// Output:
	// mail: 1 idle, at most 10
	// conn 1: closed
}

func ExamplePool_Lease() {
	p, err := pool.New[*exConn](context.Background(), &exServer{}, pool.Options[*exConn]{MaxSize: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	send := func(ctx context.Context, msg string) error {
		l, err := p.Lease(ctx)
		if err != nil {
			return err
		}
		defer l.Release()
		return l.Value().Send(msg)
	}
	for _, msg := range []string{"hello", "again"} {
		if err := send(context.Background(), msg); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// conn 1: hello
	// conn 1: again
	// conn 1: closed
}

func ExamplePool_TryLease() {
	ctx := context.Background()
	p, err := pool.New[*exConn](ctx, &exServer{}, pool.Options[*exConn]{Name: "mail", MaxSize: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	busy, err := p.Lease(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer busy.Release()

	// TryLease never waits: with every item leased it fails at once.
	_, err = p.TryLease(ctx)
	if errors.Is(err, pool.ErrExhausted) {
		fmt.Println("no connection free, try later:", err)
	}
	// Output:
	// no connection free, try later: pool: exhausted: pool "mail": every item is in use (MaxSize 1)
	// conn 1: closed
}

// A pool that is too small and a caller that ran out of time are different
// problems, and Lease tells them apart: ErrLeaseTimeout when the pool's
// LeaseTimeout elapsed, the caller's ctx.Err() when its ctx ended.
func ExampleErrLeaseTimeout() {
	p, err := pool.New(context.Background(), &sessions{}, pool.Options[*session]{
		Name:         "api",
		MaxSize:      1,
		LeaseTimeout: 20 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	busy, err := p.Lease(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer busy.Release()

	explain := func(err error) string {
		switch {
		case errors.Is(err, pool.ErrLeaseTimeout):
			return "the pool is too small, or leases are held too long"
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			return "the caller gave up: " + err.Error()
		}
		return err.Error()
	}

	_, err = p.Lease(context.Background()) // waits LeaseTimeout for the busy item
	fmt.Println(explain(err))

	ctx, cancel := context.WithDeadline(context.Background(), time.Now()) // a request out of time
	defer cancel()
	_, err = p.Lease(ctx)
	fmt.Println(explain(err))

	s := p.Stats()
	fmt.Printf("timeouts: %d, canceled: %d\n", s.Timeouts, s.Canceled)
	// Output:
	// the pool is too small, or leases are held too long
	// the caller gave up: context deadline exceeded
	// timeouts: 1, canceled: 1
}

// exPinger is a Preparer: it finds connections that the server dropped and
// reconnects them.
type exPinger struct{}

func (exPinger) IsReady(ctx context.Context, c *exConn) (bool, error) {
	return c.epoch == c.server.epoch, nil // a real one would ping, within ctx
}

func (exPinger) Prepare(ctx context.Context, c *exConn) error {
	fmt.Printf("conn %d: reconnecting\n", c.id)
	c.epoch = c.server.epoch
	return nil
}

func ExamplePreparer() {
	ctx := context.Background()
	srv := &exServer{}
	p, err := pool.New[*exConn](ctx, srv, pool.Options[*exConn]{
		MaxSize:            4,
		Preparer:           exPinger{},
		PreparationTimeout: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	send := func(msg string) {
		l, err := p.Lease(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer l.Release()
		if err := l.Value().Send(msg); err != nil {
			log.Fatal(err)
		}
	}
	send("hello")
	srv.restart() // drops the idle connection
	send("after the restart")
	// Output:
	// conn 1: hello
	// conn 1: reconnecting
	// conn 1: after the restart
	// conn 1: closed
}

func ExamplePool_Shutdown() {
	p, err := pool.New[*exConn](context.Background(), &exServer{}, pool.Options[*exConn]{MaxSize: 4})
	if err != nil {
		log.Fatal(err)
	}
	l, err := p.Lease(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		defer l.Release() // the pool is closed by now or soon: the connection is closed
		_ = l.Value().Send("last message")
	}()

	// Wait for the lease to end, but not forever: a leaked lease would hold
	// Shutdown until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("shut down")
	// Output:
	// conn 1: last message
	// conn 1: closed
	// shut down
}

func ExampleOptions_UnmarshalJSON() {
	// A configuration file with settings shared by every pool, and a
	// section per pool that overrides some of them.
	const config = `{
		"shared": {"MaxSize": 20, "LeaseTimeout": "30s", "IdleTimeout": "5m"},
		"pools": {
			"mail": {"Name": "mail", "MaxSize": 4, "LeaseTimeout": "2s"}
		}
	}`
	var file struct {
		Shared json.RawMessage
		Pools  map[string]json.RawMessage
	}
	if err := json.Unmarshal([]byte(config), &file); err != nil {
		log.Fatal(err)
	}

	// Decode the shared section, then the pool's own on top of it.
	var opts pool.Options[*exConn]
	for _, section := range []json.RawMessage{file.Shared, file.Pools["mail"]} {
		if err := json.Unmarshal(section, &opts); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(opts.Name, opts.MaxSize, opts.LeaseTimeout, opts.IdleTimeout)
	// Output: mail 4 2s 5m0s
}

// Decoding is strict: a typo in a configuration file is an error that
// names the key, not a setting silently ignored.
func ExampleOptions_UnmarshalJSON_strict() {
	var opts pool.Options[*exConn]
	err := json.Unmarshal([]byte(`{"MaxSzie": 20}`), &opts)
	fmt.Println(err)
	fmt.Println("errors.Is(err, pool.ErrInvalidOptions):", errors.Is(err, pool.ErrInvalidOptions))
	// Output:
	// pool: invalid options: unknown key "MaxSzie" (did you mean "MaxSize"?)
	// errors.Is(err, pool.ErrInvalidOptions): true
}

// exForget takes a lease and never ends it: a leak.
func exForget(p *pool.Pool[*exConn]) {
	l, err := p.Lease(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	_ = l.Value().Send("and then forgot to release")
}

func ExampleOptions_onLeak() {
	leaks := make(chan pool.LeakReport, 1)
	p, err := pool.New[*exConn](context.Background(), &exServer{}, pool.Options[*exConn]{
		Name:            "mail",
		OnLeak:          func(r pool.LeakReport) { leaks <- r },
		TrackLeaseSites: true, // for the stack in the report
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	exForget(p)

	// The garbage collector finds the leaked lease. A service lets it run
	// on its own; here it is prompted, until the report comes.
	var r pool.LeakReport
	for deadline := time.Now().Add(10 * time.Second); r.Pool == "" && time.Now().Before(deadline); {
		runtime.GC()
		select {
		case r = <-leaks:
		case <-time.After(time.Millisecond):
		}
	}
	taker, _, _ := strings.Cut(r.Stack, "\n")
	fmt.Printf("pool %s: a lease leaked, taken by %s\n", r.Pool, taker)
	fmt.Println("leaked:", p.Stats().Leaked)
	// Output:
	// conn 1: and then forgot to release
	// pool mail: a lease leaked, taken by github.com/msl-armory/pool_test.exForget
	// leaked: 1
}

func ExampleCheckFunc() {
	ctx := context.Background()
	srv := &exServer{}
	// A check that cannot repair a connection: one that fails it is closed
	// and the lease goes on with another.
	ping := pool.CheckFunc[*exConn](func(ctx context.Context, c *exConn) error {
		if c.epoch != c.server.epoch { // a real one would ping, within ctx
			return errors.New("connection reset by peer")
		}
		return nil
	})
	p, err := pool.New[*exConn](ctx, srv, pool.Options[*exConn]{
		MaxSize:            4,
		Preparer:           ping,
		PreparationTimeout: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	send := func(msg string) {
		l, err := p.Lease(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer l.Release()
		exDestroyed(p) // one that failed its check is closed on the pool's own goroutine
		if err := l.Value().Send(msg); err != nil {
			log.Fatal(err)
		}
	}
	send("hello")
	srv.restart() // drops the idle connection
	send("after the restart")
	fmt.Println("failed checks:", p.Stats().PrepareFailed)
	// Output:
	// conn 1: hello
	// conn 1: closed
	// conn 2: after the restart
	// failed checks: 1
	// conn 2: closed
}
