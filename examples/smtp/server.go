package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/mail"
	"net/smtp"
	"sync"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"
)

// The server's credentials, and the name its certificate is for.
const (
	serverName = "localhost"
	user       = "pool"
	password   = "s3cret"
)

// serverIdleTimeout is how long the server waits for a client's next
// command before it hangs up (go-smtp's Server.ReadTimeout), as real MTAs
// do after a few minutes; half a second here, so that the tour can wait
// it out, and yet no session under load, on a loaded machine, idles that
// long.
const serverIdleTimeout = 500 * time.Millisecond

// backend is the go-smtp Backend: it counts the sessions open at once and
// every message it receives, by Message-ID.
//
// A session counts once the client has said EHLO over TLS: go-smtp opens a
// session at each EHLO, and STARTTLS ends the first one (the plaintext
// EHLO before the upgrade), so counting that one too would count every
// connection twice.
type backend struct {
	mu       sync.Mutex
	current  int            // sessions open now
	peak     int            // the most open at once since resetPeak
	opened   int            // sessions opened, ever
	received map[string]int // message count by Message-ID
	total    int            // messages received
}

func newBackend() *backend {
	return &backend{received: make(map[string]int)}
}

// NewSession implements gosmtp.Backend.
func (b *backend) NewSession(c *gosmtp.Conn) (gosmtp.Session, error) {
	s := &session{b: b}
	if _, isTLS := c.TLSConnectionState(); isTLS {
		s.counted = true
		b.mu.Lock()
		b.current++
		b.opened++
		b.peak = max(b.peak, b.current)
		b.mu.Unlock()
	}
	return s, nil
}

// sessions returns the sessions open now, the most open at once since
// resetPeak, and the sessions opened ever.
func (b *backend) sessions() (current, peak, opened int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.current, b.peak, b.opened
}

// resetPeak starts a new measurement of the most sessions open at once.
func (b *backend) resetPeak() {
	b.mu.Lock()
	b.peak = b.current
	b.mu.Unlock()
}

// messages returns the messages received, and how many of them carried a
// Message-ID seen before.
func (b *backend) messages() (total, repeated int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total, b.total - len(b.received)
}

// count returns how many messages with Message-ID id arrived.
func (b *backend) count(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.received[id]
}

// waitSessions waits until n sessions are open: a session ends on the
// server a moment after the client or the server hangs up.
func (b *backend) waitSessions(ctx context.Context, n int) error {
	for {
		if cur, _, _ := b.sessions(); cur == n {
			return nil
		}
		select {
		case <-ctx.Done():
			cur, _, _ := b.sessions()
			return fmt.Errorf("server: waited for %d open session(s), still %d", n, cur)
		case <-time.After(time.Millisecond):
		}
	}
}

// session is one client session. Mail is accepted only over TLS and after
// AUTH.
type session struct {
	b       *backend
	counted bool // a TLS session: it counts in the backend's sessions
	authed  bool
	ended   bool
}

var errTLSRequired = &gosmtp.SMTPError{
	Code:         530,
	EnhancedCode: gosmtp.EnhancedCode{5, 7, 0},
	Message:      "Must issue a STARTTLS command first",
}

var errNoMessageID = &gosmtp.SMTPError{
	Code:         554,
	EnhancedCode: gosmtp.EnhancedCode{5, 6, 0},
	Message:      "A Message-ID header is required",
}

// AuthMechanisms implements gosmtp.AuthSession. go-smtp advertises them
// only over TLS.
func (s *session) AuthMechanisms() []string { return []string{sasl.Plain} }

// Auth implements gosmtp.AuthSession.
func (s *session) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain {
		return nil, gosmtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, username, pass string) error {
		if (identity != "" && identity != username) || username != user || pass != password {
			return gosmtp.ErrAuthFailed
		}
		s.authed = true
		return nil
	}), nil
}

func (s *session) Mail(string, *gosmtp.MailOptions) error {
	switch {
	case !s.counted:
		return errTLSRequired
	case !s.authed:
		return gosmtp.ErrAuthRequired
	}
	return nil
}

func (s *session) Rcpt(string, *gosmtp.RcptOptions) error { return nil }

// Data records the message by its Message-ID.
func (s *session) Data(r io.Reader) error {
	msg, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, msg.Body); err != nil {
		return err
	}
	id := msg.Header.Get("Message-ID")
	if id == "" {
		return errNoMessageID
	}
	s.b.mu.Lock()
	s.b.received[id]++
	s.b.total++
	s.b.mu.Unlock()
	return nil
}

func (s *session) Reset() {}

// Logout implements gosmtp.Session: the session ended (QUIT, a hang-up,
// the idle timeout, the server closing).
func (s *session) Logout() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.counted && !s.ended {
		s.ended = true
		s.b.current--
	}
	return nil
}

// mailServer is a go-smtp server on a loopback port, with STARTTLS on a
// self-signed certificate and AUTH PLAIN. It can be stopped and started
// again on the same address; the backend, and its counts, carry over.
type mailServer struct {
	be   *backend
	tls  *tls.Config // the server's
	cert *x509.Certificate
	addr string // 127.0.0.1:port, chosen by the first start

	srv  *gosmtp.Server // nil while stopped
	done chan struct{}  // closed when srv's Serve returns
}

// newMailServer returns a stopped server with a fresh certificate.
func newMailServer() (*mailServer, error) {
	cert, tlsCert, err := selfSigned(serverName)
	if err != nil {
		return nil, err
	}
	return &mailServer{
		be:   newBackend(),
		cert: cert,
		tls:  &tls.Config{Certificates: []tls.Certificate{tlsCert}},
	}, nil
}

// start listens on the server's address, or on a free loopback port the
// first time, and serves until stop.
func (s *mailServer) start() error {
	addr := s.addr
	if addr == "" {
		addr = "127.0.0.1:0" // loopback only
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.addr = ln.Addr().String()
	// A go-smtp Server cannot serve again once closed: each start makes
	// one.
	srv := gosmtp.NewServer(s.be)
	srv.Domain = serverName
	srv.TLSConfig = s.tls
	srv.ReadTimeout = serverIdleTimeout
	srv.WriteTimeout = 2 * time.Second
	srv.MaxMessageBytes = 1 << 20
	srv.MaxRecipients = 10
	srv.ErrorLog = log.New(io.Discard, "", 0) // the tour's output is its own
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns nil after Close
	}()
	s.srv, s.done = srv, done
	return nil
}

// stop closes the listener and every connection, and waits until the
// backend has seen every session end. A stopped server refuses
// connections.
func (s *mailServer) stop(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	<-s.done
	s.srv = nil
	if err != nil {
		return err
	}
	return s.be.waitSessions(ctx, 0)
}

// clientTLS returns the client's TLS configuration: it trusts the server's
// certificate, and nothing else.
func (s *mailServer) clientTLS() *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(s.cert)
	return &tls.Config{RootCAs: roots, ServerName: serverName}
}

// newMailer returns the mailer for sessions with s.
func (s *mailServer) newMailer() *mailer {
	return &mailer{
		addr: s.addr,
		host: serverName,
		tls:  s.clientTLS(),
		auth: smtp.PlainAuth("", user, password, serverName),
	}
}

// selfSigned makes an ECDSA P-256 certificate for name and 127.0.0.1,
// valid for a day, signed by its own key.
func selfSigned(name string) (*x509.Certificate, tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	return cert, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, nil
}
