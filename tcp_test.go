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
	"log/slog"
	"net"
	"os"
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
	silent         map[string]bool            // clients (by address) it no longer answers
	accepted, peak int
}

// tcpStartServer starts a server on a free loopback port; the test's
// cleanup stops it.
func tcpStartServer(t *testing.T) *tcpServer {
	t.Helper()
	s := &tcpServer{addr: "127.0.0.1:0", conns: map[net.Conn]chan struct{}{}, silent: map[string]bool{}}
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
		if s.isSilent(c) {
			_, _ = io.Copy(io.Discard, c) // reads on and answers nothing, until hung up
			return
		}
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

// silence makes the server stop answering the client at addr (its local
// address), as a peer that hangs or is cut off does: from its next line on
// it reads what comes and answers nothing, nor hangs up.
func (s *tcpServer) silence(addr string) {
	s.mu.Lock()
	s.silent[addr] = true
	s.mu.Unlock()
}

func (s *tcpServer) isSilent(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.silent[c.RemoteAddr().String()]
}

// hangUp closes the connection of the client at addr, once its handler has
// ended, and reports whether there was one.
func (s *tcpServer) hangUp(addr string) bool {
	s.mu.Lock()
	var done chan struct{}
	for c, d := range s.conns {
		if c.RemoteAddr().String() == addr {
			c.Close()
			done = d
		}
	}
	s.mu.Unlock()
	if done == nil {
		return false
	}
	<-done
	return true
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
func (c *tcpClient) do(req string) (string, error) { return c.doWithin(req, tcpWait) }

// doWithin sends one request and returns the reply, within d: the
// request's own deadline.
func (c *tcpClient) doWithin(req string, d time.Duration) (string, error) {
	if c.conn == nil {
		return "", errors.New("not connected")
	}
	if err := c.conn.SetDeadline(time.Now().Add(d)); err != nil {
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
	// The failed clients' Destroy calls run on the pool's goroutines, each
	// holding its place under MaxSize until it returns.
	require.Eventually(t, func() bool { return p.Stats().Destroying == 0 }, tcpWait, time.Millisecond)
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

// tcpSilentPeer accepts connections and never reads from them, as a peer
// that hangs, or that a partition cut off after the handshake, does: a
// write to one of its connections blocks once the socket buffers between
// are full, and fails only once the peer hangs up.
type tcpSilentPeer struct {
	ln       net.Listener
	loop     chan struct{}
	mu       sync.Mutex
	conns    []net.Conn
	accepted int
}

// tcpStartSilentPeer starts a silent peer on a free loopback port. The
// test stops it (stop) before it closes a pool of its connections.
func tcpStartSilentPeer(t *testing.T) *tcpSilentPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &tcpSilentPeer{ln: ln, loop: make(chan struct{})}
	go func() {
		defer close(s.loop)
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by stop
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.accepted++
			s.mu.Unlock()
		}
	}()
	return s
}

// awaitAccepted waits until the peer has accepted n connections: a dial
// returns once the kernel has queued the connection, before Accept takes
// it, and hangUp closes only what Accept took.
func (s *tcpSilentPeer) awaitAccepted(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.accepted >= n
	}, tcpWait, time.Millisecond, "the peer never accepted %d connections", n)
}

func (s *tcpSilentPeer) addr() string { return s.ln.Addr().String() }

// hangUp closes every connection the peer has accepted so far (it goes on
// accepting): the writes blocked on them fail.
func (s *tcpSilentPeer) hangUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// stop closes the listener and hangs up. It is idempotent.
func (s *tcpSilentPeer) stop() {
	s.ln.Close()
	<-s.loop
	s.hangUp()
}

// tcpGoodbyes is a Destroy that says goodbye without a deadline, as a
// careless client does: it writes a goodbye, a mebibyte at a time, until
// the write fails. Against a silent peer it blocks once the socket buffers
// are full, and only the peer's hanging up ends it.
type tcpGoodbyes struct{ running atomic.Int64 }

var tcpGoodbye = make([]byte, 1<<20)

func (g *tcpGoodbyes) say(c net.Conn) error {
	g.running.Add(1)
	defer g.running.Add(-1)
	defer c.Close()
	for {
		if _, err := c.Write(tcpGoodbye); err != nil {
			return err
		}
	}
}

