// Command quickstart pools TCP connections to an echo server that it starts
// on a loopback port. Run it with: go run ./examples/quickstart
package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"github.com/msl-armory/pool"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go serveEcho(ln)

	dial := pool.FactoryFunc[net.Conn](func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	})
	p, err := pool.New(context.Background(), dial, pool.Options[net.Conn]{
		MaxSize:       4,               // never more than 4 connections at once
		LeaseTimeout:  5 * time.Second, // then Lease returns ErrLeaseTimeout
		CreateTimeout: 5 * time.Second, // bounds each dial
		Preparer: pool.CheckFunc[net.Conn](func(ctx context.Context, c net.Conn) error {
			deadline, _ := ctx.Deadline() // PreparationTimeout's
			_, err := roundTrip(c, "ping", deadline)
			return err
		}),
		CheckAfterIdle:     time.Minute, // ping new connections, and idle ones after a minute
		PreparationTimeout: time.Second, // a failed or slow ping: closed, another one used
		// Destroy is nil: the pool calls conn.Close, which waits for no reply.
	})
	if err != nil {
		log.Fatal(err)
	}

	for _, msg := range []string{"hello", "world", "quit", "again"} {
		var reply string
		err := p.Do(context.Background(), func(c net.Conn) error {
			var err error
			if reply, err = roundTrip(c, msg, time.Now().Add(5*time.Second)); err != nil {
				return fmt.Errorf("%w: %w", pool.ErrBroken, err) // close it rather than lend it again
			}
			return nil
		}) // Do leased a connection, and gave it back (or closed it, when broken)
		fmt.Printf("%s -> %q, error: %v\n", msg, reply, err)
	}
	if err := p.Close(); err != nil { // closes the idle connections, and waits for every close under way
		log.Fatal(err)
	}
	s := p.Stats()
	fmt.Printf("%d leases, %d connections dialed, %d closed\n", s.Leases, s.Created, s.Destroyed)
}

// roundTrip writes one line and reads the line that comes back.
func roundTrip(c net.Conn, msg string, deadline time.Time) (string, error) {
	c.SetDeadline(deadline)
	if _, err := fmt.Fprintln(c, msg); err != nil {
		return "", err
	}
	reply, err := bufio.NewReader(c).ReadString('\n') // one line in flight: none buffered past it
	return strings.TrimSuffix(reply, "\n"), err
}

// serveEcho answers each line in upper case, and hangs up on "quit".
func serveEcho(ln net.Listener) {
	for conn, err := ln.Accept(); err == nil; conn, err = ln.Accept() {
		go func() {
			defer conn.Close()
			for s := bufio.NewScanner(conn); s.Scan() && s.Text() != "quit"; {
				fmt.Fprintln(conn, strings.ToUpper(s.Text()))
			}
		}()
	}
}
