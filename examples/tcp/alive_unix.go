//go:build unix

package main

import "syscall"

// peerGone reports whether the connection is no longer usable: the server
// closed or reset it, or sent bytes nobody asked for (in a request-reply
// protocol, a stream out of step). It never waits: one non-blocking read on
// the socket, which finds the end of the stream if the server's close has
// arrived, and nothing (EAGAIN) if the connection is quietly open.
//
// Why not a read with a deadline already past: a net.Conn whose read
// deadline has expired fails Read with a timeout before it reaches the
// socket, so such a probe would call every connection alive.
func (c *client) peerGone() bool {
	if c.conn == nil || c.r.Buffered() > 0 {
		return true
	}
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return false // not a socket: nothing to look at
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	var (
		b       [1]byte
		readErr error
	)
	err = rc.Read(func(fd uintptr) bool {
		for {
			_, readErr = syscall.Read(int(fd), b[:])
			if readErr != syscall.EINTR {
				return true // done, whatever the outcome: never wait for readability
			}
		}
	})
	switch {
	case err != nil: // closed on this side
		return true
	case readErr == syscall.EAGAIN || readErr == syscall.EWOULDBLOCK:
		return false // open, and nothing to read: alive
	case readErr != nil: // ECONNRESET and the like
		return true
	default: // n == 0: the end of the stream; n == 1: unrequested data
		return true
	}
}