// awaitEnd waits until no goodbye is being said: every Destroy call has
// returned, also those the pool left to finish on their own.
func (g *tcpGoodbyes) awaitEnd(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return g.running.Load() == 0 }, tcpWait, time.Millisecond,
		"a Destroy call never returned")
}

// tcpLog is a Logger's output, safe for the pool's goroutines.
type tcpLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *tcpLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *tcpLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// tcpSilentPool returns a pool of connections to peer whose Destroy is
// g.say. The test's cleanup stops the peer first, so that no Destroy
// blocks the pool's Close, then closes the pool and waits until every
// goodbye has ended, so that no goroutine outlives the test.
func tcpSilentPool(t *testing.T, peer *tcpSilentPeer, g *tcpGoodbyes, opts pool.Options[net.Conn]) *pool.Pool[net.Conn] {
	t.Helper()
	dial := pool.FactoryFunc[net.Conn](func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", peer.addr())
	})
	opts.Name, opts.LeaseTimeout, opts.CreateTimeout, opts.Destroy = "silent", tcpWait, tcpWait, g.say
	p, err := pool.New(context.Background(), dial, opts)
	require.NoError(t, err)
	t.Cleanup(func() { g.awaitEnd(t) })
	t.Cleanup(func() { _ = p.Close() })
	t.Cleanup(peer.stop)
	return p
}

// tcpLeaseAll leases n connections at once, each Lease waiting (within
// LeaseTimeout) for a room if it must.
func tcpLeaseAll(t *testing.T, p *pool.Pool[net.Conn], n int) []pool.Lease[net.Conn] {
	t.Helper()
	ls := make([]pool.Lease[net.Conn], n)
	for i := range ls {
		var err error
		ls[i], err = p.Lease(context.Background())
		require.NoError(t, err, "lease %d of %d at once", i+1, n)
	}
	return ls
}

