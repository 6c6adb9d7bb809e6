package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sample = `base BenchmarkContended/pool=msl 100 80.0 ns/op 0.25 waits/lease 0 B/op
base BenchmarkContended/pool=msl 100 100.0 ns/op 0.35 waits/lease 0 B/op
spin BenchmarkContended/pool=msl 100 500.0 ns/op 0.98 waits/lease 0 B/op
base BenchmarkOverload/pool=msl-2 64000 10500 ns/op 95000 leases/s 480000 p50-ns 900000 p99.9-ns
base BenchmarkContended/pool=msl 100 90.0 ns/op 0.30 waits/lease 0 B/op
base BenchmarkReleaseThenWork/pool=msl-2 16000 12000 ns/op 4000000 cycle-p99.9-ns 140000 p50-ns 300000 p99.9-ns 2 B/op
base BenchmarkReleaseThenWork/pool=msl-2 16000 13000 ns/op 6000000 cycle-p99.9-ns 150000 p50-ns 500000 p99.9-ns 2 B/op
`

func TestRounds(t *testing.T) {
	rows, err := parse(strings.NewReader(sample))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, write(&buf, rows))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4)
	assert.Contains(t, lines[0], "base")
	assert.Contains(t, lines[0], "ns/op 90 [80..100]  waits/lease 0.3 [0.25..0.35]", "the median of three, and the range")
	assert.Contains(t, lines[1], "spin")
	assert.Contains(t, lines[2], "p50-ns 4.8e+05 [4.8e+05..4.8e+05]  p99.9-ns 9e+05")
	assert.Contains(t, lines[3], "BenchmarkReleaseThenWork/pool=msl-2")
	assert.Contains(t, lines[3], "ns/op 1.25e+04 [1.2e+04..1.3e+04]  p50-ns 1.45e+05 [1.4e+05..1.5e+05]  p99.9-ns 4e+05 [3e+05..5e+05]  cycle-p99.9-ns 5e+06 [4e+06..6e+06]", "the wait's and the cycle's medians")
	assert.NotContains(t, buf.String(), "B/op", "units that are not summarised")
}

func TestRoundsRefusesBrokenLines(t *testing.T) {
	_, err := parse(strings.NewReader("base BenchmarkX 1 abc ns/op\n"))
	assert.Error(t, err)
	_, err = parse(strings.NewReader("just words\n"))
	assert.Error(t, err)
}
