package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// golden is the tour's complete output. It is the same on every run: the
// server numbers its connections in the order it accepts them, the tour
// dials one at a time, and it prints no port, address or timing. The error
// text is the one Unix systems give for a refused connection.
const golden = `--- 1. Connections are reused (pool of 3) ---
request "hello 1": reply "conn 1: HELLO 1"
request "hello 2": reply "conn 1: HELLO 2"
request "hello 3": reply "conn 1: HELLO 3"
3 leases held at once: "conn 1: AT ONCE 1", "conn 2: AT ONCE 2", "conn 3: AT ONCE 3"
9 more requests, one at a time, all on conn 1, 2 or 3: true; new dials: 0
dials: 3, server connections open: 3

--- 2. The server drops every idle connection ---
server: closed 3 idle connection(s), 0 open
3 leases held at once: "conn 4: AFTER THE DROP 1", "conn 5: AFTER THE DROP 2", "conn 6: AFTER THE DROP 3"
the Preparer found 3 closed connection(s) and redialed them in place
no lease failed; items created 0, destroyed 0: the same three clients

--- 3. The server is down ---
server: stopped, closed 3 connection(s); new ones are refused
lease 1: pool "lines": create item: dial tcp <addr>: connect: connection refused
lease 2: pool "lines": create item: dial tcp <addr>: connect: connection refused
lease 3: pool "lines": create item: dial tcp <addr>: connect: connection refused
  errors.Is(err, syscall.ECONNREFUSED): true
  errors.As(err, &opErr): true, opErr.Op: "dial"
pool: 0 item(s); 3 idle client(s) failed their redial and were destroyed; leases that waited: 0

--- 4. The server is back ---
server: listening again on the same address
request "back 1": reply "conn 7: BACK 1"
request "back 2": reply "conn 7: BACK 2"
request "back 3": reply "conn 7: BACK 3"
dials since the restart: 1

--- 5. A pool that starts while the server is down ---
server: stopped
New returned: 0 of MinSize 2 connections
server: listening again
the floor is there: 2 idle connections, dialed in the background; refused dials were retried

--- Close ---
server connections open: 0
stats: 21 leases, 4 created, 4 destroyed, 3 failed preparation
`

func TestRunPrintsTheGoldenTour(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the golden text has the Unix message for a refused connection")
	}
	var buf bytes.Buffer
	require.NoError(t, run(&buf))
	assert.Equal(t, golden, buf.String())
}

// TestRunKeyFacts checks the facts each phase is there to show, so that a
// change to the golden text cannot quietly drop one of them.
func TestRunKeyFacts(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, run(&buf))
	sections := strings.SplitAfter(buf.String(), "\n\n")
	require.Len(t, sections, 6, "one paragraph per phase, and Close")

	for _, tc := range []struct {
		section int
		name    string
		facts   []string
	}{
		{0, "connections are reused", []string{
			`request "hello 3": reply "conn 1: HELLO 3"`,
			`"conn 1: AT ONCE 1", "conn 2: AT ONCE 2", "conn 3: AT ONCE 3"`,
			"all on conn 1, 2 or 3: true; new dials: 0\n",
			"dials: 3, server connections open: 3\n",
		}},
		{1, "dropped connections are redialed without an error", []string{
			"server: closed 3 idle connection(s), 0 open\n",
			`"conn 4: AFTER THE DROP 1", "conn 5: AFTER THE DROP 2", "conn 6: AFTER THE DROP 3"`,
			"the Preparer found 3 closed connection(s)",
			"items created 0, destroyed 0",
		}},
		{2, "with the server down leases fail with the dial error", []string{
			`lease 1: pool "lines": create item: dial tcp <addr>: `,
			`lease 3: pool "lines": create item: dial tcp <addr>: `,
			"errors.Is(err, syscall.ECONNREFUSED): true\n",
			`errors.As(err, &opErr): true, opErr.Op: "dial"`,
			"pool: 0 item(s); 3 idle client(s) failed their redial",
			"leases that waited: 0\n",
		}},
		{3, "the pool recovers when the server is back", []string{
			`request "back 1": reply "conn 7: BACK 1"`,
			`request "back 3": reply "conn 7: BACK 3"`,
			"dials since the restart: 1\n",
		}},
		{4, "a pool with SeedInBackground starts while the server is down and fills its floor later", []string{
			"New returned: 0 of MinSize 2 connections\n",
			"the floor is there: 2 idle connections, dialed in the background",
		}},
		{5, "Close closes every connection", []string{
			"server connections open: 0\n",
			"4 created, 4 destroyed",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range tc.facts {
				assert.Contains(t, sections[tc.section], f)
			}
		})
	}
	assert.NotContains(t, buf.String(), "127.0.0.1", "the output names no address")
}