// TestDestroyTimeoutSilentPeer: a Destroy that blocks on a silent peer
// holds its item's room against MaxSize until it returns, or until
// Options.DestroyTimeout passes (the doc comments of Options.Destroy and
// Options.DestroyTimeout; "Lifecycle of an item": Destroyed). With the
// timeout, the pool serves MaxSize leases at once again as soon as it has
// passed, counts the timed-out calls as destroyed and failed, says so at
// Warn, and Close waits no longer for them; without it, the rooms stay
// taken until the peer hangs up.
func TestDestroyTimeoutSilentPeer(t *testing.T) {
	const maxSize = 4
	t.Run("DestroyTimeout", func(t *testing.T) {
		const destroyTimeout = 50 * time.Millisecond
		peer := tcpStartSilentPeer(t)
		var g tcpGoodbyes
		log := &tcpLog{}
		p := tcpSilentPool(t, peer, &g, pool.Options[net.Conn]{
			MaxSize:        maxSize,
			DestroyTimeout: destroyTimeout,
			Logger:         slog.New(slog.NewTextHandler(log, nil)),
		})

		leased := tcpLeaseAll(t, p, maxSize)
		discarding := time.Now() // before any Destroy call, or its timeout, starts
		for _, l := range leased {
			l.Discard()
		}
		assert.Equal(t, maxSize, p.Stats().Destroying, "each discarded item counts until its Destroy ends")

		// Every room is held by a Destroy that cannot return while the peer
		// is silent, so these leases wait for the timeouts to free them.
		ls := tcpLeaseAll(t, p, maxSize)
		assert.GreaterOrEqual(t, time.Since(discarding), destroyTimeout,
			"a room came back before its Destroy's DestroyTimeout")
		s := p.Stats()
		assert.Equal(t, uint64(maxSize), s.Destroyed, "a timed-out Destroy counts as destroyed: %+v", s)
		assert.Equal(t, uint64(maxSize), s.DestroyErrors, "and as failed: %+v", s)
		assert.Zero(t, s.Destroying, "the pool waits for no timed-out Destroy: %+v", s)
		assert.Equal(t, uint64(2*maxSize), s.Created, "fresh connections fill the rooms: %+v", s)
		// A Destroy's timeout runs from before the call, so a room may come
		// back before its goodbye has begun: they all begin, and none ends.
		require.Eventually(t, func() bool { return g.running.Load() == maxSize }, tcpWait, time.Millisecond,
			"the timed-out calls are left to finish on their own")
		warns := 0
		for line := range strings.Lines(log.String()) {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "DestroyTimeout") {
				warns++
			}
		}
		assert.Equal(t, maxSize, warns, "one Warn naming DestroyTimeout per timed-out Destroy; the log:\n%s", log)

		// Close waits for the Destroy calls of the idle items, each for at
		// most DestroyTimeout, and returns their errors: the peer is still
		// silent, so every one of them times out.
		for _, l := range ls {
			l.Release()
		}
		closed := make(chan error, 1)
		go func() { closed <- p.Close() }()
		select {
		case err := <-closed:
			require.Error(t, err)
			assert.Contains(t, err.Error(), "DestroyTimeout")
		case <-time.After(tcpWait):
			t.Fatal("Close waited for a Destroy past DestroyTimeout")
		}
		require.Eventually(t, func() bool { return g.running.Load() == 2*maxSize }, tcpWait, time.Millisecond,
			"every goodbye blocks until the peer hangs up")
	})

	t.Run("none", func(t *testing.T) {
		peer := tcpStartSilentPeer(t)
		var g tcpGoodbyes
		p := tcpSilentPool(t, peer, &g, pool.Options[net.Conn]{MaxSize: maxSize})

		for _, l := range tcpLeaseAll(t, p, maxSize) {
			l.Discard()
		}
		// No Destroy can return while the peer is silent: the rooms stay
		// taken, for as long as that lasts.
		s := p.Stats()
		assert.Equal(t, maxSize, s.Destroying, "%+v", s)
		assert.Equal(t, maxSize, s.ActiveLeases, "%+v", s)
		_, err := p.TryLease(context.Background())
		assert.ErrorIs(t, err, pool.ErrExhausted, "the rooms of the Destroy calls under way count against MaxSize")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = p.Lease(ctx)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, "no room came back while the peer was silent")
		s = p.Stats()
		assert.Equal(t, maxSize, s.Destroying, "%+v", s)
		assert.Zero(t, s.Destroyed, "%+v", s)

		// The peer hangs up: the goodbyes fail, and the rooms come back.
		peer.awaitAccepted(t, maxSize)
		peer.hangUp()
		ls := tcpLeaseAll(t, p, maxSize)
		g.awaitEnd(t)
		s = p.Stats()
		assert.Equal(t, uint64(maxSize), s.Destroyed, "%+v", s)
		assert.Equal(t, uint64(maxSize), s.DestroyErrors, "every goodbye failed with the hang-up: %+v", s)
		assert.Zero(t, s.Destroying, "%+v", s)
		assert.Equal(t, maxSize, s.ActiveLeases, "%+v", s)
		for _, l := range ls {
			l.Release()
		}
	})
}

// tcpQuits is a Destroy that says goodbye as many clients do: "quit", then
// a wait, with no deadline, for the server to hang up. Against a server
// that no longer answers it blocks until that server hangs up.
type tcpQuits struct{ running atomic.Int64 }

func (q *tcpQuits) say(c *tcpClient) error {
	q.running.Add(1)
	defer q.running.Add(-1)
	defer c.Close()
	if c.conn == nil {
		return nil
	}
	if err := c.conn.SetDeadline(time.Time{}); err != nil { // the request's deadline may have passed
		return err
	}
	if _, err := io.WriteString(c.conn, "quit\n"); err != nil {
		return err
	}
	if _, err := c.r.ReadString('\n'); err != io.EOF {
		return fmt.Errorf("quit: the server did not hang up: %v", err)
	}
	return nil
}

