package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// golden is the demo's complete output. It is the same on every run: the
// concurrent section prints only facts that hold whatever the scheduling,
// and the lease timeout's measured wait is printed as <wait>.
const golden = `--- 6 sequential borrowers, pool of 3 ---
borrower 1 got connection #1
borrower 2 got connection #1
borrower 3 got connection #1
borrower 4 got connection #1
borrower 5 got connection #1
borrower 6 got connection #1
opened: 1 (each borrower reused the one the previous gave back)

--- 8 goroutines x 25 leases, pool of 3 ---
leases made: 200
connections opened <= 3: true
peak held at once <= 3: true
a connection held by two borrowers at once: false
active leases now: 0

--- a stale idle connection, pool of 1 ---
lease 1 (a fresh connection is always checked):
  IsReady(#1): true
  got connection #1
the server drops connection #1 while it is idle
lease 2:
  IsReady(#1): false, the server dropped it
  Prepare(#1): reconnected
  got connection #1, reconnected 1 time(s), not replaced
opened: 1

--- a bounded wait: pool of 2, both leased, LeaseTimeout 50ms ---
borrowers A and B hold connections #1 and #2
borrower C waits, then gives up:
  pool: lease timeout: pool "Conn.Pool": every item stayed in use (MaxSize 2) for <wait>; 0 leases waiting, 0 items being created, 0 being destroyed
  errors.Is(err, pool.ErrLeaseTimeout): true
A releases #1
borrower C tries again and gets #1 at once

--- a double release, pool of 2 ---
leased #1, released it twice
  ActiveLeases 0, idle 1
X leases #1; the old handle is released once more: ActiveLeases still 1
Y leases #2 (the same connection as X: false)

--- Close, pool of 3 ---
opened: 3, idle: 2, leased: 1
after Close: closed 2 idle connection(s)
Lease after Close: pool: closed: pool "Conn.Pool"
  errors.Is(err, pool.ErrClosed): true
the leased one is closed when it comes back: closed 3 of 3
`

func TestRunPrintsTheGoldenTour(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, run(&buf))
	assert.Equal(t, golden, buf.String())
}

// TestRunKeyFacts checks the facts each section is there to show, so that a
// change to the golden text cannot quietly drop one of them.
func TestRunKeyFacts(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, run(&buf))
	out := buf.String()
	sections := strings.SplitAfter(out, "\n\n")
	require.Len(t, sections, 6, "one paragraph per section")

	for _, tc := range []struct {
		section int
		name    string
		facts   []string
	}{
		{0, "sequential borrowers reuse one connection", []string{
			"--- 6 sequential borrowers, pool of 3 ---",
			"borrower 6 got connection #1\n",
			"opened: 1 ",
		}},
		{1, "concurrent borrowers stay within the cap", []string{
			"leases made: 200\n",
			"connections opened <= 3: true\n",
			"peak held at once <= 3: true\n",
			"a connection held by two borrowers at once: false\n",
			"active leases now: 0\n",
		}},
		{2, "a stale idle connection is reconnected", []string{
			"IsReady(#1): false",
			"Prepare(#1): reconnected",
			"got connection #1, reconnected 1 time(s), not replaced",
			"opened: 1\n",
		}},
		{3, "a bounded wait times out, then succeeds after a release", []string{
			`pool: lease timeout: pool "Conn.Pool": every item stayed in use (MaxSize 2) for <wait>; 0 leases waiting, 0 items being created, 0 being destroyed`,
			"errors.Is(err, pool.ErrLeaseTimeout): true",
			"borrower C tries again and gets #1 at once",
		}},
		{4, "a double release is defused", []string{
			"ActiveLeases 0, idle 1\n",
			"ActiveLeases still 1\n",
			"X leases #1",
			"Y leases #2 (the same connection as X: false)",
		}},
		{5, "Close refuses leases and closes connections", []string{
			"after Close: closed 2 idle connection(s)",
			"Lease after Close: pool: closed: pool \"Conn.Pool\"\n",
			"errors.Is(err, pool.ErrClosed): true",
			"closed 3 of 3\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range tc.facts {
				assert.Contains(t, sections[tc.section], f)
			}
		})
	}
}
