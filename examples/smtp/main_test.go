package main

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// golden is the tour's complete output. It is the same on every run: the
// tour holds leases one at a time or a known number at once, waits for the
// server's count of open sessions to settle before it reads it, and prints
// no port, address, timing or random ID. The error text is the one Unix
// systems give for a refused connection.
const golden = `--- a. Sessions are reused (MaxSize 4) ---
5 messages, one at a time: 1 session opened
3 leases held at once, a message on each: 3 sessions opened
10 more messages, one at a time: 0 new sessions
a sender gave up after MAIL and RCPT; on release Reset sent RSET: 1 RSET in all, none after a finished send
server: 19 messages received, each exactly once: true; 3 sessions open

--- b. The server drops every idle session ---
idle past the server's idle timeout: the server hung up on 3 sessions, 0 open
3 leases held at once, a message on each: all sent
the Preparer's NOOP failed on 3 sessions, and Prepare reconnected them in place
pool: items created 0, destroyed 0; messages lost: 0

--- c. The server is down, then back ---
server: stopped: listener and 3 sessions closed; new connections are refused
lease 1: pool "smtp": create item: dial tcp <addr>: connect: connection refused
lease 2: pool "smtp": create item: dial tcp <addr>: connect: connection refused
lease 3: pool "smtp": create item: dial tcp <addr>: connect: connection refused
  errors.Is(err, syscall.ECONNREFUSED): true
  errors.As(err, &opErr): true, opErr.Op: "dial"
  every lease failed at once, none waited for a session: true
pool: 0 sessions; the 3 idle ones failed their NOOP and their reconnect, and were destroyed
server: listening again on the same address
3 messages, one at a time: all sent, over 1 new session; received once each: true

--- d. Load: 64 senders × 50 messages, MaxSize 4 ---
sent 3200, failed 0
server: received 3200, each Message-ID exactly once: true
server: at most 4 sessions open at once; the pool created 3 to join the one it had

--- Close ---
server: 0 sessions open
pool: 3226 leases; 7 sessions created, 7 destroyed, 3 failed preparation
server: 10 sessions opened = 7 created by the pool + 3 reconnected by Prepare
`

func TestRunPrintsTheGoldenTour(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the golden text has the Unix message for a refused connection")
	}
	var buf bytes.Buffer
	require.NoError(t, run(&buf))
	assert.Equal(t, golden, buf.String())
	assert.NotContains(t, buf.String(), "127.0.0.1", "the output names no address")
}