// TestPeerGoesSilentMidLease: the server stops answering a connection
// while a lease holds it. The lease's request fails on its own deadline
// and the caller discards the lease; the connection's Destroy, a goodbye
// that waits for the server without a deadline, blocks. It runs on the
// pool's own goroutine and holds only its own room (the doc comment of
// Options.Destroy; "Lifecycle of an item": Destroyed): Discard returns at
// once, a fresh connection replaces the silent one in the other room, and
// no lease waits, while the Destroy blocks nor after it has ended.
func TestPeerGoesSilentMidLease(t *testing.T) {
	const maxSize = 2
	srv := tcpStartServer(t)
	var quits tcpQuits
	p, err := pool.New[*tcpClient](context.Background(), &tcpFactory{addr: srv.addr}, pool.Options[*tcpClient]{
		Name:          "tcp",
		MaxSize:       maxSize,
		LeaseTimeout:  tcpWait,
		CreateTimeout: tcpWait,
		Destroy:       quits.say,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	t.Cleanup(func() { srv.stop() }) // first: a hung-up server ends every goodbye, so Close cannot block

	l, err := p.Lease(context.Background())
	require.NoError(t, err)
	silent := l.Value()
	reply, err := silent.do("req:1")
	require.NoError(t, err)
	require.Equal(t, "reply:1", reply)

	addr := silent.conn.LocalAddr().String()
	srv.silence(addr)
	_, err = silent.doWithin("req:2", 50*time.Millisecond)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the request fails on its own deadline")
	discarded := make(chan struct{})
	go func() {
		defer close(discarded)
		l.Discard() // returns while the goodbye waits on the pool's goroutine
	}()
	select {
	case <-discarded:
	case <-time.After(tcpWait):
		t.Fatal("Discard waited for the silent connection's Destroy")
	}
	require.Eventually(t, func() bool { return quits.running.Load() == 1 }, tcpWait, time.Millisecond, "Destroy never began")

	// The goodbye cannot end while the server is silent: everything below
	// happens while it blocks. TryLease never waits, so every one of these
	// leases is served by a room other than the silent one's.
	for i := range 20 {
		l, err := p.TryLease(context.Background())
		require.NoError(t, err, "lease %d while the silent connection's Destroy blocks", i)
		assert.NotSame(t, silent, l.Value())
		reply, err := l.Value().do(fmt.Sprintf("req:%d", 100+i))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("reply:%d", 100+i), reply)
		l.Release()
	}
	l1, err := p.TryLease(context.Background())
	require.NoError(t, err)
	_, err = p.TryLease(context.Background())
	assert.ErrorIs(t, err, pool.ErrExhausted, "the room of the Destroy under way counts against MaxSize")
	l1.Release()
	s := p.Stats()
	assert.Equal(t, 1, s.Destroying, "%+v", s)
	assert.Equal(t, uint64(2), s.Created, "one fresh connection replaced the silent one: %+v", s)
	assert.Equal(t, int64(1), quits.running.Load(), "the goodbye still blocks")

	// The server hangs up on the silent connection: the goodbye ends, and
	// MaxSize leases are served at once again.
	require.True(t, srv.hangUp(addr))
	require.Eventually(t, func() bool { return p.Stats().Destroying == 0 }, tcpWait, time.Millisecond)
	assert.Zero(t, quits.running.Load())
	var held []pool.Lease[*tcpClient]
	for i := range maxSize {
		l, err := p.TryLease(context.Background())
		require.NoError(t, err, "lease %d of %d at once, once the goodbye has ended", i+1, maxSize)
		reply, err := l.Value().do(fmt.Sprintf("req:%d", 200+i))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("reply:%d", 200+i), reply)
		held = append(held, l)
	}
	for _, l := range held {
		l.Release()
	}
	s = p.Stats()
	assert.Zero(t, s.Waits, "no lease waited, behind the silent Destroy or otherwise: %+v", s)
	assert.Equal(t, uint64(1), s.Destroyed, "%+v", s)
}

// tcpCounted is a tcpFactory that counts its dials in flight and the most
// at once.
type tcpCounted struct {
	tcpFactory
	inFlight, peak atomic.Int64
	// Once later is set, the dials that start count in these too: a dial
	// under way before is left out.
	later                    atomic.Bool
	laterInFlight, laterPeak atomic.Int64
}

func (f *tcpCounted) Create(ctx context.Context) (*tcpClient, error) {
	raise(&f.peak, f.inFlight.Add(1))
	defer f.inFlight.Add(-1)
	if f.later.Load() {
		raise(&f.laterPeak, f.laterInFlight.Add(1))
		defer f.laterInFlight.Add(-1)
	}
	return f.tcpFactory.Create(ctx)
}

