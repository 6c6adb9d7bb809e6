//go:build unix

// The TCP integration tests: a pool of real loopback connections to a line
// server, taken through the phases of examples/tcp (reuse; the server drops
// every idle connection; the server is down; the server is back) and then
// loaded by 200 clients at once. Unix only: the readiness check reads the
// socket without blocking through syscall.

package pool_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/msl-armory/pool"
)

// tcpWait bounds every wait and every request of these tests; on a loopback
// none comes near it.
const tcpWait = 10 * time.Second

// tcpServer is a loopback line server: it answers "req:<id>" with
// "reply:<id>", counts the connections it holds open and the most it held
// at once, and can drop them all, stop and start again on the same address.
type tcpServer struct {
	addr   string
	served atomic.Int64 // requests answered (counted as the reply goes out)

	mu             sync.Mutex
	ln             net.Listener // nil while stopped
	loop           chan struct{}
	conns          map[net.Conn]chan struct{} // each with its handler's done
	accepted, peak int
}

// tcpStartServer starts a server on a free loopback port; the test's
// cleanup stops it.
func tcpStartServer(t *testing.T) *tcpServer {
	t.Helper()
	s := &tcpServer{addr: "127.0.0.1:0", conns: map[net.Conn]chan struct{}{}}
	require.NoError(t, s.start())
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *tcpServer) start() error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ln, s.addr, s.loop = ln, ln.Addr().String(), make(chan struct{})
	loop := s.loop
	s.mu.Unlock()
	go func() {
		defer close(loop)
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by stop
			}
			s.mu.Lock()
			if s.ln != ln {
				s.mu.Unlock()
				c.Close()
				return
			}
			done := make(chan struct{})
			s.conns[c] = done
			s.accepted++
			s.peak = max(s.peak, len(s.conns))
			s.mu.Unlock()
			go s.serve(c, done)
		}
	}()
	return nil
}

func (s *tcpServer) serve(c net.Conn, done chan struct{}) {
	defer close(done)
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "req:")
		if !ok {
			return // not our protocol: hang up
		}
		s.served.Add(1) // before the reply, so a client that has it sees the count
		if _, err := io.WriteString(c, "reply:"+id+"\n"); err != nil {
			return
		}
	}
}

// dropAll closes every connection and returns how many, once their
// handlers have ended.
func (s *tcpServer) dropAll() int {
	s.mu.Lock()
	var dones []chan struct{}
	for c, done := range s.conns {
		c.Close()
		dones = append(dones, done)
	}
	s.mu.Unlock()
	for _, done := range dones {
		<-done
	}
	return len(dones)
}

// stop closes the listener, then every connection; a stopped server
// refuses connections. It is idempotent.
func (s *tcpServer) stop() int {
	s.mu.Lock()
	ln, loop := s.ln, s.loop
	s.ln = nil
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
		<-loop
	}
	return s.dropAll()
}

// counts returns the connections open now, accepted since the start, and
// the most open at once.
func (s *tcpServer) counts() (open, accepted, peak int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns), s.accepted, s.peak
}

// tcpClient is the pooled item: a connection that the Preparer can redial in
// place, so that the pool keeps the same item.
type tcpClient struct {
	addr  string
	conn  net.Conn // nil after Close or a failed redial
	r     *bufio.Reader
	dials int
	inUse atomic.Bool // set by the load test while a lease holds it
}

func (c *tcpClient) connect(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	c.conn, c.r = conn, bufio.NewReader(conn)
	c.dials++
	return nil
}

// do sends one request and returns the reply, within tcpWait.
func (c *tcpClient) do(req string) (string, error) {
	if c.conn == nil {
		return "", errors.New("not connected")
	}
	if err := c.conn.SetDeadline(time.Now().Add(tcpWait)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c.conn, req+"\n"); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// gone reports, without waiting, that the server hung up (or sent what
// nobody asked for): one non-blocking read on the socket. A read deadline
// already past would not do: net.Conn fails such a Read before it reaches
// the socket.
func (c *tcpClient) gone() bool {
	if c.conn == nil || c.r.Buffered() > 0 {
		return true
	}
	rc, err := c.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return true
	}
	var b [1]byte
	var readErr error
	if err := rc.Read(func(fd uintptr) bool {
		for {
			if _, readErr = syscall.Read(int(fd), b[:]); readErr != syscall.EINTR {
				return true
			}
		}
	}); err != nil {
		return true
	}
	return readErr != syscall.EAGAIN && readErr != syscall.EWOULDBLOCK
}

