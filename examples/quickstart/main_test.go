package main

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// golden is the program's complete output, the same on every run: it
// prints no address, port or timing. "quit" makes the server hang up, so
// that lease reads EOF and discards its connection, and the next lease
// dials a second one.
const golden = `hello -> "HELLO", error: <nil>
world -> "WORLD", error: <nil>
quit -> "", error: pool: item broken: EOF
again -> "AGAIN", error: <nil>
4 leases, 2 connections dialed, 2 closed
`

func TestMainPrintsTheGoldenOutput(t *testing.T) {
	assert.Equal(t, golden, captureStdout(t, main))
}

// captureStdout runs f with os.Stdout going to a pipe, and returns what f
// wrote there.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = stdout }()

	var out bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(&out, r)
		copied <- err
	}()
	f()
	require.NoError(t, w.Close())
	require.NoError(t, <-copied)
	require.NoError(t, r.Close())
	return out.String()
}
