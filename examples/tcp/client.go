package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// client is the pooled item: one connection to the line server. It keeps
// the server's address so that it can be redialed in place: the pool holds
// the *client, and the Preparer swaps the connection inside it, so a lease
// never sees the difference.
//
// A client is used by one goroutine at a time: the one holding its lease,
// or the pool while it prepares or destroys it.
type client struct {
	addr string
	conn net.Conn      // nil after Close or a failed redial
	r    *bufio.Reader // reads conn
}

var errNotConnected = errors.New("client: not connected")

// connect dials the server, bounded by ctx.
func (c *client) connect(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	c.conn, c.r = conn, bufio.NewReader(conn)
	return nil
}

// redial closes the connection and dials a new one in its place.
func (c *client) redial(ctx context.Context) error {
	_ = c.Close() // the old connection is dead already: its error says nothing
	return c.connect(ctx)
}

// do sends one request line and returns the reply line, within ctx's
// deadline.
func (c *client) do(ctx context.Context, req string) (string, error) {
	if c.conn == nil {
		return "", errNotConnected
	}
	if dl, ok := ctx.Deadline(); ok {
		if err := c.conn.SetDeadline(dl); err != nil {
			return "", err
		}
		// Clear it again: left to expire, it would fail the Preparer's
		// check on the next lease.
		defer c.conn.SetDeadline(time.Time{})
	}
	if _, err := io.WriteString(c.conn, req+"\n"); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// Close closes the connection. It makes client an io.Closer, so the pool's
// default Destroy closes it.
func (c *client) Close() error {
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn, c.r = nil, nil
	return err
}

// dialer is the pool's Factory. It also keeps every client it made, for
// waitHungUp only.
type dialer struct {
	addr  string
	dials atomic.Int64 // dials that reached the server

	mu   sync.Mutex
	made []*client
}

func (d *dialer) Create(ctx context.Context) (*client, error) {
	c := &client{addr: d.addr}
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	d.dials.Add(1)
	d.mu.Lock()
	d.made = append(d.made, c)
	d.mu.Unlock()
	return c, nil
}

// waitHungUp waits until every client d made has seen the server hang up.
//
// The server's close reaches the client's end asynchronously: at once on a
// Linux loopback, a moment later on other systems. A real program has
// minutes of idle time between the two; the tour waits so that its output is
// the same on every run. Looking at pooled clients from outside a lease is
// safe here only because none is leased while the tour waits.
func (d *dialer) waitHungUp(ctx context.Context) error {
	d.mu.Lock()
	made := append([]*client(nil), d.made...)
	d.mu.Unlock()
	for _, c := range made {
		for !c.peerGone() {
			select {
			case <-ctx.Done():
				return errors.New("a client did not see the server hang up")
			case <-time.After(time.Millisecond):
			}
		}
	}
	return nil
}

// redialer is the pool's Preparer: on a lease it finds a client whose server
// hung up while the client sat idle, and redials it in place.
type redialer struct {
	redials atomic.Int64
}

// IsReady reports whether the connection is still open. The check does not
// wait and costs no round trip, so the pool can run it on every lease.
func (*redialer) IsReady(_ context.Context, c *client) (bool, error) {
	return !c.peerGone(), nil
}

// Prepare redials. When the dial fails, the pool destroys the client and
// goes on with the next idle one or a fresh one (whose dial error the
// caller then gets).
func (r *redialer) Prepare(ctx context.Context, c *client) error {
	if err := c.redial(ctx); err != nil {
		return err
	}
	r.redials.Add(1)
	return nil
}
