package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// golden is the program's complete output, but for the line of main.go
// that takes the leases, written LINE here: the same on every run, since
// the durations measured are printed as <wait> and <age>, each checked
// against the setting it must exceed.
const golden = `--- 2 requests hang, each holding a connection (MaxSize 2) ---
request 3: pool: lease timeout: pool "db": every item stayed in use (MaxSize 2) for <wait>; 0 leases waiting, 0 items being created, 0 being destroyed
  errors.Is(err, pool.ErrLeaseTimeout): true

1. Stats: 2 of 2 items in use, 0 lease(s) waiting, 1 timed out, 0 leaked, 0 held too long so far

2. Outstanding: 2 lease(s) out, oldest first
  taken at handle (main.go:LINE), out for <age> (longer than LeaseTimeout: true)
  taken at handle (main.go:LINE), out for <age> (longer than LeaseTimeout: true)

3. LeakThreshold (200ms): each lease held longer is reported once
  OnLeak: pool "db", Held true, taken at handle (main.go:LINE), out for <age> (at least LeakThreshold: true)
  OnLeak: pool "db", Held true, taken at handle (main.go:LINE), out for <age> (at least LeakThreshold: true)
  log: level=WARN msg="pool: a lease has been held longer than LeakThreshold" pool.name=db age="<age> (at least LeakThreshold: true)" stack="handle (main.go:LINE)"
  log: level=WARN msg="pool: a lease has been held longer than LeakThreshold" pool.name=db age="<age> (at least LeakThreshold: true)" stack="handle (main.go:LINE)"
  Stats: 2 held too long

--- the backend answers: the handlers end their leases ---
  log: level=INFO msg="pool: a lease reported as held past LeakThreshold has ended" pool.name=db age="<age> (at least LeakThreshold: true)"
  log: level=INFO msg="pool: a lease reported as held past LeakThreshold has ended" pool.name=db age="<age> (at least LeakThreshold: true)"
Outstanding: 0 lease(s) out; Stats: 2 held too long, 2 items idle
`

// leaseLine returns the line of main.go that handle leases on: the one
// every report must point at.
func leaseLine(t *testing.T) int {
	t.Helper()
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, "p.Lease(ctx) // the line the pool's reports point at") {
			return i + 1
		}
	}
	t.Fatal("no Lease call in handle")
	return 0
}

func TestRunPrintsTheStory(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, run(&buf))
	want := strings.ReplaceAll(golden, "LINE", fmt.Sprint(leaseLine(t)))
	assert.Equal(t, want, buf.String())
}
