package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/smtp"
	"sync/atomic"
	"time"

	"github.com/msl-armory/pool"
)

// The client is the standard library's net/smtp, not go-smtp's client,
// although go-smtp is already a dependency for the server. The reason is
// deadlines. Neither client takes a context, so the only way to bound an
// exchange by the ctx the pool passes in (CreateTimeout,
// PreparationTimeout, the caller's own) is a deadline on the underlying
// net.Conn. net/smtp never touches the conn's deadline, so one deadline
// set from ctx bounds a whole exchange (greeting, EHLO, STARTTLS and the
// TLS handshake, AUTH), and a canceled ctx can cut it short by moving the
// deadline into the past. go-smtp's client sets its own deadline
// (CommandTimeout) before every command and clears it after, which
// overwrites the caller's: ctx would have to be turned into a
// CommandTimeout per command, and a cancellation could be lost between
// two commands. The cost: net/smtp is frozen (bug and security fixes
// only, no new extensions), while go-smtp is maintained and knows more
// of SMTP (DSN, REQUIRETLS, enhanced status codes). For submitting mail
// over one authenticated session, net/smtp has everything needed.

// mailConn is one pooled SMTP session: connected, upgraded with STARTTLS
// and authenticated. The pool holds the *mailConn, and Prepare swaps the
// session inside it when the server has dropped it, so the pool and the
// lease never see the swap.
//
// A mailConn is used by one goroutine at a time: its lease holder, or the
// pool while it checks, resets or destroys it.
type mailConn struct {
	m *mailer

	conn net.Conn     // the TCP conn under TLS: deadlines are set here
	c    *smtp.Client // nil after close or a failed reconnect

	// inTx: MAIL was accepted and the transaction has not ended with the
	// server's reply to the message. Reset sends RSET only then, so a
	// finished send costs no extra round trip.
	inTx bool

	// connected is when connect last succeeded: see IsReady.
	connected time.Time
}

// connect dials, reads the greeting, says EHLO, upgrades with STARTTLS and
// authenticates, all within ctx.
func (mc *mailConn) connect(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", mc.m.addr)
	if err != nil {
		return err // as it is: callers look for *net.OpError and ECONNREFUSED
	}
	mc.conn = conn
	done := mc.bound(ctx)
	defer done()
	c, err := smtp.NewClient(conn, mc.m.host) // reads the 220 greeting
	if err != nil {
		conn.Close()
		mc.conn = nil
		return fmt.Errorf("smtp greeting: %w", err)
	}
	if err := c.StartTLS(mc.m.tls); err != nil {
		c.Close()
		mc.conn = nil
		return fmt.Errorf("smtp STARTTLS: %w", err)
	}
	if err := c.Auth(mc.m.auth); err != nil {
		c.Close()
		mc.conn = nil
		return fmt.Errorf("smtp AUTH: %w", err)
	}
	mc.c, mc.inTx, mc.connected = c, false, time.Now()
	return nil
}

// longAgo is a deadline in the past: it fails a pending read or write at
// once.
var longAgo = time.Unix(1, 0)

// bound sets the conn's deadline to ctx's, and moves it into the past when
// ctx is canceled, until the returned func is called; that func leaves the
// conn with no deadline, ready for the next exchange.
func (mc *mailConn) bound(ctx context.Context) (done func()) {
	dl, _ := ctx.Deadline() // the zero time, for none
	conn := mc.conn
	conn.SetDeadline(dl)
	if ctx.Done() == nil {
		return func() { conn.SetDeadline(time.Time{}) }
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		conn.SetDeadline(longAgo)
		close(fired)
	})
	return func() {
		if !stop() {
			// The cancellation is setting the past deadline: wait for it,
			// or it could land after the clear below and fail the next
			// borrower's first command.
			<-fired
		}
		conn.SetDeadline(time.Time{})
	}
}

// start opens a mail transaction: MAIL FROM, then RCPT TO for each
// recipient.
func (mc *mailConn) start(ctx context.Context, from string, to []string) error {
	done := mc.bound(ctx)
	defer done()
	if err := mc.c.Mail(from); err != nil {
		return err
	}
	mc.inTx = true
	for _, rcpt := range to {
		if err := mc.c.Rcpt(rcpt); err != nil {
			return err
		}
	}
	return nil
}

// data sends the message of the open transaction and waits for the
// server's reply, which ends the transaction.
func (mc *mailConn) data(ctx context.Context, msg []byte) error {
	done := mc.bound(ctx)
	defer done()
	w, err := mc.c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(msg); err != nil {
		return err
	}
	if err := w.Close(); err != nil { // the server's 250, or its refusal
		return err
	}
	mc.inTx = false
	return nil
}

// send is one whole transaction.
func (mc *mailConn) send(ctx context.Context, from string, to []string, msg []byte) error {
	if err := mc.start(ctx, from, to); err != nil {
		return err
	}
	return mc.data(ctx, msg)
}

// close closes the connection without QUIT, for a session the server has
// dropped already.
func (mc *mailConn) close() error {
	if mc.c == nil {
		return nil
	}
	err := mc.c.Close()
	mc.c, mc.conn, mc.inTx = nil, nil, false
	return err
}

