//go:build !unix

package main

import (
	"errors"
	"os"
	"time"
)

// peerGone reports whether the connection is no longer usable: the server
// closed or reset it, or sent bytes nobody asked for.
//
// Without a non-blocking read on the socket (see alive_unix.go), it reads
// with a deadline a millisecond away. Not one already past: a net.Conn whose
// read deadline has expired fails Read with a timeout before it reaches the
// socket, so such a probe would call every connection alive.
func (c *client) peerGone() bool {
	if c.conn == nil || c.r.Buffered() > 0 {
		return true
	}
	if err := c.conn.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		return true
	}
	defer c.conn.SetReadDeadline(time.Time{})
	var b [1]byte
	_, err := c.conn.Read(b[:])
	return !errors.Is(err, os.ErrDeadlineExceeded)
}
