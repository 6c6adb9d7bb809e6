package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// server is the line server the tour talks to. It answers each request line
// with the line in upper case, prefixed by the number of the connection it
// came on ("conn 2: HELLO"), so a reused connection can be told from a new
// one. Connections are numbered in the order the server accepts them, across
// restarts.
type server struct {
	addr string // a free loopback port, chosen by the first start; a restart reuses it

	mu       sync.Mutex
	ln       net.Listener                 // nil while stopped
	conns    map[net.Conn]<-chan struct{} // open connections, each with its handler's done
	accepted int
	loop     <-chan struct{} // closed when the accept loop of ln ends
}

// start listens on the server's address and serves until stop.
func (s *server) start() error {
	addr := s.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	loop := make(chan struct{})
	s.mu.Lock()
	s.ln, s.addr, s.loop = ln, ln.Addr().String(), loop
	if s.conns == nil {
		s.conns = make(map[net.Conn]<-chan struct{})
	}
	s.mu.Unlock()
	go s.accept(ln, loop)
	return nil
}

func (s *server) accept(ln net.Listener, loop chan<- struct{}) {
	defer close(loop)
	for {
		conn, err := ln.Accept()
		if err != nil {
			return // the listener was closed
		}
		s.mu.Lock()
		if s.ln != ln { // stopped while this connection came in
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.accepted++
		n := s.accepted
		done := make(chan struct{})
		s.conns[conn] = done
		s.mu.Unlock()
		go s.serve(conn, n, done)
	}
}

// serve answers conn's requests until the client hangs up or the server
// closes conn.
func (s *server) serve(conn net.Conn, n int, done chan<- struct{}) {
	defer close(done)
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if _, err := fmt.Fprintf(conn, "conn %d: %s\n", n, strings.ToUpper(sc.Text())); err != nil {
			return
		}
	}
}

// open returns the number of connections the server holds open.
func (s *server) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// dropAll closes every open connection, as a server does with connections
// idle past its timeout, and returns how many it closed once their handlers
// have ended.
func (s *server) dropAll() int {
	s.mu.Lock()
	dones := make([]<-chan struct{}, 0, len(s.conns))
	for conn, done := range s.conns {
		conn.Close()
		dones = append(dones, done)
	}
	s.mu.Unlock()
	for _, done := range dones {
		<-done // Close ends the handler's read at once
	}
	return len(dones)
}

// stop closes the listener and every connection, and returns how many
// connections it closed. A stopped server refuses connections.
func (s *server) stop() int {
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

// waitOpen waits until the server holds exactly n connections open: a
// client's close reaches the server's handler a moment after it happens.
func (s *server) waitOpen(ctx context.Context, n int) error {
	for s.open() != n {
		select {
		case <-ctx.Done():
			return errors.New("server: open connections did not settle")
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}