// mailer is what the pool needs to make, check, restore, reset and end
// sessions with one server (its Factory and Preparer, and the Reset and
// Destroy options), and counts what it did.
type mailer struct {
	addr string      // host:port to dial
	host string      // the server's name: for TLS verification and PlainAuth
	tls  *tls.Config // trusts the server's certificate
	auth smtp.Auth

	dials      atomic.Int64 // sessions the factory opened
	reconnects atomic.Int64 // sessions Prepare restored in place
	noops      atomic.Int64 // NOOPs IsReady sent
	noopFailed atomic.Int64 // of those, the ones that failed
	rsets      atomic.Int64 // RSETs sent by Reset
}

// Create is the Factory: a new, authenticated session.
func (m *mailer) Create(ctx context.Context) (*mailConn, error) {
	mc := &mailConn{m: m}
	if err := mc.connect(ctx); err != nil {
		return nil, err
	}
	m.dials.Add(1)
	return mc, nil
}

// IsReady sends NOOP: the only way to learn, short of sending mail, that
// the server still holds the session. It costs a round trip, which is why
// the pool is told to call it only after CheckAfterIdle. A failed NOOP
// means "not ready" (Prepare reconnects), never an error.
//
// The pool also checks every fresh session, the moment after the factory
// made it: a session that connected less than checkAfterIdle ago has just
// answered AUTH, and a NOOP would tell nothing new.
func (m *mailer) IsReady(ctx context.Context, mc *mailConn) (bool, error) {
	if mc.c == nil {
		return false, nil
	}
	if time.Since(mc.connected) < checkAfterIdle {
		return true, nil
	}
	done := mc.bound(ctx)
	defer done()
	m.noops.Add(1)
	if err := mc.c.Noop(); err != nil {
		m.noopFailed.Add(1)
		return false, nil
	}
	return true, nil
}

// Prepare reconnects the same *mailConn in place. The old connection is
// closed without QUIT: the server has gone from it. When the reconnect
// fails, the pool destroys this mailConn and goes on with the next idle
// one or a fresh one, whose error the lease returns.
func (m *mailer) Prepare(ctx context.Context, mc *mailConn) error {
	_ = mc.close() // dead already: its error says nothing
	if err := mc.connect(ctx); err != nil {
		return err
	}
	m.reconnects.Add(1)
	return nil
}

// resetTimeout bounds Reset's RSET: Release takes no ctx, and a borrower
// must not hang in Release on a server that stopped answering.
const resetTimeout = time.Second

// reset is Options.Reset: a borrower that gave up between MAIL and the
// end of DATA left the transaction open on the server, and the next
// borrower's MAIL would be refused ("nested MAIL command"), so RSET ends
// it. An error destroys the session.
func (m *mailer) reset(mc *mailConn) error {
	if !mc.inTx || mc.c == nil {
		return nil
	}
	mc.conn.SetDeadline(time.Now().Add(resetTimeout))
	defer mc.conn.SetDeadline(time.Time{})
	if err := mc.c.Reset(); err != nil {
		return err
	}
	mc.inTx = false
	m.rsets.Add(1)
	return nil
}

// quitTimeout bounds Destroy's QUIT. A server that has dropped the
// session, or is gone, must not hold up Close for long: QUIT is a
// courtesy.
const quitTimeout = 250 * time.Millisecond

// destroy is Options.Destroy: QUIT under a short deadline, then close. A
// failed QUIT is not an error: the connection is closed all the same, and
// a server that dropped us first is the normal case for an idle session.
func destroy(mc *mailConn) error {
	if mc.c == nil {
		return nil
	}
	mc.conn.SetDeadline(time.Now().Add(quitTimeout))
	if err := mc.c.Quit(); err == nil { // Quit closes on success
		mc.c, mc.conn = nil, nil
		return nil
	}
	_ = mc.close()
	return nil
}

// Pool settings, shared by the tour, the test and the benchmark.
const (
	maxSessions = 4 // the most sessions a server allows one client, say

	// checkAfterIdle is well below the server's idle timeout, so a session
	// the server may have dropped is always checked, while a busy pool
	// sends no NOOP at all.
	checkAfterIdle = 100 * time.Millisecond
)

// newPool returns a pool of at most maxSessions sessions made by m.
func newPool(ctx context.Context, m *mailer) (*pool.Pool[*mailConn], error) {
	return pool.New(ctx, m, pool.Options[*mailConn]{
		Name:    "smtp",
		MaxSize: maxSessions,
		// A send takes a millisecond or so on a loopback; 64 senders
		// sharing 4 sessions wait a few tens of ms. Past 5 s the server is
		// stuck or the pool too small: say so rather than queue forever.
		LeaseTimeout: 5 * time.Second,
		// Dial, greeting, EHLO, STARTTLS, AUTH: a few round trips.
		CreateTimeout: 2 * time.Second,
		// NOOP, and the reconnect when it fails.
		PreparationTimeout: 2 * time.Second,
		Preparer:           m,
		CheckAfterIdle:     checkAfterIdle,
		Reset:              m.reset,
		Destroy:            destroy,
		// No IdleTimeout: the tour shows the Preparer restoring sessions
		// the server dropped. In production, an IdleTimeout a little below
		// the server's idle timeout QUITs such sessions politely first,
		// and leaves the Preparer the unexpected drops.
	})
}

// send leases a session, sends one message and gives the session back. A
// session whose send failed is discarded: it is in an unknown state.
func send(ctx context.Context, p *pool.Pool[*mailConn], from string, to []string, msg []byte) error {
	l, err := p.Lease(ctx)
	if err != nil {
		return err
	}
	if err := l.Value().send(ctx, from, to, msg); err != nil {
		l.Discard()
		return err
	}
	l.Release()
	return nil
}
