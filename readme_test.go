package pool_test

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var rmUpdate = flag.Bool("update-readme", false, "TestReadmeQuickStart: write examples/quickstart/main.go into README.md instead of comparing")

// The README prints examples/quickstart/main.go, which CI runs, between
// these markers, as a go code block.
const (
	rmBegin = "<!-- quickstart:begin -->\n```go\n"
	rmEnd   = "```\n<!-- quickstart:end -->\n"
)

// TestReadmeQuickStart fails when the README's quick start and the program
// CI runs differ by a byte. Fix it with
//
//	go test -run '^TestReadmeQuickStart$' -update-readme .
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	prog, err := os.ReadFile("examples/quickstart/main.go")
	require.NoError(t, err)

	require.Equal(t, 1, bytes.Count(readme, []byte(rmBegin)), "README.md must hold the begin marker once, followed by a go code block:\n%s", rmBegin)
	require.Equal(t, 1, bytes.Count(readme, []byte(rmEnd)), "README.md must hold the end marker once, after the code block:\n%s", rmEnd)
	before, rest, _ := bytes.Cut(readme, []byte(rmBegin))
	block, after, found := bytes.Cut(rest, []byte(rmEnd))
	require.True(t, found, "README.md's end marker must come after its begin marker")

	if *rmUpdate {
		var b bytes.Buffer
		b.Write(before)
		b.WriteString(rmBegin)
		b.Write(prog)
		b.WriteString(rmEnd)
		b.Write(after)
		require.NoError(t, os.WriteFile("README.md", b.Bytes(), 0o644))
		return
	}
	assert.Equal(t, string(prog), string(block),
		"README.md's quick start differs from examples/quickstart/main.go; copy it with\n\tgo test -run '^TestReadmeQuickStart$' -update-readme .")
}
