// Command smtp pools authenticated SMTP sessions to a real SMTP server,
// github.com/emersion/go-smtp with STARTTLS and AUTH PLAIN, that it runs on
// a loopback port, and takes the server through four phases:
//
//	a. sessions are reused, and a transaction a sender left open is reset;
//	b. the server drops every idle session (its idle timeout), and the next
//	   leases get working sessions: the Preparer's NOOP fails and Prepare
//	   reconnects in place;
//	c. the server is down: leases fail at once with the dial error; then it
//	   is back on the same address, and the pool recovers;
//	d. 64 senders × 50 messages through a pool of 4 sessions.
//
// Run it with
//
//	cd examples/smtp && go run .
//
// Its output is the same on every run: it prints no ports, timings or
// random IDs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/msl-armory/pool"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "smtp:", err)
		os.Exit(1)
	}
}

// waitBound bounds every send and every wait of the tour: on a loopback
// none comes near it.
const waitBound = 5 * time.Second

// The envelope of every message.
const from = "tour@pool.example"

var to = []string{"inbox@pool.example"}

// message returns a message whose Message-ID is <id@pool.example>: the
// server counts what it receives by Message-ID.
func message(id string) []byte {
	return []byte("From: <" + from + ">\r\n" +
		"To: <" + to[0] + ">\r\n" +
		"Subject: pooled\r\n" +
		"Message-ID: " + messageID(id) + "\r\n" +
		"\r\n" +
		"Sent over a pooled SMTP session.\r\n")
}

func messageID(id string) string { return "<" + id + "@pool.example>" }

// tour is the state the phases share; it writes the tour's lines and keeps
// the first write error.
type tour struct {
	w   io.Writer
	err error

	srv *mailServer
	m   *mailer
	p   *pool.Pool[*mailConn]
}

func (t *tour) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

// run writes the tour to w.
func run(w io.Writer) (err error) {
	ctx := context.Background()
	srv, err := newMailServer()
	if err != nil {
		return err
	}
	if err := srv.start(); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, waitBound)
		defer cancel()
		err = errors.Join(err, srv.stop(sctx))
	}()
	t := &tour{w: w, srv: srv, m: srv.newMailer()}
	p, err := newPool(ctx, t.m)
	if err != nil {
		return err
	}
	defer p.Close() // on an error path; after the closing phase it does nothing
	t.p = p

	for i, phase := range []func(context.Context) error{
		t.reuse,
		t.dropped,
		t.down,
		t.load,
		t.closing,
	} {
		if i > 0 {
			t.printf("\n")
		}
		if err := phase(ctx); err != nil {
			return err
		}
	}
	return t.err
}

// send sends the message with Message-ID id through the pool.
func (t *tour) send(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	return send(ctx, t.p, from, to, message(id))
}

// sendAtOnce holds n leases at once and sends a message on each, with
// Message-IDs prefix.1 to prefix.n.
func (t *tour) sendAtOnce(ctx context.Context, n int, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	var ls []pool.Lease[*mailConn]
	defer func() {
		for _, l := range ls {
			l.Release()
		}
	}()
	for i := 1; i <= n; i++ {
		l, err := t.p.Lease(ctx)
		if err != nil {
			return err
		}
		if err := l.Value().send(ctx, from, to, message(fmt.Sprintf("%s.%d", prefix, i))); err != nil {
			l.Discard()
			return err
		}
		ls = append(ls, l)
	}
	return nil
}

// allOnce reports whether the server received each of the messages
// prefix.1 to prefix.n exactly once.
func (t *tour) allOnce(prefix string, n int) bool {
	return t.missing(prefix, n) == 0
}

// missing returns how many of the messages prefix.1 to prefix.n the
// server did not receive exactly once.
func (t *tour) missing(prefix string, n int) int {
	bad := 0
	for i := 1; i <= n; i++ {
		if t.srv.be.count(messageID(fmt.Sprintf("%s.%d", prefix, i))) != 1 {
			bad++
		}
	}
	return bad
}