func (c *tcpClient) Close() error {
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

// tcpFactory dials clients and keeps them, so a test can wait for them to
// see the server hang up.
type tcpFactory struct {
	addr  string
	mu    sync.Mutex
	made  []*tcpClient
	dials atomic.Int64
}

func (f *tcpFactory) Create(ctx context.Context) (*tcpClient, error) {
	c := &tcpClient{addr: f.addr}
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	f.dials.Add(1)
	f.mu.Lock()
	f.made = append(f.made, c)
	f.mu.Unlock()
	return c, nil
}

func (f *tcpFactory) clients() []*tcpClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*tcpClient(nil), f.made...)
}

// requireAllGone waits until every client made so far has seen the server
// hang up. The server's close reaches a client asynchronously (at once on a
// Linux loopback, not by any promise); nothing is leased meanwhile, so
// looking at the idle clients races with no one.
func (f *tcpFactory) requireAllGone(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(tcpWait)
	for _, c := range f.clients() {
		for !c.gone() {
			require.True(t, time.Now().Before(deadline), "a client never saw the server hang up")
			time.Sleep(time.Millisecond)
		}
	}
}

// tcpRedialer is the Preparer: a client whose server hung up is redialed in
// place.
type tcpRedialer struct{ redials atomic.Int64 }

func (*tcpRedialer) IsReady(_ context.Context, c *tcpClient) (bool, error) { return !c.gone(), nil }

func (r *tcpRedialer) Prepare(ctx context.Context, c *tcpClient) error {
	_ = c.Close()
	if err := c.connect(ctx); err != nil {
		return err
	}
	r.redials.Add(1)
	return nil
}

// tcpNewPool returns a pool of clients of srv, closed by the test's cleanup
// (before the server stops).
func tcpNewPool(t *testing.T, srv *tcpServer, maxSize int) (*pool.Pool[*tcpClient], *tcpFactory, *tcpRedialer) {
	t.Helper()
	f := &tcpFactory{addr: srv.addr}
	r := &tcpRedialer{}
	p, err := pool.New[*tcpClient](context.Background(), f, pool.Options[*tcpClient]{
		Name:               "tcp",
		MaxSize:            maxSize,
		LeaseTimeout:       tcpWait,
		CreateTimeout:      tcpWait,
		PreparationTimeout: tcpWait,
		Preparer:           r,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, f, r
}

// tcpRequest leases a client, sends req:<id> and checks the reply.
func tcpRequest(t *testing.T, p *pool.Pool[*tcpClient], id int) {
	t.Helper()
	l, err := p.Lease(context.Background())
	require.NoError(t, err)
	defer l.Release()
	reply, err := l.Value().do(fmt.Sprintf("req:%d", id))
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("reply:%d", id), reply)
}

// tcpHoldThree takes three leases at once, one request on each, and
// releases them; it returns the clients.
func tcpHoldThree(t *testing.T, p *pool.Pool[*tcpClient], firstID int) []*tcpClient {
	t.Helper()
	var cs []*tcpClient
	for i := range 3 {
		l, err := p.Lease(context.Background())
		require.NoError(t, err)
		defer l.Release()
		reply, err := l.Value().do(fmt.Sprintf("req:%d", firstID+i))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("reply:%d", firstID+i), reply)
		cs = append(cs, l.Value())
	}
	return cs
}

