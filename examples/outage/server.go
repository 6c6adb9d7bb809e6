package main

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
)

// server is the backend: a line server on a loopback port that answers each
// request line with the line in upper case. The program stops it and starts
// it again on the same address, as an outage and a recovery.
//
// Stopped, it closes its listener and every connection it accepted, so that
// dials are refused (ECONNREFUSED): a backend host that is up but whose
// service is down. (A backend that hangs, accepting nothing, would instead
// cost every dial its whole CreateTimeout; a refused dial shows the same
// point in less time, see dialer for the latency it is given.)
type server struct {
	addr     string       // a free loopback port, chosen by the first start; a restart reuses it
	accepted atomic.Int64 // connections accepted, across restarts

	mu    sync.Mutex
	ln    net.Listener // nil while stopped
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // the accept loop and the handlers
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
	s.mu.Lock()
	s.ln, s.addr = ln, ln.Addr().String()
	if s.conns == nil {
		s.conns = make(map[net.Conn]struct{})
	}
	s.mu.Unlock()
	s.wg.Add(1)
	go s.accept(ln)
	return nil
}

func (s *server) accept(ln net.Listener) {
	defer s.wg.Done()
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
		s.accepted.Add(1)
		s.conns[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(conn)
	}
}

// serve answers conn's request lines until the client hangs up or the
// server closes conn.
func (s *server) serve(conn net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	for sc := bufio.NewScanner(conn); sc.Scan(); {
		if _, err := fmt.Fprintln(conn, strings.ToUpper(sc.Text())); err != nil {
			return
		}
	}
}

// stop closes the listener and every connection, and waits for the
// handlers to end. A stopped server refuses connections.
func (s *server) stop() {
	s.mu.Lock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for conn := range s.conns {
		conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