// reuse: one session carries messages sent one at a time; three at once
// need three; after that no send opens a session. A sender that gives up
// mid-transaction leaves it open, and Reset ends it with RSET.
func (t *tour) reuse(ctx context.Context) error {
	t.printf("--- a. Sessions are reused (MaxSize %d) ---\n", maxSessions)
	be := t.srv.be
	for i := 1; i <= 5; i++ {
		if err := t.send(ctx, fmt.Sprintf("a.one.%d", i)); err != nil {
			return err
		}
	}
	_, _, opened := be.sessions()
	t.printf("5 messages, one at a time: %d session opened\n", opened)

	if err := t.sendAtOnce(ctx, 3, "a.three"); err != nil {
		return err
	}
	_, _, opened = be.sessions()
	t.printf("3 leases held at once, a message on each: %d sessions opened\n", opened)

	before := opened
	for i := 1; i <= 10; i++ {
		if err := t.send(ctx, fmt.Sprintf("a.more.%d", i)); err != nil {
			return err
		}
	}
	_, _, opened = be.sessions()
	t.printf("10 more messages, one at a time: %d new sessions\n", opened-before)

	// A borrower that returns between RCPT and DATA (an error path of its
	// own, a panic) leaves the transaction open on the server.
	lctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	l, err := t.p.Lease(lctx)
	if err != nil {
		return err
	}
	if err := l.Value().start(lctx, from, to); err != nil {
		l.Discard()
		return err
	}
	l.Release()
	if err := t.send(ctx, "a.after"); err != nil {
		return err
	}
	t.printf("a sender gave up after MAIL and RCPT; on release Reset sent RSET: %d RSET in all, none after a finished send\n", t.m.rsets.Load())

	total, repeated := be.messages()
	cur, _, _ := be.sessions()
	t.printf("server: %d messages received, each exactly once: %t; %d sessions open\n",
		total, repeated == 0 && t.allOnce("a.one", 5) && t.allOnce("a.three", 3) && t.allOnce("a.more", 10) && be.count(messageID("a.after")) == 1, cur)
	return nil
}

// dropped: the pool sits idle past the server's idle timeout, and the
// server hangs up on every session. The next leases find each session
// dead (the NOOP fails) and reconnect it in place: no lease fails, no
// message is lost, and the pool creates and destroys nothing.
func (t *tour) dropped(ctx context.Context) error {
	t.printf("--- b. The server drops every idle session ---\n")
	be := t.srv.be
	open, _, _ := be.sessions()
	time.Sleep(serverIdleTimeout)
	wctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	if err := be.waitSessions(wctx, 0); err != nil {
		return err
	}
	t.printf("idle past the server's idle timeout: the server hung up on %d sessions, 0 open\n", open)

	before := t.p.Stats()
	if err := t.sendAtOnce(ctx, 3, "b"); err != nil {
		return err // a lease or a send failed: what this phase says cannot happen
	}
	s := t.p.Stats()
	t.printf("3 leases held at once, a message on each: all sent\n")
	t.printf("the Preparer's NOOP failed on %d sessions, and Prepare reconnected them in place\n", t.m.noopFailed.Load())
	t.printf("pool: items created %d, destroyed %d; messages lost: %d\n",
		s.Created-before.Created, s.Destroyed-before.Destroyed, t.missing("b", 3))
	return nil
}