func TestTCPServerDropsDiesAndComesBack(t *testing.T) {
	srv := tcpStartServer(t)
	p, f, prep := tcpNewPool(t, srv, 3)

	// 1. Reuse: requests one at a time need one connection; three at once
	// need three; after that no request dials.
	for i := range 10 {
		tcpRequest(t, p, i)
	}
	_, accepted, _ := srv.counts()
	assert.Equal(t, 1, accepted, "ten requests one at a time share one connection")
	held := tcpHoldThree(t, p, 100)
	assert.Len(t, tcpUnique(held), 3, "three leases at once hold three clients")
	for i := range 20 {
		tcpRequest(t, p, 200+i)
	}
	open, accepted, _ := srv.counts()
	assert.Equal(t, 3, accepted, "no request dialed after three connections existed")
	assert.Equal(t, 3, open)
	s := p.Stats()
	assert.Equal(t, uint64(3), s.Created)
	assert.Equal(t, uint64(0), s.Destroyed)

	// 2. The server drops every idle connection: the next leases get healthy
	// clients, redialed in place, without an error.
	require.Equal(t, 3, srv.dropAll())
	f.requireAllGone(t)
	held = tcpHoldThree(t, p, 300) // fails the test on any lease or request error
	assert.ElementsMatch(t, f.clients(), held, "the same three clients, not new ones")
	for _, c := range held {
		assert.Equal(t, 2, c.dials, "each client dialed once and was redialed once")
	}
	assert.Equal(t, int64(3), prep.redials.Load())
	open, accepted, _ = srv.counts()
	assert.Equal(t, 6, accepted)
	assert.Equal(t, 3, open)
	s = p.Stats()
	assert.Equal(t, uint64(3), s.Created, "redialing in place creates no item")
	assert.Equal(t, uint64(0), s.Destroyed)
	assert.Equal(t, uint64(0), s.PrepareFailed)

	// 3. The server is down: a lease finds the idle clients closed, their
	// redials refused, and returns the dial error of a fresh client,
	// without waiting for a permit. So does the next one.
	require.Equal(t, 3, srv.stop())
	f.requireAllGone(t)
	for i := range 2 {
		_, err := p.Lease(context.Background())
		require.Error(t, err, "lease %d with the server down", i)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED)
		var opErr *net.OpError
		if assert.ErrorAs(t, err, &opErr) {
			assert.Equal(t, "dial", opErr.Op)
		}
		assert.Contains(t, err.Error(), `pool "tcp": create item: dial tcp `)
		assert.NotErrorIs(t, err, pool.ErrLeaseTimeout)
	}
	s = p.Stats()
	assert.Equal(t, uint64(3), s.PrepareFailed, "the three idle clients failed their redial")
	assert.Equal(t, uint64(3), s.Destroyed)
	assert.Equal(t, 0, s.ItemsAllocated)
	assert.Equal(t, 0, s.ActiveLeases, "a failed lease returns its permit")
	assert.Equal(t, uint64(0), s.Waits, "no lease waited: each failed with the dial")

	// 4. The server is back on the same address: leases dial afresh.
	require.NoError(t, srv.start())
	for i := range 5 {
		tcpRequest(t, p, 400+i)
	}
	s = p.Stats()
	assert.Equal(t, uint64(4), s.Created, "one fresh client serves requests one at a time")
	assert.Equal(t, uint64(3), s.Destroyed)
	_, accepted, _ = srv.counts()
	assert.Equal(t, 7, accepted)

	require.NoError(t, p.Close())
	assert.Equal(t, uint64(4), p.Stats().Destroyed, "Close destroyed the idle client")
}

// TestTCPLoad sends 200 clients x 50 requests through a pool of 8: the
// server never holds more than 8 connections, no connection serves two
// leases at once, and every request gets its own reply.
func TestTCPLoad(t *testing.T) {
	const clients, perClient, maxSize = 200, 50, 8
	srv := tcpStartServer(t)
	p, f, prep := tcpNewPool(t, srv, maxSize)

	var overCap, shared, wrong atomic.Int64
	errs := make(chan error, clients)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range clients {
		wg.Go(func() {
			<-start
			for i := range perClient {
				id := g*perClient + i
				l, err := p.Lease(context.Background())
				if err != nil {
					errs <- err
					return
				}
				c := l.Value()
				if !c.inUse.CompareAndSwap(false, true) {
					shared.Add(1)
				}
				if open, _, _ := srv.counts(); open > maxSize {
					overCap.Add(1)
				}
				reply, err := c.do(fmt.Sprintf("req:%d", id))
				c.inUse.Store(false)
				if err != nil {
					l.Discard()
					errs <- err
					return
				}
				l.Release()
				if reply != fmt.Sprintf("reply:%d", id) {
					wrong.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}

	_, accepted, peak := srv.counts()
	assert.LessOrEqual(t, peak, maxSize, "the server held more than MaxSize connections at once")
	assert.Zero(t, overCap.Load(), "a lease saw the server hold more than MaxSize connections")
	assert.Zero(t, shared.Load(), "a connection was leased twice at once")
	assert.Zero(t, wrong.Load(), "a request got another request's reply")
	assert.Equal(t, int64(clients*perClient), srv.served.Load())
	assert.LessOrEqual(t, accepted, maxSize, "healthy connections are never redialed")
	assert.Equal(t, int64(accepted), f.dials.Load())
	assert.Zero(t, prep.redials.Load(), "the readiness check called a healthy connection dead")

	s := p.Stats()
	assert.Equal(t, uint64(clients*perClient), s.Leases)
	assert.Equal(t, uint64(0), s.Destroyed)
	assert.Equal(t, 0, s.ActiveLeases)
}

// tcpUnique returns the distinct clients of cs.
func tcpUnique(cs []*tcpClient) map[*tcpClient]bool {
	m := map[*tcpClient]bool{}
	for _, c := range cs {
		m[c] = true
	}
	return m
}
