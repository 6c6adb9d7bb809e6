// Command rounds summarises the output of bench/rounds.sh: for each build
// and benchmark, the median and the range over the rounds of ns/op,
// waits/lease, the wait's p50 and p99.9 (Overload and ReleaseThenWork),
// ReleaseThenWork's cycle p99.9, and Overload's leases/s.
//
//	go run ./cmd/rounds RAW
//
// Each line of RAW is a build's name, then a line of go test -bench output.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// metrics are the units summarised, in the order printed.
var metrics = []string{"ns/op", "waits/lease", "p50-ns", "p99.9-ns", "cycle-p99.9-ns", "leases/s"}

// row is one build's runs of one benchmark: per unit, a value per run.
type row struct {
	build, bench string
	vals         map[string][]float64
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: rounds RAW")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	rows, err := parse(f)
	if err == nil {
		err = write(os.Stdout, rows)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// parse reads "BUILD BenchmarkNAME N VALUE UNIT VALUE UNIT..." lines.
func parse(r io.Reader) ([]*row, error) {
	var rows []*row
	index := map[[2]string]*row{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 5 || !strings.HasPrefix(f[1], "Benchmark") {
			return nil, fmt.Errorf("line %d: want BUILD BenchmarkNAME N VALUE UNIT..., got %q", n, sc.Text())
		}
		k := [2]string{f[0], f[1]}
		rw := index[k]
		if rw == nil {
			rw = &row{build: f[0], bench: f[1], vals: map[string][]float64{}}
			index[k] = rw
			rows = append(rows, rw)
		}
		for i := 3; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q is not a number", n, f[i])
			}
			rw.vals[f[i+1]] = append(rw.vals[f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// Benchmarks together, builds in the order first seen within each.
	slices.SortStableFunc(rows, func(a, b *row) int { return strings.Compare(a.bench, b.bench) })
	return rows, nil
}

// write prints a line per row: each unit's median and, in brackets, the
// fastest and slowest run.
func write(w io.Writer, rows []*row) error {
	for _, rw := range rows {
		var b strings.Builder
		fmt.Fprintf(&b, "%-40s %-8s", rw.bench, rw.build)
		for _, m := range metrics {
			xs := rw.vals[m]
			if len(xs) == 0 {
				continue
			}
			s := slices.Sorted(slices.Values(xs))
			fmt.Fprintf(&b, "  %s %s [%s..%s]", m, num(median(s)), num(s[0]), num(s[len(s)-1]))
		}
		if _, err := fmt.Fprintln(w, b.String()); err != nil {
			return err
		}
	}
	return nil
}

// median of sorted, not empty, xs.
func median(xs []float64) float64 {
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}

// num formats v with four significant digits.
func num(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
