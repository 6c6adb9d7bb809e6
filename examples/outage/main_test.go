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

// TestRunShowsTheOutage runs the program and checks the facts each phase is
// there to show. Its timings vary, so it checks no durations: run itself
// fails when one is clearly off (a lease failed fast without
// ErrBackendDown, too many dials at once, no recovery within 5 s).
func TestRunShowsTheOutage(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, run(&buf), "the output:\n%s", buf.String())
	out := buf.String()
	sections := strings.SplitAfter(out, "\n\n")
	require.Len(t, sections, 3, "one paragraph per phase")

	for _, tc := range []struct {
		section int
		name    string
		facts   []string
	}{
		{0, "with FailFastAfter leases fail fast with ErrBackendDown and the dial error", []string{
			"FailFastAfter 3:\n",
			"then 20 leases at once: 20 failed",
			"errors.Is(err, pool.ErrBackendDown): 20 of 20; errors.Is(err, syscall.ECONNREFUSED): 20 of 20\n",
			"FailFastAfter 0:\n",
			"errors.Is(err, pool.ErrBackendDown): 0 of 20; errors.Is(err, syscall.ECONNREFUSED): 20 of 20\n",
		}},
		{1, "MaxConcurrentCreates bounds the dials in flight", []string{
			"MaxConcurrentCreates 0: 50 of 50 leases served",
			"MaxConcurrentCreates 4: 50 of 50 leases served",
		}},
		{2, "the pool comes back after the restart", []string{
			"BackendDown: true\n",
			"first successful lease at T+",
			"BackendDown: false\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range tc.facts {
				assert.Contains(t, sections[tc.section], f)
			}
		})
	}
	assert.NotContains(t, out, "UNEXPECTED")
	assert.NotContains(t, out, "127.0.0.1", "the output names no address")
}