// raise raises the peak m to n.
func raise(m *atomic.Int64, n int64) {
	for p := m.Load(); n > p && !m.CompareAndSwap(p, n); p = m.Load() {
	}
}

// TestTCPOutage takes 16 goroutines of requests through a real server's
// cold start, its stop and its restart on the same address, with
// MaxConcurrentCreates 2 and FailFastAfter 2 ("When the backend is down"):
// never more than 2 dials at once; while the server is down, leases fail
// with the kernel's ECONNREFUSED, and once the pool is down wrapped in
// ErrBackendDown, without dialing, but for the probe; requests succeed
// again within one backoff step (UpkeepInterval) of the restart.
func TestTCPOutage(t *testing.T) {
	const workers, maxCreating, backoffCap = 16, 2, 100 * time.Millisecond
	srv := tcpStartServer(t)
	f := &tcpCounted{tcpFactory: tcpFactory{addr: srv.addr}}
	p, err := pool.New[*tcpClient](context.Background(), f, pool.Options[*tcpClient]{
		Name: "outage", MaxSize: 8, MaxConcurrentCreates: maxCreating, FailFastAfter: 2,
		UpkeepInterval: backoffCap, LeaseTimeout: tcpWait, CreateTimeout: tcpWait,
		PreparationTimeout: tcpWait, Preparer: &tcpRedialer{},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	// request sends one request, and reports the lease's error.
	request := func(id int) error {
		return p.Do(context.Background(), func(c *tcpClient) error {
			if _, err := c.do(fmt.Sprintf("req:%d", id)); err != nil {
				return fmt.Errorf("%w: %w", pool.ErrBroken, err)
			}
			return nil
		})
	}
	// load runs the workers' requests until stop, and returns their errors.
	load := func(stop <-chan struct{}) <-chan error {
		errs := make(chan error, 1<<16)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := request(w*1_000_000 + i); err != nil {
						errs <- err
					}
				}
			})
		}
		go func() { wg.Wait(); close(errs) }()
		return errs
	}

	// A cold start under load: the dials come at most 2 at once.
	stop := make(chan struct{})
	errs := load(stop)
	time.Sleep(50 * time.Millisecond)
	close(stop)
	for err := range errs {
		t.Errorf("a request with the server up: %v", err)
	}
	assert.LessOrEqual(t, f.peak.Load(), int64(maxCreating), "dials at once")

	// The server stops: every failure is the kernel's refusal, and once the
	// pool is down the leases stop dialing, the probe dialing alone.
	require.Positive(t, srv.stop())
	f.peak.Store(0)
	stop = make(chan struct{})
	errs = load(stop)
	require.Eventually(t, func() bool { return p.Stats().BackendDown }, tcpWait, time.Millisecond)
	f.later.Store(true) // from here on only the probe dials; a dial under way may still end
	dialsWhenDown := p.Stats().CreateErrors
	time.Sleep(250 * time.Millisecond)
	// The probe dials at once, then 6.25, 12.5, 25, 50 and 100 ms apart; a
	// dial under way as the pool went down may fail after.
	assert.LessOrEqual(t, p.Stats().CreateErrors-dialsWhenDown, uint64(6+maxCreating-1), "the probe's dials in 250 ms")
	assert.LessOrEqual(t, f.laterPeak.Load(), int64(1), "while down, the probe dials alone")
	close(stop)
	var down int
	for err := range errs {
		if errors.Is(err, pool.ErrBroken) {
			continue // a request on a connection whose hang-up the check had not seen yet
		}
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		if errors.Is(err, pool.ErrBackendDown) {
			down++
		}
	}
	assert.Positive(t, down, "leases failed fast with ErrBackendDown")

	// The server is back on the same address: a request succeeds within one
	// backoff step of the probe, plus a dial and slack for a loaded host.
	require.NoError(t, srv.start())
	back := time.Now()
	for request(-1) != nil {
		require.Less(t, time.Since(back), backoffCap+2*time.Second, "no request succeeded after the restart")
		time.Sleep(time.Millisecond)
	}
	t.Logf("a request succeeded %v after the restart", time.Since(back).Round(time.Millisecond))
	assert.False(t, p.Stats().BackendDown)
}