// down: the server is down. The idle sessions fail their NOOP and their
// reconnect, and the lease fails with the dial error of a fresh session;
// the next leases fail the same way, at once. Then the server is back on
// the same address, and the next send dials afresh.
func (t *tour) down(ctx context.Context) error {
	t.printf("--- c. The server is down, then back ---\n")
	be := t.srv.be
	open, _, _ := be.sessions()
	wctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	if err := t.srv.stop(wctx); err != nil {
		return err
	}
	t.printf("server: stopped: listener and %d sessions closed; new connections are refused\n", open)
	// A session that died less than CheckAfterIdle ago is lent unchecked,
	// and its send fails: the price of keeping NOOPs off a busy pool. The
	// tour waits that long, so that the leases below check every idle one.
	time.Sleep(checkAfterIdle)

	before := t.p.Stats()
	var last error
	fast := true
	for i := 1; i <= 3; i++ {
		start := time.Now()
		err := t.send(ctx, fmt.Sprintf("c.down.%d", i))
		fast = fast && time.Since(start) < time.Second
		if err == nil {
			return errors.New("a send succeeded with the server down")
		}
		t.printf("lease %d: %s\n", i, strings.ReplaceAll(err.Error(), t.srv.addr, "<addr>"))
		last = err
	}
	t.printf("  errors.Is(err, syscall.ECONNREFUSED): %t\n", errors.Is(last, syscall.ECONNREFUSED))
	var opErr *net.OpError
	if errors.As(last, &opErr) {
		t.printf("  errors.As(err, &opErr): true, opErr.Op: %q\n", opErr.Op)
	} else {
		t.printf("  errors.As(err, &opErr): false\n")
	}
	for t.p.Stats().Destroying > 0 { // the idle ones are closed on the pool's own goroutines
		time.Sleep(time.Millisecond)
	}
	s := t.p.Stats()
	t.printf("  every lease failed at once, none waited for a session: %t\n", fast && s.Waits == before.Waits)
	t.printf("pool: %d sessions; the %d idle ones failed their NOOP and their reconnect, and were destroyed\n",
		s.ItemsAllocated, s.PrepareFailed-before.PrepareFailed)

	if err := t.srv.start(); err != nil {
		return err
	}
	dials := t.m.dials.Load()
	for i := 1; i <= 3; i++ {
		if err := t.send(ctx, fmt.Sprintf("c.back.%d", i)); err != nil {
			return err
		}
	}
	t.printf("server: listening again on the same address\n")
	t.printf("3 messages, one at a time: all sent, over %d new session; received once each: %t\n",
		t.m.dials.Load()-dials, t.allOnce("c.back", 3))
	return nil
}

// Load: senders goroutines each send each messages through a pool of
// maxSessions sessions.
const (
	senders = 64
	each    = 50
)

// loadID is the Message-ID, without brackets and domain, of sender s's
// message i.
func loadID(prefix string, s, i int) string { return fmt.Sprintf("%s.%d.%d", prefix, s, i) }

// sendLoad sends senders × each messages through p from senders goroutines
// at once, and returns how many sends failed and the first error.
func sendLoad(ctx context.Context, p *pool.Pool[*mailConn], prefix string) (failed int, first error) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				sctx, cancel := context.WithTimeout(ctx, waitBound)
				err := send(sctx, p, from, to, message(loadID(prefix, s, i)))
				cancel()
				if err != nil {
					mu.Lock()
					failed++
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed, first
}

// load: 64 senders share the pool's 4 sessions.
func (t *tour) load(ctx context.Context) error {
	t.printf("--- d. Load: %d senders × %d messages, MaxSize %d ---\n", senders, each, maxSessions)
	be := t.srv.be
	be.resetPeak()
	total0, _ := be.messages()
	created0 := t.p.Stats().Created
	failed, first := sendLoad(ctx, t.p, "d")
	if first != nil {
		return fmt.Errorf("%d sends failed, the first with: %w", failed, first)
	}
	total, repeated := be.messages()
	once := true
	for s := range senders {
		for i := range each {
			once = once && be.count(messageID(loadID("d", s, i))) == 1
		}
	}
	_, peak, _ := be.sessions()
	t.printf("sent %d, failed %d\n", senders*each, failed)
	t.printf("server: received %d, each Message-ID exactly once: %t\n", total-total0, once && repeated == 0)
	t.printf("server: at most %d sessions open at once; the pool created %d to join the one it had\n",
		peak, t.p.Stats().Created-created0)
	return nil
}

// closing: Close QUITs every session; the server sees them all go.
func (t *tour) closing(ctx context.Context) error {
	t.printf("--- Close ---\n")
	if err := t.p.Close(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, waitBound)
	defer cancel()
	be := t.srv.be
	if err := be.waitSessions(wctx, 0); err != nil {
		return err
	}
	s := t.p.Stats()
	_, _, opened := be.sessions()
	t.printf("server: 0 sessions open\n")
	t.printf("pool: %d leases; %d sessions created, %d destroyed, %d failed preparation\n",
		s.Leases, s.Created, s.Destroyed, s.PrepareFailed)
	t.printf("server: %d sessions opened = %d created by the pool + %d reconnected by Prepare\n",
		opened, s.Created, t.m.reconnects.Load())
	return nil
}
